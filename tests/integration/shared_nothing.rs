//! A cluster whose nodes share nothing with the driver but an object store: a head, two node
//! agents that cannot see the driver's folders (each in a mount namespace of its own, with the
//! driver's temporary root and the build's target folder hidden under empty tmpfs mounts), a
//! driver with its storage path on a real S3-compatible server (moto's). The workers run the
//! driver's binary fetched from the head by hash, read their dataset from the store, upload
//! their checkpoints (each rank its shard of a sharded model's optimizer state), and the retry
//! after a worker's crash resumes from the store.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::CheckpointConfig;
use rtune::data::Dataset;
use rtune::polars::prelude::{Column, DataFrame};
use rtune::{
    FailureConfig, Params, PlacementStrategy, RunConfig, ScalingConfig, TorchTrainer, TrainContext,
};
use rtune::{LoadVarStore, SaveVarStore};

use crate::common::{text, wait_for};
use crate::storage::S3Server;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");
/// In the driver's child process: `HEAD_ADDRESS STORAGE_URL`.
const DRIVER_ENV: &str = "RTUNE_TEST_SHARED_NOTHING";
/// Four row groups of rtune's prepared parquet files (65,536 rows each): each rank's half of
/// the rows is in two of them.
const ROWS: usize = 4 * 65_536;
const ITERATIONS: u64 = 5;

/// Row `i`'s feature: one of 4,096 values, scattered (splitmix64), so that the file does not
/// compress to almost nothing.
fn x_of(i: usize) -> f64 {
    let mut z = (i as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 52) as f64 / 4096.0
}

/// Killed (with their workers) on drop.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Each rank says where it runs from, sums its rows of the dataset with the others', and
/// checkpoints every iteration; rank 1 of the first attempt dies at iteration 3, so the second
/// resumes from the checkpoint of iteration 2 (reported as `restored_from`).
fn train_sharing_nothing(ctx: &mut TrainContext) -> Result<()> {
    let exe = std::env::current_exe()?;
    println!("rank {} exe {} run_dir {}", ctx.world_rank(), exe.display(), ctx.run_dir().display());
    let shard = ctx.dataset_shard("train")?;
    let mut sum = [f32::try_from(&shard.features().sum(tch::Kind::Float))?];
    ctx.all_reduce(&mut sum, rtune::collective::ReduceOp::Sum)?;
    let restored_from = match ctx.checkpoint() {
        Some(ck) => std::fs::read_to_string(ck.path().join("state.txt"))?.trim().parse()?,
        None => 0.0,
    };
    // A sharded model (ZeRO-1, Adam, one step per iteration) whose optimizer shards go up with
    // each checkpoint, each from its rank's node: the retry restores both (their steps summed).
    let mut vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let linear = tch::nn::linear(vs.root() / "l", 3, 2, Default::default());
    if let Some(ck) = ctx.checkpoint() {
        ck.load_var_store(&mut vs)?;
    }
    let (zero1, adam) =
        (rtune::config::Sharding::Zero1, rtune::worker::OptimizerSettings::adam(0.1));
    let mut model = ctx.prepare_model_sharded(&vs, zero1, adam)?;
    let mut restored_steps = [0.0];
    if let Some(ck) = ctx.checkpoint().cloned() {
        model.load_optimizer(&ck)?;
        restored_steps[0] = model.optimizer_state()?.0 as f32;
    }
    ctx.all_reduce(&mut restored_steps, rtune::collective::ReduceOp::Sum)?;
    for i in ctx.iteration() + 1..=ITERATIONS {
        let input = tch::Tensor::ones([1, 3], (tch::Kind::Float, tch::Device::Cpu));
        model.backward_step(&tch::nn::Module::forward(&linear, &input).sum(tch::Kind::Float))?;
        if i == 3 && ctx.world_rank() == 1 && ctx.checkpoint().is_none() {
            std::process::exit(3);
        }
        // Checkpoints reported before are gone from the scratch folder: they are in the store.
        let kept_here = std::fs::read_dir(ctx.run_dir())?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("checkpoint_"))
            .count();
        let mut ck = ctx.new_checkpoint()?;
        if ctx.world_rank() == 0 {
            std::fs::write(ck.path().join("state.txt"), i.to_string())?;
        }
        ck.save_var_store(&vs)?;
        model.save_optimizer(&mut ck)?;
        let metrics = [
            ("value", i as f64),
            ("x_sum", f64::from(sum[0])),
            ("restored_from", restored_from),
            ("restored_steps", f64::from(restored_steps[0])),
            ("kept_here", kept_here as f64),
        ];
        ctx.report_with_checkpoint(metrics, ck)?;
    }
    Ok(())
}

/// In the child the test starts as the driver (with the store's credentials): the fit, then
/// its result's path; never returns there. Elsewhere: returns at once.
pub fn run_driver_if_asked() {
    let Ok(spec) = std::env::var(DRIVER_ENV) else { return };
    let (address, url) = spec.split_once(' ').expect("HEAD_ADDRESS STORAGE_URL");
    let frame = DataFrame::new(
        ROWS,
        vec![
            Column::new("x".into(), (0..ROWS).map(x_of).collect::<Vec<_>>()),
            Column::new("y".into(), (0..ROWS as i64).map(|i| i % 2).collect::<Vec<_>>()),
        ],
    )
    .expect("a frame");
    let run = RunConfig::new("apart")
        .storage_path(url)
        .cluster(address, None)
        .failure_config(FailureConfig::max_failures(2))
        .checkpoint_config(CheckpointConfig::new().num_to_keep(2));
    let trainer = TorchTrainer::new(train_sharing_nothing)
        .train_loop_config(Params::new())
        .datasets([("train", Dataset::frame(frame))])
        .columns(rtune::data::Columns::new().features(["x"]).label("y"))
        .scaling(ScalingConfig::workers(2).placement_strategy(PlacementStrategy::StrictSpread))
        .run_config(run);
    match trainer.fit() {
        Ok(result) => {
            let last = result.metrics.clone().unwrap_or_default();
            let kept_here =
                result.metrics_history.iter().filter_map(|m| m.get("kept_here")).copied();
            println!(
                "ended {} after {} failure(s): {} reports, at most {} checkpoint(s) in a scratch \
                 folder, x_sum {}, restored_from {}, restored optimizer steps {}",
                result.path.display(),
                result.failures.len(),
                result.metrics_history.len(),
                kept_here.fold(0.0, f64::max),
                last.get("x_sum").copied().unwrap_or(-1.0),
                last.get("restored_from").copied().unwrap_or(-1.0),
                last.get("restored_steps").copied().unwrap_or(-1.0)
            );
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("fit failed: {e}");
            std::process::exit(1)
        }
    }
}

/// A node agent that sees none of `hidden` (each under an empty tmpfs in a mount namespace of
/// its own), run from its own copy of rtune's full program, its cache in `root`.
fn hidden_node(head: &str, root: &Path, hidden: &[&Path], s3: &S3Server) -> Result<Child> {
    let own = root.join("rtune-torch");
    std::fs::copy(env!("CARGO_BIN_EXE_rtune-torch"), &own)?;
    let hide: Vec<String> = hidden.iter().map(|p| p.display().to_string()).collect();
    let script = r#"IFS=:; for d in $HIDE; do mount -t tmpfs tmpfs "$d" || exit 97; done; unset IFS; exec "$@""#;
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&own)
        .args(["node", "--address", head, "--num-cpus", "1"])
        .env("HIDE", hide.join(":"))
        .env("RTUNE_CACHE", root)
        .envs(s3.env())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("unshare (util-linux) starts the agents in mount namespaces")
}

fn alive_nodes(head: &str) -> Result<usize> {
    let out =
        Command::new(RTUNE).args(["status", "--address", head, "--format", "json"]).output()?;
    ensure!(out.status.success(), "status: {}", text(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let nodes = status["nodes"].as_array().context("nodes")?;
    Ok(nodes.iter().filter(|n| n["alive"] == true).count())
}

fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output()?;
    ensure!(out.status.success(), "sha256sum: {}", text(&out));
    Ok(String::from_utf8(out.stdout)?.split(' ').next().unwrap_or_default().to_owned())
}

pub fn a_cluster_that_shares_only_the_store() -> Result<()> {
    let s3 = S3Server::start()?;
    s3.boto3("s3.create_bucket(Bucket='exp')")?;
    let (driver_root, head_root) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let node_roots = [tempfile::tempdir()?, tempfile::tempdir()?];
    let mut processes = Processes(Vec::new());
    let mut head = Command::new(RTUNE)
        .args(["head", "--port", "0", "--heartbeat-timeout", "2"])
        .env("RTUNE_CACHE", head_root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(head.stdout.take().context("head stdout")?).read_line(&mut line)?;
    processes.0.push(head);
    let address = line.trim().strip_prefix("rtune head listening on ").context(line.clone())?;
    // What the nodes must not see: the driver's files and the build (its binaries).
    let exe = std::env::current_exe()?;
    let target = exe.parent().and_then(Path::parent).context("the build's folder")?;
    for root in &node_roots {
        let hidden = [driver_root.path(), target];
        processes.0.push(hidden_node(address, root.path(), &hidden, &s3)?);
    }
    wait_for(Duration::from_secs(30), || Ok(alive_nodes(address)? == 2))?;

    let out = Command::new(&exe)
        .env(DRIVER_ENV, format!("{address} s3://exp/runs"))
        .envs(s3.env())
        .env("RTUNE_STAGING", driver_root.path().join("staging"))
        .env("RTUNE_CACHE", driver_root.path().join("cache"))
        .output()?;
    ensure!(out.status.success(), "the driver: {}", text(&out));
    let said = String::from_utf8(out.stdout.clone())?;
    ensure!(
        said.contains(&format!(
            "after 1 failure(s): {ITERATIONS} reports, at most 0 checkpoint(s) in a scratch \
             folder, x_sum "
        )) && said.trim_end().ends_with(", restored_from 2, restored optimizer steps 4"),
        "no checkpoint stayed in a scratch folder once up, and the retry resumed from \
         iteration 2's checkpoint, both ranks' optimizer shards (2 steps each): {}",
        text(&out)
    );
    // Each rank read its own rows from the store, together all of them.
    let x_sum: f64 = said
        .split("x_sum ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .context(said.clone())?
        .parse()?;
    let expected: f64 = (0..ROWS).map(x_of).sum();
    ensure!((x_sum - expected).abs() < 1e-4 * expected, "x_sum {x_sum}, expected {expected}");
    let run_dir = PathBuf::from(said.split_whitespace().nth(1).context("the run's path")?);

    // Each rank ran the driver's binary from its node's cache, in a folder of its node's.
    let sha = sha256(&exe)?;
    for (rank, root) in node_roots.iter().enumerate() {
        let cached = root.path().join("binaries").join(&sha);
        ensure!(sha256(&cached)? == sha, "node {rank} caches the driver's binary whole");
    }
    for rank in 0..2 {
        let log = std::fs::read_to_string(run_dir.join(format!("logs/rank_{rank}.stdout")))?;
        let line = log
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank} exe")))
            .context(log.clone())?;
        let on_a_node = node_roots.iter().any(|r| {
            let root = r.path().display().to_string();
            line.contains(&format!("exe {root}/binaries/{sha} run_dir {root}/runs/"))
        });
        ensure!(on_a_node, "rank {rank} ran from a node's cache and scratch: {line}");
        // It fetched the two row groups of its rows and the footer (with up to 64 KiB before
        // it), not the whole file.
        let log = std::fs::read_to_string(run_dir.join(format!("logs/rank_{rank}.stderr")))?;
        let said = log.split("dataset `train`: fetched ").nth(1).context(log.clone())?;
        let words: Vec<&str> = said.split_whitespace().collect();
        let (fetched, size): (u64, u64) = (words[0].parse()?, words[2].parse()?);
        ensure!(fetched * 4 < size * 3, "rank {rank} fetched {fetched} of {size} bytes");
    }
    // Scratch folders go with their workers.
    for root in &node_roots {
        let runs = root.path().join("runs");
        wait_for(Duration::from_secs(10), || {
            let mut left = Vec::new();
            collect_files(&runs, &mut left);
            Ok(left.is_empty())
        })?;
    }

    // The store: the dataset, and the two kept checkpoints (uploaded by rank 0's node), by the
    // second attempt (named so: no straggler of the first writes over them).
    let keys = s3.keys("exp", "runs/apart/")?;
    ensure!(keys.contains(&"runs/apart/.datasets/train/data.parquet".to_owned()), "{keys:?}");
    let stored: std::collections::BTreeSet<&str> = keys
        .iter()
        .filter_map(|k| k.strip_prefix("runs/apart/"))
        .filter_map(|k| k.split_once('/').map(|(dir, _)| dir))
        .filter(|d| d.starts_with("checkpoint_"))
        .collect();
    ensure!(
        stored.into_iter().collect::<Vec<_>>() == ["checkpoint_000004_a1", "checkpoint_000005_a1"],
        "{keys:?}"
    );
    // The driver's folder holds them as stubs (their metadata, what recording them reads):
    // the rest stays in the store until something reads it.
    for (name, state) in [("checkpoint_000004_a1", "4"), ("checkpoint_000005_a1", "5")] {
        let here = run_dir.join(name);
        let iteration = rtune::Checkpoint::from_directory(&here)?.iteration()?;
        ensure!(iteration.to_string() == state, "{name}: iteration {iteration}");
        ensure!(here.join(".stub").exists() && !here.join("state.txt").exists(), "{name}");
        let key = format!("runs/apart/{name}/state.txt");
        let text = s3.boto3(&format!(
            "print(s3.get_object(Bucket='exp', Key='{key}')['Body'].read().decode(), end='')"
        ))?;
        ensure!(text == state, "{name} in the store: {text:?}");
    }
    Ok(())
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
    }
}
