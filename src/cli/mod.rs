//! The `rtune` command line: sweeps from a sweep file (`run`, `resume`, `validate`, `stop`:
//! `sweeping`), experiments on disk (`ls`, `show`, `watch`, `export`, `predict`), and the cluster
//! (`head`, `node`, `status`). A user's own binary gets all of it, with its own train functions,
//! from one call (a trainable registered with defaults declares its params: see `registry`):
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
mod inspect;
mod predict;
pub mod registry;
mod slurm;
pub mod sweep;
mod sweeping;
pub mod ui;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

pub use doc::{Problem, Problems, Source};
pub use exit::{EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED};
use exit::{Exit, input_error};
pub use registry::{Registry, Trainable};
pub use sweep::SweepSpec;
use sweeping::{resume, run, stop, trainable_model, validate};

use crate::config::RunConfig;

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
    #[command(after_help = "Examples:\n  rtune resume rtune_results/digits-asha\n  \
        rtune resume rtune_results/digits-asha --sweep fixed.toml   # a corrected sweep file\n\n\
        --sweep takes a corrected file for the settings that do not change what was recorded \
        (a scheduler's options, run.stop, failure and checkpoint settings, the scaling, \
        max_concurrent_trials, time_budget_s); the trainable, param_space, metric, mode, \
        num_samples, seed and the kinds of searcher and scheduler stay the sweep's own.")]
    Resume {
        /// The experiment directory.
        dir: PathBuf,
        /// A corrected sweep file to go on with (kept for later resumes).
        #[arg(long, value_name = "FILE")]
        sweep: Option<PathBuf>,
        /// Override a key of the --sweep file, as `rtune run --set`.
        #[arg(long = "set", value_name = "KEY.PATH=VALUE", requires = "sweep")]
        sets: Vec<String>,
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
        /// Only the trials on the Pareto front of these objectives (two or more, each
        /// METRIC:min or METRIC:max), by their last results.
        #[arg(long, value_name = "METRIC:MODE", value_parser = inspect::objective,
              conflicts_with = "trial")]
        pareto: Vec<(String, rtune_searchers::Mode)>,
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
        /// The folder to create: a path, or an `s3://bucket/prefix` folder that holds nothing
        /// yet.
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
    Predict(predict::PredictArgs),
    /// Serve a cluster: the resource pool that drivers reserve worker groups from. It also
    /// holds the drivers' binaries for the nodes (in `$RTUNE_CACHE/binaries`).
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
    /// Offer this machine to a head and run worker processes on its command. Workers run the
    /// driver's binary, fetched from the head once by its SHA-256 and kept in
    /// `$RTUNE_CACHE/binaries` (default ~/.cache/rtune); those of a run on an object store work
    /// in `$RTUNE_CACHE/runs/..` and need nothing of the driver's files.
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
    /// Predict a file with an export on this job's nodes (as `rtune predict --workers N`).
    #[command(
        after_help = "Example (the last line of a batch script):\n  rtune slurm predict --model best-model \
        --input big.parquet --output predicted.parquet --workers 8"
    )]
    Predict {
        #[command(flatten)]
        predict: predict::PredictArgs,
        #[command(flatten)]
        cluster: slurm::ClusterArgs,
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
        Command::Resume { dir, sweep, sets, output } => {
            let dir = local(&dir)?;
            if let Some(file) = sweep {
                sweeping::replace_sweep(&dir, &file, &sets, registry)?;
            }
            resume(&dir, &output, registry, &Target::default())
        }
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
        Command::Watch { dir } => {
            let dir = match dir {
                // On a store: its files, as they were at the last sync.
                Some(dir) => local(&dir)?,
                None => inspect::newest_experiment().map_err(|e| Exit(EXIT_INVALID, e))?,
            };
            ui::tui::watch(&dir).map_err(|e| Exit(EXIT_INVALID, e))?;
            Ok(0)
        }
        Command::Ls { dir, format } => {
            let dir = dir.map(|d| local(&d)).transpose()?;
            inspect::ls(dir.as_deref(), format).map_err(input_error)?;
            Ok(0)
        }
        Command::Show { dir, trial, format, pareto } => {
            let dir = local(&dir)?;
            inspect::show(&dir, trial.as_deref(), format, &pareto).map_err(input_error)?;
            Ok(0)
        }
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
        Command::Status { address, format, token } => {
            cluster::status(address, format == Format::Json, token)?;
            Ok(0)
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

/// A folder argument as a local folder: itself, or, for an `s3://` URL, its staging copy
/// brought up to date from the store (a store that cannot be read: exit 2).
fn local(dir: &Path) -> Result<PathBuf, Exit> {
    crate::storage::remote::local_copy(dir).map_err(|e| Exit(EXIT_INVALID, e.into()))
}
