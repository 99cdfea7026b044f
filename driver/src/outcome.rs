//! What runs produce, as plain records: `TrainResult` (what `fit` returns), `WorkerFailure`
//! (why an attempt failed) and the `Checkpoint` handle. No I/O here: the methods that read a
//! checkpoint folder are in `storage::checkpoint`. A leaf, so the crate's `Error` can carry a
//! failed run's result without importing the trainer.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use rtune_searchers::{Metrics, Mode};

/// What `fit` returns (Ray's `Result`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainResult {
    /// The last report's metrics, with rtune's automatic ones.
    pub metrics: Option<Metrics>,
    /// The latest checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// The kept checkpoints, in the order `CheckpointConfig` keeps them by: best first by its
    /// `score_attribute`, else newest first. Which one is *the* best is [`CheckpointRanking`]'s.
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
    /// The best kept checkpoint of a run on its own: by `CheckpointConfig::score_attribute`
    /// when set, else the latest. (A sweep's trial ranks by the sweep's metric too:
    /// `TrialResult::checkpoint`.)
    pub fn best_checkpoint(&self) -> Option<&Checkpoint> {
        self.best_checkpoints.first().map(|(c, _)| c).or(self.checkpoint.as_ref())
    }

    /// The best kept checkpoint by `ranking`, else the latest (see [`CheckpointRanking`]).
    pub fn best_checkpoint_by(&self, ranking: &CheckpointRanking) -> Option<&Checkpoint> {
        ranking.best(&self.best_checkpoints).map(|(c, _)| c).or(self.checkpoint.as_ref())
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

/// Which of a run's kept checkpoints is its best: one rule for `TrialResult::checkpoint`, the
/// result grid, `rtune export --best`, `rtune predict --best` and the MLflow logger's artifact.
/// By `CheckpointConfig::score_attribute` when it is set; else by the sweep's metric and mode,
/// among the checkpoints whose report meets the sweep's constraints; else (no metric, or no
/// checkpoint's report has a finite value of it) the latest. See
/// `CheckpointConfig::ranking`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointRanking {
    /// The most recent.
    #[default]
    Latest,
    /// The best finite value of `metric` in `mode`, among reports that meet `constraints`
    /// (every one reported and <= 0); the latest of equals.
    By { metric: String, mode: Mode, constraints: Vec<String> },
}

impl CheckpointRanking {
    /// The rule: by `score` (a checkpoint score attribute and its order) when there is one,
    /// else by `sweep`'s metric and mode among reports that meet `constraints`, else the
    /// latest.
    pub fn of(
        score: Option<(&str, Mode)>,
        sweep: Option<(&str, Mode)>,
        constraints: &[String],
    ) -> CheckpointRanking {
        match (score, sweep) {
            (Some((attribute, order)), _) => CheckpointRanking::By {
                metric: attribute.to_owned(),
                mode: order,
                constraints: Vec::new(),
            },
            (None, Some((metric, mode))) => CheckpointRanking::By {
                metric: metric.to_owned(),
                mode,
                constraints: constraints.to_vec(),
            },
            (None, None) => CheckpointRanking::Latest,
        }
    }

    /// The best of `kept` (checkpoints with the metrics of their reports) by this rule; None
    /// when the rule picks none (`Latest`, or no report qualifies): then the latest is best.
    pub fn best<'k>(&self, kept: &'k [(Checkpoint, Metrics)]) -> Option<&'k (Checkpoint, Metrics)> {
        let CheckpointRanking::By { metric, mode, constraints } = self else { return None };
        let meets = |m: &Metrics| constraints.iter().all(|c| m.get(c).is_some_and(|v| *v <= 0.0));
        let score = |m: &Metrics| {
            let value = m.get(metric).copied().filter(|v| v.is_finite() && meets(m))?;
            Some(mode.sign() * value)
        };
        let iteration = |m: &Metrics| m.get("training_iteration").copied().unwrap_or(0.0);
        kept.iter()
            .filter_map(|k| Some((k, score(&k.1)?)))
            // The best score; among equals, the latest report.
            .max_by(|(a, x), (b, y)| {
                x.total_cmp(y).then(iteration(&a.1).total_cmp(&iteration(&b.1)))
            })
            .map(|(k, _)| k)
    }
}

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

    fn kept(reports: &[(u64, f64, f64)]) -> Vec<(Checkpoint, Metrics)> {
        reports
            .iter()
            .map(|&(iteration, acc, mem)| {
                let checkpoint = Checkpoint { path: format!("checkpoint_{iteration:06}").into() };
                let metrics = Metrics::from([
                    ("training_iteration".to_owned(), iteration as f64),
                    ("acc".to_owned(), acc),
                    ("mem_over".to_owned(), mem),
                ]);
                (checkpoint, metrics)
            })
            .collect()
    }

    /// By the metric among reports that meet the constraints (the latest of equals, NaN left
    /// out); none qualifying, or no metric: the rule picks none (the latest is best).
    #[test]
    fn the_best_checkpoint_is_the_best_feasible_report_else_none() {
        let kept = kept(&[
            (1, 0.5, -1.0),
            (2, 0.9, 3.0),
            (3, 0.7, -1.0),
            (4, 0.7, 0.0),
            (5, f64::NAN, -1.0),
        ]);
        let by = |metric: &str, mode, constraints: &[&str]| CheckpointRanking::By {
            metric: metric.into(),
            mode,
            constraints: constraints.iter().map(|c| c.to_string()).collect(),
        };
        let name = |rank: CheckpointRanking| rank.best(&kept).map(|(c, _)| c.name());
        assert_eq!(name(by("acc", Mode::Max, &[])).as_deref(), Some("checkpoint_000002"));
        assert_eq!(name(by("acc", Mode::Max, &["mem_over"])).as_deref(), Some("checkpoint_000004"));
        assert_eq!(name(by("acc", Mode::Min, &["mem_over"])).as_deref(), Some("checkpoint_000001"));
        assert_eq!(name(by("loss", Mode::Min, &[])), None);
        assert_eq!(name(by("acc", Mode::Max, &["unreported"])), None);
        assert_eq!(name(CheckpointRanking::Latest), None);
    }

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
