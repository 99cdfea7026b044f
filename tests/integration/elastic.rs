//! Elastic worker groups (`num_workers = { min, max }`): a rank killed from outside shrinks the
//! group instead of failing it, the group grows back when the pool has room, and neither counts
//! against `max_failures`; losing ranks below `min` fails the trial as a rigid group's loss does.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::cli::{RTUNE, rtune};
use crate::common::{Killed, synthetic_sweep, text, wait_for};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

/// Runs the sweep `name` of `synthetic-curve` (20 iterations, a checkpoint each) with
/// `num_workers`, on a machine of 3 CPUs; once it has 3 rows, SIGKILLs its rank 2 (found with
/// `rtune stack`); returns the sweep's exit and its experiment's folder.
fn kill_rank_2(
    dir: &std::path::Path,
    name: &str,
    num_workers: &str,
) -> Result<(std::process::ExitStatus, std::path::PathBuf)> {
    let tables = format!(
        "[scaling]\nnum_workers = {num_workers}\n[param_space]\niterations = 20\n\
         sleep_s = 0.25\n"
    );
    let file = synthetic_sweep(dir, name, &tables)?;
    let run = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .env("RTUNE_NUM_CPUS", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut run = Killed(run);
    let experiment = dir.join(name);
    let rows = || -> usize {
        let Ok(grid) = ResultGrid::from_path(&experiment) else { return 0 };
        grid.trials.first().map_or(0, |t| t.history().len())
    };
    wait_for(Duration::from_secs(90), || Ok(rows() >= 3)).context("no 3 rows")?;
    let exp = experiment.to_str().unwrap();
    let out = rtune(&["stack", exp, "0"])?;
    let stacks = String::from_utf8_lossy(&out.stdout).into_owned();
    let pid: i32 = stacks
        .split_once("rank 2 (pid ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .with_context(|| format!("no rank 2 in rtune stack:\n{}", text(&out)))?;
    // SAFETY: kill(2) on a worker of the sweep this test started.
    ensure!(unsafe { libc::kill(pid, libc::SIGKILL) } == 0, "kill {pid}");
    let status = run.0.wait()?;
    Ok((status, experiment))
}

/// One of 3 ranks SIGKILLed mid-run: the trial goes on with 2 (a resize, not a failure: the
/// sweep allows none), grows back to 3 at its next checkpoint (the CPU is free again), ends
/// TERMINATED with every iteration once; its rows say their world size, the resizes are counted
/// and said, and `rtune show` lists them.
pub fn a_lost_rank_shrinks_the_group_and_it_grows_back() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (status, experiment) = kill_rank_2(dir.path(), "shrink", "{ min = 2, max = 3 }")?;
    ensure!(status.success(), "the sweep: {status}");
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = &grid.trials[0];
    ensure!(trial.status() == TrialStatus::Terminated, "{:?}: {:?}", trial.status(), trial.error());
    let iterations: Vec<f64> = trial.history().iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == (1..=20).map(f64::from).collect::<Vec<_>>(), "{iterations:?}");
    let worlds: Vec<f64> = trial.history().iter().map(|m| m["world_size"]).collect();
    ensure!(worlds[0] == 3.0, "it started with every rank it may have: {worlds:?}");
    let shrunk = worlds.iter().position(|&w| w == 2.0).context(format!("never 2: {worlds:?}"))?;
    ensure!(worlds[shrunk..].contains(&3.0), "it never grew back: {worlds:?}");
    ensure!(trial.last("group_resizes") == Some(2.0), "{:?}", trial.last("group_resizes"));
    let frame = grid.dataframe()?;
    let resizes = frame.column("group_resizes")?.f64()?.get(0);
    ensure!(resizes == Some(2.0), "the dataframe's resize count: {resizes:?}");
    let rows = std::fs::read_to_string(trial.path().join("result.json"))?;
    let said: Vec<String> = rows
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|row| row["group_resize"].as_str().map(str::to_owned))
        .collect();
    ensure!(said.len() == 2, "{said:?}");
    ensure!(said[0].starts_with("3 -> 2: rank 2 lost: killed by signal 9 (SIGKILL)"), "{said:?}");
    ensure!(said[1].starts_with("2 -> 3: room appeared"), "{said:?}");
    let out = rtune(&["show", experiment.to_str().unwrap(), "0"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.contains("resized before iteration ") && stdout.contains("3 -> 2"), "{stdout}");
    ensure!(stdout.contains("its group of 2 ranks started"), "{stdout}");
    Ok(())
}

/// An elastic group at its `min` that loses a rank fails as a rigid group would, and that
/// failure counts: with no failures allowed, the trial ends in ERROR naming the signal.
pub fn losing_a_rank_below_min_fails_the_trial() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (status, experiment) = kill_rank_2(dir.path(), "below", "{ min = 3, max = 3 }")?;
    ensure!(status.code() == Some(1), "a failed trial exits 1: {status}");
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = &grid.trials[0];
    ensure!(trial.status() == TrialStatus::Error, "{:?}", trial.status());
    let error = trial.error().unwrap_or_default();
    ensure!(error.contains("lost") || error.contains("signal 9"), "{error}");
    ensure!(trial.last("group_resizes").is_none(), "no resize: {:?}", trial.last("group_resizes"));
    Ok(())
}
