//! The parts of rtune that need no libtorch, in a crate of their own so that programs which
//! train nothing (`rtune ls`, `show`, `watch`, `status`) can use them without loading
//! libtorch: layers 0 to 4 of `rtune`'s layout less CUDA and NCCL, the run's record (`record`),
//! the cluster but its node agent, and the parts of `tune` that read and write experiments.
//! `rtune` re-exports every module here under its own name (`rtune::config`, `rtune::storage`,
//! ..): use them from there.

pub mod callback;
pub mod cluster;
pub mod collective;
pub mod config;
pub mod error;
pub mod log;
pub mod metrics;
pub mod outcome;
pub mod proto;
pub mod record;
pub mod rpc;
pub mod storage;
pub mod sys;
pub mod tune;
