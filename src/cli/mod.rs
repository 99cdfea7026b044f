//! The `rtune` command line: sweeps from a sweep file (`run`, `resume`, `validate`, `stop`:
//! `sweeping`), experiments on disk (`ls`, `show`, `watch`, `export`, `predict`), and the cluster
//! (`head`, `node`, `status`). The commands and their flags are the `rtune-cli` crate's (`Cli`),
//! which `rtune` itself parses without libtorch; this module runs them. A user's own binary gets
//! all of it, with its own train functions, from one call (a trainable registered with defaults
//! declares its params: see `registry`):
//!
//! ```no_run
//! fn my_train(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
//!     ctx.report([("score", 1.0)])?;
//!     Ok(())
//! }
//!
//! fn main() {
//!     let registry = rtune::cli::Registry::builtin().with(
//!         "my-model",
//!         "what it trains",
//!         my_train,
//!         rtune::Params::new().with("lr", 0.01),
//!     );
//!     rtune::cli::main(registry) // first line of main: it also runs the worker processes
//! }
//! ```
//!
//! Exit codes: see `EXIT_CODES` (0 success; 1 some trials failed; 2 invalid input, nothing run;
//! 3 interrupted, resumable; 4 anything else failed).

mod cluster;
mod doc;
mod exit;
mod export;
mod plan;
mod predict;
pub mod registry;
mod slurm;
pub mod sweep;
mod sweeping;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Parser;
pub use rtune_cli::ui;
use rtune_cli::{Cli, Command, ModeArg, Output, SlurmCommand, inspect};

pub use doc::{Problem, Problems, Source};
pub use exit::{EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED};
use exit::{Exit, input_error};
pub use registry::{Registry, Trainable};
pub use sweep::SweepSpec;
use sweeping::{resume, run, stop, trainable_model, validate};

use crate::config::RunConfig;

/// Where `run` and `resume` run the sweep.
#[derive(Default)]
struct Target {
    /// A cluster (address, token) instead of the sweep file's own.
    cluster: Option<(String, String)>,
    /// `run` of an experiment that exists resumes it instead of refusing.
    resume_existing: bool,
}

impl Target {
    fn run_config(&self, spec: &SweepSpec) -> RunConfig {
        let run = spec.run_config();
        match &self.cluster {
            Some((address, token)) => run.cluster(address.clone(), Some(token.clone())),
            None => run,
        }
    }
}

/// Runs the `rtune` command line with `registry`'s train functions and exits. Call it first
/// in `main`: it also makes the binary's worker processes work (`rtune::init`).
pub fn main(registry: Registry) -> ! {
    crate::worker::init();
    if let Err(e) = same_sources_as_rtune() {
        eprintln!("rtune: {e}");
        std::process::exit(EXIT_FAILED);
    }
    let cli = Cli::parse();
    rtune_cli::exit::end_quietly_on_broken_pipe(&cli.command);
    if matches!(
        cli.command,
        Command::Run { .. }
            | Command::Resume { .. }
            | Command::Slurm { command: SlurmCommand::Run { .. } | SlurmCommand::Resume { .. } }
    ) {
        // Progress lines say what happens; the full log is in the experiment's driver.log.
        crate::log::quiet_stderr();
    }
    if let Some(code) = rtune_cli::commands::run(&cli.command) {
        std::process::exit(code);
    }
    let code = match dispatch(cli, &registry) {
        Ok(code) => code,
        Err(Exit(code, e)) => {
            eprintln!("rtune: {e:#}");
            code
        }
    };
    std::process::exit(code)
}

/// When `rtune` started this program (see `rtune_cli::front`): that both were built from the
/// same sources, so that the command runs the code the user built.
fn same_sources_as_rtune() -> std::result::Result<(), String> {
    let ours = env!("RTUNE_SOURCES");
    match std::env::var(rtune_cli::front::SOURCES_ENV) {
        Ok(theirs) if theirs != ours => {
            let me =
                std::env::current_exe().map_or("this program".into(), |p| p.display().to_string());
            Err(format!(
                "{me} was built from other sources than the rtune that started it (sources \
                 {ours}, rtune's {theirs}): build both again with cargo build (cargo build --bin \
                 rtune alone updates only rtune) or cargo install"
            ))
        }
        _ => Ok(()),
    }
}

fn dispatch(cli: Cli, registry: &Registry) -> Result<i32, Exit> {
    match cli.command {
        Command::Run { file, sets, output } => {
            run(&file, &sets, &output, registry, &Target::default())
        }
        Command::Resume { dir, sweep, sets, output } => {
            // Another driver's sweep on a store: refused before its staging copy here is
            // brought up to date (`resume` looks at a local one's lease itself).
            if crate::storage::remote::is_url(&dir) {
                crate::tune::lease::check_free(&dir)?;
            }
            let dir = local(&dir)?;
            let corrected = sweep.as_deref().map(|file| (file, sets.as_slice()));
            resume(&dir, corrected, &output, registry, &Target::default())
        }
        Command::Validate { file, sets } => validate(&file, &sets, registry),
        Command::Builtins => {
            println!("{}", plan::builtins(registry));
            Ok(0)
        }
        Command::Stop { dir, no_wait } => {
            stop(&crate::config::expand_home(&dir), no_wait).map_err(|e| Exit(EXIT_INVALID, e))
        }
        Command::Slurm { command } => match command {
            SlurmCommand::Run { file, sets, cluster, output } => {
                let job = slurm::JobCluster::start(&cluster).map_err(|e| Exit(EXIT_INVALID, e))?;
                run(&file, &sets, &output, registry, &job.target(true))
            }
            SlurmCommand::Resume { dir, cluster, output } => {
                let job = slurm::JobCluster::start(&cluster).map_err(|e| Exit(EXIT_INVALID, e))?;
                resume(&dir, None, &output, registry, &job.target(false))
            }
            SlurmCommand::Predict { predict: args, cluster } => {
                if args.workers.is_none() {
                    let e =
                        anyhow::anyhow!("rtune slurm predict: say how many workers (--workers N)");
                    return Err(Exit(EXIT_INVALID, e));
                }
                let job = slurm::JobCluster::start(&cluster).map_err(|e| Exit(EXIT_INVALID, e))?;
                let at = Some((job.address.clone(), job.token.clone()));
                println!("{}", predict::predict(&args, at).map_err(input_error)?);
                Ok(0)
            }
            SlurmCommand::Node { address, node_ip, drain_grace } => {
                slurm::node(address, node_ip, drain_grace)?;
                Ok(0)
            }
        },
        Command::Export { dir, best: _, trial, metric, mode, to } => {
            let dir = local(&dir)?;
            let model = trainable_model(&dir, registry);
            // To a store: written into its staging folder, then sent up whole.
            let store = new_store_folder(&to)?;
            let to_url = to.clone();
            let to = store.as_ref().map_or(to, |s| s.staging());
            let args = export::ExportArgs {
                dir: &dir,
                trial: trial.as_deref(),
                metric: metric.as_deref(),
                mode: mode.map(|m| match m {
                    ModeArg::Max => rtune_searchers::Mode::Max,
                    ModeArg::Min => rtune_searchers::Mode::Min,
                }),
                to: &to,
                model: model.as_ref(),
            };
            let said = export::export(&args).map_err(input_error)?;
            if let Some(store) = store {
                store.put_files(&to).map_err(|e| Exit(EXIT_INVALID, e.into()))?;
                let url = to_url.display().to_string();
                println!("{}", said.replace(&to.display().to_string(), &url));
            } else {
                println!("{said}");
            }
            Ok(0)
        }
        Command::Predict(args) => {
            println!("{}", predict::predict(&args, None).map_err(input_error)?);
            Ok(0)
        }
        Command::Head { port, bind, token, heartbeat_timeout } => {
            cluster::head(port, bind, token, heartbeat_timeout)?;
            Ok(0)
        }
        Command::Node { address, num_cpus, num_gpus, resources, node_ip, token } => {
            cluster::node(address, num_cpus, num_gpus, resources, node_ip, token)?;
            Ok(0)
        }
        Command::Completions { .. }
        | Command::Ls { .. }
        | Command::Show { .. }
        | Command::Watch { .. }
        | Command::Status { .. } => {
            unreachable!("run by rtune_cli::commands::run before dispatch")
        }
    }
}

/// For an `s3://` URL to write a new folder to: the folder, checked to hold nothing yet (with a
/// fresh staging folder to write into first); None for a local path.
fn new_store_folder(to: &Path) -> Result<Option<crate::storage::remote::Remote>, Exit> {
    use crate::storage::remote::{Remote, blocking, is_url};
    let Some(url) = to.to_str().filter(|_| is_url(to)) else { return Ok(None) };
    let invalid = |e: crate::error::Error| Exit(EXIT_INVALID, e.into());
    let remote = Remote::parse(url).map_err(invalid)?;
    let held = blocking(async {
        remote.check().await?;
        remote.list().await
    })
    .map_err(invalid)?;
    if !held.is_empty() {
        let why = format!("{url} already holds {} object(s); export to a new folder", held.len());
        return Err(Exit(EXIT_INVALID, anyhow::anyhow!(why)));
    }
    let staging = remote.staging();
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| Exit(EXIT_INVALID, e.into()))?;
    }
    Ok(Some(remote))
}

/// A folder argument as a local folder (see `rtune_cli::commands::local`).
fn local(dir: &Path) -> Result<PathBuf, Exit> {
    rtune_cli::commands::local(dir).map_err(|(code, e)| Exit(code, e))
}
