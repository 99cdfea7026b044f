//! `Tuner` (Ray's): the builder of a sweep whose trials are full `TorchTrainer` runs, and
//! `prepare`, which checks every setting before anything runs and makes (or picks up) the
//! experiment; the sweep then runs in its shell (`sweep`), on the process's shared driver.
//!
//! The experiment directory (`experiment`) holds `tuner.json` (the settings, written once) and
//! `experiment_state.json` (every trial's status and the controller's snapshot, replaced
//! atomically after changes, throttled). `Tuner::restore` goes on from them and from the
//! trials' own files, which are the record of their results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtune_searchers::{BasicVariant, Fifo, SearchSpace, Searcher};

use super::config::{Samples, TuneConfig};
use super::control::Control;
use super::controller::{Controller, ControllerConfig, Reported};
use super::experiment::{
    EndedRows, FORMAT, SavedExperiment, Settings, check_experiment_file, make_experiment,
    new_experiment_path, pick_up,
};
use super::lease::Lease;
use super::result_grid::ResultGrid;
use super::sweep::{Snapshots, Sweep};
use super::trial_task::Running;
use crate::callback::{Amount, ExperimentInfo};
use crate::cluster::pool::{PoolStatus, Resources};
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::runtime::Driver;
use crate::setting::Setting;
use crate::train::{DATASETS_DIR, TorchTrainer};

/// A sweep: a trainer, a search space, and how to search it (Ray's `Tuner`).
#[derive(Debug)]
pub struct Tuner {
    trainer: TorchTrainer,
    space: SearchSpace,
    tune: Option<TuneConfig>,
    run: Option<RunConfig>,
    /// Set by `Tuner::restore`: the experiment to go on with, and its settings.
    restoring: Option<(PathBuf, Settings)>,
    /// The experiment's lease, taken by `Tuner::restore` (a new sweep takes its own as it
    /// makes the directory).
    lease: Option<Lease>,
    control: Control,
    /// Written into a new experiment's directory with its settings.
    files: Vec<(String, Vec<u8>)>,
}

impl Tuner {
    /// A sweep of `trainer` over `space`. Each trial's sampled params are merged into the
    /// trainer's `train_loop_config`, top-level key by key; sampled values win. Any trainer
    /// that is a `TorchTrainer` with a backend (rtune's `XGBoostTrainer`).
    pub fn new(trainer: impl Into<TorchTrainer>, space: SearchSpace) -> Self {
        Tuner {
            trainer: trainer.into(),
            space,
            tune: None,
            run: None,
            restoring: None,
            lease: None,
            control: Control::new(),
            files: Vec::new(),
        }
    }

    /// Whether `path` holds an experiment that `Tuner::restore` can go on with.
    pub fn can_restore(path: impl AsRef<Path>) -> bool {
        super::experiment::can_restore(path.as_ref())
    }

    /// Goes on with the experiment in `path`, interrupted (its driver killed, the machine
    /// rebooted) or finished: `fit` keeps the finished trials' results, continues the trials
    /// that were running from their latest checkpoints, and creates the rest, so that the sweep
    /// ends with the trials it was set up for. The search space and the `TuneConfig`'s settings
    /// come from the experiment; a sweep that used its own searcher or scheduler must be given
    /// the same ones again with `tune_config` (they are checked against the saved state).
    /// `run_config` may be given again (failure and checkpoint settings); its name and storage
    /// path are the experiment's.
    ///
    /// One driver at a time goes on with an experiment: another one's live lease on it is an
    /// `Error::Held`, before anything is read or written; a dead driver's is taken over. The
    /// lease is held until `fit` ends (or the `Tuner` is dropped without a `fit`).
    pub fn restore(path: impl AsRef<Path>, trainer: impl Into<TorchTrainer>) -> Result<Tuner> {
        let lease = Lease::take(path.as_ref())?;
        // An experiment on an object store goes on from its staging copy (brought up to date).
        let path = crate::storage::staging::local_copy(path.as_ref())?;
        let settings = Settings::read(&path)?;
        SavedExperiment::read(&path)?;
        let space = settings.param_space.clone();
        Ok(Tuner {
            trainer: trainer.into(),
            space,
            tune: None,
            run: None,
            restoring: Some((path, settings)),
            lease: Some(lease),
            control: Control::new(),
            files: Vec::new(),
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

    /// A file to write into the experiment's directory when the sweep makes it (beside its
    /// `tuner.json`; a restored sweep's is there already): what the sweep was made from, say
    /// (`rtune run` keeps its sweep file so). `name` must be a plain file name, none of rtune's
    /// own.
    pub fn experiment_file(
        mut self,
        name: impl Into<String>,
        contents: impl Into<Vec<u8>>,
    ) -> Self {
        self.files.push((name.into(), contents.into()));
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

    /// Checks everything `fit` checks before it makes the experiment's directory or starts a
    /// trial (the settings, the trainer, whether a trial fits the machine or the cluster, the
    /// searcher and scheduler), and does nothing else: `rtune validate`. Says what `fit`
    /// would run.
    pub fn validate(self) -> Result<Checked> {
        let driver = Driver::get()?;
        let plan = self.plan(driver)?;
        let checked = Checked {
            trials: plan.saved.trials,
            max_concurrent_trials: plan.config.max_concurrent_trials,
            search_alg: plan.saved.search_alg.clone(),
            scheduler: plan.saved.scheduler.clone(),
        };
        if plan.restoring.is_none() {
            Controller::new(plan.config, plan.searcher, plan.scheduler)?;
        }
        Ok(checked)
    }

    /// The checked settings of the sweep (see `validate`).
    fn plan(self, driver: &'static Driver) -> Result<Plan> {
        let Tuner { mut trainer, space, tune, run, restoring, lease, control, files } = self;
        for (name, _) in &files {
            check_experiment_file(name)?;
        }
        let mut run = run.unwrap_or_else(|| trainer.run().clone());
        if let Some((path, _)) = &restoring {
            run.name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            run.storage_path = match crate::storage::staging::marked(path) {
                // A staging copy goes on mirroring to its store.
                Some(remote) => {
                    let url = remote?.url().to_owned();
                    url.rsplit_once('/').map(|(parent, _)| PathBuf::from(parent))
                }
                None => path.parent().map(Path::to_owned),
            };
        }
        run.validate()?;
        // A store that cannot be reached is said before any trial starts.
        if let Some(remote) = crate::storage::remote::Remote::of_run(&run) {
            driver.block_on(remote?.check())?;
        }
        // One run config for the sweep: the Tuner's is every trial's (its cluster, its store,
        // its trackers), and what the trainer is checked and prepared with.
        trainer = trainer.run_config(run.clone());
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
        let TuneConfig { settings, search_alg, scheduler } = tune;
        settings.check()?;
        let num_samples = settings.num_samples.limit();
        // Known where samples are counted (PBT makes its whole population at once).
        let trial_limit = trial_count(&space, settings.num_samples, search_alg.as_deref())
            .and_then(|t| usize::try_from(t).ok());
        let searcher: Box<dyn Searcher> = match search_alg {
            // One built without a space of its own takes the sweep's.
            Some(mut searcher) => {
                searcher.set_space(&space)?;
                searcher
            }
            None => Box::new(
                BasicVariant::new(space.clone())?
                    .num_samples(num_samples.unwrap_or(u64::MAX))
                    .seed(settings.seed),
            ),
        };
        let scheduler = scheduler.unwrap_or_else(|| Box::new(Fifo::new()));
        let amount = |r: &Resources| Amount { cpus: r.cpu, gpus: r.gpu };
        let capacity = match &cluster {
            None => crate::cluster::local_node().ok().map(|node| amount(&node.resources)),
            Some(status) => status.as_ref().map(|status| {
                let alive = status.nodes.iter().filter(|n| n.alive);
                alive.fold(Amount::default(), |all, n| Amount {
                    cpus: all.cpus + n.total.cpu,
                    gpus: all.gpus + n.total.gpu,
                })
            }),
        };
        let time_budget = settings.time_budget_s.map(Duration::from_secs_f64);
        let max_concurrent_trials = match settings.max_concurrent_trials {
            // Local mode runs each trial in this process: one at a time.
            _ if trainer.scaling_config().is_local() => 1,
            Some(n) => n,
            None => side_by_side(&trainer, cluster.as_ref()),
        };
        let config = ControllerConfig {
            objectives: settings.objectives(),
            constraints: settings.constraints.clone(),
            num_samples: trial_limit,
            max_concurrent_trials,
            fail_fast: settings.fail_fast,
        };
        let reuse_actors = settings.reuse_actors;
        let saved = Settings {
            format: FORMAT,
            rtune_version: env!("CARGO_PKG_VERSION").to_owned(),
            experiment_id: String::new(),
            param_space: space,
            tune: settings,
            search_alg: searcher.save_state().kind().to_owned(),
            scheduler: scheduler.save_state().kind().to_owned(),
            scaling: Some(trainer.scaling_config().clone()),
            trials: trial_limit.map(|n| n as u64),
        };
        Ok(Plan {
            trainer,
            run,
            restoring,
            lease,
            control,
            files,
            saved,
            config,
            searcher,
            scheduler,
            time_budget,
            reuse_actors,
            capacity,
        })
    }

    fn prepare(self, driver: &'static Driver) -> Result<Sweep> {
        let Plan {
            trainer,
            run,
            restoring,
            lease,
            control,
            files,
            saved,
            config,
            searcher,
            scheduler,
            time_budget,
            reuse_actors,
            capacity,
        } = self.plan(driver)?;
        let objectives = config.objectives.clone();
        let path = match &restoring {
            Some((path, _)) => path.clone(),
            None => new_experiment_path(&run)?,
        };
        // The controller's settings are checked before anything is made: a new sweep's
        // controller is made now, a restored one's once its state is read back.
        let restored = restoring.is_some();
        let constraints = config.constraints.clone();
        let start = match restoring {
            None => Start::New(Controller::new(config, searcher, scheduler)?),
            Some(_) => Start::Restore(config, searcher, scheduler),
        };
        // On a store, the experiment's folder there.
        let store = match crate::storage::remote::Remote::of_run(&run) {
            Some(remote) => {
                Some(remote?.join(&path.file_name().unwrap_or_default().to_string_lossy()))
            }
            None => None,
        };
        let lease = match lease {
            Some(lease) => lease,
            // A new experiment's directory is made with its lease: another driver making the
            // same one at the same moment is refused before either writes into it.
            None => {
                crate::storage::ensure_writable_dir(&path).map_err(|e| {
                    Error::config(Setting::StoragePath, format!("cannot write the experiment: {e}"))
                })?;
                Lease::take_with(&path, store.as_ref())?
            }
        };
        lease.guard(control.clone());
        // The datasets are read and the preprocessor fitted once, for every trial.
        let trainer = trainer.prepare_data(&path.join(DATASETS_DIR), store.as_ref())?;
        let scaling = trainer.scaling_config();
        let info = ExperimentInfo {
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            path: path.clone(),
            objectives,
            param_space: saved.param_space.clone(),
            settings: saved.flat(),
            restored,
            ended_before: Vec::new(),
            constraints,
            trials: saved.trials,
            time_budget_s: saved.tune.time_budget_s,
            per_trial: Amount {
                cpus: scaling.cpus_per_worker() * scaling.ranks() as f64,
                gpus: scaling.gpus_per_worker() * scaling.ranks() as f64,
            },
            elastic: scaling.is_elastic().then(|| (scaling.ranks(), scaling.max_ranks())),
            capacity,
        };
        let (experiment, spent_before, trials, ended, controller) = match start {
            Start::New(controller) => {
                let experiment = make_experiment(&path, saved, &files)?;
                let ended = EndedRows::new(&path)?;
                (experiment, Duration::ZERO, BTreeMap::new(), ended, controller)
            }
            Start::Restore(config, searcher, scheduler) => {
                let mut picked = pick_up(&path, &run)?;
                let state = picked.saved.controller;
                let controller = Controller::restore(config, searcher, scheduler, state, |id| {
                    Ok(Reported::of(picked.histories.remove(&id).unwrap_or_default()))
                })?;
                // A state file's figure, whatever it holds, is no reason to fail a restore.
                let spent = crate::config::duration(picked.saved.time_spent_s).unwrap_or_default();
                let experiment = picked.saved.experiment_id;
                (experiment, spent, picked.trials, picked.ended, controller)
            }
        };
        Ok(Sweep {
            lease,
            trainer: trainer.warm_start(reuse_actors),
            run,
            path,
            experiment,
            info,
            time_budget,
            spent_before,
            began: Instant::now(),
            controller: Arc::new(Mutex::new(controller)),
            trials,
            running: Running::default(),
            finished: false,
            snapshots: Snapshots::new(),
            reports_unsaved: Arc::new(AtomicBool::new(false)),
            ended,
            control,
            frozen: false,
            status_checked: None,
            unread_warned: Default::default(),
            ended_seen: 0,
            fatal: None,
            held_hinted: false,
            shown_status: None,
        })
    }
}

/// How a sweep's controller comes to be: made new, or restored from the experiment's state.
enum Start {
    New(Controller),
    Restore(ControllerConfig, Box<dyn Searcher>, Box<dyn rtune_searchers::TrialScheduler>),
}

/// What a checked sweep runs, as `Tuner::validate` says it.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// Its trials, as Ray counts them (a grid times `num_samples`); None: until its time
    /// budget is spent or its searcher has no more.
    pub trials: Option<u64>,
    /// How many run at once: `max_concurrent_trials`, else as many as the machine or the
    /// cluster holds side by side (1 in local mode).
    pub max_concurrent_trials: usize,
    /// Its searcher and scheduler, as `tuner.json` names them (`BasicVariant`, `FIFO`, ...).
    pub search_alg: String,
    pub scheduler: String,
}

/// A sweep whose settings were checked, before anything is made.
struct Plan {
    trainer: TorchTrainer,
    run: RunConfig,
    restoring: Option<(PathBuf, Settings)>,
    lease: Option<Lease>,
    control: Control,
    files: Vec<(String, Vec<u8>)>,
    saved: Settings,
    config: ControllerConfig,
    searcher: Box<dyn Searcher>,
    scheduler: Box<dyn rtune_searchers::TrialScheduler>,
    time_budget: Option<Duration>,
    reuse_actors: bool,
    /// What the sweep's trials share (this machine, or the cluster's live nodes when its head
    /// answered).
    capacity: Option<Amount>,
}

/// How many trials a sweep of `space` runs, as Ray counts them: `num_samples`, except where the
/// searcher decides (random search over a grid: the grid times `num_samples`, its points
/// first; `search_alg`, None for random search, says where it does). None: until the sweep's
/// time budget is spent or its searcher has no more.
pub fn trial_count(
    space: &SearchSpace,
    num_samples: Samples,
    search_alg: Option<&dyn Searcher>,
) -> Option<u64> {
    let samples = num_samples.limit();
    match search_alg {
        Some(searcher) => searcher.trial_count().or(samples),
        None => {
            let grid = |n| BasicVariant::new(space.clone()).ok()?.num_samples(n).total();
            samples.and_then(grid).or(samples)
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
    let per_trial = scaling.cpus_per_worker() * scaling.ranks() as f64;
    let cpus = match cluster {
        Some(Some(status)) => status.nodes.iter().filter(|n| n.alive).map(|n| n.total.cpu).sum(),
        Some(None) => 1.0,
        None => crate::cluster::local_node().map_or(1.0, |n| n.resources.cpu),
    };
    if per_trial > 0.0 { ((cpus / per_trial).floor() as usize).max(1) } else { 1 }
}
