//! rtune's driver: everything that plans, places, launches and records trials, and links no
//! libtorch. Settings, storage and a run's records, the trackers, the resource pool with its
//! head, node agents and client, worker groups, their attempts and their backends' driver
//! half, `TorchTrainer` and its run with its failure and scaling policies, the `Tuner` with its
//! controller and shell, experiments and result grids, and data preparation with polars. The
//! worker's side, which touches tensors (the train function's `TrainContext`, models,
//! optimizers, NCCL and CUDA), is the `rtune` crate's; the CPU collectives are
//! `rtune-collective`'s.
//!
//! What users are promised is what `rtune` re-exports by name (`rtune::tune::Tuner`,
//! `rtune::config::RunConfig`, ..): use them from there. Every other `pub` item here is
//! plumbing for rtune's own crates (`rtune`, `rtune-cli`) and may change with them.

pub mod callback;
pub mod cluster;
pub mod config;
pub mod data;
pub mod error;
pub mod group;
pub mod log;
pub mod metrics;
pub mod monitor;
pub mod outcome;
pub mod proto;
pub mod record;
pub mod rpc;
pub mod runtime;
pub mod serve;
pub mod setting;
pub mod storage;
pub mod sys;
pub mod train;
pub mod tune;
