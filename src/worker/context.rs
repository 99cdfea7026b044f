//! `TrainContext`: what a train function sees of its run (Ray's `ray.train.get_context()` plus
//! `report`), and `DistributedModel`, the data-parallel wrapper `prepare_model` returns.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use rtune_searchers::Params;
use tch::nn::VarStore;
use tch::{Device, Tensor};

use super::backend::Backend;
use super::buckets::{
    Bucket, ModelGroup, broadcast_from_rank_0, buckets_of, gather_into, scatter_from,
};
use crate::torch::TorchResult;
use crate::worker::DatasetShard;
use crate::worker::DriverLink;
use rtune_collective::ReduceOp;
use rtune_driver::data::{DATA_SCHEMA_FILE, DataPlan};
use rtune_driver::error::{Error, Result};
use rtune_driver::metrics::{IntoMetrics, to_wire};
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::{
    CheckpointWriter, SHARDS_DIR, TMP_PREFIX, checkpoint_name,
};
use rtune_driver::storage::remote::Remote;

pub(crate) use super::group::SharedGroup;

pub(crate) struct ContextParts<'a> {
    pub master_host: String,
    /// The CPUs this rank reserved from the pool (its libtorch threads).
    pub threads: usize,
    pub device: Device,
    pub params: Params,
    pub run_dir: PathBuf,
    pub resume: Option<Checkpoint>,
    pub start_iteration: u64,
    pub trial_id: String,
    pub trial_name: String,
    pub experiment_name: String,
    pub data: Option<Rc<DataPlan>>,
    /// The collective group, with the rank's place in it.
    pub group: SharedGroup,
    /// What the group's framework set up around the train function (see `prepare_model`).
    pub backend: Box<dyn Backend>,
    /// The run's folder on an object store: rank 0 uploads each checkpoint there.
    pub store: Option<rtune_driver::storage::remote::Remote>,
    /// Those uploads go on in the background (`CheckpointUpload::Async`).
    pub upload_async: bool,
    /// `run_dir` is this rank's scratch folder on its node: a checkpoint goes once it is up.
    pub scratch: bool,
    pub sharding: Option<super::Sharding>,
    pub link: &'a mut DriverLink,
}

/// The run as one worker sees it. Handed to the train function by `&mut`.
pub struct TrainContext<'a> {
    master_host: String,
    threads: usize,
    device: Device,
    params: Params,
    run_dir: PathBuf,
    resume: Option<Checkpoint>,
    start_iteration: u64,
    trial_id: String,
    trial_name: String,
    experiment_name: String,
    /// The run's prepared datasets (`TorchTrainer::datasets`).
    data: Option<Rc<DataPlan>>,
    reports: u64,
    stop_requested: bool,
    group: SharedGroup,
    backend: Box<dyn Backend>,
    store: Option<rtune_driver::storage::remote::Remote>,
    upload_async: bool,
    scratch: bool,
    sharding: Option<super::Sharding>,
    /// Background uploads not yet reported done: each checkpoint's name and its upload.
    uploads: Vec<(String, std::thread::JoinHandle<Result<()>>)>,
    /// Whether a report has waited for an upload yet (said once in the log).
    said_uploads_behind: bool,
    link: &'a mut DriverLink,
    /// When the train function's current step began: the last report's return (or its start).
    step_began: std::time::Instant,
}

// SAFETY: the one type worker processes hand train functions (`worker::process`).
unsafe impl rtune_driver::train::TrainContextType for TrainContext<'_> {}

impl<'a> TrainContext<'a> {
    pub(crate) fn new(parts: ContextParts<'a>) -> Self {
        TrainContext {
            master_host: parts.master_host,
            threads: parts.threads,
            device: parts.device,
            params: parts.params,
            run_dir: parts.run_dir,
            resume: parts.resume,
            start_iteration: parts.start_iteration,
            trial_id: parts.trial_id,
            trial_name: parts.trial_name,
            experiment_name: parts.experiment_name,
            data: parts.data,
            reports: 0,
            stop_requested: false,
            group: parts.group,
            backend: parts.backend,
            store: parts.store,
            upload_async: parts.upload_async,
            scratch: parts.scratch,
            sharding: parts.sharding,
            uploads: Vec::new(),
            said_uploads_behind: false,
            link: parts.link,
            step_began: std::time::Instant::now(),
        }
    }

    /// The collective group's links, to keep open after the context is gone (see
    /// `worker::process::Ended::links`).
    pub(crate) fn links(&self) -> SharedGroup {
        self.group.clone()
    }

    /// Tears down what the group's backend set up, once the train function has returned.
    pub(crate) fn shut_down_backend(&mut self) {
        self.backend.on_shutdown();
    }

    /// This rank's place in the group now: an elastic group that went on in place after
    /// losing a rank has new ranks and a smaller world from the next step on.
    pub fn world_rank(&self) -> usize {
        self.group.shape().rank
    }

    pub fn world_size(&self) -> usize {
        self.group.shape().world
    }

    pub fn local_rank(&self) -> usize {
        self.group.shape().local_rank
    }

    pub fn local_world_size(&self) -> usize {
        self.group.shape().local_world
    }

    pub fn node_rank(&self) -> usize {
        self.group.shape().node_rank
    }

    /// Whether the group is elastic (`ScalingConfig::elastic`): its size may change between
    /// steps, and its datasets' batches follow it (see [`DatasetShard`]).
    pub fn is_elastic(&self) -> bool {
        self.group.is_elastic()
    }

    /// The address of rank 0's host as every rank reaches it (torchrun's `MASTER_ADDR`).
    pub fn master_host(&self) -> &str {
        &self.master_host
    }

    /// `Device::Cpu`, or `Device::Cuda(n)` for the GPU the pool assigned to this worker.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The train loop config (with a Tuner: this trial's sampled hyperparameters merged in).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The trial's id in a sweep (`<experiment id>_<index>`, as in Ray); None outside one.
    pub fn trial_id(&self) -> Option<&str> {
        Some(self.trial_id.as_str()).filter(|s| !s.is_empty())
    }

    /// The trial's name in a sweep (its directory's name); None outside one.
    pub fn trial_name(&self) -> Option<&str> {
        Some(self.trial_name.as_str()).filter(|s| !s.is_empty())
    }

    /// The sweep's name (the experiment directory's); None outside one.
    pub fn experiment_name(&self) -> Option<&str> {
        Some(self.experiment_name.as_str()).filter(|s| !s.is_empty())
    }

    /// The run's (or trial's) directory: result files, checkpoints, worker logs.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The CPUs this rank reserved from the pool (`ScalingConfig`'s per-worker CPUs, at least
    /// 1): the threads its work should use (libtorch's are set to it).
    pub fn num_cpus(&self) -> usize {
        self.threads
    }

    /// The names of the run's datasets, `train` first, then the others in name order.
    pub fn dataset_names(&self) -> Vec<String> {
        let Some(plan) = self.data.as_deref() else { return Vec::new() };
        let mut names: Vec<String> = plan.datasets.keys().cloned().collect();
        names.sort_by_key(|n| (n != "train", n.clone()));
        names
    }

    /// The name of the backend the group's framework set up (`torch`, `xgboost`).
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The checkpoint to resume from: the latest one after a failure, or the one given to
    /// `TorchTrainer::resume_from_checkpoint`.
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.resume.as_ref()
    }

    /// Iterations reported so far, counting those before a restart: the next report is
    /// `iteration() + 1`. A resumed train loop starts its epochs here.
    pub fn iteration(&self) -> u64 {
        self.start_iteration + self.reports
    }

    /// This worker's part of dataset `name` (Ray's `get_dataset_shard`), read, preprocessed
    /// with the preprocessor fitted on the training data, as tensors whose batches are on this
    /// worker's device: see
    /// [`DatasetShard`] for how rows are split between ranks, balanced and shuffled. Its epoch
    /// starts at `iteration()`, so a loop that reports once per epoch goes on, after a resume,
    /// with the batch orders it would have had.
    pub fn dataset_shard(&self, name: &str) -> Result<DatasetShard> {
        let plan = self.data.as_deref().ok_or_else(|| {
            Error::Data(format!(
                "no dataset named `{name}`: this run has no datasets (give them with \
                 TorchTrainer::datasets)"
            ))
        })?;
        match self.group.is_elastic() {
            // Every rank holds the whole dataset; each step's batch is cut for the group as it
            // is at that step.
            true => DatasetShard::load(plan, name, 0, 1, self.iteration(), self.device)
                .map(|shard| shard.following(self.group.clone())),
            false => {
                let (rank, world) = (self.world_rank(), self.world_size());
                DatasetShard::load(plan, name, rank, world, self.iteration(), self.device)
            }
        }
    }

    /// The run's sharding (`ScalingConfig::sharding`): what to give `prepare_model_sharded`,
    /// or `None` for plain data parallelism (`prepare_model`).
    pub fn sharding(&self) -> Option<super::Sharding> {
        self.sharding
    }

    /// Whether the driver has asked the run to stop (also signalled by `report`'s error).
    pub fn should_stop(&self) -> bool {
        self.stop_requested
    }

    /// Starts a checkpoint for the next report: save the model into it, add files under its
    /// `path()`, then pass it to `report_with_checkpoint`. Only rank 0's checkpoint is kept; on
    /// other ranks the writer saves no model (see [`CheckpointWriter::is_kept`]), so every rank
    /// can run the same code without writing N copies. A [`ShardedModel`](super::ShardedModel)
    /// saves each rank's shard of its optimizer state into it on every rank.
    pub fn new_checkpoint(&self) -> Result<CheckpointWriter> {
        let seq = self.reports + 1;
        let mut writer = CheckpointWriter::create(&self.run_dir, self.world_rank(), seq)?;
        if !self.scratch {
            // One folder for every rank's shard, named alike on every rank.
            let attempt = self.link.attempt();
            writer.share_shards(self.run_dir.join(format!("{TMP_PREFIX}zero_{attempt}_{seq}")));
        }
        Ok(writer)
    }

    /// Reports this iteration's metrics (Ray's `train.report(metrics)`) and waits until every
    /// rank has reported the same iteration.
    ///
    /// Every rank must report the same number of times. Rank 0's metrics are the run's; other
    /// ranks' metrics are checked and dropped (to combine values across ranks, all-reduce them
    /// first). rtune adds `training_iteration`, `time_total_s`, `time_this_iter_s` and
    /// `timestamp`.
    ///
    /// Returns `Err(Error::StopRequested)` when the driver wants the run to end (a scheduler's
    /// decision): return it with `?` and the run ends cleanly.
    pub fn report(&mut self, metrics: impl IntoMetrics) -> Result<()> {
        self.report_maybe_with(metrics, None)
    }

    /// Reports this iteration's metrics with a checkpoint (`new_checkpoint`, the model saved
    /// into it), as [`report`](Self::report) does; rank 0's checkpoint is the run's (committed
    /// before the reply, so a stop asked in it finds the checkpoint kept), other ranks' empty
    /// ones are discarded.
    pub fn report_with_checkpoint(
        &mut self,
        metrics: impl IntoMetrics,
        checkpoint: CheckpointWriter,
    ) -> Result<()> {
        self.report_maybe_with(metrics, Some(checkpoint))
    }

    /// The attempt number this rank's checkpoints are named by: the attempt's, or the one the
    /// driver gave when the group re-formed in place.
    fn checkpoint_attempt(&self) -> u32 {
        self.group.checkpoint_attempt().unwrap_or(self.link.attempt())
    }

    /// `report`, with a checkpoint or without one.
    pub(crate) fn report_maybe_with(
        &mut self,
        metrics: impl IntoMetrics,
        mut checkpoint: Option<CheckpointWriter>,
    ) -> Result<()> {
        // Whether ranks can join at this report: asked before anything here calls a collective.
        let joinable = self.group.take_joinable();
        let metrics = metrics.into_metrics()?;
        let iteration = self.iteration() + 1;
        if let Some(writer) = checkpoint.as_mut().filter(|w| w.is_sharded()) {
            self.join_shards(writer, &checkpoint_name(iteration, self.checkpoint_attempt()))?;
        }
        // Background uploads that a report had to wait for (see below).
        let mut waited = Vec::new();
        let committed = match checkpoint {
            Some(writer) if self.world_rank() == 0 => {
                // The fitted preprocessor travels with the weights (prediction applies it).
                if let Some(plan) = &self.data {
                    let path = writer.path().join(DATA_SCHEMA_FILE);
                    let json = serde_json::to_vec_pretty(&plan.schema).expect("schema serialises");
                    std::fs::write(&path, json).map_err(|e| Error::io(path, e))?;
                }
                let name = checkpoint_name(iteration, self.checkpoint_attempt());
                let created = writer.created();
                writer.commit(&self.run_dir, &name, iteration, self.link.attempt(), &metrics)?;
                let bytes =
                    rtune_driver::storage::checkpoint::folder_bytes(&self.run_dir.join(&name));
                super::timing::checkpoint(bytes, created);
                // On an object store the driver never records a checkpoint the store does not
                // hold whole: the report waits for the upload, or, with background uploads,
                // names it once it is done.
                // In a scratch folder, the local copy goes once it is up (the store is its home).
                let scratch = self.scratch;
                let up = move |store: &Remote, dir: &Path, name: &str| -> Result<()> {
                    super::timing::upload(|| store.upload_folder(dir, name))?;
                    match scratch {
                        true => std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e)),
                        false => Ok(()),
                    }
                };
                // One background upload in flight at most: uploads that cannot keep up with
                // the checkpoints hold the report back rather than pile up (said once).
                let behind = self.uploads.iter().any(|(_, upload)| !upload.is_finished());
                if self.store.is_some() && self.upload_async && behind {
                    if !self.said_uploads_behind {
                        tracing::warn!(
                            "checkpoint uploads cannot keep up: reports wait for the previous \
                             checkpoint's upload (checkpoint less often, or give the store more \
                             connections)"
                        );
                        self.said_uploads_behind = true;
                    }
                    waited = super::timing::upload_wait(|| self.uploads_done(true))?;
                }
                match &self.store {
                    Some(store) if self.upload_async => {
                        let (store, dir) = (store.clone(), self.run_dir.join(&name));
                        let upload_name = name.clone();
                        let upload = std::thread::Builder::new()
                            .name("rtune-upload".into())
                            .spawn(move || up(&store, &dir, &upload_name))
                            .map_err(|e| Error::Worker(format!("upload thread: {e}")))?;
                        self.uploads.push((name, upload));
                        String::new()
                    }
                    Some(store) => {
                        up(store, &self.run_dir.join(&name), &name)?;
                        name
                    }
                    None => name,
                }
            }
            _ => String::new(),
        };
        let mut uploaded = waited;
        uploaded.extend(self.uploads_done(false)?);
        let mut times = super::timing::take(self.step_began);
        if let tch::Device::Cuda(ordinal) = self.device {
            super::timing::gpu(&mut times, ordinal);
        }
        let request = rtune_driver::proto::ReportRequest {
            key: None,
            seq: self.reports + 1,
            metrics_json: to_wire(&metrics),
            checkpoint: committed,
            uploaded,
            times: Some(times),
            joinable,
        };
        let reply = super::timing::report(|| self.link.report(request))?;
        self.step_began = std::time::Instant::now();
        self.reports += 1;
        if reply.stop {
            self.stop_requested = true;
            return Err(Error::StopRequested);
        }
        if reply.regroup {
            super::join::take_in(&self.group)?;
            self.group.forget_first_op();
        }
        Ok(())
    }

    /// Waits until every rank has written its part of a sharded checkpoint (from a scratch
    /// folder: uploaded it into the checkpoint `name` on the store), then rank 0 takes them
    /// into its checkpoint, which it commits only then: a rank that dies before it wrote its
    /// part fails the barrier, and no checkpoint is recorded without every part.
    fn join_shards(&mut self, writer: &mut CheckpointWriter, name: &str) -> Result<()> {
        if let Some(store) = self.store.as_ref().filter(|_| self.scratch && self.world_rank() != 0)
        {
            store.join(name).join(SHARDS_DIR).put_files(writer.shards())?;
        }
        self.barrier()?;
        match self.world_rank() {
            0 => writer.take_shards(),
            _ => Ok(()),
        }
    }

    /// The checkpoints whose background uploads are done (all of them, waiting, with `wait`),
    /// in the order they were made; an upload that failed fails the run.
    fn uploads_done(&mut self, wait: bool) -> Result<Vec<String>> {
        let mut done = Vec::new();
        while self.uploads.first().is_some_and(|(_, upload)| wait || upload.is_finished()) {
            let (name, upload) = self.uploads.remove(0);
            match upload.join() {
                Ok(Ok(())) => done.push(name),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Error::Worker(format!("the upload of {name} panicked"))),
            }
        }
        Ok(done)
    }

    /// Waits for the background uploads of the run's checkpoints; their names.
    pub(crate) fn wait_for_uploads(&mut self) -> Result<Vec<String>> {
        self.uploads_done(true)
    }

    /// Makes `vs` data-parallel: copies rank 0's weights to every rank now, and returns the
    /// handle whose `sync_gradients` averages gradients across ranks after each backward pass.
    ///
    /// A model on the CPU averages through rtune's ring all-reduce; a model on a GPU through
    /// NCCL on the device, unless two or more ranks of the group share a physical GPU (fractional
    /// `GPU` per worker), which NCCL refuses: then through the CPU ring as well, each bucket
    /// copied to the host and back (the driver decides that from where the ranks are).
    pub fn prepare_model(&mut self, vs: &VarStore) -> Result<DistributedModel> {
        DistributedModel::new(self.model_group(vs.device())?, vs)
    }

    /// Makes `vs` data-parallel with its optimizer state (and with ZeRO-2 its averaged
    /// gradients) split across the ranks: copies rank 0's weights to every rank now, and
    /// returns the handle whose `backward_step` trains with `optimizer` on this rank's shard
    /// (see [`ShardedModel`](crate::worker::ShardedModel)). Its collectives go as
    /// `prepare_model`'s do: the CPU ring, or NCCL for a model on a GPU of its own.
    pub fn prepare_model_sharded(
        &mut self,
        vs: &VarStore,
        sharding: super::Sharding,
        optimizer: super::OptimizerSettings,
    ) -> Result<super::ShardedModel> {
        let group = self.model_group(vs.device())?;
        super::ShardedModel::new(group, vs, sharding, optimizer)
    }

    /// The process group a model on `device` averages through, as the Torch backend has it.
    fn model_group(&mut self, device: Device) -> Result<ModelGroup> {
        match self.backend.torch() {
            Some(torch) => torch.model_group(device),
            None => Err(Error::Worker(
                "prepare_model needs the Torch backend; this run's group has another".into(),
            )),
        }
    }

    /// Averages (or sums) `values` across ranks in place, e.g. validation counts.
    pub fn all_reduce(&mut self, values: &mut [f32], op: ReduceOp) -> Result<()> {
        let bytes = std::mem::size_of_val(values);
        Ok(super::timing::collective(bytes, || self.group.borrow_mut().all_reduce(values, op))?)
    }

    /// Every rank's `mine`, in rank order (a few bytes each: see `group::all_gather_bytes`).
    pub(crate) fn all_gather_bytes(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let bytes = mine.len() * self.world_size();
        super::timing::collective(bytes, || {
            super::group::all_gather_bytes(&mut **self.group.borrow_mut(), mine)
        })
    }

    /// Waits until every rank gets here.
    pub fn barrier(&mut self) -> Result<()> {
        Ok(self.group.borrow_mut().barrier()?)
    }
}

/// A model whose gradients are averaged across ranks (PyTorch's DDP, called explicitly).
pub struct DistributedModel {
    backend: ModelGroup,
    /// Variables sorted by name, the same order on every rank.
    params: Vec<Tensor>,
    /// Consecutive runs of `params` and the flat buffer each is reduced through.
    buckets: Vec<Bucket>,
}

impl DistributedModel {
    fn new(backend: ModelGroup, vs: &VarStore) -> Result<Self> {
        let named = sorted_variables(vs);
        let all: Vec<Tensor> = named.iter().map(|(_, t)| t.shallow_clone()).collect();
        broadcast_from_rank_0(&backend, &all)?;
        if let Some(group) = backend.group() {
            // A rank that joined a running group takes its optimizer's state now too.
            if group.take_joins_running() {
                let handed = super::join::hand_over_optimizer(&backend, None)?;
                handed.into_iter().for_each(|state| group.set_received(state));
            }
            group.keep_vars(&all);
            group.forget_first_op();
        }
        let params: Vec<Tensor> = trainable(named).into_iter().map(|(_, t)| t).collect();
        let buckets = buckets_of(&params, backend.device());
        Ok(DistributedModel { backend, params, buckets })
    }

    /// Averages every parameter's gradient across ranks. Call after `backward`, before the
    /// optimizer step. In an elastic group whose batches come from a dataset shard, each
    /// rank's gradient weighs by its rows of the step's global batch, so the result is the
    /// global batch's mean gradient whatever the group's size (its rows split unevenly).
    pub fn sync_gradients(&self) -> Result<()> {
        if self.backend.world_size() == 1 {
            return Ok(());
        }
        let _no_grad = tch::no_grad_guard();
        let share = self.backend.group().and_then(|g| g.share());
        for bucket in &self.buckets {
            let params = &self.params[bucket.range.clone()];
            gather_into(&bucket.flat, params, Tensor::grad)?;
            let op = match share {
                None => ReduceOp::Avg,
                // No rows here: nothing of this rank's (a loss over no rows is NaN).
                Some((0, _)) => {
                    let _ = bucket.flat.shallow_clone().f_zero_().torch()?;
                    ReduceOp::Sum
                }
                Some((rows, global)) => {
                    let weight = rows as f64 / global as f64;
                    let _ = bucket.flat.shallow_clone().f_mul_scalar_(weight).torch()?;
                    ReduceOp::Sum
                }
            };
            self.backend.all_reduce(&bucket.flat, op)?;
            let grads: Vec<Tensor> = params.iter().map(Tensor::grad).collect();
            scatter_from(&bucket.flat, &grads)?;
        }
        Ok(())
    }

    /// `zero_grad`, `backward`, `sync_gradients`, `step`: one data-parallel training step,
    /// with tch's optimizer or rtune's [`ModelOptimizer`](super::ModelOptimizer) (whose state
    /// checkpoints hold).
    ///
    /// In an elastic group on the CPU ring, a rank lost during the step does not end the run:
    /// the others re-form their group in place and this step is dropped (Ok without an
    /// optimizer step); a dataset shard's batches then give it again, cut for the new group
    /// (see `worker::group`).
    pub fn backward_step(
        &self,
        optimizer: &mut impl super::OptimizerStep,
        loss: &Tensor,
    ) -> Result<()> {
        if let Some(group) = self.backend.group() {
            group.first_op(optimizer.model_optimizer().is_some());
        }
        optimizer.zero_grad()?;
        loss.f_backward().torch()?;
        if let Err(e) = self.sync_gradients() {
            return match self.backend.group() {
                Some(group) => group.recover(e),
                None => Err(e),
            };
        }
        let group = self.backend.group();
        if let Some(handed) = group.and_then(|g| g.take_received()) {
            let Some(taker) = optimizer.model_optimizer() else {
                return Err(Error::Worker(
                    "this rank joined its group in place, but its optimizer cannot take the \
                     group's state: step with rtune's ModelOptimizer (OptimizerSettings::\
                     for_model)"
                        .into(),
                ));
            };
            taker.take_over(&handed)?;
        }
        optimizer.step()?;
        if let Some(group) = group {
            group.step_done();
            if let Some(kept) = optimizer.model_optimizer() {
                group.keep_optimizer(|| kept.handover());
            }
        }
        Ok(())
    }
}

/// `vs`'s variables sorted by name: the same order on every rank.
pub(super) fn sorted_variables(vs: &VarStore) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// The trainable ones of `named` variables, in their order.
pub(super) fn trainable(named: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    named.into_iter().filter(|(_, t)| t.requires_grad()).collect()
}
