//! The GPU paths that can be checked on a machine without one: GPUs that workers could not use
//! are refused before any trial, in one line that names the cause and the fix. (What needs a
//! device is `make test-gpu`, tests/gpu/.)

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use anyhow::{Result, ensure};

use crate::libtorch::cpu_only_libtorch;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// One synthetic trial of one worker asking for a GPU.
fn gpu_sweep(dir: &Path) -> Result<std::path::PathBuf> {
    let path = dir.join("gpu.toml");
    let text = format!(
        r#"
name = "on-gpu"
storage_path = "{}"
[trainable]
builtin = "synthetic-curve"
[scaling]
num_workers = 1
use_gpu = true
[param_space]
iterations = 2
[tune]
num_samples = 1
"#,
        dir.join("results").display()
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

/// `rtune run` of the GPU sweep in `dir` with `env`, which must be refused: exit code 2, one
/// line on stderr that says what was asked and `expected`, and not a trial (nor an experiment)
/// left behind. Returns the line.
fn refused(dir: &Path, env: &[(&str, &OsStr)], expected: &[&str]) -> Result<String> {
    let sweep = gpu_sweep(dir)?;
    let mut run = Command::new(RTUNE);
    run.arg("run").arg(&sweep).env("RTUNE_NUM_GPUS", "1").env_remove("RUST_LOG");
    let out = run.envs(env.iter().copied()).output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    ensure!(out.status.code() == Some(2), "exit {:?}, stderr:\n{stderr}", out.status);
    ensure!(lines.len() == 1, "one line expected, got:\n{stderr}");
    let line = lines[0];
    // Named as the sweep file names it (`scaling`, where it is written), not as the Rust API
    // does, with the file's other mistakes.
    let at = format!(
        "rtune: {}:6:2: `scaling` asks for 1 GPU per worker, but",
        dir.join("gpu.toml").display()
    );
    ensure!(line.starts_with(&at), "{line}");
    for part in expected {
        ensure!(line.contains(part), "`{part}` missing from: {line}");
    }
    let results = dir.join("results");
    let left: Vec<_> = match std::fs::read_dir(&results) {
        Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    };
    ensure!(left.is_empty(), "the refused sweep left {left:?}");
    Ok(line.to_owned())
}

/// No device visible (`CUDA_VISIBLE_DEVICES=""`, the pool told there is one GPU): refused by
/// the probe before any trial. On a machine without an NVIDIA driver the cause is the driver;
/// with one, the empty device list.
pub fn gpus_workers_cannot_use_are_refused_before_any_trial() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let line =
        refused(dir.path(), &[("CUDA_VISIBLE_DEVICES", OsStr::new(""))], &["use_gpu = false"])?;
    let cause = ["install the driver", "CUDA_VISIBLE_DEVICES=\"\""];
    ensure!(cause.iter().any(|c| line.contains(c)), "neither cause named: {line}");
    Ok(())
}

/// A CPU-only libtorch (this libtorch without libtorch_cuda.so, first on the library path).
pub fn a_cpu_only_libtorch_is_refused_by_name() -> Result<()> {
    let (cpu_only, path) = cpu_only_libtorch()?;
    let dir = tempfile::tempdir()?;
    let folder = cpu_only.path().display().to_string();
    let expected = ["this libtorch has no CUDA", &folder, "torch==2.11.0"];
    refused(dir.path(), &[("LD_LIBRARY_PATH", &path)], &expected).map(drop)
}

/// A trial that waits for its resources is PENDING, not RUNNING, until its workers start: two
/// trials allowed at once on a machine with room for one (`RTUNE_NUM_CPUS=1`), as two 0.5-GPU
/// trials of a 1-GPU machine would wait for each other. Read from the state file while the
/// sweep runs: never two RUNNING, and one PENDING beside the RUNNING one.
pub fn a_trial_waiting_for_resources_is_pending() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = dir.path().join("wait.toml");
    let state = dir.path().join("results/waiting/experiment_state.json");
    std::fs::write(
        &sweep,
        format!(
            r#"
name = "waiting"
storage_path = "{}"
[trainable]
builtin = "synthetic-curve"
[scaling]
num_workers = 1
[param_space]
rate = {{ grid_search = [0.1, 0.2] }}
iterations = 6
sleep_s = 0.3
[tune]
max_concurrent_trials = 2
"#,
            dir.path().join("results").display()
        ),
    )?;
    let mut child = Command::new(RTUNE)
        .arg("run")
        .arg(&sweep)
        .env("RTUNE_NUM_CPUS", "1")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut seen_waiting = false;
    let statuses = || -> Option<Vec<String>> {
        let state: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).ok()?).ok()?;
        let trials = state["trials"].as_array()?;
        Some(trials.iter().map(|t| t["status"].as_str().unwrap_or("").to_owned()).collect())
    };
    while child.try_wait()?.is_none() {
        if let Some(statuses) = statuses() {
            let running = statuses.iter().filter(|s| *s == "Running").count();
            if running > 1 {
                let _ = child.kill();
                anyhow::bail!("two trials RUNNING on room for one: {statuses:?}");
            }
            seen_waiting |= running == 1 && statuses.iter().any(|s| s == "Pending");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    ensure!(child.wait()?.success(), "the sweep failed");
    ensure!(seen_waiting, "no snapshot showed a trial PENDING beside the running one");
    ensure!(statuses() == Some(vec!["Terminated".into(), "Terminated".into()]), "{:?}", statuses());
    Ok(())
}
