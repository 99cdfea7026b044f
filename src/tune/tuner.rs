//! `Tuner`: runs a sweep whose trials are full `TorchTrainer` runs, on the process's shared
//! driver (one runtime, one pool), and carries out the controller's commands.
//!
//! The shell is thin: trials run as tasks; each report of a trial is handed to the controller
//! (behind one lock, for the moment it takes) and its decision goes back to the workers in the
//! reply to that report; commands about other trials come back to the shell loop through a
//! channel.
//!
//! The experiment directory holds `tuner.json` (the settings, written once) and
//! `experiment_state.json` (every trial's status and the controller's snapshot, replaced
//! atomically after changes, throttled). `Tuner::restore` goes on from them and from the
//! trials' own files, which are the record of their results. A paused trial (HyperBand) goes
//! on the same way, in its own directory from its latest checkpoint; a trial that exploits
//! another (PBT) is paused, takes over the source's latest checkpoint into its own directory,
//! and goes on from it with its new params.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtune_searchers::{
    BasicVariant, Fifo, Metrics, Mode, Params, SearchSpace, Searcher, TrialId, TrialScheduler,
    TrialStatus, Value,
};

use tokio::sync::mpsc;
use tracing::Instrument;

use super::controller::{Command, Controller, ControllerConfig, Event, Reported};
use super::experiment::{
    EndedRows, FORMAT, SETTINGS_FILE, SavedExperiment, SavedTrialRow, Settings, holds_experiment,
    read_experiment, read_trial,
};
use super::result_grid::{RESULTS_PARQUET, ResultGrid};
use super::trial::TrialResult;
use crate::callback::{Callback, TrialInfo};
use crate::cluster::pool::PoolStatus;
use crate::config::RunConfig;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::outcome::TrainResult;
use crate::storage::unix_time;
use crate::train::{DATASETS_DIR, TorchTrainer, read_run};

/// How a sweep searches (Ray's `TuneConfig`).
#[derive(Default)]
pub struct TuneConfig {
    pub metric: Option<String>,
    pub mode: Option<Mode>,
    /// Trials to run; -1 runs until the searcher has nothing more or the time budget ends.
    /// With the default searcher it is Ray's: the grid is walked this many times.
    pub num_samples: i64,
    pub search_alg: Option<Box<dyn Searcher>>,
    pub scheduler: Option<Box<dyn TrialScheduler>>,
    /// Trials started at once; default: as many as the local machine holds side by side.
    pub max_concurrent_trials: Option<usize>,
    pub time_budget_s: Option<f64>,
    /// Seeds the default searcher's sampling. An explicit `search_alg` keeps its own seed: set
    /// it on the searcher (`Tpe::new(space)?.seed(7)`), as Ray's search algorithms take theirs.
    pub seed: u64,
    /// End the sweep at the first trial that fails for good.
    pub fail_fast: bool,
    /// Start trials' workers warm (Ray's `reuse_actors`, on by default): forked from the
    /// driver's fork server, which has the binary and libtorch loaded, instead of a fresh exec
    /// each. Every trial still gets new processes, so nothing of one trial (params, seeds,
    /// libtorch threads, working directory, environment) reaches the next.
    pub reuse_actors: bool,
}

impl std::fmt::Debug for TuneConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TuneConfig")
            .field("metric", &self.metric)
            .field("mode", &self.mode)
            .field("num_samples", &self.num_samples)
            .field("max_concurrent_trials", &self.max_concurrent_trials)
            .field("time_budget_s", &self.time_budget_s)
            .finish_non_exhaustive()
    }
}

impl TuneConfig {
    pub fn new() -> Self {
        TuneConfig { num_samples: 1, reuse_actors: true, ..TuneConfig::default() }
    }

    pub fn metric(mut self, metric: impl Into<String>) -> Self {
        self.metric = Some(metric.into());
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    pub fn num_samples(mut self, n: i64) -> Self {
        self.num_samples = n;
        self
    }

    pub fn search_alg(mut self, searcher: impl Searcher + 'static) -> Self {
        self.search_alg = Some(Box::new(searcher));
        self
    }

    pub fn scheduler(mut self, scheduler: impl TrialScheduler + 'static) -> Self {
        self.scheduler = Some(Box::new(scheduler));
        self
    }

    pub fn max_concurrent_trials(mut self, n: usize) -> Self {
        self.max_concurrent_trials = Some(n);
        self
    }

    pub fn time_budget_s(mut self, seconds: f64) -> Self {
        self.time_budget_s = Some(seconds);
        self
    }

    /// See [`TuneConfig::seed`](#structfield.seed): the default searcher's seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn fail_fast(mut self, on: bool) -> Self {
        self.fail_fast = on;
        self
    }

    pub fn reuse_actors(mut self, on: bool) -> Self {
        self.reuse_actors = on;
        self
    }
}

/// A sweep: a trainer, a search space, and how to search it (Ray's `Tuner`).
#[derive(Debug)]
pub struct Tuner {
    trainer: TorchTrainer,
    space: SearchSpace,
    tune: Option<TuneConfig>,
    run: Option<RunConfig>,
    /// Set by `Tuner::restore`: the experiment to go on with, and its settings.
    restoring: Option<(PathBuf, Settings)>,
    control: Control,
}

/// A handle to a running sweep, for a signal handler or a UI: clone it before handing it to
/// the tuner ([`Tuner::control`]) and keep the clone.
///
/// * [`interrupt`](Control::interrupt) stops the sweep where it is and leaves it resumable
///   (Ray's Ctrl-C in `Tuner.fit`): the experiment's state is saved as it is, the running trials
///   are stopped (their latest checkpoints kept) and nothing new starts; `fit` then returns
///   `Error::Interrupted` and `Tuner::restore` goes on with the trials as they were.
/// * [`stop_trial`](Control::stop_trial) ends one trial as a scheduler would (TERMINATED, its
///   results and checkpoints kept); the sweep goes on.
/// * [`pause_trial`](Control::pause_trial) holds one trial: a running one is paused (from its
///   latest checkpoint, PAUSED) and no held trial starts until
///   [`resume_trial`](Control::resume_trial). While only held trials are left the sweep waits.
///   Holds are not saved: a restored sweep runs every trial.
#[derive(Clone, Default, Debug)]
pub struct Control(Arc<ControlState>);

#[derive(Default, Debug)]
struct ControlState {
    asked: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
    /// Requests about single trials (by id), not yet handed to the sweep.
    requests: Mutex<Vec<(TrialRequest, String)>>,
    requests_notify: tokio::sync::Notify,
}

/// What [`Control`] may ask about one trial.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TrialRequest {
    Stop,
    Pause,
    Resume,
}

impl TrialRequest {
    fn verb(self) -> &'static str {
        match self {
            TrialRequest::Stop => "stop",
            TrialRequest::Pause => "pause",
            TrialRequest::Resume => "resume",
        }
    }
}

impl Control {
    pub fn new() -> Self {
        Control::default()
    }

    /// Asks the sweep to stop; it returns once its running trials have stopped.
    pub fn interrupt(&self) {
        self.0.asked.store(true, Ordering::SeqCst);
        self.0.notify.notify_one();
    }

    pub fn is_interrupted(&self) -> bool {
        self.0.asked.load(Ordering::SeqCst)
    }

    /// Asks the sweep to end trial `trial_id` (e.g. `"a1b2c_00003"`); an id the sweep does not
    /// have, or a trial already ended, is ignored (with a warning in the log).
    pub fn stop_trial(&self, trial_id: &str) {
        self.ask(TrialRequest::Stop, trial_id);
    }

    /// Asks the sweep to hold trial `trial_id` (see the type's docs).
    pub fn pause_trial(&self, trial_id: &str) {
        self.ask(TrialRequest::Pause, trial_id);
    }

    /// Asks the sweep to let a held trial run again.
    pub fn resume_trial(&self, trial_id: &str) {
        self.ask(TrialRequest::Resume, trial_id);
    }

    fn ask(&self, request: TrialRequest, trial_id: &str) {
        let mut requests = self.0.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.push((request, trial_id.to_owned()));
        self.0.requests_notify.notify_one();
    }

    async fn wait(&self) {
        while !self.is_interrupted() {
            self.0.notify.notified().await;
        }
    }

    /// The requests about single trials since the last call, once there are some.
    async fn trial_requests(&self) -> Vec<(TrialRequest, String)> {
        loop {
            let asked =
                std::mem::take(&mut *self.0.requests.lock().unwrap_or_else(|p| p.into_inner()));
            if !asked.is_empty() {
                return asked;
            }
            self.0.requests_notify.notified().await;
        }
    }
}

impl Tuner {
    /// A sweep of `trainer` over `space`. Each trial's sampled params are merged into the
    /// trainer's `train_loop_config`, top-level key by key; sampled values win.
    pub fn new(trainer: TorchTrainer, space: SearchSpace) -> Self {
        Tuner { trainer, space, tune: None, run: None, restoring: None, control: Control::new() }
    }

    /// Whether `path` holds an experiment that `Tuner::restore` can go on with.
    pub fn can_restore(path: impl AsRef<Path>) -> bool {
        let path = path.as_ref();
        Settings::read(path).is_ok() && SavedExperiment::read(path).is_ok()
    }

    /// Goes on with the experiment in `path`, interrupted (its driver killed, the machine
    /// rebooted) or finished: `fit` keeps the finished trials' results, continues the trials
    /// that were running from their latest checkpoints, and creates the rest, so that the sweep
    /// ends with the trials it was set up for. The search space and the `TuneConfig`'s settings
    /// come from the experiment; a sweep that used its own searcher or scheduler must be given
    /// the same ones again with `tune_config` (they are checked against the saved state).
    /// `run_config` may be given again (failure and checkpoint settings); its name and storage
    /// path are the experiment's.
    pub fn restore(path: impl AsRef<Path>, trainer: TorchTrainer) -> Result<Tuner> {
        let path = path.as_ref().to_owned();
        let settings = Settings::read(&path)?;
        SavedExperiment::read(&path)?;
        let space = settings.param_space.clone();
        Ok(Tuner {
            trainer,
            space,
            tune: None,
            run: None,
            restoring: Some((path, settings)),
            control: Control::new(),
        })
    }

    pub fn tune_config(mut self, config: TuneConfig) -> Self {
        self.tune = Some(config);
        self
    }

    /// Overrides the trainer's `RunConfig` (Ray: the Tuner's wins): its name and storage path
    /// are the experiment's; failure, checkpoint and stop settings apply to every trial.
    pub fn run_config(mut self, run: RunConfig) -> Self {
        self.run = Some(run);
        self
    }

    /// The handle that interrupts this sweep, or stops, pauses or resumes one of its trials
    /// (see [`Control`]).
    pub fn control(mut self, control: Control) -> Self {
        self.control = control;
        self
    }

    /// Runs the sweep to its end. Mistakes in the settings fail before any trial starts.
    pub fn fit(self) -> Result<ResultGrid> {
        let driver = Driver::get()?;
        let mut sweep = self.prepare(driver)?;
        driver.block_on(sweep.run(driver))
    }

    fn prepare(self, driver: &'static Driver) -> Result<Sweep> {
        let Tuner { trainer, space, tune, run, restoring, control } = self;
        let mut run = run.unwrap_or_else(|| trainer.run().clone());
        if let Some((path, _)) = &restoring {
            run.name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            run.storage_path = path.parent().map(Path::to_owned);
        }
        run.validate()?;
        trainer.validate()?;
        // A trial bigger than the machine or the cluster, or asking for GPUs its workers could
        // not use, could never start: say so before any does.
        let cluster = match run.resolved_cluster() {
            None => {
                driver.check_local(trainer.scaling_config())?;
                None
            }
            Some((address, token)) => {
                let status = cluster_status(driver, &address, token.as_deref());
                if let Some(status) = &status {
                    crate::cluster::check_fits_cluster(status, trainer.scaling_config())?;
                }
                Some(status)
            }
        };
        let tune = match (&restoring, tune) {
            (None, tune) => tune.unwrap_or_else(TuneConfig::new),
            (Some((_, saved)), Some(tune)) => {
                saved.check_same(&tune)?;
                tune
            }
            (Some((_, saved)), None) => saved.tune_config()?,
        };
        let metric = match (&tune.metric, tune.mode) {
            (Some(m), Some(mode)) => Some((m.clone(), mode)),
            (None, None) => None,
            (Some(m), None) => {
                return Err(Error::config(
                    "TuneConfig.mode",
                    format!("is missing for metric `{m}`; use Mode::Max or Mode::Min"),
                ));
            }
            (None, Some(_)) => {
                return Err(Error::config("TuneConfig.metric", "is missing for the mode given"));
            }
        };
        let num_samples = match tune.num_samples {
            -1 => None,
            n if n >= 1 => Some(n as u64),
            n => {
                return Err(Error::config(
                    "TuneConfig.num_samples",
                    format!("is {n}; use at least 1, or -1 to run until the searcher is done"),
                ));
            }
        };
        let (searcher, trial_limit): (Box<dyn Searcher>, Option<usize>) = match tune.search_alg {
            Some(searcher) => (searcher, num_samples.map(|n| n as usize)),
            None => {
                let basic = BasicVariant::new(space.clone())?
                    .num_samples(num_samples.unwrap_or(u64::MAX))
                    .seed(tune.seed);
                (Box::new(basic), None)
            }
        };
        let scheduler = tune.scheduler.unwrap_or_else(|| Box::new(Fifo::new()));
        if let Some(budget) = tune.time_budget_s
            && !(budget.is_finite() && budget > 0.0)
        {
            return Err(Error::config(
                "TuneConfig.time_budget_s",
                format!("is {budget}; use a positive number of seconds"),
            ));
        }
        let max_concurrent_trials = match tune.max_concurrent_trials {
            Some(n) => n,
            None => side_by_side(&trainer, cluster.as_ref()),
        };
        let config = ControllerConfig {
            metric: metric.clone(),
            num_samples: trial_limit,
            max_concurrent_trials,
            fail_fast: tune.fail_fast,
        };
        let settings = Settings {
            format: FORMAT,
            rtune_version: env!("CARGO_PKG_VERSION").to_owned(),
            experiment_id: String::new(),
            param_space: space,
            metric: tune.metric.clone(),
            mode: tune.mode,
            num_samples: tune.num_samples,
            max_concurrent_trials: tune.max_concurrent_trials,
            time_budget_s: tune.time_budget_s,
            seed: tune.seed,
            fail_fast: tune.fail_fast,
            reuse_actors: tune.reuse_actors,
            search_alg: searcher.save_state().kind().to_owned(),
            scheduler: scheduler.save_state().kind().to_owned(),
        };
        // The datasets are read and the preprocessor fitted once, for every trial.
        let path = match &restoring {
            Some((path, _)) => path.clone(),
            None => new_experiment_path(&run)?,
        };
        let trainer = trainer.prepare_data(&path.join(DATASETS_DIR))?;
        let (path, experiment, spent_before, trials, ended, controller) = match restoring {
            None => {
                let controller = Controller::new(config, searcher, scheduler)?;
                let experiment = make_experiment(&path, settings)?;
                let ended = EndedRows::new(&path)?;
                (path, experiment, Duration::ZERO, BTreeMap::new(), ended, controller)
            }
            Some((path, _)) => {
                config.validate()?;
                let mut picked = pick_up(&path, &run)?;
                let state = picked.saved.controller;
                let controller = Controller::restore(config, searcher, scheduler, state, |id| {
                    Ok(Reported::of(picked.histories.remove(&id).unwrap_or_default()))
                })?;
                let spent = Duration::from_secs_f64(picked.saved.time_spent_s.max(0.0));
                let experiment = picked.saved.experiment_id;
                (path, experiment, spent, picked.trials, picked.ended, controller)
            }
        };
        Ok(Sweep {
            trainer: trainer.warm_start(tune.reuse_actors),
            run,
            path,
            experiment,
            metric,
            time_budget: tune.time_budget_s.map(Duration::from_secs_f64),
            spent_before,
            began: Instant::now(),
            controller: Arc::new(Mutex::new(controller)),
            trials,
            snapshots: Snapshots::new(),
            reports_unsaved: Arc::new(AtomicBool::new(false)),
            ended,
            control,
            frozen: false,
            status_checked: None,
            shown_status: None,
        })
    }
}

/// Where `run`'s new experiment goes: an error when that already holds one.
fn new_experiment_path(run: &RunConfig) -> Result<PathBuf> {
    let storage = run.resolved_storage_path();
    let name = run.name.clone().unwrap_or_else(|| format!("TorchTrainer_{}", date()));
    let path = storage.join(&name);
    if holds_experiment(&path) {
        return Err(Error::config(
            "RunConfig.name",
            format!(
                "{} already holds an experiment; pick another name, or go on with it with \
                 Tuner::restore",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// The new experiment directory `path`, with the sweep's settings in `tuner.json`; its
/// experiment id.
fn make_experiment(path: &Path, mut settings: Settings) -> Result<String> {
    crate::storage::ensure_writable_dir(path).map_err(|e| {
        Error::config("RunConfig.storage_path", format!("cannot write the experiment: {e}"))
    })?;
    let experiment = format!("{:05x}", rand::random::<u32>() & 0xfffff);
    settings.experiment_id = experiment.clone();
    let text = serde_json::to_vec_pretty(&settings).expect("the settings serialise");
    crate::storage::atomic_write(&path.join(SETTINGS_FILE), &text)?;
    Ok(experiment)
}

/// An interrupted experiment as its files hold it.
struct PickedUp {
    /// Its state, without its trials (they are in `trials` and `ended`).
    saved: SavedExperiment,
    /// The trials not ended.
    trials: BTreeMap<TrialId, TrialResult>,
    /// Each of those trials' results, up to where it goes on from.
    histories: BTreeMap<TrialId, Vec<Metrics>>,
    ended: EndedRows,
}

/// Reads the experiment in `path` back to go on with it: finished trials as their rows (their
/// files are read when the sweep's `ResultGrid` is), the others paused at their latest
/// checkpoints (the results after it are redone). Directories of trials started after the
/// state snapshot (the controller does not know them; they are created again) are removed, so
/// that every trial is in the experiment once.
fn pick_up(path: &Path, run: &RunConfig) -> Result<PickedUp> {
    let mut saved = SavedExperiment::read(path)?;
    let known: Vec<&str> = saved.trials.iter().map(|t| t.dir.as_str()).collect();
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let trial_dir = entry.path().is_dir() && name.starts_with(TRIAL_DIR_PREFIX);
        if trial_dir && !known.contains(&name.as_str()) {
            tracing::info!("{name} started after the last state snapshot; it runs again");
            std::fs::remove_dir_all(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
        }
    }
    let mut ended = EndedRows::new(path)?;
    let (mut trials, mut histories) = (BTreeMap::new(), BTreeMap::new());
    for row in std::mem::take(&mut saved.trials) {
        if row.status.is_finished() {
            ended.push(&row).map_err(|e| Error::io(path, e))?;
            continue;
        }
        let mut trial = read_trial(path, &row, run, true)?;
        trial.status = TrialStatus::Paused;
        histories.insert(row.index, trial.history().to_vec());
        trials.insert(row.index, trial);
    }
    Ok(PickedUp { saved, trials, histories, ended })
}

impl Settings {
    /// The `TuneConfig` the sweep ran with, where it can be rebuilt from the settings alone.
    fn tune_config(&self) -> Result<TuneConfig> {
        if self.search_alg != "basic_variant" || self.scheduler != "fifo" {
            return Err(Error::config(
                "Tuner::restore",
                format!(
                    "the experiment ran with search_alg `{}` and scheduler `{}`, whose settings \
                     are code, not data: pass the same TuneConfig again with .tune_config(..)",
                    self.search_alg, self.scheduler
                ),
            ));
        }
        Ok(TuneConfig {
            metric: self.metric.clone(),
            mode: self.mode,
            num_samples: self.num_samples,
            search_alg: None,
            scheduler: None,
            max_concurrent_trials: self.max_concurrent_trials,
            time_budget_s: self.time_budget_s,
            seed: self.seed,
            fail_fast: self.fail_fast,
            reuse_actors: self.reuse_actors,
        })
    }

    /// A `TuneConfig` given again on restore must be the sweep's.
    fn check_same(&self, tune: &TuneConfig) -> Result<()> {
        let searcher = tune
            .search_alg
            .as_ref()
            .map_or("basic_variant".into(), |s| s.save_state().kind().into());
        let scheduler =
            tune.scheduler.as_ref().map_or("fifo".into(), |s| s.save_state().kind().into());
        let differences = [
            ("TuneConfig.metric", format!("{:?}", self.metric), format!("{:?}", tune.metric)),
            ("TuneConfig.mode", format!("{:?}", self.mode), format!("{:?}", tune.mode)),
            ("TuneConfig.num_samples", self.num_samples.to_string(), tune.num_samples.to_string()),
            ("TuneConfig.seed", self.seed.to_string(), tune.seed.to_string()),
            ("TuneConfig.scheduler", self.scheduler.clone(), scheduler),
            ("TuneConfig.search_alg", self.search_alg.clone(), searcher),
        ];
        match differences.into_iter().find(|(_, saved, given)| saved != given) {
            None => Ok(()),
            Some((field, saved, given)) => Err(Error::config(
                field,
                format!(
                    "is {given}, but the experiment being restored ran with {saved}; a \
                     restored sweep goes on with its own settings"
                ),
            )),
        }
    }
}

/// The status of the cluster at `address`; None (said in the log) when the head does not
/// answer: the sweep then finds out with its first trial.
fn cluster_status(driver: &Driver, address: &str, token: Option<&str>) -> Option<PoolStatus> {
    let status = driver.block_on(async {
        let mut client = crate::cluster::client::connect_head(address, token).await?;
        crate::cluster::client::status(&mut client).await
    });
    status
        .inspect_err(|e| {
            tracing::warn!(
                "cannot ask the head at {address} for its size ({e}): one trial at a time (set \
                 max_concurrent_trials)"
            )
        })
        .ok()
}

/// How many trials of `trainer` fit side by side (at least 1): in the CPUs of this machine, or
/// of the cluster's live nodes when the run has one (`cluster`: its status, None when the head
/// did not answer: one trial at a time).
fn side_by_side(trainer: &TorchTrainer, cluster: Option<&Option<PoolStatus>>) -> usize {
    let scaling = trainer.scaling_config();
    let per_trial = scaling.cpus_per_worker() * scaling.num_workers as f64;
    let cpus = match cluster {
        Some(Some(status)) => status.nodes.iter().filter(|n| n.alive).map(|n| n.total.cpu).sum(),
        Some(None) => 1.0,
        None => crate::cluster::local_node().map_or(1.0, |n| n.resources.cpu),
    };
    if per_trial > 0.0 { ((cpus / per_trial).floor() as usize).max(1) } else { 1 }
}

/// A trial as callbacks see it.
fn trial_info(t: &TrialResult) -> TrialInfo {
    TrialInfo {
        trial_id: t.trial_id.clone(),
        status: t.status,
        params: t.params.clone(),
        path: t.path.clone(),
    }
}

fn date() -> String {
    crate::storage::date_string(unix_time())
}

/// `lr=0.001,hidden=64`: a trial directory's short form of its params (Ray's naming).
fn short_params(params: &Params) -> String {
    let mut text: String = params
        .flatten()
        .iter()
        .map(|(k, v)| match v.as_f64() {
            Some(x) if v.as_i64().is_none() => {
                let tiny_or_huge = x != 0.0 && !(1e-3..1e5).contains(&x.abs());
                if tiny_or_huge { format!("{k}={x:.3e}") } else { format!("{k}={x:.4}") }
            }
            _ => match v {
                Value::Str(text) => format!("{k}={text}"),
                other => format!("{k}={other}"),
            },
        })
        .collect::<Vec<_>>()
        .join(",")
        .chars()
        .map(|c| if c.is_alphanumeric() || "=,._-".contains(c) { c } else { '_' })
        .collect();
    text.truncate(80);
    text
}

/// What the shell asks of a running trial, answered to its next report: go on, stop, or
/// pause (stop, to go on later from its latest checkpoint). The first request stands.
#[derive(Clone, Default)]
struct Halt(Arc<AtomicU8>);

impl Halt {
    const GO: u8 = 0;
    const STOP: u8 = 1;
    const PAUSE: u8 = 2;

    fn ask(&self, what: u8) {
        let _ = self.0.compare_exchange(Halt::GO, what, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst)
    }
}

/// How every trial directory's name begins (Ray's `<trainable>_`).
const TRIAL_DIR_PREFIX: &str = "TorchTrainer_";

/// The driver's log in the experiment directory (the same lines as on stderr).
pub const DRIVER_LOG: &str = "driver.log";

/// What the shell loop hears.
enum Heard {
    Command(Command),
    /// A trial's report was recorded (and went through the controller unless the trial was
    /// being stopped), for the callbacks. Without callbacks, reports do not wake the loop: they
    /// mark `Sweep::reports_unsaved`, which the snapshot timer looks at.
    Reported {
        trial: TrialId,
        metrics: Metrics,
    },
    /// The trial's resources are reserved and its workers start: it is running, no longer
    /// waiting (sent before each of its attempts).
    Started(TrialId),
    Ended {
        trial: TrialId,
        /// The request the run ended on (`Halt::GO`: it ended on its own).
        halted: u8,
        outcome: Result<TrainResult>,
    },
    /// A mistake the sweep cannot go on with (from the controller, during a report).
    Fatal(Error),
}

/// When the state snapshot is written: after a change, but at most once per 20 times what the
/// last write cost, so persistence takes at most about 5% of the driver's time however large
/// the experiment grows.
///
/// Trials starting and ending are changes the loop hears of (`dirty`). Reports are not: they
/// come by the thousand per second, and waking the loop for each cost the report path a
/// thread wake-up (about 8% of the driver's CPU at 8 trials x 5,000 reports). They mark
/// `Sweep::reports_unsaved` instead, which the loop looks at every `REPORTS_CHECKED_EVERY` while
/// trials run.
struct Snapshots {
    dirty: bool,
    last: Instant,
    cost: Duration,
    /// When the loop last found no report since the last snapshot.
    checked: Instant,
}

/// How often a running sweep looks for reports not in the snapshot yet.
const REPORTS_CHECKED_EVERY: Duration = Duration::from_millis(100);

impl Snapshots {
    fn new() -> Self {
        let now = Instant::now();
        Snapshots { dirty: true, last: now, cost: Duration::ZERO, checked: now }
    }

    fn due_at(&self) -> Instant {
        self.last + self.cost * 20
    }

    /// When the loop should wake to write the snapshot or look for reports: None while nothing
    /// changed and no trial runs.
    fn wake_at(&self, running: bool) -> Option<Instant> {
        if self.dirty {
            Some(self.due_at())
        } else if running {
            Some(self.due_at().max(self.checked + REPORTS_CHECKED_EVERY))
        } else {
            None
        }
    }
}

struct Sweep {
    trainer: TorchTrainer,
    run: RunConfig,
    path: PathBuf,
    experiment: String,
    metric: Option<(String, Mode)>,
    time_budget: Option<Duration>,
    /// Time spent by earlier drivers of a restored sweep.
    spent_before: Duration,
    began: Instant,
    controller: Arc<Mutex<Controller>>,
    /// The trials started and not ended (see `retire`).
    trials: BTreeMap<TrialId, TrialResult>,
    /// The rows of the trials that ended.
    ended: EndedRows,
    snapshots: Snapshots,
    /// A trial reported since the last snapshot (set by the report path, taken by the loop).
    reports_unsaved: Arc<AtomicBool>,
    control: Control,
    /// Interrupted: the state file keeps the snapshot taken then; the trials are stopping.
    frozen: bool,
    /// The scheduler status callbacks heard last.
    shown_status: Option<rtune_searchers::SchedulerStatus>,
    /// When the scheduler's status was last looked at: at most once a second (it is asked for
    /// after every message the loop handles, reports included).
    status_checked: Option<Instant>,
}

impl Sweep {
    fn step(&self, event: Event) -> Result<Vec<Command>> {
        self.controller.lock().unwrap_or_else(|p| p.into_inner()).step(event)
    }

    async fn run(&mut self, driver: &'static Driver) -> Result<ResultGrid> {
        let (heard_tx, mut heard) = mpsc::unbounded_channel::<Heard>();
        let mut running: BTreeMap<TrialId, Halt> = BTreeMap::new();
        // Trials asked to pause that take over another's checkpoint (PBT) → the source.
        let mut exploits: BTreeMap<TrialId, TrialId> = BTreeMap::new();
        let mut fatal: Option<Error> = None;
        self.began = Instant::now();
        let log = self.path.join(DRIVER_LOG);
        let _log = crate::log::tee_to(&log).map_err(|e| Error::io(&log, e))?;
        tracing::info!("sweep {} in {}", self.experiment, self.path.display());
        for command in self.step(Event::Begin)? {
            let _ = heard_tx.send(Heard::Command(command));
        }
        let budget = self
            .time_budget
            .map(|b| tokio::time::Instant::now() + b.saturating_sub(self.spent_before));
        let mut budget_spent = false;
        loop {
            let message = tokio::select! {
                message = heard.recv() => message.expect("the loop holds a sender"),
                _ = async { tokio::time::sleep_until(budget.expect("checked")).await },
                    if budget.is_some() && !budget_spent => {
                    budget_spent = true;
                    self.apply(self.step(Event::TimeBudgetSpent), &heard_tx, &mut fatal);
                    continue;
                }
                _ = crate::sys::sleep_until(self.snapshots.wake_at(!running.is_empty())),
                    if !self.frozen => {
                    if self.reports_unsaved.swap(false, Ordering::SeqCst) {
                        self.snapshots.dirty = true;
                    }
                    if self.snapshots.dirty {
                        self.save_state(&mut fatal);
                    } else {
                        self.snapshots.checked = Instant::now();
                    }
                    continue;
                }
                asked = self.control.trial_requests(), if !self.frozen => {
                    for (request, trial_id) in asked {
                        self.on_request(request, &trial_id, &heard_tx, &mut fatal);
                    }
                    continue;
                }
                _ = self.control.wait(), if !self.frozen => {
                    self.freeze(&running, &mut fatal);
                    if running.is_empty() {
                        break;
                    }
                    continue;
                }
            };
            if self.frozen {
                // Only the running trials' ends matter now; they are not recorded as ended,
                // so that restore goes on with them from their latest checkpoints.
                if let Heard::Ended { trial, .. } = message {
                    running.remove(&trial);
                }
                if running.is_empty() {
                    break;
                }
                continue;
            }
            match message {
                Heard::Command(Command::StartTrial { trial, params, resume }) => {
                    let halt = Halt::default();
                    if fatal.is_some() {
                        halt.ask(Halt::STOP);
                    }
                    self.start(driver, trial, params, resume, halt.clone(), heard_tx.clone());
                    running.insert(trial, halt);
                }
                Heard::Started(trial) => {
                    // PENDING until now: started by the controller, waiting for its resources.
                    if let Some(t) = self.trials.get_mut(&trial)
                        && t.status == TrialStatus::Pending
                    {
                        t.status = TrialStatus::Running;
                        let info = self.info(trial);
                        self.call_back(&running, &mut fatal, |c| c.on_trial_start(&info));
                    }
                }
                Heard::Command(Command::StopTrial(trial)) => {
                    running.get(&trial).inspect(|h| h.ask(Halt::STOP));
                }
                Heard::Command(Command::PauseTrial(trial)) => {
                    running.get(&trial).inspect(|h| h.ask(Halt::PAUSE));
                }
                Heard::Command(Command::Exploit { trial, source, .. }) => {
                    running.get(&trial).inspect(|h| h.ask(Halt::PAUSE));
                    exploits.insert(trial, source);
                }
                Heard::Command(Command::Finish) => break,
                Heard::Reported { trial, metrics } => {
                    let info = self.info(trial);
                    self.call_back(&running, &mut fatal, |c| c.on_trial_result(&info, &metrics));
                }
                Heard::Ended { trial, halted, outcome } => {
                    running.remove(&trial);
                    let mut event = self.record_end(trial, halted, outcome);
                    if let Some(source) = exploits.remove(&trial)
                        && event == Event::TrialPaused(trial)
                        && let Err(e) = self.exploit(trial, source)
                    {
                        event = self.record_failure(trial, format!("PBT's exploit: {e}"));
                    }
                    let info = self.info(trial);
                    match &event {
                        Event::TrialCompleted(_) | Event::TrialStopped(_) => {
                            self.call_back(&running, &mut fatal, |c| c.on_trial_complete(&info));
                        }
                        Event::TrialFailed { error, .. } => {
                            self.call_back(&running, &mut fatal, |c| {
                                c.on_trial_error(&info, error)
                            });
                        }
                        Event::TrialPaused(_) => {
                            self.call_back(&running, &mut fatal, |c| c.on_trial_pause(&info));
                        }
                        _ => {}
                    }
                    self.apply(self.step(event), &heard_tx, &mut fatal);
                    let status =
                        self.controller.lock().unwrap_or_else(|p| p.into_inner()).status(trial);
                    if let Some(status) = status.filter(|s| s.is_finished())
                        && let Some(t) = self.trials.get_mut(&trial)
                    {
                        t.status = status;
                        self.retire(trial, &mut fatal);
                    }
                }
                Heard::Fatal(e) => self.abort(e, &running, &mut fatal),
            }
            self.snapshots.dirty = true;
            if Instant::now() >= self.snapshots.due_at() {
                self.save_state(&mut fatal);
            }
            self.show_scheduler(&running, &mut fatal, false);
            if fatal.is_some() && running.is_empty() {
                break;
            }
        }
        if self.frozen {
            tracing::info!("sweep {} interrupted; it goes on with rtune resume", self.experiment);
            return Err(fatal.unwrap_or_else(|| Error::Interrupted { path: self.path.clone() }));
        }
        // Trials the controller ended without running them again (a spent budget, fail-fast).
        {
            let controller = self.controller.lock().unwrap_or_else(|p| p.into_inner());
            for (&id, t) in self.trials.iter_mut() {
                t.status = controller.status(id).unwrap_or(t.status);
            }
        }
        self.save_state(&mut fatal);
        // Every trial as the experiment's files hold it (the ended ones are in memory no more).
        let trials = match read_experiment(&self.path, &self.run, false) {
            Ok((_, trials)) => trials,
            Err(e) => return Err(fatal.unwrap_or(e)),
        };
        let count = |s: TrialStatus| trials.values().filter(|t| t.status == s).count();
        tracing::info!(
            "sweep {} ended: {} trials, {} terminated, {} errors{}",
            self.experiment,
            trials.len(),
            count(TrialStatus::Terminated),
            count(TrialStatus::Error),
            fatal.as_ref().map(|e| format!("; stopped by: {e}")).unwrap_or_default()
        );
        self.show_scheduler(&running, &mut fatal, true);
        let infos: Vec<TrialInfo> = trials.values().map(trial_info).collect();
        self.call_back(&running, &mut fatal, |c| c.on_experiment_end(&infos));
        if let Some(e) = fatal {
            return Err(e);
        }
        let (metric, mode) = self.metric.clone().map_or((None, None), |(m, d)| (Some(m), Some(d)));
        let grid = ResultGrid {
            path: self.path.clone(),
            metric,
            mode,
            trials: trials.into_values().collect(),
        };
        grid.write_parquet(self.path.join(RESULTS_PARQUET))?;
        Ok(grid)
    }

    /// Replaces `experiment_state.json` (atomically): every trial's status, params, directory,
    /// error and last result, and the controller's snapshot, as they are now.
    fn save_state(&mut self, fatal: &mut Option<Error>) {
        let began = Instant::now();
        // What it saves holds every report made until now.
        self.reports_unsaved.store(false, Ordering::SeqCst);
        let trials: Vec<SavedTrialRow> =
            self.trials.iter().map(|(&index, t)| SavedTrialRow::of(index, t)).collect();
        let (metric, mode) = self.metric.clone().map_or((None, None), |(m, d)| (Some(m), Some(d)));
        let controller = self.controller.lock().unwrap_or_else(|p| p.into_inner()).snapshot();
        let state = SavedExperiment {
            format: FORMAT,
            name: self.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            experiment_id: self.experiment.clone(),
            metric,
            mode,
            rtune_version: env!("CARGO_PKG_VERSION").to_owned(),
            timestamp: unix_time(),
            time_spent_s: (self.spent_before + self.began.elapsed()).as_secs_f64(),
            trials,
            controller,
        };
        if let Err(e) = state.write(&self.path, &self.ended) {
            fatal.get_or_insert(e);
        }
        let now = Instant::now();
        self.snapshots = Snapshots { dirty: false, last: now, cost: began.elapsed(), checked: now };
    }

    /// Interrupted: saves the state as it is now (the snapshot restore goes on from) and asks
    /// every running trial to stop; nothing new starts and nothing more is recorded.
    fn freeze(&mut self, running: &BTreeMap<TrialId, Halt>, fatal: &mut Option<Error>) {
        tracing::warn!("interrupted: stopping {} running trial(s), resumable", running.len());
        self.save_state(fatal);
        self.frozen = true;
        for halt in running.values() {
            halt.ask(Halt::PAUSE);
        }
    }

    /// A user's request about one trial (by id), handed to the controller.
    fn on_request(
        &self,
        request: TrialRequest,
        trial_id: &str,
        heard: &mpsc::UnboundedSender<Heard>,
        fatal: &mut Option<Error>,
    ) {
        let verb = request.verb();
        let Some((&id, _)) = self.trials.iter().find(|(_, t)| t.trial_id == trial_id) else {
            tracing::warn!("asked to {verb} trial {trial_id}, which this sweep does not have");
            return;
        };
        tracing::info!("trial {trial_id}: {verb} asked by the user");
        let event = match request {
            TrialRequest::Stop => Event::StopRequested(id),
            TrialRequest::Pause => Event::PauseRequested(id),
            TrialRequest::Resume => Event::ResumeRequested(id),
        };
        self.apply(self.step(event), heard, fatal);
    }

    /// Tells the callbacks the scheduler's status when it changed, at most once a second
    /// unless `now`.
    fn show_scheduler(
        &mut self,
        running: &BTreeMap<TrialId, Halt>,
        fatal: &mut Option<Error>,
        now: bool,
    ) {
        let due = self.status_checked.is_none_or(|at| at.elapsed().as_secs() >= 1);
        if !(now || due) {
            return;
        }
        self.status_checked = Some(Instant::now());
        let status = self.controller.lock().unwrap_or_else(|p| p.into_inner()).scheduler_status();
        if status.kind.is_empty() || self.shown_status.as_ref() == Some(&status) {
            return;
        }
        self.call_back(running, fatal, |c| c.on_scheduler_status(&status));
        self.shown_status = Some(status);
    }

    /// A trial not ended as callbacks see it.
    fn info(&self, trial: TrialId) -> TrialInfo {
        trial_info(&self.trials[&trial])
    }

    /// An ended trial leaves memory: its row goes to the ones every snapshot copies from disk
    /// (its results are in its files already), so that a sweep of many trials stays as small
    /// as one of the trials still going.
    ///
    /// A row that cannot be written (a full disk) keeps the trial in memory, and in the
    /// snapshots, and ends the sweep.
    fn retire(&mut self, trial: TrialId, fatal: &mut Option<Error>) {
        let Some(t) = self.trials.get(&trial) else { return };
        match self.ended.push(&SavedTrialRow::of(trial, t)) {
            Ok(()) => drop(self.trials.remove(&trial)),
            Err(e) => drop(fatal.get_or_insert(Error::io(&self.path, e))),
        }
    }

    /// Calls every callback with `f`; a failure ends the sweep once the running trials stop.
    fn call_back(
        &self,
        running: &BTreeMap<TrialId, Halt>,
        fatal: &mut Option<Error>,
        f: impl FnMut(&dyn Callback) -> Result<()>,
    ) {
        if let Err(e) = self.run.callbacks.each(f) {
            self.abort(e, running, fatal);
        }
    }

    fn apply(
        &self,
        commands: Result<Vec<Command>>,
        heard: &mpsc::UnboundedSender<Heard>,
        fatal: &mut Option<Error>,
    ) {
        match commands {
            Ok(commands) => {
                for command in commands {
                    let _ = heard.send(Heard::Command(command));
                }
            }
            Err(e) => {
                fatal.get_or_insert(e);
            }
        }
    }

    /// Ends the sweep with `e` once the running trials have stopped.
    fn abort(&self, e: Error, running: &BTreeMap<TrialId, Halt>, fatal: &mut Option<Error>) {
        fatal.get_or_insert(e);
        for halt in running.values() {
            halt.ask(Halt::STOP);
        }
    }

    /// Starts trial `trial` as a task: a `TorchTrainer` run in its own directory whose every
    /// report goes to the controller. A resumed trial goes on in its directory, from its
    /// latest checkpoint.
    fn start(
        &mut self,
        driver: &'static Driver,
        trial: TrialId,
        sampled: Params,
        resume: bool,
        halt: Halt,
        heard: mpsc::UnboundedSender<Heard>,
    ) {
        // A trial the controller had started but the shell had not when the state was saved
        // (a killed or interrupted driver) has no files to go on from: it starts afresh.
        let resume = resume && self.trials.contains_key(&trial);
        let mut params = self.trainer.params().clone();
        for (key, value) in sampled.iter() {
            params.insert(key, value.clone());
        }
        let (trial_id, path) = match self.trials.get(&trial) {
            Some(t) => (t.trial_id.clone(), t.path.clone()),
            None => {
                let trial_id = format!("{}_{:05}", self.experiment, trial.0);
                let dir_name =
                    format!("{}{}_{}", self.dir_prefix(trial), short_params(&sampled), date());
                (trial_id, self.path.join(dir_name))
            }
        };
        let mut run = self.run.clone();
        run.name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        run.storage_path = Some(self.path.clone());
        let mut trainer = self
            .trainer
            .clone()
            .train_loop_config(params)
            .run_config(run)
            .for_trial(trial_id.clone());
        if resume {
            trainer = trainer.picking_up();
        }
        let span = tracing::info_span!("trial", id = %trial_id);
        span.in_scope(|| {
            let how = if resume { "goes on" } else { "starts" };
            tracing::info!("{how} with {}", short_params(&sampled));
        });
        let bracket = self.controller.lock().unwrap_or_else(|p| p.into_inner()).bracket(trial);
        self.trials.insert(
            trial,
            TrialResult {
                trial_id,
                // Running once its workers start (`Heard::Started`): it may wait for them.
                status: TrialStatus::Pending,
                params: sampled,
                result: None,
                error: None,
                path: path.clone(),
                bracket,
            },
        );
        let controller = self.controller.clone();
        let with_callbacks = !self.run.callbacks.is_empty();
        let reports_unsaved = self.reports_unsaved.clone();
        tokio::spawn(
            async move {
                let halted = AtomicU8::new(Halt::GO);
                let mut decide = |metrics: &Metrics| -> Result<bool> {
                    if with_callbacks {
                        let _ = heard.send(Heard::Reported { trial, metrics: metrics.clone() });
                    } else {
                        reports_unsaved.store(true, Ordering::Relaxed);
                    }
                    if halt.get() == Halt::GO {
                        let event = Event::ResultReported { trial, metrics: metrics.clone() };
                        let commands =
                            controller.lock().unwrap_or_else(|p| p.into_inner()).step(event);
                        match commands {
                            Ok(commands) => {
                                for command in commands {
                                    match command {
                                        Command::StopTrial(t) if t == trial => halt.ask(Halt::STOP),
                                        Command::PauseTrial(t) if t == trial => {
                                            halt.ask(Halt::PAUSE)
                                        }
                                        Command::Exploit { trial: t, .. } if t == trial => {
                                            halt.ask(Halt::PAUSE);
                                            drop(heard.send(Heard::Command(command)));
                                        }
                                        other => drop(heard.send(Heard::Command(other))),
                                    }
                                }
                            }
                            Err(e) => {
                                let _ = heard.send(Heard::Fatal(e));
                                halt.ask(Halt::STOP);
                            }
                        }
                    }
                    halted.store(halt.get(), Ordering::SeqCst);
                    Ok(halt.get() != Halt::GO)
                };
                let heard_start = heard.clone();
                let mut started = move || drop(heard_start.send(Heard::Started(trial)));
                let outcome = trainer.run_trial(driver, path, &mut decide, &mut started).await;
                let halted = halted.load(Ordering::SeqCst);
                match &outcome {
                    Ok(_) if halted == Halt::PAUSE => tracing::info!("paused"),
                    Ok(_) if halted == Halt::STOP => tracing::info!("stopped"),
                    Ok(_) => tracing::info!("completed"),
                    Err(e) => tracing::warn!("failed: {e}"),
                }
                let _ = heard.send(Heard::Ended { trial, halted, outcome });
            }
            .instrument(span),
        );
    }

    /// Keeps what a trial's run returned; the controller's event for its end.
    fn record_end(&mut self, trial: TrialId, halted: u8, outcome: Result<TrainResult>) -> Event {
        let event = self.keep_end(trial, halted, outcome);
        // Its history is in its files, where the sweep's `ResultGrid` is read from.
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        if let Some(result) = entry.result.as_mut() {
            result.metrics_history = Vec::new();
        }
        event
    }

    /// Keeps what a trial's run returned, or why it failed, in its entry.
    fn keep_end(&mut self, trial: TrialId, halted: u8, outcome: Result<TrainResult>) -> Event {
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        match outcome {
            Ok(result) => {
                entry.result = Some(result);
                entry.status = TrialStatus::Terminated;
                match halted {
                    Halt::PAUSE => {
                        entry.status = TrialStatus::Paused;
                        Event::TrialPaused(trial)
                    }
                    Halt::STOP => Event::TrialStopped(trial),
                    _ => Event::TrialCompleted(trial),
                }
            }
            Err(e) => {
                let error = match e {
                    Error::TrainingFailed(result) => {
                        let message = result.error.clone().unwrap_or_default();
                        entry.result = Some(*result);
                        message
                    }
                    other => other.to_string(),
                };
                self.record_failure(trial, error)
            }
        }
    }

    /// The trial failed for good with `error` (also written to its `error.txt`).
    fn record_failure(&mut self, trial: TrialId, error: String) -> Event {
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        entry.status = TrialStatus::Error;
        entry.error = Some(error.clone());
        let _ = std::fs::write(entry.path.join(super::experiment::ERROR_FILE), &error);
        Event::TrialFailed { trial, error }
    }

    /// How trial `trial`'s directory name begins (Ray's `<trainable>_<trial_id>_<index>_`),
    /// which no other trial's does.
    fn dir_prefix(&self, trial: TrialId) -> String {
        format!("{TRIAL_DIR_PREFIX}{}_{:05}_{}_", self.experiment, trial.0, trial.0)
    }

    /// The directory of a started trial, looked for in the experiment directory when the trial
    /// has ended (and left memory): PBT's source may end between its choice and the exploit.
    fn dir_of(&self, trial: TrialId) -> Result<Option<PathBuf>> {
        if let Some(t) = self.trials.get(&trial) {
            return Ok(Some(t.path.clone()));
        }
        let prefix = self.dir_prefix(trial);
        for entry in std::fs::read_dir(&self.path).map_err(|e| Error::io(&self.path, e))? {
            let entry = entry.map_err(|e| Error::io(&self.path, e))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                return Ok(Some(entry.path()));
            }
        }
        Ok(None)
    }

    /// PBT's exploit of a paused `trial`: it takes over `source`'s latest recorded checkpoint
    /// (read from the source's files: it may still be running). A source without one leaves
    /// the trial its own state; it goes on with the new params either way.
    fn exploit(&mut self, trial: TrialId, source: TrialId) -> Result<()> {
        let (Some(from), Some(to)) = (self.dir_of(source)?, self.dir_of(trial)?) else {
            return Err(Error::Protocol(format!("exploit of {trial} from unknown {source}")));
        };
        match read_run(&from, &self.run)?.checkpoint {
            Some(checkpoint) => {
                crate::storage::checkpoint::exploit_into(&checkpoint, &to)?;
            }
            None => tracing::warn!(
                "trial {trial} was to take over trial {source}'s checkpoint, which has \
                 none yet; it goes on from its own with the new params"
            ),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_directory_names_show_the_params() {
        let params =
            Params::new().with("lr", 1e-6).with("hidden", 64).with("opt", "adam/w").with("m", 0.9);
        assert_eq!(short_params(&params), "lr=1.000e-6,hidden=64,opt=adam_w,m=0.9000");
        assert_eq!(date().len(), "2026-11-23_11-58-10".len());
    }
}
