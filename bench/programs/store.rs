//! Checkpoint upload and download throughput against an S3-compatible store, as a rank uploads
//! a checkpoint (`Remote::upload_folder`) and a reader fetches one (`Remote::download`):
//!
//!     bench_store upload s3://bucket/prefix DIR [N]    # DIR goes up as prefix/<DIR's name>
//!     bench_store download s3://bucket/prefix DIR [N]  # prefix's objects come down into DIR
//!
//! (`N`: requests in flight at once, `run.store.connections`; rtune's default without it)
//!
//! and the training time a checkpoint every epoch costs with each upload mode (`none`: a local
//! storage path, the baseline), one fit of one worker doing the same work each epoch:
//!
//!     bench_store train s3://bucket/prefix none|sync|async CHECKPOINT_MB EPOCHS WORK
//!
//! `WORK`: `matmuls:N`, N products of a 256x256 matrix on one core (training that needs the
//! host's CPU), or `idle:MS`, the training thread waiting MS milliseconds (training on an
//! accelerator, whose host thread waits on the device: the cores are free meanwhile).
//!
//! The endpoint and credentials come from the `AWS_*` environment. Prints one JSON line:
//! `{"op": .., "bytes": .., "seconds": .., "mb_per_s": ..}` (`train`: `{"op": "train", "mode":
//! .., "seconds": .., "loop_seconds": .., "store_cpu_seconds": ..}`: the fit's wall time; the
//! train loop's, from its first epoch to the return of its last report (the wait for the last
//! upload after it is not in it); the CPU time of the worker's store threads, `rtune-store`).
//! `bench/suite.py` (group 10) runs it beside pyarrow's S3 file system and the AWS CLI.

use std::path::Path;
use std::time::{Duration, Instant};

use rtune::config::{CheckpointConfig, CheckpointUpload};
use rtune::{Params, RunConfig, SaveVarStore, TorchTrainer, TrainContext};
use rtune_driver::storage::remote::Remote;
use tch::nn::{Init, VarStore};
use tch::{Device, Kind, Tensor};

/// Each epoch: the work `work` names (see the module docs), then a checkpoint of
/// `checkpoint_mb` MiB of weights, reported. Rank 0 writes to `times_file` the loop's seconds
/// and its process's store threads' CPU seconds.
fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let mb: i64 = ctx.params().get("checkpoint_mb")?;
    let epochs: u64 = ctx.params().get("epochs")?;
    let work: String = ctx.params().get("work")?;
    let times_file: String = ctx.params().get("times_file")?;
    let vs = VarStore::new(Device::Cpu);
    let _weights = vs.root().var("w", &[mb << 18], Init::Randn { mean: 0.0, stdev: 1.0 });
    let a = Tensor::randn([256, 256], (Kind::Float, Device::Cpu)) / 16.0;
    let began = Instant::now();
    for epoch in ctx.iteration() + 1..=epochs {
        let mut x = a.shallow_clone();
        match work.split_once(':') {
            Some(("matmuls", n)) => {
                for _ in 0..n.parse::<u64>()? {
                    x = x.matmul(&a).tanh();
                }
            }
            Some(("idle", ms)) => std::thread::sleep(Duration::from_millis(ms.parse()?)),
            _ => anyhow::bail!("work {work:?}: use matmuls:N or idle:MS"),
        }
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        ctx.report_with_checkpoint(
            [("epoch", epoch as f64), ("x", x.mean(Kind::Float).double_value(&[]))],
            ck,
        )?;
    }
    let loop_seconds = began.elapsed().as_secs_f64();
    if ctx.world_rank() == 0 {
        let times = format!("{loop_seconds} {}", threads_cpu_seconds("rtune-store"));
        std::fs::write(&times_file, times)?;
    }
    Ok(())
}

/// The CPU seconds (user and system) of this process's threads named `name`.
fn threads_cpu_seconds(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return f64::NAN };
    // SAFETY: sysconf reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut seconds = 0.0;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != name {
            continue;
        }
        // After the name: state is field 3; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        seconds += (tick(11) + tick(12)) / ticks;
    }
    seconds
}

/// One fit of `train`: its seconds, the train loop's seconds, and the store threads' CPU
/// seconds.
fn fit(url: &str, mode: &str, mb: i64, epochs: u64, work: &str) -> anyhow::Result<(f64, f64, f64)> {
    let local = std::env::temp_dir().join(format!("rtune-bench-train-{}", std::process::id()));
    let mut checkpoint = CheckpointConfig::new().num_to_keep(2);
    let storage = match mode {
        "none" => local.display().to_string(),
        "sync" => url.to_owned(),
        "async" => {
            checkpoint = checkpoint.upload(CheckpointUpload::Async);
            url.to_owned()
        }
        other => anyhow::bail!("{other}: use none, sync or async"),
    };
    let name = format!("train-{mode}-{}", std::process::id());
    let run = RunConfig::new(name).storage_path(storage).checkpoint_config(checkpoint);
    let times_file = std::env::temp_dir().join(format!("rtune-bench-times-{}", std::process::id()));
    let params = Params::new()
        .with("checkpoint_mb", mb)
        .with("epochs", epochs as i64)
        .with("work", work)
        .with("times_file", times_file.display().to_string());
    let began = Instant::now();
    let result = TorchTrainer::new(train).train_loop_config(params).run_config(run).fit()?;
    let seconds = began.elapsed().as_secs_f64();
    anyhow::ensure!(result.metrics_history.len() == epochs as usize, "{result:?}");
    let _ = std::fs::remove_dir_all(&local);
    let times = std::fs::read_to_string(&times_file)?;
    let _ = std::fs::remove_file(&times_file);
    let mut times = times.split(' ').map(str::parse::<f64>);
    match (times.next(), times.next()) {
        (Some(Ok(looped)), Some(Ok(store_cpu))) => Ok((seconds, looped, store_cpu)),
        _ => anyhow::bail!("{}: unreadable times", times_file.display()),
    }
}

fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => size_of(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    rtune::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [op, url, mode, mb, epochs, work] = args.as_slice()
        && op == "train"
    {
        let (seconds, looped, store_cpu) = fit(url, mode, mb.parse()?, epochs.parse()?, work)?;
        println!(
            r#"{{"op": "train", "mode": "{mode}", "seconds": {seconds:.3}, "loop_seconds": {looped:.3}, "store_cpu_seconds": {store_cpu:.3}}}"#
        );
        return Ok(());
    }
    let (op, url, dir, connections) = match args.as_slice() {
        [op, url, dir] => (op, url, dir, None),
        [op, url, dir, n] => (op, url, dir, Some(n.parse()?)),
        _ => {
            anyhow::bail!("usage: bench_store upload|download s3://bucket/prefix DIR [CONNECTIONS]")
        }
    };
    let settings = rtune::config::StoreSettings { connections, ..Default::default() };
    let remote = Remote::with_settings(url, &settings)?;
    let dir = Path::new(dir);
    let began = Instant::now();
    match op.as_str() {
        "upload" => {
            let name =
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            remote.upload_folder(dir, &name)?;
            // Not a run's checkpoint: the mark a rank leaves (where it is whole) goes, so that
            // the next client uploads the same files.
            let mark = dir.join(".uploaded");
            std::fs::remove_file(&mark).map_err(|e| anyhow::anyhow!("{}: {e}", mark.display()))?;
        }
        "download" => {
            rtune_driver::storage::remote::blocking(remote.download(dir))?;
        }
        other => anyhow::bail!("{other}: use upload or download"),
    }
    let seconds = began.elapsed().as_secs_f64();
    let bytes = size_of(dir);
    let mb_per_s = bytes as f64 / 1e6 / seconds;
    println!(
        r#"{{"op": "{op}", "bytes": {bytes}, "seconds": {seconds:.3}, "mb_per_s": {mb_per_s:.1}}}"#
    );
    Ok(())
}
