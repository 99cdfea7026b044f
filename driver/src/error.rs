//! rtune's one error type. Errors a user can cause (a bad config, a metric that is not a number,
//! an unwritable path) say what was wrong, where, and what would be right.

use std::path::PathBuf;

use crate::outcome::TrainResult;
use crate::setting::{Field, Problems};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting that can never work, caught before anything starts.
    #[error("invalid {field}: {message}")]
    Config { field: Field, message: String },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("metric `{name}` {problem}")]
    Metric { name: String, problem: String },

    /// A dataset, its columns or a preprocessor that cannot work (names the dataset and column).
    #[error("data: {0}")]
    Data(String),

    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },

    /// The run failed for good (its failures exceeded `FailureConfig::max_failures`); the boxed
    /// result still holds everything reported and checkpointed before.
    #[error("{}", .0.error.as_deref().unwrap_or("training failed"))]
    TrainingFailed(Box<TrainResult>),

    /// Returned by `TrainContext::report` when the driver asked the run to stop. Propagate it
    /// with `?`: the worker treats it as a clean end, not a failure.
    #[error("the driver asked this run to stop")]
    StopRequested,

    #[error("worker: {0}")]
    Worker(String),

    #[error("{0}")]
    Protocol(String),

    #[error(transparent)]
    Collective(#[from] rtune_collective::CollectiveError),

    /// libtorch failed (a `tch::TchError`, boxed: this crate links no libtorch).
    #[error(transparent)]
    Torch(Box<dyn std::error::Error + Send + Sync>),

    #[error(transparent)]
    Params(#[from] rtune_searchers::Error),

    /// The object store the experiment is on failed an upload, a download or a listing.
    #[error("storage: {0}")]
    Storage(String),

    /// A sweep's callback failed (the sweep ends).
    #[error("callback {name}: {message}")]
    Callback { name: String, message: String },

    /// Building or writing a results table (polars).
    #[error("results table: {0}")]
    Table(#[from] polars::error::PolarsError),

    /// Another live driver holds the experiment's lease (`tune::lease`): nothing was touched.
    #[error(
        "{path} is being run by another driver ({holder}): `rtune stop {path}` ends it \
         resumably, or wait until it ends"
    )]
    Held { path: String, holder: String },

    /// Another driver took this one's experiment lease over (it was thought dead): this
    /// driver stopped its sweep, and the other one goes on with it.
    #[error("another driver took over {path} ({holder}); this one stopped")]
    LeaseLost { path: String, holder: String },

    /// The sweep was interrupted (`Control::interrupt`, Ctrl-C in `rtune run`); it stopped
    /// where it was and goes on with `Tuner::restore(path, ..)`.
    #[error(
        "interrupted; the experiment in {} goes on with `rtune resume` (Tuner::restore from Rust)",
        .path.display()
    )]
    Interrupted { path: PathBuf },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// As a sweep file's user reads it: a setting named by its key (`invalid `tune.metric`:
    /// ..`), not by the Rust API's name.
    pub fn in_sweep_terms(&self) -> String {
        match self {
            Error::Config { field: Field::Setting(setting), message } => {
                format!("invalid `{}`: {message}", setting.key())
            }
            other => other.to_string(),
        }
    }

    /// A mistake in the settings (a key's value, a metric no trial reports), which running the
    /// same settings again meets again.
    pub fn is_mistake(&self) -> bool {
        matches!(self, Error::Config { .. } | Error::Metric { .. })
    }

    /// A setting (a [`Setting`](crate::setting::Setting)) or something else named (a token, an
    /// environment variable) that can never work.
    pub fn config(field: impl Into<Field>, message: impl Into<String>) -> Self {
        Error::Config { field: field.into(), message: message.into() }
    }
}

/// The first of `problems` as an error; none: Ok.
pub(crate) fn first(problems: Problems) -> Result<()> {
    match problems.into_iter().next() {
        Some((setting, message)) => Err(Error::config(setting, message)),
        None => Ok(()),
    }
}

/// Attaches the path to an `io::Result`.
pub trait IoContext<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
