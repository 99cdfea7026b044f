//! Every key of a sweep file, one row each (as ripgrep keeps its flags): its path, what it
//! takes, its default, what it does, and how its value is read into a [`SweepFile`]. The reader
//! walks the file against the rows, so a key no row has is named with the nearest that is;
//! `rtune validate --keys` and the reference in docs/sweep-files.md are printed from them. A new
//! key is one row; a key the library names in its errors is its `Setting`'s, whose path the
//! row takes (`Setting::NumSamples.key()`), so it is written once. Values are only read here:
//! what a value may be is the library's check (`ScalingConfig::problems`,
//! `TuneSettings::problems`, `RunConfig::problems`), made once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rtune_driver::config::{
    CheckpointUpload, FailureConfig, PlacementStrategy, RunConfig, ScalingConfig, Sharding,
};
use rtune_driver::setting::Setting;
use rtune_driver::tune::{Samples, TuneSettings};
use rtune_searchers::Mode;

use crate::doc::{self, Item, Kind, Report, Typed};

/// A sweep file as its rows read it: plain data, before the checks that span keys and the
/// library's checks of the values.
pub(super) struct SweepFile<'i> {
    /// The rows written (tables included), by path.
    written: Vec<&'static str>,
    /// The top-level keys and `[run]`'s (its trackers aside).
    pub(super) run: RunConfig,
    pub(super) builtin: Option<&'i Item>,
    pub(super) command: Option<Vec<String>>,
    pub(super) working_dir: Option<String>,
    pub(super) stop_grace: Option<Duration>,
    pub(super) scaling: ScalingConfig,
    pub(super) param_space: Option<&'i Item>,
    /// `[datasets]`: the trainer's datasets, label, features and preprocessor.
    pub(super) datasets: Option<&'i Item>,
    pub(super) metric: Option<&'i Item>,
    pub(super) mode: Option<&'i Item>,
    /// `[tune]`'s plain settings (the objectives are set from `metric` and `mode` later).
    pub(super) tune: TuneSettings,
    pub(super) search: Option<&'i Item>,
    pub(super) scheduler: Option<&'i Item>,
    /// Its settings; the sweep is logged to MLflow where `run.mlflow` is written.
    pub(super) mlflow: MlflowSettings,
    pub(super) optuna: Option<PathBuf>,
    pub(super) tensorboard: bool,
    pub(super) metrics: Option<String>,
}

impl SweepFile<'_> {
    /// Whether the file (or a `--set`) wrote the key at `path`.
    pub(super) fn wrote(&self, path: &str) -> bool {
        self.written.contains(&path)
    }
}

/// `[run.mlflow]`: the MLflow tracking server (else `MLFLOW_TRACKING_URI`) and experiment (else
/// one named as the sweep).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MlflowSettings {
    pub tracking_uri: Option<String>,
    pub experiment: Option<String>,
    /// The best trial's best checkpoint goes into the parent run's artifacts.
    pub log_artifacts: bool,
    /// How long the sweep's end waits for the server to take what is left.
    pub flush_timeout: Option<Duration>,
}

impl MlflowSettings {
    pub(super) fn logger(&self) -> rtune_driver::callback::MlflowLogger {
        let logger = match &self.tracking_uri {
            Some(uri) => rtune_driver::callback::MlflowLogger::new(uri),
            None => rtune_driver::callback::MlflowLogger::from_env(),
        };
        let mut logger = logger.log_artifacts(self.log_artifacts);
        if let Some(timeout) = self.flush_timeout {
            logger = logger.flush_timeout(timeout);
        }
        match &self.experiment {
            Some(name) => logger.experiment(name),
            None => logger,
        }
    }
}

/// One key of a sweep file.
pub(crate) struct Key {
    /// Its dotted path: `tune.num_samples`.
    pub(crate) path: &'static str,
    /// What it takes, as the reference says it.
    pub(crate) takes: &'static str,
    /// What it is when not written.
    pub(crate) default: &'static str,
    /// What it does, in a line.
    pub(crate) doc: &'static str,
    read: Read,
}

/// How a row reads its value.
enum Read {
    /// A table of keys, whose rows follow it.
    Table,
    /// A value, into the file.
    Value(for<'i> fn(&mut SweepFile<'i>, &At<'i>, &mut Report<'_>)),
    /// Never taken, for this reason (a key users may expect, such as credentials): not in
    /// the reference.
    Refused(&'static str),
}

/// A written value and its key path, for a row's reader.
pub(super) struct At<'i> {
    path: &'static str,
    item: &'i Item,
}

impl<'i> At<'i> {
    pub(super) fn new(path: &'static str, item: &'i Item) -> Self {
        At { path, item }
    }

    /// The value as `T`, or a problem saying what was found.
    fn value<T: Typed>(&self, report: &mut Report<'_>) -> Option<T> {
        T::check(&self.item.kind).map_err(|why| self.refuse::<()>(why, report)).ok()
    }

    /// A string from `allowed`; anything else names them and the nearest.
    pub(super) fn one_of(&self, allowed: &[&str], report: &mut Report<'_>) -> Option<&'i str> {
        let Kind::Str(s) = &self.item.kind else {
            let why =
                format!("must be one of {}, not {}", doc::list(allowed), self.item.kind.describe());
            return self.refuse(why, report);
        };
        if allowed.contains(&s.as_str()) {
            return Some(s);
        }
        let why =
            format!("is {s:?}; allowed: {}{}", doc::list(allowed), doc::did_you_mean(s, allowed));
        self.refuse(why, report)
    }

    fn refuse<T>(&self, why: impl Into<String>, report: &mut Report<'_>) -> Option<T> {
        report.add(self.path, &self.item.origin, why);
        None
    }
}

/// A row whose value reads as `$ty` (its `Typed::WHAT` says what it takes) and is set by
/// `$set` with the value as `$v`.
macro_rules! value {
    ($path:expr, $ty:ty, $default:literal, $doc:literal, |$f:ident, $v:ident| $set:expr) => {
        Key {
            path: $path,
            takes: <$ty as Typed>::WHAT,
            default: $default,
            doc: $doc,
            read: Read::Value(|$f, at, report| {
                if let Some($v) = at.value::<$ty>(report) {
                    $set;
                }
            }),
        }
    };
}

/// A row whose value is one of the strings `$allowed`, set by `$set` with it as `$v`.
macro_rules! one_of {
    ($path:expr, $takes:literal, $allowed:expr, $default:literal, $doc:literal,
     |$f:ident, $v:ident| $set:expr) => {
        Key {
            path: $path,
            takes: $takes,
            default: $default,
            doc: $doc,
            read: Read::Value(|$f, at, report| {
                if let Some($v) = at.one_of(&$allowed, report) {
                    $set;
                }
            }),
        }
    };
}

/// A row read as written (`$field`, its item), checked with the keys it goes with.
macro_rules! item {
    ($path:expr, $takes:literal, $default:literal, $doc:literal, $field:ident) => {
        Key {
            path: $path,
            takes: $takes,
            default: $default,
            doc: $doc,
            read: Read::Value(|f, at, _| f.$field = Some(at.item)),
        }
    };
}

const fn table(path: &'static str, doc: &'static str) -> Key {
    Key { path, takes: "a table", default: "", doc, read: Read::Table }
}

const CREDENTIALS: &str = "credentials are not read from a sweep file (it is copied into the \
                           experiment): set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and \
                           AWS_SESSION_TOKEN in the environment";

const fn refused(path: &'static str, why: &'static str) -> Key {
    Key { path, takes: "", default: "", doc: "", read: Read::Refused(why) }
}

/// Every key, in the order of the reference: path, what it takes, default, what it does, and
/// how it is set (kept one row to a key, not as rustfmt would spread it).
#[rustfmt::skip]
pub(crate) static KEYS: &[Key] = &[
    value!(Setting::Name.key(), String, "the file's name and the time",
        "the experiment's folder under storage_path",
        |f, v| f.run.name = Some(v)),
    value!(Setting::StoragePath.key(), String, "$RTUNE_STORAGE_PATH, else ~/rtune_results",
        "where experiments go: a folder (relative to the current one) or s3://bucket/prefix",
        |f, v| f.run.storage_path = Some(v.into())),

    table("trainable", "the train function: `builtin` or `command` (required)"),
    item!("trainable.builtin", "a string", "",
        "a train function this binary registers (`rtune builtins` lists them)",
        builtin),
    value!(Setting::Command.key(), Vec<String>, "",
        "a program and its arguments, run once per worker with torchrun's environment",
        |f, v| f.command = Some(v)),
    value!(Setting::WorkingDir.key(), String, ".",
        "where a command runs, from the sweep file's folder",
        |f, v| f.working_dir = Some(v)),
    value!(Setting::StopGrace.key(), Duration, "30",
        "how long a command told to stop has to exit before SIGTERM",
        |f, v| f.stop_grace = Some(v)),

    table(Setting::Scaling.key(), "each trial's worker group (Ray's ScalingConfig)"),
    value!(Setting::NumWorkers.key(), NumWorkers, "1",
        "worker processes per trial; 0: local mode, each trial in this process, one at a time; \
         { min = 2, max = 4 }: elastic, growing into free slots and shrinking when one is lost",
        |f, v| (f.scaling.num_workers, f.scaling.max_workers) = (v.min, v.max)),
    value!(Setting::UseGpu.key(), bool, "false",
        "one GPU per worker (unless resources_per_worker says)",
        |f, v| f.scaling.use_gpu = v),
    value!(Setting::ResourcesPerWorker.key(), Resources, "{ CPU = 1 }",
        "what each worker takes: { CPU = 2, GPU = 0.5 }, custom resources too",
        |f, v| f.scaling.resources_per_worker = v.0),
    one_of!(Setting::PlacementStrategy.key(),
        "\"PACK\", \"SPREAD\", \"STRICT_PACK\" or \"STRICT_SPREAD\"",
        ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"], "\"PACK\"",
        "how a trial's workers are placed on nodes (Ray's placement strategies)",
        |f, v| f.scaling.placement_strategy = match v {
            "SPREAD" => PlacementStrategy::Spread,
            "STRICT_PACK" => PlacementStrategy::StrictPack,
            "STRICT_SPREAD" => PlacementStrategy::StrictSpread,
            _ => PlacementStrategy::Pack,
        }),
    value!(Setting::ShrinkForWaiting.key(), bool, "false",
        "an elastic trial that grew shrinks back to its min when another waits for room",
        |f, v| f.scaling.shrink_for_waiting = v),
    one_of!(Setting::Sharding.key(), "\"none\", \"zero1\" or \"zero2\"",
        ["none", "zero1", "zero2"], "\"none\"",
        "ZeRO: optimizer state (zero1) and gradients (zero2) split across the workers",
        |f, v| f.scaling.sharding = Sharding::from_name(v)),

    item!(Setting::Datasets.key(), "a table: NAME = \"FILE\" (parquet or CSV), label, features, preprocessor", "",
        "the trainer's datasets (`train` fits the preprocessor), label column, features and \
         preprocessor (a name or a list: standard_scaler, min_max_scaler, impute_mean, \
         impute_median, impute_most_frequent, one_hot, ordinal)",
        datasets),

    item!(Setting::Params.key(), "a table of params", "{}",
        "domains ({ loguniform = [1e-4, 1e-1] }), constants and groups of params",
        param_space),

    table("tune", "how the sweep searches (Ray's TuneConfig)"),
    item!(Setting::Metric.key(), "a metric name, or an array of them", "",
        "what trials are ranked by; an array: several objectives (a Pareto front)",
        metric),
    item!(Setting::Mode.key(), "\"max\" or \"min\", or an array of them", "",
        "whether the metric is better high or low; one for each metric",
        mode),
    value!(Setting::Constraints.key(), Vec<String>, "",
        "metrics a trial reports that must be <= 0 for it to count (feasible)",
        |f, v| f.tune.constraints = v),
    value!(Setting::NumSamples.key(), NumSamples, "1",
        "trials to run (with a grid: times the grid); -1: until time_budget_s ends",
        |f, v| f.tune.num_samples = v.0),
    item!(Setting::SearchAlg.key(), "a searcher's name, or { type = NAME, option = .. }", "\"auto\"",
        "the searcher: auto, random, tpe, bohb, nsga2, cmaes, gp (a grid with grid_search)",
        search),
    item!(Setting::Scheduler.key(), "a scheduler's name, or { type = NAME, option = .. }", "\"fifo\"",
        "the trial scheduler: fifo, asha, hyperband, median_stopping, pbt",
        scheduler),
    value!(Setting::MaxConcurrentTrials.key(), usize, "as many as fit side by side",
        "trials started at once",
        |f, v| f.tune.max_concurrent_trials = Some(v)),
    value!(Setting::TimeBudget.key(), f64, "",
        "the sweep ends after this many seconds",
        |f, v| f.tune.time_budget_s = Some(v)),
    value!(Setting::Seed.key(), u64, "0",
        "seeds the searcher's sampling: the same seed, the same trials",
        |f, v| f.tune.seed = v),
    value!(Setting::ReuseActors.key(), bool, "true",
        "trials' workers start warm, forked from a server that has libtorch loaded",
        |f, v| f.tune.reuse_actors = v),
    value!(Setting::FailFast.key(), bool, "false",
        "the sweep ends at the first trial that fails for good",
        |f, v| f.tune.fail_fast = v),

    table("run", "how trials run and what is kept (Ray's RunConfig)"),
    value!(Setting::Stop.key(), Thresholds, "",
        "{ metric = threshold }: a trial stops at its first report >= it",
        |f, v| f.run.stop = v.0),
    table("run.failure", "failures (Ray's FailureConfig)"),
    value!(Setting::MaxFailures.key(), i32, "0",
        "failures a trial survives, each retried from its last checkpoint; -1: unlimited",
        |f, v| f.run.failure_config = FailureConfig::max_failures(v)),
    table("run.checkpoint", "checkpoints (Ray's CheckpointConfig)"),
    value!(Setting::NumToKeep.key(), usize, "every one",
        "checkpoints kept per trial (the best by score_attribute, and the latest)",
        |f, v| f.run.checkpoint_config.num_to_keep = Some(v)),
    value!(Setting::ScoreAttribute.key(), String, "the most recent",
        "the metric that ranks checkpoints",
        |f, v| f.run.checkpoint_config.score_attribute = Some(v)),
    one_of!(Setting::ScoreOrder.key(), "\"max\" or \"min\"", ["max", "min"], "\"max\"",
        "whether a higher or lower score_attribute is better",
        |f, v| f.run.checkpoint_config.score_order = if v == "min" { Mode::Min } else { Mode::Max }),
    one_of!(Setting::CheckpointUpload.key(), "\"sync\" or \"async\"", ["sync", "async"], "\"sync\"",
        "on an object store: async lets reports go on while checkpoints upload",
        |f, v| f.run.checkpoint_config.upload = match v {
            "async" => CheckpointUpload::Async,
            _ => CheckpointUpload::Sync,
        }),
    value!(Setting::Cluster.key(), String, "$RTUNE_ADDRESS, else this machine",
        "HOST:PORT of a cluster's head (`rtune head`)",
        |f, v| f.run.cluster = Some(v)),
    value!(Setting::StrictParams.key(), bool, "false",
        "a param the train function never reads fails its trial (else: a warning)",
        |f, v| f.run.strict_params = v),
    value!(Setting::SyncPeriod.key(), Duration, "10",
        "with an s3:// storage_path: how often the experiment is mirrored there",
        |f, v| f.run.sync_period = v),
    table("run.store", "how the object store of an s3:// storage_path is reached"),
    value!(Setting::StoreEndpoint.key(), String, "$AWS_ENDPOINT_URL",
        "an S3-compatible server's URL (http:// allowed)",
        |f, v| f.run.store.endpoint = Some(v)),
    value!(Setting::StoreRegion.key(), String, "$AWS_REGION, else us-east-1",
        "the bucket's region",
        |f, v| f.run.store.region = Some(v)),
    value!(Setting::StoreRetryTimeout.key(), Duration, "180",
        "how long a request to the store is retried before the transfer fails",
        |f, v| f.run.store.retry_timeout = Some(v)),
    value!(Setting::StoreConnections.key(), usize, "16",
        "requests one transfer (a checkpoint's files and their parts) has in flight at once",
        |f, v| f.run.store.connections = Some(v)),
    refused("run.store.access_key_id", CREDENTIALS),
    refused("run.store.secret_access_key", CREDENTIALS),
    refused("run.store.session_token", CREDENTIALS),
    table(Setting::Mlflow.key(), "the sweep is also logged as MLflow runs (see docs/tracking.md)"),
    value!(Setting::MlflowTrackingUri.key(), String, "$MLFLOW_TRACKING_URI",
        "the MLflow server",
        |f, v| f.mlflow.tracking_uri = Some(v)),
    value!("run.mlflow.experiment", String, "the sweep's name",
        "the MLflow experiment",
        |f, v| f.mlflow.experiment = Some(v)),
    value!("run.mlflow.log_artifacts", bool, "false",
        "the best trial's best checkpoint goes into the parent run's artifacts",
        |f, v| f.mlflow.log_artifacts = v),
    value!("run.mlflow.flush_timeout_s", Duration, "30",
        "how long the sweep's end waits for the server to take what is left (the rest is kept: \
         `rtune sync` or `rtune resume` sends it)",
        |f, v| f.mlflow.flush_timeout = Some(v)),
    value!(Setting::Optuna.key(), String, "",
        "also an Optuna study in this journal file (optuna-dashboard FILE)",
        |f, v| f.optuna = Some(v.into())),
    value!(Setting::TensorBoard.key(), bool, "false",
        "TensorBoard event files in each trial's folder (tensorboard --logdir EXPERIMENT)",
        |f, v| f.tensorboard = v),
    value!(Setting::Metrics.key(), String, "127.0.0.1:0",
        "HOST:PORT of the sweep's Prometheus endpoint (GET /metrics); off loopback: RTUNE_TOKEN",
        |f, v| f.metrics = Some(v)),
];

/// Reads the file (its root table) through the rows: every key no row has is a problem naming
/// the keys its table takes and the nearest.
pub(super) fn read<'i>(root: &'i Item, report: &mut Report<'_>) -> SweepFile<'i> {
    let mut file = SweepFile {
        written: Vec::new(),
        run: RunConfig::default(),
        builtin: None,
        command: None,
        working_dir: None,
        stop_grace: None,
        scaling: ScalingConfig::workers(1),
        param_space: None,
        datasets: None,
        metric: None,
        mode: None,
        tune: TuneSettings::default(),
        search: None,
        scheduler: None,
        mlflow: MlflowSettings::default(),
        optuna: None,
        tensorboard: false,
        metrics: None,
    };
    walk(root, "", &mut file, report);
    file
}

fn walk<'i>(table: &'i Item, path: &str, file: &mut SweepFile<'i>, report: &mut Report<'_>) {
    let Kind::Table(entries) = &table.kind else {
        let message = format!("must be a table, not {}", table.kind.describe());
        return report.add(path, &table.origin, message);
    };
    for (name, origin, item) in entries {
        let full = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        let Some(key) = KEYS.iter().find(|k| k.path == full) else {
            let allowed: Vec<&str> = below(path).map(|k| leaf(k.path)).collect();
            let message = format!(
                "is not a key here; allowed: {}{}",
                doc::list(&allowed),
                doc::did_you_mean(name, &allowed)
            );
            report.add(&full, origin, message);
            continue;
        };
        file.written.push(key.path);
        match key.read {
            Read::Table => walk(item, key.path, file, report),
            Read::Value(read) => read(file, &At { path: key.path, item }, report),
            Read::Refused(why) => report.add(key.path, &item.origin, why),
        }
    }
}

/// The keys a table at `path` takes (refused ones aside).
fn below(path: &str) -> impl Iterator<Item = &'static Key> {
    KEYS.iter().filter(move |k| {
        let parent = k.path.rsplit_once('.').map_or("", |(up, _)| up);
        parent == path && !matches!(k.read, Read::Refused(_))
    })
}

fn leaf(path: &str) -> &str {
    path.rsplit_once('.').map_or(path, |(_, leaf)| leaf)
}

/// The reference of every key, as the guide's table (Markdown) or a terminal's lines.
pub(crate) fn reference(markdown: bool) -> String {
    let keys = KEYS.iter().filter(|k| !matches!(k.read, Read::Refused(_)));
    let mut out = String::new();
    if markdown {
        out.push_str("| key | takes | default | what it does |\n|---|---|---|---|\n");
        for k in keys {
            // A value as written is code; a description (`the sweep's name`) is not.
            let written =
                k.default.starts_with(|c: char| c.is_ascii_digit() || "\"{.-".contains(c))
                    || ["true", "false"].contains(&k.default);
            let default = if written { format!("`{}`", k.default) } else { k.default.to_owned() };
            let cells = [format!("`{}`", k.path), k.takes.into(), default, k.doc.into()];
            out.push_str(&format!("| {} |\n", cells.map(|c| c.replace('|', "\\|")).join(" | ")));
        }
        return out;
    }
    for k in keys {
        match k.read {
            Read::Table => out.push_str(&format!("[{}]: {}\n", k.path, k.doc)),
            _ => {
                let default = if k.default.is_empty() { "not set" } else { k.default };
                out.push_str(&format!(
                    "{}: {}; default {default}\n    {}\n",
                    k.path, k.takes, k.doc
                ));
            }
        }
    }
    out
}

/// `tune.num_samples`: a count, or -1 (until the time budget ends).
struct NumSamples(Samples);

impl Typed for NumSamples {
    const WHAT: &'static str = "an integer >= 1, or -1";
    fn read(kind: &Kind) -> Option<Self> {
        match kind {
            Kind::Int(-1) => Some(NumSamples(Samples::UntilStopped)),
            Kind::Int(n) => u64::try_from(*n).ok().map(|n| NumSamples(Samples::Count(n))),
            _ => None,
        }
    }
    fn check(kind: &Kind) -> Result<Self, String> {
        match kind {
            Kind::Int(n) if *n < -1 => {
                Err(format!("is {n}; use at least 1, or -1 (with time_budget_s)"))
            }
            _ => Self::read(kind).ok_or_else(|| doc::not_a(Self::WHAT, kind)),
        }
    }
}

/// `scaling.num_workers`: a count, or an elastic group's `{ min, max }`.
struct NumWorkers {
    min: usize,
    max: Option<usize>,
}

impl Typed for NumWorkers {
    const WHAT: &'static str = "an integer >= 0, or { min = N, max = M }";
    fn read(kind: &Kind) -> Option<Self> {
        Self::check(kind).ok()
    }
    fn check(kind: &Kind) -> Result<Self, String> {
        let entries = match kind {
            Kind::Table(entries) => entries,
            Kind::Int(_) => return usize::check(kind).map(|min| NumWorkers { min, max: None }),
            _ => return Err(doc::not_a(Self::WHAT, kind)),
        };
        let (mut min, mut max) = (None, None);
        for (name, _, value) in entries {
            let slot = match name.as_str() {
                "min" => &mut min,
                "max" => &mut max,
                other => {
                    return Err(format!(
                        "has `{other}`; an elastic group is {{ min = N, max = M }}, nothing else"
                    ));
                }
            };
            *slot = Some(usize::check(&value.kind).map_err(|e| format!("`{name}` {e}"))?);
        }
        match (min, max) {
            (Some(min), Some(max)) => Ok(NumWorkers { min, max: Some(max) }),
            _ => Err("an elastic group needs both: { min = N, max = M }".into()),
        }
    }
}

/// `scaling.resources_per_worker`: amounts by resource name.
struct Resources(BTreeMap<String, f64>);

impl Typed for Resources {
    const WHAT: &'static str = "a table of resource = amount";
    fn read(kind: &Kind) -> Option<Self> {
        numbers(kind).map(Resources)
    }
    fn check(kind: &Kind) -> Result<Self, String> {
        Self::read(kind).ok_or_else(|| "must be a table, e.g. { CPU = 1, GPU = 0.5 }".into())
    }
}

/// `run.stop`: thresholds by metric.
struct Thresholds(BTreeMap<String, f64>);

impl Typed for Thresholds {
    const WHAT: &'static str = "a table of metric = threshold";
    fn read(kind: &Kind) -> Option<Self> {
        Self::check(kind).ok()
    }
    fn check(kind: &Kind) -> Result<Self, String> {
        let Kind::Table(entries) = kind else { return Err(doc::not_a(Self::WHAT, kind)) };
        let mut thresholds = BTreeMap::new();
        for (metric, _, value) in entries {
            match f64::read(&value.kind).filter(|x| x.is_finite()) {
                Some(x) => thresholds.insert(metric.clone(), x),
                None => {
                    return Err(format!(
                        "gives {metric} = {}; a threshold is a finite number: the trial stops at \
                         its first report >= it",
                        doc::value_text(&doc::to_value(value))
                    ));
                }
            };
        }
        Ok(Thresholds(thresholds))
    }
}

/// A table of numbers (each an integer or a float).
fn numbers(kind: &Kind) -> Option<BTreeMap<String, f64>> {
    let Kind::Table(entries) = kind else { return None };
    entries.iter().map(|(name, _, v)| f64::read(&v.kind).map(|x| (name.clone(), x))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table a row sits in has its row, and no path is there twice.
    #[test]
    fn rows_are_a_tree() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(KEYS[..i].iter().all(|earlier| earlier.path != k.path), "{} twice", k.path);
            if let Some((up, _)) = k.path.rsplit_once('.') {
                let parent = KEYS[..i].iter().find(|p| p.path == up);
                assert!(parent.is_some_and(|p| matches!(p.read, Read::Table)), "{}", k.path);
            }
        }
    }

    /// Every setting the library names in its errors has the row of its key.
    #[test]
    fn every_setting_has_its_row() {
        for setting in Setting::ALL {
            assert!(KEYS.iter().any(|k| k.path == setting.key()), "no row for {setting:?}");
        }
    }

    /// Keys no row has are named with the keys their table takes and the nearest; a wrong
    /// value is said at its value, and reading goes on.
    #[test]
    fn unknown_keys_list_the_allowed_and_the_nearest() {
        let s = doc::Source {
            name: "sweep.toml".into(),
            text: "[tune]\nmetrc = \"acc\"\nseed = \"x\"\n".into(),
        };
        let root = s.parse().unwrap();
        let mut report = Report::new(&s);
        let file = read(&root, &mut report);
        assert!(file.wrote("tune") && file.wrote("tune.seed") && !file.wrote("tune.metric"));
        let text = report.finish().unwrap_err().to_string();
        assert!(
            text.contains(
                "sweep.toml:2:1: `tune.metrc` is not a key here; allowed: `metric`, `mode`, \
                 `constraints`, `num_samples`"
            ) && text.contains("did you mean `metric`?"),
            "{text}"
        );
        assert!(
            text.contains("sweep.toml:3:8: `tune.seed` must be an integer, not the string"),
            "{text}"
        );
    }

    /// The reference in docs/sweep-files.md is the rows' (`reference(true)`), between its
    /// markers.
    #[test]
    fn the_guide_lists_every_key() {
        let guide = include_str!("../../../../docs/sweep-files.md");
        let start = "<!-- keys: from cli/src/program/sweep/keys.rs -->\n";
        let table = guide.split_once(start).and_then(|(_, rest)| rest.split_once("<!-- /keys -->"));
        let expected = reference(true);
        // RTUNE_BLESS=1 writes the rows' reference into the guide, between its markers.
        if std::env::var_os("RTUNE_BLESS").is_some()
            && let Some((head, rest)) = guide.split_once(start)
            && let Some((_, tail)) = rest.split_once("<!-- /keys -->")
        {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/sweep-files.md");
            let text = format!("{head}{start}{expected}<!-- /keys -->{tail}");
            std::fs::write(path, text).expect("the guide is writable");
            return;
        }
        assert_eq!(
            table.map(|(t, _)| t),
            Some(expected.as_str()),
            "docs/sweep-files.md's key reference differs from the rows; it should read, \
             between its markers:\n{expected}"
        );
    }
}
