//! Ranks joining an elastic group in place: growth without a restart (see `worker::group`).
//!
//! At a report the driver may answer that ranks join. Each rank that was in the group
//! re-forms it with them (`Regroup`), then hands over from rank 0, in this order, what a
//! joiner's start takes: the model's variables (as a model's start broadcasts them), and its
//! optimizer's state, a header (each flat buffer's length, each variable's step count) then
//! the buffers. A joiner starts its train function from the checkpoint of that report; its
//! model's start (`DistributedModel`) takes the variables and the optimizer state, which its
//! optimizer takes at its first step. So the joiner's weights and moments are rank 0's, bit for
//! bit, and no rank reads the checkpoint's weights into a running group.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::buckets::{ModelGroup, broadcast_from_rank_0, gather_into, scatter_from};
use super::group::{OptimizerState, SharedGroup};
use crate::torch::TorchResult;
use rtune_driver::error::{Error, Result};

/// What rank 0 says of its optimizer's state before sending the buffers.
#[derive(Serialize, Deserialize)]
struct Header {
    lens: Vec<i64>,
    steps: Vec<i64>,
}

/// This rank's part when ranks join its group at a report: it re-forms the group with them,
/// then hands them its model's variables and optimizer state from rank 0.
pub(super) fn take_in(group: &SharedGroup) -> Result<()> {
    group.grow()?;
    let backend = ModelGroup::Ring(group.clone());
    let (vars, optimizer) = group.handover();
    broadcast_from_rank_0(&backend, &vars)?;
    hand_over_optimizer(&backend, optimizer.as_ref())?;
    Ok(())
}

/// Rank 0's optimizer state to every rank (see the module docs): into `held` on the ranks
/// that hold one; a rank that just joined (None) gets what it was handed.
pub(super) fn hand_over_optimizer(
    backend: &ModelGroup,
    held: Option<&OptimizerState>,
) -> Result<Option<OptimizerState>> {
    let group = backend.group().ok_or_else(|| {
        Error::Worker("ranks join in place on the CPU ring only, not through NCCL".into())
    })?;
    let mut header = match backend.rank() {
        0 => {
            let (lens, steps) = match held {
                Some(s) => (s.buffers.iter().map(|b| b.numel() as i64).collect(), s.steps.clone()),
                None => (Vec::new(), Vec::new()),
            };
            serde_json::to_vec(&Header { lens, steps }).expect("the header serialises")
        }
        _ => Vec::new(),
    };
    group.borrow_mut().broadcast_bytes(&mut header, 0)?;
    let header: Header = serde_json::from_slice(&header)
        .map_err(|e| Error::Protocol(format!("rank 0's optimizer state header: {e}")))?;
    let mut handed = Vec::new();
    for (i, &len) in header.lens.iter().enumerate() {
        let flat = Tensor::f_zeros([len], (Kind::Float, Device::Cpu)).torch()?;
        let mine = held.and_then(|s| s.buffers.get(i)).map(Tensor::shallow_clone);
        if let Some(mine) = &mine {
            if mine.numel() as i64 != len {
                return Err(Error::Worker(format!(
                    "this rank's optimizer state buffer {i} holds {} numbers, rank 0's {len}",
                    mine.numel()
                )));
            }
            gather_into(&flat, std::slice::from_ref(mine), Tensor::shallow_clone)?;
        }
        backend.broadcast(&flat, 0)?;
        match mine {
            Some(mine) => scatter_from(&flat, &[mine])?,
            None => handed.push(flat),
        }
    }
    Ok(held.is_none().then_some(OptimizerState { buffers: handed, steps: header.steps }))
}
