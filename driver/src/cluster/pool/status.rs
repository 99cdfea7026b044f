//! A serialisable snapshot of the pool for the status stream, the TUI and `rtune ls`.

use serde::{Deserialize, Serialize};

use super::node::NodeId;
use super::request::{BundlePlacement, PgId, Strategy};
use super::resources::Resources;
pub use crate::sys::nvml::GpuUsage;

/// Everything the pool holds, ordered by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// All nodes ever added, dead ones included.
    pub nodes: Vec<NodeStatus>,
    /// Pending and reserved placement groups (released and cancelled ones are gone).
    /// Named `placement_groups` in JSON, as `rtune status --format json` prints it.
    #[serde(rename = "placement_groups")]
    pub groups: Vec<GroupStatus>,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Its id.
    pub id: NodeId,
    /// Its address as given in its spec.
    pub address: String,
    /// Whether it takes part in scheduling.
    pub alive: bool,
    /// What it offers.
    pub total: Resources,
    /// What is not reserved (nothing on a dead node).
    pub free: Resources,
    /// Free share of each GPU device, by device id.
    pub gpu_free: Vec<f64>,
    /// Why the node's GPUs are not offered: its workers could not use them (the node agent's
    /// CUDA probe said so when it joined). Filled in by the head; the pool does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_error: Option<String>,
    /// What its GPUs are doing, as its agent last reported (NVML; none where it has none).
    /// Filled in by the head.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuUsage>,
}

/// One placement group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// Its id.
    pub id: PgId,
    /// The request's label.
    pub label: String,
    /// The request's strategy.
    pub strategy: Strategy,
    /// Pending or reserved.
    #[serde(flatten)]
    pub state: GroupState,
    /// The request's bundles and, once reserved, where each one is.
    pub bundles: Vec<BundleStatus>,
}

/// Where a group is in its lifecycle (request → reserved → released; released groups are gone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GroupState {
    /// Waiting in the queue.
    Pending {
        /// 0 for the oldest pending request.
        queue_position: usize,
        /// Scheduling passes in which a younger request was reserved while this one waited.
        overtaken: u32,
        /// Whether this request holds the anchor: nodes are being kept for it (see the module
        /// docs on fairness).
        anchored: bool,
    },
    /// Holding its resources.
    Reserved,
    /// Lost the bundles in `lost_bundles` with their node(s); still holds the others until its
    /// workers there have exited and it is released.
    Draining { lost_bundles: Vec<usize> },
}

/// One bundle of a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleStatus {
    /// What it asks for.
    pub resources: Resources,
    /// Where it is, once reserved.
    pub placement: Option<BundlePlacement>,
}
