//! `ModelOptimizer`: rtune's optimizer over a whole model, for plain data parallelism
//! (`prepare_model`), whose state checkpoints hold: tch's optimizers keep theirs out of reach,
//! so a run resumed with one starts Adam's moments (or SGD's momentum) again; with this one it
//! goes on as if never stopped.
//!
//! Each variable steps as libtorch's optimizer of the same settings steps it, bit for bit (the
//! step is [`OptimizerSettings`]'s: see `shard_optimizer`). Its state is saved as
//! `optimizer.safetensors` (`<variable>/<state>`, PyTorch's state names) beside
//! `optimizer.json` (the settings, and each variable's name, shape and step count).

use serde::{Deserialize, Serialize};
use tch::nn::{Optimizer, VarStore};
use tch::{Device, Tensor};

use super::context::{sorted_variables, trainable};
use super::shard_optimizer::{OptimizerSettings, Parameter, Scratch, ShardState, read_index};
use crate::error::{Error, Result};
use crate::outcome::Checkpoint;
use crate::storage::checkpoint::{CheckpointWriter, OPTIMIZER_FILE, OPTIMIZER_INDEX};
use crate::torch::TorchResult;

/// An optimizer a data-parallel model steps with (`DistributedModel::backward_step`): tch's
/// `nn::Optimizer`, or rtune's [`ModelOptimizer`].
pub trait OptimizerStep {
    /// Clears the gradients before a backward pass.
    fn zero_grad(&mut self) -> Result<()>;
    /// Updates the variables from their gradients.
    fn step(&mut self) -> Result<()>;
}

impl OptimizerStep for Optimizer {
    fn zero_grad(&mut self) -> Result<()> {
        Optimizer::zero_grad(self);
        Ok(())
    }

    fn step(&mut self) -> Result<()> {
        Optimizer::step(self);
        Ok(())
    }
}

/// rtune's optimizer over every trainable variable of a model, its state saved with
/// checkpoints. Made by [`OptimizerSettings::for_model`].
pub struct ModelOptimizer {
    settings: OptimizerSettings,
    /// The trainable variables in name order, each with its state.
    vars: Vec<(String, Tensor, ShardState)>,
    scratch: Scratch,
}

/// What `optimizer.json` says of one variable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedVariable {
    #[serde(flatten)]
    parameter: Parameter,
    step: i64,
}

/// `optimizer.json`.
#[derive(Debug, Serialize, Deserialize)]
struct SavedOptimizer {
    format: u32,
    optimizer: OptimizerSettings,
    /// The optimizer's state per variable, by PyTorch's names.
    state: Vec<String>,
    variables: Vec<SavedVariable>,
}

const FORMAT: u32 = 1;

impl OptimizerSettings {
    /// This optimizer over every trainable variable of `vs`, each one's state whole (plain data
    /// parallelism; a sharded model takes the settings itself).
    pub fn for_model(self, vs: &VarStore) -> Result<ModelOptimizer> {
        self.check()?;
        let vars: Vec<(String, Tensor, ShardState)> = trainable(sorted_variables(vs))
            .into_iter()
            .map(|(name, t)| {
                if !t.is_contiguous() {
                    return Err(Error::config(
                        "OptimizerSettings::for_model",
                        format!("variable `{name}` is not contiguous"),
                    ));
                }
                let state = ShardState::new(&self, t.numel(), t.device())?;
                Ok((name, t, state))
            })
            .collect::<Result<_>>()?;
        let largest = vars.iter().map(|(_, t, _)| t.numel()).max().unwrap_or(0);
        let device = vars.first().map_or(Device::Cpu, |(_, t, _)| t.device());
        Ok(ModelOptimizer { settings: self, vars, scratch: Scratch::new(largest, device)? })
    }
}

impl OptimizerStep for ModelOptimizer {
    fn zero_grad(&mut self) -> Result<()> {
        for (_, var, _) in &self.vars {
            let mut grad = var.grad();
            if grad.defined() {
                let _ = grad.f_zero_().torch()?;
            }
        }
        Ok(())
    }

    /// One step of every variable that has a gradient (libtorch's skip the others too).
    fn step(&mut self) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        for (_, var, state) in &mut self.vars {
            let grad = var.grad();
            if !grad.defined() {
                continue;
            }
            let (p, grad) = (var.f_view([-1]).torch()?, grad.f_reshape([-1]).torch()?);
            self.settings.step(state, &self.scratch, &p, &grad)?;
        }
        Ok(())
    }
}

impl ModelOptimizer {
    /// Saves the state into `checkpoint` (`optimizer.safetensors` and `optimizer.json`), on the
    /// rank whose checkpoint is kept (rank 0; every rank holds the same state): call it on
    /// every rank, as `save_var_store`.
    pub fn save(&self, checkpoint: &mut CheckpointWriter) -> Result<()> {
        if !checkpoint.is_kept() {
            return Ok(());
        }
        let names = self.settings.state_names();
        let mut tensors = Vec::new();
        for (var, _, state) in &self.vars {
            for (name, buffer) in names.iter().zip(&state.buffers) {
                tensors.push((format!("{var}/{name}"), buffer.f_to_device(Device::Cpu).torch()?));
            }
        }
        Tensor::write_safetensors(&tensors, checkpoint.path().join(OPTIMIZER_FILE)).torch()?;
        let saved = SavedOptimizer {
            format: FORMAT,
            optimizer: self.settings,
            state: names.iter().map(|n| n.to_string()).collect(),
            variables: self
                .vars
                .iter()
                .map(|(name, t, s)| SavedVariable {
                    parameter: Parameter { name: name.clone(), shape: t.size() },
                    step: s.step,
                })
                .collect(),
        };
        let path = checkpoint.path().join(OPTIMIZER_INDEX);
        let json = serde_json::to_vec_pretty(&saved).expect("the index serialises");
        std::fs::write(&path, json).map_err(|e| Error::io(&path, e))
    }

    /// Restores the state saved in `checkpoint` (by [`save`](Self::save)) for the same model
    /// and an optimizer of the same kind (its settings may differ: a new learning rate).
    pub fn load(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        let bad =
            |message: String| Error::Checkpoint { path: checkpoint.path().to_owned(), message };
        let path = checkpoint.path().join(OPTIMIZER_INDEX);
        let missing = "optimizer state (saved by ModelOptimizer::save)";
        let saved: SavedOptimizer = read_index(&path, FORMAT, missing).map_err(bad)?;
        let here: Vec<Parameter> = self
            .vars
            .iter()
            .map(|(name, t, _)| Parameter { name: name.clone(), shape: t.size() })
            .collect();
        let there: Vec<Parameter> = saved.variables.iter().map(|v| v.parameter.clone()).collect();
        if let Some(message) = self.settings.misfit(&saved.optimizer, &saved.state, &there, &here) {
            return Err(bad(message));
        }
        let names = self.settings.state_names();
        let tensors: std::collections::HashMap<String, Tensor> =
            Tensor::read_safetensors(checkpoint.path().join(OPTIMIZER_FILE))
                .map_err(|e| bad(format!("{OPTIMIZER_FILE}: {e}")))?
                .into_iter()
                .collect();
        let _no_grad = tch::no_grad_guard();
        for ((var, t, state), saved) in self.vars.iter_mut().zip(&saved.variables) {
            for (buffer, name) in state.buffers.iter_mut().zip(names) {
                let key = format!("{var}/{name}");
                let value =
                    tensors.get(&key).filter(|v| v.numel() == t.numel()).ok_or_else(|| {
                        bad(format!("{OPTIMIZER_FILE} holds no `{key}` of {} numbers", t.numel()))
                    })?;
                buffer.f_copy_(&value.f_reshape([-1]).torch()?).torch()?;
            }
            state.step = saved.step;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::storage::{LoadVarStore, SaveVarStore};
    use tch::Kind;
    use tch::nn::{Module, OptimizerConfig};

    /// An MLP 20 -> 600 -> `hidden` -> 3: its middle weight (300,000 numbers at 500) steps in
    /// two chunks.
    fn mlp(hidden: i64) -> (VarStore, impl Module) {
        let vs = VarStore::new(Device::Cpu);
        let net = tch::nn::seq()
            .add(tch::nn::linear(vs.root() / "a", 20, 600, Default::default()))
            .add_fn(|x| x.relu())
            .add(tch::nn::linear(vs.root() / "b", 600, hidden, Default::default()))
            .add_fn(|x| x.relu())
            .add(tch::nn::linear(vs.root() / "c", hidden, 3, Default::default()));
        (vs, net)
    }

    fn weights(vs: &VarStore) -> Vec<f32> {
        let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named.iter().flat_map(|(_, t)| Vec::<f32>::try_from(t.reshape([-1])).unwrap()).collect()
    }

    fn train(net: &impl Module, opt: &mut impl OptimizerStep, batches: &[(Tensor, Tensor)]) {
        for (x, y) in batches {
            opt.zero_grad().unwrap();
            net.forward(x).cross_entropy_for_logits(y).backward();
            opt.step().unwrap();
        }
    }

    /// rtune's optimizer trains a model as tch's (libtorch's) of the same settings does, bit
    /// for bit; saved after 5 steps and loaded into another model's, it goes on to the same
    /// bits as one never saved. (Every model starts from one draw of weights and sees one draw
    /// of batches: tests running beside this one share libtorch's generator.)
    #[test]
    fn trains_as_libtorch_and_resumes_exactly() {
        let (start, _) = mlp(500);
        let batches: Vec<(Tensor, Tensor)> = (0..10)
            .map(|_| {
                let x = Tensor::randn([16, 20], (Kind::Float, Device::Cpu));
                (x, Tensor::randint(3, [16], (Kind::Int64, Device::Cpu)))
            })
            .collect();
        let fresh = || {
            let (mut vs, net) = mlp(500);
            vs.copy(&start).unwrap();
            (vs, net)
        };
        for ours in [
            OptimizerSettings::adam(1e-3),
            OptimizerSettings::adamw(1e-3),
            OptimizerSettings::sgd(0.05, 0.9),
        ] {
            let (vs, net) = fresh();
            let mut theirs = match ours {
                OptimizerSettings::Adam { lr, .. } => tch::nn::Adam::default().build(&vs, lr),
                OptimizerSettings::AdamW { lr, .. } => tch::nn::AdamW::default().build(&vs, lr),
                OptimizerSettings::Sgd { lr, .. } => {
                    tch::nn::Sgd { momentum: 0.9, ..Default::default() }.build(&vs, lr)
                }
            }
            .unwrap();
            train(&net, &mut theirs, &batches);
            let (vs2, net2) = fresh();
            let mut mine = ours.for_model(&vs2).unwrap();
            train(&net2, &mut mine, &batches[..5]);
            let dir = tempfile::tempdir().unwrap();
            let mut writer = CheckpointWriter::create(dir.path(), 0, 1).unwrap();
            mine.save(&mut writer).unwrap();
            writer.save_var_store(&vs2).unwrap();
            let saved = writer.commit(dir.path(), "ck", 5, 0, &Metrics::new()).unwrap();
            assert!(saved.holds_optimizer());
            let (mut vs3, net3) = mlp(500);
            saved.load_var_store(&mut vs3).unwrap();
            let mut resumed = ours.for_model(&vs3).unwrap();
            resumed.load(&saved).unwrap();
            train(&net3, &mut resumed, &batches[5..]);
            let (a, b) = (weights(&vs3), weights(&vs));
            let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ,
                0,
                "{ours:?}: {differ} of {} weights differ from libtorch's",
                a.len()
            );
        }
    }

    /// A saved state is refused, with what differs, by another model or another kind of
    /// optimizer, as is a checkpoint without one.
    #[test]
    fn the_saved_state_loads_into_its_own_model_only() {
        let (vs, _) = mlp(500);
        let dir = tempfile::tempdir().unwrap();
        let mut writer = CheckpointWriter::create(dir.path(), 0, 1).unwrap();
        OptimizerSettings::adam(1e-3).for_model(&vs).unwrap().save(&mut writer).unwrap();
        let saved = writer.commit(dir.path(), "ck", 1, 0, &Metrics::new()).unwrap();
        let bare = CheckpointWriter::create(dir.path(), 0, 2)
            .unwrap()
            .commit(dir.path(), "bare", 2, 0, &Metrics::new())
            .unwrap();
        let refusal = |hidden, settings: OptimizerSettings, ck: &Checkpoint| {
            let (vs, _) = mlp(hidden);
            settings.for_model(&vs).unwrap().load(ck).unwrap_err().to_string()
        };
        let e = refusal(400, OptimizerSettings::adam(1e-3), &saved);
        assert!(
            e.contains("holds `b.bias` of shape [500], this model has `b.bias` of shape [400]"),
            "{e}"
        );
        let e = refusal(500, OptimizerSettings::sgd(0.1, 0.9), &saved);
        assert!(
            e.contains("(exp_avg, exp_avg_sq), this model's optimizer keeps momentum_buffer"),
            "{e}"
        );
        let e = refusal(500, OptimizerSettings::adam(1e-3), &bare);
        assert!(e.contains("no optimizer state") && !bare.holds_optimizer(), "{e}");
    }
}
