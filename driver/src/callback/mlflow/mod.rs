//! [`MlflowLogger`]: the sweep in an MLflow tracking server, through its REST API. One parent
//! run per sweep (named as the experiment; the sweep's settings as params; at the end the best
//! trial's last metrics, and FINISHED, or FAILED when every trial failed), and one nested run
//! per trial (its params; every reported metric at its `training_iteration` as the step; tags
//! for its rtune id, its status and whether the sweep stopped it early; FINISHED or FAILED).
//!
//! Nothing waits for the server but the sweep's beginning, which checks that it answers and
//! makes (or, for a restored sweep, finds) the runs: a server that cannot be reached then, or
//! that refuses the requests, is a settings mistake and nothing runs. After that, events go to
//! a background thread through a bounded queue and are sent in batches (`runs/log-batch`, within
//! MLflow's limits); a slow or stopped server is retried with backoff while the sweep goes on,
//! and an event is only dropped when the queue is full (counted, and said at the end). At the
//! end the thread gets `flush_timeout` to send what is left.
//!
//! Where the runs are is kept in the experiment's `mlflow.json` (run ids, each trial's last
//! step sent and whether its end was, and how much the sweep's end left unsent): a restored
//! sweep goes on with the same runs and sends no step twice, and what a sweep's end could not
//! send (its rows are in the trials' files) is sent by the next `rtune resume` or by `rtune
//! sync` ([`MlflowLogger::for_experiment`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rtune_searchers::{Metrics, Params, TrialStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

mod rest;
mod sender;

use sender::run;

use super::{Callback, ExperimentInfo, TrialInfo};
use crate::error::{Error, Result};
use crate::setting::Setting;

/// See the module docs.
#[derive(Debug)]
pub struct MlflowLogger {
    uri: Option<String>,
    experiment: Option<String>,
    queue_limit: usize,
    flush_timeout: Duration,
    log_artifacts: bool,
    live: Mutex<Option<Live>>,
    /// The error the sweep ends with, for the parent run's end.
    error: Mutex<Option<String>>,
    /// What the last end (of the sweep, or of its interruption) could not send.
    unsent: AtomicU64,
}

/// The environment variable MLflow's own clients read the tracking server from.
pub const TRACKING_URI_ENV: &str = "MLFLOW_TRACKING_URI";

const STATE_FILE: &str = "mlflow.json";
/// MLflow's limits on one `log-batch` request.
const MAX_METRICS: usize = 1000;
const MAX_PARAMS: usize = 100;
const MAX_TAGS: usize = 100;
/// Numbers in a result that are no metrics for MLflow: bookkeeping, and the step and time every
/// MLflow metric has anyway.
const NOT_METRICS: &[&str] =
    &["pid", "iterations_since_restore", "training_iteration", "timestamp"];
/// MLflow's longest param value.
const MAX_PARAM_CHARS: usize = 6000;

impl MlflowLogger {
    /// Logs to the tracking server at `uri` (`http://host:port`).
    pub fn new(uri: impl Into<String>) -> Self {
        MlflowLogger { uri: Some(uri.into()), ..MlflowLogger::from_env() }
    }

    /// Logs to the server that `MLFLOW_TRACKING_URI` names (read when the sweep begins).
    pub fn from_env() -> Self {
        MlflowLogger {
            uri: None,
            experiment: None,
            queue_limit: 100_000,
            flush_timeout: Duration::from_secs(30),
            log_artifacts: false,
            live: Mutex::new(None),
            error: Mutex::new(None),
            unsent: AtomicU64::new(0),
        }
    }

    /// The logger the sweep in `experiment` logged with (its `mlflow.json`: the server, whether
    /// it logs artifacts), to send what its end left unsent; None for a sweep that logged to
    /// no MLflow server.
    pub fn for_experiment(experiment: &Path) -> Option<MlflowLogger> {
        let saved = Saved::read(&experiment.join(STATE_FILE))?;
        Some(MlflowLogger::new(saved.tracking_uri).log_artifacts(saved.log_artifacts))
    }

    /// What the end of the sweep in `experiment` could not send to its MLflow server (0: all
    /// was sent, or it logged to none).
    pub fn unsent_in(experiment: &Path) -> u64 {
        Saved::read(&experiment.join(STATE_FILE)).map_or(0, |saved| saved.unsent)
    }

    /// What this logger's last end could not send (kept for `rtune sync`; 0: all was sent).
    pub fn unsent(&self) -> u64 {
        self.unsent.load(Ordering::Relaxed)
    }

    /// The MLflow experiment the runs go into (made if missing); by default one named as the
    /// sweep.
    pub fn experiment(mut self, name: impl Into<String>) -> Self {
        self.experiment = Some(name.into());
        self
    }

    /// At the end, the best trial's best checkpoint folder (`TrialResult::checkpoint`: its
    /// weights, metadata and data schema) goes into the parent run's artifacts as
    /// `best_checkpoint/`, through the server's artifact proxy.
    pub fn log_artifacts(mut self, yes: bool) -> Self {
        self.log_artifacts = yes;
        self
    }

    /// How many events may wait for a slow server before new ones are dropped (100,000).
    pub fn queue_limit(mut self, events: usize) -> Self {
        self.queue_limit = events.max(1);
        self
    }

    /// How long the end of the sweep waits for what is still to be sent (30 s); what is not
    /// sent by then is kept, for the next `rtune resume` or `rtune sync` to send.
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// The tracking server's URL: the one given, else `MLFLOW_TRACKING_URI`; an `http(s)://`
    /// URL, or why not.
    pub fn tracking_uri(&self) -> std::result::Result<String, String> {
        let uri = match &self.uri {
            Some(uri) => uri.clone(),
            None => std::env::var(TRACKING_URI_ENV)
                .map_err(|_| format!("no tracking server: name one, or set {TRACKING_URI_ENV}"))?,
        };
        if !(uri.starts_with("http://") || uri.starts_with("https://")) {
            return Err(format!(
                "{uri:?} is no tracking server's URL; use one like \"http://127.0.0.1:5000\""
            ));
        }
        Ok(uri.trim_end_matches('/').to_owned())
    }

    fn refused(&self, why: impl std::fmt::Display) -> Error {
        Error::config(Setting::Mlflow, why.to_string())
    }

    fn send(&self, event: Event) {
        if let Some(live) = self.live.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            live.send(event);
        }
    }
}

impl Callback for MlflowLogger {
    fn name(&self) -> String {
        "MlflowLogger".into()
    }

    fn backlog(&self) -> Option<u64> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let backlog = &live.as_ref()?.backlog;
        Some(backlog.queued.load(Ordering::Relaxed) + backlog.unsent.load(Ordering::Relaxed))
    }

    /// Checks the server, makes or finds the parent run, and starts the sending thread.
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        let uri = self.tracking_uri().map_err(|why| self.refused(why))?;
        let state_path = experiment.path.join(STATE_FILE);
        let saved = match experiment.restored {
            true => Saved::read(&state_path).filter(|s| s.tracking_uri == uri),
            false => None,
        };
        let (ready_tx, ready) = std::sync::mpsc::sync_channel(1);
        let (tx, rx) = std::sync::mpsc::sync_channel(self.queue_limit);
        let backlog = Arc::new(Backlog::default());
        let setup = Setup {
            backlog: backlog.clone(),
            uri: uri.clone(),
            experiment: self.experiment.clone().unwrap_or_else(|| experiment.name.clone()),
            info: experiment.clone(),
            saved,
            state_path,
            flush_timeout: self.flush_timeout,
            log_artifacts: self.log_artifacts,
        };
        let dropped = Arc::new(AtomicU64::new(0));
        let thread = std::thread::Builder::new()
            .name("rtune-mlflow".into())
            .spawn(move || run(setup, rx, ready_tx))
            .map_err(|e| Error::Callback { name: self.name(), message: e.to_string() })?;
        match ready.recv() {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                let _ = thread.join();
                return Err(self.refused(format!("{uri}: {why}")));
            }
            Err(_) => return Err(self.refused(format!("{uri}: the sending thread ended"))),
        }
        let path = experiment.path.clone();
        let live = Live { tx, thread: Some(thread), dropped, backlog, path };
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(live);
        Ok(())
    }

    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        let mut params = Vec::new();
        flatten_params(&trial.params, &mut params);
        let (trial, path) = (trial.trial_id.clone(), trial.path.clone());
        self.send(Event::Start { trial, path, params });
        Ok(())
    }

    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        let step = result.get("training_iteration").map_or(0, |&s| s as i64);
        let time = result.get("timestamp").copied().unwrap_or_else(crate::sys::unix_time);
        let values = result
            .iter()
            .filter(|(k, v)| v.is_finite() && !NOT_METRICS.contains(&k.as_str()))
            .map(|(k, &v)| (k.clone(), v))
            .collect();
        let (trial, time_ms) = (trial.trial_id.clone(), (time * 1000.0) as i64);
        self.send(Event::Result { trial, step, time_ms, values });
        Ok(())
    }

    fn on_trial_pause(&self, trial: &TrialInfo) -> Result<()> {
        let tags = vec![("rtune.status".into(), "PAUSED".into())];
        self.send(Event::Tags { trial: trial.trial_id.clone(), tags });
        Ok(())
    }

    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        let decision = if trial.stopped { "stopped early" } else { "completed" };
        let tags = vec![
            ("rtune.status".into(), "TERMINATED".into()),
            ("rtune.decision".into(), decision.into()),
        ];
        self.send(Event::End { ended: Ended::of(trial), tags });
        Ok(())
    }

    fn on_trial_error(&self, trial: &TrialInfo, error: &str) -> Result<()> {
        let error: String = error.chars().take(5000).collect();
        let tags = vec![("rtune.status".into(), "ERROR".into()), ("rtune.error".into(), error)];
        let ended = Ended { status: TrialStatus::Error, ..Ended::of(trial) };
        self.send(Event::End { ended, tags });
        Ok(())
    }

    /// Ends the parent run and waits (up to `flush_timeout`) for what is left to be sent.
    fn on_experiment_end(&self, trials: &[TrialInfo]) -> Result<()> {
        let failed = !trials.is_empty() && trials.iter().all(|t| t.status == TrialStatus::Error);
        let error = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        let status = if failed || error.is_some() { "FAILED" } else { "FINISHED" };
        let trials = trials.iter().map(Ended::of).collect();
        self.finish(Event::Finish { status, trials, error });
        Ok(())
    }

    fn on_experiment_error(&self, error: &str) -> Result<()> {
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_owned());
        Ok(())
    }

    /// The parent run and the runs of trials not ended are KILLED (RUNNING again on resume).
    fn on_experiment_interrupt(&self) -> Result<()> {
        let trials = Vec::new();
        self.finish(Event::Finish { status: "KILLED", trials, error: None });
        Ok(())
    }
}

impl MlflowLogger {
    /// Sends `last` and waits (up to `flush_timeout`) for everything to be sent.
    fn finish(&self, last: Event) {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut live) = live else { return };
        live.send(last);
        let (tx, thread) = (live.tx, live.thread.take());
        drop(tx);
        let (refused, unsent) = thread.map_or((0, 0), |t| t.join().unwrap_or((0, 0)));
        self.unsent.store(unsent, Ordering::Relaxed);
        let dropped = live.dropped.load(Ordering::Relaxed) + refused;
        if dropped > 0 {
            tracing::warn!(
                "MLflow: {dropped} event(s) were not sent (the server was too slow, or refused \
                 them)"
            );
        }
        if unsent > 0 {
            tracing::warn!(
                "MLflow: the server did not take {unsent} event(s) within the flush timeout; they \
                 are kept, and `rtune sync {}` (or the next `rtune resume`) sends them",
                live.path.display()
            );
        }
    }
}

/// The sending thread of a running sweep.
#[derive(Debug)]
struct Live {
    tx: SyncSender<Event>,
    /// Its answer at the end: the events refused, and those not sent in time (kept).
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
    /// The experiment's directory.
    path: PathBuf,
    /// Events the full queue refused.
    dropped: Arc<AtomicU64>,
    backlog: Arc<Backlog>,
}

impl Live {
    fn send(&self, event: Event) {
        match self.tx.try_send(event) {
            Ok(()) => {
                self.backlog.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!("MLflow: the server is behind; events are dropped (counted)");
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// What callbacks hand the sending thread.
#[derive(Debug)]
enum Event {
    /// A trial starts (or goes on): its run is made if missing, and what its result file holds
    /// beyond the last step sent is sent (reports a killed driver never sent).
    Start {
        trial: String,
        path: PathBuf,
        params: Vec<(String, String)>,
    },
    Result {
        trial: String,
        step: i64,
        time_ms: i64,
        values: Vec<(String, f64)>,
    },
    Tags {
        trial: String,
        tags: Vec<(String, String)>,
    },
    /// A trial ended: its run gets what it lacks (made or found first, its params if not
    /// logged, the steps of its result file not sent), `tags`, and its end. A trial can end
    /// with no start in this driver: one a killed driver ran, ended by a scheduler on resume.
    End {
        ended: Ended,
        tags: Vec<(String, String)>,
    },
    /// The sweep ended with these trials: the run of each finished one not ended yet gets its
    /// end as [`Event::End`] does (trials that ended under a killed driver before their runs
    /// were whole). KILLED: the sweep was interrupted, and so are the runs not ended (RUNNING
    /// again when it goes on).
    Finish {
        status: &'static str,
        trials: Vec<Ended>,
        error: Option<String>,
    },
}

/// A trial as it ended.
#[derive(Debug)]
struct Ended {
    trial: String,
    /// Its directory (its result file is there).
    path: PathBuf,
    status: TrialStatus,
    params: Vec<(String, String)>,
    /// At the sweep's end: its best checkpoint (`TrialInfo::checkpoint`).
    checkpoint: Option<PathBuf>,
}

impl Ended {
    fn of(trial: &TrialInfo) -> Ended {
        let mut params = Vec::new();
        flatten_params(&trial.params, &mut params);
        let (path, status) = (trial.path.clone(), trial.status);
        let checkpoint = trial.checkpoint.clone();
        Ended { trial: trial.trial_id.clone(), path, status, params, checkpoint }
    }

    /// Its run's end, MLflow's and rtune's.
    fn statuses(&self) -> (&'static str, &'static str) {
        match self.status {
            TrialStatus::Error => ("FAILED", "ERROR"),
            _ => ("FINISHED", "TERMINATED"),
        }
    }
}

/// `mlflow.json`: where a sweep's runs are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Saved {
    tracking_uri: String,
    experiment_id: String,
    parent_run_id: String,
    /// Where the parent run's artifacts go.
    #[serde(default)]
    artifact_uri: String,
    /// By rtune trial id.
    trials: BTreeMap<String, SavedTrial>,
    /// The best trial's best checkpoint goes into the parent run's artifacts.
    #[serde(default)]
    log_artifacts: bool,
    /// What the sweep's end could not send in its flush timeout (its rows and statuses are in
    /// the experiment's files): the next resume or `rtune sync` sends it.
    #[serde(default, skip_serializing_if = "is_zero")]
    unsent: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Saved {
    fn read(path: &Path) -> Option<Saved> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SavedTrial {
    run_id: String,
    /// Its params are in the run.
    #[serde(default)]
    params_logged: bool,
    /// Its directory (its checkpoints are there).
    #[serde(default)]
    path: PathBuf,
    /// The last step sent, and the metrics reported at it.
    step: i64,
    last: BTreeMap<String, f64>,
    ended: bool,
}

/// What the sending thread has yet to send: events it has not taken off the queue, and what it
/// took and has not sent.
#[derive(Debug, Default)]
struct Backlog {
    queued: AtomicU64,
    unsent: AtomicU64,
}

struct Setup {
    backlog: Arc<Backlog>,
    uri: String,
    experiment: String,
    info: ExperimentInfo,
    saved: Option<Saved>,
    state_path: PathBuf,
    flush_timeout: Duration,
    log_artifacts: bool,
}

/// Writes `mlflow.json` (atomically; a failure is a warning: it only costs a restored sweep
/// new runs).
fn save(path: &Path, saved: &Saved) {
    let json = serde_json::to_vec_pretty(saved).expect("serialises");
    let tmp = path.with_extension("json.tmp");
    if let Err(e) = std::fs::write(&tmp, json).and_then(|()| std::fs::rename(&tmp, path)) {
        tracing::warn!("MLflow: {}: {e}", path.display());
    }
}

fn now_ms() -> i64 {
    (crate::sys::unix_time() * 1000.0) as i64
}

/// A trial's params as MLflow's: nested keys dotted, values as text (strings bare, the rest as
/// JSON), cut to MLflow's longest.
fn flatten_params(params: &Params, out: &mut Vec<(String, String)>) {
    let json = serde_json::to_value(params).unwrap_or(Json::Null);
    for (key, value) in super::json_leaves(&json) {
        out.push((key, super::json_text(value).chars().take(MAX_PARAM_CHARS).collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Params as MLflow keeps them: nested keys dotted, strings bare, the rest as JSON, cut to
    /// MLflow's longest value.
    #[test]
    fn params_are_flat_text() {
        let nested = rtune_searchers::Map::from_iter([(
            "kind".to_owned(),
            rtune_searchers::Value::from("adam"),
        )]);
        let params = Params::new()
            .with("lr", 0.01)
            .with("opt", nested)
            .with("sizes", vec![1, 2])
            .with("long", "x".repeat(7000));
        let mut flat = Vec::new();
        flatten_params(&params, &mut flat);
        let flat: BTreeMap<String, String> = flat.into_iter().collect();
        assert_eq!(flat["lr"], "0.01");
        assert_eq!(flat["opt.kind"], "adam");
        assert_eq!(flat["sizes"], "[1,2]");
        assert_eq!(flat["long"].len(), MAX_PARAM_CHARS);
        assert_eq!(rest::url_encode("my sweep/1"), "my%20sweep%2F1");
    }
}
