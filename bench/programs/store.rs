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
//!     bench_store train s3://bucket/prefix none|sync|async CHECKPOINT_MB EPOCHS MATMULS
//!
//! The endpoint and credentials come from the `AWS_*` environment. Prints one JSON line:
//! `{"op": .., "bytes": .., "seconds": .., "mb_per_s": ..}` (`train`: `{"op": "train", "mode":
//! .., "seconds": ..}`). `bench/suite.py` (group 10) runs it beside pyarrow's S3 file system and
//! the AWS CLI.

use std::path::Path;
use std::time::Instant;

use rtune::config::{CheckpointConfig, CheckpointUpload};
use rtune::storage::remote::Remote;
use rtune::{Params, RunConfig, SaveVarStore, TorchTrainer, TrainContext};
use tch::nn::{Init, VarStore};
use tch::{Device, Kind, Tensor};

/// Each epoch: `matmuls` products of a 256x256 matrix (the training), then a checkpoint of
/// `checkpoint_mb` MiB of weights, reported.
fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let mb: i64 = ctx.params().get("checkpoint_mb")?;
    let epochs: u64 = ctx.params().get("epochs")?;
    let matmuls: u64 = ctx.params().get("matmuls")?;
    let vs = VarStore::new(Device::Cpu);
    let _weights = vs.root().var("w", &[mb << 18], Init::Randn { mean: 0.0, stdev: 1.0 });
    let a = Tensor::randn([256, 256], (Kind::Float, Device::Cpu)) / 16.0;
    for epoch in ctx.iteration() + 1..=epochs {
        let mut x = a.shallow_clone();
        for _ in 0..matmuls {
            x = x.matmul(&a).tanh();
        }
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        ctx.report_with_checkpoint(
            [("epoch", epoch as f64), ("x", x.mean(Kind::Float).double_value(&[]))],
            ck,
        )?;
    }
    Ok(())
}

/// One fit of `train`; its seconds.
fn fit(url: &str, mode: &str, mb: i64, epochs: u64, matmuls: u64) -> anyhow::Result<f64> {
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
    let params = Params::new()
        .with("checkpoint_mb", mb)
        .with("epochs", epochs as i64)
        .with("matmuls", matmuls as i64);
    let began = Instant::now();
    let result = TorchTrainer::new(train).train_loop_config(params).run_config(run).fit()?;
    let seconds = began.elapsed().as_secs_f64();
    anyhow::ensure!(result.metrics_history.len() == epochs as usize, "{result:?}");
    let _ = std::fs::remove_dir_all(&local);
    Ok(seconds)
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
    if let [op, url, mode, mb, epochs, matmuls] = args.as_slice()
        && op == "train"
    {
        let seconds = fit(url, mode, mb.parse()?, epochs.parse()?, matmuls.parse()?)?;
        println!(r#"{{"op": "train", "mode": "{mode}", "seconds": {seconds:.3}}}"#);
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
            rtune::storage::remote::blocking(remote.download(dir))?;
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
