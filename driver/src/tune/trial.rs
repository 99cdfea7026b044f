//! One trial of a sweep as its results show it: `TrialResult`, what the `ResultGrid` holds per
//! trial and the experiment's state file keeps of it. Below both: the grid ranks and tables
//! trials, the experiment directory reads and writes them.

use std::path::PathBuf;

use rtune_searchers::{Metrics, Mode, Params, TrialStatus};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::outcome::{Checkpoint, CheckpointRanking, TrainResult};

/// One trial as the sweep ended it (read it through its methods: a sweep fills it as the
/// trial goes).
#[derive(Debug, Clone, Serialize)]
pub struct TrialResult {
    /// `<experiment id>_<index>`, as in Ray.
    pub(crate) trial_id: String,
    pub(crate) status: TrialStatus,
    /// The params sampled for it (merged into the trainer's `train_loop_config`).
    pub(crate) params: Params,
    /// What its `TorchTrainer` run returned (also for a failed one, when it got that far).
    #[serde(skip)]
    pub(crate) result: Option<TrainResult>,
    pub(crate) error: Option<String>,
    /// Its directory in the experiment.
    pub(crate) path: PathBuf,
    /// The bracket its scheduler put it in (ASHA and HyperBand; None for the others).
    #[serde(default)]
    pub(crate) bracket: Option<usize>,
    /// Which of its checkpoints is best: the sweep's rule, which its `ResultGrid` sets.
    #[serde(skip)]
    pub(crate) ranking: CheckpointRanking,
}

/// As a person reads it: its id and status, its params, what it reported last (rtune's own
/// bookkeeping left out) and why it failed: `3c1f0_00004 TERMINATED: lr=0.0373 · loss=0.4123
/// (iteration 10)`.
impl std::fmt::Display for TrialResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.trial_id, self.status.name())?;
        if !self.params.is_empty() {
            write!(f, ": {}", self.params)?;
        }
        let last = self.result.as_ref().and_then(|r| r.metrics.as_ref());
        let reported: Vec<String> = last
            .into_iter()
            .flatten()
            .filter(|(name, _)| !crate::metrics::added_by_rtune(name))
            .map(|(name, v)| format!("{name}={}", crate::metrics::number_text(*v)))
            .collect();
        if !reported.is_empty() {
            write!(f, " · {}", reported.join(", "))?;
        }
        if let Some(iteration) = last.and_then(|m| m.get("training_iteration")) {
            write!(f, " (iteration {iteration})")?;
        }
        if let Some(error) = &self.error {
            write!(f, " · {}", crate::outcome::error_summary(error))?;
        }
        Ok(())
    }
}

impl TrialResult {
    /// As callbacks are told of a trial that ended before their driver began.
    pub(crate) fn into_ended(self) -> crate::callback::EndedTrial {
        let history = self.result.map(|r| r.metrics_history).unwrap_or_default();
        let trial = crate::callback::TrialInfo {
            trial_id: self.trial_id,
            status: self.status,
            params: self.params,
            path: self.path,
            stopped: false,
            checkpoint: None,
        };
        crate::callback::EndedTrial { trial, history, error: self.error }
    }

    /// `<experiment id>_<index>`, as in Ray.
    pub fn trial_id(&self) -> &str {
        &self.trial_id
    }

    pub fn status(&self) -> TrialStatus {
        self.status
    }

    /// The params sampled for it (merged into the trainer's `train_loop_config`).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Why it failed, when it did (the whole text; its `error.txt` holds the same).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Its directory in the experiment.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The bracket its scheduler put it in (ASHA and HyperBand; None for the others).
    pub fn bracket(&self) -> Option<usize> {
        self.bracket
    }

    /// What its `TorchTrainer` run returned (also for a failed one, when it got that far):
    /// every kept report, the checkpoints, the failed attempts, where its ranks ran.
    pub fn result(&self) -> Option<&TrainResult> {
        self.result.as_ref()
    }

    /// The last reported value of `metric`.
    pub fn last(&self, metric: &str) -> Option<f64> {
        self.result.as_ref()?.metrics.as_ref()?.get(metric).copied()
    }

    /// Its best checkpoint by the sweep's rule ([`CheckpointRanking`]): by the sweep's
    /// `CheckpointConfig::score_attribute` when set, else by the sweep's metric and mode among
    /// the checkpoints whose report meets its constraints, else its latest. As Ray's
    /// `Result.checkpoint`: `grid.best_result()?.checkpoint()?.export("best")` (with
    /// `rtune::ExportCheckpoint`).
    pub fn checkpoint(&self) -> Result<&Checkpoint> {
        self.checkpoint_by(&self.ranking)
    }

    /// Its best checkpoint by `ranking` (else its latest).
    pub fn checkpoint_by(&self, ranking: &CheckpointRanking) -> Result<&Checkpoint> {
        let result = self.result.as_ref();
        result.and_then(|r| r.best_checkpoint_by(ranking)).ok_or_else(|| Error::Checkpoint {
            path: self.path.clone(),
            message: format!(
                "trial {} kept no checkpoint (its train function reported none, or none \
                     was kept)",
                self.trial_id
            ),
        })
    }

    /// Every reported result, in order.
    pub fn history(&self) -> &[Metrics] {
        self.result.as_ref().map_or(&[], |r| &r.metrics_history)
    }

    /// The best value of `metric` over all its reports in `mode` (NaN and infinities left out).
    pub fn best(&self, metric: &str, mode: Mode) -> Option<f64> {
        self.best_report(metric, mode).and_then(|m| m.get(metric).copied())
    }

    /// The report with the best finite value of `metric`.
    pub fn best_report(&self, metric: &str, mode: Mode) -> Option<&Metrics> {
        self.history()
            .iter()
            .filter_map(|m| m.get(metric).filter(|v| v.is_finite()).map(|&v| (m, mode.sign() * v)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(m, _)| m)
    }
}

/// A trial started and not ended, as the sweep's shell keeps it. Its status is not kept here:
/// it is the controller's (`Sweep::status`), and the shell knows only whether the trial's
/// workers have started (until then a started trial is PENDING: it waits for its resources).
#[derive(Debug, Clone)]
pub struct LiveTrial {
    pub trial_id: String,
    pub params: Params,
    /// Its directory in the experiment.
    pub path: PathBuf,
    pub bracket: Option<usize>,
    /// Its resources are reserved and its workers started.
    pub placed: bool,
    /// What its run returned, once it ended (its history left out: it is in its files).
    pub result: Option<TrainResult>,
    pub error: Option<String>,
}

impl LiveTrial {
    /// A trial picked up from an interrupted experiment (its workers not started again yet).
    pub fn from_result(trial: TrialResult) -> LiveTrial {
        LiveTrial {
            trial_id: trial.trial_id,
            params: trial.params,
            path: trial.path,
            bracket: trial.bracket,
            placed: false,
            result: trial.result,
            error: trial.error,
        }
    }
}
