//! rtune's driver: everything that plans, places, launches and records trials, and links no
//! libtorch. Settings, storage and a run's records, the trackers, the resource pool with its
//! head, node agents and client, the CPU collectives, worker groups and their attempts,
//! `TorchTrainer` and its retry policy, the `Tuner` with its controller and shell, experiments
//! and result grids, and data preparation with polars. The worker's side, which touches tensors
//! (the train function's `TrainContext`, models, optimizers, NCCL and CUDA), is the `rtune`
//! crate's; it re-exports this crate's modules whole (`rtune::tune`, `rtune::config`, ..): use
//! them from there.

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
pub mod setting;
pub mod storage;
pub mod sys;
pub mod train;
pub mod tune;
