//! Placement groups as the caller sees them: what is asked for and where it was put.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::node::NodeId;
use super::resources::Resources;

/// Identifies a placement group. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PgId(pub u64);

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How the bundles of a group may be laid out over nodes (Ray's placement strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    /// As few nodes as possible, best effort: one node when some node holds everything,
    /// otherwise spill over onto more nodes.
    Pack,
    /// Distinct nodes, best effort: one bundle per node when enough nodes have room, otherwise
    /// nodes are shared as evenly as possible.
    Spread,
    /// All bundles on one node, or not at all.
    StrictPack,
    /// Every bundle on a different node, or not at all.
    StrictSpread,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Pack => "PACK",
            Strategy::Spread => "SPREAD",
            Strategy::StrictPack => "STRICT_PACK",
            Strategy::StrictSpread => "STRICT_SPREAD",
        })
    }
}

/// A request for a placement group: one bundle per worker, reserved all together or not at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementRequest {
    /// One bundle per worker, in rank order; the reservation keeps this order.
    pub bundles: Vec<Resources>,
    /// How the bundles may be laid out.
    pub strategy: Strategy,
    /// Who asked (for example the trial id); only reported back.
    pub label: String,
}

impl PlacementRequest {
    /// A request for `bundles` laid out by `strategy`, without a label.
    pub fn new(strategy: Strategy, bundles: Vec<Resources>) -> Self {
        Self { bundles, strategy, label: String::new() }
    }

    /// `workers` identical bundles laid out by `strategy`.
    pub fn uniform(strategy: Strategy, workers: usize, bundle: Resources) -> Self {
        Self::new(strategy, vec![bundle; workers])
    }

    /// Sets the label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }
}

/// Where one bundle was put.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundlePlacement {
    /// The node holding the bundle.
    pub node: NodeId,
    /// GPU devices on that node (empty without GPUs); they become the worker's
    /// `CUDA_VISIBLE_DEVICES`.
    pub gpu_ids: Vec<u32>,
    /// Share of each device in `gpu_ids` the bundle holds: 1.0 for whole devices, below 1 for a
    /// shared device, 0 without GPUs.
    pub gpu_fraction: f64,
}

impl BundlePlacement {
    /// `gpu_ids` as the value of `CUDA_VISIBLE_DEVICES` (`"0,1"`; empty without GPUs).
    pub fn cuda_visible_devices(&self) -> String {
        let ids: Vec<String> = self.gpu_ids.iter().map(u32::to_string).collect();
        ids.join(",")
    }
}

/// A placement group that has just been reserved by [`Pool::schedule`](super::Pool::schedule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// The group.
    pub pg: PgId,
    /// The request's label.
    pub label: String,
    /// One placement per bundle, in the request's bundle order.
    pub bundles: Vec<BundlePlacement>,
}
