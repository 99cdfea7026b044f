//! Debugging a sweep as a user would: local mode (`rtune run --local`, `num_workers = 0`) runs
//! each trial's train function in the driver's process, and its experiment reads like any
//! other's; a panic there fails the trial, not the sweep. `rtune stack` shows where each rank
//! of a running trial is.

use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::cli::{RTUNE, rtune};
use crate::common::{Killed, synthetic_sweep, text, wait_for};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

/// The demo sweep file in local mode: 16 trials in the driver's process, one at a time (every
/// row names the driver's pid), whose experiment `ResultGrid`, `rtune show` and `rtune export`
/// read as any other.
pub fn the_demo_sweep_runs_in_local_mode() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/digits_tpe_asha.toml");
    let storage = format!("storage_path={:?}", dir.path().display().to_string());
    let out = rtune(&["run", sweep, "--local", "--no-tui", "--set", &storage])?;
    ensure!(out.status.success(), "{}", text(&out));
    let experiment = dir.path().join("digits-tpe-asha");
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(grid.trials.len() == 16, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    for t in &grid.trials {
        ensure!(t.last("val_loss").is_some_and(f64::is_finite), "{}: no val_loss", t.trial_id());
    }
    let mut pids = std::collections::BTreeSet::new();
    for trial in &grid.trials {
        for line in std::fs::read_to_string(trial.path().join("result.json"))?.lines() {
            let row: serde_json::Value = serde_json::from_str(line)?;
            pids.insert(row["pid"].as_u64().context("a row without its pid")?);
        }
    }
    let driver = pids.iter().next().copied().unwrap_or_default();
    ensure!(pids.len() == 1, "the trials ran in processes {pids:?}, not the driver's alone");
    // The driver is gone and none of its trials left a worker's log: no process was started.
    ensure!(!crate::common::alive(driver as i32), "the driver {driver} is still running");
    let logs = grid.trials.iter().filter(|t| t.path().join("logs").exists()).count();
    ensure!(logs == 0, "{logs} trials have worker logs");
    let exp = experiment.to_str().unwrap();
    let out = rtune(&["show", exp])?;
    ensure!(out.status.success(), "{}", text(&out));
    let best = grid.best_result()?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains(best.trial_id()), "{}", text(&out));
    let to = dir.path().join("best-model");
    let out = rtune(&["export", exp, "--best", "--to", to.to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    ensure!(to.join("params.json").exists() && to.join("metrics.json").exists());
    Ok(())
}

/// A trial that panics in local mode fails with the panic's message; the driver lives on and
/// runs the next trial.
pub fn a_panic_in_local_mode_fails_the_trial_not_the_sweep() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let tables = "[scaling]\nnum_workers = 0\n[param_space]\niterations = 4\n\
                  panic_at = { grid_search = [2, 0] }\n[tune]\nmax_concurrent_trials = 1\n";
    let file = synthetic_sweep(dir.path(), "panics", tables)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(1), "failed trials exit 1: {}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("panics"))?;
    let status = |panic_at: i64| {
        grid.trials
            .iter()
            .find(|t| t.params().get::<i64>("panic_at").ok() == Some(panic_at))
            .map(|t| (t.status(), t.history().len(), t.error().unwrap_or_default().to_owned()))
    };
    let (panicked, rows, error) = status(2).context("no trial with panic_at = 2")?;
    ensure!(panicked == TrialStatus::Error && rows == 1, "{panicked:?} after {rows} rows");
    ensure!(error.contains("synthetic panic at iteration 2"), "{error}");
    let (next, rows, _) = status(0).context("no trial with panic_at = 0")?;
    ensure!(next == TrialStatus::Terminated && rows == 4, "the next trial: {next:?}, {rows} rows");
    Ok(())
}

/// `rtune stack` on a trial whose rank 0 sleeps while rank 1 waits for it in the step's
/// all-reduce shows each rank where it is (the train function's frame, and the collective's for
/// rank 1); the trial then ends as it would have.
pub fn rtune_stack_shows_where_each_rank_is() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let tables = "[scaling]\nnum_workers = 2\n[param_space]\niterations = 3\nsleep_s = 1.5\n\
                  slow_rank = 0\n";
    let file = synthetic_sweep(dir.path(), "stack", tables)?;
    let run = std::process::Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut run = Killed(run);
    let experiment = dir.path().join("stack");
    let exp = experiment.to_str().unwrap();
    // Each step, rank 0 sleeps 3 s and rank 1 1.5 s: then rank 1 waits in the all-reduce.
    let mut seen = String::new();
    wait_for(Duration::from_secs(60), || {
        let out = rtune(&["stack", exp, "0"])?;
        seen = String::from_utf8_lossy(&out.stdout).into_owned();
        let (zero, one) = seen.split_once("\nrank 1 ").unwrap_or_default();
        Ok(out.status.success()
            && zero.contains("std::thread::functions::sleep")
            && one.contains("all_reduce")
            && one.contains("train_synthetic_curve"))
    })
    .with_context(|| format!("rtune stack never showed rank 1 in the all-reduce:\n{seen}"))?;
    ensure!(seen.starts_with("trial ") && seen.contains("rank 0 (pid "), "{seen}");
    ensure!(!seen.contains("on_capture") && !seen.contains("on_ask"), "{seen}");
    let status = run.0.wait()?;
    ensure!(status.success(), "the sweep after rtune stack: {status}");
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = &grid.trials[0];
    ensure!(trial.status() == TrialStatus::Terminated && trial.history().len() == 3);
    let out = rtune(&["stack", exp])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("no sweep is running"), "{}", text(&out));
    Ok(())
}
