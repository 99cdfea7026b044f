//! The sweep file (`rtune run sweep.toml`): read whole, checked whole, then turned into a
//! `Tuner`. Nothing starts until every key is valid; every mistake names its key path, its
//! line and column, what is allowed, and the nearest valid key.
//!
//! ```toml
//! name = "digits-asha"                 # the experiment's folder under storage_path
//! storage_path = "rtune_results"       # relative to the current directory
//!
//! [trainable]
//! builtin = "digits-mlp"               # a train function registered in the binary, or
//! # command = ["python3", "train.py"]  # any executable, one per worker (torchrun's env);
//! # working_dir = "."                  # where it runs, from this file's folder
//! # stop_grace_s = 30                  # time a stopped command has to exit before SIGTERM
//!
//! [scaling]
//! num_workers = 2                      # use_gpu, resources_per_worker, placement_strategy
//! # sharding = "zero2"                 # ZeRO: optimizer state (zero1) and gradients (zero2)
//! #                                    # split across the workers (digits-mlp follows it)
//!
//! [param_space]                        # the searchers crate's domains
//! lr = { loguniform = [1e-4, 1e-1] }
//! hidden = { choice = [64, 128, 256] }
//! batch_size = { choice = [16, 32, 64] }
//! epochs = 12                          # constants are params too
//!
//! [tune]
//! metric = "val_acc"
//! mode = "max"
//! num_samples = 16
//! search = { type = "tpe", n_startup_trials = 6 }    # or search = "random"
//! # either with points_to_evaluate = [{ lr = 0.01 }] (run first), evaluated_rewards = [0.9]
//! # or search = "bohb" with scheduler = { type = "hyperband", max_t = 12 } (BOHB)
//! # several objectives: metric = ["val_loss", "params"], mode = ["min", "min"], with
//! # search = { type = "nsga2", population_size = 50 } (or random) and the fifo scheduler
//! scheduler = { type = "asha", grace_period = 2, max_t = 12, reduction_factor = 2 }
//! max_concurrent_trials = 1
//! seed = 0
//!
//! [run]
//! stop = { val_acc = 0.99 }                          # stop a trial at the first report >=
//! failure = { max_failures = 1 }
//! # strict_params = true                            # a param never read fails its trial
//! # sync_period_s = 10           # with storage_path = "s3://bucket/prefix": mirror this often
//! # store = { endpoint = "http://127.0.0.1:9000", region = "us-east-1", retry_timeout_s = 180 }
//! #                              # how the store is reached (credentials: the AWS_* environment)
//! # optuna = "optuna.log"        # also an Optuna study there: optuna-dashboard optuna.log
//! # tensorboard = true            # TensorBoard event files: tensorboard --logdir EXPERIMENT
//! # mlflow = { tracking_uri = "http://127.0.0.1:5000", experiment = "digits", log_artifacts = true }
//! #               # also MLflow runs (default: MLFLOW_TRACKING_URI, the sweep's name, false)
//! checkpoint = { num_to_keep = 2, score_attribute = "val_acc", score_order = "max" }
//! # checkpoint upload = "async": on an object store, reports go on while checkpoints upload
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod components;
mod guesses;
mod run;
mod space;

use rtune_searchers::{Mode, Objective, SearchSpace};

use super::registry::Trainables;
use crate::doc::{self, Fields, Item, Kind, Problems, Report, Source};
pub use components::Component;
use components::{SCHEDULERS, SEARCHERS, check_components, read_component};
use rtune_driver::config::{
    CheckpointConfig, FailureConfig, PlacementStrategy, RunConfig, ScalingConfig, StoreSettings,
};
use rtune_driver::train::CommandTrainable;
use rtune_driver::train::TorchTrainer;
use rtune_driver::tune::{Control, Samples, TuneConfig, TuneSettings, Tuner};
pub use run::MlflowSettings;
use run::{RunParts, read_run};
use space::{param_origin, read_space};

/// A valid sweep file.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    pub name: Option<String>,
    pub storage_path: Option<PathBuf>,
    /// The train function (a registered one with its defaults, or a command), before the
    /// scaling and run settings.
    pub trainable: TorchTrainer,
    /// The registered train function's name, for a builtin trainable.
    pub builtin: Option<String>,
    /// A command trainable's command line, and where it runs, as the file gives them.
    pub command: Option<String>,
    pub scaling: ScalingConfig,
    pub space: SearchSpace,
    /// `[tune]`: the sweep's settings, as `TuneConfig` and the experiment's `tuner.json` hold
    /// them, then its searcher and scheduler.
    pub tune: TuneSettings,
    pub search: Component,
    pub scheduler: Component,
    pub stop: BTreeMap<String, f64>,
    pub failure: FailureConfig,
    pub checkpoint: CheckpointConfig,
    pub cluster: Option<String>,
    /// `[run] strict_params`: a param the train function never reads fails its trial.
    pub strict_params: bool,
    /// `[run] sync_period_s`: how often an experiment on an object store is mirrored there.
    pub(crate) sync_period: Option<std::time::Duration>,
    /// `[run] store`: how the object store of an `s3://` storage path is reached.
    pub store: StoreSettings,
    /// `[run.mlflow]`: the MLflow tracking server the sweep is also logged to.
    pub mlflow: Option<MlflowSettings>,
    /// `[run] optuna`: the Optuna journal file the sweep is also written to, as a study.
    pub optuna: Option<PathBuf>,
    /// `[run] tensorboard`: each trial's results as TensorBoard event files (`tensorboard
    /// --logdir EXPERIMENT`).
    pub tensorboard: bool,
}

impl SweepSpec {
    /// Reads and checks the whole file, `sets` (`key.path=value`) applied on top.
    pub fn read(source: &Source, sets: &[String], registry: &Trainables) -> Result<Self, Problems> {
        Self::read_checked(source, sets, registry, false)
    }

    /// `read`, and for a sweep that runs on this machine (the file names no cluster), whether
    /// a trial fits it, with the file's other mistakes.
    pub(crate) fn read_to_run_here(
        source: &Source,
        sets: &[String],
        registry: &Trainables,
    ) -> Result<Self, Problems> {
        Self::read_checked(source, sets, registry, true)
    }

    fn read_checked(
        source: &Source,
        sets: &[String],
        registry: &Trainables,
        here: bool,
    ) -> Result<Self, Problems> {
        let mut root = source.parse()?;
        let mut report = Report::new(source);
        for set in sets {
            if let Err(p) = doc::apply_set(&mut root, set) {
                report.push(p);
            }
        }
        report.finish()?;
        let mut report = Report::new(source);
        // Relative paths in the file (a command's working_dir) are from the file's folder.
        let file = std::path::absolute(&source.name).unwrap_or_else(|_| source.name.clone().into());
        let base_dir = file.parent().map_or_else(PathBuf::new, Path::to_path_buf);
        let spec = read_root(&root, registry, &base_dir, here, &mut report);
        report.finish()?;
        Ok(spec.expect("a file without problems reads whole"))
    }

    /// The searcher and scheduler, built anew (they hold state, one per sweep).
    pub fn tune_config(&self) -> TuneConfig {
        TuneConfig {
            settings: self.tune.clone(),
            search_alg: self.searcher(),
            scheduler: self.scheduler(),
        }
    }

    /// The trainer: the registered function, its defaults as `train_loop_config`, the scaling,
    /// and the run settings (the Tuner merges each trial's params over the defaults).
    pub fn trainer(&self) -> TorchTrainer {
        self.trainable.clone().scaling(self.scaling.clone()).run_config(self.run_config())
    }

    pub fn run_config(&self) -> RunConfig {
        let mut run = RunConfig {
            name: self.name.clone(),
            storage_path: self.storage_path.clone(),
            failure_config: self.failure,
            checkpoint_config: self.checkpoint.clone(),
            stop: self.stop.clone(),
            strict_params: self.strict_params,
            store: self.store.clone(),
            ..RunConfig::default()
        };
        if let Some(mlflow) = &self.mlflow {
            run = run.callback(mlflow.logger());
        }
        if let Some(journal) = &self.optuna {
            run = run.callback(rtune_driver::callback::OptunaJournal::new(journal));
        }
        if self.tensorboard {
            run = run.callback(rtune_driver::callback::TensorBoardLogger::new());
        }
        if let Some(period) = self.sync_period {
            run.sync_period = period;
        }
        if let Some(address) = &self.cluster {
            run = run.cluster(address, std::env::var(rtune_driver::config::TOKEN_ENV).ok());
        }
        run
    }

    /// The trials the sweep runs, as the Tuner counts them (a grid times `num_samples`); None
    /// until its time budget is spent.
    pub(crate) fn trial_count(&self) -> Option<u64> {
        let searcher = self.searcher();
        rtune_driver::tune::trial_count(&self.space, self.tune.num_samples, searcher.as_deref())
    }

    /// A new sweep of this spec.
    pub fn tuner(&self, run: RunConfig, control: Control) -> Tuner {
        Tuner::new(self.trainer(), self.space.clone())
            .tune_config(self.tune_config())
            .run_config(run)
            .control(control)
    }
}

fn read_root(
    root: &Item,
    registry: &Trainables,
    base_dir: &Path,
    here: bool,
    report: &mut Report<'_>,
) -> Option<SweepSpec> {
    let mut top = Fields::of(root, "", report);
    let name = top.value::<String>("name", report);
    if let (Some(n), Some(item)) = (&name, find_key(root, "name"))
        && let Err(why) = rtune_driver::config::check_folder_name(n)
    {
        report.add("name", &item.origin, why);
    }
    let storage_path = top.value::<String>("storage_path", report).map(PathBuf::from);
    let trainable = match top.get("trainable") {
        Some(item) => read_trainable(item, registry, base_dir, report),
        None => {
            let message = format!(
                "is missing: add [trainable] with builtin = one of {}, or command = [...]",
                doc::list(&registry.names())
            );
            report.add("trainable", top.origin(), message);
            None
        }
    };
    let scaling = read_scaling(top.get("scaling"), report);
    let space_item = top.get("param_space");
    // The whole space, and its params that read (checked against the trainable even when
    // another one is a mistake: all mistakes come in one report).
    let (space, readable) = match space_item {
        Some(item) => read_space(item, "param_space", report),
        None => (Some(SearchSpace::new()), SearchSpace::new()),
    };
    let empty = Item { origin: root.origin.clone(), kind: Kind::Table(Vec::new()) };
    let tune_item = top.get("tune").unwrap_or(&empty);
    let run_item = top.get("run").unwrap_or(&empty);
    top.done(report);
    let mut tune = Fields::of(tune_item, "tune", report);
    // None where metric or mode is not written; empty where what is written is a mistake
    // (reported).
    let written = read_objectives(&mut tune, report);
    let objectives = written.clone().unwrap_or_default();
    // No objective to rank by: none written, or a metric without its mode (or a mode without
    // its metric), which is said where it is written and where it is needed.
    let one_missing =
        find_key(root, "tune.metric").is_some() != find_key(root, "tune.mode").is_some();
    let unranked = written.is_none() || one_missing;
    let (metric, mode) = match objectives.as_slice() {
        [one] => (Some(one.metric.clone()), Some(one.mode)),
        _ => (None, None),
    };
    let num_samples = tune.value::<i64>("num_samples", report).unwrap_or(1);
    if num_samples < 1 && num_samples != -1 {
        let message = format!("is {num_samples}; use at least 1, or -1 (with time_budget_s)");
        tune.refuse("num_samples", message, report);
    }
    let search = read_component(&mut tune, "search", SEARCHERS, "random", report);
    let scheduler = read_component(&mut tune, "scheduler", SCHEDULERS, "fifo", report);
    let max_concurrent_trials = positive(&mut tune, "max_concurrent_trials", MAX_COUNT, report);
    let seed = tune.value::<i64>("seed", report).unwrap_or(0);
    if seed < 0 {
        tune.refuse("seed", format!("is {seed}; use an integer >= 0"), report);
    }
    let time_budget_s = tune.value::<f64>("time_budget_s", report);
    match time_budget_s {
        Some(budget) if budget <= 0.0 => {
            tune.refuse("time_budget_s", "must be a positive number of seconds", report)
        }
        Some(budget) => {
            if let Err(why) = rtune_driver::config::duration(budget) {
                tune.refuse("time_budget_s", why, report);
            }
        }
        None => {}
    }
    // Unbounded: random sampling never runs out, and neither does TPE.
    if num_samples == -1 && time_budget_s.is_none() {
        tune.refuse("num_samples", "is -1 (unbounded): set tune.time_budget_s too", report);
    }
    let reuse_actors = tune.value::<bool>("reuse_actors", report).unwrap_or(true);
    let fail_fast = tune.value::<bool>("fail_fast", report).unwrap_or(false);
    let tune_origin = tune.origin().clone();
    tune.done(report);
    let needs_metric = [(&search, "search", "random"), (&scheduler, "scheduler", "fifo")]
        .into_iter()
        .filter_map(|(c, key, plain)| c.as_ref().filter(|c| c.kind != plain).map(|c| (key, c)))
        .next();
    if let Some((key, component)) = needs_metric
        && unranked
    {
        let message = format!(
            "needs tune.metric and tune.mode: {key} `{}` ranks trials by them (e.g. metric = \
             \"val_acc\", mode = \"max\")",
            component.kind
        );
        report.add("tune", &tune_origin, message);
    }
    if objectives.len() > 1 {
        let single = [
            (&search, "search", ["random", "tpe", "nsga2"].as_slice()),
            (&scheduler, "scheduler", &["fifo"]),
        ];
        for (component, key, takes) in single {
            if let Some(c) = component.as_ref().filter(|c| !takes.contains(&c.kind.as_str())) {
                let origin =
                    doc::find(root, &format!("tune.{key}")).map_or(&tune_origin, |(o, _)| o);
                let message = format!(
                    "is `{}`, which ranks trials by one metric, and tune.metric names {} \
                     objectives; several objectives take {}",
                    c.kind,
                    objectives.len(),
                    takes.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(" or ")
                );
                report.add(&format!("tune.{key}"), origin, message);
            }
        }
    }
    let run = read_run(run_item, report);
    if let Some(scaling) = scaling.as_ref().filter(|_| here) {
        fits_here(scaling, &run, root, report);
    }
    if let Some((origin, _)) = doc::find(root, "run.optuna").filter(|_| run.optuna.is_some())
        && unranked
    {
        let why = "needs tune.metric and tune.mode: an Optuna study has one objective (e.g. \
                   metric = \"val_acc\", mode = \"max\")";
        report.add("run.optuna", origin, why);
    }
    let builtin = match find_key(root, "trainable.builtin").map(|item| &item.kind) {
        Some(Kind::Str(name)) => Some(name.clone()),
        _ => None,
    };
    if let Some(t) = builtin.as_deref().and_then(|b| registry.get(b)) {
        check_declared(t, root, space_item.zip(Some(&readable)), scheduler.as_ref(), &run, report);
    }
    let tune = TuneSettings {
        objectives: if objectives.len() > 1 { objectives } else { Vec::new() },
        metric,
        mode,
        num_samples: if num_samples == -1 {
            Samples::UntilStopped
        } else {
            Samples::Count(num_samples.max(1) as u64)
        },
        max_concurrent_trials,
        time_budget_s,
        seed: seed as u64,
        fail_fast,
        reuse_actors,
    };
    let (search, scheduler) = (search?, scheduler?);
    // The searcher's and scheduler's own settings, with the file's other mistakes: against the
    // space's params that read when another is a mistake (a searcher's model of the space is
    // checked with the whole space only).
    let modelled = space.as_ref();
    let random = Component::plain("random");
    let tuning = components::Tuning {
        space: modelled.unwrap_or(&readable),
        tune: &tune,
        search: if modelled.is_some() { &search } else { &random },
        scheduler: &scheduler,
    };
    check_components(&tuning, root, report);
    let command = find_key(root, "trainable.command").map(|c| {
        let dir = find_key(root, "trainable.working_dir").map(doc::to_value);
        format!("{} in {}", doc::to_value(c), dir.map_or(".".into(), |d| d.to_string()))
    });
    Some(SweepSpec {
        name,
        storage_path,
        trainable: trainable?,
        builtin,
        command,
        scaling: scaling?,
        space: space?,
        tune,
        search,
        scheduler,
        stop: run.stop,
        failure: run.failure,
        checkpoint: run.checkpoint,
        cluster: run.cluster,
        strict_params: run.strict_params,
        sync_period: run.sync_period,
        store: run.store,
        mlflow: run.mlflow,
        optuna: run.optuna,
        tensorboard: run.tensorboard,
    })
}

/// `tune.metric` and `tune.mode`: one metric and its mode, or arrays of as many (several
/// objectives); None where either is not written. A mistake is reported, and reads as none.
fn read_objectives(tune: &mut Fields<'_>, report: &mut Report<'_>) -> Option<Vec<Objective>> {
    let (metric_item, mode_item) = (tune.get("metric"), tune.get("mode"));
    fn list<'i>(
        item: Option<&'i Item>,
        what: &str,
        path: String,
        report: &mut Report<'_>,
    ) -> Option<(Vec<String>, &'i Item)> {
        let item = item?;
        let texts: Option<Vec<String>> = match &item.kind {
            Kind::Str(s) => Some(vec![s.clone()]),
            Kind::Array(items) if !items.is_empty() => items
                .iter()
                .map(|i| if let Kind::Str(s) = &i.kind { Some(s.clone()) } else { None })
                .collect(),
            _ => None,
        };
        if texts.is_none() {
            let message = format!(
                "must be {what} or a non-empty array of them (several objectives), not {}",
                item.kind.describe()
            );
            report.add(&path, &item.origin, message);
        }
        texts.map(|t| (t, item))
    }
    let metrics = list(metric_item, "a metric name", tune.path("metric"), report);
    let modes = match mode_item {
        // One mode: a mistake in it gets the nearest allowed.
        Some(item @ Item { kind: Kind::Str(_), .. }) => {
            tune.one_of("mode", &["max", "min"], report).map(|m| (vec![m], item))
        }
        _ => list(mode_item, "\"max\" or \"min\"", tune.path("mode"), report),
    };
    let modes = modes.and_then(|(modes, item)| {
        let read: Option<Vec<Mode>> = modes
            .iter()
            .map(|m| match m.as_str() {
                "max" => Some(Mode::Max),
                "min" => Some(Mode::Min),
                _ => None,
            })
            .collect();
        if read.is_none() {
            let message = format!("is {}; each mode is \"max\" or \"min\"", doc::to_value(item));
            report.add(&tune.path("mode"), &item.origin, message);
        }
        read.map(|r| (r, item))
    });
    let (Some((metrics, metric_item)), Some((modes, mode_item))) = (metrics, modes) else {
        return match (metric_item, mode_item) {
            (Some(metric), None) => {
                let message = format!(
                    "is {} without tune.mode: add mode = \"min\" or mode = \"max\" (one for each \
                     metric)",
                    doc::to_value(metric)
                );
                report.add(&tune.path("metric"), &metric.origin, message);
                Some(Vec::new())
            }
            (None, Some(mode)) => {
                let message = "is given without tune.metric: name the metric it is the mode of";
                report.add(&tune.path("mode"), &mode.origin, message);
                Some(Vec::new())
            }
            // Both written, one a mistake (reported), or neither.
            (Some(_), Some(_)) => Some(Vec::new()),
            (None, None) => None,
        };
    };
    if metrics.len() != modes.len() {
        let message = format!(
            "gives {} mode(s) for {} metric(s): give one mode for each metric, in the same \
             order (e.g. mode = [{}])",
            modes.len(),
            metrics.len(),
            vec!["\"min\""; metrics.len()].join(", ")
        );
        report.add(&tune.path("mode"), &mode_item.origin, message);
        return Some(Vec::new());
    }
    for (i, m) in metrics.iter().enumerate() {
        let problem = if m.is_empty() {
            Some("names an empty metric".to_owned())
        } else if metrics[..i].contains(m) {
            Some(format!("names `{m}` twice; each metric is one objective"))
        } else {
            None
        };
        if let Some(problem) = problem {
            report.add(&tune.path("metric"), &metric_item.origin, problem);
            return Some(Vec::new());
        }
    }
    Some(metrics.into_iter().zip(modes).map(|(metric, mode)| Objective { metric, mode }).collect())
}

/// What a registered train function declares, against the file: its params (names, types,
/// ranges) and the metrics it reports (every metric name the sweep relies on).
fn check_declared(
    t: &super::Trainable,
    root: &Item,
    space: Option<(&Item, &SearchSpace)>,
    scheduler: Option<&Component>,
    run: &RunParts,
    report: &mut Report<'_>,
) {
    if let Some((item, space)) = space {
        for (key, param) in space.iter() {
            if let Some(why) = t.check_param(key, param) {
                report.add(&format!("param_space.{key}"), param_origin(item, key), why);
            }
        }
    }
    let mut named: Vec<(String, &str)> = Vec::new();
    match find_key(root, "tune.metric").map(|i| &i.kind) {
        Some(Kind::Str(metric)) => named.push(("tune.metric".into(), metric)),
        Some(Kind::Array(items)) => named.extend(items.iter().filter_map(|i| match &i.kind {
            Kind::Str(metric) => Some(("tune.metric".into(), metric.as_str())),
            _ => None,
        })),
        _ => {}
    }
    if let Some(attr) = scheduler.and_then(|s| s.text("time_attr")) {
        named.push(("tune.scheduler.time_attr".into(), attr));
    }
    for metric in run.stop.keys() {
        named.push((format!("run.stop.{metric}"), metric));
    }
    if let Some(attribute) = &run.checkpoint.score_attribute {
        named.push(("run.checkpoint.score_attribute".into(), attribute));
    }
    for (key, metric) in named {
        if let Some(why) = t.check_metric(metric) {
            let origin = doc::find(root, &key)
                .or_else(|| doc::find(root, key.rsplit_once('.').map_or("", |(up, _)| up)))
                .map_or(root.origin.clone(), |(o, _)| o.clone());
            report.add(&key, &origin, why);
        }
    }
}

/// Whether a trial of `scaling` fits this machine (and its GPUs are usable), for a sweep run
/// here: checked with the file's other mistakes, by the check the Tuner makes before any trial.
fn fits_here(scaling: &ScalingConfig, run: &RunParts, root: &Item, report: &mut Report<'_>) {
    let mut add = |field: &str, message: String| {
        let key = crate::exit::sweep_key(field).unwrap_or_else(|| "scaling".into());
        let origin = doc::find(root, &key)
            .or_else(|| doc::find(root, "scaling"))
            .map_or(&root.origin, |(origin, _)| origin);
        report.add(&key, origin, message);
    };
    if let Err(e) = scaling.validate() {
        return match e {
            rtune_driver::error::Error::Config { field, message } => add(field, message),
            other => add("scaling", other.to_string()),
        };
    }
    let here = RunConfig { cluster: run.cluster.clone(), ..RunConfig::default() };
    if here.resolved_cluster().is_some() {
        return;
    }
    match rtune_driver::runtime::Driver::get().and_then(|driver| driver.check_local(scaling)) {
        Ok(()) => {}
        Err(rtune_driver::error::Error::Config { message, .. }) => add("scaling", message),
        Err(other) => add("scaling", other.to_string()),
    }
}

fn find_key<'i>(root: &'i Item, key: &str) -> Option<&'i Item> {
    doc::find(root, key).map(|(_, item)| item)
}

/// A count of at least 1 and at most `max` at `key`: none (refused) outside.
fn positive(
    fields: &mut Fields<'_>,
    key: &'static str,
    max: usize,
    report: &mut Report<'_>,
) -> Option<usize> {
    let n = fields.value::<i64>(key, report)?;
    match usize::try_from(n) {
        Ok(n) if (1..=max).contains(&n) => Some(n),
        _ => {
            fields.refuse(key, format!("is {n}; use 1 to {max}"), report);
            None
        }
    }
}

/// `[trainable]`: a registered train function (`builtin`) with its defaults, or a command
/// (`command`, `working_dir` relative to the sweep file's folder, `stop_grace_s`).
fn read_trainable(
    item: &Item,
    registry: &Trainables,
    base_dir: &Path,
    report: &mut Report<'_>,
) -> Option<TorchTrainer> {
    let mut fields = Fields::of(item, "trainable", report);
    let builtin = fields.get("builtin");
    let command =
        fields.get("command").map(|c| (c, fields.value::<Vec<String>>("command", report)));
    let working_dir = fields.value::<String>("working_dir", report);
    let stop_grace = fields.value::<f64>("stop_grace_s", report);
    let stop_grace_s = stop_grace.and_then(|grace| match rtune_driver::config::duration(grace) {
        Ok(d) => Some(d),
        Err(why) => {
            fields.refuse("stop_grace_s", why, report);
            None
        }
    });
    let command_only =
        [("working_dir", working_dir.is_some()), ("stop_grace_s", stop_grace.is_some())];
    let trainer = match (builtin, command) {
        (Some(_), Some((c, _))) => {
            let message = "and `trainable.builtin` are both set: give one";
            report.add("trainable.command", &c.origin, message);
            None
        }
        (Some(b), None) => {
            for (key, set) in command_only {
                if set {
                    fields.refuse(
                        key,
                        "is for command trainables (`command = [...]`) only",
                        report,
                    );
                }
            }
            read_builtin(b, registry, report)
        }
        (None, Some((c, argv))) => {
            let argv = argv?;
            let mut command = CommandTrainable::new(argv)
                .working_dir(base_dir.join(working_dir.as_deref().unwrap_or(".")));
            if let Some(grace) = stop_grace_s {
                command = command.stop_grace(grace);
            }
            match command.trainer() {
                Ok(trainer) => Some(trainer),
                Err(rtune_driver::error::Error::Config { field, message }) => {
                    let key = if field == "working_dir" { "working_dir" } else { "command" };
                    fields.refuse(key, message, report);
                    None
                }
                Err(e) => {
                    report.add("trainable.command", &c.origin, e.to_string());
                    None
                }
            }
        }
        (None, None) => {
            let message = format!(
                "needs builtin = one of {}, or command = [\"PROGRAM\", \"ARG\", ...]",
                doc::list(&registry.names())
            );
            report.add("trainable", &item.origin, message);
            None
        }
    };
    fields.done(report);
    trainer
}

fn read_builtin(b: &Item, registry: &Trainables, report: &mut Report<'_>) -> Option<TorchTrainer> {
    let Kind::Str(name) = &b.kind else {
        report.add("trainable.builtin", &b.origin, "must be a string naming a train function");
        return None;
    };
    match registry.get(name) {
        Some(t) => {
            let trainer = TorchTrainer::of(t.train).train_loop_config(t.defaults.clone());
            let with_data = match t.data {
                Some(add) => add(trainer),
                None => Ok(trainer),
            };
            match with_data {
                Ok(trainer) => Some(trainer),
                Err(e) => {
                    report.add("trainable.builtin", &b.origin, format!("its datasets: {e}"));
                    None
                }
            }
        }
        None => {
            let names = registry.names();
            let message = format!(
                "is {name:?}, which this binary does not have; built in: {}{}",
                doc::list(&names),
                doc::did_you_mean(name, &names)
            );
            report.add("trainable.builtin", &b.origin, message);
            None
        }
    }
}

fn read_scaling(item: Option<&Item>, report: &mut Report<'_>) -> Option<ScalingConfig> {
    let mut scaling = ScalingConfig::workers(1);
    let Some(item) = item else { return Some(scaling) };
    let mut fields = Fields::of(item, "scaling", report);
    if let Some(n) = positive(&mut fields, "num_workers", rtune_driver::config::MAX_WORKERS, report)
    {
        scaling.num_workers = n;
    }
    scaling.use_gpu = fields.value::<bool>("use_gpu", report).unwrap_or(false);
    if let Some(resources) = fields.get("resources_per_worker") {
        let path = "scaling.resources_per_worker";
        let Kind::Table(entries) = &resources.kind else {
            report.add(path, &resources.origin, "must be a table, e.g. { CPU = 1, GPU = 0.5 }");
            return None;
        };
        // Any resource name is allowed (custom resources too); amounts are numbers >= 0.
        for (name, origin, amount) in entries {
            match num_of(&amount.kind) {
                Some(x) if x.is_finite() && x >= 0.0 => {
                    scaling.resources_per_worker.insert(name.clone(), x);
                }
                _ => report.add(
                    &format!("{path}.{name}"),
                    origin,
                    "must be a number >= 0 (e.g. CPU = 1, GPU = 0.5)",
                ),
            }
        }
    }
    let strategies = ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"];
    if let Some(s) = fields.one_of("placement_strategy", &strategies, report) {
        scaling.placement_strategy = match s.as_str() {
            "SPREAD" => PlacementStrategy::Spread,
            "STRICT_PACK" => PlacementStrategy::StrictPack,
            "STRICT_SPREAD" => PlacementStrategy::StrictSpread,
            _ => PlacementStrategy::Pack,
        };
    }
    if let Some(s) = fields.one_of("sharding", &["none", "zero1", "zero2"], report) {
        scaling.sharding = rtune_driver::config::Sharding::from_name(&s);
    }
    fields.done(report);
    Some(scaling)
}

/// `search = "tpe"` or `search = { type = "tpe", option = .. }`.
/// The largest count a sweep file may give (trials at once, checkpoints kept).
const MAX_COUNT: usize = 1_000_000_000;

/// A number written as an integer or a float.
fn num_of(kind: &Kind) -> Option<f64> {
    match kind {
        Kind::Int(i) => Some(*i as f64),
        Kind::Float(x) => Some(*x),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(run: &str) -> Result<SweepSpec, String> {
        let text = format!(
            "storage_path = \"s3://exp/sweeps\"\n[trainable]\nbuiltin = \"synthetic-curve\"\n\
             [tune]\nmetric = \"score\"\nmode = \"max\"\n[run]\n{run}\n"
        );
        let source = Source { name: "sweep.toml".into(), text };
        SweepSpec::read(&source, &[], &crate::program::registry::declared_builtins())
            .map_err(|p| p.to_string())
    }

    fn read_scaling(scaling: &str) -> Result<SweepSpec, String> {
        let text = format!(
            "[trainable]\nbuiltin = \"digits-mlp\"\n[scaling]\n{scaling}\n\
             [tune]\nmetric = \"val_acc\"\nmode = \"max\"\n"
        );
        let source = Source { name: "sweep.toml".into(), text };
        SweepSpec::read(&source, &[], &crate::program::registry::declared_builtins())
            .map_err(|p| p.to_string())
    }

    /// A searcher that models the space (TPE, BOHB, NSGA-II), handed the file's param space as
    /// the Tuner hands it, refuses a grid in it at `param_space`, before anything runs.
    #[test]
    fn a_grid_for_a_modelling_searcher_is_refused_at_the_param_space() {
        for search in ["tpe", "bohb", "nsga2"] {
            let text = format!(
                "[trainable]\nbuiltin = \"synthetic-curve\"\n[param_space]\n\
                 rate = {{ grid_search = [0.1, 0.2] }}\n[tune]\nmetric = \"score\"\n\
                 mode = \"max\"\nsearch = \"{search}\"\n"
            );
            let source = Source { name: "sweep.toml".into(), text };
            let registry = crate::program::registry::declared_builtins();
            let err = SweepSpec::read(&source, &[], &registry).unwrap_err().to_string();
            assert!(err.contains("param_space") && err.contains("grid"), "{search}: {err}");
        }
        let fine = "[trainable]\nbuiltin = \"synthetic-curve\"\n[param_space]\n\
                    rate = { uniform = [0.1, 0.2] }\n[tune]\nmetric = \"score\"\n\
                    mode = \"max\"\nsearch = \"tpe\"\n";
        let source = Source { name: "sweep.toml".into(), text: fine.into() };
        let spec = SweepSpec::read(&source, &[], &crate::program::registry::declared_builtins());
        assert!(spec.is_ok(), "{:?}", spec.err().map(|p| p.to_string()));
    }

    /// `[scaling] sharding` reaches the trials' `ScalingConfig`; other names are refused at
    /// their key and line.
    #[test]
    fn sharding_is_read_and_mistakes_are_refused() {
        use rtune_driver::config::Sharding;
        let sharding = |text: &str| read_scaling(text).map(|s| s.scaling.sharding);
        assert_eq!(sharding("num_workers = 2\nsharding = \"zero2\""), Ok(Some(Sharding::Zero2)));
        assert_eq!(sharding("sharding = \"zero1\""), Ok(Some(Sharding::Zero1)));
        assert_eq!(sharding("sharding = \"none\""), Ok(None));
        assert_eq!(sharding(""), Ok(None));
        let err = read_scaling("sharding = \"zero3\"").unwrap_err();
        assert!(err.contains("sweep.toml:4:12: `scaling.sharding` is \"zero3\""), "{err}");
        assert!(err.contains("allowed: `none`, `zero1`, `zero2`"), "{err}");
    }

    /// `[run] store` reaches the run's settings; credentials and a URL that is no server's are
    /// refused at their key.
    #[test]
    fn store_settings_are_read_and_credentials_refused() {
        let spec = read(
            "store = { endpoint = \"http://127.0.0.1:9000\", region = \"eu-west-1\", \
             retry_timeout_s = 2.5 }",
        )
        .unwrap();
        let store = spec.run_config().store;
        assert_eq!(store.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(store.region.as_deref(), Some("eu-west-1"));
        assert_eq!(store.retry_timeout, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(read("").unwrap().run_config().store, StoreSettings::default());

        let err = read("store = { secret_access_key = \"x\" }").unwrap_err();
        assert!(err.contains("run.store.secret_access_key") && err.contains("AWS_"), "{err}");
        let err = read("store = { endpoint = \"127.0.0.1:9000\" }").unwrap_err();
        assert!(err.contains("run.store.endpoint") && err.contains("http://"), "{err}");
        let err = read("store = { retry_timeout_s = 0 }").unwrap_err();
        assert!(err.contains("run.store.retry_timeout_s") && err.contains("> 0"), "{err}");
        let err = read("store = { endpont = \"http://x\" }").unwrap_err();
        assert!(err.contains("endpoint"), "the nearest key is named: {err}");
    }
}
