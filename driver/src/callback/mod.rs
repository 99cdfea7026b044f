//! Hooks into a sweep (Ray's `tune.Callback`): a callback given in `RunConfig::callbacks` hears
//! of every trial's start, each of its results, its end or failure, and the end of the
//! experiment, in that order for each trial. Callbacks run on the sweep's driver loop, one at a
//! time; an error from one ends the sweep (after the running trials stop), as in Ray.
//!
//! Every run already writes Ray's `result.json` and `progress.csv` (its record, which resume
//! reads back): those are not callbacks here. Built in: [`TensorBoardLogger`], event files that
//! TensorBoard reads; [`MlflowLogger`], the sweep as MLflow runs; and [`OptunaJournal`], the
//! sweep as an Optuna study that `optuna-dashboard` shows and `optuna.load_study` reads.

mod mlflow;
mod optuna;
mod tensorboard;

use std::path::PathBuf;
use std::sync::Arc;

use rtune_searchers::{Metrics, Params, SchedulerStatus, SearchSpace, TrialStatus};

use crate::error::Result;

pub use mlflow::{MlflowLogger, TRACKING_URI_ENV};
pub use optuna::OptunaJournal;
pub use tensorboard::TensorBoardLogger;

/// The sweep as callbacks see it when it begins: all a view of it (the terminal UI, the
/// progress lines, a tracker) needs to know before its first trial.
#[derive(Debug, Clone, Default)]
pub struct ExperimentInfo {
    /// Its directory, which exists now.
    pub path: PathBuf,
    /// Its name (the directory's).
    pub name: String,
    /// What trials are compared by: nothing, one metric and its mode, or several.
    pub objectives: rtune_searchers::Objectives,
    /// The space trials' params are drawn from.
    pub param_space: SearchSpace,
    /// The sweep's settings (`tuner.json`'s, the space included) as flat keys and text values:
    /// `metric` = `val_acc`, `param_space.lr.loguniform` = `[0.0001,0.1]`.
    pub settings: std::collections::BTreeMap<String, String>,
    /// A restored sweep going on: its trials so far are in its directory.
    pub restored: bool,
    /// A restored sweep's trials that ended before this driver began, as its files keep them
    /// (the others go on: their events follow). Empty for a new sweep.
    pub ended_before: Vec<EndedTrial>,
    /// Metrics a trial's last result must hold at <= 0 for it to be feasible: the best trial
    /// is the best feasible one ([`rtune_searchers::best_trial`]).
    pub constraints: Vec<String>,
    /// The trials it was set up for, as Ray counts them (a grid times `num_samples`); None:
    /// until its time budget is spent or its searcher has no more.
    pub trials: Option<u64>,
    /// Its time budget, in seconds (for all its drivers together).
    pub time_budget_s: Option<f64>,
    /// What one trial's worker group holds (of an elastic group: its fewest ranks').
    pub per_trial: Amount,
    /// An elastic sweep's trials' (min, max) ranks; None when each has a fixed number.
    pub elastic: Option<(usize, usize)>,
    /// What its trials share: this machine's CPUs and GPUs, or a cluster's live nodes' when its
    /// head answered (None: unknown).
    pub capacity: Option<Amount>,
}

/// A trial that ended before this driver began (see [`ExperimentInfo::ended_before`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EndedTrial {
    pub trial: TrialInfo,
    /// Its results in order (the last is what it ended with).
    pub history: Vec<Metrics>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// CPUs and GPUs: what a trial holds, or what a machine offers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amount {
    pub cpus: f64,
    pub gpus: f64,
}

/// A trial as callbacks see it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialInfo {
    /// `<experiment id>_<index>`, as in Ray.
    pub trial_id: String,
    pub status: TrialStatus,
    /// The params sampled for it.
    pub params: Params,
    /// Its directory in the experiment.
    pub path: PathBuf,
    /// In `on_trial_complete`: it ended because the sweep stopped it (its scheduler's
    /// decision, the time budget, the sweep ending), not by returning or by a stop criterion.
    /// False elsewhere.
    pub stopped: bool,
    /// In `on_experiment_end`: its best checkpoint by the sweep's rule (`TrialResult::
    /// checkpoint`), if it kept one. None elsewhere.
    pub checkpoint: Option<PathBuf>,
}

/// See the module docs. Every method does nothing unless overridden.
pub trait Callback: Send + Sync {
    /// Its name in error messages.
    fn name(&self) -> String {
        "callback".into()
    }

    /// The sweep begins (or goes on, restored) in its experiment directory, which exists now
    /// (Ray's `Callback.setup`).
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        let _ = experiment;
        Ok(())
    }

    /// A new trial was made (PENDING): it starts when its workers do (`on_trial_start`).
    fn on_trial_add(&self, trial: &TrialInfo) -> Result<()> {
        let _ = trial;
        Ok(())
    }

    /// The trial starts, or goes on after a pause or a restore.
    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        let _ = trial;
        Ok(())
    }

    /// The trial reported `result` (rtune's automatic metrics included).
    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        let _ = (trial, result);
        Ok(())
    }

    /// The trial ended: it completed, or was stopped by its scheduler or a stop criterion.
    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        let _ = trial;
        Ok(())
    }

    /// The trial failed for good.
    fn on_trial_error(&self, trial: &TrialInfo, error: &str) -> Result<()> {
        let _ = (trial, error);
        Ok(())
    }

    /// The trial was paused (by its scheduler, or held by the user) and released its workers;
    /// `on_trial_start` comes again when it goes on.
    fn on_trial_pause(&self, trial: &TrialInfo) -> Result<()> {
        let _ = trial;
        Ok(())
    }

    /// The sweep is over (also when it ends with an error); `trials` as they ended.
    fn on_experiment_end(&self, trials: &[TrialInfo]) -> Result<()> {
        let _ = trials;
        Ok(())
    }

    /// The sweep ends with `error` (a failing callback, fail-fast, a disk): said just before
    /// `on_experiment_end`.
    fn on_experiment_error(&self, error: &str) -> Result<()> {
        let _ = error;
        Ok(())
    }

    /// The sweep stopped resumably (Ctrl-C, SIGTERM, `rtune stop`): no `on_experiment_end`
    /// follows; a restore begins again with `on_experiment_begin`.
    fn on_experiment_interrupt(&self) -> Result<()> {
        Ok(())
    }

    /// Events this callback has taken and not yet sent on (a tracker that sends in the
    /// background, as MLflow's does); None for one that keeps none. Read at each scrape of
    /// the metrics endpoint.
    fn backlog(&self) -> Option<u64> {
        None
    }

    /// The scheduler's decisions so far (ASHA's rungs, PBT's exploits), when they changed: at
    /// most once a second, and once more before `on_experiment_end`.
    fn on_scheduler_status(&self, status: &SchedulerStatus) -> Result<()> {
        let _ = status;
        Ok(())
    }
}

/// A shared callback (keep a handle to read what it gathered after the sweep).
impl<C: Callback + ?Sized> Callback for Arc<C> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        (**self).on_experiment_begin(experiment)
    }
    fn on_trial_add(&self, trial: &TrialInfo) -> Result<()> {
        (**self).on_trial_add(trial)
    }
    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        (**self).on_trial_start(trial)
    }
    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        (**self).on_trial_result(trial, result)
    }
    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        (**self).on_trial_complete(trial)
    }
    fn on_trial_error(&self, trial: &TrialInfo, error: &str) -> Result<()> {
        (**self).on_trial_error(trial, error)
    }
    fn on_trial_pause(&self, trial: &TrialInfo) -> Result<()> {
        (**self).on_trial_pause(trial)
    }
    fn on_experiment_end(&self, trials: &[TrialInfo]) -> Result<()> {
        (**self).on_experiment_end(trials)
    }
    fn on_experiment_error(&self, error: &str) -> Result<()> {
        (**self).on_experiment_error(error)
    }
    fn on_experiment_interrupt(&self) -> Result<()> {
        (**self).on_experiment_interrupt()
    }
    fn backlog(&self) -> Option<u64> {
        (**self).backlog()
    }
    fn on_scheduler_status(&self, status: &SchedulerStatus) -> Result<()> {
        (**self).on_scheduler_status(status)
    }
}

/// The leaves of a JSON value with their dotted keys (`model.lr`), depth-first: how trackers,
/// which keep flat text, see nested params and settings.
pub(crate) fn json_leaves(value: &serde_json::Value) -> Vec<(String, &serde_json::Value)> {
    fn walk<'a>(
        prefix: &str,
        value: &'a serde_json::Value,
        out: &mut Vec<(String, &'a serde_json::Value)>,
    ) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, v, out);
                }
            }
            leaf => out.push((prefix.to_owned(), leaf)),
        }
    }
    let mut out = Vec::new();
    walk("", value, &mut out);
    out
}

/// A JSON leaf as text: a string bare, anything else as JSON.
pub(crate) fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The callbacks of a `RunConfig`, in the order they are called.
#[derive(Clone, Default)]
pub struct Callbacks(pub Vec<Arc<dyn Callback>>);

impl Callbacks {
    /// Calls `f` on every callback in turn; the first error, naming its callback (unless it is
    /// a settings mistake, which names the setting), stops it.
    pub(crate) fn each(&self, mut f: impl FnMut(&dyn Callback) -> Result<()>) -> Result<()> {
        for callback in &self.0 {
            f(callback.as_ref()).map_err(|e| match e {
                // A mistake in its settings stays one (nothing runs; exit 2 from `rtune run`).
                e @ crate::error::Error::Config { .. } => e,
                e => {
                    crate::error::Error::Callback { name: callback.name(), message: e.to_string() }
                }
            })?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|c| c.name())).finish()
    }
}

/// The same callbacks (by identity).
impl PartialEq for Callbacks {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| Arc::ptr_eq(a, b))
    }
}
