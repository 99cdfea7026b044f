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
//! search = { type = "tpe", n_startup_trials = 6 }    # or "random"; none: "auto" picks
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

use std::path::{Path, PathBuf};

mod components;
mod datasets;
mod guesses;
pub(crate) mod keys;
mod space;

use rtune_searchers::{Mode, Objective, Objectives, SearchSpace};

use super::registry::Trainables;
use crate::doc::{self, Item, Kind, Origin, Problems, Report, Source};
pub use components::Component;
use components::{AUTO, SCHEDULERS, SEARCHERS, check_components, read_component};
pub use keys::MlflowSettings;
use rtune_driver::config::{RunConfig, ScalingConfig};
use rtune_driver::error::Error;
use rtune_driver::setting::{Field, Setting};
use rtune_driver::train::CommandTrainable;
use rtune_driver::train::TorchTrainer;
use rtune_driver::tune::{Control, Samples, TuneConfig, TuneSettings, Tuner};
use space::{param_origin, read_space};

/// A valid sweep file.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// The top-level keys and `[run]`'s, as the run's settings (its trackers aside).
    pub run: RunConfig,
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
    /// Why `search = "auto"` (the default) chose `search`; None where the file names one.
    pub auto: Option<String>,
    pub scheduler: Component,
    /// `[run.mlflow]`: the MLflow tracking server the sweep is also logged to.
    pub mlflow: Option<MlflowSettings>,
    /// `[run] optuna`: the Optuna journal file the sweep is also written to, as a study.
    pub optuna: Option<PathBuf>,
    /// `[run] tensorboard`: each trial's results as TensorBoard event files (`tensorboard
    /// --logdir EXPERIMENT`).
    pub tensorboard: bool,
    /// `[run] metrics`: where the sweep's Prometheus endpoint listens (`HOST:PORT`).
    pub metrics: Option<String>,
    /// What a tree library's trials report (`valid-mlogloss`..), as its probe found; empty for
    /// another trainable (it declares its own, or not).
    pub reports: Vec<String>,
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

    /// The trainer: the registered function, its defaults as `train_loop_config`, and the
    /// scaling (the Tuner merges each trial's params over the defaults, and gives each trial
    /// its run config, the one `run_config` made for the sweep).
    pub fn trainer(&self) -> TorchTrainer {
        self.trainable.clone().scaling(self.scaling.clone())
    }

    /// The run's settings with its trackers (made anew: they hold state; once per sweep, for
    /// its Tuner) and the cluster's token.
    pub fn run_config(&self) -> RunConfig {
        let mut run = self.run.clone();
        if let Some(mlflow) = &self.mlflow {
            run = run.callback(mlflow.logger());
        }
        if let Some(journal) = &self.optuna {
            run = run.callback(rtune_driver::callback::OptunaJournal::new(journal));
        }
        if self.tensorboard {
            run = run.callback(rtune_driver::callback::TensorBoardLogger::new());
        }
        if let Some(address) = self.run.cluster.clone() {
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
    let file = keys::read(root, report);
    let trainable = read_trainable(&file, root, registry, base_dir, report);
    // The whole space, and its params that read (checked against the trainable even when
    // another one is a mistake: all mistakes come in one report).
    let (space, readable) = match file.param_space {
        Some(item) => read_space(item, "param_space", report),
        None => (Some(SearchSpace::new()), SearchSpace::new()),
    };
    // None where metric or mode is not written; empty where what is written is a mistake
    // (reported).
    let written = read_objectives(file.metric, file.mode, report);
    let objectives = Objectives::from(written.clone().unwrap_or_default());
    // No objective to rank by: none written, or a metric without its mode (or a mode without
    // its metric), which is said where it is written and where it is needed.
    let unranked = written.is_none() || file.metric.is_some() != file.mode.is_some();
    let search = read_component(file.search, "search", SEARCHERS, AUTO, report);
    let scheduler = read_component(file.scheduler, "scheduler", SCHEDULERS, "fifo", report);
    let tune = TuneSettings {
        metric: objectives.metric().map(str::to_owned),
        mode: objectives.mode(),
        objectives: objectives.several().to_vec(),
        ..file.tune.clone()
    };
    // `auto` (the default) is the searcher it picks from here on; the start line says why.
    let (search, auto) = match (search, &space, &scheduler) {
        (Some(c), Some(space), Some(scheduler)) if c.kind == AUTO => {
            let (kind, why) = components::auto(space, &tune, &scheduler.kind);
            (Some(Component::plain(kind)), Some(why))
        }
        (Some(c), _, _) if c.kind == AUTO => (Some(Component::plain("random")), None),
        (other, _, _) => (other, None),
    };
    // What each value may be, as the library checks it, at the key that gave it.
    let scaling_problems = file.scaling.problems();
    for (setting, message) in
        [&scaling_problems[..], &tune.problems(), &file.run.problems()].concat()
    {
        let key = setting.key();
        report.add(key, &place(root, key), message);
    }
    if scaling_problems.is_empty()
        && let Err(e) = file.scaling.check_placement(&file.run)
    {
        add_error(e, "scaling", root, report);
    }
    // Unbounded: random sampling never runs out, and neither does TPE.
    if tune.num_samples == Samples::UntilStopped && tune.time_budget_s.is_none() {
        let message = "is -1 (unbounded): set tune.time_budget_s too";
        report.add(Setting::NumSamples.key(), &place(root, Setting::NumSamples.key()), message);
    }
    let tune_origin = place(root, "tune");
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
                let path = format!("tune.{key}");
                let message = format!(
                    "is `{}`, which ranks trials by one metric, and tune.metric names {} \
                     objectives; several objectives take {}",
                    c.kind,
                    objectives.len(),
                    takes.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(" or ")
                );
                report.add(&path, &place(root, &path), message);
            }
        }
    }
    if here && scaling_problems.is_empty() {
        fits_here(&file, root, report);
    }
    if let Some(journal) = &file.optuna {
        let at = place(root, Setting::Optuna.key());
        if let Err(why) = rtune_driver::callback::OptunaJournal::new(journal).check() {
            report.add(Setting::Optuna.key(), &at, format!("is {journal:?}: {why}"));
        }
        if unranked {
            let why = "needs tune.metric and tune.mode: an Optuna study has one objective (e.g. \
                       metric = \"val_acc\", mode = \"max\")";
            report.add(Setting::Optuna.key(), &at, why);
        }
    }
    if let Some(address) = &file.metrics {
        let token = std::env::var(rtune_driver::config::TOKEN_ENV).ok();
        if let Err(why) = rtune_driver::monitor::check_address(address, token.as_deref()) {
            report.add(Setting::Metrics.key(), &place(root, Setting::Metrics.key()), why);
        }
    }
    let mlflow = file.wrote(Setting::Mlflow.key()).then(|| file.mlflow.clone());
    if let Some(Err(why)) = mlflow.as_ref().map(|m| m.logger().tracking_uri()) {
        report.add(
            Setting::MlflowTrackingUri.key(),
            &place(root, Setting::MlflowTrackingUri.key()),
            why,
        );
    }
    let builtin = match file.builtin.map(|item| &item.kind) {
        Some(Kind::Str(name)) => Some(name.clone()),
        _ => None,
    };
    // A misspelt builtin (refused, with the nearest name) stands for that one here, so that the
    // file's mistakes against it come in the same report.
    let declared = builtin.as_deref().and_then(|b| {
        registry.get(b).or_else(|| {
            rtune_driver::config::nearest(b, &registry.names()).and_then(|n| registry.get(n))
        })
    });
    let reports = match declared {
        Some(t) => {
            let space = file.param_space.zip(Some(&readable));
            check_declared(t, root, space, scheduler.as_ref(), &file, report)
        }
        None => Vec::new(),
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
    let command = find_key(root, Setting::Command.key()).map(|c| {
        let dir = find_key(root, Setting::WorkingDir.key()).map(doc::to_value);
        format!("{} in {}", doc::to_value(c), dir.map_or(".".into(), |d| d.to_string()))
    });
    Some(SweepSpec {
        run: file.run,
        trainable: trainable?,
        builtin,
        command,
        scaling: file.scaling,
        space: space?,
        tune,
        search,
        auto,
        scheduler,
        mlflow,
        optuna: file.optuna,
        tensorboard: file.tensorboard,
        metrics: file.metrics,
        reports,
    })
}

/// Where a mistake at `key` is said: where its value is written (a table: its key), else where
/// the nearest table above it is, else the file's start.
fn place(root: &Item, key: &str) -> Origin {
    match doc::find(root, key) {
        Some((origin, Item { kind: Kind::Table(_), .. })) => return origin.clone(),
        Some((_, item)) => return item.origin.clone(),
        None => {}
    }
    let mut up = key;
    while let Some((parent, _)) = up.rsplit_once('.') {
        if let Some((origin, _)) = doc::find(root, parent) {
            return origin.clone();
        }
        up = parent;
    }
    root.origin.clone()
}

/// `tune.metric` and `tune.mode`: one metric and its mode, or arrays of as many (several
/// objectives); None where either is not written. A mistake is reported, and reads as none.
fn read_objectives(
    metric_item: Option<&Item>,
    mode_item: Option<&Item>,
    report: &mut Report<'_>,
) -> Option<Vec<Objective>> {
    fn list<'i>(
        item: Option<&'i Item>,
        what: &str,
        path: &str,
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
            report.add(path, &item.origin, message);
        }
        texts.map(|t| (t, item))
    }
    let metrics = list(metric_item, "a metric name", Setting::Metric.key(), report);
    let modes = match mode_item {
        // One mode: a mistake in it gets the nearest allowed.
        Some(item @ Item { kind: Kind::Str(_), .. }) => keys::At::new(Setting::Mode.key(), item)
            .one_of(&["max", "min"], report)
            .map(|m| (vec![m.to_owned()], item)),
        _ => list(mode_item, "\"max\" or \"min\"", Setting::Mode.key(), report),
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
            report.add(Setting::Mode.key(), &item.origin, message);
        }
        read.map(|r| (r, item))
    });
    let (Some((metrics, _)), Some((modes, mode_item))) = (metrics, modes) else {
        return match (metric_item, mode_item) {
            (Some(metric), None) => {
                let message = format!(
                    "is {} without tune.mode: add mode = \"min\" or mode = \"max\" (one for each \
                     metric)",
                    doc::to_value(metric)
                );
                report.add(Setting::Metric.key(), &metric.origin, message);
                Some(Vec::new())
            }
            (None, Some(mode)) => {
                let message = "is given without tune.metric: name the metric it is the mode of";
                report.add(Setting::Mode.key(), &mode.origin, message);
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
        report.add(Setting::Mode.key(), &mode_item.origin, message);
        return Some(Vec::new());
    }
    Some(metrics.into_iter().zip(modes).map(|(metric, mode)| Objective { metric, mode }).collect())
}

/// What a registered train function declares, against the file: its params (names, types,
/// ranges) and the metrics it reports (every metric name the sweep relies on). The metrics a
/// tree library's probe found it reports (none for another trainable).
fn check_declared(
    t: &super::Trainable,
    root: &Item,
    space: Option<(&Item, &SearchSpace)>,
    scheduler: Option<&Component>,
    file: &keys::SweepFile<'_>,
    report: &mut Report<'_>,
) -> Vec<String> {
    if let Some((item, space)) = space {
        for (key, param) in space.iter() {
            if let Some(why) = t.check_param(key, param) {
                report.add(&format!("param_space.{key}"), param_origin(item, key), why);
            }
        }
    }
    let datasets = datasets::names(file.datasets);
    // A tree library's probe: its refusals, and the metrics each dataset then reports.
    let probed = space.and_then(|(item, space)| Some((item, t.probe_space(space)?)));
    let from_probe = probed.is_some();
    let probed_trainable;
    let t = match probed {
        Some((item, probed)) => {
            let refused = !probed.problems.is_empty();
            for (key, why) in probed.problems {
                match key.as_str() {
                    "" => report.add("trainable.builtin", &place(root, "trainable.builtin"), why),
                    key => report.add(&format!("param_space.{key}"), param_origin(item, key), why),
                }
            }
            if refused {
                return Vec::new();
            }
            let metrics = datasets
                .iter()
                .flat_map(|d| probed.metrics.iter().map(move |m| format!("{d}-{m}")))
                .collect();
            probed_trainable = t.reporting(metrics);
            &probed_trainable
        }
        None => t,
    };
    let mut named: Vec<(String, &str)> = Vec::new();
    match find_key(root, Setting::Metric.key()).map(|i| &i.kind) {
        Some(Kind::Str(metric)) => named.push((Setting::Metric.key().into(), metric)),
        Some(Kind::Array(items)) => named.extend(items.iter().filter_map(|i| match &i.kind {
            Kind::Str(metric) => Some((Setting::Metric.key().into(), metric.as_str())),
            _ => None,
        })),
        _ => {}
    }
    // A constraint never reported makes every trial infeasible: named as a metric is.
    if let Some(Kind::Array(items)) = find_key(root, Setting::Constraints.key()).map(|i| &i.kind) {
        named.extend(items.iter().filter_map(|i| match &i.kind {
            Kind::Str(metric) => Some((Setting::Constraints.key().into(), metric.as_str())),
            _ => None,
        }));
    }
    if let Some(attr) = scheduler.and_then(|s| s.text("time_attr")) {
        named.push(("tune.scheduler.time_attr".into(), attr));
    }
    for metric in file.run.stop.keys() {
        named.push((format!("run.stop.{metric}"), metric));
    }
    if let Some(attribute) = &file.run.checkpoint_config.score_attribute {
        named.push((Setting::ScoreAttribute.key().into(), attribute));
    }
    let dataset_names: Vec<&str> = datasets.iter().map(String::as_str).collect();
    for (key, metric) in named {
        if let Some(why) = t.check_metric(metric) {
            // `valid-mlogloss` where the file names its dataset `valdi`: said there too.
            let dataset = metric.split_once('-').map(|(d, _)| d);
            let names = &dataset_names;
            if let Some(near) = dataset.and_then(|d| rtune_driver::config::nearest(d, names))
                && let Some((origin, _)) = doc::find(root, &format!("datasets.{near}"))
            {
                let message = format!(
                    "is the dataset nearest `{}`, which `{key}` names in `{metric}`: rename one of \
                     them",
                    dataset.unwrap_or_default()
                );
                report.add(&format!("datasets.{near}"), origin, message);
            }
            let origin = doc::find(root, &key)
                .or_else(|| doc::find(root, key.rsplit_once('.').map_or("", |(up, _)| up)))
                .map_or(root.origin.clone(), |(o, _)| o.clone());
            report.add(&key, &origin, why);
        }
    }
    match from_probe {
        true => t.metrics.clone(),
        false => Vec::new(),
    }
}

/// Whether a trial fits this machine (and its GPUs are usable), for a sweep run here: checked
/// with the file's other mistakes, by the check the Tuner makes before any trial.
fn fits_here(file: &keys::SweepFile<'_>, root: &Item, report: &mut Report<'_>) {
    if file.run.resolved_cluster().is_some() {
        return;
    }
    let fits =
        rtune_driver::runtime::Driver::get().and_then(|driver| driver.check_local(&file.scaling));
    if let Err(e) = fits {
        add_error(e, "scaling", root, report);
    }
}

/// A library error, said at the key of the setting it names (else at `otherwise`).
fn add_error(e: Error, otherwise: &'static str, root: &Item, report: &mut Report<'_>) {
    let (key, message) = match e {
        Error::Config { field: Field::Setting(setting), message } => (setting.key(), message),
        Error::Config { message, .. } => (otherwise, message),
        other => (otherwise, other.to_string()),
    };
    report.add(key, &place(root, key), message);
}

fn find_key<'i>(root: &'i Item, key: &str) -> Option<&'i Item> {
    doc::find(root, key).map(|(_, item)| item)
}

/// `[trainable]`: a registered train function (`builtin`) with its defaults, or a command
/// (`command`, `working_dir` relative to the sweep file's folder, `stop_grace_s`).
fn read_trainable(
    file: &keys::SweepFile<'_>,
    root: &Item,
    registry: &Trainables,
    base_dir: &Path,
    report: &mut Report<'_>,
) -> Option<TorchTrainer> {
    let names = || doc::list(&registry.names());
    if !file.wrote("trainable") {
        let message = format!(
            "is missing: add [trainable] with builtin = one of {}, or command = [...]",
            names()
        );
        report.add("trainable", &root.origin, message);
        return None;
    }
    let command_only = [Setting::WorkingDir.key(), Setting::StopGrace.key()];
    match (file.builtin, file.wrote(Setting::Command.key())) {
        (Some(_), true) => {
            let message = "and `trainable.builtin` are both set: give one";
            report.add(Setting::Command.key(), &place(root, Setting::Command.key()), message);
            None
        }
        (Some(b), false) => {
            for key in command_only.into_iter().filter(|key| file.wrote(key)) {
                let message = "is for command trainables (`command = [...]`) only";
                report.add(key, &place(root, key), message);
            }
            let trainer = read_builtin(b, registry, file.datasets.is_some(), report);
            match file.datasets {
                Some(item) => datasets::read(item, base_dir, trainer?, report),
                None => trainer,
            }
        }
        (None, true) => {
            if let Some(item) = file.datasets {
                let message = "are for builtins: a command trainable reads its own data";
                report.add(Setting::Datasets.key(), &item.origin, message);
            }
            let argv = file.command.clone()?;
            let mut command = CommandTrainable::new(argv)
                .working_dir(base_dir.join(file.working_dir.as_deref().unwrap_or(".")));
            if let Some(grace) = file.stop_grace {
                command = command.stop_grace(grace);
            }
            command.trainer().map_err(|e| add_error(e, Setting::Command.key(), root, report)).ok()
        }
        (None, false) => {
            let message = format!(
                "needs builtin = one of {}, or command = [\"PROGRAM\", \"ARG\", ...]",
                names()
            );
            report.add("trainable", &place(root, "trainable"), message);
            None
        }
    }
}

/// The builtin `b` names, with its own datasets unless the file gives them (`given`).
fn read_builtin(
    b: &Item,
    registry: &Trainables,
    given: bool,
    report: &mut Report<'_>,
) -> Option<TorchTrainer> {
    let Kind::Str(name) = &b.kind else {
        report.add("trainable.builtin", &b.origin, "must be a string naming a train function");
        return None;
    };
    match registry.get(name) {
        Some(t) => {
            let trainer = t.trainer();
            let with_data = match t.data.filter(|_| !given) {
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

    /// A file without `search` runs `auto`'s pick and says why; `search = "auto"` is the same;
    /// `auto` takes no options; a wrong name lists it first.
    #[test]
    fn auto_is_the_default_search() {
        let spec = |text: String| {
            let source = Source { name: "sweep.toml".into(), text };
            SweepSpec::read(&source, &[], &crate::program::registry::declared_builtins())
                .map_err(|p| p.to_string())
        };
        let file = |search: &str| {
            format!(
                "[trainable]\nbuiltin = \"synthetic-curve\"\n[param_space]\n\
                 rate = {{ uniform = [0.1, 0.9] }}\n[tune]\nmetric = \"score\"\n\
                 mode = \"max\"\nnum_samples = 40\n{search}"
            )
        };
        for search in ["", "search = \"auto\"\n"] {
            let spec = spec(file(search)).unwrap();
            assert_eq!(spec.search.kind, "gp");
            assert_eq!(
                spec.search_said(),
                "gp (search = \"auto\": 1 numeric params and 40 trials)"
            );
        }
        // Past 200 trials over numeric params, CMA-ES; with constraints (it takes none), the
        // GP.
        let many = |extra: &str| file(extra).replace("num_samples = 40", "num_samples = 300");
        assert_eq!(spec(many("")).unwrap().search.kind, "cmaes");
        let constrained = spec(many("constraints = [\"loss\"]\n")).unwrap();
        assert_eq!(constrained.search.kind, "gp", "{:?}", constrained.auto);
        let named = spec(file("search = \"tpe\"\n")).unwrap();
        assert_eq!((named.search.kind.as_str(), named.auto.as_deref()), ("tpe", None));
        let err = spec(file("search = { type = \"auto\", seed = 1 }\n")).unwrap_err();
        assert!(err.contains("is not an option of search `auto`, which takes none"), "{err}");
        let err = spec(file("search = \"autp\"\n")).unwrap_err();
        assert!(err.contains("allowed: `auto`, `random`") && err.contains("`auto`?"), "{err}");
    }

    /// A searcher that models the space (TPE, BOHB, NSGA-II), handed the file's param space as
    /// the Tuner hands it, refuses a grid in it at `param_space`, before anything runs.
    #[test]
    fn a_grid_for_a_modelling_searcher_is_refused_at_the_param_space() {
        for search in ["tpe", "bohb", "nsga2", "cmaes", "gp"] {
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

    /// CMA-ES's and the GP's mistakes are refused before anything runs, each at its key: a
    /// space with no numeric param (at `param_space`), a restart strategy CMA-ES does not know,
    /// no start-up trials for the GP; their options are read otherwise.
    #[test]
    fn cmaes_and_gp_options_and_mistakes() {
        let sweep = |space: &str, search: &str| {
            let text = format!(
                "[trainable]\nbuiltin = \"synthetic-curve\"\n[param_space]\n{space}\n[tune]\n\
                 metric = \"score\"\nmode = \"max\"\nsearch = {search}\n"
            );
            let source = Source { name: "sweep.toml".into(), text };
            let registry = crate::program::registry::declared_builtins();
            SweepSpec::read(&source, &[], &registry).map_err(|p| p.to_string())
        };
        let numeric = "rate = { uniform = [0.1, 0.2] }";
        let fine = "{ type = \"cmaes\", restart = \"bipop\", popsize = 8, sigma0 = 0.2 }";
        assert!(sweep(numeric, fine).is_ok(), "{:?}", sweep(numeric, fine).err());
        let err = sweep("act = { choice = [\"relu\", \"tanh\"] }", "\"cmaes\"").unwrap_err();
        assert!(err.contains("param_space") && err.contains("no numeric parameter"), "{err}");
        let err = sweep(numeric, "{ type = \"cmaes\", restart = \"pipop\" }").unwrap_err();
        assert!(err.contains("tune.search.restart") && err.contains("bipop"), "{err}");
        // The GP's options, and one it refuses.
        let gp = "{ type = \"gp\", n_startup_trials = 5, n_candidates = 512 }";
        assert!(sweep(numeric, gp).is_ok(), "{:?}", sweep(numeric, gp).err());
        let err = sweep(numeric, "{ type = \"gp\", n_startup_trials = 0 }").unwrap_err();
        assert!(err.contains("tune.search.n_startup_trials"), "{err}");
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

    /// `[scaling] num_workers` is a count or an elastic group's `{ min, max }`; a table with
    /// anything else, or a bad group, is refused at the key, in sweep-file terms.
    #[test]
    fn num_workers_is_a_count_or_an_elastic_range() {
        use rtune_driver::config::ScalingConfig;
        let scaling = |text: &str| read_scaling(text).map(|s| s.scaling);
        assert_eq!(scaling("num_workers = 3"), Ok(ScalingConfig::workers(3)));
        assert_eq!(scaling("num_workers = { min = 2, max = 4 }"), Ok(ScalingConfig::elastic(2, 4)));
        for (text, says) in [
            ("num_workers = { min = 2 }", "needs both: { min = N, max = M }"),
            ("num_workers = { min = 2, most = 4 }", "has `most`"),
            ("num_workers = { min = 2, max = -1 }", "`max` is -1; use an integer >= 0"),
            ("num_workers = { min = 3, max = 2 }", "max must be at least min"),
            ("num_workers = { min = 0, max = 2 }", "min must be at least 1"),
            ("num_workers = \"two\"", "an integer >= 0, or { min = N, max = M }"),
        ] {
            let err = read_scaling(text).unwrap_err();
            assert!(err.contains("scaling.num_workers") && err.contains(says), "{text}: {err}");
        }
    }

    /// `[run] store` reaches the run's settings; credentials and a URL that is no server's are
    /// refused at their key.
    #[test]
    fn store_settings_are_read_and_credentials_refused() {
        let spec = read(
            "store = { endpoint = \"http://127.0.0.1:9000\", region = \"eu-west-1\", \
             retry_timeout_s = 2.5, connections = 32 }",
        )
        .unwrap();
        let store = spec.run_config().store;
        assert_eq!(store.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(store.region.as_deref(), Some("eu-west-1"));
        assert_eq!(store.retry_timeout, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(store.connections, Some(32));
        assert_eq!(read("").unwrap().run_config().store, Default::default());

        let err = read("store = { secret_access_key = \"x\" }").unwrap_err();
        assert!(err.contains("run.store.secret_access_key") && err.contains("AWS_"), "{err}");
        let err = read("store = { endpoint = \"127.0.0.1:9000\" }").unwrap_err();
        assert!(err.contains("run.store.endpoint") && err.contains("http://"), "{err}");
        let err = read("store = { retry_timeout_s = 0 }").unwrap_err();
        assert!(err.contains("run.store.retry_timeout_s") && err.contains("> 0"), "{err}");
        let err = read("store = { connections = 0 }").unwrap_err();
        assert!(err.contains("run.store.connections") && err.contains("1 to 256"), "{err}");
        let err = read("store = { endpont = \"http://x\" }").unwrap_err();
        assert!(err.contains("endpoint"), "the nearest key is named: {err}");
    }
}
