//! `rtune` as installed: a program that links no libtorch. What trains nothing (`--help`,
//! `--version`, a mistake in the arguments, `completions`, `ls`, `show`, `watch`, `status`)
//! loads none; every other command runs in `rtune-torch`, which `rtune` becomes by exec, in the
//! same process.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Result, ensure};

use crate::common::text;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");
const FULL: &str = env!("CARGO_BIN_EXE_rtune-torch");

/// Runs `program args` (as `rtune`, its `argv[0]`, whichever file it is) and returns its output,
/// and the shared libraries each process it was loaded into, as the dynamic loader tells
/// (`LD_DEBUG=files`: one report per process id, whatever images it ran).
fn run_watched(program: &str, args: &[&str]) -> Result<(Output, Vec<Vec<String>>)> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(program)
        .arg0("rtune")
        .args(args)
        .current_dir(dir.path())
        .env("LD_DEBUG", "files")
        .env("LD_DEBUG_OUTPUT", dir.path().join("ld"))
        // `ls` without a folder also looks in the default storage path: one that is not there.
        .env("RTUNE_STORAGE_PATH", "/nonexistent/rtune-storage")
        .env_remove("RUST_LOG")
        .output()?;
    let mut processes = Vec::new();
    for report in std::fs::read_dir(dir.path())? {
        let report = std::fs::read_to_string(report?.path())?;
        let mut libs: Vec<String> = report
            .lines()
            .filter_map(|l| l.split_once("file=")?.1.split_whitespace().next())
            .map(str::to_owned)
            .collect();
        libs.dedup();
        processes.push(libs);
    }
    Ok((out, processes))
}

fn loads_libtorch(libs: &[String]) -> bool {
    libs.iter().any(|l| l.starts_with("libtorch") || l.starts_with("libc10"))
}

/// A finished sweep of six synthetic-curve trials (`cli`'s, a second or two), for `ls` and
/// `show`: its storage path and its experiment.
fn small_experiment(dir: &Path) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let sweep = crate::cli::sweep_file(dir, 0.0)?;
    let out = Command::new(FULL).arg("run").arg(&sweep).arg("--no-tui").output()?;
    ensure!(out.status.success(), "the sweep: {}", text(&out));
    let storage = dir.join("results");
    Ok((storage.join("curves"), storage))
}

/// `--help`, `--version`, argument mistakes, `completions`, `ls`, `show`, `watch` (here without
/// a terminal) and `status` (here of no cluster): `rtune` says what `rtune-torch` says (output,
/// errors, exit code) and loads no libtorch doing it.
pub fn what_trains_nothing_loads_no_libtorch() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (experiment, storage) = small_experiment(dir.path())?;
    let (storage, experiment) = (storage.to_str().unwrap(), experiment.to_str().unwrap());
    let cases: &[(&[&str], i32)] = &[
        (&["--version"], 0),
        (&["--help"], 0),
        (&["help", "run"], 0),
        (&["run", "--help"], 0),
        (&["slurm", "run", "--help"], 0),
        (&["completions", "bash"], 0),
        (&["no-such-command"], 2),
        (&["show"], 2),
        (&["predict", "--model", "m", "--input", "i", "--output", "o", "--device", "gpu"], 2),
        (&[], 2),
        (&["ls"], 0),
        (&["ls", storage], 0),
        (&["ls", storage, "--format", "json"], 0),
        (&["ls", "no-such-folder"], 2),
        (&["show", experiment], 0),
        (&["show", experiment, "1", "--format", "json"], 0),
        (&["show", experiment, "--format", "csv"], 0),
        (&["show", "no-such-folder"], 2),
        (&["watch", "no-such-folder"], 2),
        (&["status", "--address", "127.0.0.1:1"], 4),
    ];
    for &(args, code) in cases {
        let (out, processes) = run_watched(RTUNE, args)?;
        ensure!(processes.len() == 1, "{args:?}: {} loader reports", processes.len());
        let libs = &processes[0];
        // The report is read: it names the C library every process loads.
        ensure!(libs.iter().any(|l| l.starts_with("libc.so")), "{args:?}: {libs:?}");
        ensure!(!loads_libtorch(libs), "rtune {args:?} loaded libtorch: {libs:?}");

        let (full, full_processes) = run_watched(FULL, args)?;
        // The same check tells when libtorch is loaded.
        ensure!(loads_libtorch(&full_processes[0]), "{args:?}: {:?}", full_processes[0]);
        ensure!(
            out.status.code() == full.status.code()
                && out.stdout == full.stdout
                && out.stderr == full.stderr,
            "rtune {args:?} differs from rtune-torch:\n{}\n--- rtune-torch:\n{}",
            text(&out),
            text(&full)
        );
        ensure!(out.status.code() == Some(code), "{args:?}: {}", text(&out));
    }
    // A folder that is not there is named, terminal or not.
    let (out, _) = run_watched(RTUNE, &["watch", "no-such-folder"])?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(said.contains("no-such-folder is not an experiment directory"), "{said}");
    // What `show` printed is the experiment's: its six trials.
    let (out, _) = run_watched(RTUNE, &["show", experiment, "--format", "json"])?;
    let trials: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(trials.as_array().map(Vec::len) == Some(6), "{trials}");
    Ok(())
}

/// Any other command (here `export`) runs in `rtune-torch`, in the same process (one loader
/// report, with libtorch in it), and says what `rtune-torch` says; without `rtune-torch` beside
/// it, `rtune` says where it looked and what to do (exit 4), and still answers `--version`.
pub fn other_commands_run_in_the_full_program() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("not-here");
    let missing = missing.to_str().unwrap();
    let export = ["export", missing, "--to", "x"];
    let (out, processes) = run_watched(RTUNE, &export)?;
    ensure!(processes.len() == 1, "{} processes: {processes:?}", processes.len());
    ensure!(loads_libtorch(&processes[0]), "{:?}", processes[0]);
    let full = Command::new(FULL).arg0("rtune").args(export).output()?;
    ensure!(out.status.code() == Some(2) && out.stderr == full.stderr, "{}", text(&out));
    ensure!(text(&out).contains("not an experiment"), "{}", text(&out));

    let alone = dir.path().join("bin");
    std::fs::create_dir(&alone)?;
    std::fs::copy(RTUNE, alone.join("rtune"))?;
    let rtune = alone.join("rtune");
    let out = Command::new(&rtune).args(export).output()?;
    let said = text(&out);
    let beside = Path::new(&alone).join("rtune-torch");
    ensure!(out.status.code() == Some(4), "{said}");
    ensure!(said.contains(&format!("cannot start {}", beside.display())), "{said}");
    ensure!(said.contains("same folder"), "{said}");
    let out = Command::new(&rtune).arg("--version").output()?;
    let version = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success() && version.starts_with("rtune "), "{}", text(&out));
    Ok(())
}

/// `rtune` tells `rtune-torch` which sources it was built from, and `rtune-torch` built from
/// others (here: told other ones) refuses to run the command, saying how to rebuild both.
pub fn a_full_program_from_other_sources_is_refused() -> Result<()> {
    const SOURCES: &str = env!("RTUNE_SOURCES");
    // What rtune hands on, as a stand-in full program beside a copy of rtune prints it.
    let dir = tempfile::tempdir()?;
    std::fs::copy(RTUNE, dir.path().join("rtune"))?;
    let stand_in = dir.path().join("rtune-torch");
    std::fs::write(&stand_in, "#!/bin/sh\nprintf '%s' \"$RTUNE_SOURCES\"\n")?;
    std::fs::set_permissions(&stand_in, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let out = Command::new(dir.path().join("rtune")).args(["export", "x", "--to", "y"]).output()?;
    ensure!(out.status.success() && out.stdout == SOURCES.as_bytes(), "{}", text(&out));

    let export = ["export", "not-here", "--to", "y"];
    let other =
        Command::new(FULL).args(export).env("RTUNE_SOURCES", "0123456789abcdef").output()?;
    let said = text(&other);
    ensure!(other.status.code() == Some(4), "{said}");
    ensure!(said.contains(&format!("{FULL} was built from other sources")), "{said}");
    ensure!(said.contains(&format!("sources {SOURCES}, rtune's 0123456789abcdef")), "{said}");
    ensure!(said.contains("cargo build"), "{said}");
    // Told its own sources, it runs the command (which refuses the missing experiment).
    let same = Command::new(FULL).args(export).env("RTUNE_SOURCES", SOURCES).output()?;
    ensure!(same.status.code() == Some(2), "{}", text(&same));
    ensure!(text(&same).contains("not an experiment"), "{}", text(&same));
    Ok(())
}
