//! The commands that need no libtorch: `completions`, `ls`, `show`, `watch`, `stack`, `status`
//! and `sync`.
//! `rtune` runs them itself (see [`crate::front`]), and so does the full program
//! (`rtune::cli::main`, a user's binary's included), through [`run`]: one implementation, the
//! same output and exit codes.

use std::path::{Path, PathBuf};

use rtune_driver::cluster::{client, pool};

use crate::args::{Command, Format};
use crate::exit::{EXIT_INVALID, error_code, input_error_code};
use crate::{inspect, ui};

/// Runs `command` when it is one of these and returns its exit code (having said what went
/// wrong, if anything); None for a command the full program runs.
pub fn run(command: &Command) -> Option<i32> {
    let done = match command {
        Command::Completions { shell } => {
            print_completions(*shell);
            Ok(())
        }
        Command::Ls { dir, format } => dir
            .as_deref()
            .map(local)
            .transpose()
            .and_then(|dir| inspect::ls(dir.as_deref(), *format).map_err(input_error)),
        Command::Show { dir, trial, format, pareto } => local(dir).and_then(|dir| {
            inspect::show(&dir, trial.as_deref(), *format, pareto).map_err(input_error)
        }),
        Command::Watch { dir } => watch(dir.as_deref()),
        Command::Stack { dir, trial } => local(dir).and_then(|dir| stack(&dir, trial.as_deref())),
        Command::Sync { dir } => local(dir).and_then(|dir| sync(&dir)),
        Command::Status { address, format, token } => {
            status(address, *format == Format::Json, token.as_deref())
                .map_err(|e| (error_code(&e), e))
        }
        _ => return None,
    };
    Some(match done {
        Ok(()) => 0,
        Err((code, e)) => {
            eprintln!("rtune: {e:#}");
            code
        }
    })
}

/// `rtune sync DIR`: what the sweep's end could not send to its MLflow server, sent from the
/// experiment's files; what is still not sent (the server went away again) fails the command.
pub(crate) fn sync(dir: &Path) -> Result<(), (i32, anyhow::Error)> {
    use rtune_driver::tune::Synced;
    if !rtune_driver::tune::experiment::can_restore(dir) {
        return Err((EXIT_INVALID, inspect::not_an_experiment(dir)));
    }
    let shown = dir.display();
    match rtune_driver::tune::sync_tracking(dir) {
        Ok(Synced::NoTracker) => {
            println!("{shown}: its sweep logged to no tracking server; nothing to send");
            Ok(())
        }
        Ok(Synced::Sent { unsent: 0 }) => {
            println!("{shown}: its MLflow runs have all it recorded");
            Ok(())
        }
        Ok(Synced::Sent { unsent }) => Err((
            crate::exit::EXIT_FAILED,
            anyhow::anyhow!(
                "{unsent} event(s) of {shown} are still not sent (the MLflow server stopped \
                 answering); they are kept: `rtune sync {shown}` again sends them"
            ),
        )),
        // The server down (or refusing) is no mistake in what was given: said as what it is.
        Err(rtune_driver::error::Error::Config { message, .. }) => Err((
            crate::exit::EXIT_FAILED,
            anyhow::anyhow!(
                "the sweep's MLflow server did not take it: {message}; what {shown} kept stays \
                 kept: `rtune sync {shown}` again once the server answers"
            ),
        )),
        Err(e) => Err((crate::exit::code_of(&e), e.into())),
    }
}

/// `rtune watch [DIR]`: the experiment in `dir` (on a store: its files as they were at the last
/// sync), or the newest one.
fn watch(dir: Option<&Path>) -> Result<(), (i32, anyhow::Error)> {
    let dir = match dir {
        Some(dir) => local(dir)?,
        None => inspect::newest_experiment().map_err(|e| (EXIT_INVALID, e))?,
    };
    if !dir.is_dir() {
        return Err((EXIT_INVALID, inspect::not_an_experiment(&dir)));
    }
    ui::tui::watch(&dir).map_err(|e| (EXIT_INVALID, e))
}

/// `rtune stack DIR [TRIAL]`: where each rank of the sweep's running trials is, as its driver
/// asks the workers.
fn stack(dir: &Path, trial: Option<&str>) -> Result<(), (i32, anyhow::Error)> {
    let invalid = |e: anyhow::Error| (EXIT_INVALID, e);
    let grid = rtune_driver::tune::ResultGrid::from_path(dir)
        .map_err(|_| invalid(inspect::not_an_experiment(dir)))?;
    let trial =
        trial.map(|which| inspect::find_trial(&grid, which)).transpose().map_err(invalid)?;
    let not_running = || {
        anyhow::anyhow!("no sweep is running in {} (it ended, or was interrupted)", dir.display())
    };
    let reply = ui::stream::stacks(dir, trial.map(|t| t.trial_id()))
        .ok_or_else(|| invalid(not_running()))?
        .map_err(|e| (error_code(&e), e))?;
    if reply.trials.is_empty() {
        let e = match trial {
            Some(t) => anyhow::anyhow!("trial {} is not running ({:?})", t.trial_id(), t.status()),
            None => anyhow::anyhow!("no trial of the sweep in {} is running", dir.display()),
        };
        return Err(invalid(e));
    }
    print!("{}", inspect::stacks_text(&reply.trials));
    Ok(())
}

/// `rtune status`: a cluster's nodes and placement groups, as a table or JSON.
fn status(address: &str, json: bool, token: Option<&str>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (status, metrics) = runtime.block_on(async {
        let mut c = client::connect_head(address, token).await?;
        client::head_status(&mut c).await
    })?;
    let metrics = metrics.map(rtune_driver::monitor::url);
    if json {
        let mut value = serde_json::to_value(&status)?;
        if let (Some(object), Some(metrics)) = (value.as_object_mut(), metrics) {
            object.insert("metrics".into(), metrics.into());
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_table(&status);
        if let Some(metrics) = metrics {
            println!("metrics for Prometheus: {metrics}");
        }
    }
    Ok(())
}

fn print_table(status: &pool::PoolStatus) {
    println!(
        "{:<6} {:<22} {:<6} {:>10} {:>10} {:>10} {:>10}",
        "NODE", "ADDRESS", "ALIVE", "CPU", "CPU free", "GPU", "GPU free"
    );
    for n in &status.nodes {
        println!(
            "{:<6} {:<22} {:<6} {:>10} {:>10} {:>10} {:>10}",
            n.id.to_string(),
            n.address,
            n.alive,
            n.total.cpu,
            n.free.cpu,
            n.total.gpu,
            n.free.gpu
        );
    }
    for n in &status.nodes {
        if let Some(error) = &n.gpu_error {
            println!("  node {}: GPUs not offered, its workers cannot use them: {error}", n.id);
        }
        for gpu in &n.gpus {
            println!("  node {}: {} ({})", n.id, gpu.short(), gpu.name);
        }
    }
    println!("{} placement group(s)", status.groups.len());
    for g in &status.groups {
        println!("  {}", serde_json::to_string(g).unwrap_or_default());
    }
}

fn input_error(e: anyhow::Error) -> (i32, anyhow::Error) {
    (input_error_code(&e), e)
}

/// A folder argument as a local folder: itself, or, for an `s3://` URL, its staging copy
/// brought up to date from the store (a store that cannot be read: exit 2).
pub fn local(dir: &Path) -> Result<PathBuf, (i32, anyhow::Error)> {
    let local =
        rtune_driver::storage::staging::local_copy(dir).map_err(|e| (EXIT_INVALID, e.into()))?;
    if local.as_path() != dir {
        rtune_driver::tune::prune_staging(&local);
    }
    Ok(local)
}

/// A command that only prints what it reads (`ls`, `show`, `status`, `builtins`,
/// `completions`) ends quietly when what reads its output goes away (`rtune ls | head -1`), as
/// `ls` and `git` do: SIGPIPE's default action, which Rust programs otherwise ignore (and then
/// panic on the next print). Not for the commands that start or talk to other processes
/// (workers, a fork server, a CUDA probe) through pipes: a write to a dead child's pipe would
/// end them. A sweep's driver keeps running: what it prints to a closed pipe is dropped.
pub(crate) fn end_quietly_on_broken_pipe(command: &Command) {
    if matches!(
        command,
        Command::Ls { .. }
            | Command::Show { .. }
            | Command::Status { .. }
            | Command::Builtins
            | Command::Completions { .. }
    ) {
        // SAFETY: setting a signal's disposition to its default, before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
}

/// Prints `shell`'s completion script for the `rtune` command to stdout.
pub(crate) fn print_completions(shell: clap_complete::Shell) {
    use clap::CommandFactory;
    clap_complete::generate(
        shell,
        &mut crate::args::Cli::command(),
        "rtune",
        &mut std::io::stdout(),
    );
}
