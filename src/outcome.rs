//! What runs produce, as plain records: `TrainResult` (what `fit` returns), `WorkerFailure`
//! (why an attempt failed) and the `Checkpoint` handle. No I/O here: the methods that read a
//! checkpoint folder are in `storage::checkpoint`. A leaf, so the crate's `Error` can carry a
//! failed run's result without importing the trainer.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use rtune_searchers::Metrics;

/// What `fit` returns (Ray's `Result`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainResult {
    /// The last report's metrics, with rtune's automatic ones.
    pub metrics: Option<Metrics>,
    /// The latest checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// The kept checkpoints, best first (by `CheckpointConfig::score_attribute`, else newest).
    pub best_checkpoints: Vec<(Checkpoint, Metrics)>,
    /// Why the run failed for good, if it did.
    pub error: Option<String>,
    /// The run directory.
    pub path: PathBuf,
    /// Every kept report, in order.
    pub metrics_history: Vec<Metrics>,
    /// Where the last attempt's ranks ran, rank by rank: `node/gpu:<CUDA_VISIBLE_DEVICES>` or
    /// `node/cpu` (each result row's `placement`).
    pub placement: Option<String>,
    /// Every failed attempt, in order.
    pub failures: Vec<WorkerFailure>,
    /// Wall time of `fit`, and rank 0's time inside the train function (last attempt).
    pub fit_seconds: f64,
    pub train_loop_seconds: f64,
}

impl TrainResult {
    /// The best kept checkpoint (by the checkpoint score, else the newest).
    pub fn best_checkpoint(&self) -> Option<&Checkpoint> {
        self.best_checkpoints.first().map(|(c, _)| c)
    }

    /// Seconds of `fit` spent outside the train function: start-up, joins, teardown.
    pub fn overhead_seconds(&self) -> f64 {
        (self.fit_seconds - self.train_loop_seconds).max(0.0)
    }
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerFailure {
    pub attempt: u32,
    pub rank: usize,
    pub message: String,
    /// The signal that killed the worker, if one did.
    pub signal: Option<i32>,
    pub exit_code: Option<i32>,
}

impl std::fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} (attempt {}): {}", self.rank, self.attempt, self.message)
    }
}

/// A committed checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Checkpoint {
    pub(crate) path: PathBuf,
}

impl Checkpoint {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder name, e.g. `checkpoint_000012`.
    pub fn name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}
