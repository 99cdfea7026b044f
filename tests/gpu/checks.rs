//! Each check of the GPU group (see main.rs): sweeps run through this binary as `rtune`, runs
//! through the library, and PyTorch reading what rtune wrote.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use rtune::builtins::{
    DIGITS_SPLIT_SEED, digits_data, digits_mlp, predictor_accuracy, train_digits_mlp,
};
use rtune::digits::Digits;
use rtune::model::TorchPredictor;
use rtune::{Checkpoint, Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext};
use rtune::{LoadVarStore, SaveVarStore};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Tensor};

use crate::AS_CLI;

/// The repository (sweep files, data): `RTUNE_REPO`, else the working directory.
fn repo() -> PathBuf {
    std::env::var_os("RTUNE_REPO").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// PyTorch's Python: `RTUNE_PYTHON`, else the project's `.venv`, else `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RTUNE_PYTHON") {
        return p.into();
    }
    let venv = repo().join(".venv/bin/python");
    if venv.is_file() { venv } else { PathBuf::from("python3") }
}

/// This binary as the `rtune` command.
fn rtune(args: &[&str]) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("own path"));
    command.env(AS_CLI, "1").env_remove("RUST_LOG").args(args);
    command
}

fn succeeded(mut command: Command) -> Result<Output> {
    let out = command.output()?;
    ensure!(
        out.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn toml_string(path: &Path) -> String {
    format!("\"{}\"", path.display())
}

/// Writes the sweep file `<dir>/<name>.toml`: its `name`, `storage_path = dir` (so its
/// experiment is `<dir>/<name>`), then `body`.
fn sweep_file(dir: &Path, name: &str, body: &str) -> Result<PathBuf> {
    let path = dir.join(format!("{name}.toml"));
    let head = format!("name = \"{name}\"\nstorage_path = {}\n", toml_string(dir));
    std::fs::write(&path, head + body)?;
    Ok(path)
}

/// The trial directories of an experiment, in name order.
fn trial_dirs(experiment: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(experiment)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("TorchTrainer_"))
        })
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// The `placement` of a run's last result row.
fn placement(run_dir: &Path) -> Result<String> {
    let rows = std::fs::read_to_string(run_dir.join("result.json"))?;
    let last: serde_json::Value = serde_json::from_str(rows.lines().last().context("no rows")?)?;
    Ok(last["placement"].as_str().context("no placement")?.to_owned())
}

/// The demo sweep (examples/sweeps/digits_tpe_asha.toml) with `use_gpu`, its two workers at
/// half a GPU each (so they share one: the host ring); its best model predicts the held-out
/// test set at 95% or better, on the CPU and on the GPU alike.
pub fn demo_sweep_on_the_gpu() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = repo().join("examples/sweeps/digits_tpe_asha.toml");
    let storage = format!("storage_path={}", toml_string(dir.path()));
    let mut run = rtune(&["run"]);
    run.arg(&sweep).args(["--set", &storage, "--set", "name=\"demo-gpu\""]);
    run.args([
        "--set",
        "scaling.use_gpu=true",
        "--set",
        "scaling.resources_per_worker={ GPU = 0.5 }",
    ]);
    succeeded(run)?;
    let experiment = dir.path().join("demo-gpu");
    let best = experiment.join("best-model");
    let mut export = rtune(&["export"]);
    export.arg(&experiment).args(["--best", "--to"]).arg(&best);
    succeeded(export)?;
    let params: Params = serde_json::from_slice(&std::fs::read(best.join("params.json"))?)?;
    let hidden = params.get::<i64>("hidden")?;
    let test = Digits::split(DIGITS_SPLIT_SEED)?.test;
    let on_cpu = TorchPredictor::from_export(&best, |p| digits_mlp(p, hidden))?;
    let on_gpu = TorchPredictor::from_export(&best, |p| digits_mlp(p, hidden))?
        .on_device(Device::Cuda(0))?;
    let (cpu, gpu) = (predictor_accuracy(&on_cpu, &test)?, predictor_accuracy(&on_gpu, &test)?);
    println!(
        "demo sweep on the GPU: test accuracy {:.2}% (on the CPU {:.2}%)",
        gpu * 100.0,
        cpu * 100.0
    );
    ensure!(gpu >= 0.95 && cpu >= 0.95, "test accuracy: GPU {gpu:.4}, CPU {cpu:.4}");
    ensure!((gpu - cpu).abs() < 1e-9, "the same model predicts alike: GPU {gpu}, CPU {cpu}");
    // Every trial ran both ranks on the one GPU, averaging through the host ring.
    for trial in trial_dirs(&experiment)? {
        let seats = placement(&trial)?;
        ensure!(seats.matches("/gpu:").count() == 2, "{}: placement {seats}", trial.display());
        let log = std::fs::read_to_string(trial.join("logs/rank_0.stderr")).unwrap_or_default();
        ensure!(log.contains("share a GPU"), "{}: rank 0 did not say so: {log}", trial.display());
        // Each row holds each rank's GPU from NVML (the memory its CUDA context holds, at
        // least).
        let rows = std::fs::read_to_string(trial.join("result.json"))?;
        for row in rows.lines().map(serde_json::from_str::<serde_json::Value>) {
            let row = row?;
            for rank in 0..2 {
                let memory = row[format!("ranks/{rank}/gpu_memory_bytes")].as_f64();
                let share = row[format!("ranks/{rank}/gpu_utilization")].as_f64();
                ensure!(
                    memory.is_some_and(|m| m > 0.0)
                        && share.is_some_and(|s| (0.0..=1.0).contains(&s)),
                    "{}: rank {rank}'s GPU figures {memory:?} {share:?} in {row}",
                    trial.display()
                );
            }
        }
    }
    Ok(())
}

/// Four one-worker trials at `GPU = 0.5` on a one-GPU machine run two at a time: read from
/// each trial's start (its params.json, written once placed) and end (its last checkpoint).
pub fn fractional_trials_two_at_a_time() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let body = r#"
[trainable]
builtin = "digits-mlp"
[scaling]
num_workers = 1
use_gpu = true
resources_per_worker = { GPU = 0.5 }
[param_space]
lr = { grid_search = [1e-3, 2e-3, 3e-3, 4e-3] }
epochs = 12
[tune]
metric = "val_loss"
mode = "min"
max_concurrent_trials = 4
"#;
    let sweep = sweep_file(dir.path(), "halves", body)?;
    let mut run = rtune(&["run"]);
    run.arg(&sweep);
    succeeded(run)?;
    let mut spans: Vec<(SystemTime, SystemTime)> = Vec::new();
    for trial in trial_dirs(&dir.path().join("halves"))? {
        let start = std::fs::metadata(trial.join("params.json"))?.modified()?;
        let last = std::fs::read_dir(&trial)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("checkpoint_"))
            })
            .max()
            .context("a checkpoint")?;
        spans.push((start, std::fs::metadata(last.join("metadata.json"))?.modified()?));
    }
    ensure!(spans.len() == 4, "4 trials, found {}", spans.len());
    let most = spans
        .iter()
        .map(|&(start, _)| spans.iter().filter(|&&(s, e)| s <= start && start < e).count())
        .max()
        .unwrap_or(0);
    println!("fractional trials: at most {most} at once");
    ensure!(most == 2, "at most {most} trials ran at once; two halves of the GPU make 2");
    Ok(())
}

fn mlp(vs: &nn::Path) -> impl Module + use<> {
    nn::seq()
        .add(nn::linear(vs / "fc1", 64, 32, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs / "fc2", 32, 10, Default::default()))
}

/// This rank's part of each whole 64-image batch of `data` in order (19 of the 1,257 training
/// images), on its device.
fn fixed_batches(ctx: &TrainContext, data: &Digits) -> Vec<(Tensor, Tensor)> {
    let (rank, world) = (ctx.world_rank(), ctx.world_size());
    let per_rank = 64 / world;
    (0..data.len() / 64)
        .map(|step| {
            let start = step * 64 + rank * per_rank;
            let indices: Vec<usize> = (start..start + per_rank).collect();
            let (x, y) = data.select(&indices).tensors();
            (x.to_device(ctx.device()), y.to_device(ctx.device()))
        })
        .collect()
}

/// SGD on a fixed sequence of 64-image batches, each rank taking half of every batch; the
/// weights start from the same CPU draw wherever the run goes, then move to its device.
fn train_fixed_batches(ctx: &mut TrainContext) -> anyhow::Result<()> {
    tch::manual_seed(42);
    let data = Digits::split(0)?.train;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    vs.set_device(ctx.device());
    let ddp = ctx.prepare_model(&vs)?;
    let mut opt = nn::Sgd::default().build(&vs, 0.1)?;
    for (x, y) in fixed_batches(ctx, &data) {
        ddp.backward_step(&mut opt, &net.forward(&x).cross_entropy_for_logits(&y))?;
    }
    let mut ck = ctx.new_checkpoint()?;
    ck.save_var_store(&vs)?;
    ctx.report_with_checkpoint([("done", 1.0)], ck).map_err(Into::into)
}

fn weights(checkpoint: &Checkpoint) -> Result<Vec<(String, Tensor)>> {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _net = mlp(&vs.root());
    checkpoint.load_var_store(&mut vs)?;
    let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(vars)
}

/// Two ranks on one GPU (half of it each: NCCL would refuse them) average through the host
/// ring and end with the weights two CPU ranks end with, within 1e-5.
pub fn two_ranks_on_one_gpu() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fit = |name: &str, scaling: ScalingConfig| {
        TorchTrainer::new(train_fixed_batches)
            .scaling(scaling)
            .run_config(RunConfig::new(name).storage_path(dir.path()))
            .fit()
    };
    let half: std::collections::BTreeMap<String, f64> = [("GPU".to_owned(), 0.5)].into();
    let gpu = fit("gpu", ScalingConfig::workers(2).use_gpu(true).resources_per_worker(half))?;
    let cpu = fit("cpu", ScalingConfig::workers(2))?;
    let seats = gpu.placement.clone().unwrap_or_default();
    ensure!(seats.matches("/gpu:").count() == 2, "both ranks on a GPU: {seats}");
    let mut worst = 0.0f64;
    for ((name, g), (_, c)) in weights(gpu.checkpoint.as_ref().context("gpu checkpoint")?)?
        .into_iter()
        .zip(weights(cpu.checkpoint.as_ref().context("cpu checkpoint")?)?)
    {
        let diff = (&g - &c).abs().max().double_value(&[]);
        let scale = c.abs().max().double_value(&[]).max(1.0);
        worst = worst.max(diff / scale);
        ensure!(diff <= 1e-5 * scale, "{name}: the GPU run's weights differ by {diff}");
    }
    println!("2 ranks on one GPU against 2 on the CPU: largest weight difference {worst:.2e}");
    Ok(())
}

/// `train_fixed_batches` with Adam, as plain data parallelism (param `way` = "ddp") or
/// sharded ("zero1", "zero2"), the sharded runs saving their optimizer shards with the
/// checkpoint.
fn train_fixed_batches_sharded(ctx: &mut TrainContext) -> anyhow::Result<()> {
    use rtune::config::Sharding;
    use rtune::worker::OptimizerSettings;
    let way = ctx.params().get::<String>("way")?;
    tch::manual_seed(42);
    let data = Digits::split(0)?.train;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    vs.set_device(ctx.device());
    let sharding = match way.as_str() {
        "zero1" => Some(Sharding::Zero1),
        "zero2" => Some(Sharding::Zero2),
        _ => None,
    };
    let mut plain = None;
    let mut sharded = None;
    match sharding {
        Some(s) => {
            sharded = Some(ctx.prepare_model_sharded(&vs, s, OptimizerSettings::adam(3e-3))?)
        }
        None => plain = Some((ctx.prepare_model(&vs)?, nn::Adam::default().build(&vs, 3e-3)?)),
    }
    for (x, y) in fixed_batches(ctx, &data) {
        let loss = net.forward(&x).cross_entropy_for_logits(&y);
        match (&mut plain, &mut sharded) {
            (Some((ddp, opt)), _) => ddp.backward_step(opt, &loss)?,
            (_, Some(model)) => model.backward_step(&loss)?,
            _ => unreachable!("one of the two is made above"),
        }
    }
    let mut ck = ctx.new_checkpoint()?;
    ck.save_var_store(&vs)?;
    if let Some(model) = &sharded {
        model.save_optimizer(&mut ck)?;
    }
    ctx.report_with_checkpoint([("done", 1.0)], ck).map_err(Into::into)
}

/// The largest difference between two checkpoints' weights, relative to the larger weight.
fn weight_gap(a: &Checkpoint, b: &Checkpoint) -> Result<f64> {
    let mut worst = 0.0f64;
    for ((_, x), (_, y)) in weights(a)?.into_iter().zip(weights(b)?) {
        let diff = (&x - &y).abs().max().double_value(&[]);
        worst = worst.max(diff / y.abs().max().double_value(&[]).max(1.0));
    }
    Ok(worst)
}

/// ZeRO on a GPU: one rank (its shard stepped on the device, its collectives through the host
/// ring) trains as plain data parallelism with libtorch's Adam on the GPU does, and two ranks
/// sharing the GPU train as two CPU ranks do; the optimizer shards are saved from the device.
pub fn sharded_on_one_gpu() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fit = |name: &str, way: &str, scaling: ScalingConfig| {
        TorchTrainer::new(train_fixed_batches_sharded)
            .train_loop_config(Params::new().with("way", way))
            .scaling(scaling)
            .run_config(RunConfig::new(name).storage_path(dir.path()))
            .fit()
    };
    let checkpoint = |r: &rtune::TrainResult| r.checkpoint.clone().context("a checkpoint");
    let one = || ScalingConfig::workers(1).use_gpu(true);
    let ddp = checkpoint(&fit("ddp", "ddp", one())?)?;
    for way in ["zero1", "zero2"] {
        let zero = checkpoint(&fit(way, way, one())?)?;
        ensure!(zero.holds_optimizer_shards(), "{way}: no optimizer shards in its checkpoint");
        let gap = weight_gap(&zero, &ddp)?;
        ensure!(gap <= 1e-6, "1 GPU rank, {way} against DDP: weights {gap:e} apart");
        println!("1 GPU rank, {way} against DDP with libtorch's Adam: weights {gap:.2e} apart");
    }
    let half: std::collections::BTreeMap<String, f64> = [("GPU".to_owned(), 0.5)].into();
    let shared = || ScalingConfig::workers(2).use_gpu(true).resources_per_worker(half.clone());
    let gpu = fit("gpu2", "zero2", shared())?;
    let seats = gpu.placement.clone().unwrap_or_default();
    ensure!(seats.matches("/gpu:").count() == 2, "both ranks on a GPU: {seats}");
    let cpu = fit("cpu2", "zero2", ScalingConfig::workers(2))?;
    let gap = weight_gap(&checkpoint(&gpu)?, &checkpoint(&cpu)?)?;
    ensure!(gap <= 1e-5, "2 ranks sharing a GPU against 2 CPU ranks, ZeRO-2: {gap:e} apart");
    println!("2 ranks sharing a GPU against 2 on the CPU, ZeRO-2: weights {gap:.2e} apart");
    Ok(())
}

/// A model trained on the GPU: its checkpoint resumes training on the CPU (iteration 4 after
/// 3), and its export's TorchScript, loaded by PyTorch on the CPU and on the GPU, predicts
/// what rtune predicts (`TorchPredictor`, and `rtune predict --device cuda`).
pub fn gpu_to_cpu() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let body = r#"
[trainable]
builtin = "digits-mlp"
[scaling]
num_workers = 1
use_gpu = true
[param_space]
lr = 3e-3
hidden = 64
epochs = 3
[tune]
metric = "val_loss"
mode = "min"
num_samples = 1
"#;
    let sweep = sweep_file(dir.path(), "one", body)?;
    let mut run = rtune(&["run"]);
    run.arg(&sweep);
    succeeded(run)?;
    let experiment = dir.path().join("one");
    let export = dir.path().join("export");
    let mut write = rtune(&["export"]);
    write.arg(&experiment).args(["--best", "--to"]).arg(&export);
    succeeded(write)?;

    // Training goes on from the GPU's checkpoint on the CPU.
    let checkpoint = Checkpoint::from_directory(&export)?;
    ensure!(checkpoint.iteration()? == 3, "the export holds epoch {}", checkpoint.iteration()?);
    let params =
        Params::new().with("lr", 3e-3).with("hidden", 64).with("batch_size", 32).with("epochs", 4);
    let resumed = digits_data(TorchTrainer::new(train_digits_mlp))?
        .train_loop_config(params)
        .resume_from_checkpoint(checkpoint)
        .run_config(RunConfig::new("on-cpu").storage_path(dir.path()))
        .fit()?;
    let last = resumed.metrics.as_ref().context("metrics")?;
    ensure!(last["training_iteration"] == 4.0, "resumed at {}", last["training_iteration"]);
    ensure!(last["val_acc"] > 0.9, "the resumed model lost what it learned: {last:?}");
    ensure!(
        resumed.placement.as_deref().is_some_and(|p| p.ends_with("/cpu")),
        "{:?}",
        resumed.placement
    );

    // PyTorch reads the export and predicts what rtune predicts.
    let test = Digits::split(DIGITS_SPLIT_SEED)?.test;
    let predictor = TorchPredictor::from_export(&export, |p| digits_mlp(p, 64))?;
    let inputs = predictor.inputs(&test.frame()?)?;
    let ours: Vec<i64> = Vec::try_from(predictor.predict_classes(&inputs)?)?;
    let rows: Vec<Vec<f32>> = Vec::try_from(&inputs)?;
    let csv = dir.path().join("inputs.csv");
    let text: Vec<String> = rows
        .iter()
        .map(|r| r.iter().map(|v| format!("{v:e}")).collect::<Vec<_>>().join(","))
        .collect();
    std::fs::write(&csv, text.join("\n"))?;
    let script = "import json, sys, torch\n\
        m = torch.jit.load(sys.argv[1], map_location=sys.argv[3])\n\
        rows = [[float(v) for v in l.split(',')] for l in open(sys.argv[2]) if l.strip()]\n\
        with torch.no_grad():\n    y = m(torch.tensor(rows, device=sys.argv[3]))\n\
        print(json.dumps(y.argmax(-1).tolist()))\n";
    for device in ["cpu", "cuda"] {
        let mut py = Command::new(python());
        py.args(["-c", script]).arg(export.join("model.pt")).arg(&csv).arg(device);
        let out = succeeded(py)?;
        let stdout = String::from_utf8(out.stdout)?;
        let theirs: Vec<i64> = serde_json::from_str(stdout.lines().last().context("no output")?)?;
        ensure!(theirs == ours, "PyTorch on {device} predicts otherwise than rtune");
    }

    // `rtune predict` on the GPU: the classes PyTorch and rtune's predictor gave.
    let features = dir.path().join("test.csv");
    let mut frame = test.frame()?;
    let mut file = std::fs::File::create(&features)?;
    use rtune::polars::prelude::{CsvWriter, SerWriter};
    CsvWriter::new(&mut file).finish(&mut frame)?;
    let predicted = dir.path().join("predicted.csv");
    let mut predict = rtune(&["predict", "--device", "cuda", "--model"]);
    predict.arg(&export).arg("--input").arg(&features).arg("--output").arg(&predicted);
    succeeded(predict)?;
    let text = std::fs::read_to_string(&predicted)?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("header")?.split(',').collect();
    let at = header.iter().position(|h| *h == "prediction").context("prediction column")?;
    let theirs: Vec<i64> =
        lines.map(|l| l.split(',').nth(at).unwrap_or("").parse()).collect::<Result<_, _>>()?;
    ensure!(theirs == ours, "rtune predict --device cuda predicts otherwise than on the CPU");
    println!(
        "a GPU-trained model: resumed on the CPU, and PyTorch (CPU, CUDA) and rtune predict alike"
    );
    Ok(())
}

/// GPUs asked of what cannot use them are refused before any trial, in one line: no device
/// visible (`CUDA_VISIBLE_DEVICES=""` on this GPU machine), and a CPU-only libtorch (this
/// libtorch's folder hard-linked without libtorch_cuda.so, first on `LD_LIBRARY_PATH`).
pub fn unusable_gpus_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let body = "[trainable]\nbuiltin = \"synthetic-curve\"\n[scaling]\nnum_workers = 1\n\
                use_gpu = true\n[tune]\nnum_samples = 1\n";
    let sweep = sweep_file(dir.path(), "refused", body)?;
    let refused = |command: &mut Command, expected: &str| -> Result<()> {
        let out = command.output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        ensure!(out.status.code() == Some(2), "{command:?}: {:?}\n{stderr}", out.status);
        ensure!(lines.len() == 1 && lines[0].contains(expected), "{command:?}:\n{stderr}");
        ensure!(!dir.path().join("refused").exists(), "a refused sweep left its experiment");
        println!("refused: {}", lines[0]);
        Ok(())
    };
    let mut none_visible = rtune(&["run"]);
    none_visible.arg(&sweep).env("CUDA_VISIBLE_DEVICES", "").env("RTUNE_NUM_GPUS", "1");
    refused(&mut none_visible, "no CUDA device visible")?;

    let (_cpu_only, path) = crate::libtorch::cpu_only_libtorch()?;
    let mut cpu_only_libtorch = rtune(&["run"]);
    cpu_only_libtorch.arg(&sweep).env("LD_LIBRARY_PATH", path);
    refused(&mut cpu_only_libtorch, "this libtorch has no CUDA")
}

/// A head and a node agent offering this machine's GPU: `rtune status` shows the node's GPU
/// with its use and memory (NVML, through the heartbeats), and no GPU error.
pub fn status_shows_the_gpus() -> Result<()> {
    let mut head =
        rtune(&["head", "--port", "0"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let mut line = String::new();
    BufReader::new(head.stdout.take().context("head stdout")?).read_line(&mut line)?;
    let address =
        line.trim().strip_prefix("rtune head listening on ").context("head address")?.to_owned();
    let node = rtune(&["node", "--address", &address, "--num-gpus", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut children = [head, node];
    let result = (|| -> Result<()> {
        let began = Instant::now();
        loop {
            let out = succeeded(rtune(&["status", "--address", &address, "--format", "json"]))?;
            let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let node = &status["nodes"][0];
            if node["gpus"].as_array().is_some_and(|g| !g.is_empty()) {
                ensure!(node["total"]["GPU"] == 1, "{node}");
                ensure!(node.get("gpu_error").is_none(), "{node}");
                break;
            }
            if began.elapsed() > Duration::from_secs(30) {
                bail!("no GPU use reported by the node in 30 s: {status}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let table = succeeded(rtune(&["status", "--address", &address]))?;
        let table = String::from_utf8(table.stdout)?;
        ensure!(table.contains("GPU0 ") && table.contains(" GB"), "{table}");
        print!("{table}");
        Ok(())
    })();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}

/// `rtune predict --workers 2 --gpus-per-worker 0.5` (two workers sharing the GPU) and
/// `--device cuda` in one process predict the shipped digits as one CPU process does: the
/// same classes, probabilities within 1e-5.
pub fn batch_prediction_on_gpu_workers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let body = "[trainable]\nbuiltin = \"digits-mlp\"\n\n[param_space]\nepochs = 2\nhidden = 64\n\n\
                [tune]\nmetric = \"val_loss\"\nmode = \"min\"\nnum_samples = 1\n";
    let sweep = sweep_file(dir.path(), "small", body)?;
    succeeded(rtune(&["run", sweep.to_str().unwrap(), "--no-tui"]))?;
    let model = dir.path().join("model");
    let mut export = rtune(&["export"]);
    export.arg(dir.path().join("small")).arg("--to").arg(&model);
    succeeded(export)?;
    let input = repo().join("data/digits.csv.gz");
    let predict = |name: &str, more: &[&str]| -> Result<String> {
        let output = dir.path().join(name);
        let mut command = rtune(&["predict", "--no-header", "--model"]);
        command.arg(&model).arg("--input").arg(&input).arg("--output").arg(&output).args(more);
        let said = String::from_utf8_lossy(&succeeded(command)?.stdout).into_owned();
        println!("{}", said.trim());
        Ok(std::fs::read_to_string(output)?)
    };
    let cpu = predict("cpu.csv", &[])?;
    let gpu_workers = predict(
        "workers.csv",
        &["--workers", "2", "--gpus-per-worker", "0.5", "--part-rows", "300"],
    )?;
    let gpu_process = predict("process.csv", &["--device", "cuda"])?;
    for (name, text) in [("2 GPU workers", &gpu_workers), ("--device cuda", &gpu_process)] {
        ensure!(
            text.lines().count() == cpu.lines().count(),
            "{name}: {} lines",
            text.lines().count()
        );
        for (x, y) in cpu.lines().zip(text.lines()) {
            for (p, q) in x.split(',').zip(y.split(',')) {
                let close = match (p.parse::<f64>(), q.parse::<f64>()) {
                    (Ok(p), Ok(q)) => (p - q).abs() <= 1e-5,
                    _ => p == q,
                };
                ensure!(close, "{name}: {y} against the CPU's {x}");
            }
        }
    }
    Ok(())
}

/// SGD with momentum on global batches of 64 digits (3 epochs, a checkpoint each, resumed
/// from; its optimizer state too), the weights
/// drawn on the CPU then moved to the rank's device; rank 2 SIGKILLs itself at step `lose_at`
/// of the first attempt (0: never).
fn train_elastic(ctx: &mut TrainContext) -> anyhow::Result<()> {
    use rtune::worker::{BatchSpec, OptimizerSettings};
    let lose_at = ctx.params().get::<i64>("lose_at")?;
    let mut train = ctx.dataset_shard("train")?;
    tch::manual_seed(42);
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    if let Some(checkpoint) = ctx.checkpoint() {
        checkpoint.load_var_store(&mut vs)?;
    }
    vs.set_device(ctx.device());
    let mut sgd = OptimizerSettings::sgd(0.1, 0.9).for_model(&vs)?;
    if let Some(checkpoint) = ctx.checkpoint() {
        sgd.load(checkpoint)?;
    }
    let ddp = ctx.prepare_model(&vs)?;
    let spec = BatchSpec::global(64).shuffle(3).drop_last(true);
    let mut step = 0;
    for _ in ctx.iteration()..3 {
        for (x, y) in train.iter_batches(&spec)? {
            step += 1;
            if step == lose_at && ctx.world_rank() == 2 && ctx.checkpoint().is_none() {
                // SAFETY: raise(2) on this process: a rank lost mid-step.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            ddp.backward_step(&mut sgd, &net.forward(&x).cross_entropy_for_logits(&y))?;
        }
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        sgd.save(&mut ck)?;
        ctx.report_with_checkpoint([("ranks", ctx.world_size() as f64)], ck)?;
    }
    Ok(())
}

/// An elastic group of 3 ranks sharing the GPU (0.3 each: they average through the host ring)
/// loses rank 2 mid-step: the other two go on in place, in the same attempt, and end with the
/// weights 3 CPU ranks that lost none end with, within 1e-5.
pub fn elastic_group_on_one_gpu_goes_on_in_place() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fit = |name: &str, lose_at: i64, scaling: ScalingConfig| {
        digits_data(
            TorchTrainer::new(train_elastic)
                .train_loop_config(Params::new().with("lose_at", lose_at))
                .scaling(scaling)
                .run_config(RunConfig::new(name).storage_path(dir.path())),
        )?
        .fit()
    };
    let share: std::collections::BTreeMap<String, f64> =
        [("GPU".to_owned(), 0.3), ("CPU".to_owned(), 1.0)].into();
    let gpu =
        fit("gpu", 10, ScalingConfig::elastic(2, 3).use_gpu(true).resources_per_worker(share))?;
    let cpu = fit("cpu", 0, ScalingConfig::elastic(2, 3))?;
    ensure!(gpu.failures.is_empty(), "{:?}", gpu.failures);
    let rows = std::fs::read_to_string(gpu.path.join("result.json"))?;
    let first: serde_json::Value = serde_json::from_str(rows.lines().next().unwrap_or("{}"))?;
    let said = first["group_resize"].as_str().unwrap_or_default();
    ensure!(first["world_size"].as_f64() == Some(2.0) && said.ends_with("(in place)"), "{rows}");
    let gpu_weights = gpu.checkpoint.as_ref().context("gpu checkpoint")?;
    let worst = weight_gap(gpu_weights, cpu.checkpoint.as_ref().context("cpu checkpoint")?)?;
    println!(
        "elastic on one GPU, a rank lost, against 3 CPU ranks: largest difference {worst:.2e}"
    );
    ensure!(worst <= 1e-5, "the GPU run's weights differ by {worst:.2e} (relative)");
    Ok(())
}

/// An XGBoost trial on a GPU worker (half a GPU) boosts on the device the pool gave it, as
/// XGBoost's own configuration says (`device = cuda:0`, logged by the rank), to a model about
/// as good as the same trial's on the CPU.
pub fn xgboost_trial_boosts_on_the_gpu() -> Result<()> {
    if let Err(e) = rtune::trees::xgboost::check_library() {
        println!("XGBoost on the GPU: not run (no XGBoost beside this machine's PyTorch: {e})");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let data = |name: &str| toml_string(&repo().join(format!("data/digits_{name}.parquet")));
    let body = |gpu: &str| {
        format!(
            "[trainable]\nbuiltin = \"xgboost\"\n[datasets]\ntrain = {}\nvalid = {}\n\
             label = \"digit\"\n[scaling]\nnum_workers = 1\n{gpu}[param_space]\n\
             objective = \"multi:softprob\"\nnum_class = 10\ntree_method = \"hist\"\n\
             max_depth = 4\nnum_boost_round = 30\n[tune]\nmetric = \"valid-mlogloss\"\n\
             mode = \"min\"\n",
            data("train"),
            data("valid")
        )
    };
    let gpu = "use_gpu = true\nresources_per_worker = { CPU = 1, GPU = 0.5 }\n";
    let mut losses = Vec::new();
    for (name, gpu) in [("xgb-gpu", gpu), ("xgb-cpu", "")] {
        let mut run = rtune(&["run"]);
        run.arg(sweep_file(dir.path(), name, &body(gpu))?).arg("--no-tui");
        succeeded(run)?;
        let trial = trial_dirs(&dir.path().join(name))?.pop().context("a trial")?;
        let rows = std::fs::read_to_string(trial.join("result.json"))?;
        let last: serde_json::Value = serde_json::from_str(rows.lines().last().context("rows")?)?;
        losses.push(last["valid-mlogloss"].as_f64().context("valid-mlogloss")?);
        let log = std::fs::read_to_string(trial.join("logs/rank_0.stderr")).unwrap_or_default();
        let device = if gpu.is_empty() { "cpu" } else { "cuda:0" };
        ensure!(
            log.contains(&format!("XGBoost boosts on {device}")),
            "{name}: rank 0 did not say it boosts on {device}: {log}"
        );
    }
    println!("XGBoost on the GPU: valid-mlogloss {:.4} (on the CPU {:.4})", losses[0], losses[1]);
    ensure!(
        (losses[0] - losses[1]).abs() < 0.02,
        "valid-mlogloss GPU {} CPU {}",
        losses[0],
        losses[1]
    );
    Ok(())
}
