//! `Tuner`: runs a sweep whose trials are full `TorchTrainer` runs, on the process's shared
//! driver (one runtime, one pool), and carries out the controller's commands.
//!
//! The shell is thin: trials run as tasks; each report of a trial is handed to the controller
//! (behind one lock, for the moment it takes) and its decision goes back to the workers in the
//! reply to that report; commands about other trials come back to the shell loop through a
//! channel. Not yet carried out: pausing and PBT's exploit (HyperBand and PBT are refused before
//! the sweep starts), an experiment-level state file and `Tuner::restore`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rtune_searchers::{
    BasicVariant, Fifo, Metrics, Mode, Params, SchedulerState, SearchSpace, Searcher, TrialId,
    TrialScheduler, TrialStatus, Value,
};
use serde::Serialize;
use tokio::sync::mpsc;

use super::controller::{Command, Controller, ControllerConfig, Event};
use crate::config::RunConfig;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::outcome::TrainResult;
use crate::storage::unix_time;
use crate::train::TorchTrainer;

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
    pub seed: u64,
    /// End the sweep at the first trial that fails for good.
    pub fail_fast: bool,
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
        TuneConfig { num_samples: 1, ..TuneConfig::default() }
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

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn fail_fast(mut self, on: bool) -> Self {
        self.fail_fast = on;
        self
    }
}

/// A sweep: a trainer, a search space, and how to search it (Ray's `Tuner`).
#[derive(Debug)]
pub struct Tuner {
    trainer: TorchTrainer,
    space: SearchSpace,
    tune: TuneConfig,
    run: Option<RunConfig>,
}

/// One trial as the sweep ended it.
#[derive(Debug, Clone, Serialize)]
pub struct TrialResult {
    /// `<experiment id>_<index>`, as in Ray.
    pub trial_id: String,
    pub status: TrialStatus,
    /// The params sampled for it (merged into the trainer's `train_loop_config`).
    pub params: Params,
    /// What its `TorchTrainer` run returned (also for a failed one, when it got that far).
    #[serde(skip)]
    pub result: Option<TrainResult>,
    pub error: Option<String>,
    /// Its directory in the experiment.
    pub path: PathBuf,
}

impl TrialResult {
    /// The last reported value of `metric`.
    pub fn last(&self, metric: &str) -> Option<f64> {
        self.result.as_ref()?.metrics.as_ref()?.get(metric).copied()
    }
}

/// What a sweep returns (Ray's `ResultGrid`).
#[derive(Debug, Clone)]
pub struct ResultGrid {
    /// The experiment directory.
    pub path: PathBuf,
    pub metric: Option<String>,
    pub mode: Option<Mode>,
    /// Every trial, in creation order.
    pub trials: Vec<TrialResult>,
}

impl ResultGrid {
    /// The trial whose last `metric` is best in `mode` (the sweep's own metric and mode when
    /// `None`); trials that never reported it are left out.
    pub fn best_result(&self, metric: Option<&str>, mode: Option<Mode>) -> Result<&TrialResult> {
        let metric = metric.or(self.metric.as_deref()).ok_or_else(|| {
            Error::config("ResultGrid::best_result", "no metric given and the sweep had none")
        })?;
        let mode = mode.or(self.mode).unwrap_or(Mode::Max);
        self.trials
            .iter()
            .filter_map(|t| t.last(metric).filter(|v| !v.is_nan()).map(|v| (t, mode.sign() * v)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(t, _)| t)
            .ok_or_else(|| Error::Metric {
                name: metric.to_owned(),
                problem: "was reported by no trial of this sweep".into(),
            })
    }

    /// The trials that failed.
    pub fn errors(&self) -> Vec<&TrialResult> {
        self.trials.iter().filter(|t| t.status == TrialStatus::Error).collect()
    }
}

impl Tuner {
    /// A sweep of `trainer` over `space`. Each trial's sampled params are merged into the
    /// trainer's `train_loop_config`, top-level key by key; sampled values win.
    pub fn new(trainer: TorchTrainer, space: SearchSpace) -> Self {
        Tuner { trainer, space, tune: TuneConfig::new(), run: None }
    }

    pub fn tune_config(mut self, config: TuneConfig) -> Self {
        self.tune = config;
        self
    }

    /// Overrides the trainer's `RunConfig` (Ray: the Tuner's wins): its name and storage path
    /// are the experiment's; failure, checkpoint and stop settings apply to every trial.
    pub fn run_config(mut self, run: RunConfig) -> Self {
        self.run = Some(run);
        self
    }

    /// Runs the sweep to its end. Mistakes in the settings fail before any trial starts.
    pub fn fit(self) -> Result<ResultGrid> {
        let driver = Driver::get()?;
        let mut sweep = self.prepare()?;
        driver.block_on(sweep.run(driver))
    }

    fn prepare(self) -> Result<Sweep> {
        let Tuner { trainer, space, tune, run } = self;
        let run = run.unwrap_or_else(|| trainer.run().clone());
        run.validate()?;
        trainer.validate()?;
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
                let basic = BasicVariant::new(space)?
                    .num_samples(num_samples.unwrap_or(u64::MAX))
                    .seed(tune.seed);
                (Box::new(basic), None)
            }
        };
        let scheduler = tune.scheduler.unwrap_or_else(|| Box::new(Fifo::new()));
        if let SchedulerState::HyperBand(_) | SchedulerState::Pbt(_) = scheduler.save_state() {
            return Err(Error::config(
                "TuneConfig.scheduler",
                "HyperBand and PBT pause and clone trials, which the Tuner does not carry out \
                 yet; use Asha, MedianStopping or FIFO",
            ));
        }
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
            None => side_by_side(&trainer),
        };
        let controller = Controller::new(
            ControllerConfig {
                metric: metric.clone(),
                num_samples: trial_limit,
                max_concurrent_trials,
                fail_fast: tune.fail_fast,
            },
            searcher,
            scheduler,
        )?;
        let storage = run.resolved_storage_path();
        let name = run.name.clone().unwrap_or_else(|| format!("TorchTrainer_{}", date()));
        let path = storage.join(&name);
        if path.exists() && std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_some()) {
            return Err(Error::config(
                "RunConfig.name",
                format!("{} already holds an experiment; pick another name", path.display()),
            ));
        }
        crate::storage::ensure_writable_dir(&path).map_err(|e| {
            Error::config("RunConfig.storage_path", format!("cannot write the experiment: {e}"))
        })?;
        let experiment = format!("{:05x}", rand::random::<u32>() & 0xfffff);
        Ok(Sweep {
            trainer,
            run,
            path,
            experiment,
            metric,
            time_budget: tune.time_budget_s.map(Duration::from_secs_f64),
            controller: Arc::new(Mutex::new(controller)),
            trials: BTreeMap::new(),
        })
    }
}

/// How many trials of `trainer` the local machine holds side by side (at least 1).
fn side_by_side(trainer: &TorchTrainer) -> usize {
    let scaling = trainer.scaling_config();
    let per_trial = scaling.cpus_per_worker() * scaling.num_workers as f64;
    let cpus = crate::cluster::local_node().map_or(1.0, |n| n.resources.cpu);
    if per_trial > 0.0 { ((cpus / per_trial).floor() as usize).max(1) } else { 1 }
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

/// Set to stop a running trial at its next report.
type StopFlag = Arc<AtomicBool>;

/// The experiment state snapshot in the experiment directory.
pub const STATE_FILE: &str = "experiment_state.json";

/// What the shell loop hears.
enum Heard {
    Command(Command),
    Ended {
        trial: TrialId,
        stopped: bool,
        outcome: Result<TrainResult>,
    },
    /// A mistake the sweep cannot go on with (from the controller, during a report).
    Fatal(Error),
}

struct Sweep {
    trainer: TorchTrainer,
    run: RunConfig,
    path: PathBuf,
    experiment: String,
    metric: Option<(String, Mode)>,
    time_budget: Option<Duration>,
    controller: Arc<Mutex<Controller>>,
    trials: BTreeMap<TrialId, TrialResult>,
}

impl Sweep {
    fn step(&self, event: Event) -> Result<Vec<Command>> {
        self.controller.lock().unwrap_or_else(|p| p.into_inner()).step(event)
    }

    async fn run(&mut self, driver: &'static Driver) -> Result<ResultGrid> {
        let (heard_tx, mut heard) = mpsc::unbounded_channel::<Heard>();
        let mut running: BTreeMap<TrialId, StopFlag> = BTreeMap::new();
        let mut fatal: Option<Error> = None;
        for command in self.step(Event::Begin)? {
            let _ = heard_tx.send(Heard::Command(command));
        }
        let budget = self.time_budget.map(|b| tokio::time::Instant::now() + b);
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
            };
            match message {
                Heard::Command(Command::StartTrial { trial, params, .. }) => {
                    let stop = Arc::new(AtomicBool::new(fatal.is_some()));
                    self.start(driver, trial, params, stop.clone(), heard_tx.clone());
                    running.insert(trial, stop);
                    self.save_state(&mut fatal);
                }
                Heard::Command(Command::StopTrial(trial)) => {
                    if let Some(r) = running.get(&trial) {
                        r.store(true, Ordering::SeqCst);
                    }
                }
                Heard::Command(Command::PauseTrial(_) | Command::Exploit { .. }) => {
                    // Refused before the start (see `prepare`); never silently dropped.
                    let e = Error::Protocol("the scheduler paused or exploited a trial".into());
                    self.abort(e, &running, &mut fatal);
                }
                Heard::Command(Command::Finish) => break,
                Heard::Ended { trial, stopped, outcome } => {
                    running.remove(&trial);
                    let event = self.record_end(trial, stopped, outcome);
                    self.save_state(&mut fatal);
                    self.apply(self.step(event), &heard_tx, &mut fatal);
                }
                Heard::Fatal(e) => self.abort(e, &running, &mut fatal),
            }
            if fatal.is_some() && running.is_empty() {
                break;
            }
        }
        if let Some(e) = fatal {
            return Err(e);
        }
        let (metric, mode) = self.metric.clone().map_or((None, None), |(m, d)| (Some(m), Some(d)));
        Ok(ResultGrid {
            path: self.path.clone(),
            metric,
            mode,
            trials: std::mem::take(&mut self.trials).into_values().collect(),
        })
    }

    /// Replaces `experiment_state.json` (atomically): the sweep's settings and every trial's
    /// status, params, directory, error and last result, as they are now.
    fn save_state(&self, fatal: &mut Option<Error>) {
        let trials: Vec<serde_json::Value> = self
            .trials
            .values()
            .map(|t| {
                let mut row = serde_json::to_value(t).expect("a trial serialises");
                let last = t.result.as_ref().and_then(|r| r.metrics.as_ref()).map(|m| {
                    m.iter()
                        .map(|(k, &v)| (k.clone(), crate::metrics::number_or_tag(v)))
                        .collect::<serde_json::Map<_, _>>()
                });
                row["last_result"] =
                    last.map_or(serde_json::Value::Null, serde_json::Value::Object);
                row
            })
            .collect();
        let (metric, mode) = self.metric.clone().map_or((None, None), |(m, d)| (Some(m), Some(d)));
        let state = serde_json::json!({
            "name": self.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            "experiment_id": self.experiment,
            "metric": metric,
            "mode": mode,
            "rtune_version": env!("CARGO_PKG_VERSION"),
            "timestamp": unix_time(),
            "trials": trials,
        });
        let text = serde_json::to_vec_pretty(&state).expect("the state serialises");
        if let Err(e) = crate::storage::atomic_write(&self.path.join(STATE_FILE), &text) {
            fatal.get_or_insert(e);
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
    fn abort(&self, e: Error, running: &BTreeMap<TrialId, StopFlag>, fatal: &mut Option<Error>) {
        fatal.get_or_insert(e);
        for r in running.values() {
            r.store(true, Ordering::SeqCst);
        }
    }

    /// Starts trial `trial` as a task: a `TorchTrainer` run in its own directory whose every
    /// report goes to the controller.
    fn start(
        &mut self,
        driver: &'static Driver,
        trial: TrialId,
        sampled: Params,
        stop: Arc<AtomicBool>,
        heard: mpsc::UnboundedSender<Heard>,
    ) {
        let mut params = self.trainer.params().clone();
        for (key, value) in sampled.iter() {
            params.insert(key, value.clone());
        }
        let index = trial.0;
        let trial_id = format!("{}_{index:05}", self.experiment);
        let dir_name =
            format!("TorchTrainer_{trial_id}_{index}_{}_{}", short_params(&sampled), date());
        let path = self.path.join(&dir_name);
        let mut run = self.run.clone();
        run.name = Some(dir_name);
        run.storage_path = Some(self.path.clone());
        let trainer = self
            .trainer
            .clone()
            .train_loop_config(params)
            .run_config(run)
            .for_trial(trial_id.clone());
        self.trials.insert(
            trial,
            TrialResult {
                trial_id,
                status: TrialStatus::Running,
                params: sampled,
                result: None,
                error: None,
                path: path.clone(),
            },
        );
        let controller = self.controller.clone();
        tokio::spawn(async move {
            let stopped = AtomicBool::new(false);
            let mut decide = |metrics: &Metrics| -> Result<bool> {
                if stop.load(Ordering::SeqCst) {
                    stopped.store(true, Ordering::SeqCst);
                    return Ok(true);
                }
                let event = Event::ResultReported { trial, metrics: metrics.clone() };
                let commands = controller.lock().unwrap_or_else(|p| p.into_inner()).step(event);
                let mut stop_me = false;
                match commands {
                    Ok(commands) => {
                        for command in commands {
                            match command {
                                Command::StopTrial(t) if t == trial => stop_me = true,
                                other => drop(heard.send(Heard::Command(other))),
                            }
                        }
                    }
                    Err(e) => {
                        let _ = heard.send(Heard::Fatal(e));
                        stop_me = true;
                    }
                }
                if stop_me {
                    stopped.store(true, Ordering::SeqCst);
                }
                Ok(stop_me)
            };
            let outcome = trainer.run_trial(driver, path, &mut decide).await;
            let stopped = stopped.load(Ordering::SeqCst);
            let _ = heard.send(Heard::Ended { trial, stopped, outcome });
        });
    }

    /// Keeps what a trial's run returned; the controller's event for its end.
    fn record_end(&mut self, trial: TrialId, stopped: bool, outcome: Result<TrainResult>) -> Event {
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        match outcome {
            Ok(result) => {
                entry.status = TrialStatus::Terminated;
                entry.result = Some(result);
                if stopped { Event::TrialStopped(trial) } else { Event::TrialCompleted(trial) }
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
                entry.status = TrialStatus::Error;
                entry.error = Some(error.clone());
                let _ = std::fs::write(entry.path.join("error.txt"), &error);
                Event::TrialFailed { trial, error }
            }
        }
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
