//! TorchTrainer end to end: real worker processes (this test binary started again), real
//! libtorch, the ring all-reduce over loopback TCP, real files.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::common::alive;
use rtune::digits::{DIGIT_CLASSES, DIGIT_FEATURES, Digits};
use rtune::{
    Error, FailureConfig, Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext, TrainResult,
};
use rtune::{LoadVarStore, SaveVarStore};
use rtune_driver::data::shard;
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

pub fn mlp(vs: &nn::Path, hidden: i64) -> impl Module + use<> {
    nn::seq()
        .add(nn::linear(vs / "fc1", DIGIT_FEATURES as i64, hidden, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs / "fc2", hidden, DIGIT_CLASSES as i64, Default::default()))
}

fn run_config(storage: &Path) -> RunConfig {
    RunConfig::default().storage_path(storage)
}

// ---------------------------------------------------------------- convergence

fn train_digits(ctx: &mut TrainContext) -> Result<()> {
    let epochs = ctx.params().get::<u64>("epochs")?;
    train_digits_mlp(ctx, 3e-3, 64, epochs)
}

/// Data-parallel digits MLP of width `hidden`, Adam at `lr`, for `epochs` epochs (resuming from
/// the context's checkpoint): `val_acc` reported with a checkpoint every epoch.
pub fn train_digits_mlp(ctx: &mut TrainContext, lr: f64, hidden: i64, epochs: u64) -> Result<()> {
    let split = Digits::split(0)?;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root(), hidden);
    if let Some(ck) = ctx.checkpoint() {
        ck.load_var_store(&mut vs)?;
    }
    let ddp = ctx.prepare_model(&vs)?;
    let mut opt = nn::Adam::default().build(&vs, lr)?;
    let (rank, world) = (ctx.world_rank(), ctx.world_size());
    for epoch in ctx.iteration()..epochs {
        let order = shard(split.train.len(), rank, world, epoch, 1);
        for batch in order.chunks_exact(32) {
            let (x, y) = split.train.select(batch).tensors();
            ddp.backward_step(&mut opt, &net.forward(&x).cross_entropy_for_logits(&y))?;
        }
        let (x, y) = split.validation.tensors();
        let acc = tch::no_grad(|| {
            net.forward(&x).argmax(-1, false).eq_tensor(&y).to_kind(Kind::Float).mean(Kind::Float)
        })
        .double_value(&[]);
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        ctx.report_with_checkpoint([("val_acc", acc)], ck)?;
    }
    Ok(())
}

pub fn two_workers_converge_on_digits() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let result = TorchTrainer::new(train_digits)
        .train_loop_config(Params::new().with("epochs", 8))
        .scaling(ScalingConfig::workers(2))
        .run_config(run_config(dir.path()))
        .fit()?;
    ensure!(result.metrics_history.len() == 8, "8 reports, got {}", result.metrics_history.len());
    let acc = result.metrics.as_ref().context("metrics")?["val_acc"];
    ensure!(acc > 0.9, "validation accuracy {acc} should pass 0.9 after 8 epochs");
    let ck = result.checkpoint.as_ref().context("a checkpoint")?;
    ensure!(ck.name() == "checkpoint_000008", "latest checkpoint is {}", ck.name());
    let rows = std::fs::read_to_string(result.path.join("result.json"))?;
    ensure!(rows.lines().count() == 8, "result.json has {} lines", rows.lines().count());
    ensure!(result.path.join("logs/rank_1.stderr").is_file(), "rank 1 has a log file");
    // Where each rank ran, as the ranks said at their join: this host, no GPU.
    let host = this_host()?;
    let placement = format!("{host}/cpu {host}/cpu");
    ensure!(result.placement.as_deref() == Some(placement.as_str()), "{:?}", result.placement);
    for row in rows.lines() {
        let row: serde_json::Value = serde_json::from_str(row)?;
        ensure!(row["placement"] == placement.as_str(), "row placement {}", row["placement"]);
    }
    Ok(())
}

/// Rank 1 sleeps before every all-reduce; rank 0 does not, so it waits for rank 1 inside it.
fn slow_rank_1(ctx: &mut TrainContext) -> Result<()> {
    for _ in 0..3 {
        if ctx.world_rank() == 1 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut sum = [1.0f32; 1000];
        ctx.all_reduce(&mut sum, rtune::collective::ReduceOp::Sum)?;
        ctx.report([("sum", f64::from(sum[0]))])?;
    }
    Ok(())
}

/// Each row says where each rank's step went: rank 1's steps hold its sleep, rank 0's steps
/// are spent waiting in the all-reduce for it; rank 0's figures are also the row's own.
pub fn rank_times_say_where_each_step_goes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let result = TorchTrainer::new(slow_rank_1)
        .scaling(ScalingConfig::workers(2))
        .run_config(run_config(dir.path()))
        .fit()?;
    ensure!(result.metrics_history.len() == 3, "{:?}", result.metrics_history);
    for (i, row) in result.metrics_history.iter().enumerate() {
        let figure =
            |key: &str| row.get(key).copied().with_context(|| format!("no {key} in {row:?}"));
        ensure!(figure("sum")? == 2.0, "{row:?}");
        ensure!(figure("ranks/1/time_step_s")? >= 0.3, "rank 1's step holds its sleep: {row:?}");
        ensure!(figure("ranks/0/collective_bytes")? == 4000.0, "{row:?}");
        ensure!(figure("time_step_s")? == figure("ranks/0/time_step_s")?, "{row:?}");
        ensure!(figure("time_collective_s")? == figure("ranks/0/time_collective_s")?, "{row:?}");
        // After the first report, the ranks start each step together (the report waits for
        // both): rank 0 then waits for rank 1 in the all-reduce.
        if i > 0 {
            let (waited, slow) =
                (figure("ranks/0/time_collective_s")?, figure("ranks/1/time_collective_s")?);
            ensure!(
                waited >= 0.2 && waited > slow,
                "rank 0 waited {waited} s, rank 1 {slow} s: {row:?}"
            );
        }
    }
    Ok(())
}

/// This machine's host name.
fn this_host() -> Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/hostname")?.trim().to_owned())
}

// ---------------------------------------------------------------- DDP equivalence

/// SGD on a fixed sequence of 64-image batches; with 2 workers each rank takes one half of
/// every batch. Saves the final weights as the run's checkpoint.
fn train_fixed_batches(ctx: &mut TrainContext) -> Result<()> {
    tch::manual_seed(42);
    let data = Digits::split(0)?.train;
    let vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root(), 32);
    let ddp = ctx.prepare_model(&vs)?;
    let mut opt = nn::Sgd::default().build(&vs, 0.1)?;
    let (rank, world) = (ctx.world_rank(), ctx.world_size());
    let per_rank = 64 / world;
    for step in 0..10 {
        let start = step * 64 + rank * per_rank;
        let indices: Vec<usize> = (start..start + per_rank).collect();
        let (x, y) = data.select(&indices).tensors();
        ddp.backward_step(&mut opt, &net.forward(&x).cross_entropy_for_logits(&y))?;
    }
    let mut ck = ctx.new_checkpoint()?;
    ck.save_var_store(&vs)?;
    ctx.report_with_checkpoint([("done", 1.0)], ck).map_err(Into::into)
}

fn final_weights(result: &TrainResult) -> Result<Vec<(String, Tensor)>> {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _net = mlp(&vs.root(), 32);
    result.checkpoint.as_ref().context("checkpoint")?.load_var_store(&mut vs)?;
    let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(vars)
}

pub fn two_half_batches_equal_one_full_batch() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fit = |workers| {
        TorchTrainer::new(train_fixed_batches)
            .scaling(ScalingConfig::workers(workers))
            .run_config(run_config(dir.path()).clone())
            .fit()
    };
    let one = final_weights(&fit(1)?)?;
    let two = final_weights(&fit(2)?)?;
    // Local mode (0 workers) is one rank in this process: the same steps as 1 worker.
    let local = final_weights(&fit(0)?)?;
    for ((name, a), (_, b)) in one.iter().zip(&local) {
        let diff = (a - b).abs().max().double_value(&[]);
        ensure!(diff < 1e-6, "{name}: 1 worker and local mode differ by {diff}");
    }
    let initial = {
        tch::manual_seed(42);
        let vs = nn::VarStore::new(Device::Cpu);
        let _net = mlp(&vs.root(), 32);
        vs.variables()
    };
    for ((name, a), (_, b)) in one.iter().zip(&two) {
        let diff = (a - b).abs().max().double_value(&[]);
        ensure!(diff < 1e-5, "{name}: 1 worker and 2 workers differ by {diff}");
        let moved = (a - &initial[name]).abs().max().double_value(&[]);
        ensure!(moved > 1e-3, "{name} barely changed ({moved}): the test would prove nothing");
    }
    Ok(())
}

// ---------------------------------------------------------------- sharded data parallel

/// The numbers of a JSON array (none for anything else).
fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default()
}

/// How far `ours` is from the reference run (`losses` at every step, final `weights`): the
/// weights' distance relative to the reference's norm, and the largest relative gap between
/// the losses of one step.
fn gaps(losses: &[f64], weights: &[f64], our_losses: &[f64], our_weights: &[f64]) -> (f64, f64) {
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let gap: Vec<f64> = weights.iter().zip(our_weights).map(|(a, b)| a - b).collect();
    let worst =
        losses.iter().zip(our_losses).map(|(a, b)| (a - b).abs() / a.abs()).fold(0.0, f64::max);
    (norm(&gap) / norm(weights), worst)
}

/// A small MLP (101 parameters: no world size of these tests divides them), the same on every
/// rank, and `rank`'s own fixed batch of 32 rows.
fn small_mlp_and_data(rank: usize) -> (nn::VarStore, impl Module, Tensor, Tensor) {
    tch::manual_seed(7);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = nn::seq()
        .add(nn::linear(vs.root() / "a", 10, 7, Default::default()))
        .add_fn(|x| x.tanh())
        .add(nn::linear(vs.root() / "b", 7, 3, Default::default()));
    tch::manual_seed(100 + rank as i64);
    let x = Tensor::randn([32, 10], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(3, [32], (Kind::Int64, Device::Cpu));
    (vs, net, x, y)
}

/// 200 full-batch steps of a small MLP (101 parameters: no world size divides them) on each
/// rank's own fixed data, as plain data parallelism with tch's optimizer (`way` = "ddp") or
/// sharded (`zero1`, `zero2`) with rtune's; the optimizer is `opt` (adam, adamw, sgd). Each
/// rank writes its losses, final weights and optimizer-state bytes to `<run>/<way>_<rank>.json`.
fn train_sharded_or_not(ctx: &mut TrainContext) -> Result<()> {
    use rtune::config::Sharding;
    use rtune::worker::OptimizerSettings;
    let (way, opt) = (ctx.params().get::<String>("way")?, ctx.params().get::<String>("opt")?);
    let rank = ctx.world_rank();
    let (vs, net, x, y) = small_mlp_and_data(rank);
    // What PyTorch's run of the same training starts from (`sharded_training_equals_pytorch`).
    let data = ctx.run_dir().join(format!("data_{rank}.safetensors"));
    Tensor::write_safetensors(&[("x", &x), ("y", &y)], data)?;
    if rank == 0 {
        vs.save(ctx.run_dir().join("init.safetensors"))?;
    }
    let mut losses = Vec::new();
    let state_bytes = if way == "ddp" {
        let ddp = ctx.prepare_model(&vs)?;
        let mut o = match opt.as_str() {
            "adam" => nn::Adam::default().build(&vs, 0.01)?,
            "adamw" => nn::AdamW::default().build(&vs, 0.01)?,
            _ => nn::Sgd { momentum: 0.9, ..Default::default() }.build(&vs, 0.05)?,
        };
        for _ in 0..200 {
            let loss = net.forward(&x).cross_entropy_for_logits(&y);
            losses.push(loss.double_value(&[]));
            ddp.backward_step(&mut o, &loss)?;
        }
        0
    } else {
        let sharding = if way == "zero1" { Sharding::Zero1 } else { Sharding::Zero2 };
        let o = match opt.as_str() {
            "adam" => OptimizerSettings::adam(0.01),
            "adamw" => OptimizerSettings::adamw(0.01),
            _ => OptimizerSettings::sgd(0.05, 0.9),
        };
        let mut sharded = ctx.prepare_model_sharded(&vs, sharding, o)?;
        for _ in 0..200 {
            let loss = net.forward(&x).cross_entropy_for_logits(&y);
            losses.push(loss.double_value(&[]));
            sharded.backward_step(&loss)?;
        }
        sharded.optimizer_state_bytes()
    };
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let weights: Vec<f32> = named
        .iter()
        .flat_map(|(_, t)| Vec::<f32>::try_from(t.reshape([-1])).unwrap_or_default())
        .collect();
    let out = serde_json::json!({"losses": losses, "weights": weights, "state_bytes": state_bytes});
    std::fs::write(ctx.run_dir().join(format!("{way}_{rank}.json")), out.to_string())?;
    ctx.report([("done", 1.0)]).map_err(Into::into)
}

/// ZeRO-1 and ZeRO-2 against plain data parallelism with tch's (libtorch's) optimizers, with
/// 2 and 4 ranks and shards of uneven length: the same losses at every step and the same final
/// weights (bit for bit where the arithmetic is the same; see below), the same weights on
/// every rank, and each rank's optimizer state its shard's alone.
pub fn sharded_training_equals_data_parallel_training() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let read = |path: std::path::PathBuf| -> Result<serde_json::Value> {
        Ok(serde_json::from_slice(
            &std::fs::read(&path).with_context(|| path.display().to_string())?,
        )?)
    };
    let parameters: usize = 10 * 7 + 7 + 7 * 3 + 3;
    for (workers, opt) in [(2, "adam"), (4, "adamw"), (2, "sgd"), (4, "adam")] {
        let mut runs = BTreeMap::new();
        for way in ["ddp", "zero1", "zero2"] {
            let config = Params::new().with("way", way).with("opt", opt);
            let result = TorchTrainer::new(train_sharded_or_not)
                .train_loop_config(config)
                // Half a CPU each: 4 ranks fit a machine of 2.
                .scaling(
                    ScalingConfig::workers(workers)
                        .resources_per_worker(BTreeMap::from([("CPU".to_owned(), 0.5)])),
                )
                .run_config(run_config(dir.path()).clone())
                .fit()?;
            let ranks: Vec<serde_json::Value> = (0..workers)
                .map(|r| read(result.path.join(format!("{way}_{r}.json"))))
                .collect::<Result<_>>()?;
            for (r, run) in ranks.iter().enumerate() {
                ensure!(
                    run["weights"] == ranks[0]["weights"],
                    "{way} {opt}: rank {r}'s weights differ from rank 0's"
                );
                let bytes = run["state_bytes"].as_u64().unwrap_or_default() as usize;
                if way != "ddp" {
                    let moments = if opt == "sgd" { 1 } else { 2 };
                    let shard = parameters.div_ceil(workers);
                    ensure!(
                        bytes == moments * 4 * shard,
                        "{way} {opt}: rank {r} holds {bytes} bytes of state for a shard of {shard}"
                    );
                }
            }
            runs.insert(way, ranks.into_iter().next().context("rank 0")?);
        }
        let ddp = &runs["ddp"];
        let (losses, weights) = (numbers(&ddp["losses"]), numbers(&ddp["weights"]));
        ensure!(weights.len() == parameters && losses.len() == 200);
        ensure!(
            losses[199] < 0.8 * losses[0],
            "{opt}: the loss went from {} to {}: nothing learnt",
            losses[0],
            losses[199]
        );
        for way in ["zero1", "zero2"] {
            let (their_losses, their_weights) =
                (numbers(&runs[way]["losses"]), numbers(&runs[way]["weights"]));
            // ZeRO-1 all-reduces as plain data parallelism does, and rtune's optimizer steps a
            // shard as libtorch's steps the whole variable: the same bits. So does ZeRO-2 with 2 ranks
            // (a sum of two is one order). With 4 its reduce-scatter adds the ranks' gradients
            // in another order than the all-reduce, and the last bits differ.
            if way == "zero1" || workers == 2 {
                ensure!(their_losses == losses, "{workers} ranks, {opt}, {way}: other losses");
                ensure!(their_weights == weights, "{workers} ranks, {opt}, {way}: other weights");
                continue;
            }
            let (relative, worst) = gaps(&losses, &weights, &their_losses, &their_weights);
            ensure!(relative < 1e-5, "{workers} ranks, {opt}, {way}: weights {relative:e} apart");
            ensure!(worst < 1e-5, "{workers} ranks, {opt}, {way}: losses {worst:e} apart");
        }
    }
    Ok(())
}

/// PyTorch's ZeRO on the inputs of `train_sharded_or_not`'s run in `run` (`argv[1]`): as many
/// gloo ranks as it had (`argv[3]`), `DistributedDataParallel` and `ZeroRedundancyOptimizer`
/// over `torch.optim.Adam` or `AdamW` (`argv[2]`), 200 steps; prints rank 0's losses and final
/// weights (in name order) as JSON.
const PYTORCH_ZERO: &str = r#"
import json, socket, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
from safetensors.torch import load_file
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

def rank_main(rank, run, opt, world, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    init, data = load_file(f"{run}/init.safetensors"), load_file(f"{run}/data_{rank}.safetensors")
    net = torch.nn.Sequential(torch.nn.Linear(10, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    named = {"a.weight": net[0].weight, "a.bias": net[0].bias, "b.weight": net[2].weight, "b.bias": net[2].bias}
    with torch.no_grad():
        for name, p in named.items():
            p.copy_(init[name])
    model = DistributedDataParallel(net)
    optimizer = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[opt]
    zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer, lr=0.01)
    losses = []
    for _ in range(200):
        zero.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data["x"]), data["y"])
        losses.append(loss.item())
        loss.backward()
        zero.step()
    if rank == 0:
        weights = [v for name in sorted(named) for v in named[name].detach().reshape(-1).tolist()]
        with open(out, "w") as f:
            json.dump({"losses": losses, "weights": weights}, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    run, opt, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = f"{run}/pytorch_{opt}.json"
    mp.start_processes(rank_main, args=(run, opt, world, port, out), nprocs=world, start_method="fork")
    print(open(out).read())
"#;

/// rtune's ZeRO-1 and ZeRO-2 against PyTorch's `ZeroRedundancyOptimizer` (gloo, with
/// `DistributedDataParallel`) on the same initial weights and data, 2 ranks with Adam and 4
/// with AdamW:
/// the losses at every step and the final weights within 1e-5 (PyTorch's Python Adam is not
/// libtorch's C++ one op for op, so the last bits may differ).
pub fn sharded_training_equals_pytorch() -> Result<()> {
    let dir = tempfile::tempdir()?;
    for (workers, opt) in [(2, "adam"), (4, "adamw")] {
        let ours = |way: &str| -> Result<(TrainResult, serde_json::Value)> {
            let result = TorchTrainer::new(train_sharded_or_not)
                .train_loop_config(Params::new().with("way", way).with("opt", opt))
                .scaling(
                    ScalingConfig::workers(workers)
                        .resources_per_worker(BTreeMap::from([("CPU".to_owned(), 0.5)])),
                )
                .run_config(run_config(dir.path()).clone())
                .fit()?;
            let path = result.path.join(format!("{way}_0.json"));
            let run = serde_json::from_slice(&std::fs::read(&path)?)?;
            Ok((result, run))
        };
        let (zero1, run1) = ours("zero1")?;
        let (_, run2) = ours("zero2")?;
        let world = workers.to_string();
        let out =
            crate::common::python(PYTORCH_ZERO, &[&zero1.path, Path::new(opt), Path::new(&world)])?;
        let theirs: serde_json::Value = serde_json::from_slice(&out)?;
        let (losses, weights) = (numbers(&theirs["losses"]), numbers(&theirs["weights"]));
        ensure!(losses.len() == 200 && weights.len() == 101, "PyTorch said {theirs}");
        for (way, run) in [("zero1", &run1), ("zero2", &run2)] {
            let (our_losses, our_weights) = (numbers(&run["losses"]), numbers(&run["weights"]));
            let (relative, worst) = gaps(&losses, &weights, &our_losses, &our_weights);
            let at = format!("{way}, {workers} ranks, {opt}");
            ensure!(relative < 1e-5, "{at}: weights {relative:e} from PyTorch's");
            ensure!(worst < 1e-5, "{at}: losses {worst:e} from PyTorch's");
            println!("{at}: weights {relative:.1e} and losses {worst:.1e} from PyTorch's");
        }
    }
    Ok(())
}

/// Adam on `small_mlp_and_data`, sharded as the run's `ScalingConfig::sharding` says (plain
/// data parallelism with rtune's `ModelOptimizer` without one), 10 steps per report and a
/// checkpoint at each (the model and the optimizer's state: with a sharding every rank's shard
/// of it), going on from the checkpoint it is given: weights and optimizer state. A resumed
/// sharded rank first writes the optimizer state it restored to `<run>/restored_<rank>.json`;
/// at the end each rank its weights to `<run>/weights_<rank>.json`. With `kill_at` = k, rank 1
/// SIGKILLs itself once (a marker file remembers) after saving its part of report k's
/// checkpoint and before the report commits it.
fn train_with_checkpoints(ctx: &mut TrainContext) -> Result<()> {
    use rtune::worker::OptimizerSettings;
    let (reports, kill_at) =
        (ctx.params().get::<u64>("reports")?, ctx.params().get::<u64>("kill_at")?);
    let rank = ctx.world_rank();
    let (mut vs, net, x, y) = small_mlp_and_data(rank);
    if let Some(ck) = ctx.checkpoint() {
        ck.load_var_store(&mut vs)?;
    }
    let (mut sharded, mut whole) = (None, None);
    match ctx.sharding() {
        Some(sharding) => {
            let mut model =
                ctx.prepare_model_sharded(&vs, sharding, OptimizerSettings::adam(0.01))?;
            if let Some(ck) = ctx.checkpoint().cloned() {
                model.load_optimizer(&ck)?;
                let (step, state) = model.optimizer_state()?;
                let state: BTreeMap<&str, Vec<f32>> = state
                    .iter()
                    .map(|(name, t)| Ok((*name, Vec::<f32>::try_from(t)?)))
                    .collect::<Result<_>>()?;
                let range = model.shard_range();
                let out = serde_json::json!({"step": step, "start": range.start, "state": state});
                std::fs::write(
                    ctx.run_dir().join(format!("restored_{rank}.json")),
                    out.to_string(),
                )?;
            }
            sharded = Some(model);
        }
        None => {
            let mut adam = OptimizerSettings::adam(0.01).for_model(&vs)?;
            if let Some(ck) = ctx.checkpoint() {
                adam.load(ck)?;
            }
            whole = Some((ctx.prepare_model(&vs)?, adam));
        }
    }
    for i in ctx.iteration() + 1..=reports {
        let mut loss = 0.0;
        for _ in 0..10 {
            let l = net.forward(&x).cross_entropy_for_logits(&y);
            loss = l.double_value(&[]);
            match (&mut sharded, &mut whole) {
                (Some(model), _) => model.backward_step(&l)?,
                (_, Some((ddp, adam))) => ddp.backward_step(adam, &l)?,
                _ => anyhow::bail!("no model"),
            }
        }
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        match (&sharded, &whole) {
            (Some(model), _) => model.save_optimizer(&mut ck)?,
            (_, Some((_, adam))) => adam.save(&mut ck)?,
            _ => anyhow::bail!("no model"),
        }
        let marker = ctx.run_dir().join("killed_once");
        if rank == 1 && i == kill_at && !marker.exists() {
            std::fs::write(&marker, b"")?;
            // SAFETY: kill(2) on our own pid.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        ctx.report_with_checkpoint([("loss", loss)], ck)?;
    }
    let weights: Vec<f32> = vs
        .variables()
        .into_iter()
        .collect::<BTreeMap<_, _>>()
        .values()
        .flat_map(|t| Vec::<f32>::try_from(t.reshape([-1])).unwrap_or_default())
        .collect();
    std::fs::write(
        ctx.run_dir().join(format!("weights_{rank}.json")),
        serde_json::to_string(&weights)?,
    )?;
    Ok(())
}

/// Checkpoints with the optimizer's state, sharded (ZeRO-2) and whole (`ModelOptimizer`): a
/// rank killed between saving its part and the commit leaves no recorded checkpoint of that
/// report, and the run resumed from the last one (the optimizer's state restored) ends with
/// the very weights of a run never killed. Resumed with 3 ranks instead of 2, each rank's
/// sharded optimizer state is its part of the saved one, cut anew.
pub fn optimizer_checkpoints_resume_and_reshard() -> Result<()> {
    use rtune::config::Sharding;
    let dir = tempfile::tempdir()?;
    let run = |workers: usize,
               sharding: Option<Sharding>,
               kill_at: u64,
               reports: u64,
               from: Option<rtune::Checkpoint>| {
        let mut scaling = ScalingConfig::workers(workers)
            .resources_per_worker(BTreeMap::from([("CPU".to_owned(), 0.5)]));
        scaling.sharding = sharding;
        let mut trainer = TorchTrainer::new(train_with_checkpoints)
            .train_loop_config(Params::new().with("reports", reports).with("kill_at", kill_at))
            .scaling(scaling)
            .run_config(run_config(dir.path()).failure_config(FailureConfig::max_failures(1)));
        if let Some(ck) = from {
            trainer = trainer.resume_from_checkpoint(ck);
        }
        trainer.fit()
    };
    let weights = |result: &TrainResult| -> Result<Vec<f32>> {
        Ok(serde_json::from_slice(&std::fs::read(result.path.join("weights_0.json"))?)?)
    };
    let mut sharded_run = None;
    for sharding in [Some(Sharding::Zero2), None] {
        let whole = run(2, sharding, 0, 6, None)?;
        let killed = run(2, sharding, 4, 6, None)?;
        ensure!(whole.failures.is_empty(), "{sharding:?}: {:?}", whole.failures);
        // Rank 1's death, as itself or (sharded) as rank 0 losing it in the barrier before
        // the commit.
        let failure = killed.failures.first().context("a failure")?;
        ensure!(
            killed.failures.len() == 1
                && (failure.rank == 1 || failure.message.contains("lost rank 1 during barrier")),
            "{sharding:?}: {:?}",
            killed.failures
        );
        // Attempt 0 saved report 4's checkpoint but rank 1 died before the commit: the
        // report's checkpoint is attempt 1's (named so), and nothing half-written is left.
        let fourth = rtune::Checkpoint::from_directory(killed.path.join("checkpoint_000004_a1"))?;
        ensure!(fourth.metadata()?.attempt == 1, "checkpoint 4 recorded from the killed attempt");
        let names: Vec<String> = std::fs::read_dir(&killed.path)?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_>>()?;
        ensure!(!names.iter().any(|n| n.starts_with(".tmp")), "left behind: {names:?}");
        if sharding.is_some() {
            let mut shards: Vec<String> = std::fs::read_dir(fourth.path().join("zero"))?
                .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
                .collect::<Result<_>>()?;
            shards.sort();
            ensure!(
                shards == ["index.json", "shard_0_of_2.safetensors", "shard_1_of_2.safetensors"],
                "{shards:?}"
            );
        } else {
            ensure!(fourth.holds_optimizer(), "no optimizer state in {}", fourth.path().display());
        }
        // Resumed after report 3 with Adam's moments restored: the same bits as never killed
        // (restarting the moments from zero would not be).
        let (a, b) = (weights(&whole)?, weights(&killed)?);
        ensure!(a.len() == 101 && a == b, "{sharding:?}: the resumed run ends with other weights");
        if sharding.is_some() {
            sharded_run = Some(whole);
        }
    }
    let whole = sharded_run.context("the sharded run")?;

    // Report 3 of the 2-rank run, resumed with 3 ranks: 34 parameters each where the saved
    // shards hold 51 (rank 1's part spans both files).
    let third = rtune::Checkpoint::from_directory(whole.path.join("checkpoint_000003"))?;
    let mut saved: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    for file in ["shard_0_of_2.safetensors", "shard_1_of_2.safetensors"] {
        for (name, t) in Tensor::read_safetensors(third.path().join("zero").join(file))? {
            saved.entry(name).or_default().extend(Vec::<f32>::try_from(&t)?);
        }
    }
    ensure!(saved.keys().collect::<Vec<_>>() == ["exp_avg", "exp_avg_sq"], "{saved:?}");
    let resumed = run(3, Some(Sharding::Zero2), 0, 4, Some(third))?;
    ensure!(resumed.error.is_none(), "{:?}", resumed.error);
    for rank in 0..3 {
        let path = resumed.path.join(format!("restored_{rank}.json"));
        let got: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        ensure!(got["step"] == 30, "rank {rank} restored step {}", got["step"]);
        let start = got["start"].as_u64().context("start")? as usize;
        ensure!(start == rank * 34, "rank {rank} starts at {start}");
        for (name, all) in &saved {
            let mine: Vec<f32> = serde_json::from_value(got["state"][name].clone())?;
            let len = mine.len();
            ensure!(len == 34.min(101 - start), "rank {rank}: {len} numbers of {name}");
            ensure!(
                mine == all[start..start + len],
                "rank {rank}: {name} is not its part of the saved one"
            );
            ensure!(mine.iter().any(|v| *v != 0.0), "rank {rank}: {name} restored as zeros");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- failures

/// The sum 1 + 2 + … + n: the state `train_then_get_killed` has after iteration n.
pub fn triangle(n: u64) -> f64 {
    (n * (n + 1) / 2) as f64
}

/// Carries state in its model: a variable `total` to which iteration i adds i, reported as
/// `value` and checkpointed each iteration. A resumed attempt must find exactly the state of
/// the checkpoint it resumes from (it fails otherwise); starting over from zero would report
/// different values. Rank 1 SIGKILLs itself at iteration 4 the first time (a marker file in the
/// run directory remembers it did).
fn train_then_get_killed(ctx: &mut TrainContext) -> Result<()> {
    let iterations = ctx.params().get::<u64>("iterations")?;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _net = mlp(&vs.root(), 8);
    let total = vs.root().zeros_no_train("total", &[1]);
    if let Some(ck) = ctx.checkpoint() {
        ck.load_var_store(&mut vs)?;
        let restored = total.double_value(&[0]);
        let expected = triangle(ctx.iteration());
        ensure!(restored == expected, "restored total {restored}, expected {expected}");
        ensure!(ck.iteration()? == ctx.iteration(), "resumed after {}", ctx.iteration());
    }
    let ddp = ctx.prepare_model(&vs)?;
    for i in ctx.iteration() + 1..=iterations {
        ddp.sync_gradients()?;
        let marker = ctx.run_dir().join("killed_once");
        if ctx.world_rank() == 1 && i == 4 && !marker.exists() {
            std::fs::write(&marker, b"")?;
            // SAFETY: kill(2) on our own pid.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let _ = tch::no_grad(|| total.shallow_clone().f_add_scalar_(i as f64))?;
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        ctx.report_with_checkpoint([("value", total.double_value(&[0]))], ck)?;
    }
    Ok(())
}

pub fn sigkilled_worker_resumes_from_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let result = TorchTrainer::new(train_then_get_killed)
        .train_loop_config(Params::new().with("iterations", 8))
        .scaling(ScalingConfig::workers(2))
        .run_config(run_config(dir.path()).failure_config(FailureConfig::max_failures(2)))
        .fit()?;
    ensure!(result.failures.len() == 1, "one failure, got {:?}", result.failures);
    let failure = &result.failures[0];
    ensure!(failure.rank == 1 && failure.signal == Some(9), "rank 1 by SIGKILL: {failure:?}");
    ensure!(failure.message.contains("SIGKILL"), "message names the signal: {}", failure.message);
    let iterations: Vec<f64> =
        result.metrics_history.iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == (1..=8).map(f64::from).collect::<Vec<_>>(), "iterations {iterations:?}");
    // The resumed attempt continued from the restored state: the same values as a run that
    // never failed (it checked the restored state itself, too).
    let values: Vec<f64> = result.metrics_history.iter().map(|m| m["value"]).collect();
    ensure!(values == (1..=8).map(triangle).collect::<Vec<_>>(), "values {values:?}");
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _net = mlp(&vs.root(), 8);
    let total = vs.root().zeros_no_train("total", &[1]);
    let last = result.checkpoint.as_ref().context("a latest checkpoint")?;
    last.load_var_store(&mut vs)?;
    ensure!(total.double_value(&[0]) == triangle(8), "final checkpoint holds {total}");
    ensure!(last.metadata()?.attempt == 1, "iteration 8 was written by the second attempt");
    let json = std::fs::read_to_string(result.path.join("result.json"))?;
    let on_disk: Vec<u64> = json
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .map(|v| v["training_iteration"].as_u64().unwrap_or(0))
        })
        .collect::<Result<_, _>>()?;
    ensure!(on_disk == (1..=8).collect::<Vec<u64>>(), "result.json iterations {on_disk:?}");
    // The second attempt resumed after iteration 3: Ray's iterations_since_restore counts anew.
    let since: Vec<u64> = json
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .map(|v| v["iterations_since_restore"].as_u64().unwrap_or(0))
        })
        .collect::<Result<_, _>>()?;
    ensure!(since == [1, 2, 3, 1, 2, 3, 4, 5], "iterations_since_restore {since:?}");
    Ok(())
}

/// Rank 0 commits a checkpoint at iteration 3 (a report commits before it waits for the other
/// ranks); rank 1 waits until that checkpoint is on disk and fails instead of reporting, so the
/// driver never records it.
fn fail_after_rank_zero_committed(ctx: &mut TrainContext) -> Result<()> {
    let vs = nn::VarStore::new(Device::Cpu);
    let _net = mlp(&vs.root(), 8);
    for i in 1..=5u64 {
        if ctx.world_rank() == 1 && i == 3 {
            let committed = ctx.run_dir().join("checkpoint_000003/metadata.json");
            let waiting = std::time::Instant::now();
            while !committed.exists() {
                ensure!(waiting.elapsed().as_secs() < 60, "rank 0 never committed iteration 3");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            anyhow::bail!("rank 1 fails after rank 0 committed iteration 3");
        }
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        ctx.report_with_checkpoint([("value", i as f64)], ck)?;
    }
    Ok(())
}

/// When the failure budget runs out, a checkpoint that was written but never recorded does not
/// stay on disk looking complete, and nothing can commit into the ended run.
pub fn unrecorded_checkpoints_go_when_the_run_fails() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let err = TorchTrainer::new(fail_after_rank_zero_committed)
        .scaling(ScalingConfig::workers(2))
        .run_config(run_config(dir.path()).failure_config(FailureConfig::max_failures(0)))
        .fit()
        .err()
        .context("rank 1 fails the run")?;
    let Error::TrainingFailed(result) = err else { anyhow::bail!("not a training failure: {err}") };
    let latest = result.checkpoint.as_ref().context("iterations 1 and 2 were recorded")?;
    ensure!(latest.name() == "checkpoint_000002", "latest recorded is {}", latest.name());
    let mut on_disk: Vec<String> = std::fs::read_dir(&result.path)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    on_disk.retain(|n| n.contains("checkpoint"));
    on_disk.sort();
    ensure!(
        on_disk == ["checkpoint_000001", "checkpoint_000002"],
        "only recorded checkpoints may stay: {on_disk:?}"
    );
    Ok(())
}

/// Appends `start NAME` and, half a second later, `end NAME` to the file named by `events`.
fn mark_start_and_end(ctx: &mut TrainContext) -> Result<()> {
    let events = ctx.params().get::<String>("events")?;
    let name = ctx.params().get::<String>("name")?;
    // A plain fit is no trial of a sweep.
    ensure!(ctx.trial_id().is_none() && ctx.experiment_name().is_none(), "a fit has trial names");
    crate::common::between_events(&events, &name, || {
        std::thread::sleep(std::time::Duration::from_millis(500))
    })?;
    ctx.report([("done", 1.0)]).map_err(Into::into)
}

/// Two fits at once in one process, each asking for the whole machine, share one pool: the
/// second waits until the first has released (judged from the order of their events, not from
/// timing). With a pool per fit both would believe they own the machine and overlap.
pub fn concurrent_fits_share_the_machine() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let events = dir.path().join("events");
    let cpus = rtune_driver::cluster::local_node()?.resources.cpu;
    let fit = |name: &'static str| {
        let trainer = TorchTrainer::new(mark_start_and_end)
            .train_loop_config(
                Params::new().with("events", events.display().to_string()).with("name", name),
            )
            .scaling(
                ScalingConfig::workers(1).resources_per_worker([("CPU".to_string(), cpus)].into()),
            )
            .run_config(RunConfig::new(name).storage_path(dir.path()));
        std::thread::spawn(move || trainer.fit())
    };
    let (a, b) = (fit("a"), fit("b"));
    for run in [a, b] {
        run.join().map_err(|_| anyhow::anyhow!("fit panicked"))??;
    }
    let text = std::fs::read_to_string(&events)?;
    let order: Vec<&str> = text.lines().collect();
    ensure!(
        order == ["start a", "end a", "start b", "end b"]
            || order == ["start b", "end b", "start a", "end a"],
        "the runs overlapped on one machine: {order:?}"
    );
    Ok(())
}

/// Records its pid, then rank 1 panics at its third report.
fn train_and_panic(ctx: &mut TrainContext) -> Result<()> {
    std::fs::write(
        ctx.run_dir().join(format!("pid_{}", ctx.world_rank())),
        std::process::id().to_string(),
    )?;
    let vs = nn::VarStore::new(Device::Cpu);
    let _net = mlp(&vs.root(), 8);
    let ddp = ctx.prepare_model(&vs)?;
    for i in 1..=100 {
        ddp.sync_gradients()?;
        if ctx.world_rank() == 1 && i == 3 {
            panic!("boom at step {i}");
        }
        ctx.report([("i", f64::from(i))])?;
    }
    Ok(())
}

pub fn panicking_worker_fails_the_run_with_rank_and_message() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let err = TorchTrainer::new(train_and_panic)
        .scaling(ScalingConfig::workers(2))
        .run_config(run_config(dir.path()).clone())
        .fit()
        .err()
        .context("the run must fail")?;
    let message = err.to_string();
    ensure!(message.contains("rank 1") && message.contains("boom at step 3"), "{message}");
    let Error::TrainingFailed(result) = err else { anyhow::bail!("wrong error kind: {err:?}") };
    ensure!(result.metrics_history.len() == 2, "2 reports kept: {:?}", result.metrics_history);
    for rank in 0..2 {
        let pid: i32 = std::fs::read_to_string(result.path.join(format!("pid_{rank}")))?.parse()?;
        ensure!(!alive(pid), "worker {rank} (pid {pid}) outlived the run");
    }
    Ok(())
}

/// Reports the process it runs in and what a sum over the group gives, then panics at the
/// third report when the params say so.
fn report_where_it_runs(ctx: &mut TrainContext) -> Result<()> {
    let panic_at = ctx.params().get::<u64>("panic_at")?;
    for i in 1..=4u64 {
        assert!(i != panic_at, "local boom at report {i}");
        let mut values = [2.0f32];
        ctx.all_reduce(&mut values, rtune::collective::ReduceOp::Sum)?;
        let pid = f64::from(std::process::id());
        ctx.report([("process", pid), ("sum", f64::from(values[0])), ("i", i as f64)])?;
    }
    Ok(())
}

/// Local mode runs the train function in this process, as a group of one whose collectives
/// are the identity, with the same reports and files; a panic there fails the run and leaves
/// this process and its next run unharmed.
pub fn local_mode_runs_the_train_function_in_this_process() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fit = |panic_at: u64| {
        TorchTrainer::new(report_where_it_runs)
            .scaling(ScalingConfig::local())
            .train_loop_config(Params::new().with("panic_at", panic_at))
            .run_config(run_config(dir.path()))
            .fit()
    };
    let err = fit(3).err().context("the run must fail")?;
    let message = err.to_string();
    ensure!(message.contains("rank 0") && message.contains("local boom at report 3"), "{message}");
    let Error::TrainingFailed(failed) = err else { anyhow::bail!("wrong error kind: {err:?}") };
    ensure!(failed.metrics_history.len() == 2, "{:?}", failed.metrics_history);
    let result = fit(0)?;
    ensure!(result.metrics_history.len() == 4, "{:?}", result.metrics_history);
    for row in &result.metrics_history {
        ensure!(row.get("process") == Some(&f64::from(std::process::id())), "{row:?}");
        ensure!(row.get("sum") == Some(&2.0), "{row:?}");
    }
    ensure!(result.path.join("result.json").exists() && result.path.join("params.json").exists());
    Ok(())
}

/// Rank 1 fails at once; rank 0 waits for it in an all-reduce.
fn fail_while_a_peer_waits(ctx: &mut TrainContext) -> Result<()> {
    if ctx.world_rank() == 1 {
        anyhow::bail!("rank 1 cannot read its shard");
    }
    let mut values = [1.0f32];
    ctx.all_reduce(&mut values, rtune::collective::ReduceOp::Sum)?;
    Ok(())
}

/// The rank whose own error ended the attempt is the one named, never a peer that then lost
/// its link to it ("lost rank 1 during all_reduce"): every attempt, whatever the timing.
pub fn the_failing_rank_is_named_not_the_peer_that_lost_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let err = TorchTrainer::new(fail_while_a_peer_waits)
        .scaling(ScalingConfig::workers(2))
        .run_config(run_config(dir.path()).failure_config(FailureConfig::max_failures(5)))
        .fit()
        .err()
        .context("the run must fail")?;
    let Error::TrainingFailed(result) = err else { anyhow::bail!("wrong error kind: {err:?}") };
    ensure!(result.failures.len() == 6, "{:?}", result.failures);
    for failure in &result.failures {
        ensure!(
            failure.rank == 1 && failure.message.contains("cannot read its shard"),
            "attempt {} names {failure}",
            failure.attempt
        );
    }
    Ok(())
}

fn report_a_string(ctx: &mut TrainContext) -> Result<()> {
    ctx.report(serde_json::json!({"loss": 0.5, "acc": "high"}))?;
    Ok(())
}

pub fn metric_that_is_not_a_number_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let err = TorchTrainer::new(report_a_string)
        .run_config(run_config(dir.path()).clone())
        .fit()
        .err()
        .context("must fail")?
        .to_string();
    ensure!(
        err.contains("metric `acc`") && err.contains("string") && err.contains("numbers"),
        "{err}"
    );
    Ok(())
}

fn never_called(_: &mut TrainContext) -> Result<()> {
    anyhow::bail!("a config error must stop the run before any worker starts")
}

pub fn config_mistakes_fail_before_start() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let err = TorchTrainer::new(never_called)
        .scaling(ScalingConfig::workers(rtune::config::MAX_WORKERS + 1))
        .run_config(run_config(dir.path()))
        .fit()
        .err()
        .context("too many workers must fail")?
        .to_string();
    ensure!(err.contains("num_workers") && err.contains("or 0 for local mode"), "{err}");
    // Local mode runs in this process: not on a cluster.
    let err = TorchTrainer::new(never_called)
        .scaling(ScalingConfig::local())
        .run_config(run_config(dir.path()).cluster("127.0.0.1:1", None))
        .fit()
        .err()
        .context("local mode on a cluster must fail")?
        .to_string();
    ensure!(err.contains("num_workers") && err.contains("local mode"), "{err}");

    let file = dir.path().join("a_file");
    std::fs::write(&file, b"")?;
    let err = TorchTrainer::new(never_called)
        .run_config(RunConfig::new("run").storage_path(&file))
        .fit()
        .err()
        .context("a file as storage path must fail")?
        .to_string();
    ensure!(err.contains("storage_path") && err.contains("a_file"), "{err}");

    // NaN and infinity have no JSON form: refused by name, before a run directory exists.
    for (params, key) in [
        (rtune::Params::new().with("lr", f64::NAN), "lr"),
        (
            rtune::Params::new().with(
                "opt",
                rtune::Params::new().with("betas", vec![0.9, f64::INFINITY]).into_value(),
            ),
            "opt.betas",
        ),
    ] {
        let err = TorchTrainer::new(never_called)
            .train_loop_config(params)
            .run_config(RunConfig::new("nan").storage_path(dir.path()))
            .fit()
            .err()
            .context("a non-finite param must fail")?
            .to_string();
        ensure!(err.contains(&format!("`{key}`")) && err.contains("finite"), "{err}");
        ensure!(!dir.path().join("nan").exists(), "the run directory was made anyway");
    }
    Ok(())
}

/// Reports forever; only the driver's stop ends it.
fn report_until_stopped(ctx: &mut TrainContext) -> Result<()> {
    loop {
        let mut ck = ctx.new_checkpoint()?;
        std::fs::write(ck.path().join("note.txt"), b"x")?;
        ck = ck.metadata(serde_json::json!({"rank": ctx.world_rank()}));
        ctx.report_with_checkpoint([("score", ctx.iteration() as f64)], ck)?;
    }
}

pub fn stop_criterion_ends_the_run_cleanly() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let result = TorchTrainer::new(report_until_stopped)
        .scaling(ScalingConfig::workers(2))
        .run_config(
            run_config(dir.path())
                .stop("training_iteration", 5.0)
                .checkpoint_config(rtune::CheckpointConfig::new().num_to_keep(2)),
        )
        .fit()?;
    ensure!(result.failures.is_empty(), "no failures: {:?}", result.failures);
    ensure!(result.metrics_history.len() == 5, "5 reports: {}", result.metrics_history.len());
    let mut kept: Vec<String> = std::fs::read_dir(&result.path)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint_") || n.starts_with(".tmp"))
        .collect();
    kept.sort();
    ensure!(kept == ["checkpoint_000004", "checkpoint_000005"], "kept {kept:?}");
    Ok(())
}

/// Reports 5 times at once, then waits (up to a minute) for the file named by `go` before it
/// reports a last time.
pub fn report_a_burst_then_wait(ctx: &mut TrainContext) -> Result<()> {
    let go = std::path::PathBuf::from(ctx.params().get::<String>("go")?);
    for i in 0..5 {
        ctx.report([("step", i as f64)])?;
    }
    let waited = std::time::Instant::now();
    while !go.exists() {
        ensure!(waited.elapsed().as_secs() < 60, "nobody said go");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    ctx.report([("step", 5.0)]).map_err(Into::into)
}

/// Rows that come faster than the driver writes them are held back only briefly: a burst of
/// reports is in result.json and progress.csv while the run waits, not only at its end (the
/// worker goes on only once the test has seen every row of the burst in both files).
pub fn a_burst_of_reports_is_written_while_the_run_waits() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let go = dir.path().join("go");
    let trainer = TorchTrainer::new(report_a_burst_then_wait)
        .train_loop_config(Params::new().with("go", go.display().to_string()))
        .run_config(RunConfig::new("burst").storage_path(dir.path()));
    let run = std::thread::spawn(move || trainer.fit());
    let run_dir = dir.path().join("burst");
    let lines = |name| std::fs::read_to_string(run_dir.join(name)).map_or(0, |t| t.lines().count());
    let waited = std::time::Instant::now();
    while (lines("result.json"), lines("progress.csv")) != (5, 6) {
        ensure!(!run.is_finished(), "the run ended before it was told to go");
        ensure!(
            waited.elapsed().as_secs() < 60,
            "a minute after a burst of 5 reports, result.json has {} rows and progress.csv {} lines",
            lines("result.json"),
            lines("progress.csv")
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::write(&go, "")?;
    let result = run.join().map_err(|_| anyhow::anyhow!("fit panicked"))??;
    let steps: Vec<f64> = result.metrics_history.iter().map(|m| m["step"]).collect();
    ensure!(steps == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "history: {steps:?}");
    ensure!(lines("result.json") == 6, "result.json after the run: {}", lines("result.json"));
    Ok(())
}
