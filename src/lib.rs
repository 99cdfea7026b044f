//! rtune: hyperparameter sweeps of distributed libtorch training, in the spirit of Ray Tune and
//! Ray Train.
//!
//! ```text
//! param space ──validate──▶ SearchSpace            (rtune-searchers: pure, seeded)
//!   Searcher::suggest ──▶ Params ──▶ Tuner controller ◀── TrialScheduler decisions
//!                                        │
//!                    resource pool: request ─▶ reserve (gang) ─▶ release        ◀── cluster
//!                                        │
//!      worker group: N worker processes (same binary, rtune::init())            ◀── group
//!         rendezvous ─▶ process group (ring all-reduce over TCP)                ◀── collective
//!                                        │
//!      user train fn (own thread) ─▶ ctx.report(metrics), with a checkpoint       ◀── worker
//!                                        │ worker protocol (gRPC; local reports: frames)
//!      run directory: params.json, result.json, progress.csv, checkpoints       ◀── storage
//! ```
//!
//! # Layers
//!
//! Imports point down only, and no two files import each other around a circle (both checked
//! by `tests/layers.rs`, which also keeps every file under 800 lines before its tests); a lower
//! layer tells a higher one what happened through a return value, a callback or a channel it
//! defines itself.
//!
//! ```text
//! 11 cli         the `rtune` command: sweep files (sweep/), the views of a sweep (ui/: format,
//!                model, then progress lines, the watch stream, the terminal UI), experiments
//!                on disk, cluster commands
//! 10 tune        Tuner (config, control, tuner), the controller core, the shell (sweep,
//!                trial_task), the experiment directory, the ResultGrid
//!    builtins    the demo's train functions (digits MLP, synthetic curve), on the public API
//! 9  train       TorchTrainer: attempts of a worker group (Ray Train)
//! 8  driver      what every run of the process shares: one runtime, hubs, the local pool
//! 7  group       driver side of a worker group: attempt state machine, launching, logs, hub
//! 6  cluster     resource pool, head, node agents, client   │  worker   the worker process:
//!                                                           │           init, TrainContext, link,
//!                                                           │           command trainables
//! 5  data        datasets, shards and batches, preprocessors, the shipped digits │ record
//!                a run's record: its result files, written and read back
//! 4  storage     result files, checkpoint folders
//! 3  config      run settings │ metrics  reports │ rpc  gRPC plumbing
//! 2  callback    hooks into a sweep, the TensorBoard logger
//! 1  error       the one error type │ torch  libtorch's errors into it
//! 0  collective  ring all-reduce, NCCL │ outcome  TrainResult, WorkerFailure, Checkpoint
//!    sys         supervised processes, build id, CUDA opened at run time │ proto  wire types
//!    log         tracing
//! ── rtune-core (its own crate: what needs no libtorch: layers 0-4 but `sys::cuda`,
//!    `collective::nccl` and the VarStore traits; `record`; `cluster` but the node agent;
//!    `tune`'s controller, config, control, experiment, trial and result grid. This crate
//!    re-exports its modules under their names and adds the rest to them)
//! ── rtune-searchers (its own crate: spaces, searchers, schedulers; no I/O)
//! ── rtune-cli (its own crate, on rtune-core: the command line's grammar and exit codes, the
//!    commands that need no libtorch (`completions`, `ls`, `show`, `watch`, `status`) and the
//!    views of a sweep (`ui`), and `rtune` itself, which links no libtorch and execs
//!    `rtune-torch`, this crate's CLI, for the other commands)
//! ```
//!
//! `init()` must be the first line of `main` in any binary that trains: worker processes are
//! that binary started again.

pub mod builtins;
pub use rtune_core::callback;
pub mod cli;
pub mod cluster;
pub mod collective;
pub use rtune_core::config;
pub mod data;
mod driver;
pub use rtune_core::error;
mod group;
pub use rtune_core::log;
pub use rtune_core::metrics;
pub use rtune_core::outcome;
use rtune_core::{proto, rpc};
pub mod storage;
mod sys;
mod torch;
pub mod train;
pub mod tune;
mod worker;

/// Search spaces, searchers and schedulers (the `rtune-searchers` crate), for sweeps:
/// `rtune::search::{SearchSpace, loguniform, choice, Asha, Tpe, ..}`.
pub use rtune_searchers as search;

pub use error::{Error, Result};
/// The polars rtune's tables are built with (`ResultGrid::dataframe`), for matching versions.
pub use polars;
pub use rtune_searchers::{Mode, Params};
pub use storage::{LoadVarStore, SaveVarStore};
/// CUDA opened at run time (see its docs): `rtune::cuda::load()` before any `tch::Cuda` call in
/// a program that wants a GPU outside a worker.
pub use sys::cuda;
pub use train::ExportCheckpoint;
pub use train::{
    Checkpoint, CheckpointConfig, CheckpointWriter, FailureConfig, PlacementStrategy, RunConfig,
    ScalingConfig, StoreSettings, TorchTrainer, TrainContext, TrainResult,
};
pub use tune::{ResultGrid, Scope, TrialResult, TuneConfig, Tuner};
pub use worker::{TrainFn, init};
