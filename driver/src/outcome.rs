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
    /// Params the train function never read (rank 0, last attempt): a search over them
    /// changes nothing. A warning, or the run's error with `RunConfig::strict_params`.
    pub unread_params: Vec<String>,
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

/// What progress lines and the terminal UI show of an error: its first line, at most
/// [`SUMMARY_CHARS`] characters. libtorch's errors carry a C++ backtrace after their message
/// (`Exception raised from ...`), which a panic on a tch `Result` shows with escaped line breaks
/// (`\n`); the whole text is in the trial's `error.txt` and the logs.
pub fn error_summary(text: &str) -> String {
    let end = [text.find('\n'), text.find("\\n"), text.find("Exception raised from")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(text.len());
    let line = text[..end].trim_end();
    match line.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// How much of an error's first line [`error_summary`] keeps.
pub(crate) const SUMMARY_CHARS: usize = 300;

/// A committed checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Checkpoint {
    pub path: PathBuf,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_summed_up_by_its_first_line() {
        // A panic on a tch error: the message, then libtorch's backtrace with escaped breaks.
        let panic = "panicked at src/main.rs:9:5: called `Result::unwrap()` on an `Err` value: \
                     Torch(\"Expected all tensors to be on the same device, but got mat1 is on \
                     cpu\\nException raised from compute_types at aten/src/ATen/TensorIterator\
                     .cpp:254 (most recent call first):\\nframe #0: c10::Error::Error(..)\")";
        let summary = error_summary(panic);
        assert!(summary.ends_with("but got mat1 is on cpu"), "{summary}");
        let torch = "Internal torch error: boom\nException raised from f at a.cpp:1\nframe #0";
        assert_eq!(error_summary(torch), "Internal torch error: boom");
        assert_eq!(error_summary("one line"), "one line");
        let long = "x".repeat(SUMMARY_CHARS + 10);
        assert_eq!(error_summary(&long).chars().count(), SUMMARY_CHARS + 1);
    }
}
