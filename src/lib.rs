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
//! # Crates and layers
//!
//! rtune is five crates, split by side: what decides (`rtune-searchers`: spaces, searchers,
//! schedulers; pure, no I/O), what runs trials (`rtune-driver`: plans, places, launches and
//! records them, with no libtorch), what a user types (`rtune-cli`: the command line's grammar,
//! its views and `rtune` itself, which links no libtorch), the CPU collectives a group's ranks
//! average through (`rtune-collective`, under both the driver and the worker side), and what
//! touches tensors (this crate: the worker side and models, plus the facade a user imports).
//! The facade names its items one by one (`rtune::tune::Tuner` is `rtune_driver::tune::Tuner`):
//! what it names is rtune's API; the driver's other `pub` items are plumbing for rtune's own
//! crates. This crate's code names the driver's modules as `rtune_driver::..`.
//!
//! Inside the driver and this crate, imports point down only, and no two files import each
//! other around a circle (both checked by `tests/layers.rs`, which also keeps every file under
//! 800 lines before its tests); a lower layer tells a higher one what happened through a return
//! value, a callback or a channel it defines itself.
//!
//! ```text
//! rtune (this crate), above all of the driver's:
//! 6  cli         the train functions and models this binary registers (`Registry`), which
//!                `rtune-cli`'s command line runs (it implements `rtune_cli::program::Torch`)
//! 5  builtins    the demo's train functions (digits MLP, synthetic curve), on the public API
//! 4  model       a trained model: export, TorchPredictor, BatchPredictor, TreeModel │ trees
//!                the tree trainers (XGBoostTrainer, LightGBMTrainer), their train functions
//!                and probes
//! 3  worker      the worker process: init, TrainContext, link, the group's backend (Torch:
//!                CUDA, each model's process group; the tree libraries' collectives),
//!                distributed and sharded models, optimizers, dataset shards and batches,
//!                command trainables
//! 2  nccl        NCCL behind the collective trait │ var_store  a VarStore in a checkpoint
//!    xgboost     XGBoost's C API (matrices, boosters, its tracker and communicator)
//!    lightgbm    LightGBM's C API (datasets, boosters, its network)
//!    digits      the 8x8 digits shipped with rtune
//! 1  torch       libtorch's errors, a table's tensors │ cuda  CUDA opened at run time
//! 0  native      the wheels' native libraries opened at run time (where, their C APIs)
//!
//! rtune-driver:
//! 10 tune        Tuner (config, control, tuner), the controller core, the shell (sweep,
//!                trial_task), the experiment directory and its lease, the ResultGrid
//! 9  train       TorchTrainer, and its run as states over two pure policies (failures,
//!                scaling) (Ray Train) │ monitor  the sweep's metrics endpoint for Prometheus
//! 8  runtime     what every run of the process shares: one runtime, hubs, the local pool
//! 7  group       driver side of a worker group: attempt state machine, launching, logs, hub,
//!                the Backend per framework's driver half (TorchConfig)
//! 6  cluster     resource pool, head, node agents, client
//! 5  data        datasets, their preparation, preprocessors │ record  a run's result files,
//!                written and read back
//! 4  storage     result files, checkpoint folders, object stores
//! 3  config      run settings │ metrics  reports │ rpc  gRPC plumbing
//! 2  callback    hooks into a sweep: TensorBoard, MLflow, Optuna's journal
//! 1  error       the one error type
//! 0  outcome     TrainResult, WorkerFailure, Checkpoint │ sys  supervised processes, build
//!                id, the CUDA probe, NVML
//!    proto       wire types │ log  tracing │ setting  each user setting's two names (the
//!                API's, the sweep file's), which configuration errors carry
//! ```
//!
//! # A sweep
//!
//! ```no_run
//! use rtune::search::{Asha, SearchSpace, choice, loguniform};
//! use rtune::{
//!     Mode, RunConfig, ScalingConfig, TorchTrainer, TrainContext, TuneConfig, Tuner,
//! };
//!
//! fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
//!     let (lr, hidden) = (ctx.params().get::<f64>("lr")?, ctx.params().get::<i64>("hidden")?);
//!     for _epoch in ctx.iteration()..20 {
//!         // ... train a model of width `hidden` with learning rate `lr` ...
//!         ctx.report([("val_acc", lr * hidden as f64)])?;
//!     }
//!     Ok(())
//! }
//!
//! fn main() -> anyhow::Result<()> {
//!     rtune::init();
//!     let trainer = TorchTrainer::new(train).scaling(ScalingConfig::workers(2));
//!     let space = SearchSpace::new()
//!         .add("lr", loguniform(1e-4, 1e-1)?)
//!         .add("hidden", choice([32, 64, 128]));
//!     let grid = Tuner::new(trainer, space)
//!         .tune_config(
//!             TuneConfig::new()
//!                 .metric("val_acc")
//!                 .mode(Mode::Max)
//!                 .num_samples(16)
//!                 .scheduler(Asha::new().max_t(20).grace_period(2)),
//!         )
//!         .run_config(RunConfig::new("digits_sweep"))
//!         .fit()?;
//!     let best = grid.best_result()?;
//!     println!("{:?} {:?}", best.params(), best.last("val_acc"));
//!     println!("{}", grid.dataframe()?);
//!     Ok(())
//! }
//! ```
//!
//! `init()` must be the first line of `main` in any binary that trains: worker processes are
//! that binary started again.

pub mod builtins;
pub mod cli;
pub mod cuda;
pub mod digits;
mod lightgbm;
pub mod model;
mod native;
mod nccl;
mod torch;
pub mod trees;
mod var_store;
pub mod worker;
mod xgboost;

// rtune's API: the items below, by name (as Ray groups them). The driver's other items are
// plumbing for rtune's own crates, not promised to users.

/// Search spaces, searchers and schedulers (the `rtune-searchers` crate), for sweeps:
/// `rtune::search::{SearchSpace, loguniform, choice, Asha, Tpe, ..}`.
pub use rtune_searchers as search;

/// The CPU collectives (the `rtune-collective` crate): the ring a group's ranks average
/// through, `ReduceOp` for [`TrainContext::all_reduce`].
pub use rtune_collective as collective;

/// The polars rtune's tables are built with (`ResultGrid::dataframe`), for matching versions.
pub use polars;

/// Sweeps (Ray Tune): the `Tuner`, its settings, and what it returns.
pub mod tune {
    pub use rtune_driver::tune::{
        Checked, Control, ResultGrid, Samples, Scope, TrialResult, TuneConfig, Tuner,
    };
}

/// One distributed training run (Ray Train): the trainer, its backend's settings, command
/// trainables.
pub mod train {
    pub use rtune_driver::train::{CommandTrainable, TorchConfig, TorchTrainer};
}

/// A run's settings (Ray's `ScalingConfig`, `RunConfig`, `FailureConfig`, `CheckpointConfig`).
pub mod config {
    pub use rtune_driver::config::{
        ADDRESS_ENV, CheckpointConfig, CheckpointUpload, FailureConfig, MAX_WORKERS,
        PlacementStrategy, RunConfig, ScalingConfig, Sharding, StoreSettings, TOKEN_ENV,
    };
}

/// Datasets, their columns and preprocessors (see the guide's docs/data.md).
pub mod data {
    /// A rank's rows of a dataset, in batches (`ctx.dataset_shard("train")?.iter_batches(..)`).
    pub use crate::worker::{Balance, BatchSpec, Batches, DatasetShard};
    pub use rtune_driver::data::{
        Chain, Columns, Dataset, Fill, LabelKind, MinMaxScaler, OneHotEncoder, OrdinalEncoder,
        Preprocessor, SimpleImputer, StandardScaler, Strategy, UNKNOWN_CATEGORY, Unknown,
    };
}

/// Hooks into a sweep, and the trackers built on them (MLflow, Optuna's journal,
/// TensorBoard).
pub mod callback {
    pub use rtune_driver::callback::{
        Amount, Callback, EndedTrial, ExperimentInfo, MlflowLogger, OptunaJournal,
        TensorBoardLogger, TrialInfo,
    };
}

/// The sweep's metrics endpoint, for Prometheus.
pub mod monitor {
    pub use rtune_driver::monitor::{Monitor, serve};
}

/// rtune's logging.
pub mod log {
    pub use rtune_driver::log::quiet_stderr;
}

/// The settings a configuration error names (`Error::Config`), by their API and sweep-file
/// names.
pub mod setting {
    pub use rtune_driver::setting::{Field, Setting};
}

pub use model::ExportCheckpoint;
pub use rtune_driver::config::{
    CheckpointConfig, FailureConfig, PlacementStrategy, RunConfig, ScalingConfig, StoreSettings,
};
pub use rtune_driver::error::{Error, Result};
pub use rtune_driver::metrics::IntoMetrics;
pub use rtune_driver::outcome::{Checkpoint, TrainResult, WorkerFailure};
pub use rtune_driver::storage::checkpoint::CheckpointWriter;
pub use rtune_driver::train::{TorchConfig, TorchTrainer};
pub use rtune_driver::tune::{ResultGrid, Scope, TrialResult, TuneConfig, Tuner};
pub use rtune_searchers::{Mode, Params};
pub use trees::{LightGBMTrainer, XGBoostTrainer};
pub use var_store::{LoadVarStore, SaveVarStore};
pub use worker::{TrainContext, TrainFn, init};

/// The README's Rust sweep and the guide's Rust snippets, compiled as doc tests (`cargo test
/// --doc`) so that the pages' code stays code that builds (tests/integration/docs.rs checks
/// that every page with a `rust` block is here).
#[cfg(doctest)]
mod pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/crate.md")]
    struct Crate;
    #[doc = include_str!("../docs/data.md")]
    struct Data;
    #[doc = include_str!("../docs/features.md")]
    struct Features;
    #[doc = include_str!("../docs/trees.md")]
    struct Trees;
}
