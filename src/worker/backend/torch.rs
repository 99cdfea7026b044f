//! The Torch backend's worker half: a GPU rank opens the CUDA runtime before anything asks
//! libtorch about CUDA (see `crate::cuda`), and each model gets the process group its device
//! calls for (`model_group`): rtune's ring for a model on the CPU; NCCL on the device for a
//! model on a GPU, bootstrapped over the ring on first use; the ring through the host where
//! the driver's half said so (ranks that share a physical GPU, which NCCL refuses, or a
//! config that asks for it).

use std::cell::RefCell;
use std::rc::Rc;

use rtune_driver::group::backend::{GpuCollective, TorchSetup};
use tch::Device;

use super::Backend;
use crate::worker::buckets::{ModelGroup, SharedNccl};
use crate::worker::group::SharedGroup;
use rtune_driver::error::{Error, Result};

pub(crate) struct TorchBackend {
    group: SharedGroup,
    gpu: GpuCollective,
    /// Made on first use by a model on a GPU, bootstrapped over `group`.
    nccl: Option<SharedNccl>,
}

impl TorchBackend {
    pub(super) fn on_start(setup: &str, device: Device, group: SharedGroup) -> Result<Self> {
        let setup: TorchSetup = serde_json::from_str(setup)
            .map_err(|e| Error::Protocol(format!("the Torch backend's setup {setup:?}: {e}")))?;
        if device.is_cuda() {
            // Before anything asks libtorch about CUDA (see `crate::cuda`).
            crate::cuda::load().map_err(|e| Error::Worker(e.to_string()))?;
        }
        Ok(TorchBackend { group, gpu: setup.gpu, nccl: None })
    }

    /// The process group a model on `device` averages through.
    pub(crate) fn model_group(&mut self, device: Device) -> Result<ModelGroup> {
        if !device.is_cuda() || self.group.shape().world == 1 {
            return Ok(ModelGroup::Ring(self.group.clone()));
        }
        if self.gpu == GpuCollective::HostRing {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::info!(
                    "GPU gradients are averaged through the CPU ring (ranks of this group share \
                     a GPU, which NCCL refuses, or the Torch config asks for the host ring)"
                )
            });
            return Ok(ModelGroup::Ring(self.group.clone()));
        }
        if self.nccl.is_none() {
            let nccl = crate::nccl::NcclGroup::new(&mut **self.group.borrow_mut())?;
            self.nccl = Some(Rc::new(RefCell::new(nccl)));
        }
        Ok(ModelGroup::Nccl(self.nccl.clone().expect("made above"), device))
    }
}

impl Backend for TorchBackend {
    fn name(&self) -> &'static str {
        rtune_driver::group::TorchConfig::NAME
    }

    fn torch(&mut self) -> Option<&mut TorchBackend> {
        Some(self)
    }

    fn on_shutdown(&mut self) {
        // The communicator is destroyed once the models holding it are gone too.
        self.nccl = None;
    }
}
