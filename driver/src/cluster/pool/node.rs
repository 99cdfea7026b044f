//! Nodes as the caller describes them: an id, an address and the resources they offer.

use serde::{Deserialize, Serialize};

pub use super::ids::NodeId;
use super::resources::Resources;

/// What a node offers. GPUs must be a whole number; the node's devices get ids `0..gpu`, which
/// are the indices a worker sees in `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Where the node agent listens (`"local"` for the embedded default); the pool only reports it.
    pub address: String,
    /// Total resources.
    pub resources: Resources,
}

impl NodeSpec {
    /// A node at `address` offering `resources`.
    pub fn new(address: impl Into<String>, resources: Resources) -> Self {
        Self { address: address.into(), resources }
    }

    /// The embedded default: this machine, with the CPU and GPU counts the caller detected.
    pub fn local(cpus: f64, gpus: u32) -> Self {
        Self::new("local", Resources::new().cpu(cpus).gpu(f64::from(gpus)))
    }

    /// This machine as the OS describes it: CPUs from `std::thread::available_parallelism`, GPUs
    /// from the number of `/dev/nvidia<N>` device files. The only function of the pool that looks
    /// at the OS; override what it found with [`cpus`](Self::cpus) / [`gpus`](Self::gpus).
    ///
    /// The GPU ids handed out are indices `0..n`; when the process already runs under a
    /// `CUDA_VISIBLE_DEVICES` list, the caller maps them through it (and should pass its length).
    pub fn detect_local() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let gpus = std::fs::read_dir("/dev")
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .filter(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.strip_prefix("nvidia").is_some_and(|rest| {
                            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
                        })
                    })
                    .count()
            })
            .unwrap_or(0);
        Self::local(cpus as f64, u32::try_from(gpus).unwrap_or(u32::MAX))
    }

    /// Overrides the CPU count.
    pub fn cpus(mut self, cpus: f64) -> Self {
        self.resources.cpu = cpus;
        self
    }

    /// Overrides the GPU count.
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.resources.gpu = f64::from(gpus);
        self
    }

    /// Sets the memory in bytes.
    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.resources.memory_bytes = bytes;
        self
    }

    /// Adds a custom resource.
    pub fn custom(mut self, name: impl Into<String>, amount: f64) -> Self {
        self.resources.custom.insert(name.into(), amount);
        self
    }
}
