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
//! The optimizer is libtorch's own (`torch::optim`, as tch's optimizers are) over the shard as
//! its one variable: its state exists for the shard alone, and since every update is element by
//! element, a shard steps bit for bit as the same elements of the whole model would. ZeRO-1
//! therefore trains bit for bit as `prepare_model` with the same optimizer; ZeRO-2 as well with
//! two ranks, and with more its reduce-scatter adds the ranks' gradients in another order than
//! the all-reduce, so the last bits differ.
//!
//! CPU ranks only for now: the collectives are rtune's ring. A model on a GPU is refused (use
//! `prepare_model`) until NCCL's reduce-scatter and all-gather are built.

use tch::nn::{self, OptimizerConfig, VarStore};
use tch::{Kind, Tensor};

use super::context::{
    Backend, SharedGroup, broadcast_from_rank_0, gather_into, scatter_from, sorted_variables,
    trainable, with_f32_slice,
};
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

/// The optimizer a sharded model runs on its shard, with PyTorch's meaning of each setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShardOptimizer {
    /// SGD, with momentum when `momentum > 0` (`torch.optim.SGD`, dampening 0).
    Sgd { lr: f64, momentum: f64, weight_decay: f64, nesterov: bool },
    /// Adam, its weight decay an L2 term in the gradient (`torch.optim.Adam`).
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
    /// AdamW: decoupled weight decay (`torch.optim.AdamW`).
    AdamW { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
}

impl ShardOptimizer {
    /// Adam with PyTorch's defaults (betas 0.9, 0.999, eps 1e-8, no weight decay).
    pub fn adam(lr: f64) -> Self {
        ShardOptimizer::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }

    /// AdamW with PyTorch's defaults (weight decay 0.01).
    pub fn adamw(lr: f64) -> Self {
        ShardOptimizer::AdamW { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }

    /// SGD with `momentum` (0: none).
    pub fn sgd(lr: f64, momentum: f64) -> Self {
        ShardOptimizer::Sgd { lr, momentum, weight_decay: 0.0, nesterov: false }
    }

    /// libtorch's optimizer of these settings over `vs`.
    fn build(&self, vs: &VarStore) -> Result<nn::Optimizer> {
        Ok(match *self {
            ShardOptimizer::Sgd { lr, momentum, weight_decay, nesterov } => {
                nn::Sgd { momentum, dampening: 0.0, wd: weight_decay, nesterov }.build(vs, lr)?
            }
            ShardOptimizer::Adam { lr, beta1, beta2, eps, weight_decay } => {
                nn::Adam { beta1, beta2, wd: weight_decay, eps, amsgrad: false }.build(vs, lr)?
            }
            ShardOptimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                nn::AdamW { beta1, beta2, wd: weight_decay, eps, amsgrad: false }.build(vs, lr)?
            }
        })
    }

    /// Numbers of optimizer state per parameter (Adam's two moments, SGD's momentum).
    fn moments(&self) -> usize {
        match *self {
            ShardOptimizer::Sgd { momentum, .. } => usize::from(momentum != 0.0),
            _ => 2,
        }
    }

    fn check(&self) -> Result<()> {
        let (lr, rest): (f64, Vec<(&str, f64, bool)>) = match *self {
            ShardOptimizer::Sgd { lr, momentum, weight_decay, .. } => (
                lr,
                vec![
                    ("momentum", momentum, momentum >= 0.0),
                    ("weight_decay", weight_decay, weight_decay >= 0.0),
                ],
            ),
            ShardOptimizer::Adam { lr, beta1, beta2, eps, weight_decay }
            | ShardOptimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => (
                lr,
                vec![
                    ("beta1", beta1, (0.0..1.0).contains(&beta1)),
                    ("beta2", beta2, (0.0..1.0).contains(&beta2)),
                    ("eps", eps, eps >= 0.0),
                    ("weight_decay", weight_decay, weight_decay >= 0.0),
                ],
            ),
        };
        let mut all = vec![("lr", lr, lr >= 0.0)];
        all.extend(rest);
        match all.into_iter().find(|(_, value, ok)| !(value.is_finite() && *ok)) {
            Some((name, value, _)) => Err(Error::config(
                "ShardOptimizer",
                format!("`{name}` is {value}; betas lie in [0, 1), the others are finite and >= 0"),
            )),
            None => Ok(()),
        }
    }
}

/// A data-parallel model whose optimizer state (and with ZeRO-2 gradients) is sharded across
/// the ranks. See the module docs.
pub struct ShardedModel {
    group: SharedGroup,
    sharding: Sharding,
    settings: ShardOptimizer,
    /// libtorch's optimizer over `shard` alone: its state is the shard's.
    optimizer: nn::Optimizer,
    /// Holds `shard` as the optimizer's one variable.
    _shard_store: VarStore,
    params: Vec<Tensor>,
    /// The number of trainable parameters; every shard is `shard_len` long (the last ones
    /// padded with zeros past `n`), rank `r`'s starting at `r * shard_len`.
    n: usize,
    shard_len: usize,
    /// The whole flat vector, `world * shard_len` long: the gradients in, the gathered
    /// parameters out (every rank's shard lands where it belongs).
    flat: Tensor,
    /// This rank's parameters (the optimizer's variable) and its gradient (the variable's own
    /// `grad`, which the averaged gradient is written into).
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
        let shard_store = VarStore::new(tch::Device::Cpu);
        let shard = shard_store.root().f_zeros("shard", &[shard_len as i64])?;
        {
            let _no_grad = tch::no_grad_guard();
            gather_into(&flat, &params, |t| t.shallow_clone())?;
            let mine = flat.f_narrow(0, (rank * shard_len) as i64, shard_len as i64)?;
            shard.shallow_clone().f_copy_(&mine)?;
        }
        // The variable's gradient, made once (by the backward pass of its sum, then zeroed:
        // no temporary of its size) and written in place at every step.
        tch::with_grad(|| shard.f_sum(Kind::Float)?.f_backward())?;
        let mut grad = shard.grad();
        let _ = grad.f_zero_()?;
        if !grad.is_contiguous() {
            return Err(Error::Worker("the shard's gradient is not contiguous".into()));
        }
        Ok(ShardedModel {
            group,
            sharding,
            settings: optimizer,
            optimizer: optimizer.build(&shard_store)?,
            _shard_store: shard_store,
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
        // libtorch's optimizer on the shard; its gradient is already in place (no zero_grad:
        // libtorch's would drop the gradient tensor itself).
        self.optimizer.step();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// libtorch's optimizer run on shards of a variable (uneven, as the ranks cut it) against
    /// the same optimizer on the whole variable, 50 steps of the same gradients: how many
    /// elements differ at the end.
    fn shards_against_whole(settings: ShardOptimizer, cuts: &[i64]) -> usize {
        tch::manual_seed(0);
        let whole = VarStore::new(tch::Device::Cpu);
        let w = whole.root().randn("w", &[cuts.iter().sum::<i64>()], 0.0, 1.0);
        let mut shards = Vec::new();
        let mut offset = 0;
        for &n in cuts {
            let vs = VarStore::new(tch::Device::Cpu);
            let v = vs.root().zeros("s", &[n]);
            tch::no_grad(|| v.shallow_clone().copy_(&w.narrow(0, offset, n)));
            let opt = settings.build(&vs).unwrap();
            shards.push((vs, v, opt, offset));
            offset += n;
        }
        let mut opt = settings.build(&whole).unwrap();
        for step in 1..=50 {
            tch::manual_seed(step);
            let g = Tensor::randn([offset], (Kind::Float, tch::Device::Cpu));
            opt.zero_grad();
            (&w * &g).sum(Kind::Float).backward();
            opt.step();
            for (_, v, opt, at) in &mut shards {
                opt.zero_grad();
                (&*v * &g.narrow(0, *at, v.numel() as i64)).sum(Kind::Float).backward();
                opt.step();
            }
        }
        let a: Vec<f32> = Vec::try_from(&w).unwrap();
        let b: Vec<f32> =
            shards.iter().flat_map(|(_, v, _, _)| Vec::<f32>::try_from(v).unwrap()).collect();
        a.iter().zip(&b).filter(|(x, y)| x != y).count()
    }

    #[test]
    fn shards_step_as_the_whole_variable_does() {
        for settings in [
            ShardOptimizer::adam(0.01),
            ShardOptimizer::adamw(0.01),
            ShardOptimizer::sgd(0.05, 0.9),
            ShardOptimizer::Adam {
                lr: 0.01,
                beta1: 0.8,
                beta2: 0.99,
                eps: 1e-6,
                weight_decay: 0.1,
            },
        ] {
            for cuts in [&[501, 502][..], &[251, 251, 251, 250]] {
                let differ = shards_against_whole(settings, cuts);
                assert_eq!(differ, 0, "{settings:?} on shards {cuts:?}: {differ} elements differ");
            }
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let e = ShardOptimizer::Adam {
            lr: 0.01,
            beta1: 1.0,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("`beta1` is 1"), "{e}");
        let e = ShardOptimizer::sgd(f64::NAN, 0.9).check().unwrap_err().to_string();
        assert!(e.contains("`lr` is NaN"), "{e}");
    }
}
