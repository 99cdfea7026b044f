//! The GPU paths that can be checked on a machine without one: GPUs that workers could not use
//! are refused before any trial, in one line that names the cause and the fix. (What needs a
//! device is `make test-gpu`, tests/gpu/.)

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Result, ensure};

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

/// The refusal: exit code 2, one line on stderr that says what was asked and `expected`, and
/// not a trial (nor an experiment) left behind.
fn check_refused(out: &Output, dir: &Path, expected: &[&str]) -> Result<()> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    ensure!(out.status.code() == Some(2), "exit {:?}, stderr:\n{stderr}", out.status);
    ensure!(lines.len() == 1, "one line expected, got:\n{stderr}");
    let line = lines[0];
    ensure!(line.contains("asks for 1 GPU per worker, but"), "{line}");
    for part in expected {
        ensure!(line.contains(part), "`{part}` missing from: {line}");
    }
    let results = dir.join("results");
    let left: Vec<_> = match std::fs::read_dir(&results) {
        Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    };
    ensure!(left.is_empty(), "the refused sweep left {left:?}");
    Ok(())
}

/// No device visible (`CUDA_VISIBLE_DEVICES=""`, the pool told there is one GPU): refused by
/// the probe before any trial. On a machine without an NVIDIA driver the cause is the driver;
/// with one, the empty device list.
pub fn gpus_workers_cannot_use_are_refused_before_any_trial() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = gpu_sweep(dir.path())?;
    let out = Command::new(RTUNE)
        .arg("run")
        .arg(&sweep)
        .env("RTUNE_NUM_GPUS", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env_remove("RUST_LOG")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cause = if stderr.contains("no NVIDIA driver") {
        "install the driver"
    } else {
        "CUDA_VISIBLE_DEVICES=\"\""
    };
    check_refused(&out, dir.path(), &[cause, "use_gpu = false"])
}

/// A CPU-only libtorch: this libtorch's folder, hard-linked without `libtorch_cuda.so` and put
/// first on `LD_LIBRARY_PATH` (the binaries' rpath is a RUNPATH, which that overrides).
pub fn a_cpu_only_libtorch_is_refused_by_name() -> Result<()> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join(".libtorch/lib").canonicalize()?;
    // Hard links need the same file system: a folder beside the build's.
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(scratch)?;
    let cpu_only = tempfile::tempdir_in(scratch)?;
    for entry in std::fs::read_dir(&lib)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "libtorch_cuda.so" || !entry.file_type()?.is_file() {
            continue;
        }
        std::fs::hard_link(entry.path(), cpu_only.path().join(&name))?;
    }
    // libtorch_cpu finds the CUDA wheels' libraries (it needs libcupti) relative to its own
    // folder, which the copy is not in: they go on the path after it.
    let mut path = vec![cpu_only.path().to_owned()];
    for entry in std::fs::read_dir(lib.join("../../nvidia"))? {
        path.push(entry?.path().join("lib"));
    }
    let dir = tempfile::tempdir()?;
    let sweep = gpu_sweep(dir.path())?;
    let out = Command::new(RTUNE)
        .arg("run")
        .arg(&sweep)
        .env("RTUNE_NUM_GPUS", "1")
        .env("LD_LIBRARY_PATH", std::env::join_paths(path)?)
        .env_remove("RUST_LOG")
        .output()?;
    let folder = cpu_only.path().display().to_string();
    check_refused(&out, dir.path(), &["this libtorch has no CUDA", &folder, "torch==2.11.0"])
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
