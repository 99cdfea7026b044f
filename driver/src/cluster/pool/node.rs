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
    /// from the number of `/dev/nvidia<N>` device files, memory from `/proc/meminfo` (or the
    /// cgroup's limit where lower). The only function of the pool that looks
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
        let spec = Self::local(cpus as f64, u32::try_from(gpus).unwrap_or(u32::MAX));
        spec.memory_bytes(local_memory_bytes().unwrap_or(0))
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

/// This machine's memory, in bytes: `MemTotal` of `/proc/meminfo`, or the limit of the cgroup
/// the process runs in (a container's, a Slurm job's) where it is lower.
fn local_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let total = total_kib.saturating_mul(1024);
    // cgroup v2: the process's group from /proc/self/cgroup (`0::/PATH`), its memory.max.
    let limit = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|groups| {
        let path = groups.lines().find_map(|line| line.strip_prefix("0::"))?;
        let max = std::fs::read_to_string(format!("/sys/fs/cgroup{}/memory.max", path.trim()));
        max.ok()?.trim().parse::<u64>().ok()
    });
    Some(limit.map_or(total, |limit| limit.min(total)))
}
