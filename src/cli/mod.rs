//! The `rtune` command line: sweeps from a sweep file (`run`, `resume`), experiments on disk
//! (`ls`, `show`), and the cluster (`head`, `node`, `status`). A user's own binary gets all of
//! it, with its own train functions, from one call:
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
//!         rtune::Params::new(),
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
mod inspect;
mod predict;
pub mod registry;
mod slurm;
pub mod sweep;
pub mod ui;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use rtune_searchers::TrialStatus;

pub use doc::{Problem, Problems, Source};
pub use exit::{EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED};
use exit::{Exit, in_sweep_terms, input_error};
pub use registry::{Registry, Trainable};
pub use sweep::SweepSpec;

use crate::config::RunConfig;
use crate::tune::{Control, ResultGrid, SWEEP_FILE, Samples, Tuner};

/// rtune: hyperparameter sweeps of distributed libtorch training (Ray Tune + Ray Train in Rust).
#[derive(Debug, Parser)]
#[command(name = "rtune", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the sweep a sweep file describes.
    #[command(
        after_help = "Example:\n  rtune run examples/sweeps/synthetic_asha.toml --set tune.num_samples=8 --json out.json\n\n\
        Exit codes: 0 success, 1 some trials failed, 2 invalid input, 3 interrupted (resumable), \
        4 anything else failed.\n\
        Ctrl-C stops the sweep and leaves it resumable (rtune resume DIR); a second Ctrl-C stops at once."
    )]
    Run {
        /// The sweep file (TOML).
        file: PathBuf,
        /// Override a key of the file: `--set tune.num_samples=8` (the value read as TOML).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Print a shell's completion script for rtune.
    #[command(
        after_help = "Examples:\n  rtune completions bash > ~/.local/share/bash-completion/completions/rtune\n  \
        rtune completions zsh > ~/.zfunc/_rtune\n  rtune completions fish > ~/.config/fish/completions/rtune.fish"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Ask a running sweep to stop, resumably (as Ctrl-C in its terminal or `x` in its view):
    /// its trials stop and keep their checkpoints; `rtune resume DIR` goes on.
    #[command(after_help = "Example:\n  rtune stop rtune_results/digits-asha")]
    Stop {
        /// The experiment directory of the running sweep.
        dir: PathBuf,
        /// Return once the driver has the request, without waiting for the sweep to stop.
        #[arg(long)]
        no_wait: bool,
    },
    /// Check a sweep file as `rtune run` would, and run nothing: every key, the trainable's
    /// params and metrics, whether a trial fits this machine (or the cluster), the searcher
    /// and scheduler.
    #[command(
        after_help = "Example:\n  rtune validate examples/sweeps/digits_tpe_asha.toml --set tune.num_samples=4"
    )]
    Validate {
        /// The sweep file (TOML).
        file: PathBuf,
        /// Override a key of the file, as `rtune run --set`.
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
    },
    /// Go on with an interrupted sweep started by `rtune run`.
    #[command(after_help = "Example:\n  rtune resume rtune_results/digits-asha")]
    Resume {
        /// The experiment directory.
        dir: PathBuf,
        #[command(flatten)]
        output: Output,
    },
    /// Watch an experiment in the terminal UI: a running sweep live from its driver (which
    /// takes `t`, `p` and `x`), an interrupted or finished one from its files.
    #[command(after_help = "Examples:\n  rtune watch rtune_results/digits-asha\n  \
        rtune watch    # the newest experiment (a running one first) in ./rtune_results or the \
        default storage path\n\n\
        Keys: arrows select, s sorts by the next column, r reverses, f filters by status, t stops the \
        selected trial, p pauses or resumes it, x stops the sweep (resumable; live only), q quits \
        (the sweep goes on).")]
    Watch {
        /// The experiment directory (default: the newest, a running one first).
        dir: Option<PathBuf>,
    },
    /// List the experiments under a storage path.
    #[command(after_help = "Examples:\n  rtune ls\n  rtune ls rtune_results --format json")]
    Ls {
        /// Default: ./rtune_results and the default storage path ($RTUNE_STORAGE_PATH, else
        /// ~/rtune_results), as `rtune watch` looks.
        dir: Option<PathBuf>,
        /// table or json.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Show an experiment's trials, or one trial's results.
    #[command(after_help = "Examples:\n  rtune show rtune_results/digits-asha\n  \
        rtune show rtune_results/digits-asha 3 --format csv")]
    Show {
        /// The experiment directory.
        dir: PathBuf,
        /// A trial: its id (`a1b2c_00003`), its index (3) or its directory name.
        trial: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Export a trial's checkpoint (the best trial's by default) as a folder of its own: the
    /// checkpoint's files, params.json, metrics.json and a model card (README.md).
    #[command(
        after_help = "Examples:\n  rtune export rtune_results/digits-asha --best --to best-model\n  \
        rtune export rtune_results/digits-asha --metric val_loss --mode min --to lowest-loss\n  \
        rtune export rtune_results/digits-asha --trial 3 --to trial-3\n\n\
        The best trial is the one whose last result is best; its checkpoint is the kept one with \
        the best value of the metric."
    )]
    Export {
        /// The experiment directory.
        dir: PathBuf,
        /// Export the best trial (the default unless --trial names one).
        #[arg(long, conflicts_with = "trial")]
        best: bool,
        /// A trial: its id (`a1b2c_00003`), its index (3) or its directory name.
        #[arg(long)]
        trial: Option<String>,
        /// Rank by this metric instead of the sweep's.
        #[arg(long)]
        metric: Option<String>,
        #[arg(long, value_enum)]
        mode: Option<ModeArg>,
        /// The folder to create.
        #[arg(long)]
        to: PathBuf,
    },
    /// Predict every row of a parquet or CSV file with an exported model (its TorchScript
    /// model.pt and the preprocessor it was trained with), a batch of rows at a time.
    #[command(
        after_help = "Example:\n  rtune predict --model best-model --input test.csv --output predicted.parquet\n\n\
        The output holds the input's rows with a `prediction` column (a class, or a value) and, \
        for a classifier, a `prob_<class>` column per class."
    )]
    Predict {
        /// A folder `rtune export` wrote.
        #[arg(long, alias = "checkpoint")]
        model: PathBuf,
        /// A .parquet, .csv or .csv.gz file with the model's input columns.
        #[arg(long)]
        input: PathBuf,
        /// The CSV input has no header row: its columns are the model's inputs in order (then
        /// the label, when there is one column more, as in data/digits.csv.gz).
        #[arg(long)]
        no_header: bool,
        /// The .parquet or .csv file to create.
        #[arg(long)]
        output: PathBuf,
        /// Rows per batch: what is in memory at once.
        #[arg(long, default_value_t = 65_536)]
        batch_rows: usize,
        /// Copy columns the model does not take to the output (by default they are an error).
        #[arg(long)]
        allow_extra: bool,
        /// Where the model runs: cpu, cuda (the first visible GPU) or cuda:N.
        #[arg(long, default_value = "cpu", value_parser = predict::device)]
        device: tch::Device,
    },
    /// Serve a cluster: the resource pool that drivers reserve worker groups from.
    #[command(after_help = "Example:\n  rtune head --port 6380")]
    Head {
        #[arg(long, default_value_t = 6380)]
        port: u16,
        /// Address to listen on. Anything but loopback requires a cluster token.
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// The cluster token; generated and printed once when binding beyond loopback.
        #[arg(long, env = "RTUNE_TOKEN")]
        token: Option<String>,
        /// Seconds of silence after which a node is dead.
        #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = cluster::seconds)]
        heartbeat_timeout: Duration,
    },
    /// Offer this machine to a head and run worker processes on its command.
    #[command(after_help = "Example:\n  rtune node --address 127.0.0.1:6380 --num-cpus 4")]
    Node {
        /// The head, HOST:PORT.
        #[arg(long)]
        address: String,
        #[arg(long, value_parser = cluster::amount)]
        num_cpus: Option<f64>,
        #[arg(long)]
        num_gpus: Option<u32>,
        /// Custom resources, e.g. `--resources tpu=2,ssd=1`.
        #[arg(long, default_value = "")]
        resources: String,
        /// Where this node's workers listen (their address as seen by other nodes).
        #[arg(long, default_value = "127.0.0.1")]
        node_ip: String,
        #[arg(long, env = "RTUNE_TOKEN")]
        token: Option<String>,
    },
    /// Run sweeps on the cluster of a Slurm job: from its batch script, `rtune slurm run` starts
    /// a node agent on every allocated node and runs the sweep on them.
    #[command(after_help = "Example (in a batch script, see examples/slurm/sweep.sbatch):\n  \
        rtune slurm run examples/slurm/sweep.toml --set name=\\\"sweep-$SLURM_JOB_ID\\\"")]
    Slurm {
        #[command(subcommand)]
        command: SlurmCommand,
    },
    /// Show a cluster's nodes (total and free resources) and its placement groups.
    #[command(after_help = "Example:\n  rtune status --address 127.0.0.1:6380 --format json")]
    Status {
        #[arg(long, env = "RTUNE_ADDRESS")]
        address: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[arg(long, env = "RTUNE_TOKEN")]
        token: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum SlurmCommand {
    /// Run a sweep file on this job's nodes (as `rtune run`). When the experiment already
    /// exists (a requeued job runs its script again) it is resumed instead.
    Run {
        /// The sweep file (TOML).
        file: PathBuf,
        /// Override a key of the file: `--set tune.num_samples=8` (the value read as TOML).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        #[command(flatten)]
        cluster: slurm::ClusterArgs,
        #[command(flatten)]
        output: Output,
    },
    /// Go on with an interrupted sweep (a cancelled or timed-out job's) on this job's nodes.
    Resume {
        /// The experiment directory.
        dir: PathBuf,
        #[command(flatten)]
        cluster: slurm::ClusterArgs,
        #[command(flatten)]
        output: Output,
    },
    /// One node's agent, offering what Slurm allocated on it (`rtune slurm run` starts one on
    /// every node with srun; not for use by hand).
    Node {
        /// The head, HOST:PORT.
        #[arg(long)]
        address: String,
        /// Where this node's workers listen (default: its NodeAddr in Slurm).
        #[arg(long)]
        node_ip: Option<String>,
        /// After SIGTERM, how long running workers have to be stopped by their driver before
        /// the agent kills them.
        #[arg(long, value_name = "SECONDS", default_value = "20", value_parser = cluster::seconds)]
        drain_grace: Duration,
    },
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

/// How `run` and `resume` report.
#[derive(Debug, clap::Args)]
struct Output {
    /// Write a summary (best trial, trials by status, time) as JSON to this file.
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// Plain progress lines even on a terminal.
    #[arg(long)]
    no_tui: bool,
    /// Exit 0 even when some trials failed.
    #[arg(long)]
    allow_failures: bool,
}

impl Output {
    /// Refuses a `--json` file that could not be written, before the sweep runs rather than
    /// after: its folder must exist.
    fn check(&self) -> Result<(), Exit> {
        let Some(json) = &self.json else { return Ok(()) };
        let folder = json.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !folder.is_dir() {
            return Err(Exit(
                EXIT_INVALID,
                anyhow::anyhow!(
                    "--json {}: {} is not a folder; give a file in an existing folder",
                    json.display(),
                    folder.display()
                ),
            ));
        }
        Ok(())
    }
}

/// `--mode`: which way the metric is better.
#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum ModeArg {
    Max,
    Min,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum Format {
    Table,
    Json,
    Csv,
}

/// Runs the `rtune` command line with `registry`'s train functions and exits. Call it first
/// in `main`: it also makes the binary's worker processes work (`rtune::init`).
pub fn main(registry: Registry) -> ! {
    crate::worker::init();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Run { .. }
            | Command::Resume { .. }
            | Command::Slurm { command: SlurmCommand::Run { .. } | SlurmCommand::Resume { .. } }
    ) {
        // Progress lines say what happens; the full log is in the experiment's driver.log.
        crate::log::quiet_stderr();
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

fn dispatch(cli: Cli, registry: &Registry) -> Result<i32, Exit> {
    match cli.command {
        Command::Run { file, sets, output } => {
            run(&file, &sets, &output, registry, &Target::default())
        }
        Command::Resume { dir, output } => resume(&dir, &output, registry, &Target::default()),
        Command::Validate { file, sets } => validate(&file, &sets, registry),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "rtune", &mut std::io::stdout());
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
                resume(&dir, &output, registry, &job.target(false))
            }
            SlurmCommand::Node { address, node_ip, drain_grace } => {
                slurm::node(address, node_ip, drain_grace)?;
                Ok(0)
            }
        },
        Command::Watch { dir } => {
            let dir = match dir {
                Some(dir) => dir,
                None => inspect::newest_experiment().map_err(|e| Exit(EXIT_INVALID, e))?,
            };
            ui::tui::watch(&dir).map_err(|e| Exit(EXIT_INVALID, e))?;
            Ok(0)
        }
        Command::Ls { dir, format } => {
            inspect::ls(dir.as_deref(), format).map_err(input_error)?;
            Ok(0)
        }
        Command::Show { dir, trial, format } => {
            inspect::show(&dir, trial.as_deref(), format).map_err(input_error)?;
            Ok(0)
        }
        Command::Export { dir, best: _, trial, metric, mode, to } => {
            let model = trainable_model(&dir, registry);
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
            println!("{}", export::export(&args).map_err(input_error)?);
            Ok(0)
        }
        Command::Predict { model, input, no_header, output, batch_rows, allow_extra, device } => {
            let args = predict::PredictArgs {
                model: &model,
                input: &input,
                no_header,
                output: &output,
                batch_rows,
                allow_extra,
                device,
            };
            println!("{}", predict::predict(&args).map_err(input_error)?);
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
        Command::Status { address, format, token } => {
            cluster::status(address, format == Format::Json, token)?;
            Ok(0)
        }
    }
}

/// The sweep file `rtune run` ran, kept in the experiment for `rtune resume`.
#[derive(serde::Serialize, serde::Deserialize)]
struct SweepCopy {
    /// The file's absolute path.
    file: String,
    text: String,
    set: Vec<String>,
}

fn run(
    file: &Path,
    sets: &[String],
    output: &Output,
    registry: &Registry,
    target: &Target,
) -> Result<i32, Exit> {
    output.check()?;
    let (source, spec) = read_spec(file, sets, registry)?;
    let mut run = target.run_config(&spec);
    let name = spec.name.clone().unwrap_or_else(|| {
        let stem = file.file_stem().map_or("sweep".into(), |s| s.to_string_lossy().into_owned());
        format!("{stem}_{}", crate::storage::date_string(crate::storage::unix_time()))
    });
    run.name = Some(name.clone());
    let path = crate::tune::experiment_path(&run);
    if crate::tune::holds_experiment(&path) {
        if target.resume_existing {
            println!(
                "{} already holds this experiment (a requeued job): resuming it",
                path.display()
            );
            return resume(&path, output, registry, target);
        }
        if recorded_nothing(&path) {
            // A sweep that stopped before its first result (a mistake found when it began):
            // its fix runs under the same name.
            println!("replacing {}: its sweep recorded no result", path.display());
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("cannot replace {}", path.display()))?;
        } else {
            return Err(Exit(
                EXIT_INVALID,
                anyhow::anyhow!(
                    "{} already holds an experiment: go on with it with `rtune resume {}`, or run \
                 this one under another name (--set name=NEW)",
                    path.display(),
                    path.display()
                ),
            ));
        }
    }
    // Absolute: `rtune resume` from another folder finds what the file's paths are relative to.
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    let copy = SweepCopy {
        file: absolute.display().to_string(),
        text: source.text.clone(),
        set: sets.to_vec(),
    };
    let copy = serde_json::to_vec_pretty(&copy)?;
    let control = Control::new();
    println!("sweep {} ({} trials) in {}", source.name, samples(&spec), path.display());
    let (run, screen) = reporting(run, &spec, output, &name, &path, &control, Vec::new());
    let began = Instant::now();
    let outcome = watch_signals(control.clone(), || {
        spec.tuner(run, control.clone()).experiment_file(SWEEP_FILE, copy).fit()
    });
    screen.close();
    finish(outcome, &path, output, began)
}

/// `rtune stop DIR`: asks the sweep's driver to stop it resumably; waits for it to stop.
fn stop(dir: &Path, no_wait: bool) -> anyhow::Result<i32> {
    if !Tuner::can_restore(dir) {
        anyhow::bail!("{} is not an experiment directory (see `rtune ls`)", dir.display());
    }
    let remote = ui::stream::attach(dir).with_context(|| {
        format!(
            "no sweep is running in {} (it ended, or was interrupted: `rtune resume {}` goes on)",
            dir.display(),
            dir.display()
        )
    })?;
    remote.interrupt_now()?;
    println!("asked the sweep in {} to stop; its trials keep their checkpoints", dir.display());
    if !no_wait {
        while ui::stream::driver_alive(dir) {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        println!("stopped: `rtune resume {}` goes on with it", dir.display());
    }
    Ok(0)
}

/// `rtune validate`: what `run` checks before it starts, and a line on what it would run.
fn validate(file: &Path, sets: &[String], registry: &Registry) -> Result<i32, Exit> {
    let (source, spec) = read_spec(file, sets, registry)?;
    let mut run = spec.run_config();
    run.name = Some(spec.name.clone().unwrap_or_else(|| "validate".into()));
    spec.tuner(run.clone(), Control::new()).validate().map_err(in_sweep_terms)?;
    let trainable = spec.builtin.as_deref().map_or("a command".to_owned(), |b| format!("`{b}`"));
    println!(
        "{}: valid; it runs {} trials of {trainable} ({} worker{} each) with search `{}` and \
         scheduler `{}`",
        source.name,
        samples(&spec),
        spec.scaling.num_workers,
        if spec.scaling.num_workers == 1 { "" } else { "s" },
        spec.search.kind,
        spec.scheduler.kind
    );
    if let Some(name) = &spec.name {
        let path = crate::tune::experiment_path(&RunConfig { name: Some(name.clone()), ..run });
        if crate::tune::holds_experiment(&path) && !recorded_nothing(&path) {
            println!(
                "note: {} holds an experiment already: `rtune run` would refuse it (rtune \
                 resume it, or --set name=NEW)",
                path.display()
            );
        }
    }
    Ok(0)
}

/// Reads and checks the sweep file (exit 2 on any mistake).
fn read_spec(
    file: &Path,
    sets: &[String],
    registry: &Registry,
) -> Result<(doc::Source, SweepSpec), Exit> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the sweep file {}", file.display()))
        .map_err(|e| Exit(EXIT_INVALID, e))?;
    let source = doc::Source { name: file.display().to_string(), text };
    let spec = SweepSpec::read(&source, sets, registry)?;
    Ok((source, spec))
}

/// Whether the experiment in `path` holds nothing to lose: no driver runs it, and none of its
/// trials recorded a result (or a checkpoint, which comes with one).
fn recorded_nothing(path: &Path) -> bool {
    if ui::stream::driver_alive(path) {
        return false;
    }
    match ResultGrid::from_path(path) {
        Ok(grid) => grid.trials.iter().all(|t| t.history().is_empty()),
        Err(_) => false,
    }
}

/// The sweep `rtune run` ran in `dir`, from the copy of its file kept there: the file's path
/// and the sweep.
fn read_sweep(dir: &Path, registry: &Registry) -> Result<(String, SweepSpec), Exit> {
    let copy_path = dir.join(SWEEP_FILE);
    let copy: SweepCopy = match std::fs::read(&copy_path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not rtune's sweep copy", copy_path.display()))
            .map_err(|e| Exit(EXIT_INVALID, e))?,
        Err(e) => {
            let hint = if Tuner::can_restore(dir) {
                "; it was not started by `rtune run`: go on with it from Rust with Tuner::restore"
            } else {
                "; is it an experiment directory (see `rtune ls`)?"
            };
            return Err(Exit(
                EXIT_INVALID,
                anyhow::anyhow!("cannot read {}: {e}{hint}", copy_path.display()),
            ));
        }
    };
    let source = doc::Source { name: copy.file, text: copy.text };
    let spec = SweepSpec::read(&source, &copy.set, registry)?;
    Ok((source.name, spec))
}

fn resume(dir: &Path, output: &Output, registry: &Registry, target: &Target) -> Result<i32, Exit> {
    output.check()?;
    let (file, spec) = read_sweep(dir, registry)?;
    let ended: Vec<ui::model::TrialRow> = ui::model::Model::read(dir)
        .map(ui::model::Model::into_trials)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.status.is_finished())
        .collect();
    println!("resuming sweep {file} in {}", dir.display());
    let control = Control::new();
    let name = dir.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let (run, screen) =
        reporting(target.run_config(&spec), &spec, output, &name, dir, &control, ended);
    let began = Instant::now();
    let outcome = watch_signals(control.clone(), || {
        let tuner = Tuner::restore(dir, spec.trainer())?;
        tuner.tune_config(spec.tune_config()).run_config(run).control(control.clone()).fit()
    });
    screen.close();
    finish(outcome, dir, output, began)
}

/// The model of the registered trainable that `rtune run` swept in `dir`, if it has one.
fn trainable_model(dir: &Path, registry: &Registry) -> Option<registry::Model> {
    let (_, spec) = read_sweep(dir, registry).ok()?;
    registry.get(spec.builtin.as_deref()?)?.model.clone()
}

fn samples(spec: &SweepSpec) -> String {
    match spec.tune.num_samples {
        Samples::UntilStopped => "until the time budget is spent".into(),
        Samples::Count(n) => n.to_string(),
    }
}

/// How a running sweep is shown: the terminal UI on a terminal (unless `--no-tui`), else plain
/// progress lines; and to `rtune watch`, through the live stream whatever this terminal shows.
/// `ended`: trials that ended before this driver began (a resumed sweep).
fn reporting(
    run: RunConfig,
    spec: &SweepSpec,
    output: &Output,
    name: &str,
    path: &Path,
    control: &Control,
    ended: Vec<ui::model::TrialRow>,
) -> (RunConfig, Screen) {
    let metric = spec.tune.metric.clone().zip(spec.tune.mode);
    let total = match spec.tune.num_samples {
        Samples::Count(n) => Some(n),
        Samples::UntilStopped => None,
    };
    let mut model = ui::model::Model::new(name.to_owned(), path.to_owned(), metric.clone());
    model.total = total;
    model.time_budget_s = spec.tune.time_budget_s;
    let scaling = &spec.scaling;
    let workers = scaling.num_workers as f64;
    model.per_trial = (scaling.cpus_per_worker() * workers, scaling.gpus_per_worker() * workers);
    if spec.cluster.is_none()
        && let Ok(node) = crate::cluster::local_node()
    {
        model.capacity = (node.resources.cpu, node.resources.gpu);
    }
    model.set_trials(ended);
    let mut run = run;
    // Watching is a convenience: a sweep runs on without it.
    let server = match ui::stream::serve(path, model.clone(), control.clone()) {
        Ok((server, broadcast)) => {
            run = run.callback(ui::model::Following(broadcast));
            Some(server)
        }
        Err(e) => {
            tracing::warn!("no live stream for rtune watch ({e:#}); it reads the files instead");
            None
        }
    };
    let progress =
        ui::progress::Progress::new(std::io::stdout(), Duration::from_secs(5), metric, total);
    if output.no_tui || !std::io::stdout().is_terminal() {
        progress.know(model.into_trials());
        return (run.callback(ui::model::Following(progress)), Screen { ui: None, server });
    }
    let (feed, events) = ui::tui::Feed::new();
    let thread = ui::tui::live(model, events, control.clone(), progress);
    (run.callback(ui::model::Following(feed.clone())), Screen { ui: Some((feed, thread)), server })
}

/// The live terminal UI, if one is shown, and the stream to `rtune watch`.
struct Screen {
    ui: Option<(ui::tui::Feed, std::thread::JoinHandle<()>)>,
    server: Option<ui::stream::Server>,
}

impl Screen {
    /// The sweep is over: the UI gives the terminal back, the stream ends.
    fn close(self) {
        if let Some((feed, thread)) = self.ui {
            feed.end();
            let _ = thread.join();
        }
        drop(self.server);
    }
}

/// Runs `sweep` while SIGINT and SIGTERM interrupt it: the first asks it to stop resumable, a
/// second ends the process at once (what is recorded stays recorded: every file rtune writes
/// is appended or replaced atomically).
fn watch_signals<T>(control: Control, sweep: impl FnOnce() -> T) -> T {
    use tokio::signal::unix::{SignalKind, signal};
    // The handlers are in place before the sweep starts; a thread waits on them.
    let handlers =
        tokio::runtime::Builder::new_current_thread().enable_all().build().and_then(|runtime| {
            let streams = runtime.block_on(async {
                Ok::<_, std::io::Error>((
                    signal(SignalKind::interrupt())?,
                    signal(SignalKind::terminate())?,
                ))
            })?;
            Ok((runtime, streams))
        });
    match handlers {
        Ok((runtime, (mut int, mut term))) => {
            std::thread::spawn(move || {
                runtime.block_on(async {
                    let mut asked = 0;
                    loop {
                        tokio::select! {
                            _ = int.recv() => {}
                            _ = term.recv() => {}
                        }
                        asked += 1;
                        if asked == 1 {
                            eprintln!(
                                "rtune: stopping the sweep, resumable (again to stop at once; \
                                 what is recorded is kept)"
                            );
                            control.interrupt();
                        } else {
                            eprintln!("rtune: stopped at once");
                            std::process::exit(EXIT_INTERRUPTED);
                        }
                    }
                })
            });
        }
        Err(e) => tracing::warn!("cannot watch for Ctrl-C: {e}"),
    }
    sweep()
}

/// Prints the results, writes the JSON summary, and picks the exit code.
fn finish(
    outcome: crate::error::Result<ResultGrid>,
    path: &Path,
    output: &Output,
    began: Instant,
) -> Result<i32, Exit> {
    // A sweep that ended with an error still shows (and summarises) what its files hold.
    let (grid, error) = match outcome {
        Ok(grid) => (grid, None),
        Err(e) => match ResultGrid::from_path(path) {
            Ok(grid) => (grid, Some(e)),
            Err(_) => return Err(in_sweep_terms(e)),
        },
    };
    println!("{}", inspect::trials_table(&grid, 10));
    for (key, trials) in grid.unread_params() {
        eprintln!(
            "rtune: warning: param `{key}` was never read by the train function ({trials} of {} \
             trials): a search over it changes nothing (check its name; [run] strict_params = \
             true makes this an error)",
            grid.trials.len()
        );
    }
    let failed = grid.trials.iter().filter(|t| t.status == TrialStatus::Error).count();
    if let Some(out) = &output.json {
        let summary = inspect::summary(&grid, began.elapsed().as_secs_f64());
        let text = serde_json::to_vec_pretty(&summary)?;
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    }
    if let Some(e) = error {
        return Err(in_sweep_terms(e));
    }
    if failed > 0 && !output.allow_failures {
        eprintln!(
            "rtune: {failed} trial(s) failed (see `rtune show {} TRIAL` and each trial's \
             error.txt); --allow-failures exits 0 anyway",
            path.display()
        );
        return Ok(EXIT_TRIALS_FAILED);
    }
    Ok(0)
}
