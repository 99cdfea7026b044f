//! One writer per checkpoint in a store: a request of a dead attempt that lands late (held in
//! the network while its worker died, delivered after the next attempt recorded its own
//! checkpoint of the same iteration) writes nothing the trial recorded.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::ResultGrid;

use crate::common::{text, wait_for};
use crate::relay::{Action, Relay};
use crate::storage::S3Server;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// A trial's rank 0 is killed while the upload of its third checkpoint is held in the network;
/// the retry goes on from the second and records its own third; then the held upload lands.
/// The checkpoint the trial recorded for iteration 3 is untouched (the late write went to the
/// dead attempt's own name), the trial ends with every iteration once, and its kept
/// checkpoints are the retry's, whole.
pub fn a_dead_attempts_late_upload_replaces_no_recorded_checkpoint() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    // The first upload of the third checkpoint's file is held in the network.
    let held = Arc::new(AtomicBool::new(false));
    let hold = held.clone();
    let proxy = Relay::start(&server, move |line| {
        match line.contains("/checkpoint_000003/state.bin ") && !hold.swap(true, Ordering::SeqCst) {
            true => Action::Hold,
            false => Action::Pass,
        }
    })?;
    let dir = tempfile::tempdir()?;
    let staging = dir.path().join("staging");
    let file = dir.path().join("late.toml");
    std::fs::write(
        &file,
        format!(
            r#"
name = "late"
storage_path = "s3://exp/stale"

[trainable]
builtin = "synthetic-curve"

[param_space]
iterations = 6
sleep_s = 0.2
checkpoint_kb = 16

[tune]
metric = "score"
mode = "max"
num_samples = 1

[run]
failure = {{ max_failures = 1 }}
checkpoint = {{ num_to_keep = 6 }}
store = {{ endpoint = "{}" }}
"#,
            proxy.endpoint
        ),
    )?;
    let env: Vec<_> = server.env().into_iter().filter(|(k, _)| *k != "AWS_ENDPOINT_URL").collect();
    let child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .envs(env)
        .env("RTUNE_STAGING", &staging)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_for(Duration::from_secs(60), || Ok(held.load(Ordering::SeqCst)))?;
    // Rank 0 (each row names its process) dies with its upload in flight.
    let experiment = staging.join("exp/stale/late");
    let rows = std::fs::read_dir(&experiment)?
        .flatten()
        .map(|e| e.path().join("result.json"))
        .find(|p| p.exists())
        .context("the trial's rows")?;
    let row: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&rows)?.lines().last().context("a row")?)?;
    let pid = row["pid"].as_i64().context("a pid")? as i32;
    // SAFETY: kill(2) on a pid the sweep reported as its worker's.
    ensure!(unsafe { libc::kill(pid, libc::SIGKILL) } == 0, "kill {pid}");
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));

    let grid = ResultGrid::from_path(&experiment)?;
    let trial = grid.trials.first().context("a trial")?;
    let iterations: Vec<f64> = trial.history().iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{iterations:?}");
    let trial_dir = trial.path().file_name().context("name")?.to_string_lossy().into_owned();
    let prefix = format!("stale/late/{trial_dir}/");
    let result = trial.result().context("a result")?;
    let third = result.best_checkpoints.iter().find(|(c, _)| c.iteration().ok() == Some(3));
    let third = third.context("iteration 3's checkpoint")?.0.path().file_name().context("name")?;
    let recorded = format!("{prefix}{}/state.bin", third.to_string_lossy());
    let written = |key: &str| {
        server.boto3(&format!(
            "print(s3.head_object(Bucket='exp', Key='{key}')['LastModified'].isoformat())"
        ))
    };
    let before = written(&recorded)?;
    // Later than the recorded one by the clock's resolution at least.
    std::thread::sleep(Duration::from_millis(1100));
    proxy.release();
    wait_for(Duration::from_secs(30), || Ok(proxy.answer().is_some()))?;
    let answer = proxy.answer().unwrap_or_default();
    ensure!(answer.contains(" 200"), "the late upload was not taken: {answer}");
    ensure!(written(&recorded)? == before, "the recorded checkpoint was written over");
    // It landed under the dead attempt's own name, which no row names.
    let keys = server.keys("exp", &prefix)?;
    ensure!(keys.contains(&format!("{prefix}checkpoint_000003/state.bin")), "{keys:?}");
    for (checkpoint, metrics) in &result.best_checkpoints {
        let iteration = checkpoint.iteration()?;
        let by = checkpoint.metadata()?.attempt;
        ensure!(by == u32::from(iteration >= 3), "{metrics:?} by attempt {by}");
        let name = checkpoint.path().file_name().context("name")?.to_string_lossy().into_owned();
        ensure!(name.ends_with("_a1") == (by == 1), "{name}");
    }
    Ok(())
}

/// A checkpoint's upload that fails on one file leaves no parts of the others in the store:
/// the large file's multipart upload, under way beside it (two connections, each part held a
/// second in the network), is given up and aborted, and the error said is the file's that
/// failed (the relay refuses its PUT).
pub fn a_failed_file_leaves_no_parts_of_its_siblings() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='parts')")?;
    let proxy = Relay::start(&server, |line| match line {
        l if l.contains("/bad.json ") => Action::Refuse,
        l if l.contains("/weights.bin?") && l.contains("partNumber=") => {
            Action::Delay(Duration::from_secs(1))
        }
        _ => Action::Pass,
    })?;
    let dir = tempfile::tempdir()?;
    let checkpoint = dir.path().join("checkpoint_000001");
    std::fs::create_dir_all(&checkpoint)?;
    // 96 MiB: six parts of 16 MiB, two at a time.
    std::fs::write(checkpoint.join("weights.bin"), vec![7u8; 96 << 20])?;
    std::fs::write(checkpoint.join("bad.json"), b"{}")?;
    std::fs::write(checkpoint.join("metadata.json"), b"{}")?;
    let remote = server.remote("s3://parts/run", &proxy.endpoint)?.with_connections(2);
    let Err(failed) = remote.upload_folder(&checkpoint, "checkpoint_000001") else {
        anyhow::bail!("the upload succeeded through a refusal");
    };
    let said = failed.to_string();
    ensure!(said.contains("bad.json") && !said.contains("given up"), "{said}");
    let open =
        server.boto3("print(len(s3.list_multipart_uploads(Bucket='parts').get('Uploads', [])))")?;
    ensure!(open.trim() == "0", "{} multipart uploads left open", open.trim());
    let keys = server.keys("parts", "run/")?;
    ensure!(!keys.iter().any(|k| k.ends_with("metadata.json")), "{keys:?}");
    Ok(())
}
