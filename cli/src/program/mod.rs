//! The full `rtune` program: every command, as `rtune-torch` (or a user's own binary, through
//! `rtune::cli::main`) runs them. Sweeps from a sweep file (`run`, `resume`, `validate`, `stop`:
//! `sweeping`; the file itself: `sweep`; what it would do: `plan`), experiments on disk
//! (`export`; `ls`, `show` and `watch` are `commands`'), the cluster (`head` and `node`:
//! `cluster`; `slurm`), and the train functions the binary offers (`registry`). What needs
//! tensors (writing an export's TorchScript, predicting) it asks of a [`Torch`].
//!
//! Exit codes: see `EXIT_CODES` (0 success; 1 some trials failed; 2 invalid input, nothing run;
//! 3 interrupted, resumable; 4 anything else failed).

mod cluster;
mod export;
mod plan;
pub mod registry;
mod slurm;
pub mod sweep;
mod sweeping;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Parser;
use rtune_driver::config::RunConfig;
use rtune_driver::error::Error;
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::ExportCard;
use rtune_searchers::Mode;

use crate::args::{Cli, Command, ModeArg, PredictArgs, ServeArgs, SlurmCommand};
use crate::exit::{EXIT_FAILED, EXIT_INVALID, Exit, input_error};
pub use registry::{AddData, Builtins, Probe, Probed, Trainable, Trainables};
pub use sweep::SweepSpec;
use sweeping::{resume, run, stop, validate};

/// What the command line does with tensors, which this crate links no code for: the `rtune`
/// crate provides it (`rtune::cli::main`), with the models its registry knows.
pub trait Torch {
    /// Writes `checkpoint` with `card` into the new folder `to`; says whether it holds
    /// TorchScript (when the binary knows the model of `trainable`, the one the sweep ran).
    fn export(
        &self,
        checkpoint: &Checkpoint,
        to: &Path,
        card: ExportCard,
        trainable: Option<&str>,
    ) -> rtune_driver::error::Result<bool>;

    /// `rtune predict` (and `rtune slurm predict`): every row of the input predicted, on
    /// workers of `cluster` (address, token) when given; a line about what was written.
    fn predict(&self, args: &PredictArgs, cluster: Option<(String, String)>) -> Result<String>;

    /// `rtune serve`: the export behind the Open Inference Protocol until SIGTERM.
    fn serve(&self, args: &ServeArgs) -> Result<()>;
}

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

/// Runs the full `rtune` program, every command, with `trainables` and `torch` (see
/// `rtune::cli::main`), and exits; `sources` is the hash of the sources it was built from.
pub fn main(trainables: &Trainables, torch: &dyn Torch, sources: &str) -> ! {
    if let Err(e) = same_sources_as_rtune(sources) {
        eprintln!("rtune: {e}");
        std::process::exit(EXIT_FAILED);
    }
    let cli = Cli::parse();
    crate::commands::end_quietly_on_broken_pipe(&cli.command);
    if matches!(
        cli.command,
        Command::Run { .. }
            | Command::Resume { .. }
            | Command::Slurm { command: SlurmCommand::Run { .. } | SlurmCommand::Resume { .. } }
    ) {
        // Progress lines say what happens; the full log is in the experiment's driver.log.
        rtune_driver::log::quiet_stderr();
    }
    if let Some(code) = crate::commands::run(&cli.command) {
        std::process::exit(code);
    }
    let code = match dispatch(cli, trainables, torch) {
        Ok(code) => code,
        Err(Exit(code, e)) => {
            eprintln!("rtune: {e:#}");
            code
        }
    };
    std::process::exit(code)
}

/// When `rtune` started this program (see `front`): that both were built from the same
/// sources (`ours`), so that the command runs the code the user built.
fn same_sources_as_rtune(ours: &str) -> std::result::Result<(), String> {
    match std::env::var(crate::front::SOURCES_ENV) {
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

fn dispatch(cli: Cli, registry: &Trainables, torch: &dyn Torch) -> Result<i32, Exit> {
    match cli.command {
        Command::Run { file, mut sets, local, output } => {
            if local {
                sets.push("scaling.num_workers=0".to_owned());
            }
            run(&file, &sets, &output, registry, &Target::default())
        }
        Command::Resume { dir, sweep, sets, output } => {
            // Another driver's sweep on a store: refused before its staging copy here is
            // brought up to date (`resume` looks at a local one's lease itself).
            if rtune_driver::storage::remote::is_url(&dir) {
                rtune_driver::tune::lease::check_free(&dir)?;
            }
            let dir = local(&dir)?;
            let corrected = sweep.as_deref().map(|file| (file, sets.as_slice()));
            resume(&dir, corrected, &output, registry, &Target::default())
        }
        Command::Validate { keys: true, .. } => {
            print!("{}", sweep::keys::reference(false));
            Ok(0)
        }
        Command::Validate { file, sets, .. } => {
            validate(&file.expect("clap asks for FILE without --keys"), &sets, registry)
        }
        Command::Builtins => {
            println!("{}", plan::builtins(registry));
            Ok(0)
        }
        Command::Stop { dir, no_wait } => stop(&rtune_driver::config::expand_home(&dir), no_wait)
            .map_err(|e| Exit(EXIT_INVALID, e)),
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
                println!("{}", torch.predict(&args, at).map_err(input_error)?);
                Ok(0)
            }
            SlurmCommand::Node { address, node_ip, drain_grace } => {
                slurm::node(address, node_ip, drain_grace)?;
                Ok(0)
            }
        },
        Command::Export { dir, best: _, trial, metric, mode, to } => {
            let dir = local(&dir)?;
            let trainable = sweeping::trainable(&dir, registry);
            // To a store: written into its staging folder, then sent up whole.
            let store = new_store_folder(&to)?;
            let to_url = to.clone();
            let to = store.as_ref().map_or(to, |s| s.staging());
            let args = export::ExportArgs {
                dir: &dir,
                trial: trial.as_deref(),
                metric: metric.as_deref(),
                mode: mode.map(|m| match m {
                    ModeArg::Max => Mode::Max,
                    ModeArg::Min => Mode::Min,
                }),
                to: &to,
                trainable: trainable.as_deref(),
            };
            let said = export::export(&args, torch).map_err(input_error)?;
            if let Some(store) = store {
                store.put_files(&to).map_err(|e| Exit(EXIT_INVALID, e.into()))?;
                let url = to_url.display().to_string();
                println!("{}", said.replace(&to.display().to_string(), &url));
            } else {
                println!("{said}");
            }
            Ok(0)
        }
        Command::Predict(mut args) => {
            // The best checkpoint, exported where this process can read it, for as long as it
            // predicts.
            let _exported =
                best_export(args.best.take(), &mut args.model, registry, torch, "predict")?;
            println!("{}", torch.predict(&args, None).map_err(input_error)?);
            Ok(0)
        }
        Command::Serve(mut args) => {
            // The same, for as long as it serves.
            let _exported =
                best_export(args.best.take(), &mut args.model, registry, torch, "serve")?;
            torch.serve(&args).map_err(input_error)?;
            Ok(0)
        }
        Command::Head { port, bind, token, heartbeat_timeout, metrics } => {
            cluster::head(port, bind, token, heartbeat_timeout, &metrics)?;
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
        | Command::Stack { .. }
        | Command::Sync { .. }
        | Command::Status { .. } => {
            unreachable!("run by commands::run before dispatch")
        }
    }
}

/// `--best EXPERIMENT` of `command`: its best checkpoint exported to a temporary folder, which
/// becomes `model` (and lives as long as what is returned).
fn best_export(
    best: Option<PathBuf>,
    model: &mut Option<PathBuf>,
    registry: &Trainables,
    torch: &dyn Torch,
    command: &str,
) -> Result<Option<export::TemporaryExport>, Exit> {
    let Some(dir) = best else { return Ok(None) };
    let exported = export::best_to_temporary(&local(&dir)?, registry, torch, command)?;
    *model = Some(exported.model().to_owned());
    Ok(Some(exported))
}

/// For an `s3://` URL to write a new folder to: the folder, checked to hold nothing yet (with a
/// fresh staging folder to write into first); None for a local path.
fn new_store_folder(to: &Path) -> Result<Option<rtune_driver::storage::remote::Remote>, Exit> {
    use rtune_driver::storage::remote::{Remote, blocking, is_url};
    let Some(url) = to.to_str().filter(|_| is_url(to)) else { return Ok(None) };
    let invalid = |e: Error| Exit(EXIT_INVALID, e.into());
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

/// A folder argument as a local folder (see `commands::local`).
fn local(dir: &Path) -> Result<PathBuf, Exit> {
    crate::commands::local(dir).map_err(|(code, e)| Exit(code, e))
}
