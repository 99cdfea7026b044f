//! The optimizer a [`ShardedModel`](super::ShardedModel) runs on its shard: rtune's own, so its
//! state (PyTorch's names: `exp_avg`, `exp_avg_sq`, `momentum_buffer`) can be saved, loaded and
//! re-cut between world sizes, which libtorch's optimizers behind tch do not let out.
//!
//! Each step is libtorch's `torch::optim` step (the C++ optimizers tch's `nn::Adam`, `nn::AdamW`
//! and `nn::Sgd` are) op for op, through the same ATen kernels: a shard steps bit for bit as
//! libtorch's optimizer steps the same elements of the whole model. tch's bindings drop the
//! `alpha` of `add_` and the `value` of `addcmul_`/`addcdiv_`, so those are spelled with the
//! factor folded into an operand where the kernels then round exactly as with the factor:
//! `add_(x, a)` is `addcmul_(x, a)` with `a` a 0-dimensional tensor (both one fused
//! multiply-add), `addcmul_(x, y, v)` is `addcmul_(v * x, y)` and `addcdiv_(x, y, v)` is
//! `addcdiv_(v * x, y)` (the kernels compute `self + v * x * y` and `self + v * x / y`, left to
//! right). The tests check it against libtorch's optimizers.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::torch::TorchResult;
use rtune_driver::error::{Error, Result};

/// rtune's optimizer, with PyTorch's meaning of each setting: what a sharded model runs on its
/// shard, and what [`for_model`](OptimizerSettings::for_model) runs over a whole model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase")]
pub enum OptimizerSettings {
    /// SGD, with momentum when `momentum > 0` (`torch.optim.SGD`, dampening 0).
    Sgd { lr: f64, momentum: f64, weight_decay: f64, nesterov: bool },
    /// Adam, its weight decay an L2 term in the gradient (`torch.optim.Adam`).
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
    /// AdamW: decoupled weight decay (`torch.optim.AdamW`).
    AdamW { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
}

/// The name [`OptimizerSettings`] had when only sharded models ran it.
#[deprecated(note = "renamed OptimizerSettings")]
pub type ShardOptimizer = OptimizerSettings;

impl OptimizerSettings {
    /// Adam with PyTorch's defaults (betas 0.9, 0.999, eps 1e-8, no weight decay).
    pub fn adam(lr: f64) -> Self {
        OptimizerSettings::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }

    /// AdamW with PyTorch's defaults (weight decay 0.01).
    pub fn adamw(lr: f64) -> Self {
        OptimizerSettings::AdamW { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }

    /// SGD with `momentum` (0: none).
    pub fn sgd(lr: f64, momentum: f64) -> Self {
        OptimizerSettings::Sgd { lr, momentum, weight_decay: 0.0, nesterov: false }
    }

    /// The names of the optimizer's state per parameter, PyTorch's (`exp_avg` and `exp_avg_sq`
    /// for Adam(W), `momentum_buffer` for SGD with momentum).
    pub(super) fn state_names(&self) -> &'static [&'static str] {
        match *self {
            OptimizerSettings::Sgd { momentum, .. } if momentum != 0.0 => &["momentum_buffer"],
            OptimizerSettings::Sgd { .. } => &[],
            _ => &["exp_avg", "exp_avg_sq"],
        }
    }

    /// Why state saved by `saved` (keeping `state` for the variables `there`) does not fit this
    /// optimizer over the variables `here`: the first variable that differs, or the kind of
    /// state; `None` when it fits (the settings may differ: a new learning rate).
    pub(super) fn misfit(
        &self,
        saved: &OptimizerSettings,
        state: &[String],
        there: &[Parameter],
        here: &[Parameter],
    ) -> Option<String> {
        if there != here {
            let at = there.iter().zip(here).position(|(a, b)| a != b);
            let at = at.unwrap_or(there.len().min(here.len()));
            let show = |p: Option<&Parameter>| match p {
                Some(p) => format!("`{}` of shape {:?}", p.name, p.shape),
                None => "nothing".to_owned(),
            };
            return Some(format!(
                "saved for another model: where it holds {}, this model has {}",
                show(there.get(at)),
                show(here.get(at))
            ));
        }
        let names = self.state_names();
        (state != names).then(|| {
            format!(
                "holds {saved:?} state ({}), this model's optimizer keeps {}",
                state.join(", "),
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )
        })
    }

    /// Numbers of optimizer state per parameter (Adam's two moments, SGD's momentum).
    pub(super) fn moments(&self) -> usize {
        self.state_names().len()
    }

    pub(super) fn check(&self) -> Result<()> {
        let (lr, rest): (f64, Vec<(&str, f64, bool)>) = match *self {
            OptimizerSettings::Sgd { lr, momentum, weight_decay, .. } => (
                lr,
                vec![
                    ("momentum", momentum, momentum >= 0.0),
                    ("weight_decay", weight_decay, weight_decay >= 0.0),
                ],
            ),
            OptimizerSettings::Adam { lr, beta1, beta2, eps, weight_decay }
            | OptimizerSettings::AdamW { lr, beta1, beta2, eps, weight_decay } => (
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
                "OptimizerSettings",
                format!("`{name}` is {value}; betas lie in [0, 1), the others are finite and >= 0"),
            )),
            None => Ok(()),
        }
    }
}

/// A trainable variable as saved optimizer state describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Parameter {
    pub(super) name: String,
    pub(super) shape: Vec<i64>,
}

/// Reads a saved optimizer's JSON index at `path`, of `format`; an error names what is wrong
/// (`missing` says how such state is saved), for the caller to place at its checkpoint.
pub(super) fn read_index<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    format: u32,
    missing: &str,
) -> std::result::Result<T, String> {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let text = std::fs::read(path).map_err(|e| format!("no {missing} ({name}: {e})"))?;
    let value: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| format!("{name}: {e}"))?;
    match value.get("format").and_then(serde_json::Value::as_u64) {
        Some(f) if f == u64::from(format) => {}
        f => return Err(format!("{name} has format {f:?}; this rtune reads {format}")),
    }
    serde_json::from_value(value).map_err(|e| format!("{name}: {e}"))
}

/// An optimizer's state for one shard: its step count and its buffers, in the order of
/// [`OptimizerSettings::state_names`].
#[derive(Debug)]
pub(super) struct ShardState {
    pub(super) step: i64,
    pub(super) buffers: Vec<Tensor>,
}

/// A step goes through its shard this many numbers at a time: its intermediate results fit in
/// two small buffers, made once, instead of shard-long ones made at every step.
const CHUNK: i64 = 1 << 18;

impl ShardState {
    /// Fresh state (step 0, zeros) for a shard of `len` numbers on `device`.
    pub(super) fn new(
        settings: &OptimizerSettings,
        len: usize,
        device: Device,
    ) -> Result<ShardState> {
        let buffers = settings
            .state_names()
            .iter()
            .map(|_| Tensor::f_zeros([len as i64], (Kind::Float, device)))
            .collect::<std::result::Result<_, _>>()
            .torch()?;
        Ok(ShardState { step: 0, buffers })
    }
}

/// Two buffers for a step's intermediate results, up to `CHUNK` numbers each, and the factors
/// the steps multiply by (not state: one serves every shard or variable an optimizer steps).
#[derive(Debug)]
pub(super) struct Scratch {
    buffers: [Tensor; 2],
    /// Each factor made so far (by its bits), on the buffers' device: made once, not at every
    /// step of every variable (a small model's step is mostly such calls into libtorch).
    factors: std::sync::Mutex<Vec<(u64, Tensor)>>,
}

impl Scratch {
    /// Enough for shards of up to `len` numbers on `device`.
    pub(super) fn new(len: usize, device: Device) -> Result<Scratch> {
        let zeros = || Tensor::f_zeros([CHUNK.min(len as i64)], (Kind::Float, device));
        Ok(Scratch { buffers: [zeros().torch()?, zeros().torch()?], factors: Default::default() })
    }

    /// `x` as a 0-dimensional f32 tensor on the buffers' device: a factor the kernels broadcast
    /// as they would a scalar (addcmul takes no CPU scalar beside CUDA tensors, so it goes
    /// where they are).
    fn factor(&self, x: f64) -> Result<Tensor> {
        let mut factors = self.factors.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, t)) = factors.iter().find(|(bits, _)| *bits == x.to_bits()) {
            return Ok(t.shallow_clone());
        }
        let t = Tensor::from(x as f32).f_to_device(self.buffers[0].device()).torch()?;
        factors.push((x.to_bits(), t.shallow_clone()));
        Ok(t)
    }
}

impl OptimizerSettings {
    /// One step of `p` (this rank's shard of the parameters) with its gradient `grad`, as
    /// libtorch's optimizer of these settings steps (see the module docs): a chunk at a time,
    /// which changes nothing, every update being element by element.
    pub(super) fn step(
        &self,
        state: &mut ShardState,
        scratch: &Scratch,
        p: &Tensor,
        grad: &Tensor,
    ) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        state.step += 1;
        let len = p.numel() as i64;
        let [a, b] = &scratch.buffers;
        if len <= CHUNK && a.numel() as i64 == len {
            // One part, the whole of it: no views to make.
            let parts = [a.shallow_clone(), b.shallow_clone()];
            return self.step_part(state.step, p, grad, &state.buffers, &parts, scratch);
        }
        let mut start = 0;
        while start < len {
            let n = CHUNK.min(len - start);
            let part = |t: &Tensor| t.f_narrow(0, start, n);
            let buffers = state.buffers.iter().map(part).collect::<Result<Vec<_>, _>>().torch()?;
            let parts = [a.f_narrow(0, 0, n).torch()?, b.f_narrow(0, 0, n).torch()?];
            self.step_part(
                state.step,
                &part(p).torch()?,
                &part(grad).torch()?,
                &buffers,
                &parts,
                scratch,
            )?;
            start += n;
        }
        Ok(())
    }

    /// `step` on one part of the shard: its parameters, gradient and state, and two scratch
    /// buffers of its length. Each intermediate result is what libtorch's step makes, into a
    /// scratch buffer (`_out`, or in place there), through the same kernels.
    fn step_part(
        &self,
        step: i64,
        p: &Tensor,
        grad: &Tensor,
        buffers: &[Tensor],
        [a, b]: &[Tensor; 2],
        scratch: &Scratch,
    ) -> Result<()> {
        let mut p = p.shallow_clone();
        let factor = |x: f64| scratch.factor(x);
        match *self {
            OptimizerSettings::Sgd { lr, momentum, weight_decay, nesterov } => {
                let mut d_p = match weight_decay {
                    0.0 => grad.shallow_clone(),
                    wd => grad.f_addcmul_out(a, &p, &factor(wd)?).torch()?,
                };
                if momentum != 0.0 {
                    let mut buf = buffers[0].shallow_clone();
                    if step == 1 {
                        buf.f_copy_(&d_p).torch()?;
                    } else {
                        // `buf.mul_(momentum).add_(d_p, 1 - dampening)`, dampening 0.
                        let _ = buf.f_mul_scalar_(momentum).torch()?.f_add_(&d_p).torch()?;
                    }
                    d_p = match nesterov {
                        true => d_p.f_addcmul_out(b, &buf, &factor(momentum)?).torch()?,
                        false => buf,
                    };
                }
                let _ = p.f_addcmul_(&d_p, &factor(-lr)?).torch()?;
            }
            OptimizerSettings::Adam { lr, beta1, beta2, eps, weight_decay }
            | OptimizerSettings::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                let decoupled = matches!(self, OptimizerSettings::AdamW { .. });
                let grad = match weight_decay {
                    0.0 => grad.shallow_clone(),
                    wd if decoupled => {
                        let _ = p.f_mul_scalar_(1.0 - lr * wd).torch()?;
                        grad.shallow_clone()
                    }
                    wd => grad.f_addcmul_out(a, &p, &factor(wd)?).torch()?,
                };
                let step = step as f64;
                let bias_correction1 = 1.0 - beta1.powf(step);
                let bias_correction2 = 1.0 - beta2.powf(step);
                let [exp_avg, exp_avg_sq] = buffers else {
                    return Err(Error::Worker("Adam's state has two buffers".into()));
                };
                let (mut exp_avg, mut exp_avg_sq) =
                    (exp_avg.shallow_clone(), exp_avg_sq.shallow_clone());
                let _ = exp_avg
                    .f_mul_scalar_(beta1)
                    .torch()?
                    .f_addcmul_(&grad, &factor(1.0 - beta1)?)
                    .torch()?;
                let scaled = grad.f_mul_scalar_out(b, 1.0 - beta2).torch()?;
                let _ =
                    exp_avg_sq.f_mul_scalar_(beta2).torch()?.f_addcmul_(&scaled, &grad).torch()?;
                // `grad` (perhaps in `a`) is done with: `b` takes the denominator, `a` the
                // scaled first moment.
                let mut denom = exp_avg_sq.f_sqrt_out(b).torch()?;
                let _ = denom
                    .f_div_scalar_(bias_correction2.sqrt())
                    .torch()?
                    .f_add_scalar_(eps)
                    .torch()?;
                let step_size = lr / bias_correction1;
                let _ = p
                    .f_addcdiv_(&exp_avg.f_mul_scalar_out(a, -step_size).torch()?, &denom)
                    .torch()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::{self, OptimizerConfig, VarStore};

    /// libtorch's optimizer of these settings over `vs`: what `step` must equal.
    fn libtorch(settings: OptimizerSettings, vs: &VarStore) -> nn::Optimizer {
        match settings {
            OptimizerSettings::Sgd { lr, momentum, weight_decay, nesterov } => {
                nn::Sgd { momentum, dampening: 0.0, wd: weight_decay, nesterov }.build(vs, lr)
            }
            OptimizerSettings::Adam { lr, beta1, beta2, eps, weight_decay } => {
                nn::Adam { beta1, beta2, wd: weight_decay, eps, amsgrad: false }.build(vs, lr)
            }
            OptimizerSettings::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                nn::AdamW { beta1, beta2, wd: weight_decay, eps, amsgrad: false }.build(vs, lr)
            }
        }
        .unwrap()
    }

    /// This optimizer run on shards of a variable (uneven, as the ranks cut it; one longer than
    /// a `CHUNK`, which steps in three parts) against
    /// libtorch's on the whole variable, 50 steps of the same gradients: how many elements of
    /// the variable differ at the end.
    fn shards_against_whole(settings: OptimizerSettings, cuts: &[i64]) -> usize {
        tch::manual_seed(0);
        let whole = VarStore::new(tch::Device::Cpu);
        let n = cuts.iter().sum::<i64>();
        let w = whole.root().randn("w", &[n], 0.0, 1.0);
        let mut opt = libtorch(settings, &whole);
        let mut shards = Vec::new();
        let mut offset = 0;
        for &len in cuts {
            let p = w.detach().narrow(0, offset, len).copy();
            shards.push((
                p,
                ShardState::new(&settings, len as usize, Device::Cpu).unwrap(),
                offset,
            ));
            offset += len;
        }
        for step in 1..=50 {
            tch::manual_seed(step);
            let g = Tensor::randn([n], (Kind::Float, tch::Device::Cpu));
            opt.zero_grad();
            (&w * &g).sum(Kind::Float).backward();
            opt.step();
            for (p, state, at) in &mut shards {
                let grad = g.narrow(0, *at, p.numel() as i64).copy();
                let scratch = Scratch::new(p.numel(), Device::Cpu).unwrap();
                settings.step(state, &scratch, p, &grad).unwrap();
            }
        }
        let a: Vec<f32> = Vec::try_from(&w).unwrap();
        let b: Vec<f32> =
            shards.iter().flat_map(|(p, _, _)| Vec::<f32>::try_from(p).unwrap()).collect();
        a.iter().zip(&b).filter(|(x, y)| x != y).count()
    }

    #[test]
    fn shards_step_as_the_whole_variable_does() {
        for settings in [
            OptimizerSettings::adam(0.01),
            OptimizerSettings::adamw(0.01),
            OptimizerSettings::sgd(0.05, 0.9),
            OptimizerSettings::sgd(0.05, 0.0),
            OptimizerSettings::Sgd { lr: 0.05, momentum: 0.9, weight_decay: 0.01, nesterov: true },
            OptimizerSettings::AdamW {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay: 0.1,
            },
            OptimizerSettings::Adam {
                lr: 0.01,
                beta1: 0.8,
                beta2: 0.99,
                eps: 1e-6,
                weight_decay: 0.1,
            },
        ] {
            for cuts in
                [&[50_001, 50_002][..], &[25_001, 25_001, 25_001, 25_000], &[1003], &[600_001]]
            {
                let differ = shards_against_whole(settings, cuts);
                assert_eq!(differ, 0, "{settings:?} on shards {cuts:?}: {differ} elements differ");
            }
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let e = OptimizerSettings::Adam {
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
        let e = OptimizerSettings::sgd(f64::NAN, 0.9).check().unwrap_err().to_string();
        assert!(e.contains("`lr` is NaN"), "{e}");
    }
}
