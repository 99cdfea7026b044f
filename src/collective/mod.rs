//! Collectives (`rtune-core`'s `collective`: the process group trait and the CPU ring), and NCCL
//! behind the same trait for GPU ranks (`nccl.rs`: libnccl opened at run time and bootstrapped
//! over the ring).

pub use rtune_core::collective::*;

mod nccl;

pub use nccl::NcclGroup;
