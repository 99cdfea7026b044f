//! The cluster (`rtune-core`'s `cluster`: the resource pool, the head, its client, the binary
//! cache, Slurm allocations), and the node agent (`node`), which probes CUDA for its workers.

pub use rtune_core::cluster::*;

pub mod node;
