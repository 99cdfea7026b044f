//! Experiments on an object store (`storage_path = "s3://bucket/prefix"`) against a real
//! S3-compatible server (moto's, from the `.venv` that `make test` fills) on 127.0.0.1: a sweep
//! mirrored there and read back by boto3 and by rtune from the URL, a driver killed and the
//! sweep resumed from the store alone, and bad URLs refused before anything runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

use crate::common::{text, wait_for};

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

/// moto's S3 server on 127.0.0.1 (a port of its own); stopped when dropped.
pub(crate) struct S3Server {
    child: Child,
    pub(crate) endpoint: String,
    /// Every request it logged: `GET /bucket/key?query`, in order.
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl S3Server {
    pub(crate) fn start() -> Result<S3Server> {
        let mut child = Command::new(python())
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("moto's server (make test installs moto[server] into .venv)")?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = requests.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("Running on http://") {
                    let _ = tx.send(line[at + "Running on ".len()..].trim().to_owned());
                }
                // werkzeug's access log: `127.0.0.1 - - [date] "GET /b/k HTTP/1.1" 200 -`,
                // colored by status (a range's 206 too).
                let line = without_colors(&line);
                if let Some((_, request)) = line.split_once('"')
                    && let Some((request, _)) = request.rsplit_once(" HTTP/")
                {
                    log.lock().unwrap().push(request.to_owned());
                }
            }
        });
        let endpoint = rx.recv_timeout(Duration::from_secs(60)).context("moto did not start")?;
        Ok(S3Server { child, endpoint, requests })
    }

    /// The requests it has logged so far (`GET /bucket/key?query`), in order.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// The environment an S3 client of this server needs.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// A folder of this server's bucket as rtune reaches it, through `endpoint` (this server's,
    /// or a relay's in front of it).
    pub(crate) fn remote(
        &self,
        url: &str,
        endpoint: &str,
    ) -> Result<rtune_driver::storage::remote::Remote> {
        let settings = [
            ("aws_endpoint", endpoint),
            ("aws_access_key_id", "testing"),
            ("aws_secret_access_key", "testing"),
            ("aws_region", "us-east-1"),
        ];
        Ok(rtune_driver::storage::remote::Remote::parse_with(url, &settings)?)
    }

    /// Every key under `prefix` in `bucket`, as boto3 lists them (sorted; none if none).
    pub(crate) fn keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>> {
        let listed = self.boto3(&format!(
            "r = s3.list_objects_v2(Bucket='{bucket}', Prefix='{prefix}')\n\
             print('\\n'.join(sorted(o['Key'] for o in r.get('Contents', []))))"
        ))?;
        Ok(listed.lines().filter(|k| !k.is_empty()).map(String::from).collect())
    }

    /// Every key under `prefix` in `bucket` with its size.
    fn sizes(&self, bucket: &str, prefix: &str) -> Result<std::collections::BTreeMap<String, u64>> {
        let listed = self.boto3(&format!(
            "p = s3.get_paginator('list_objects_v2')\n\
             for page in p.paginate(Bucket='{bucket}', Prefix='{prefix}'):\n\
             \x20   for o in page.get('Contents', []): print(o['Key'], o['Size'])"
        ))?;
        listed
            .lines()
            .map(|l| {
                let (key, size) = l.rsplit_once(' ').context("key and size")?;
                Ok((key.to_owned(), size.parse()?))
            })
            .collect()
    }

    /// A `result.json` in the store as boto3 reads it: its rows, and the last one's
    /// `training_iteration`.
    fn rows(&self, bucket: &str, key: &str) -> Result<(usize, f64)> {
        let read = self.boto3(&format!(
            "import json\nrows = s3.get_object(Bucket='{bucket}', Key='{key}')['Body'].read()\
             .decode().splitlines()\nprint(len(rows), json.loads(rows[-1])['training_iteration'])"
        ))?;
        let (count, last) = read.trim().split_once(' ').context("rows and iteration")?;
        Ok((count.parse()?, last.parse()?))
    }

    /// Runs boto3 code with a client `s3` of this server; returns what it prints.
    pub(crate) fn boto3(&self, code: &str) -> Result<String> {
        let script = format!("import boto3\ns3 = boto3.client('s3')\n{code}");
        let out = Command::new(python()).args(["-c", &script]).envs(self.env()).output()?;
        ensure!(out.status.success(), "boto3: {}", text(&out));
        Ok(String::from_utf8(out.stdout)?)
    }
}

/// `text` without its ANSI color sequences (`ESC [ .. m`).
fn without_colors(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The synthetic-curve sweep on `storage`, each trial checkpointed every iteration.
pub(crate) fn sweep_file(dir: &Path, storage: &str, sleep: f64) -> Result<PathBuf> {
    sweep_file_with(dir, storage, sleep, "sync", "")
}

fn sweep_file_uploading(dir: &Path, storage: &str, sleep: f64, upload: &str) -> Result<PathBuf> {
    sweep_file_with(dir, storage, sleep, upload, "")
}

/// `sweep_file_uploading`, with `params` (TOML lines) added to its param space.
pub(crate) fn sweep_file_with(
    dir: &Path,
    storage: &str,
    sleep: f64,
    upload: &str,
    params: &str,
) -> Result<PathBuf> {
    let text = format!(
        r#"
name = "curves"
storage_path = "{storage}"

[trainable]
builtin = "synthetic-curve"

[param_space]
rate = {{ loguniform = [0.02, 1.0] }}
plateau = {{ uniform = [0.5, 1.0] }}
noise = 0.01
iterations = 6
sleep_s = {sleep:?}
seed = 3
{params}

[tune]
metric = "score"
mode = "max"
num_samples = 4
max_concurrent_trials = 1
seed = 5

[run]
checkpoint = {{ num_to_keep = 2, upload = "{upload}" }}
sync_period_s = 0.2
"#
    );
    let path = dir.join("sweep.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

pub(crate) fn rtune(server: &S3Server, staging: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(RTUNE)
        .args(args)
        .envs(server.env())
        .env("RTUNE_STAGING", staging)
        .env_remove("RUST_LOG")
        .output()?)
}

/// Every trial's rows are iterations 1, 2, .. with no gap, all TERMINATED with 6 each.
fn check_complete(grid: &ResultGrid) -> Result<()> {
    ensure!(grid.trials.len() == 4, "{} trials", grid.trials.len());
    for t in &grid.trials {
        ensure!(t.status() == TrialStatus::Terminated, "{}: {:?}", t.trial_id(), t.status());
        let iterations: Vec<f64> = t.history().iter().map(|m| m["training_iteration"]).collect();
        ensure!(iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{}: {iterations:?}", t.trial_id());
    }
    Ok(())
}

/// A sweep mirrored to the store: boto3 lists and reads what rtune wrote (a trial's rows, its
/// kept checkpoints and no pruned or temporary ones), and `rtune show` and `ResultGrid` read it
/// back from the URL on a machine with an empty staging folder.
pub fn a_sweep_on_s3_is_read_back_from_the_store() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), "s3://exp/team/sweeps", 0.0)?;
    let staging = dir.path().join("staging");
    let out = rtune(&server, &staging, &["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let keys = server.keys("exp", "team/sweeps/curves/")?;
    let listed = keys.join("\n");
    for wanted in ["experiment_state.json", "tuner.json", "sweep.json", "driver.log"] {
        ensure!(keys.contains(&format!("team/sweeps/curves/{wanted}")), "{listed}");
    }
    ensure!(keys.iter().all(|k| !k.contains("/.")), "a temporary file went up: {listed}");
    let checkpoints: Vec<&String> = keys.iter().filter(|k| k.ends_with("/metadata.json")).collect();
    // Two kept per trial (num_to_keep): the pruned ones are gone from the store too.
    ensure!(checkpoints.len() == 8, "{} checkpoints in the store: {listed}", checkpoints.len());
    let result = keys.iter().find(|k| k.ends_with("/result.json")).context("no result.json")?;
    let rows = server.rows("exp", result)?;
    ensure!(rows == (6, 6.0), "result.json in the store: {rows:?}");
    // Each kept checkpoint went up from the worker that wrote it, before its report.
    let original = ResultGrid::from_path(staging.join("exp/team/sweeps/curves"))?;
    for t in &original.trials {
        for (checkpoint, _) in &t.result().context("result")?.best_checkpoints {
            let mark = checkpoint.path().join(".uploaded");
            ensure!(mark.exists(), "{} was not uploaded by its rank", checkpoint.path().display());
        }
    }

    // Another machine: nothing staged; everything comes from the URL.
    let elsewhere = dir.path().join("elsewhere");
    let url = "s3://exp/team/sweeps/curves";
    let out = rtune(&server, &elsewhere, &["show", url, "--format", "json"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(shown.as_array().map(Vec::len) == Some(4), "{shown}");
    // The best checkpoint exported from the URL, on a machine that staged nothing yet.
    let exported = dir.path().join("best");
    let fresh = dir.path().join("fresh");
    let out = rtune(&server, &fresh, &["export", url, "--to", exported.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(exported.join("metadata.json").exists() && exported.join("params.json").exists());
    // What `show` fetched is the whole experiment: its staging copy reads as the original.
    let grid = ResultGrid::from_path(elsewhere.join("exp/team/sweeps/curves"))?;
    check_complete(&grid)?;
    for (a, b) in grid.trials.iter().zip(&original.trials) {
        ensure!(a.history() == b.history() && a.params() == b.params(), "{}", a.trial_id());
    }
    // Ray's own reader takes a trial synced back from the store as one of its own.
    for t in &grid.trials {
        ray_reads_trial(t.path(), t.last("score").context("a score")?)?;
    }
    Ok(())
}

/// Ray Tune's `Result.from_path` (the `.venv`'s ray 2.60, which `make test` installs) reads the
/// trial folder `path`: its last metrics (`score` as given), its six rows, its config, and its
/// two kept checkpoints, which are folders here.
fn ray_reads_trial(path: &Path, score: f64) -> Result<()> {
    let code = format!(
        "import os\nfrom ray.tune import Result\nr = Result.from_path({path:?})\n\
         assert r.metrics['training_iteration'] == 6, r.metrics\n\
         assert abs(r.metrics['score'] - {score:?}) < 1e-12, r.metrics\n\
         assert len(r.metrics_dataframe) == 6, r.metrics_dataframe\n\
         assert r.config['iterations'] == 6, r.config\n\
         assert len(r.best_checkpoints) == 2, r.best_checkpoints\n\
         assert all(os.path.isdir(c.path) for c, _ in r.best_checkpoints)\n\
         assert r.checkpoint.path.endswith('checkpoint_000006'), r.checkpoint\n\
         print('ray read', r.metrics['trial_id'])",
        path = path.display().to_string()
    );
    let out = Command::new(python()).args(["-c", &code]).output()?;
    ensure!(out.status.success(), "Ray's Result.from_path: {}", text(&out));
    Ok(())
}

/// The driver SIGKILLed mid-sweep, its staging folder lost with its machine: `rtune resume
/// s3://..` on another staging folder goes on from what the store holds, and every trial ends
/// with its full history, each iteration once.
pub fn a_killed_sweep_resumes_from_the_store_alone() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), "s3://exp/runs", 0.1)?;
    // Killed once the store holds a checkpoint of the second trial.
    let began = Instant::now();
    let stored = |k: &str| k.contains("_00001_") && k.ends_with("metadata.json");
    kill_sweep_once(&server, &file, &dir.path().join("first"), "runs/curves/", stored)?;
    let second = dir.path().join("second");
    let out = rtune(&server, &second, &["resume", "s3://exp/runs/curves", "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    // Read back on a third machine, from the store.
    let third = dir.path().join("third");
    let out = rtune(&server, &third, &["show", "s3://exp/runs/curves", "--format", "json"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    check_complete(&ResultGrid::from_path(third.join("exp/runs/curves"))?)?;
    if began.elapsed() > Duration::from_secs(600) {
        bail!("took {:?}", began.elapsed());
    }
    Ok(())
}

/// Runs the sweep `file` on `server`, staging in `staging`, until the store holds a key under
/// `prefix` that `stored` picks; then SIGKILLs its driver and loses the staging folder (its
/// machine is gone).
pub(crate) fn kill_sweep_once(
    server: &S3Server,
    file: &Path,
    staging: &Path,
    prefix: &str,
    stored: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut child = Command::new(RTUNE)
        .args(["run", file.to_str().context("a path")?, "--no-tui"])
        .envs(server.env())
        .env("RTUNE_STAGING", staging)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let waited = wait_for(Duration::from_secs(120), || {
        Ok(server.keys("exp", prefix)?.iter().any(|k| stored(k)))
    });
    child.kill()?;
    child.wait()?;
    waited?;
    std::fs::remove_dir_all(staging)?;
    Ok(())
}

/// One driver per experiment on a store too: while a driver runs a sweep on `s3://`, its
/// lease is an object in the experiment's folder there, and `rtune resume` of the URL from
/// another staging folder (another machine's) is refused naming it; once that driver is
/// SIGKILLed, a resume takes the lease over at once (its holder was on this machine and is
/// gone) and finishes the sweep; the lease leaves the store with the driver that holds it.
pub fn the_store_lease_refuses_a_second_driver_and_yields_to_a_dead_one() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), "s3://exp/runs", 0.2)?;
    let mut child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .envs(server.env())
        .env("RTUNE_STAGING", dir.path().join("first"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let lease = "runs/curves/.driver_lease.json";
    wait_for(Duration::from_secs(120), || {
        let keys = server.keys("exp", "runs/curves/")?;
        Ok(keys.iter().any(|k| k == lease) && keys.iter().any(|k| k.ends_with("metadata.json")))
    })?;
    let url = "s3://exp/runs/curves";
    let out = rtune(&server, &dir.path().join("second"), &["resume", url, "--no-tui"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let wanted = format!("{url} is being run by another driver (host ");
    ensure!(stderr.contains(&wanted), "{}", text(&out));
    ensure!(stderr.contains(&format!("pid {}", child.id())), "{}", text(&out));
    child.kill()?;
    child.wait()?;
    ensure!(server.keys("exp", "runs/curves/")?.iter().any(|k| k == lease), "no lease left");
    let out = rtune(&server, &dir.path().join("third"), &["resume", url, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    check_complete(&ResultGrid::from_path(dir.path().join("third/exp/runs/curves"))?)?;
    let keys = server.keys("exp", "runs/curves/")?;
    ensure!(!keys.iter().any(|k| k == lease), "the lease outlived its driver: {keys:?}");
    Ok(())
}

/// A bucket that does not exist, an endpoint nothing answers, and a URL that names no bucket:
/// each refused with exit 2 before anything runs, naming the URL.
pub fn bad_store_urls_are_refused_before_anything_runs() -> Result<()> {
    let server = S3Server::start()?;
    let dir = tempfile::tempdir()?;
    let staging = dir.path().join("staging");
    let cases = [
        ("s3://missing/x", server.endpoint.clone(), "s3://missing/x cannot be listed"),
        ("s3://exp/x", "http://127.0.0.1:9".to_string(), "s3://exp/x cannot be listed"),
        ("s3:///x", server.endpoint.clone(), "does not name a bucket"),
    ];
    for (url, endpoint, wanted) in cases {
        let file = sweep_file(dir.path(), url, 0.0)?;
        let out = Command::new(RTUNE)
            .args(["run", file.to_str().unwrap(), "--no-tui"])
            .envs(server.env())
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("RTUNE_STAGING", &staging)
            .output()?;
        ensure!(out.status.code() == Some(2), "{url}: {}", text(&out));
        ensure!(String::from_utf8_lossy(&out.stderr).contains(wanted), "{url}: {}", text(&out));
        ensure!(
            !staging.join("missing").exists() && !staging.join("exp").exists(),
            "{url}: staged"
        );
    }
    Ok(())
}

/// `upload = "async"`: reports go on while checkpoints upload, and each is recorded once it is
/// whole in the store: every trial ends with its kept checkpoints recorded and in the store,
/// uploaded by its rank, its rows complete. The checkpoints' uploads go through a slow link
/// (each request 0.2 s), slower than the checkpoints come: a report waits for the upload
/// before it rather than queue a second, which each rank says once.
pub fn async_uploads_record_checkpoints_once_they_are_in_the_store() -> Result<()> {
    use crate::relay::{Action, Relay};
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let slow = Relay::start(&server, |line| match line.contains("/checkpoint_") {
        true => Action::Delay(Duration::from_millis(200)),
        false => Action::Pass,
    })?;
    let dir = tempfile::tempdir()?;
    let file = sweep_file_uploading(dir.path(), "s3://exp/async", 0.0, "async")?;
    let text_with_store = std::fs::read_to_string(&file)?.replace(
        "sync_period_s = 0.2",
        &format!("sync_period_s = 0.2\nstore = {{ endpoint = \"{}\" }}", slow.endpoint),
    );
    std::fs::write(&file, text_with_store)?;
    let staging = dir.path().join("staging");
    let out = rtune(&server, &staging, &["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(staging.join("exp/async/curves"))?;
    check_complete(&grid)?;
    let listed = server.keys("exp", "async/curves/")?.join("\n");
    for t in &grid.trials {
        let kept = &t.result().context("result")?.best_checkpoints;
        ensure!(kept.len() == 2, "{}: {} checkpoints recorded", t.trial_id(), kept.len());
        for (checkpoint, metrics) in kept {
            ensure!(
                checkpoint.path().join(".uploaded").exists(),
                "{}",
                checkpoint.path().display()
            );
            let name = checkpoint.path().file_name().context("name")?.to_string_lossy();
            let wanted = format!("{name}/metadata.json");
            ensure!(
                listed.lines().any(|k| k.contains(t.trial_id()) && k.ends_with(&wanted)),
                "{} {name} is not in the store:\n{listed}",
                t.trial_id()
            );
            // Recorded with the metrics of the report that made it.
            let iteration = checkpoint.iteration()? as f64;
            ensure!(metrics["training_iteration"] == iteration, "{metrics:?}");
        }
        // The latest, the one a resume starts from, is kept.
        ensure!(kept.iter().any(|(c, _)| c.iteration().ok() == Some(6)), "{}", t.trial_id());
        // No report waited for its checkpoint: later rows (or the last, at the end) name them.
        let rows = std::fs::read_to_string(t.path().join("result.json"))?;
        let rows: Vec<serde_json::Value> =
            rows.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
        ensure!(rows.iter().all(|r| r.get("checkpoint_dir_name").is_none()), "{rows:?}");
        let named: usize =
            rows.iter().filter_map(|r| r["checkpoints_uploaded"].as_array()).map(Vec::len).sum();
        ensure!(named == 6, "{} checkpoints named as uploaded: {rows:?}", named);
        let log = std::fs::read_to_string(t.path().join("logs/rank_0.stderr"))?;
        let said = log.matches("checkpoint uploads cannot keep up").count();
        ensure!(said == 1, "{}: said {said} times:\n{log}", t.trial_id());
    }
    Ok(())
}

/// A checkpoint larger than a part (40 MiB: three parts up, three ranges down, in parallel)
/// goes up whole with its `metadata.json`, and comes back byte for byte; boto3 reads the same
/// bytes.
pub fn a_large_checkpoint_goes_up_in_parts_and_comes_back_whole() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='big')")?;
    let dir = tempfile::tempdir()?;
    let checkpoint = dir.path().join("checkpoint_000001");
    std::fs::create_dir_all(&checkpoint)?;
    let weights: Vec<u8> =
        (0..40u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(checkpoint.join("model.safetensors"), &weights)?;
    std::fs::write(checkpoint.join("metadata.json"), b"{}")?;
    let remote = server.remote("s3://big/run", &server.endpoint)?;
    remote.upload_folder(&checkpoint, "checkpoint_000001")?;
    let size = server.boto3(
        "print(s3.head_object(Bucket='big', Key='run/checkpoint_000001/model.safetensors')['ContentLength'])",
    )?;
    ensure!(size.trim() == (40u64 << 20).to_string(), "the store holds {size}");
    let back = dir.path().join("back");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let fetched = runtime.block_on(remote.download(&back))?;
    ensure!(fetched == 2, "{fetched} objects fetched");
    let copy = std::fs::read(back.join("checkpoint_000001/model.safetensors"))?;
    ensure!(copy == weights, "the weights came back otherwise");
    ensure!(
        !std::fs::read_dir(back.join("checkpoint_000001"))?
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".tmp")),
        "a partial file was left"
    );
    Ok(())
}

/// PBT on the store: trials take over others' checkpoints (said in the driver's log, which the
/// store holds), every trial ends its 12 iterations, and the store holds what `rtune show` reads.
pub fn pbt_exploits_on_the_store() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("pbt.toml");
    std::fs::write(
        &file,
        r#"
name = "pbt"
storage_path = "s3://exp/pbt"

[trainable]
builtin = "synthetic-curve"

# All four at once on two cores: PBT compares a population that runs side by side.
[scaling]
resources_per_worker = { CPU = 0.25 }

[param_space]
rate = { loguniform = [0.02, 1.0] }
plateau = { uniform = [0.5, 1.0] }
noise = 0.0
iterations = 12
sleep_s = 0.1

[tune]
metric = "score"
mode = "max"
num_samples = 4
max_concurrent_trials = 4
seed = 1
scheduler = { type = "pbt", time_attr = "training_iteration", perturbation_interval = 2, hyperparam_mutations = { rate = { loguniform = [0.02, 1.0] } } }

[run]
sync_period_s = 0.2
"#,
    )?;
    let staging = dir.path().join("staging");
    let out = rtune(&server, &staging, &["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let log = server.boto3(
        "print(s3.get_object(Bucket='exp', Key='pbt/pbt/driver.log')['Body'].read().decode())",
    )?;
    ensure!(log.contains(" takes over trial "), "PBT exploited nothing:\n{log}");
    // Each exploit's checkpoint was copied inside the store (the last copy into a trial is
    // the one there now), whole and of the source's iteration.
    let mut copies = std::collections::BTreeMap::new();
    for line in log.lines() {
        let Some((_, copy)) = line.split_once("copied ") else { continue };
        let (from, to) = copy.split_once(" to ").context(line.to_owned())?;
        let to = to.strip_suffix(" in the store").context(line.to_owned())?;
        copies.insert(to.to_owned(), from.to_owned());
    }
    ensure!(!copies.is_empty(), "no exploit was copied in the store:\n{log}");
    let keys = server.keys("exp", "pbt/pbt/")?;
    for (to, from) in &copies {
        let key = format!("{}/metadata.json", to.strip_prefix("s3://exp/").context("bucket")?);
        ensure!(keys.contains(&key), "{key} is not in the store: {keys:?}");
        let iteration = server.boto3(&format!(
            "import json\nprint(json.loads(s3.get_object(Bucket='exp', Key='{key}')['Body']\
             .read())['training_iteration'])"
        ))?;
        // `…/checkpoint_000004`, or `…/checkpoint_000004_a1` when a retry wrote it.
        let name = from.rsplit('/').next().and_then(|n| n.strip_prefix("checkpoint_"));
        let digits = name.and_then(|n| n.split('_').next()).context(from.to_owned())?;
        let source: u64 = digits.parse().with_context(|| from.to_owned())?;
        ensure!(iteration.trim() == source.to_string(), "{to} copies {from}: {iteration}");
    }
    let elsewhere = dir.path().join("elsewhere");
    let out = rtune(&server, &elsewhere, &["show", "s3://exp/pbt/pbt", "--format", "json"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(elsewhere.join("exp/pbt/pbt"))?;
    ensure!(grid.trials.len() == 4, "{} trials", grid.trials.len());
    for t in &grid.trials {
        ensure!(t.status() == TrialStatus::Terminated, "{}: {:?}", t.trial_id(), t.status());
        ensure!(t.last("training_iteration") == Some(12.0), "{}", t.trial_id());
    }
    Ok(())
}

/// Asks the test binary, run again, for one `TorchTrainer::fit` on the store this names.
const FIT_ON_ENV: &str = "RTUNE_TEST_FIT_ON";

/// In a child process started by `a_single_fit_goes_to_the_store`: one fit of the synthetic
/// curve (4 iterations, a checkpoint each, 2 kept) on the store; exits 0 when it succeeded.
pub fn run_fit_if_asked() {
    use rtune::CheckpointConfig;
    use rtune::{RunConfig, TorchTrainer};
    let Ok(url) = std::env::var(FIT_ON_ENV) else { return };
    let builtin = rtune::cli::Registry::builtin();
    let defaults = &builtin.trainables().get("synthetic-curve").expect("a builtin").defaults;
    let config = defaults.clone().with("iterations", 4).with("noise", 0.0);
    let run = RunConfig::new("single")
        .storage_path(url)
        .checkpoint_config(CheckpointConfig::new().num_to_keep(2));
    let trainer = TorchTrainer::new(rtune::builtins::train_synthetic_curve)
        .train_loop_config(config)
        .run_config(run);
    match trainer.fit() {
        Ok(result) => {
            println!("fit ended in {}", result.path.display());
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("fit failed: {e}");
            std::process::exit(1)
        }
    }
}

/// `TorchTrainer::fit` alone with an `s3://` storage path: its run folder (rows and kept
/// checkpoints, pruned ones gone) ends up in the store; a bucket that cannot be listed fails
/// it before anything starts.
pub fn a_single_fit_goes_to_the_store() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let fit = |url: &str| -> Result<Output> {
        Ok(Command::new(std::env::current_exe()?)
            .env(FIT_ON_ENV, url)
            .envs(server.env())
            .env("RTUNE_STAGING", dir.path().join("staging"))
            .output()?)
    };
    let out = fit("s3://exp/fits")?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let rows = server.rows("exp", "fits/single/result.json")?;
    ensure!(rows == (4, 4.0), "result.json in the store: {rows:?}");
    let listed = server.keys("exp", "fits/single/")?.join("\n");
    for kept in ["checkpoint_000003/metadata.json", "checkpoint_000004/metadata.json"] {
        ensure!(listed.contains(&format!("fits/single/{kept}")), "{kept} missing:\n{listed}");
    }
    ensure!(
        !listed.contains("checkpoint_000001"),
        "a pruned checkpoint is in the store:\n{listed}"
    );
    let out = fit("s3://missing/fits")?;
    ensure!(out.status.code() == Some(1), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("s3://missing/fits cannot be listed"));
    ensure!(!dir.path().join("staging/missing").exists(), "a run folder was made");
    Ok(())
}

/// A TCP proxy in front of the S3 server that stops serving, mid-transfer, when a request
/// naming `trigger` comes through: it cuts every connection (that one before the request
/// reaches the server) and refuses new ones until `restart`. The server keeps its objects, as a
/// real one restarted would.
struct Outage {
    endpoint: String,
    down: Arc<AtomicBool>,
    tripped: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

impl Outage {
    fn start(server: &S3Server, trigger: &str) -> Result<Outage> {
        let upstream = server.endpoint.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let flag = || Arc::new(AtomicBool::new(false));
        let (down, tripped, stop) = (flag(), flag(), flag());
        let open = Arc::new(std::sync::Mutex::new(Vec::<TcpStream>::new()));
        let (d, t, s, trigger) =
            (Arc::clone(&down), Arc::clone(&tripped), Arc::clone(&stop), trigger.to_owned());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                if d.load(Ordering::SeqCst) || client.set_nonblocking(false).is_err() {
                    continue; // dropped: the client sees its connection closed
                }
                let mut list = open.lock().unwrap();
                list.extend(client.try_clone().ok());
                list.extend(server.try_clone().ok());
                drop(list);
                let (client_r, mut server_w) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (d, t, open, trigger) = (d.clone(), t.clone(), open.clone(), trigger.clone());
                std::thread::spawn(move || {
                    pump_until(client_r, &mut server_w, trigger.as_bytes(), || {
                        if t.swap(true, Ordering::SeqCst) {
                            return false;
                        }
                        d.store(true, Ordering::SeqCst);
                        for stream in open.lock().unwrap().drain(..) {
                            let _ = stream.shutdown(std::net::Shutdown::Both);
                        }
                        true
                    })
                });
                let (mut server_r, mut client_w) = (server, client);
                std::thread::spawn(move || std::io::copy(&mut server_r, &mut client_w));
            }
        });
        Ok(Outage { endpoint, down, tripped, stop })
    }

    /// Serves again.
    fn restart(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    fn tripped(&self) -> bool {
        self.tripped.load(Ordering::SeqCst)
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` into `to` until either closes; when `trigger` shows up in what passes (looked
/// for across reads), asks `cut` before passing it on, and stops if it says so.
fn pump_until(mut from: TcpStream, to: &mut TcpStream, trigger: &[u8], cut: impl Fn() -> bool) {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 64 << 10];
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        tail.extend_from_slice(&buf[..n]);
        if tail.windows(trigger.len()).any(|w| w == trigger) && cut() {
            return;
        }
        tail.drain(..tail.len().saturating_sub(trigger.len()));
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// The store goes away in the middle of a checkpoint's upload (through `[run] store`'s
/// endpoint, a proxy in front of the server), first for less than the sweep file's
/// `retry_timeout_s` (the upload is retried and the trial never notices), then for longer (the
/// upload fails its attempt, which is retried from the last recorded checkpoint once the store
/// is back). Either way every iteration is recorded once and each kept checkpoint is whole in
/// the store.
pub fn a_store_down_mid_upload_is_retried_then_fails_the_attempt() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let staging = dir.path().join("staging");
    // Credentials from the environment; the endpoint only from the sweep file.
    let env: Vec<_> = server.env().into_iter().filter(|(k, _)| *k != "AWS_ENDPOINT_URL").collect();
    for (name, retry_s, outage) in
        [("brief", 30.0, Some(Duration::from_millis(800))), ("long", 1.0, None)]
    {
        // The store goes when the third checkpoint starts going up (its key's first request).
        let proxy = Outage::start(&server, "/checkpoint_000003/")?;
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &file,
            format!(
                r#"
name = "{name}"
storage_path = "s3://exp/outage"

[trainable]
builtin = "synthetic-curve"

[param_space]
rate = 0.5
plateau = 0.9
noise = 0.0
iterations = 6
sleep_s = 0.1

[tune]
metric = "score"
mode = "max"
num_samples = 1

[run]
failure = {{ max_failures = 2 }}
checkpoint = {{ num_to_keep = 2 }}
store = {{ endpoint = "{}", retry_timeout_s = {retry_s:?} }}
"#,
                proxy.endpoint
            ),
        )?;
        let child = Command::new(RTUNE)
            .args(["run", file.to_str().unwrap(), "--no-tui"])
            .envs(env.iter().cloned())
            .env("RTUNE_STAGING", &staging)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let log = staging.join(format!("exp/outage/{name}/driver.log"));
        wait_for(Duration::from_secs(60), || Ok(proxy.tripped()))?;
        match outage {
            Some(brief) => std::thread::sleep(brief),
            // Back once the driver has seen the attempt fail.
            None => wait_for(Duration::from_secs(60), || {
                Ok(std::fs::read_to_string(&log).unwrap_or_default().contains("attempt 0 failed"))
            })?,
        }
        proxy.restart();
        let out = child.wait_with_output()?;
        ensure!(out.status.code() == Some(0), "{name}: {}", text(&out));
        let said = std::fs::read_to_string(&log)?;
        match outage {
            Some(_) => ensure!(!said.contains("attempt 0 failed"), "{name}: not retried:\n{said}"),
            None => ensure!(
                said.contains(
                    "attempt 0 failed: rank 0 (attempt 0): storage: upload in s3://exp/outage/long"
                ),
                "{name}:\n{said}"
            ),
        }
        let grid = ResultGrid::from_path(staging.join(format!("exp/outage/{name}")))?;
        let trial = grid.trials.first().context("a trial")?;
        let iterations: Vec<f64> =
            trial.history().iter().map(|m| m["training_iteration"]).collect();
        ensure!(iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{name}: {iterations:?}");
        // The kept checkpoints: whole in the store (every file, at its size), the retry's own.
        let result = trial.result().context("a result")?;
        ensure!(result.best_checkpoints.len() == 2, "{name}: {:?}", result.best_checkpoints);
        let keys = server.sizes("exp", "outage/")?;
        for (checkpoint, _) in &result.best_checkpoints {
            let attempt = checkpoint.metadata()?.attempt;
            ensure!(attempt == u32::from(outage.is_none()), "{name}: written by attempt {attempt}");
            let trial_dir =
                checkpoint.path().parent().and_then(|p| p.file_name()).context("trial")?;
            let ck = checkpoint.path().file_name().context("name")?;
            for file in std::fs::read_dir(checkpoint.path())? {
                let file = file?;
                let file_name = file.file_name().to_string_lossy().into_owned();
                if file_name.starts_with('.') {
                    continue;
                }
                let key = format!(
                    "outage/{name}/{}/{}/{file_name}",
                    trial_dir.to_string_lossy(),
                    ck.to_string_lossy()
                );
                ensure!(
                    keys.get(&key) == Some(&file.metadata()?.len()),
                    "{name}: {key} in {keys:?}"
                );
            }
        }
    }
    Ok(())
}

/// A model trained on the store, exported to the store, and predicted with from the store on
/// a machine that staged nothing: the same predictions, row for row, as the local export's.
pub fn a_model_exported_to_the_store_predicts_from_there() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("digits.toml");
    std::fs::write(
        &file,
        r#"
name = "digits"
storage_path = "s3://exp/sweeps"

[trainable]
builtin = "digits-mlp"

[param_space]
epochs = 2
hidden = 32

[tune]
metric = "val_loss"
mode = "min"
num_samples = 1

[run]
checkpoint = { num_to_keep = 1 }
"#,
    )?;
    let staging = dir.path().join("staging");
    let out = rtune(&server, &staging, &["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let (experiment, model) = ("s3://exp/sweeps/digits", "s3://exp/models/best");
    let out = rtune(&server, &staging, &["export", experiment, "--to", model])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("to {model}")),
        "{}",
        text(&out)
    );
    let keys = server.keys("exp", "models/best/")?;
    for file in ["model.pt", "metadata.json", "preprocessor.json"] {
        ensure!(keys.contains(&format!("models/best/{file}")), "{file} not exported: {keys:?}");
    }
    // A folder on the store is written once, as a local one is.
    let out = rtune(&server, &staging, &["export", experiment, "--to", model])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(text(&out).contains("already holds"), "{}", text(&out));

    let local = dir.path().join("best");
    let out = rtune(&server, &staging, &["export", experiment, "--to", local.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let digits = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv.gz");
    let predict = |model: &str, staging: &Path, output: &Path| -> Result<()> {
        let args = ["predict", "--model", model, "--input", digits.to_str().unwrap()];
        let out = rtune(
            &server,
            staging,
            &[&args[..], &["--no-header", "--output"], &[output.to_str().unwrap()]].concat(),
        )?;
        ensure!(out.status.code() == Some(0), "{}", text(&out));
        Ok(())
    };
    let (from_store, from_disk) = (dir.path().join("store.csv"), dir.path().join("disk.csv"));
    predict(model, &dir.path().join("elsewhere"), &from_store)?;
    predict(local.to_str().unwrap(), &staging, &from_disk)?;
    let (a, b) = (std::fs::read_to_string(&from_store)?, std::fs::read_to_string(&from_disk)?);
    ensure!(
        a.lines().count() > 1000 && a == b,
        "predictions differ ({} and {} lines)",
        a.lines().count(),
        b.lines().count()
    );

    // On 2 workers, the input from the store and the output to it: the same predictions.
    server
        .boto3(&format!("s3.upload_file('{}', 'exp', 'data/digits.csv.gz')", digits.display()))?;
    let output = "s3://exp/out/predicted.csv";
    let args = ["predict", "--model", model, "--input", "s3://exp/data/digits.csv.gz"];
    let more = ["--no-header", "--output", output, "--workers", "2", "--batch-rows", "500"];
    let out = rtune(&server, &dir.path().join("third"), &[&args[..], &more].concat())?;
    ensure!(out.status.code() == Some(0) && text(&out).contains("on 2 workers"), "{}", text(&out));
    let c = server.boto3(
        "print(s3.get_object(Bucket='exp', Key='out/predicted.csv')['Body'].read().decode(), end='')",
    )?;
    ensure!(c.lines().count() == a.lines().count(), "{} lines", c.lines().count());
    for (x, y) in a.lines().zip(c.lines()) {
        for (p, q) in x.split(',').zip(y.split(',')) {
            let close = match (p.parse::<f64>(), q.parse::<f64>()) {
                (Ok(p), Ok(q)) => (p - q).abs() <= 1e-6,
                _ => p == q,
            };
            ensure!(close, "rows differ: {x} against {y}");
        }
    }
    // It is not written over.
    let out = rtune(&server, &dir.path().join("third"), &[&args[..], &more].concat())?;
    ensure!(
        out.status.code() == Some(2) && text(&out).contains("already exists"),
        "{}",
        text(&out)
    );
    Ok(())
}
