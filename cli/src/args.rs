//! The command line's grammar: every command, its flags and their checks, as clap parses them.
//! `rtune` (this crate's front, see [`crate::front`]) and the full program parse with the same
//! [`Cli`], so a mistake gets the same message from either, and `--help` reads the same.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

pub use rtune_driver::sys::Device;

use crate::exit::EXIT_CODES;

/// What `rtune --help` says rtune is.
const ABOUT: &str =
    "Hyperparameter sweeps of distributed libtorch training: Ray Tune + Ray Train in Rust";

/// rtune: hyperparameter sweeps of distributed libtorch training (Ray Tune + Ray Train in Rust).
#[derive(Debug, Parser)]
#[command(name = "rtune", version, about = ABOUT, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the sweep a sweep file describes.
    #[command(
        after_help = "Example:\n  rtune run examples/sweeps/synthetic_asha.toml --set tune.num_samples=8 --json out.json\n\n\
        Exit codes: 0 success, 1 some trials failed (or never reported), 2 invalid input, 3 interrupted (resumable), \
        4 anything else failed.\n\
        Ctrl-C stops the sweep and leaves it resumable (rtune resume DIR); a second Ctrl-C stops at once."
    )]
    Run {
        /// The sweep file (TOML).
        file: PathBuf,
        /// Override a key of the file: `--set tune.num_samples=8` (the value read as TOML).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        /// Local mode, for a debugger or prints: each trial's train function runs in this
        /// process, one trial at a time (as `--set scaling.num_workers=0`).
        #[arg(long)]
        local: bool,
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
    /// Send a sweep's tracking server (MLflow's) what its end could not send: the server was
    /// down or too slow then. The rows are in the experiment's files; the runs get what they
    /// lack, each step once. `rtune resume` of the sweep sends it too.
    #[command(after_help = "Example:\n  rtune sync rtune_results/digits-asha")]
    Sync {
        /// The experiment directory (of a sweep no driver runs now).
        dir: PathBuf,
    },
    /// Print where every rank of a running sweep's trials is: each worker's training thread's
    /// stack (and a command trainable's program: its pid and state), for a trial that hangs in
    /// a collective or a data loader. The workers go on as they were.
    #[command(after_help = "Examples:\n  rtune stack rtune_results/digits-asha\n  \
            rtune stack rtune_results/digits-asha 3\n\n\
            It reads the ranks that run on the driver's machine (local mode's included).")]
    Stack {
        /// The experiment directory of the running sweep.
        dir: PathBuf,
        /// A trial: its id (`a1b2c_00003`), its index (3) or its directory name; every
        /// running trial when left out.
        trial: Option<String>,
    },
    /// Check a sweep file as `rtune run` would, and run nothing: every key, the trainable's
    /// params and metrics, whether a trial fits this machine (or the cluster), the searcher
    /// and scheduler.
    #[command(
        after_help = "Examples:\n  rtune validate examples/sweeps/digits_tpe_asha.toml --set tune.num_samples=4\n  \
            rtune validate --keys   # every key of a sweep file"
    )]
    Validate {
        /// The sweep file (TOML).
        #[arg(required_unless_present = "keys")]
        file: Option<PathBuf>,
        /// Override a key of the file, as `rtune run --set`.
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        /// Print every key a sweep file takes (what it takes, its default, what it does)
        /// instead.
        #[arg(long, conflicts_with_all = ["file", "sets"])]
        keys: bool,
    },
    /// List the trainables this binary offers (`[trainable] builtin = NAME`): what each is,
    /// the params it reads with their defaults and ranges, and the metrics it reports.
    #[command(after_help = "Example:\n  rtune builtins")]
    Builtins,
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
        #[arg(long, value_name = "METRIC:MODE", value_parser = objective,
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
        the best value of run.checkpoint.score_attribute when the sweep set one, else of the \
        metric (among reports that meet the sweep's constraints), else its latest. The export \
        holds what prediction needs: not the optimizer's state."
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
    Predict(PredictArgs),
    /// Serve an exported model over the Open Inference Protocol (KServe v2, Triton's): HTTP
    /// and gRPC, batching the requests that arrive together.
    Serve(ServeArgs),
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
        #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
        heartbeat_timeout: Duration,
        /// Serve the cluster's pool for Prometheus (GET /metrics) at HOST:PORT; off loopback it
        /// needs the cluster token, as a bearer token.
        #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
        metrics: String,
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
        #[arg(long, value_parser = amount)]
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
pub enum SlurmCommand {
    /// Run a sweep file on this job's nodes (as `rtune run`). When the experiment already
    /// exists (a requeued job runs its script again) it is resumed instead.
    Run {
        /// The sweep file (TOML).
        file: PathBuf,
        /// Override a key of the file: `--set tune.num_samples=8` (the value read as TOML).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        output: Output,
    },
    /// Go on with an interrupted sweep (a cancelled or timed-out job's) on this job's nodes.
    Resume {
        /// The experiment directory.
        dir: PathBuf,
        #[command(flatten)]
        cluster: ClusterArgs,
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
        predict: PredictArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
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
        #[arg(long, value_name = "SECONDS", default_value = "20", value_parser = seconds)]
        drain_grace: Duration,
    },
}

/// How `run` and `resume` report.
#[derive(Debug, clap::Args)]
pub struct Output {
    /// Write a summary (best trial, trials by status, time) as JSON to this file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Plain progress lines even on a terminal.
    #[arg(long)]
    pub(crate) no_tui: bool,
    /// Exit 0 even when some trials failed.
    #[arg(long)]
    pub(crate) allow_failures: bool,
    /// Serve the sweep's metrics for Prometheus (GET /metrics) at HOST:PORT, over the sweep
    /// file's `[run] metrics` (default: loopback, a free port; `rtune show DIR` says which).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics: Option<String>,
}

impl Output {
    /// Refuses a `--json` file that could not be written, before the sweep runs rather than
    /// after: its folder must exist.
    pub fn check(&self) -> Result<(), String> {
        let Some(json) = &self.json else { return Ok(()) };
        let folder = json.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !folder.is_dir() {
            return Err(format!(
                "--json {}: {} is not a folder; give a file in an existing folder",
                json.display(),
                folder.display()
            ));
        }
        Ok(())
    }
}

/// `--mode`: which way the metric is better.
#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
pub enum ModeArg {
    Max,
    Min,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rtune predict --model best-model --input test.csv --output predicted.parquet\n  \
    rtune predict --best rtune_results/digits-asha --input test.csv --output predicted.parquet\n\n\
    The output holds the input's rows with a `prediction` column (a class, or a value) and, \
    for a classifier, a `prob_<class>` column per class."
)]
pub struct PredictArgs {
    /// A folder `rtune export` wrote (a path or an `s3://` URL).
    #[arg(long, alias = "checkpoint", required_unless_present = "best")]
    pub model: Option<PathBuf>,
    /// Predict with the best checkpoint of this experiment (as `rtune export DIR --best`
    /// chooses it), exported to a temporary folder first.
    #[arg(long, value_name = "EXPERIMENT", conflicts_with_all = ["model", "workers"])]
    pub best: Option<PathBuf>,
    /// A .parquet, .csv or .csv.gz file with the model's input columns (a path or an `s3://`
    /// URL).
    #[arg(long)]
    pub input: PathBuf,
    /// The CSV input has no header row: its columns are the model's inputs in order (then
    /// the label, when there is one column more, as in data/digits.csv.gz).
    #[arg(long)]
    pub no_header: bool,
    /// The .parquet or .csv file to create (a path or an `s3://` URL).
    #[arg(long)]
    pub output: PathBuf,
    /// Rows per batch: what is in memory at once.
    #[arg(long, default_value_t = 65_536)]
    pub batch_rows: usize,
    /// Copy columns the model does not take to the output (by default they are an error).
    #[arg(long)]
    pub allow_extra: bool,
    /// Where the model runs: cpu, cuda (the first visible GPU) or cuda:N.
    #[arg(long, default_value = "cpu", value_parser = device)]
    pub device: Device,
    /// Predict on N workers reserved from the pool trials use (this machine's, or the
    /// cluster's at $RTUNE_ADDRESS), each a range of the rows; a worker that dies is retried
    /// on what it had not finished.
    #[arg(long, value_name = "N", conflicts_with = "device",
          value_parser = count)]
    pub workers: Option<u64>,
    /// CPUs each worker holds (its libtorch threads).
    #[arg(long, default_value_t = 1.0, requires = "workers")]
    pub cpus_per_worker: f64,
    /// Each worker predicts on a GPU of the pool.
    #[arg(long, requires = "workers")]
    pub use_gpu: bool,
    /// GPUs each worker holds (a fraction shares one; implies --use-gpu).
    #[arg(long, value_name = "F", requires = "workers")]
    pub gpus_per_worker: Option<f64>,
    /// Rows of a worker's part (whole batches), made whole at once: what a worker that dies
    /// may have to predict again.
    #[arg(long, default_value_t = 65_536, requires = "workers")]
    pub part_rows: usize,
}

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Examples:\n  rtune serve best-model\n  rtune serve --best rtune_results/digits-asha --http 127.0.0.1:8000\n\n\
    Clients speak the Open Inference Protocol: GET /v2/health/ready, GET /v2/models/NAME (its \
    inputs and outputs), POST /v2/models/NAME/infer, or gRPC's inference.GRPCInferenceService; \
    GET /metrics is Prometheus'. Rows go in raw, as in the files `rtune predict` reads: the \
    export's preprocessor scales and encodes them. SIGTERM answers the requests in flight and \
    exits 0."
)]
pub struct ServeArgs {
    /// A folder `rtune export` wrote.
    #[arg(value_name = "EXPORT_DIR", required_unless_present = "best")]
    pub model: Option<PathBuf>,
    /// Serve the best checkpoint of this experiment (as `rtune export DIR --best` chooses it),
    /// exported to a temporary folder first.
    #[arg(long, value_name = "EXPERIMENT", conflicts_with = "model")]
    pub best: Option<PathBuf>,
    /// HTTP's address, HOST:PORT (port 0: any free one). Off loopback it needs --token.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8000")]
    pub http: String,
    /// gRPC's address, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8001")]
    pub grpc: String,
    /// The token clients send as a bearer token (`authorization: Bearer TOKEN`); needed off
    /// loopback.
    #[arg(long, env = "RTUNE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The model's name in requests (default: the export folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// The model's version.
    #[arg(long, default_value = "1")]
    pub model_version: String,
    /// Model replicas: worker processes reserved from the pool trials use (this machine's,
    /// or the cluster's at $RTUNE_ADDRESS), each with the model, a queue, and its
    /// resources; one that dies is started again.
    #[arg(long, value_name = "N", default_value = "1", value_parser = count)]
    pub replicas: u64,
    /// CPUs each replica holds (its libtorch or tree library threads).
    #[arg(long, value_name = "N", default_value_t = 1.0, value_parser = amount)]
    pub cpus_per_replica: f64,
    /// GPUs each replica holds (a fraction shares one); it predicts on its GPU.
    #[arg(long, value_name = "F", value_parser = amount)]
    pub gpus_per_replica: Option<f64>,
    /// The model runs in the server's own process, on --device: one replica, nothing
    /// reserved from the pool.
    #[arg(long, conflicts_with_all = ["replicas", "cpus_per_replica", "gpus_per_replica"])]
    pub in_process: bool,
    /// Rows a batch holds at most (Ray Serve's max_batch_size).
    #[arg(long, value_name = "ROWS", default_value = "10", value_parser = count)]
    pub max_batch_size: u64,
    /// How long a batch waits for more requests after its first, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    pub batch_wait_ms: f64,
    /// Requests each replica's queue holds; past it, requests get 503 (RESOURCE_EXHAUSTED)
    /// with Retry-After at once.
    #[arg(long, value_name = "N", default_value = "64", value_parser = count)]
    pub max_queued: u64,
    /// A request body's size limit, in MiB (past it: 413).
    #[arg(long, value_name = "MIB", default_value_t = 32.0)]
    pub max_request_mb: f64,
    /// A request's deadline, from arrival to answer (past it: 504, DEADLINE_EXCEEDED).
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = seconds)]
    pub request_timeout: Duration,
    /// Where the model runs with --in-process: cpu, cuda (the first visible GPU) or cuda:N.
    #[arg(long, default_value = "cpu", value_parser = device, requires = "in_process")]
    pub device: Device,
    /// No line a second of throughput and latency on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// A `--device` flag: cpu, cuda (the first visible GPU) or cuda:N (clap names the flag in its
/// error).
pub fn device(text: &str) -> Result<Device, String> {
    Device::parse(text)
        .ok_or_else(|| format!("{text:?} is not a device; use cpu, cuda or cuda:N (e.g. cuda:1)"))
}

/// How `rtune slurm run` and `resume` bring their cluster up.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// How long to wait for a node agent on every allocated node.
    #[arg(long, value_name = "SECONDS", default_value = "120", value_parser = seconds)]
    pub(crate) join_timeout: Duration,
    /// The head's port on the batch host (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The batch host's address as the other nodes reach it (default: its NodeAddr in Slurm),
    /// with `:PORT` when they reach the head by another port than its own (a forwarded port).
    #[arg(long, value_name = "ADDRESS[:PORT]")]
    pub(crate) head_ip: Option<String>,
}

/// A duration flag: a positive, finite number of seconds (clap names the flag in its error).
pub fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("{text} is not a positive, finite number of seconds (e.g. 5 or 0.5)"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{text} seconds is too long"))
}

/// A count of at least 1.
pub fn count(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text} is not a whole number of at least 1")),
    }
}

/// A resource amount: a finite number ≥ 0.
pub fn amount(text: &str) -> Result<f64, String> {
    let x: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !(x.is_finite() && x >= 0.0) {
        return Err(format!("{text} is not a finite amount ≥ 0"));
    }
    Ok(x)
}

/// A `--pareto` objective: `METRIC:min` or `METRIC:max` (clap names the flag in its error).
pub fn objective(text: &str) -> Result<(String, rtune_searchers::Mode), String> {
    let (metric, mode) = text.rsplit_once(':').unwrap_or((text, ""));
    let mode = match mode {
        "min" => rtune_searchers::Mode::Min,
        "max" => rtune_searchers::Mode::Max,
        _ => return Err(format!("{text:?}: write METRIC:min or METRIC:max, e.g. val_loss:min")),
    };
    if metric.is_empty() {
        return Err(format!("{text:?} names no metric; e.g. val_loss:min"));
    }
    Ok((metric.to_owned(), mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_cpu_cuda_or_cuda_n() {
        assert_eq!(device("cpu"), Ok(Device::Cpu));
        assert_eq!(device("cuda"), Ok(Device::Cuda(0)));
        assert_eq!(device(" cuda:3 "), Ok(Device::Cuda(3)));
        for wrong in ["gpu", "cuda:x", "cuda:-1", "", "CPU"] {
            let e = device(wrong).unwrap_err();
            assert!(e.contains("use cpu, cuda or cuda:N"), "{wrong}: {e}");
        }
    }

    #[test]
    fn numbers_are_checked_where_they_are_read() {
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        for wrong in ["0", "-1", "inf", "nan", "x", "1e300"] {
            assert!(seconds(wrong).is_err(), "{wrong}");
        }
        assert_eq!(amount("0"), Ok(0.0));
        assert!(amount("-0.5").is_err() && amount("inf").is_err());
        assert_eq!(objective("val_loss:min"), Ok(("val_loss".into(), rtune_searchers::Mode::Min)));
        assert_eq!(objective("a:b:max"), Ok(("a:b".into(), rtune_searchers::Mode::Max)));
        assert!(objective("val_loss").is_err() && objective(":max").is_err());
    }

    #[test]
    fn the_grammar_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
