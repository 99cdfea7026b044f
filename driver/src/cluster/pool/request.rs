//! Placement groups as the caller sees them: what is asked for and where it was put.

use serde::{Deserialize, Serialize};

use super::ids::NodeId;
pub use super::ids::{PgId, Strategy};
use super::resources::Resources;

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
    pub(crate) fn new(strategy: Strategy, bundles: Vec<Resources>) -> Self {
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
    pub(crate) fn cuda_visible_devices(&self) -> String {
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
