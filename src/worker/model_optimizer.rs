//! `ModelOptimizer`: rtune's optimizer over a whole model, for plain data parallelism
//! (`prepare_model`), whose state checkpoints hold: tch's optimizers keep theirs out of reach,
//! so a run resumed with one starts Adam's moments (or SGD's momentum) again; with this one it
//! goes on as if never stopped.
//!
//! Each variable steps as libtorch's optimizer of the same settings steps it, bit for bit (the
//! step is [`OptimizerSettings`]'s: see `shard_optimizer`). Its state is saved as
//! `optimizer.safetensors` (`<variable>/<state>`, PyTorch's state names) beside
//! `optimizer.json` (the settings, and each variable's name, shape and step count).
//!
//! The variables are made views of one flat buffer when the optimizer is made (as Apex and
//! FSDP flatten parameters), and so are their gradients' copies and their state: a step of the
//! whole model is one step of that buffer, a handful of calls into libtorch instead of a
//! handful per variable. Each update is element by element, so it changes no number. A
//! variable whose data is replaced afterwards (a checkpoint loaded with `set_data`) is made a
//! view again, its new values kept; one moved to another device is refused.

use serde::{Deserialize, Serialize};
use tch::nn::{Optimizer, VarStore};
use tch::{Device, Tensor};

use super::context::{sorted_variables, trainable};
use super::group::OptimizerState;
use super::shard_optimizer::{OptimizerSettings, Parameter, Scratch, ShardState, read_index};
use crate::torch::TorchResult;
use rtune_driver::error::{Error, Result};
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::{CheckpointWriter, OPTIMIZER_FILE, OPTIMIZER_INDEX};

/// An optimizer a data-parallel model steps with (`DistributedModel::backward_step`): tch's
/// `nn::Optimizer`, or rtune's [`ModelOptimizer`].
pub trait OptimizerStep {
    /// Clears the gradients before a backward pass.
    fn zero_grad(&mut self) -> Result<()>;
    /// Updates the variables from their gradients.
    fn step(&mut self) -> Result<()>;

    /// rtune's optimizer, whose state ranks that join a group in place can be handed (see
    /// `worker::join`); None for any other.
    #[doc(hidden)]
    fn model_optimizer(&mut self) -> Option<&mut ModelOptimizer> {
        None
    }
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
    /// The trainable variables in name order.
    vars: Vec<Variable>,
    /// Every variable's numbers side by side (each variable a view of its part), a place for
    /// their gradients, and their state (each variable's a view of its part).
    params: Tensor,
    grads: Tensor,
    state: ShardState,
    scratch: Scratch,
}

/// One variable of a [`ModelOptimizer`].
struct Variable {
    name: String,
    /// The model's variable (a handle to it: its data is a view of the flat buffer).
    tensor: Tensor,
    /// Where its data is: its part of the flat buffer, as long as nothing replaced it.
    data: usize,
    /// Its part of the flat gradients, and of the flat state (with its own step count: a
    /// variable without a gradient is not stepped, as libtorch's optimizers skip it).
    grad: Tensor,
    state: ShardState,
    /// Its part of the flat parameters.
    part: Tensor,
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
    /// parallelism; a sharded model takes the settings itself). The variables (f32, on one
    /// device) become views of one buffer (see the module docs): move the model to its device
    /// before making its optimizer.
    pub fn for_model(self, vs: &VarStore) -> Result<ModelOptimizer> {
        self.check()?;
        let named = trainable(sorted_variables(vs));
        let device = named.first().map_or(Device::Cpu, |(_, t)| t.device());
        for (name, t) in &named {
            let why = if t.kind() != tch::Kind::Float {
                Some(format!("is {:?}; rtune's optimizer steps f32 variables", t.kind()))
            } else if t.device() != device {
                Some(format!("is on {:?}, another variable on {device:?}", t.device()))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Error::config(
                    "OptimizerSettings::for_model",
                    format!("`{name}` {why}"),
                ));
            }
        }
        let total: i64 = named.iter().map(|(_, t)| t.numel() as i64).sum();
        let zeros = || Tensor::f_zeros([total], (tch::Kind::Float, device)).torch();
        let (params, grads) = (zeros()?, zeros()?);
        let state = ShardState::new(&self, total as usize, device)?;
        let mut vars = Vec::with_capacity(named.len());
        let mut at = 0;
        let _no_grad = tch::no_grad_guard();
        for (name, tensor) in named {
            let len = tensor.numel() as i64;
            let part = |t: &Tensor| t.f_narrow(0, at, len).torch();
            let buffers = state.buffers.iter().map(part).collect::<Result<Vec<_>>>()?;
            let mut var = Variable {
                name,
                tensor,
                data: 0,
                grad: part(&grads)?,
                state: ShardState { step: 0, buffers },
                part: part(&params)?,
            };
            var.link()?;
            vars.push(var);
            at += len;
        }
        let scratch = Scratch::new(total as usize, device)?;
        Ok(ModelOptimizer { settings: self, vars, params, grads, state, scratch })
    }
}

impl Variable {
    /// Makes the variable's data a view of its part of the flat buffer, its values kept.
    fn link(&mut self) -> Result<()> {
        if self.tensor.device() != self.part.device() {
            return Err(Error::config(
                "OptimizerSettings::for_model",
                format!(
                    "`{}` moved to {:?} after its optimizer was made on {:?}: make the optimizer \
                     after moving the model",
                    self.name,
                    self.tensor.device(),
                    self.part.device()
                ),
            ));
        }
        let mut part = self.part.shallow_clone();
        part.f_copy_(&self.tensor.f_detach().torch()?.f_reshape([-1]).torch()?).torch()?;
        let view = self.part.f_view(self.tensor.size().as_slice()).torch()?;
        self.tensor.f_set_data(&view).torch()?;
        self.data = self.tensor.data_ptr() as usize;
        Ok(())
    }
}

impl OptimizerStep for ModelOptimizer {
    fn model_optimizer(&mut self) -> Option<&mut ModelOptimizer> {
        Some(self)
    }

    fn zero_grad(&mut self) -> Result<()> {
        for var in &self.vars {
            let mut grad = var.tensor.grad();
            if grad.defined() {
                let _ = grad.f_zero_().torch()?;
            }
        }
        Ok(())
    }

    /// One step of every variable that has a gradient (libtorch's skip the others too): all
    /// at once while they have all been stepped alike, else one by one.
    fn step(&mut self) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        for var in &mut self.vars {
            if var.tensor.data_ptr() as usize != var.data {
                var.link()?;
            }
        }
        let grads: Vec<Tensor> = self.vars.iter().map(|v| v.tensor.grad()).collect();
        let step = self.vars.first().map_or(0, |v| v.state.step);
        let alike = self.vars.iter().all(|v| v.state.step == step);
        if alike && grads.iter().all(Tensor::defined) {
            for (var, grad) in self.vars.iter_mut().zip(&grads) {
                var.grad.f_copy_(&grad.f_reshape([-1]).torch()?).torch()?;
            }
            self.state.step = step;
            self.settings.step(&mut self.state, &self.scratch, &self.params, &self.grads)?;
            for var in &mut self.vars {
                var.state.step = self.state.step;
            }
            return Ok(());
        }
        for (var, grad) in self.vars.iter_mut().zip(&grads) {
            if grad.defined() {
                let grad = grad.f_reshape([-1]).torch()?;
                self.settings.step(&mut var.state, &self.scratch, &var.part, &grad)?;
            }
        }
        Ok(())
    }
}

impl ModelOptimizer {
    /// The steps it has taken, those before a restore included (a checkpoint holds them): a
    /// step index that goes on across restarts, for a learning-rate schedule or a log.
    pub fn steps(&self) -> u64 {
        self.vars.iter().map(|v| v.state.step).max().unwrap_or(0).max(0) as u64
    }

    /// Handles to its state, for ranks that join the group in place (see `worker::join`).
    pub(crate) fn handover(&self) -> OptimizerState {
        OptimizerState {
            buffers: self.state.buffers.iter().map(Tensor::shallow_clone).collect(),
            steps: self.vars.iter().map(|v| v.state.step).collect(),
        }
    }

    /// Takes the state rank 0 handed over (`handover` there) when this rank joined its group.
    pub(crate) fn take_over(&mut self, handed: &OptimizerState) -> Result<()> {
        let lens: Vec<i64> = self.state.buffers.iter().map(|b| b.numel() as i64).collect();
        let given: Vec<i64> = handed.buffers.iter().map(|b| b.numel() as i64).collect();
        if lens != given || handed.steps.len() != self.vars.len() {
            return Err(Error::Worker(format!(
                "the optimizer state rank 0 handed over ({} variables, buffers of {given:?} \
                 numbers) does not fit this rank's ({} variables, {lens:?}): every rank must \
                 make the same model and optimizer",
                handed.steps.len(),
                self.vars.len()
            )));
        }
        let _no_grad = tch::no_grad_guard();
        for (mine, theirs) in self.state.buffers.iter_mut().zip(&handed.buffers) {
            mine.f_copy_(theirs).torch()?;
        }
        for (var, &step) in self.vars.iter_mut().zip(&handed.steps) {
            var.state.step = step;
        }
        Ok(())
    }

    /// Saves the state into `checkpoint` (`optimizer.safetensors` and `optimizer.json`), on the
    /// rank whose checkpoint is kept (rank 0; every rank holds the same state): call it on
    /// every rank, as `save_var_store`.
    pub fn save(&self, checkpoint: &mut CheckpointWriter) -> Result<()> {
        if !checkpoint.is_kept() {
            return Ok(());
        }
        let names = self.settings.state_names();
        let mut tensors = Vec::new();
        for var in &self.vars {
            for (name, buffer) in names.iter().zip(&var.state.buffers) {
                let saved = buffer.f_to_device(Device::Cpu).torch()?.copy();
                tensors.push((format!("{}/{name}", var.name), saved));
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
                .map(|v| SavedVariable {
                    parameter: Parameter { name: v.name.clone(), shape: v.tensor.size() },
                    step: v.state.step,
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
        let path = checkpoint.files()?.join(OPTIMIZER_INDEX);
        let missing = "optimizer state (saved by ModelOptimizer::save)";
        let saved: SavedOptimizer = read_index(&path, FORMAT, missing).map_err(bad)?;
        let here: Vec<Parameter> = self
            .vars
            .iter()
            .map(|v| Parameter { name: v.name.clone(), shape: v.tensor.size() })
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
        for (var, saved) in self.vars.iter_mut().zip(&saved.variables) {
            let n = var.tensor.numel();
            for (buffer, name) in var.state.buffers.iter_mut().zip(names) {
                let key = format!("{}/{name}", var.name);
                let value = tensors.get(&key).filter(|v| v.numel() == n).ok_or_else(|| {
                    bad(format!("{OPTIMIZER_FILE} holds no `{key}` of {n} numbers"))
                })?;
                buffer.f_copy_(&value.f_reshape([-1]).torch()?).torch()?;
            }
            var.state.step = saved.step;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::var_store::{LoadVarStore, SaveVarStore};
    use rtune_driver::metrics::Metrics;
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
