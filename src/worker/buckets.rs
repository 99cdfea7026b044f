//! How a model's buffers travel between ranks (`ModelGroup`: the CPU ring or NCCL, as the
//! Torch backend chose), and the flat buffers they travel in: tensors gathered into one, sent,
//! and scattered back.

use std::cell::RefCell;
use std::rc::Rc;

use tch::{Device, Kind, Tensor};

use crate::torch::TorchResult;
use crate::worker::group::SharedGroup;
use rtune_collective::ReduceOp;
use rtune_driver::error::{Error, Result};

pub(crate) type SharedNccl = Rc<RefCell<crate::nccl::NcclGroup>>;

/// Gradients of up to this many f32 values are all-reduced in one call (PyTorch DDP's 25 MB).
pub(super) const BUCKET_ELEMS: usize = 25 * 1024 * 1024 / 4;

/// The process group a model's buffers travel through, as the Torch backend chose it for the
/// model's device (`TorchBackend::model_group`).
pub(crate) enum ModelGroup {
    /// rtune's ring all-reduce over TCP, through CPU buffers.
    Ring(SharedGroup),
    /// NCCL, through buffers on the model's GPU.
    Nccl(SharedNccl, Device),
}

impl ModelGroup {
    /// The CPU ring's group (None for NCCL).
    pub(super) fn group(&self) -> Option<&SharedGroup> {
        match self {
            ModelGroup::Ring(g) => Some(g),
            ModelGroup::Nccl(..) => None,
        }
    }

    pub(super) fn rank(&self) -> usize {
        match self {
            ModelGroup::Ring(g) => g.borrow().rank(),
            ModelGroup::Nccl(n, _) => n.borrow().rank(),
        }
    }

    pub(super) fn world_size(&self) -> usize {
        match self {
            ModelGroup::Ring(g) => g.borrow().world_size(),
            ModelGroup::Nccl(n, _) => n.borrow().world_size(),
        }
    }

    /// Where the flat buffers live.
    pub(super) fn device(&self) -> Device {
        match self {
            ModelGroup::Ring(_) => Device::Cpu,
            ModelGroup::Nccl(_, device) => *device,
        }
    }

    pub(super) fn all_reduce(&self, flat: &Tensor, op: ReduceOp) -> Result<()> {
        super::timing::collective(bytes(flat), || match self {
            ModelGroup::Ring(g) => with_f32_slice(flat, |s| g.borrow_mut().all_reduce(s, op)),
            ModelGroup::Nccl(n, _) => Ok(n.borrow_mut().all_reduce(flat, op)?),
        })
    }

    pub(super) fn broadcast(&self, flat: &Tensor, root: usize) -> Result<()> {
        super::timing::collective(bytes(flat), || match self {
            ModelGroup::Ring(g) => with_f32_slice(flat, |s| g.borrow_mut().broadcast(s, root)),
            ModelGroup::Nccl(n, _) => Ok(n.borrow_mut().broadcast(flat, root)?),
        })
    }

    /// Reduces `flat` across ranks, leaving each rank its piece (`output`'s length, the same
    /// on every rank) in `output`; `flat` is scratch.
    pub(super) fn reduce_scatter(
        &self,
        flat: &Tensor,
        output: &Tensor,
        op: ReduceOp,
    ) -> Result<()> {
        super::timing::collective(bytes(flat), || match self {
            ModelGroup::Ring(g) => {
                let counts = vec![output.numel(); self.world_size()];
                with_f32_slice(flat, |input| {
                    with_f32_slice(output, |out| {
                        g.borrow_mut().reduce_scatter(input, &counts, out, op)
                    })
                })
            }
            ModelGroup::Nccl(n, _) => Ok(n.borrow_mut().reduce_scatter(flat, output, op)?),
        })
    }

    /// Every rank's `piece` in rank order into `flat`.
    pub(super) fn all_gather(&self, piece: &Tensor, flat: &Tensor) -> Result<()> {
        super::timing::collective(bytes(piece), || match self {
            ModelGroup::Ring(g) => with_f32_slice(piece, |input| {
                with_f32_slice(flat, |output| g.borrow_mut().all_gather(input, output))
            }),
            ModelGroup::Nccl(n, _) => Ok(n.borrow_mut().all_gather(piece, flat)?),
        })
    }
}

/// The bytes of a flat f32 buffer.
fn bytes(flat: &Tensor) -> usize {
    flat.numel() * std::mem::size_of::<f32>()
}

/// Consecutive tensors of a list (`range`) and the flat buffer they travel through.
pub(super) struct Bucket {
    pub(super) range: std::ops::Range<usize>,
    pub(super) flat: Tensor,
}

/// Copies rank 0's variables `all` (every one of a model, trainable or not, in name order) to
/// every rank, a bucket at a time.
pub(super) fn broadcast_from_rank_0(backend: &ModelGroup, all: &[Tensor]) -> Result<()> {
    if backend.world_size() == 1 {
        return Ok(());
    }
    let _no_grad = tch::no_grad_guard();
    for bucket in buckets_of(all, backend.device()) {
        let flat = &bucket.flat;
        gather_into(flat, &all[bucket.range.clone()], |t| t.shallow_clone())?;
        backend.broadcast(flat, 0)?;
        scatter_from(flat, &all[bucket.range])?;
    }
    Ok(())
}

pub(super) fn buckets_of(tensors: &[Tensor], device: Device) -> Vec<Bucket> {
    let mut buckets = Vec::new();
    let (mut start, mut elems) = (0, 0);
    for (i, t) in tensors.iter().enumerate() {
        let n = t.numel();
        if elems > 0 && elems + n > BUCKET_ELEMS {
            buckets.push(Bucket {
                range: start..i,
                flat: Tensor::zeros([elems as i64], (Kind::Float, device)),
            });
            (start, elems) = (i, 0);
        }
        elems += n;
    }
    if elems > 0 {
        buckets.push(Bucket {
            range: start..tensors.len(),
            flat: Tensor::zeros([elems as i64], (Kind::Float, device)),
        });
    }
    buckets
}

/// Copies each tensor (via `pick`, e.g. its gradient) into consecutive parts of `flat`.
pub(super) fn gather_into(
    flat: &Tensor,
    tensors: &[Tensor],
    pick: impl Fn(&Tensor) -> Tensor,
) -> Result<()> {
    let mut offset = 0;
    for t in tensors {
        let n = t.numel() as i64;
        let mut part = flat.f_narrow(0, offset, n).torch()?;
        let src = pick(t);
        if src.defined() {
            part.f_copy_(&src.f_reshape([-1]).torch()?).torch()?;
        } else {
            let _ = part.f_zero_().torch()?;
        }
        offset += n;
    }
    Ok(())
}

/// Copies consecutive parts of `flat` back into `tensors` (converting dtype and device).
pub(super) fn scatter_from(flat: &Tensor, tensors: &[Tensor]) -> Result<()> {
    let mut offset = 0;
    for t in tensors {
        let n = t.numel() as i64;
        if t.defined() {
            let mut dst = t.shallow_clone();
            dst.f_copy_(&flat.f_narrow(0, offset, n).torch()?.f_view_as(t).torch()?).torch()?;
        }
        offset += n;
    }
    Ok(())
}

/// Runs `f` on the f32 storage of a contiguous CPU float tensor: one of the flat buffers this
/// module and `sharded` make and own (calls nest, each on another buffer).
fn with_f32_slice<T, E: Into<Error>>(
    flat: &Tensor,
    f: impl FnOnce(&mut [f32]) -> std::result::Result<T, E>,
) -> Result<T> {
    debug_assert!(
        flat.is_contiguous() && flat.kind() == Kind::Float && flat.device() == Device::Cpu
    );
    let len = flat.numel();
    // SAFETY: `flat` is a contiguous CPU f32 tensor of `len` elements that we own (made by
    // `buckets_of`, or by `sharded`); nothing else reads or writes it while `f` runs.
    let slice = unsafe { std::slice::from_raw_parts_mut(flat.data_ptr() as *mut f32, len) };
    f(slice).map_err(Into::into)
}
