//! What Prometheus scrapes of a sweep: `GET /metrics`, served by the sweep's driver, in the
//! OpenMetrics text format (made by the `prometheus-client` crate) for a scraper that asks for
//! it, as Prometheus does, and else in Prometheus' text format 0.0.4 (what `curl` and
//! `promtool check metrics` read): the same samples, with a counter's family named as its
//! samples (`x_total`) and no `# EOF`.
//!
//! A [`Monitor`] is a callback of the sweep (it hears of each trial's start, results and end)
//! and reads the resource pool when it is scraped; [`serve`] puts it on an address, loopback by
//! default. An address other than loopback needs the cluster token, which a scraper sends as a
//! bearer token (`authorization: Bearer TOKEN`; Prometheus' `authorization.credentials`).
//!
//! The names, all prefixed `rtune_`, are stable; units are seconds and bytes:
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `rtune_trials` | gauge | `status` | the experiment's trials by status (PENDING, RUNNING, PAUSED, TERMINATED, ERROR), those that ended before a resume included; PENDING counts the trials not made yet, as the progress lines do |
//! | `rtune_sweep_trials` | gauge | | the trials the sweep was set up for (0: until its time budget is spent): progress is `sum(rtune_trials{status=~"TERMINATED\|ERROR"}) / rtune_sweep_trials` |
//! | `rtune_results_total` | counter | | results the trials reported (`rate()` of it: results per second) |
//! | `rtune_scheduler_decisions_total` | counter | `decision` | trials stopped (`stop`) or paused (`pause`) by the scheduler or the sweep |
//! | `rtune_best_metric` | gauge | `metric`, `mode` | the best trial's value of the sweep's metric (a sweep with one), by the rule its results name the best trial by: each trial's last result, feasible ones only; absent while there is none |
//! | `rtune_pool_capacity` | gauge | `node`, `resource` | what each alive node offers (CPU, GPU, custom resources) |
//! | `rtune_pool_used` | gauge | `node`, `resource` | what of it is reserved |
//! | `rtune_pool_memory_capacity_bytes` | gauge | `node` | the node's memory |
//! | `rtune_pool_memory_used_bytes` | gauge | `node` | what of it is reserved |
//! | `rtune_pool_waiting_groups` | gauge | | worker groups (trials) waiting for resources |
//! | `rtune_driver_resident_memory_bytes` | gauge | | the driver process's resident memory |
//! | `rtune_rank_step_seconds` | histogram | `trial`, `rank` | each step's time (from one report to the next) |
//! | `rtune_rank_data_wait_seconds_total` | counter | `trial`, `rank` | time waiting for the next batch |
//! | `rtune_rank_collective_seconds_total` | counter | `trial`, `rank` | time in collectives |
//! | `rtune_rank_collective_bytes_total` | counter | `trial`, `rank` | bytes put into collectives |
//! | `rtune_rank_gpu_utilization_ratio` | gauge | `trial`, `rank` | the rank's GPU at its latest report: the share of the time a kernel ran (NVML) |
//! | `rtune_rank_gpu_memory_bytes` | gauge | `trial`, `rank` | and its memory in use |
//! | `rtune_trial_group_start_seconds` | gauge | `trial`, `phase` | how the trial's latest worker group started: `reserve` (waiting for resources included), `spawn`, `join` |
//! | `rtune_trial_attempts` | gauge | `trial` | the trial's attempts so far (a restart after a failure is one more) |
//! | `rtune_trial_world_size` | gauge | `trial` | the ranks of the trial's group at its latest result (an elastic group's change) |
//! | `rtune_trial_resizes` | gauge | `trial` | how many times an elastic trial's group resized (from its first resize on) |
//! | `rtune_report_blocked_seconds_total` | counter | | time `report` kept train functions waiting (for their peers and the driver) |
//! | `rtune_checkpoints_total` | counter | | checkpoints reported |
//! | `rtune_checkpoint_bytes_total` | counter | | their bytes |
//! | `rtune_checkpoint_seconds_total` | counter | `phase` | train functions' time writing them (`write`), uploads' to the store (`upload`), and reports' waiting for an earlier upload (`wait`: uploads behind the checkpoints) |
//! | `rtune_callback_backlog` | gauge | `callback` | events a callback has yet to send (MLflow's) |
//!
//! The per-rank and per-trial series ride on the results (the rows' `time_step_s`,
//! `time_data_s`, `time_collective_s`, and with several ranks `ranks/R/..`; `time_report_s`,
//! `checkpoint_bytes`, `time_checkpoint_write_s`, `time_checkpoint_upload_s`,
//! `time_checkpoint_wait_s`; an attempt's first
//! row's `group_attempt` and `time_group_*_s`; `world_size` and `group_resizes`); a trial's
//! series leave the endpoint when it ends, so their number stays that of the running trials'.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use rtune_searchers::{Metrics, Mode, TrialStatus, best_trial};

use crate::callback::{Callback, ExperimentInfo, TrialInfo};
use crate::cluster::pool::{GroupState, PoolStatus};
use crate::error::{Error, Result};
use crate::setting::Setting;

/// The content type of an answer in OpenMetrics' text format.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of an answer in Prometheus' text format.
pub(crate) const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The endpoint's URL at `address` (`HOST:PORT`), as the commands show it.
pub fn url(address: impl std::fmt::Display) -> String {
    format!("http://{address}/metrics")
}

/// The address the endpoint takes by default: loopback, a free port (`driver.json` says which).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:0";

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectiveLabels {
    metric: String,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabels {
    trial: String,
    rank: String,
}

/// Step times' buckets, in seconds: from 1 ms to a minute.
const STEP_BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

type Steps = Family<RankLabels, Histogram, fn() -> Histogram>;
type FloatCounter = Counter<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrialLabel {
    trial: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrialPhaseLabels {
    trial: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallbackLabel {
    callback: String,
}

/// The phases of a group's start, as `rtune_trial_group_start_seconds` names them.
const START_PHASES: [&str; 3] = ["reserve", "spawn", "join"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    node: String,
    resource: String,
}

/// The statuses a live sweep's trials have, each a series from the start.
const STATUSES: [TrialStatus; 5] = [
    TrialStatus::Pending,
    TrialStatus::Running,
    TrialStatus::Paused,
    TrialStatus::Terminated,
    TrialStatus::Error,
];

/// A sweep's metrics (see the module docs): a callback of the sweep, cheap to clone.
#[derive(Clone)]
pub struct Monitor(Arc<Inner>);

struct Inner {
    registry: Registry,
    trials: Family<StatusLabel, Gauge>,
    sweep_trials: Gauge,
    results: Counter,
    decisions: Family<DecisionLabel, Counter>,
    best: Family<ObjectiveLabels, FloatGauge>,
    capacity: Family<ResourceLabels, FloatGauge>,
    used: Family<ResourceLabels, FloatGauge>,
    memory_capacity: Family<NodeLabel, Gauge>,
    memory_used: Family<NodeLabel, Gauge>,
    waiting: Gauge,
    resident: Gauge,
    steps: Steps,
    data_wait: Family<RankLabels, FloatCounter>,
    collective: Family<RankLabels, FloatCounter>,
    collective_bytes: Family<RankLabels, Counter>,
    gpu_utilization: Family<RankLabels, FloatGauge>,
    gpu_memory: Family<RankLabels, Gauge>,
    group_start: Family<TrialPhaseLabels, FloatGauge>,
    attempts: Family<TrialLabel, Gauge>,
    world_size: Family<TrialLabel, Gauge>,
    resizes: Family<TrialLabel, Gauge>,
    report_blocked: FloatCounter,
    checkpoints: Counter,
    checkpoint_bytes: Counter,
    checkpoint_seconds: Family<PhaseLabel, FloatCounter>,
    backlog: Family<CallbackLabel, Gauge>,
    /// The callbacks whose backlogs are shown (see [`Monitor::follow_backlogs`]).
    backlogs: Mutex<Vec<Arc<dyn Callback>>>,
    /// The length of the last answer.
    rendered: std::sync::atomic::AtomicUsize,
    sweep: Mutex<Sweep>,
    /// The sweep's metric and mode, once it began (a sweep with one).
    objective: std::sync::OnceLock<Objective>,
    /// The pool as it is now, where this process knows it.
    pool: Box<dyn Fn() -> Option<PoolStatus> + Send + Sync>,
}

/// The sweep's metric, its mode, and the labels of its best value's series.
struct Objective {
    labels: ObjectiveLabels,
    mode: Mode,
}

/// What the callbacks have said of the sweep so far (a resumed one's ended trials included).
#[derive(Default)]
struct Sweep {
    status: HashMap<String, TrialStatus>,
    /// The ranks each running trial has series of.
    ranks: HashMap<String, usize>,
    /// Each trial's last result, of the sweep's metric and constraints only.
    lasts: HashMap<String, Metrics>,
    constraints: Vec<String>,
    /// The trials it was set up for, where known.
    total: Option<u64>,
    /// It ended: no more trials will be made.
    over: bool,
}

impl Monitor {
    /// A monitor whose pool figures come from `pool` (read at each scrape; None: no pool
    /// figures, as for a sweep on a cluster, whose head serves them).
    pub fn new(pool: impl Fn() -> Option<PoolStatus> + Send + Sync + 'static) -> Monitor {
        let mut registry = Registry::with_prefix("rtune");
        let r = &mut registry;
        let trials: Family<StatusLabel, Gauge> =
            registered(r, "trials", "Trials by status", Family::default());
        let results = registered(r, "results", "Results the trials reported", Counter::default());
        let what = "Trials stopped (stop) or paused (pause) by the scheduler or the sweep";
        let decisions: Family<DecisionLabel, Counter> =
            registered(r, "scheduler_decisions", what, Family::default());
        let what = "Trials the sweep was set up for (0: until its time budget is spent)";
        let sweep_trials = registered(r, "sweep_trials", what, Gauge::default());
        let what = "The best trial's value of the sweep's metric (last results, feasible ones)";
        let best = registered(r, "best_metric", what, Family::default());
        let what = "What each alive node offers";
        let capacity = registered(r, "pool_capacity", what, Family::default());
        let what = "What of each node's resources is reserved";
        let used = registered(r, "pool_used", what, Family::default());
        let what = "Each alive node's memory, in bytes";
        let memory_capacity = registered(r, "pool_memory_capacity_bytes", what, Family::default());
        let what = "What of each node's memory is reserved, in bytes";
        let memory_used = registered(r, "pool_memory_used_bytes", what, Family::default());
        let what = "Worker groups (trials) waiting for resources";
        let waiting = registered(r, "pool_waiting_groups", what, Gauge::default());
        let what = "The driver process's resident memory, in bytes";
        let resident = registered(r, "driver_resident_memory_bytes", what, Gauge::default());
        let what = "Each rank's steps (from one report to the next), in seconds";
        let steps: Steps = Family::new_with_constructor(|| Histogram::new(STEP_BUCKETS));
        let steps = registered(r, "rank_step_seconds", what, steps);
        let what = "Each rank's time waiting for the next batch, in seconds";
        let data_wait = registered(r, "rank_data_wait_seconds", what, Family::default());
        let what = "Each rank's time in collectives, in seconds";
        let collective = registered(r, "rank_collective_seconds", what, Family::default());
        let what = "The bytes each rank put into collectives";
        let collective_bytes = registered(r, "rank_collective_bytes", what, Family::default());
        let what = "The share of the time a kernel ran on each rank's GPU, at its latest report";
        let gpu_utilization = registered(r, "rank_gpu_utilization_ratio", what, Family::default());
        let what = "Each rank's GPU memory in use at its latest report, in bytes";
        let gpu_memory = registered(r, "rank_gpu_memory_bytes", what, Family::default());
        let what = "How the trial's latest worker group started (reserve, spawn, join), in seconds";
        let group_start = registered(r, "trial_group_start_seconds", what, Family::default());
        let what = "The trial's attempts so far";
        let attempts = registered(r, "trial_attempts", what, Family::default());
        let what = "The ranks of the trial's group at its latest result";
        let world_size = registered(r, "trial_world_size", what, Family::default());
        let what = "How many times the trial's elastic group resized";
        let resizes = registered(r, "trial_resizes", what, Family::default());
        let what = "Time report kept train functions waiting, in seconds";
        let report_blocked = registered(r, "report_blocked_seconds", what, FloatCounter::default());
        let checkpoints = registered(r, "checkpoints", "Checkpoints reported", Counter::default());
        let what = "The bytes of the checkpoints reported";
        let checkpoint_bytes = registered(r, "checkpoint_bytes", what, Counter::default());
        let what = "Time writing checkpoints (write), uploading them (upload), and reports \
                    waiting for an earlier upload (wait), in seconds";
        let checkpoint_seconds: Family<PhaseLabel, FloatCounter> =
            registered(r, "checkpoint_seconds", what, Family::default());
        let what = "Events a callback has yet to send";
        let backlog = registered(r, "callback_backlog", what, Family::default());
        for phase in ["write", "upload", "wait"] {
            checkpoint_seconds.get_or_create(&PhaseLabel { phase }).inc_by(0.0);
        }
        // Every status and decision is a series from the start (at 0), not from its first.
        for status in STATUSES {
            trials.get_or_create(&StatusLabel { status: status.name() }).set(0);
        }
        for decision in ["stop", "pause"] {
            decisions.get_or_create(&DecisionLabel { decision }).inc_by(0);
        }
        Monitor(Arc::new(Inner {
            registry,
            trials,
            sweep_trials,
            results,
            decisions,
            best,
            capacity,
            used,
            memory_capacity,
            memory_used,
            waiting,
            resident,
            steps,
            data_wait,
            collective,
            collective_bytes,
            gpu_utilization,
            gpu_memory,
            group_start,
            attempts,
            world_size,
            resizes,
            report_blocked,
            checkpoints,
            checkpoint_bytes,
            checkpoint_seconds,
            backlog,
            backlogs: Mutex::new(Vec::new()),
            rendered: Default::default(),
            sweep: Mutex::new(Sweep::default()),
            objective: std::sync::OnceLock::new(),
            pool: Box::new(pool),
        }))
    }

    /// A monitor of a sweep on this machine: the pool is the driver's own.
    pub fn local() -> Monitor {
        Monitor::new(|| crate::runtime::Driver::get().ok()?.local_status())
    }

    /// The metrics now, in OpenMetrics' text format.
    pub fn render(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let inner = &self.0;
        if let Some(pool) = (inner.pool)() {
            inner.show_pool(&pool);
        }
        self.show_sweep();
        if let Some(bytes) = resident_bytes() {
            inner.resident.set(bytes);
        }
        for callback in inner.backlogs.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Some(backlog) = callback.backlog() {
                let labels = CallbackLabel { callback: callback.name() };
                inner.backlog.get_or_create(&labels).set(backlog as i64);
            }
        }
        // As long as the last answer: no growing through a dozen copies of a large one.
        let mut text = String::with_capacity(inner.rendered.load(Relaxed) + 4096);
        prometheus_client::encoding::text::encode(&mut text, &inner.registry)
            .expect("writing to a String cannot fail");
        inner.rendered.store(text.len(), Relaxed);
        text
    }

    /// Shows the backlogs of `callbacks` (of those that keep one, once they do:
    /// `Callback::backlog`) at each scrape.
    pub fn follow_backlogs(&self, callbacks: &[Arc<dyn Callback>]) {
        let mut followed = self.0.backlogs.lock().unwrap_or_else(|p| p.into_inner());
        followed.extend(callbacks.iter().cloned());
    }

    /// Of a result, what the best trial is chosen by: the sweep's metric and constraints.
    fn kept(&self, constraints: &[String], result: &Metrics) -> Metrics {
        let metric = self.0.objective.get().map(|o| o.labels.metric.as_str());
        let wanted = |name: &str| Some(name) == metric || constraints.iter().any(|c| c == name);
        result.iter().filter(|(k, _)| wanted(k)).map(|(k, &v)| (k.clone(), v)).collect()
    }

    fn sweep(&self) -> std::sync::MutexGuard<'_, Sweep> {
        self.0.sweep.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `trial` is now `status` (the series are counted at each scrape).
    fn set_status(&self, trial: &TrialInfo, status: TrialStatus) {
        self.sweep().status.insert(trial.trial_id.clone(), status);
    }

    /// The trials by status and the best trial's value, as the sweep stands now: counted at
    /// a scrape, not at every result.
    fn show_sweep(&self) {
        let inner = &self.0;
        let sweep = self.sweep();
        let mut counts: HashMap<TrialStatus, i64> = STATUSES.iter().map(|&s| (s, 0)).collect();
        for status in sweep.status.values() {
            *counts.entry(*status).or_default() += 1;
        }
        let made = sweep.status.len() as u64;
        let unmade = if sweep.over { 0 } else { sweep.total.map_or(0, |t| t.saturating_sub(made)) };
        *counts.entry(TrialStatus::Pending).or_default() += unmade as i64;
        for (status, n) in counts {
            inner.trials.get_or_create(&StatusLabel { status: status.name() }).set(n);
        }
        let Some(Objective { labels, mode }) = inner.objective.get() else { return };
        let lasts: Vec<&Metrics> = sweep.lasts.values().collect();
        let metric = &labels.metric;
        let best = best_trial(lasts.iter().map(|m| Some(*m)), metric, *mode, &sweep.constraints);
        match best {
            Some(i) => {
                inner.best.get_or_create(labels).set(lasts[i][metric]);
            }
            None => {
                inner.best.remove(labels);
            }
        }
    }

    /// The ranks' times a result carries, into their series: rank 0's as the row's
    /// `time_step_s` .. with one rank, each rank's as `ranks/R/..` with several.
    fn count_ranks(&self, trial: &TrialInfo, result: &Metrics) {
        let ranks = crate::metrics::rank_figures(result);
        if ranks.is_empty() {
            return;
        }
        let inner = &self.0;
        for (rank, f) in ranks.iter().enumerate() {
            let labels = RankLabels { trial: trial.trial_id.clone(), rank: rank.to_string() };
            inner.steps.get_or_create(&labels).observe(f.step_s);
            if f.data_s.is_finite() && f.data_s >= 0.0 {
                inner.data_wait.get_or_create(&labels).inc_by(f.data_s);
            }
            if f.collective_s.is_finite() && f.collective_s >= 0.0 {
                inner.collective.get_or_create(&labels).inc_by(f.collective_s);
            }
            if let Some(bytes) = f.collective_bytes.filter(|b| b.is_finite() && *b >= 0.0) {
                inner.collective_bytes.get_or_create(&labels).inc_by(bytes as u64);
            }
            if let (Some(share), Some(bytes)) = (f.gpu_utilization, f.gpu_memory_bytes) {
                inner.gpu_utilization.get_or_create(&labels).set(share);
                inner.gpu_memory.get_or_create(&labels).set(bytes as i64);
            }
        }
        let mut sweep = self.sweep();
        let known = sweep.ranks.entry(trial.trial_id.clone()).or_default();
        *known = (*known).max(ranks.len());
    }

    /// The run's figures a result carries: its group's start (an attempt's first result), the
    /// time its last report kept it waiting, its checkpoint.
    fn count_run(&self, trial: &TrialInfo, result: &Metrics) {
        let inner = &self.0;
        if let Some(start) = crate::metrics::group_start(result) {
            let figures = [start.reserve_s, start.spawn_s, start.join_s];
            for (phase, seconds) in START_PHASES.into_iter().zip(figures) {
                let labels = TrialPhaseLabels { trial: trial.trial_id.clone(), phase };
                inner.group_start.get_or_create(&labels).set(seconds);
            }
            let labels = TrialLabel { trial: trial.trial_id.clone() };
            inner.attempts.get_or_create(&labels).set(i64::from(start.attempt) + 1);
        }
        let [world, resizes] = crate::metrics::GROUP_METRICS;
        for (key, family) in [(world, &inner.world_size), (resizes, &inner.resizes)] {
            if let Some(&n) = result.get(key).filter(|n| n.is_finite() && **n >= 0.0) {
                family.get_or_create(&TrialLabel { trial: trial.trial_id.clone() }).set(n as i64);
            }
        }
        let run = crate::metrics::run_figures(result);
        let counted = |v: f64| v.is_finite() && v > 0.0;
        if counted(run.report_s) {
            inner.report_blocked.inc_by(run.report_s);
        }
        if counted(run.checkpoint_bytes) {
            inner.checkpoints.inc();
            inner.checkpoint_bytes.inc_by(run.checkpoint_bytes as u64);
        }
        for (phase, seconds) in
            [("write", run.checkpoint_write_s), ("upload", run.checkpoint_upload_s)]
                .into_iter()
                .chain([("wait", run.checkpoint_wait_s)])
        {
            if counted(seconds) {
                inner.checkpoint_seconds.get_or_create(&PhaseLabel { phase }).inc_by(seconds);
            }
        }
    }

    /// The trial's rank and start series leave the endpoint (it ended, or paused and gave back
    /// its workers).
    fn forget_ranks(&self, trial: &TrialInfo) {
        for phase in START_PHASES {
            self.0.group_start.remove(&TrialPhaseLabels { trial: trial.trial_id.clone(), phase });
        }
        let labels = TrialLabel { trial: trial.trial_id.clone() };
        self.0.attempts.remove(&labels);
        self.0.world_size.remove(&labels);
        self.0.resizes.remove(&labels);
        let Some(ranks) = self.sweep().ranks.remove(&trial.trial_id) else { return };
        for rank in 0..ranks {
            let labels = RankLabels { trial: trial.trial_id.clone(), rank: rank.to_string() };
            self.0.steps.remove(&labels);
            self.0.data_wait.remove(&labels);
            self.0.collective.remove(&labels);
            self.0.collective_bytes.remove(&labels);
            self.0.gpu_utilization.remove(&labels);
            self.0.gpu_memory.remove(&labels);
        }
    }

    fn decided(&self, decision: &'static str) {
        self.0.decisions.get_or_create(&DecisionLabel { decision }).inc();
    }
}

/// `metric`, registered in `registry` under `name` with `help`.
pub(crate) fn registered<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, m: M) -> M {
    r.register(name, help, m.clone());
    m
}

/// Prometheus' text format (0.0.4) of `openmetrics`, an OpenMetrics text of gauges, counters
/// and histograms: a counter's `# HELP` and `# TYPE` name its family as its samples are named
/// (`x_total`), and the `# EOF` marker goes.
pub(crate) fn text_format(openmetrics: &str) -> String {
    // Only comment lines change: the samples between them are copied in runs.
    let comments = || {
        let first = openmetrics.starts_with("# ").then_some(0);
        first.into_iter().chain(openmetrics.match_indices("\n# ").map(|(at, _)| at + 1)).map(
            |start| {
                let end = openmetrics[start..].find('\n').map_or(openmetrics.len(), |e| start + e);
                (start, end)
            },
        )
    };
    let counters: std::collections::HashSet<&str> = comments()
        .filter_map(|(start, end)| {
            openmetrics[start..end].strip_prefix("# TYPE ")?.strip_suffix(" counter")
        })
        .collect();
    let mut text = String::with_capacity(openmetrics.len() + 16 * counters.len());
    let mut copied = 0;
    for (start, end) in comments() {
        text.push_str(&openmetrics[copied..start]);
        // The line's end of line goes with the next run (none after `# EOF`, the last line).
        copied = end;
        let line = &openmetrics[start..end];
        if line == "# EOF" {
            copied = openmetrics.len().min(end + 1);
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].into_iter().find_map(|tag| {
            let (name, tail) = line.strip_prefix(tag)?.split_once(' ')?;
            counters.contains(name).then(|| format!("{tag}{name}_total {tail}"))
        });
        text.push_str(renamed.as_deref().unwrap_or(line));
    }
    text.push_str(&openmetrics[copied..]);
    text
}

impl Inner {
    fn show_pool(&self, pool: &PoolStatus) {
        self.capacity.clear();
        self.used.clear();
        self.memory_capacity.clear();
        self.memory_used.clear();
        for node in pool.nodes.iter().filter(|n| n.alive) {
            let (total, free) = (&node.total, &node.free);
            let mut resources = vec![("CPU".to_owned(), total.cpu, free.cpu)];
            resources.push(("GPU".to_owned(), total.gpu, free.gpu));
            for (name, &amount) in &total.custom {
                resources.push((
                    name.clone(),
                    amount,
                    free.custom.get(name).copied().unwrap_or(0.0),
                ));
            }
            for (resource, total, free) in resources {
                let labels = ResourceLabels { node: node.address.clone(), resource };
                self.capacity.get_or_create(&labels).set(total);
                self.used.get_or_create(&labels).set(total - free);
            }
            let labels = NodeLabel { node: node.address.clone() };
            let memory = i64::try_from(total.memory_bytes).unwrap_or(i64::MAX);
            let reserved = total.memory_bytes.saturating_sub(free.memory_bytes);
            self.memory_capacity.get_or_create(&labels).set(memory);
            self.memory_used
                .get_or_create(&labels)
                .set(i64::try_from(reserved).unwrap_or(i64::MAX));
        }
        let waiting = pool.groups.iter().filter(|g| matches!(g.state, GroupState::Pending { .. }));
        self.waiting.set(waiting.count() as i64);
    }
}

impl Callback for Monitor {
    fn name(&self) -> String {
        "metrics endpoint".into()
    }

    /// The experiment, not only this driver's run of it: a resumed sweep's ended trials count.
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        if let Some(rtune_searchers::Objective { metric, mode }) =
            experiment.objectives.single().cloned()
        {
            let labels =
                ObjectiveLabels { metric, mode: if mode == Mode::Max { "max" } else { "min" } };
            let _ = self.0.objective.set(Objective { labels, mode });
        }
        self.0.sweep_trials.set(experiment.trials.map_or(0, |n| n as i64));
        let mut sweep = self.sweep();
        sweep.total = experiment.trials;
        sweep.constraints = experiment.constraints.clone();
        for ended in &experiment.ended_before {
            let id = &ended.trial.trial_id;
            sweep.status.insert(id.clone(), ended.trial.status);
            if let Some(last) = ended.history.last() {
                let kept = self.kept(&sweep.constraints, last);
                sweep.lasts.insert(id.clone(), kept);
            }
        }
        Ok(())
    }

    fn on_experiment_end(&self, _trials: &[TrialInfo]) -> Result<()> {
        self.sweep().over = true;
        Ok(())
    }

    fn on_trial_add(&self, trial: &TrialInfo) -> Result<()> {
        self.set_status(trial, TrialStatus::Pending);
        Ok(())
    }

    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        self.set_status(trial, TrialStatus::Running);
        Ok(())
    }

    /// Called for every result: lookups of the figures rtune adds and of the sweep's metric,
    /// and the sweep's lock and the series' labels only for a result with ranks' figures.
    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        self.0.results.inc();
        self.count_ranks(trial, result);
        self.count_run(trial, result);
        if self.0.objective.get().is_some() {
            let mut sweep = self.sweep();
            let kept = self.kept(&sweep.constraints, result);
            sweep.lasts.insert(trial.trial_id.clone(), kept);
        }
        Ok(())
    }

    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        self.set_status(trial, TrialStatus::Terminated);
        self.forget_ranks(trial);
        if trial.stopped {
            self.decided("stop");
        }
        Ok(())
    }

    fn on_trial_error(&self, trial: &TrialInfo, _error: &str) -> Result<()> {
        self.set_status(trial, TrialStatus::Error);
        self.forget_ranks(trial);
        Ok(())
    }

    fn on_trial_pause(&self, trial: &TrialInfo) -> Result<()> {
        self.set_status(trial, TrialStatus::Paused);
        self.forget_ranks(trial);
        self.decided("pause");
        Ok(())
    }
}

/// The driver's resident memory (Linux' `/proc/self/statm`), in bytes.
fn resident_bytes() -> Option<i64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (page > 0).then(|| pages * page)
}

/// The address the endpoint may take: `HOST:PORT`, loopback unless `token` (the cluster token)
/// is given. The reason otherwise, in the sweep file's words.
pub fn check_address(
    address: &str,
    token: Option<&str>,
) -> std::result::Result<SocketAddr, String> {
    let resolved = address.to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or_else(|| {
        format!("is {address:?}; use HOST:PORT, e.g. \"127.0.0.1:9464\" (port 0: any free port)")
    })?;
    if !resolved.ip().is_loopback() && token.is_none_or(str::is_empty) {
        return Err(format!(
            "is {address:?}, which is not loopback: set the cluster token ({}), which scrapers \
             then send as a bearer token",
            crate::config::TOKEN_ENV
        ));
    }
    Ok(resolved)
}

/// The endpoint of a [`Monitor`]; stops when dropped.
pub struct MetricsServer {
    address: SocketAddr,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

impl MetricsServer {
    /// Where it listens (the port chosen, for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

/// Serves `monitor` at `address` (see [`check_address`]) on `runtime`: `GET /metrics`, with
/// `token` required as a bearer token where given.
pub fn serve(
    monitor: Monitor,
    address: &str,
    token: Option<String>,
    runtime: &tokio::runtime::Handle,
) -> Result<MetricsServer> {
    let at = check_address(address, token.as_deref())
        .map_err(|why| Error::config(Setting::Metrics, why))?;
    let listener = std::net::TcpListener::bind(at)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| {
            Error::config(Setting::Metrics, format!("is {address:?}: cannot listen there: {e}"))
        })?;
    let address = listener.local_addr().map_err(|e| Error::io("metrics endpoint", e))?;
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| Error::io("metrics endpoint", e))?;
    let (shutdown, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let token: Option<Arc<str>> = token.filter(|t| !t.is_empty()).map(Into::into);
    runtime.spawn(async move {
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::debug!("metrics endpoint: {e}");
                        continue;
                    }
                },
                _ = &mut stopped => break,
            };
            let (monitor, token) = (monitor.clone(), token.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer(&monitor, token.as_deref(), &request);
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                if let Err(e) =
                    hyper::server::conn::http1::Builder::new().serve_connection(io, service).await
                {
                    tracing::debug!("metrics endpoint: {e}");
                }
            });
        }
    });
    Ok(MetricsServer { address, _shutdown: shutdown })
}

type Answer = hyper::Response<http_body_util::Full<bytes::Bytes>>;

fn answer<B>(monitor: &Monitor, token: Option<&str>, request: &hyper::Request<B>) -> Answer {
    let reply = |status: u16, content_type: &'static str, body: String| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .expect("a valid response")
    };
    let plain = "text/plain; charset=utf-8";
    if let Some(token) = token {
        let given = request.headers().get("authorization").and_then(|v| v.to_str().ok());
        if given.and_then(|v| v.strip_prefix("Bearer ")) != Some(token) {
            let why = "this endpoint needs the cluster token as a bearer token\n";
            let mut refused = reply(401, plain, why.into());
            refused
                .headers_mut()
                .insert("www-authenticate", hyper::header::HeaderValue::from_static("Bearer"));
            return refused;
        }
    }
    if (request.method(), request.uri().path()) != (&hyper::Method::GET, "/metrics") {
        return reply(404, plain, "the metrics are at GET /metrics\n".into());
    }
    let (content_type, text) = exposition(request.headers(), monitor.render());
    reply(200, content_type, text)
}

/// A scrape's content type and text: `openmetrics` as it is if accepted, else Prometheus' format.
pub(crate) fn exposition(
    headers: &hyper::HeaderMap,
    openmetrics: String,
) -> (&'static str, String) {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/openmetrics-text") {
        (OPENMETRICS, openmetrics)
    } else {
        (TEXT_FORMAT, text_format(&openmetrics))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{GroupStart, RunFigures};

    fn trial(id: &str) -> TrialInfo {
        TrialInfo {
            trial_id: id.into(),
            status: TrialStatus::Pending,
            params: Default::default(),
            path: id.into(),
            stopped: false,
            checkpoint: None,
        }
    }

    /// Trials by status, results, decisions and the best metric follow what the callbacks say.
    /// A callback 7 events behind.
    struct Behind;

    impl Callback for Behind {
        fn name(&self) -> String {
            "behind".into()
        }

        fn backlog(&self) -> Option<u64> {
            Some(7)
        }
    }

    #[test]
    fn the_sweep_is_counted() {
        let monitor = Monitor::new(|| None);
        let info = ExperimentInfo {
            path: "x".into(),
            name: "x".into(),
            objectives: rtune_searchers::Objectives::one("acc", Mode::Max),
            ..Default::default()
        };
        monitor.on_experiment_begin(&info).unwrap();
        let (a, b) = (trial("a"), trial("b"));
        monitor.on_trial_add(&a).unwrap();
        monitor.on_trial_add(&b).unwrap();
        monitor.on_trial_start(&a).unwrap();
        for acc in [0.5, 0.9, 0.7] {
            monitor.on_trial_result(&a, &Metrics::from([("acc".to_string(), acc)])).unwrap();
        }
        // Two ranks' times ride on b's results; they leave when b ends.
        monitor.on_trial_start(&b).unwrap();
        let times = |step: f64| {
            Metrics::from([
                ("time_step_s".to_string(), step),
                ("ranks/0/time_step_s".to_string(), step),
                ("ranks/0/time_data_s".to_string(), 0.01),
                ("ranks/0/time_collective_s".to_string(), 0.2),
                ("ranks/0/collective_bytes".to_string(), 1000.0),
                ("ranks/1/time_step_s".to_string(), 0.3),
                ("ranks/1/time_data_s".to_string(), 0.02),
                ("ranks/1/time_collective_s".to_string(), 0.001),
                ("ranks/1/collective_bytes".to_string(), 1000.0),
                ("ranks/1/gpu_utilization".to_string(), 0.5),
                ("ranks/1/gpu_memory_bytes".to_string(), 3e9),
            ])
        };
        // b's first result also says how its group started (its second attempt), and each
        // carries a checkpoint and the time the report before it blocked.
        let mut first = times(0.3);
        let start = GroupStart { attempt: 1, reserve_s: 0.5, spawn_s: 0.25, join_s: 0.125 };
        crate::metrics::add_group_start(&mut first, &start);
        let run = RunFigures {
            report_s: 0.25,
            checkpoint_bytes: 1000.0,
            checkpoint_write_s: 0.5,
            checkpoint_upload_s: 0.75,
            checkpoint_wait_s: 0.125,
        };
        let mut second = times(0.31);
        for result in [&mut first, &mut second] {
            crate::metrics::add_run_figures(result, &run);
        }
        // An elastic group of 2 that resized once since its first result.
        first.insert("world_size".into(), 3.0);
        second.extend([("world_size".to_owned(), 2.0), ("group_resizes".to_owned(), 1.0)]);
        monitor.follow_backlogs(&[Arc::new(Behind) as Arc<dyn Callback>]);
        monitor.on_trial_result(&b, &first).unwrap();
        monitor.on_trial_result(&b, &second).unwrap();
        let text = monitor.render();
        for line in [
            "rtune_trial_group_start_seconds{trial=\"b\",phase=\"reserve\"} 0.5\n",
            "rtune_trial_group_start_seconds{trial=\"b\",phase=\"join\"} 0.125\n",
            "rtune_trial_attempts{trial=\"b\"} 2\n",
            "rtune_trial_world_size{trial=\"b\"} 2\n",
            "rtune_trial_resizes{trial=\"b\"} 1\n",
            "rtune_report_blocked_seconds_total 0.5\n",
            "rtune_checkpoints_total 2\n",
            "rtune_checkpoint_bytes_total 2000\n",
            "rtune_checkpoint_seconds_total{phase=\"write\"} 1.0\n",
            "rtune_checkpoint_seconds_total{phase=\"upload\"} 1.5\n",
            "rtune_checkpoint_seconds_total{phase=\"wait\"} 0.25\n",
            "rtune_callback_backlog{callback=\"behind\"} 7\n",
            "rtune_rank_step_seconds_count{trial=\"b\",rank=\"1\"} 2\n",
            "rtune_rank_step_seconds_bucket{le=\"0.5\",trial=\"b\",rank=\"0\"} 2\n",
            "rtune_rank_collective_seconds_total{trial=\"b\",rank=\"0\"} 0.4\n",
            "rtune_rank_data_wait_seconds_total{trial=\"b\",rank=\"1\"} 0.04\n",
            "rtune_rank_collective_bytes_total{trial=\"b\",rank=\"1\"} 2000\n",
            "rtune_rank_gpu_utilization_ratio{trial=\"b\",rank=\"1\"} 0.5\n",
            "rtune_rank_gpu_memory_bytes{trial=\"b\",rank=\"1\"} 3000000000\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        // Every per-rank and per-trial series the Grafana dashboard names is one the monitor
        // has (the others are checked against a scraped sweep: tests/integration/monitoring.rs).
        let dashboard = include_str!("../../deploy/grafana/rtune.json");
        let names = dashboard.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for name in names.filter(|n| n.starts_with("rtune_rank_") || n.starts_with("rtune_trial_"))
        {
            assert!(
                text.contains(&format!("\n{name}")),
                "the dashboard's {name} is not in\n{text}"
            );
        }
        monitor.on_trial_complete(&b).unwrap();
        assert!(!monitor.render().contains("trial=\"b\""), "b's series stay after its end");
        monitor.on_trial_complete(&TrialInfo { stopped: true, ..a.clone() }).unwrap();
        let text = monitor.render();
        for line in [
            "rtune_trials{status=\"PENDING\"} 0\n",
            "rtune_trials{status=\"RUNNING\"} 0\n",
            "rtune_trials{status=\"TERMINATED\"} 2\n",
            "rtune_results_total 5\n",
            "rtune_scheduler_decisions_total{decision=\"stop\"} 1\n",
            "rtune_scheduler_decisions_total{decision=\"pause\"} 0\n",
            // By the last result (0.7), not the best report (0.9).
            "rtune_best_metric{metric=\"acc\",mode=\"max\"} 0.7\n",
            "# EOF\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }

    /// After a resume the endpoint describes the experiment: the trials that ended before
    /// this driver count, the best is the best feasible last result (an infeasible better one
    /// is not it), trials not made yet are PENDING, and there is no best before there is one.
    #[test]
    fn a_resumed_sweep_is_described_whole() {
        let monitor = Monitor::new(|| None);
        let m = |acc: f64, mem: f64| {
            Metrics::from([("acc".to_string(), acc), ("mem_over".to_string(), mem)])
        };
        let ended = |id: &str, status, history: Vec<Metrics>| crate::callback::EndedTrial {
            trial: TrialInfo { status, ..trial(id) },
            history,
            error: None,
        };
        let info = ExperimentInfo {
            objectives: rtune_searchers::Objectives::one("acc", Mode::Max),
            constraints: vec!["mem_over".into()],
            restored: true,
            trials: Some(6),
            ended_before: vec![
                ended("a", TrialStatus::Terminated, vec![m(0.9, -1.0), m(0.8, -1.0)]),
                ended("b", TrialStatus::Terminated, vec![m(0.99, 2.0)]),
                ended("c", TrialStatus::Error, Vec::new()),
            ],
            ..Default::default()
        };
        let fresh = Monitor::new(|| None);
        fresh
            .on_experiment_begin(&ExperimentInfo { ended_before: Vec::new(), ..info.clone() })
            .unwrap();
        assert!(!fresh.render().contains("rtune_best_metric{"), "a best before any result");
        monitor.on_experiment_begin(&info).unwrap();
        let d = trial("d");
        monitor.on_trial_start(&d).unwrap();
        monitor.on_trial_result(&d, &m(0.85, 0.5)).unwrap();
        let text = monitor.render();
        for line in [
            "rtune_trials{status=\"TERMINATED\"} 2\n",
            "rtune_trials{status=\"ERROR\"} 1\n",
            "rtune_trials{status=\"RUNNING\"} 1\n",
            "rtune_trials{status=\"PENDING\"} 2\n",
            "rtune_sweep_trials 6\n",
            "rtune_best_metric{metric=\"acc\",mode=\"max\"} 0.8\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        // d's last result becomes feasible and better; once the sweep ends nothing is pending.
        monitor.on_trial_result(&d, &m(0.86, 0.0)).unwrap();
        monitor.on_trial_complete(&d).unwrap();
        monitor.on_experiment_end(&[]).unwrap();
        let text = monitor.render();
        for line in [
            "rtune_best_metric{metric=\"acc\",mode=\"max\"} 0.86\n",
            "rtune_trials{status=\"PENDING\"} 0\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }

    /// Prometheus' text format names a counter's family as its samples and has no EOF.
    #[test]
    fn the_text_format_names_counters_by_their_samples() {
        let open = "# HELP a_results Results.\n# TYPE a_results counter\na_results_total 3\n\
                    # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# EOF\n";
        let text = "# HELP a_results_total Results.\n# TYPE a_results_total counter\n\
                    a_results_total 3\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n";
        assert_eq!(text_format(open), text);
        // A comment on the first line, none at all, and no end of line after the last one.
        assert_eq!(text_format("# TYPE b counter\nb_total 1"), "# TYPE b_total counter\nb_total 1");
        assert_eq!(text_format("x 1\ny 2\n"), "x 1\ny 2\n");
    }

    /// Loopback takes no token; any other address needs one; a non-address is refused.
    #[test]
    fn addresses_off_loopback_need_the_token() {
        assert!(check_address("127.0.0.1:0", None).is_ok());
        assert!(check_address("localhost:9464", None).is_ok());
        let why = check_address("0.0.0.0:9464", None).unwrap_err();
        assert!(why.contains("not loopback") && why.contains("RTUNE_TOKEN"), "{why}");
        assert!(check_address("0.0.0.0:9464", Some("t")).is_ok());
        assert!(check_address("9464", None).unwrap_err().contains("HOST:PORT"));
    }
}
