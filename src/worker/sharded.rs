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
//! The optimizer is rtune's own ([`OptimizerSettings`]), op for op libtorch's: since every update
//! is element by element, a shard steps bit for bit as the same elements of the whole model
//! would under libtorch's optimizer. ZeRO-1 therefore trains bit for bit as `prepare_model`
//! with tch's optimizer of the same settings; ZeRO-2 as well with two ranks, and with more its
//! reduce-scatter adds the ranks' gradients in another order than the all-reduce, so the last
//! bits differ.
//!
//! The collectives go as `prepare_model`'s do: through rtune's CPU ring (the flat vector on the
//! host), or, for a model on a GPU of its own, through NCCL's reduce-scatter and all-gather
//! (the flat vector on the device). A GPU model whose ranks share a device, or a lone GPU rank,
//! goes through the ring: its shard and gradient are copied between the device, where the
//! optimizer steps, and the host.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tch::nn::VarStore;
use tch::{Kind, Tensor};

use super::buckets::{ModelGroup, broadcast_from_rank_0, gather_into, scatter_from};
use super::context::{sorted_variables, trainable};
use super::shard_optimizer::{OptimizerSettings, Parameter, Scratch, ShardState, read_index};
use crate::torch::TorchResult;
use rtune_collective::ReduceOp;
pub use rtune_driver::config::Sharding;
use rtune_driver::error::{Error, Result};
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::{CheckpointWriter, SHARDS_DIR};

/// A data-parallel model whose optimizer state (and with ZeRO-2 gradients) is sharded across
/// the ranks. See the module docs.
pub struct ShardedModel {
    backend: ModelGroup,
    sharding: Sharding,
    settings: OptimizerSettings,
    /// The optimizer's state for `shard` alone, and its step's scratch.
    state: ShardState,
    scratch: Scratch,
    /// The trainable variables' names and shapes, in the order of the flat vector.
    layout: Vec<Parameter>,
    params: Vec<Tensor>,
    /// The number of trainable parameters; every shard is `shard_len` long (the last ones
    /// padded with zeros past `n`), rank `r`'s starting at `r * shard_len`.
    n: usize,
    shard_len: usize,
    /// The whole flat vector, `world * shard_len` long, where the collectives run (the host for
    /// the ring, the GPU for NCCL): the gradients in, the gathered parameters out (every
    /// rank's shard lands where it belongs).
    flat: Tensor,
    /// This rank's parameters and their averaged gradient, on the model's device, where the
    /// optimizer steps.
    shard: Tensor,
    grad: Tensor,
    /// The same two where the collectives run: `shard` and `grad` themselves, unless the
    /// model is on a GPU and its collectives go through the host ring (see `staged`).
    wire_shard: Tensor,
    wire_grad: Tensor,
}

impl ShardedModel {
    pub(super) fn new(
        backend: ModelGroup,
        vs: &VarStore,
        sharding: Sharding,
        optimizer: OptimizerSettings,
    ) -> Result<Self> {
        optimizer.check()?;
        let named = sorted_variables(vs);
        if let Some((name, t)) = named.iter().find(|(_, t)| t.kind() != Kind::Float) {
            return Err(Error::config(
                "prepare_model_sharded",
                format!("variable `{name}` is {:?}; a sharded model holds f32 variables", t.kind()),
            ));
        }
        // Rank 0's weights everywhere first, as `prepare_model` does.
        let all: Vec<Tensor> = named.iter().map(|(_, t)| t.shallow_clone()).collect();
        broadcast_from_rank_0(&backend, &all)?;
        let (layout, params): (Vec<Parameter>, Vec<Tensor>) = trainable(named)
            .into_iter()
            .map(|(name, t)| (Parameter { name, shape: t.size() }, t))
            .unzip();
        let n: usize = params.iter().map(Tensor::numel).sum();
        let world = backend.world_size();
        let shard_len = n.div_ceil(world);
        let (device, wire) = (vs.device(), backend.device());
        let zeros = |len: usize, device| Tensor::f_zeros([len as i64], (Kind::Float, device));
        let (shard, grad) = (zeros(shard_len, device).torch()?, zeros(shard_len, device).torch()?);
        let (wire_shard, wire_grad) = match device != wire {
            true => (zeros(shard_len, wire).torch()?, zeros(shard_len, wire).torch()?),
            false => (shard.shallow_clone(), grad.shallow_clone()),
        };
        let model = ShardedModel {
            flat: zeros(shard_len * world, wire).torch()?,
            backend,
            sharding,
            settings: optimizer,
            state: ShardState::new(&optimizer, shard_len, device)?,
            scratch: Scratch::new(shard_len, device)?,
            layout,
            params,
            n,
            shard_len,
            shard,
            grad,
            wire_shard,
            wire_grad,
        };
        model.take_parameters()?;
        Ok(model)
    }

    /// This rank's shard of the model's parameters into `shard`.
    fn take_parameters(&self) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        gather_into(&self.flat, &self.params, |t| t.shallow_clone())?;
        let len = self.shard_len as i64;
        let mine = self.flat.f_narrow(0, self.rank_and_world().0 as i64 * len, len).torch()?;
        self.shard.shallow_clone().f_copy_(&mine).torch()?;
        Ok(())
    }

    /// Whether the collectives run elsewhere than the optimizer (a GPU model through the host
    /// ring): the shard and its gradient are then copied between `shard`/`grad` and their
    /// `wire_` twins.
    fn staged(&self) -> bool {
        self.flat.device() != self.shard.device()
    }

    fn rank_and_world(&self) -> (usize, usize) {
        (self.backend.rank(), self.backend.world_size())
    }

    /// `zero_grad`, `backward`, the sharded average of the gradients, this rank's optimizer
    /// step on its shard, and the all-gather of the updated parameters: one training step.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        for p in &self.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.f_zero_().torch()?;
            }
        }
        loss.f_backward().torch()?;
        let _no_grad = tch::no_grad_guard();
        gather_into(&self.flat, &self.params, Tensor::grad)?;
        self.average_gradients()?;
        self.settings.step(&mut self.state, &self.scratch, &self.shard, &self.grad)?;
        self.gather_parameters()
    }

    /// Leaves this rank's shard of the averaged gradients in `grad`.
    fn average_gradients(&mut self) -> Result<()> {
        let (rank, world) = self.rank_and_world();
        let len = self.shard_len as i64;
        if world > 1 && self.sharding == Sharding::Zero2 {
            self.backend.reduce_scatter(&self.flat, &self.wire_grad, ReduceOp::Avg)?;
        } else {
            if world > 1 {
                // The parameters only, not the padding: the same all-reduce as `prepare_model`'s.
                let all = self.flat.f_narrow(0, 0, self.n as i64).torch()?;
                self.backend.all_reduce(&all, ReduceOp::Avg)?;
            }
            self.wire_grad
                .f_copy_(&self.flat.f_narrow(0, rank as i64 * len, len).torch()?)
                .torch()?;
        }
        if self.staged() {
            self.grad.f_copy_(&self.wire_grad).torch()?;
        }
        Ok(())
    }

    /// Every rank's updated shard into every rank's parameters.
    fn gather_parameters(&mut self) -> Result<()> {
        if self.staged() {
            self.wire_shard.f_copy_(&self.shard).torch()?;
        }
        match self.rank_and_world().1 {
            1 => self.flat.f_copy_(&self.wire_shard).torch()?,
            _ => self.backend.all_gather(&self.wire_shard, &self.flat)?,
        }
        scatter_from(&self.flat, &self.params)
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match self.settings {
            OptimizerSettings::Sgd { lr, .. }
            | OptimizerSettings::Adam { lr, .. }
            | OptimizerSettings::AdamW { lr, .. } => lr,
        }
    }

    /// Bytes of optimizer state this rank holds: its shard's moments (or momentum), f32.
    pub fn optimizer_state_bytes(&self) -> usize {
        self.settings.moments() * self.shard_len * 4
    }

    /// This rank's optimizer state: the optimizer's steps so far, and each buffer by PyTorch's
    /// name for the parameters of [`shard_range`](Self::shard_range).
    pub fn optimizer_state(&self) -> Result<(i64, Vec<(&'static str, Tensor)>)> {
        let len = self.shard_range().len() as i64;
        let names = self.settings.state_names().iter().copied();
        let buffers = names
            .zip(&self.state.buffers)
            .map(|(name, buffer)| Ok((name, buffer.f_narrow(0, 0, len).torch()?)))
            .collect::<Result<_>>()?;
        Ok((self.state.step, buffers))
    }

    /// This rank's parameters, as indices into the flat vector of them (in name order).
    pub fn shard_range(&self) -> std::ops::Range<usize> {
        let rank = self.rank_and_world().0;
        (rank * self.shard_len).min(self.n)..((rank + 1) * self.shard_len).min(self.n)
    }
}

/// `zero/index.json`: how a sharded model's optimizer state was cut, and into which files.
#[derive(Debug, Serialize, Deserialize)]
struct ShardIndex {
    format: u32,
    sharding: Sharding,
    optimizer: OptimizerSettings,
    /// The optimizer's steps so far (every shard's).
    step: i64,
    world_size: usize,
    /// The trainable parameters, the flat vector's order.
    parameters: Vec<Parameter>,
    numel: usize,
    /// Every shard's length: rank `r`'s shard is `[r * shard_len, (r + 1) * shard_len)` of the
    /// flat vector, the last padded past `numel`.
    shard_len: usize,
    /// The optimizer's state per parameter, the tensors of each shard file by name.
    state: Vec<String>,
    /// The shard files, rank 0's first.
    shards: Vec<String>,
}

const INDEX_FILE: &str = "index.json";
const INDEX_FORMAT: u32 = 1;

fn shard_file(rank: usize, world: usize) -> String {
    format!("shard_{rank}_of_{world}.safetensors")
}

/// The pieces of shards `old_len` long that make up `[start, end)` of the flat vector: for
/// each, the shard, where the piece starts in it, where in `[start, end)`, and its length.
fn pieces(old_len: usize, start: usize, end: usize) -> Vec<(usize, usize, usize, usize)> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let (shard, offset) = (at / old_len, at % old_len);
        let len = (old_len - offset).min(end - at);
        out.push((shard, offset, at - start, len));
        at += len;
    }
    out
}

impl ShardedModel {
    /// Saves this rank's shard of the optimizer state into `checkpoint`, as
    /// `zero/shard_<rank>_of_<world>.safetensors` (PyTorch's names: `exp_avg`, `exp_avg_sq`,
    /// `momentum_buffer`), and on rank 0 `zero/index.json`, which names the shards, the world
    /// size, the optimizer and the flattening order. Call it on every rank, as `backward_step`;
    /// the report that takes the checkpoint commits it once every rank's shard is in.
    ///
    /// The parameters themselves are whole on every rank (ZeRO-1 and 2 shard the optimizer,
    /// not the model): save them with [`save_var_store`](crate::SaveVarStore::save_var_store) as for any model,
    /// which writes rank 0's; exports and predictors read them from there.
    pub fn save_optimizer(&self, checkpoint: &mut CheckpointWriter) -> Result<()> {
        let (rank, world) = self.rank_and_world();
        let shards: Vec<String> = (0..world).map(|r| shard_file(r, world)).collect();
        let files = shards.iter().cloned().chain([INDEX_FILE.to_owned()]).collect();
        let folder = checkpoint.shard_folder(files)?.to_owned();
        let names = self.settings.state_names();
        let host = |t: &Tensor| t.f_to_device(tch::Device::Cpu);
        let buffers = self.state.buffers.iter().map(host).collect::<Result<Vec<_>, _>>().torch()?;
        let named: Vec<(&str, &Tensor)> = names.iter().copied().zip(&buffers).collect();
        let path = folder.join(&shards[rank]);
        Tensor::write_safetensors(&named, &path).torch()?;
        let durable = |path: &Path| {
            std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(|e| Error::io(path, e))
        };
        durable(&path)?;
        if rank == 0 {
            let index = ShardIndex {
                format: INDEX_FORMAT,
                sharding: self.sharding,
                optimizer: self.settings,
                step: self.state.step,
                world_size: world,
                parameters: self.layout.clone(),
                numel: self.n,
                shard_len: self.shard_len,
                state: names.iter().map(|n| n.to_string()).collect(),
                shards,
            };
            let path = folder.join(INDEX_FILE);
            let json = serde_json::to_vec_pretty(&index).expect("the index serialises");
            std::fs::write(&path, json).map_err(|e| Error::io(&path, e))?;
            durable(&path)?;
        }
        Ok(())
    }

    /// Restores this rank's shard of the optimizer state from `checkpoint` (saved by
    /// [`save_optimizer`](Self::save_optimizer)), cut anew when it was saved at another world
    /// size, and takes this rank's shard of the parameters from the model's variables again:
    /// load them first (`Checkpoint::load_var_store`). Call it on every rank. The optimizer's
    /// settings may differ from the saved ones (a new learning rate), its kind may not.
    pub fn load_optimizer(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        let dir = checkpoint.files()?.join(SHARDS_DIR);
        let bad = |message: String| Error::Checkpoint { path: dir.clone(), message };
        let missing = "sharded optimizer state (saved by ShardedModel::save_optimizer)";
        let index: ShardIndex =
            read_index(&dir.join(INDEX_FILE), INDEX_FORMAT, missing).map_err(bad)?;
        let misfit =
            self.settings.misfit(&index.optimizer, &index.state, &index.parameters, &self.layout);
        if let Some(message) = misfit {
            return Err(bad(message));
        }
        let names = self.settings.state_names();
        if index.shard_len.saturating_mul(index.shards.len()) < self.n {
            return Err(bad(format!(
                "{INDEX_FILE} names {} shards of {} numbers, too few for this model's {}",
                index.shards.len(),
                index.shard_len,
                self.n
            )));
        }
        let (rank, _) = self.rank_and_world();
        let start = (rank * self.shard_len).min(self.n);
        let end = ((rank + 1) * self.shard_len).min(self.n);
        let mut state = ShardState::new(&self.settings, self.shard_len, self.shard.device())?;
        let mut file = None;
        for (shard, from, to, len) in pieces(index.shard_len, start, end) {
            let name = index.shards.get(shard).ok_or_else(|| {
                bad(format!(
                    "{INDEX_FILE} names {} shards; shard {shard} is needed",
                    index.shards.len()
                ))
            })?;
            if file.as_ref().is_none_or(|(n, _)| n != name) {
                let path = dir.join(name);
                let tensors =
                    Tensor::read_safetensors(&path).map_err(|e| bad(format!("{name}: {e}")))?;
                file = Some((name.clone(), tensors));
            }
            let (_, tensors) = file.as_ref().expect("read above");
            for (buffer, wanted) in state.buffers.iter().zip(names) {
                let saved = tensors
                    .iter()
                    .find(|(n, t)| n == wanted && t.numel() == index.shard_len)
                    .ok_or_else(|| {
                        bad(format!("{name} holds no `{wanted}` of {} numbers", index.shard_len))
                    })?;
                buffer
                    .f_narrow(0, to as i64, len as i64)
                    .torch()?
                    .f_copy_(&saved.1.f_narrow(0, from as i64, len as i64).torch()?)
                    .torch()?;
            }
        }
        state.step = index.step;
        self.state = state;
        self.take_parameters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtune_collective::{GroupOptions, RingGroup};
    use rtune_driver::metrics::Metrics;

    /// A one-rank model of a 10 -> `hidden` -> 3 MLP with `optimizer`, and its variables.
    fn one_rank(hidden: i64, optimizer: OptimizerSettings) -> (ShardedModel, VarStore) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peers = [listener.local_addr().unwrap()];
        let ring = RingGroup::connect(0, 1, listener, &peers, GroupOptions::new(1)).unwrap();
        let shape = crate::worker::group::Shape {
            rank: 0,
            world: 1,
            local_rank: 0,
            local_world: 1,
            node_rank: 0,
        };
        let group = crate::worker::group::Group::new(Box::new(ring), shape, None);
        let vs = VarStore::new(tch::Device::Cpu);
        let _a = tch::nn::linear(vs.root() / "a", 10, hidden, Default::default());
        let _b = tch::nn::linear(vs.root() / "b", hidden, 3, Default::default());
        let model =
            ShardedModel::new(ModelGroup::Ring(group), &vs, Sharding::Zero1, optimizer).unwrap();
        (model, vs)
    }

    /// A saved optimizer state loads back whole into the same model, and is refused, with what
    /// differs, by a model of other shapes or an optimizer of another kind, as is a checkpoint
    /// saved without it.
    #[test]
    fn the_saved_optimizer_state_loads_into_its_own_model_only() {
        let dir = tempfile::tempdir().unwrap();
        let (mut model, _vs) = one_rank(7, OptimizerSettings::adam(0.01));
        for _ in 0..3 {
            let grad = Tensor::randn([model.shard_len as i64], (Kind::Float, tch::Device::Cpu));
            model.settings.step(&mut model.state, &model.scratch, &model.shard, &grad).unwrap();
        }
        let mut writer = CheckpointWriter::create(dir.path(), 0, 1).unwrap();
        model.save_optimizer(&mut writer).unwrap();
        let saved = writer.commit(dir.path(), "checkpoint_000001", 1, 0, &Metrics::new()).unwrap();
        let bare = CheckpointWriter::create(dir.path(), 0, 2)
            .unwrap()
            .commit(dir.path(), "checkpoint_000002", 2, 0, &Metrics::new())
            .unwrap();

        let (mut same, _vs) = one_rank(7, OptimizerSettings::adam(0.1));
        same.load_optimizer(&saved).unwrap();
        assert_eq!(same.state.step, 3);
        for (a, b) in same.state.buffers.iter().zip(&model.state.buffers) {
            assert!(a.equal(b) && a.abs().sum(Kind::Float).double_value(&[]) > 0.0);
        }
        let refusal = |hidden, optimizer, ck: &Checkpoint| {
            one_rank(hidden, optimizer).0.load_optimizer(ck).unwrap_err().to_string()
        };
        let e = refusal(8, OptimizerSettings::adam(0.01), &saved);
        assert!(
            e.contains(
                "where it holds `a.bias` of shape [7], this model has `a.bias` of shape [8]"
            ),
            "{e}"
        );
        let e = refusal(7, OptimizerSettings::sgd(0.1, 0.9), &saved);
        assert!(
            e.contains("(exp_avg, exp_avg_sq), this model's optimizer keeps momentum_buffer"),
            "{e}"
        );
        let e = refusal(7, OptimizerSettings::adam(0.01), &bare);
        assert!(e.contains("no sharded optimizer state"), "{e}");
    }

    /// Every new shard of every world size from 1 to 5, made of the pieces of the old shards
    /// of every other: each of its numbers taken once, from where it was.
    #[test]
    fn pieces_of_old_shards_make_every_new_shard() {
        for n in 1..40_usize {
            for (old_world, new_world) in
                (1..6_usize).flat_map(|a| (1..6_usize).map(move |b| (a, b)))
            {
                let (old_len, new_len) = (n.div_ceil(old_world), n.div_ceil(new_world));
                for rank in 0..new_world {
                    let (start, end) = ((rank * new_len).min(n), ((rank + 1) * new_len).min(n));
                    let mut got = vec![None; end - start];
                    for (shard, from, to, len) in pieces(old_len, start, end) {
                        assert!(shard < old_world && from + len <= old_len);
                        for i in 0..len {
                            assert_eq!(got[to + i].replace(shard * old_len + from + i), None);
                        }
                    }
                    assert_eq!(got, (start..end).map(Some).collect::<Vec<_>>(), "n {n}");
                }
            }
        }
    }
}
