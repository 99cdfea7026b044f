//! The layers of rtune that need no libtorch (0 to 4 of `rtune`'s layout, less CUDA and NCCL;
//! the run's record; the parts of `tune` that read and write experiments), in a crate of their own so that programs which train nothing can use them without loading
//! libtorch. `rtune` re-exports every module here under its own name (`rtune::config`,
//! `rtune::storage`, ..): use them from there.

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
