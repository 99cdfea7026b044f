//! `ShardedModel`: data parallelism whose optimizer state is split across the ranks (ZeRO
//! stage 1), and with [`Sharding::Zero2`] the averaged gradients too (stage 2), as
//! `prepare_model_sharded` returns it.
//!
//! The trainable parameters, in name order, are one flat vector of `n` numbers cut into one
//! consecutive shard per rank, each `ceil(n / world)` long (the last padded with zeros, which
//! stay zero). A step:
//! 1. `backward`; every gradient copied into the flat vector;
//! 2. the gradients averaged across ranks: stage 1 all-reduces the whole vector, stage 2
//!    reduce-scatters it, each rank keeping only its shard (half the traffic of an all-reduce);
//! 3. the optimizer updates this rank's shard only, with its state (Adam's two moments, SGD's
//!    momentum) for that shard alone: 1/world of the unsharded state per rank;
//! 4. the updated shards all-gathered back into every rank's parameters.
//!
//! The optimizer is rtune's own ([`ShardOptimizer`]), op for op libtorch's: since every update
//! is element by element, a shard steps bit for bit as the same elements of the whole model
//! would under libtorch's optimizer. ZeRO-1 therefore trains bit for bit as `prepare_model`
//! with tch's optimizer of the same settings; ZeRO-2 as well with two ranks, and with more its
//! reduce-scatter adds the ranks' gradients in another order than the all-reduce, so the last
//! bits differ.
//!
//! CPU ranks only for now: the collectives are rtune's ring. A model on a GPU is refused (use
//! `prepare_model`) until NCCL's reduce-scatter and all-gather are built.

use tch::nn::VarStore;
use tch::{Kind, Tensor};

use super::context::{
    Backend, SharedGroup, broadcast_from_rank_0, gather_into, scatter_from, sorted_variables,
    trainable, with_f32_slice,
};
use super::shard_optimizer::{ShardOptimizer, ShardState};
use crate::collective::ReduceOp;
use crate::error::{Error, Result};

/// What a sharded model splits across its ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// The optimizer state (ZeRO-1): gradients are all-reduced whole, as in plain data
    /// parallelism (PyTorch's `ZeroRedundancyOptimizer`).
    Zero1,
    /// The optimizer state and the averaged gradients (ZeRO-2): gradients are reduce-scattered.
    Zero2,
}

/// A data-parallel model whose optimizer state (and with ZeRO-2 gradients) is sharded across
/// the ranks. See the module docs.
pub struct ShardedModel {
    group: SharedGroup,
    sharding: Sharding,
    settings: ShardOptimizer,
    /// The optimizer's state for `shard` alone.
    state: ShardState,
    params: Vec<Tensor>,
    /// The number of trainable parameters; every shard is `shard_len` long (the last ones
    /// padded with zeros past `n`), rank `r`'s starting at `r * shard_len`.
    n: usize,
    shard_len: usize,
    /// The whole flat vector, `world * shard_len` long: the gradients in, the gathered
    /// parameters out (every rank's shard lands where it belongs).
    flat: Tensor,
    /// This rank's parameters and their averaged gradient.
    shard: Tensor,
    grad: Tensor,
}

impl ShardedModel {
    pub(super) fn new(
        group: SharedGroup,
        vs: &VarStore,
        sharding: Sharding,
        optimizer: ShardOptimizer,
    ) -> Result<Self> {
        if vs.device().is_cuda() {
            return Err(Error::config(
                "prepare_model_sharded",
                "takes a model on the CPU for now (its collectives are the CPU ring; NCCL's \
                 reduce-scatter and all-gather are not built yet): use prepare_model for a GPU",
            ));
        }
        optimizer.check()?;
        let named = sorted_variables(vs);
        if let Some((name, t)) = named.iter().find(|(_, t)| t.kind() != Kind::Float) {
            return Err(Error::config(
                "prepare_model_sharded",
                format!("variable `{name}` is {:?}; a sharded model holds f32 variables", t.kind()),
            ));
        }
        let (rank, world) = {
            let g = group.borrow();
            (g.rank(), g.world_size())
        };
        // Rank 0's weights everywhere first, as `prepare_model` does.
        broadcast_from_rank_0(&Backend::Ring(group.clone()), &named)?;
        let params = trainable(named);
        let n: usize = params.iter().map(Tensor::numel).sum();
        let shard_len = n.div_ceil(world);
        let flat = Tensor::zeros([(shard_len * world) as i64], (Kind::Float, tch::Device::Cpu));
        let zeros = || Tensor::f_zeros([shard_len as i64], (Kind::Float, tch::Device::Cpu));
        let (shard, grad) = (zeros()?, zeros()?);
        {
            let _no_grad = tch::no_grad_guard();
            gather_into(&flat, &params, |t| t.shallow_clone())?;
            let mine = flat.f_narrow(0, (rank * shard_len) as i64, shard_len as i64)?;
            shard.shallow_clone().f_copy_(&mine)?;
        }
        Ok(ShardedModel {
            group,
            sharding,
            settings: optimizer,
            state: ShardState::new(&optimizer, shard_len)?,
            params,
            n,
            shard_len,
            flat,
            shard,
            grad,
        })
    }

    fn rank_and_world(&self) -> (usize, usize) {
        let g = self.group.borrow();
        (g.rank(), g.world_size())
    }

    /// `zero_grad`, `backward`, the sharded average of the gradients, this rank's optimizer
    /// step on its shard, and the all-gather of the updated parameters: one training step.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        for p in &self.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.f_zero_()?;
            }
        }
        loss.f_backward()?;
        let _no_grad = tch::no_grad_guard();
        gather_into(&self.flat, &self.params, Tensor::grad)?;
        self.average_gradients()?;
        self.settings.step(&mut self.state, &self.shard, &self.grad)?;
        self.gather_parameters()
    }

    /// Leaves this rank's shard of the averaged gradients in `grad`.
    fn average_gradients(&mut self) -> Result<()> {
        let (rank, world) = self.rank_and_world();
        let len = self.shard_len;
        let mut group = self.group.borrow_mut();
        if world > 1 && self.sharding == Sharding::Zero2 {
            let counts = vec![len; world];
            return with_f32_slice(&self.flat, |input| {
                with_f32_slice(&self.grad, |output| {
                    group.reduce_scatter(input, &counts, output, ReduceOp::Avg)
                })
            });
        }
        if world > 1 {
            // The parameters only, not the padding: the same all-reduce as `prepare_model`'s.
            let all = self.flat.f_narrow(0, 0, self.n as i64)?;
            with_f32_slice(&all, |all| group.all_reduce(all, ReduceOp::Avg))?;
        }
        self.grad.f_copy_(&self.flat.f_narrow(0, (rank * len) as i64, len as i64)?)?;
        Ok(())
    }

    /// Every rank's updated shard into every rank's parameters.
    fn gather_parameters(&mut self) -> Result<()> {
        if self.rank_and_world().1 == 1 {
            self.flat.f_copy_(&self.shard)?;
        } else {
            let mut group = self.group.borrow_mut();
            with_f32_slice(&self.shard, |input| {
                with_f32_slice(&self.flat, |output| group.all_gather(input, output))
            })?;
        }
        scatter_from(&self.flat, &self.params)
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match self.settings {
            ShardOptimizer::Sgd { lr, .. }
            | ShardOptimizer::Adam { lr, .. }
            | ShardOptimizer::AdamW { lr, .. } => lr,
        }
    }

    /// Bytes of optimizer state this rank holds: its shard's moments (or momentum), f32.
    pub fn optimizer_state_bytes(&self) -> usize {
        self.settings.moments() * self.shard_len * 4
    }

    /// This rank's parameters, as indices into the flat vector of them (in name order).
    pub fn shard_range(&self) -> std::ops::Range<usize> {
        let rank = self.rank_and_world().0;
        (rank * self.shard_len).min(self.n)..((rank + 1) * self.shard_len).min(self.n)
    }
}
