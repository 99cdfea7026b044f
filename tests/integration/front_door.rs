//! What a new user meets first, from the command line: one driver per experiment (a second
//! one refused, a dead one's lease taken over), what a stopped sweep shows, and the counts and
//! messages a user reads.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

use crate::cli::{RTUNE, check_histories, rtune, sweep_file};
use crate::common::{text, wait_for};

/// `rtune run` of the synthetic sweep in `dir` (0.3 s an iteration, two trials at a time),
/// started in the background; its experiment directory.
fn start_run(dir: &Path) -> Result<(Child, std::path::PathBuf)> {
    let file = sweep_file(dir, 0.3)?;
    let child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.max_concurrent_trials=2"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    Ok((child, dir.join("results/curves")))
}

/// Waits until the sweep in `experiment` has recorded rows of a trial.
fn wait_for_rows(experiment: &Path) -> Result<()> {
    wait_for(Duration::from_secs(120), || {
        let rows = std::fs::read_dir(experiment).ok().into_iter().flatten().flatten().any(|e| {
            let progress = e.path().join("progress.csv");
            std::fs::read_to_string(progress).is_ok_and(|t| t.lines().count() >= 3)
        });
        Ok(rows && experiment.join(rtune::tune::STATE_FILE).exists())
    })
}

/// Every trial of the experiment TERMINATED, each iteration recorded once.
fn all_terminated_once(experiment: &Path) -> Result<()> {
    let grid = ResultGrid::from_path(experiment)?;
    ensure!(grid.trials.len() == 6, "{} trials", grid.trials.len());
    let statuses: Vec<TrialStatus> = grid.trials.iter().map(|t| t.status()).collect();
    ensure!(statuses.iter().all(|s| *s == TrialStatus::Terminated), "{statuses:?}");
    check_histories(&grid)?;
    // One directory a trial.
    let dirs = std::fs::read_dir(experiment)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("TorchTrainer_"))
        .count();
    ensure!(dirs == 6, "{dirs} trial directories");
    Ok(())
}

/// #46's reproduction: `rtune resume` of an experiment another `rtune run` is running is
/// refused (exit 2) before it touches anything, naming the holder and `rtune stop`; the first
/// driver ends with every trial TERMINATED and every row once, and `rtune watch` could follow
/// it all along (the refused command left its `driver.json` be).
pub fn a_second_driver_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (child, experiment) = start_run(dir.path())?;
    wait_for_rows(&experiment)?;
    let exp = experiment.to_str().unwrap();
    let driver_json = std::fs::read(experiment.join("driver.json")).context("driver.json")?;
    let out = rtune(&["resume", exp, "--no-tui"])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let wanted = format!("{exp} is being run by another driver (host ");
    ensure!(stderr.contains(&wanted), "{}", text(&out));
    ensure!(stderr.contains(&format!("pid {}", child.id())), "{}", text(&out));
    ensure!(stderr.contains(&format!("`rtune stop {exp}` ends it")), "{}", text(&out));
    ensure!(!String::from_utf8_lossy(&out.stdout).contains("TERMINATED"), "{}", text(&out));
    ensure!(std::fs::read(experiment.join("driver.json"))? == driver_json, "driver.json changed");
    // `rtune resume --sweep` would write the sweep file's copy: refused before that too.
    let sweep_json = std::fs::read(experiment.join(rtune::tune::SWEEP_FILE))?;
    let file = dir.path().join("sweep.toml");
    let out = rtune(&["resume", exp, "--sweep", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(std::fs::read(experiment.join(rtune::tune::SWEEP_FILE))? == sweep_json);
    // And from Rust: Tuner::restore takes the lease first.
    fn nothing(_: &mut rtune::TrainContext) -> anyhow::Result<()> {
        Ok(())
    }
    match rtune::Tuner::restore(&experiment, rtune::TorchTrainer::new(nothing)) {
        Err(rtune::Error::Held { holder, .. }) => {
            ensure!(holder.contains(&format!("pid {}", child.id())), "{holder}")
        }
        other => anyhow::bail!("Tuner::restore of a running experiment: {other:?}"),
    }
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(0), "the first driver: {}", text(&out));
    all_terminated_once(&experiment)?;
    ensure!(!experiment.join(rtune::tune::lease::LEASE_FILE).exists(), "the lease outlived it");
    Ok(())
}

/// A driver SIGKILLed mid-sweep leaves its lease; its trials show as INTERRUPTED (not RUNNING)
/// in `ls`, `show` and its JSON, with the line that says how to go on; `rtune resume` takes
/// the lease over at once (its holder's pid is gone) and finishes the sweep; a second resume
/// says there is nothing to resume, and `run` of the same file says what the name holds.
pub fn a_dead_drivers_lease_is_taken_over() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut child, experiment) = start_run(dir.path())?;
    wait_for_rows(&experiment)?;
    child.kill()?;
    child.wait()?;
    let lease = experiment.join(rtune::tune::lease::LEASE_FILE);
    ensure!(lease.exists(), "a SIGKILLed driver leaves its lease");
    let exp = experiment.to_str().unwrap();
    let hint = format!("interrupted: `rtune resume {exp}` goes on with it");
    shows_interrupted(dir.path(), &experiment, &hint)?;
    let out = rtune(&["resume", exp, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    all_terminated_once(&experiment)?;
    ensure!(!lease.exists(), "the lease outlived the resumed sweep");
    // Finished: nothing to resume, and no table printed again.
    let out = rtune(&["resume", exp, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.contains(&format!("{exp} finished; nothing to resume")), "{}", text(&out));
    ensure!(!stdout.contains("TERMINATED"), "{}", text(&out));
    let out = rtune(&["ls", dir.path().join("results").to_str().unwrap()])?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains(" finished "), "{}", text(&out));
    Ok(())
}

/// After Ctrl-C, the run's own table and the files show the stopped trials as INTERRUPTED;
/// `run` of the same file then names the interrupted sweep and `rtune resume`.
pub fn ctrl_c_shows_interrupted_trials() -> Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.3)?;
    let child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.max_concurrent_trials=2"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let experiment = dir.path().join("results/curves");
    wait_for_rows(&experiment)?;
    // SAFETY: signalling our own child's process group, as a terminal's Ctrl-C does.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(3), "{}", text(&out));
    let exp = experiment.to_str().unwrap();
    let hint = format!("interrupted: `rtune resume {exp}` goes on with it");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let table = stdout.split_once("trial ").map_or("", |(_, t)| t);
    ensure!(table.contains("INTERRUPTED") && !table.contains("RUNNING"), "{}", text(&out));
    ensure!(stderr.contains(&hint), "{}", text(&out));
    shows_interrupted(dir.path(), &experiment, &hint)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.num_samples=1"])?;
    let wanted = format!("{exp} holds an interrupted sweep (`rtune resume {exp}` goes on with it)");
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&wanted), "{}", text(&out));
    Ok(())
}

/// `rtune ls`, `rtune show` (table and JSON) of the stopped sweep in `experiment`: no trial
/// RUNNING, some INTERRUPTED, and `hint` said.
fn shows_interrupted(dir: &Path, experiment: &Path, hint: &str) -> Result<()> {
    let exp = experiment.to_str().unwrap();
    let out = rtune(&["ls", dir.join("results").to_str().unwrap()])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success() && stdout.contains(" interrupted "), "{}", text(&out));
    ensure!(stdout.contains("INTERRUPTED") && !stdout.contains("RUNNING"), "{}", text(&out));
    ensure!(stdout.contains(hint), "{}", text(&out));
    let out = rtune(&["show", exp])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.lines().next() == Some(hint), "{}", text(&out));
    ensure!(stdout.contains("INTERRUPTED") && !stdout.contains("RUNNING"), "{}", text(&out));
    let out = rtune(&["show", exp, "--format", "json"])?;
    let trials: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let statuses: Vec<&str> =
        trials.as_array().context("trials")?.iter().filter_map(|t| t["status"].as_str()).collect();
    ensure!(statuses.contains(&"INTERRUPTED") && !statuses.contains(&"RUNNING"), "{statuses:?}");
    Ok(())
}
