//! A Backend per framework, the worker's half (Ray Train's `Backend.on_start` and
//! `on_shutdown`, run in each rank): what a rank sets up around its train function once its
//! group is whole, from what the driver's half (`rtune::train::TorchConfig`, a
//! `rtune_driver::group::Backend`) told every rank, and what it tears down after.
//!
//! Every group's ranks have rtune's CPU ring first (`worker::group`: each rank's place, the
//! barrier, `TrainContext::all_reduce`, and what a backend bootstraps over); a backend adds its
//! framework's on top. Torch's (`torch`): the device's CUDA runtime, and the process group
//! each model averages through (the ring, NCCL, or the ring through the host for ranks that
//! share a GPU). The tree libraries' (`trees`): the library's own collective (XGBoost's
//! tracker and communicator, LightGBM's network).

mod torch;
mod trees;

use std::time::Duration;

use tch::Device;

use crate::worker::group::SharedGroup;
use rtune_driver::error::{Error, Result};
use rtune_driver::group::{TorchConfig, TreeBackend};
pub(crate) use torch::TorchBackend;

/// The worker's half of a framework's backend (see the module docs).
pub(crate) trait Backend {
    /// The name its halves go by.
    fn name(&self) -> &'static str;

    /// The Torch backend, for what only it offers (`prepare_model`); None for another.
    fn torch(&mut self) -> Option<&mut TorchBackend> {
        None
    }

    /// The train function has returned: what the backend set up goes, before the rank tells
    /// the driver how it ended (the group's ring stays open until then).
    fn on_shutdown(&mut self);
}

/// What a rank's backend starts from.
pub(crate) struct Start<'a> {
    /// What the driver's half said (JSON).
    pub setup: &'a str,
    pub device: Device,
    pub group: &'a SharedGroup,
    /// Rank 0's collective address, where every rank reaches it.
    pub master_host: &'a str,
    /// Every rank's collective host, in rank order.
    pub hosts: &'a [String],
    /// How long a collective may wait for a peer.
    pub timeout: Duration,
}

/// Sets up the backend the driver named, `name`.
pub(crate) fn on_start(name: &str, start: &Start<'_>) -> Result<Box<dyn Backend>> {
    match name {
        TorchConfig::NAME => {
            Ok(Box::new(TorchBackend::on_start(start.setup, start.device, start.group.clone())?))
        }
        TreeBackend::XGBOOST => Ok(Box::new(trees::XGBoostBackend::on_start(start)?)),
        TreeBackend::LIGHTGBM => Ok(Box::new(trees::LightGBMBackend::on_start(start)?)),
        other => Err(Error::Protocol(format!(
            "the driver asked for backend {other:?}, which this worker's rtune does not have"
        ))),
    }
}
