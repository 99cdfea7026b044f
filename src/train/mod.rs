//! Ray Train's half: one distributed training run, usable on its own without a Tuner.
//!
//! `TorchTrainer::fit` validates the configs, makes the run directory, starts the worker hub and
//! runs attempts of the worker group until one completes or the failures exceed
//! `FailureConfig::max_failures`. After a failure the next attempt resumes from the latest
//! checkpoint, and the reports made after that checkpoint are rolled back (in memory and in
//! result.json / progress.csv), so the history holds every iteration exactly once.
//! Scheduling decisions (stop a trial early) come from the Tuner, not from here.

mod batch_predict;
mod command;
mod export;
mod predictor;
mod trainer;

pub use crate::config::{
    CheckpointConfig, CheckpointUpload, FailureConfig, PlacementStrategy, RunConfig, ScalingConfig,
    StoreSettings,
};
pub use crate::metrics::{IntoMetrics, Metrics};
pub use crate::outcome::{Checkpoint, TrainResult, WorkerFailure};
pub use crate::storage::checkpoint::{CheckpointMetadata, CheckpointWriter, checkpoint_name};
pub use batch_predict::{BatchPredictor, Predicted};
pub use command::CommandTrainable;
pub use export::{Export, ExportCheckpoint, METRICS_FILE, Model, PARAMS_FILE, TORCHSCRIPT_FILE};
pub use predictor::TorchPredictor;
pub(crate) use rtune_core::record::{self, read_run};
pub use trainer::TorchTrainer;
pub(crate) use trainer::{DATASETS_DIR, Steering, unread_note};

#[allow(deprecated)]
pub use crate::worker::ShardOptimizer;
pub use crate::worker::{
    DistributedModel, ModelOptimizer, OptimizerSettings, OptimizerStep, REPORT_PREFIX,
    ShardedModel, Sharding, TrainContext, TrainFn, run_command,
};
