//! What the terminal UI shows: the sweep as events (a live sweep's callbacks) or files (`rtune
//! watch DIR`) describe it, and the viewer's choices (selection, sort, filter). No drawing here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rtune_searchers::{Metrics, Mode, Objectives, SchedulerStatus, TrialStatus};

use super::format::{param_text, status_name};
use rtune_driver::callback::{Callback, ExperimentInfo, TrialInfo};
use rtune_driver::cluster::pool::GpuUsage;
use rtune_driver::error::Result;
use rtune_driver::outcome::error_summary;
use rtune_driver::tune::ResultGrid;

/// One trial as the table and the chart show it.
#[derive(Debug, Clone)]
pub struct TrialRow {
    pub id: String,
    pub status: TrialStatus,
    /// Flattened params, written short.
    pub params: Vec<(String, String)>,
    /// The latest result.
    pub last: Metrics,
    /// (training_iteration, metric) of every result: the learning curve.
    pub curve: Vec<(f64, f64)>,
    pub path: PathBuf,
    pub error: Option<String>,
}

impl TrialRow {
    /// A trial's params and results as the table shows them: the params written short, the
    /// last result, and the curve of the `charted` metric. Not yet started, with no id.
    fn of(params: &rtune_searchers::Params, history: &[Metrics], charted: Option<&str>) -> Self {
        let curve = charted.map_or(Vec::new(), |m| {
            let point = |r: &Metrics| Some((*r.get("training_iteration")?, *r.get(m)?));
            history.iter().filter_map(point).collect()
        });
        TrialRow {
            id: String::new(),
            status: TrialStatus::Pending,
            params: params.flatten().iter().map(|(k, v)| (k.clone(), param_text(v))).collect(),
            last: history.last().cloned().unwrap_or_default(),
            curve,
            path: PathBuf::new(),
            error: None,
        }
    }
}

/// The sweep.
#[derive(Debug, Clone)]
pub struct Model {
    pub name: String,
    pub path: PathBuf,
    /// What the sweep optimises: nothing, one metric (the best trial is marked), or several
    /// (the table marks their Pareto front).
    pub objectives: Objectives,
    /// Metrics a trial's last result must hold at <= 0 to be the best or on the front.
    pub constraints: Vec<String>,
    /// Trials the sweep was set up for (`None`: until its time budget ends).
    pub total: Option<u64>,
    pub time_budget_s: Option<f64>,
    /// Seconds the sweep has run.
    pub(crate) elapsed_s: f64,
    /// In the order they were first heard of; `index` finds them by id (one lookup per event,
    /// however many trials the sweep has).
    trials: Vec<TrialRow>,
    index: HashMap<String, usize>,
    /// CPUs (and GPUs) one trial holds, and the machine's, for the pool bars.
    pub per_trial: (f64, f64),
    pub capacity: (f64, f64),
    /// An elastic sweep's trials' (min, max) ranks: the table shows each trial's ranks, and
    /// the pool bar counts what they hold now (`per_trial` is then a group of `min`).
    pub elastic: Option<(usize, usize)>,
    /// The sweep has ended.
    pub over: bool,
    /// The scheduler's decisions so far (ASHA's rungs, PBT's exploits), when it shows any.
    pub scheduler: Option<SchedulerStatus>,
    /// What this machine's GPUs are doing (NVML), for a sweep that uses them here; sampled by
    /// the screen's own loop (`sample_gpus`), not sent by the sweep.
    pub gpus: Vec<GpuUsage>,
}

/// What the viewer chose.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Index into the filtered, sorted rows, where `trial` was when last found (the selection
    /// falls back to it when that trial is no longer shown).
    pub selected: usize,
    /// The selected trial, by id: the selection follows it as the rows re-sort.
    pub trial: Option<String>,
    /// Sort column (0 = trial id), and whether best or largest first.
    pub sort: usize,
    pub descending: bool,
    pub filter: Option<TrialStatus>,
    pub help: bool,
    /// Showing a live sweep (`x` stops it), not files.
    pub live: bool,
}

impl View {
    /// The selected row of `rows` (indices into `model`'s trials, as `Model::rows` gives them):
    /// the selected trial's, wherever it is now; else the row it was in.
    pub(crate) fn selected_row(&self, model: &Model, rows: &[usize]) -> Option<usize> {
        let found = self.trial.as_ref().and_then(|id| {
            rows.iter().position(|&i| model.trials().get(i).is_some_and(|t| t.id == *id))
        });
        let fallback = (!rows.is_empty()).then(|| self.selected.min(rows.len() - 1));
        found.or(fallback)
    }

    /// Selects row `at` of `rows` (clamped), and the trial in it.
    pub fn select(&mut self, model: &Model, rows: &[usize], at: usize) {
        self.selected = at.min(rows.len().saturating_sub(1));
        self.trial = rows.get(self.selected).map(|&i| model.trials()[i].id.clone());
    }
}

/// The filters `f` steps through.
pub(crate) const FILTERS: [Option<TrialStatus>; 7] = [
    None,
    Some(TrialStatus::Pending),
    Some(TrialStatus::Running),
    Some(TrialStatus::Terminated),
    Some(TrialStatus::Error),
    Some(TrialStatus::Paused),
    Some(TrialStatus::Interrupted),
];

impl Model {
    pub fn new(name: String, path: PathBuf, objectives: Objectives) -> Self {
        Model {
            name,
            path,
            objectives,
            constraints: Vec::new(),
            total: None,
            time_budget_s: None,
            elapsed_s: 0.0,
            trials: Vec::new(),
            index: HashMap::new(),
            per_trial: (0.0, 0.0),
            capacity: (0.0, 0.0),
            elastic: None,
            over: false,
            scheduler: None,
            gpus: Vec::new(),
        }
    }

    /// The (CPUs, GPUs) the running trials hold: `per_trial` each, or in an elastic sweep as
    /// many workers' as each one's latest result says it has (`world_size`).
    pub(crate) fn held(&self) -> (f64, f64) {
        let running = self.trials.iter().filter(|t| t.status == TrialStatus::Running);
        match self.elastic {
            None => {
                let n = running.count() as f64;
                (n * self.per_trial.0, n * self.per_trial.1)
            }
            Some((min, _)) => {
                let ranks: f64 =
                    running.map(|t| t.last.get("world_size").copied().unwrap_or(min as f64)).sum();
                let per_worker = |per_trial: f64| per_trial / min.max(1) as f64;
                (ranks * per_worker(self.per_trial.0), ranks * per_worker(self.per_trial.1))
            }
        }
    }

    /// Samples this machine's GPUs into `gpus` (NVML; the devices of a `CUDA_VISIBLE_DEVICES`
    /// list only), when the sweep runs here with GPUs; nothing otherwise, or without NVML.
    pub(crate) fn sample_gpus(&mut self) {
        if self.capacity.1 <= 0.0 {
            return;
        }
        let mut gpus = rtune_driver::sys::nvml::usage().unwrap_or_default();
        if let Some(names) = rtune_driver::cluster::local_devices() {
            gpus.retain(|g| g.named_in(&names));
        }
        self.gpus = gpus;
    }

    pub fn trials(&self) -> &[TrialRow] {
        &self.trials
    }

    /// The trial with this id.
    pub fn get(&self, id: &str) -> Option<&TrialRow> {
        self.index.get(id).map(|&i| &self.trials[i])
    }

    /// Replaces the trials (ones read from files, or another model's).
    pub(crate) fn set_trials(&mut self, rows: Vec<TrialRow>) {
        self.index = rows.iter().enumerate().map(|(i, t)| (t.id.clone(), i)).collect();
        self.trials = rows;
    }

    fn row(&mut self, trial: &TrialInfo) -> &mut TrialRow {
        let index = match self.index.get(&trial.trial_id) {
            Some(&i) => i,
            None => {
                self.trials.push(TrialRow {
                    id: trial.trial_id.clone(),
                    status: trial.status,
                    path: trial.path.clone(),
                    ..TrialRow::of(&trial.params, &[], None)
                });
                self.index.insert(trial.trial_id.clone(), self.trials.len() - 1);
                self.trials.len() - 1
            }
        };
        &mut self.trials[index]
    }

    /// What the sweep's begin event says of it: all the header shows, and a restored sweep's
    /// trials that ended before this driver.
    fn begin(&mut self, experiment: &ExperimentInfo) {
        self.name = experiment.name.clone();
        self.path = experiment.path.clone();
        self.objectives = experiment.objectives.clone();
        self.constraints = experiment.constraints.clone();
        let charted = self.charted().map(str::to_owned);
        let ended = experiment.ended_before.iter().map(|e| TrialRow {
            id: e.trial.trial_id.clone(),
            status: e.trial.status,
            path: e.trial.path.clone(),
            error: e.error.clone(),
            ..TrialRow::of(&e.trial.params, &e.history, charted.as_deref())
        });
        self.set_trials(ended.collect());
        self.total = experiment.trials;
        self.time_budget_s = experiment.time_budget_s;
        self.per_trial = (experiment.per_trial.cpus, experiment.per_trial.gpus);
        self.elastic = experiment.elastic;
        if let Some(capacity) = experiment.capacity {
            self.capacity = (capacity.cpus, capacity.gpus);
        }
    }

    /// A live sweep's event.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Begin(experiment) => self.begin(experiment),
            Event::Start(t) => self.row(t).status = TrialStatus::Running,
            Event::Result(t, metrics) => {
                let metric = self.charted().map(str::to_owned);
                let row = self.row(t);
                row.status = TrialStatus::Running;
                if let (Some(m), Some(&it)) = (metric, metrics.get("training_iteration"))
                    && let Some(&v) = metrics.get(&m)
                {
                    row.curve.push((it, v));
                }
                row.last = metrics.clone();
            }
            Event::Complete(t) => self.row(t).status = TrialStatus::Terminated,
            Event::Error(t, e) => {
                let row = self.row(t);
                row.status = TrialStatus::Error;
                row.error = Some(e.clone());
            }
            Event::Add(t) => self.row(t).status = TrialStatus::Pending,
            Event::Pause(t) => self.row(t).status = TrialStatus::Paused,
            Event::Scheduler(status) => self.scheduler = Some(status.clone()),
            Event::End => {
                self.over = true;
                // A sweep stopped before its end (`x`, Ctrl-C) stopped its trials resumably:
                // none runs or waits now.
                for row in &mut self.trials {
                    if matches!(row.status, TrialStatus::Running | TrialStatus::Pending) {
                        row.status = TrialStatus::Interrupted;
                    }
                }
            }
        }
    }

    /// The experiment in `dir` as its files hold it (`rtune watch`).
    pub fn read(dir: &Path) -> rtune_driver::error::Result<Model> {
        let (grid, time_spent_s) = ResultGrid::read_with_time_spent(dir)?;
        let name = dir.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let mut model = Model::new(name, dir.to_owned(), grid.objectives.clone());
        model.total = crate::inspect::sweep_trials(dir);
        model.time_budget_s = rtune_driver::tune::experiment::Settings::read(dir)
            .ok()
            .and_then(|settings| settings.tune.time_budget_s);
        model.elapsed_s = time_spent_s;
        model.over = dir.join(rtune_driver::tune::RESULTS_PARQUET).exists();
        model.constraints = grid.constraints.clone();
        let charted = model.charted().map(str::to_owned);
        let rows = grid.trials.iter().map(|t| TrialRow {
            id: t.trial_id().to_owned(),
            status: t.status(),
            path: t.path().to_owned(),
            error: t.error().map(str::to_owned),
            ..TrialRow::of(t.params(), t.history(), charted.as_deref())
        });
        let rows = rows.collect();
        model.set_trials(rows);
        Ok(model)
    }

    /// The param names, in first-seen order.
    pub(crate) fn param_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for t in &self.trials {
            for (k, _) in &t.params {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
        names
    }

    /// The metric the learning curves follow: the sweep's, or its first objective.
    pub(crate) fn charted(&self) -> Option<&str> {
        self.objectives.iter().next().map(|o| o.metric.as_str())
    }

    /// The metrics the table shows beside the params: the sweep's, or its objectives.
    pub(crate) fn shown_metrics(&self) -> Vec<&str> {
        self.objectives.iter().map(|o| o.metric.as_str()).collect()
    }

    /// A multi-objective sweep's trials on the Pareto front of their latest results (those
    /// with every objective finite), as indices; empty for other sweeps.
    pub fn front(&self) -> Vec<usize> {
        let several = self.objectives.several();
        if several.is_empty() {
            return Vec::new();
        }
        let modes: Vec<Mode> = several.iter().map(|o| o.mode).collect();
        let feasible: Vec<usize> = (0..self.trials.len())
            .filter(|&i| rtune_searchers::violation(&self.constraints, &self.trials[i].last) == 0.0)
            .collect();
        let front = rtune_searchers::pareto_front_where_finite(&feasible, &modes, |&i, k| {
            self.trials[i].last.get(&several[k].metric).copied()
        });
        front.into_iter().map(|i| feasible[i]).collect()
    }

    /// The best trial's index by the sweep's rule, as its results name it
    /// ([`rtune_searchers::best_trial`]: the latest results, feasible ones only).
    pub fn best(&self) -> Option<usize> {
        let (metric, mode) = (self.objectives.metric()?, self.objectives.mode()?);
        let lasts = self.trials.iter().map(|t| (!t.last.is_empty()).then_some(&t.last));
        rtune_searchers::best_trial(lasts, metric, mode, &self.constraints)
    }

    pub fn count(&self, status: TrialStatus) -> usize {
        self.trials.iter().filter(|t| t.status == status).count()
    }

    /// When at least two trials ended and every one that ended failed the same way (the first
    /// line of their errors is the same: a missing module, a typo in the train function), how
    /// many and that line: fixing it is what the sweep needs, not more trials.
    pub(crate) fn same_failure(&self) -> Option<(usize, String)> {
        let ended: Vec<&TrialRow> = self
            .trials
            .iter()
            .filter(|t| matches!(t.status, TrialStatus::Terminated | TrialStatus::Error))
            .collect();
        let first = rtune_driver::outcome::error_summary(ended.first()?.error.as_deref()?);
        let same = ended.iter().all(|t| {
            t.status == TrialStatus::Error
                && t.error
                    .as_deref()
                    .is_some_and(|e| rtune_driver::outcome::error_summary(e) == first)
        });
        (same && ended.len() >= 2).then_some((ended.len(), first))
    }

    /// Trials not started yet: those made and waiting for their resources, and those the
    /// searcher has yet to make (of a known number), while the sweep goes on.
    pub fn pending(&self) -> u64 {
        let seen = self.trials.len() as u64;
        let unmade = if self.over { 0 } else { self.total.map_or(0, |t| t.saturating_sub(seen)) };
        self.count(TrialStatus::Pending) as u64 + unmade
    }

    /// How far a sweep of a known number of trials is after `elapsed_s`: the share of its
    /// trials that ended, and the time left at the pace so far (none before the first end,
    /// and none once it is over). A running trial counts as the part of an ended trial's
    /// iterations (on average) it has run, so that the time left shrinks while the last
    /// trials run.
    pub fn progress(&self, elapsed_s: f64) -> Option<(f64, Option<f64>)> {
        let total = self.total.filter(|&t| t > 0)?;
        let ended =
            |t: &&TrialRow| matches!(t.status, TrialStatus::Terminated | TrialStatus::Error);
        let done = self.trials.iter().filter(ended).count() as u64;
        let share = (done as f64 / total as f64).min(1.0);
        let iterations = |t: &TrialRow| t.last.get("training_iteration").copied().unwrap_or(0.0);
        let ended_iterations: f64 = self.trials.iter().filter(ended).map(iterations).sum();
        let per_trial = ended_iterations / done.max(1) as f64;
        let running: f64 = self
            .trials
            .iter()
            .filter(|t| t.status == TrialStatus::Running && per_trial > 0.0)
            .map(|t| (iterations(t) / per_trial).min(0.95))
            .sum();
        let work = done as f64 + running;
        let left = (done > 0 && done < total && !self.over)
            .then(|| elapsed_s / work * (total as f64 - work).max(0.0));
        Some((share, left))
    }

    /// The rows the table shows, in order: indices into `trials`.
    pub fn rows(&self, view: &View) -> Vec<usize> {
        let mut rows: Vec<usize> = (0..self.trials.len())
            .filter(|&i| view.filter.is_none_or(|f| self.trials[i].status == f))
            .collect();
        let params = self.param_names();
        let front = self.front();
        let key = |i: usize| -> (Option<f64>, String) {
            let t = &self.trials[i];
            match view.sort {
                0 => (None, t.id.clone()),
                1 => (None, status_name(t.status)),
                2 => (t.last.get("training_iteration").copied(), String::new()),
                3 => match self.objectives.single() {
                    Some(o) => (t.last.get(&o.metric).map(|v| o.mode.sign() * v), String::new()),
                    // Several objectives: the front first.
                    None if !self.objectives.is_empty() => {
                        (Some(f64::from(u8::from(front.contains(&i)))), String::new())
                    }
                    None => (None, String::new()),
                },
                n => {
                    let name = params.get(n - 4);
                    let value = name.and_then(|p| t.params.iter().find(|(k, _)| k == p));
                    let text = value.map_or(String::new(), |(_, v)| v.clone());
                    (text.parse().ok(), text)
                }
            }
        };
        rows.sort_by(|&a, &b| {
            let (ka, kb) = (key(a), key(b));
            let order = match (ka.0, kb.0) {
                (Some(x), Some(y)) => x.total_cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Greater,
                (None, Some(_)) => std::cmp::Ordering::Less,
                (None, None) => ka.1.cmp(&kb.1),
            };
            if view.descending { order.reverse() } else { order }
        });
        rows
    }

    /// The last `n` lines of a trial's log: rank 0's stderr and stdout, after its error's first
    /// line when it failed (the whole text is in its `error.txt`).
    pub(crate) fn log_tail(&self, trial: usize, n: usize) -> Vec<String> {
        let Some(t) = self.trials.get(trial) else { return Vec::new() };
        let mut head: Vec<String> =
            t.error.iter().map(|e| format!("error: {}", error_summary(e))).collect();
        head.truncate(n);
        let room = n - head.len();
        let mut lines = Vec::new();
        for file in ["logs/rank_0.stderr", "logs/rank_0.stdout"] {
            lines.extend(tail(&t.path.join(file), room));
        }
        let skip = lines.len().saturating_sub(room);
        head.extend(lines.split_off(skip));
        head
    }
}

/// The last `n` lines of a file, reading at most its last 16 KiB.
fn tail(path: &Path, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else { return Vec::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(16 * 1024);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().skip(usize::from(start > 0)).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| (*l).to_owned()).collect()
}

/// A live sweep's events, as its callbacks hear them.
#[derive(Debug, Clone)]
pub enum Event {
    /// The sweep begins, in its experiment directory (which exists now).
    Begin(Box<ExperimentInfo>),
    /// Made, waiting for its resources (PENDING).
    Add(TrialInfo),
    Start(TrialInfo),
    Result(TrialInfo, Metrics),
    Complete(TrialInfo),
    Error(TrialInfo, String),
    Pause(TrialInfo),
    Scheduler(SchedulerStatus),
    End,
}

/// Something that follows a sweep by its events: the terminal UI's feed, the progress lines.
pub(crate) trait Follow: Send + Sync {
    /// Its name in error messages.
    fn name(&self) -> &'static str;
    fn follow(&self, event: Event);
}

impl<F: Follow + ?Sized> Follow for std::sync::Arc<F> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn follow(&self, event: Event) {
        (**self).follow(event)
    }
}

/// The callback that turns a sweep's callbacks into events for a `Follow`.
pub(crate) struct Following<F>(pub F);

impl<F: Follow> Callback for Following<F> {
    fn name(&self) -> String {
        self.0.name().into()
    }
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        self.0.follow(Event::Begin(Box::new(experiment.clone())));
        Ok(())
    }
    fn on_trial_add(&self, trial: &TrialInfo) -> Result<()> {
        self.0.follow(Event::Add(trial.clone()));
        Ok(())
    }
    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        self.0.follow(Event::Start(trial.clone()));
        Ok(())
    }
    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        self.0.follow(Event::Result(trial.clone(), result.clone()));
        Ok(())
    }
    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        self.0.follow(Event::Complete(trial.clone()));
        Ok(())
    }
    fn on_trial_error(&self, trial: &TrialInfo, error: &str) -> Result<()> {
        self.0.follow(Event::Error(trial.clone(), error.to_owned()));
        Ok(())
    }
    fn on_trial_pause(&self, trial: &TrialInfo) -> Result<()> {
        self.0.follow(Event::Pause(trial.clone()));
        Ok(())
    }
    fn on_scheduler_status(&self, status: &rtune_searchers::SchedulerStatus) -> Result<()> {
        self.0.follow(Event::Scheduler(status.clone()));
        Ok(())
    }
    fn on_experiment_end(&self, _: &[TrialInfo]) -> Result<()> {
        self.0.follow(Event::End);
        Ok(())
    }
}
