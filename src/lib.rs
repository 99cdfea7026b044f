//! rtune: hyperparameter sweeps of distributed libtorch training, in the spirit of Ray Tune and
//! Ray Train.
//!
//! ```text
//! param space ──validate──▶ SearchSpace            (rtune-searchers: pure, seeded)
//!   Searcher::suggest ──▶ Params ──▶ Tuner controller ◀── TrialScheduler decisions
//!                                        │
//!                    resource pool: request ─▶ reserve (gang) ─▶ release
//!                                        │
//!      worker group: N worker processes (same binary, rtune::init())     ◀── this crate: worker
//!         rendezvous ─▶ process group (ring all-reduce over TCP)          ◀── collective
//!                                        │
//!      user train fn (own thread) ─▶ ctx.report(metrics, checkpoint)      ◀── train
//!                                        │ worker protocol (gRPC)
//!      run directory: params.json, result.json, progress.csv, checkpoints ◀── storage
//! ```
//!
//! Modules in pipeline order. `init()` must be the first line of `main` in any binary that
//! trains: worker processes are that binary started again.

pub mod cluster;
pub mod collective;
pub mod config;
pub mod data;
pub mod error;
mod group;
pub mod metrics;
pub mod outcome;
mod rpc;
pub mod storage;
mod sys;
pub mod train;
mod worker;

pub(crate) mod proto {
    tonic::include_proto!("rtune.v1");
}

pub use error::{Error, Result};
pub use rtune_searchers::{Mode, Params};
pub use train::{
    Checkpoint, CheckpointConfig, CheckpointWriter, FailureConfig, PlacementStrategy, RunConfig,
    ScalingConfig, TorchTrainer, TrainContext, TrainResult,
};
pub use worker::init;
