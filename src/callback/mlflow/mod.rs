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
//! Where the runs are is kept in the experiment's `mlflow.json` (run ids, and each trial's last
//! step sent): a restored sweep goes on with the same runs and sends no step twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtune_searchers::{Metrics, Mode, Params, TrialStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

mod rest;

use rest::{Call, Client};

use super::{Callback, ExperimentInfo, TrialInfo};
use crate::error::{Error, Result};

/// See the module docs.
#[derive(Debug)]
pub struct MlflowLogger {
    uri: Option<String>,
    experiment: Option<String>,
    queue_limit: usize,
    flush_timeout: Duration,
    log_artifacts: bool,
    live: Mutex<Option<Live>>,
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
        }
    }

    /// The MLflow experiment the runs go into (made if missing); by default one named as the
    /// sweep.
    pub fn experiment(mut self, name: impl Into<String>) -> Self {
        self.experiment = Some(name.into());
        self
    }

    /// At the end, the best trial's latest checkpoint folder (its weights, metadata and data
    /// schema) goes into the parent run's artifacts as `best_checkpoint/`, through the
    /// server's artifact proxy.
    pub fn log_artifacts(mut self, yes: bool) -> Self {
        self.log_artifacts = yes;
        self
    }

    /// How many events may wait for a slow server before new ones are dropped (100,000).
    pub fn queue_limit(mut self, events: usize) -> Self {
        self.queue_limit = events.max(1);
        self
    }

    /// How long the end of the sweep waits for what is still to be sent (30 s).
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
        Error::config("MlflowLogger", why.to_string())
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

    /// Checks the server, makes or finds the parent run, and starts the sending thread.
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        let uri = self.tracking_uri().map_err(|why| self.refused(why))?;
        let state_path = experiment.path.join(STATE_FILE);
        let saved = match experiment.restored {
            true => std::fs::read(&state_path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Saved>(&b).ok())
                .filter(|s| s.tracking_uri == uri),
            false => None,
        };
        let (ready_tx, ready) = std::sync::mpsc::sync_channel(1);
        let (tx, rx) = std::sync::mpsc::sync_channel(self.queue_limit);
        let setup = Setup {
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
        let live = Live { tx, thread: Some(thread), dropped };
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
        self.send(Event::End {
            trial: trial.trial_id.clone(),
            status: "FINISHED",
            tags: vec![
                ("rtune.status".into(), "TERMINATED".into()),
                ("rtune.decision".into(), decision.into()),
            ],
        });
        Ok(())
    }

    fn on_trial_error(&self, trial: &TrialInfo, error: &str) -> Result<()> {
        let error: String = error.chars().take(5000).collect();
        self.send(Event::End {
            trial: trial.trial_id.clone(),
            status: "FAILED",
            tags: vec![("rtune.status".into(), "ERROR".into()), ("rtune.error".into(), error)],
        });
        Ok(())
    }

    /// Ends the parent run and waits (up to `flush_timeout`) for what is left to be sent.
    fn on_experiment_end(&self, trials: &[TrialInfo]) -> Result<()> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut live) = live else { return Ok(()) };
        let failed = !trials.is_empty() && trials.iter().all(|t| t.status == TrialStatus::Error);
        let status = if failed { "FAILED" } else { "FINISHED" };
        let trials =
            trials.iter().map(|t| (t.trial_id.clone(), t.path.clone(), t.status)).collect();
        live.send(Event::Finish { status, trials });
        let (tx, thread) = (live.tx, live.thread.take());
        drop(tx);
        let unsent = thread.map_or(0, |t| t.join().unwrap_or(0));
        let dropped = live.dropped.load(Ordering::Relaxed) + unsent;
        if dropped > 0 {
            tracing::warn!(
                "MLflow: {dropped} event(s) were not sent (the server was too slow or down)"
            );
        }
        Ok(())
    }
}

/// The sending thread of a running sweep.
#[derive(Debug)]
struct Live {
    tx: SyncSender<Event>,
    thread: Option<std::thread::JoinHandle<u64>>,
    /// Events the full queue refused.
    dropped: Arc<AtomicU64>,
}

impl Live {
    fn send(&self, event: Event) {
        match self.tx.try_send(event) {
            Ok(()) => {}
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
    End {
        trial: String,
        status: &'static str,
        tags: Vec<(String, String)>,
    },
    /// The sweep ended with these trials (id, directory, status): a run not ended yet gets its
    /// missing steps and its end.
    Finish {
        status: &'static str,
        trials: Vec<(String, PathBuf, TrialStatus)>,
    },
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
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SavedTrial {
    run_id: String,
    /// Its directory (its checkpoints are there).
    #[serde(default)]
    path: PathBuf,
    /// The last step sent, and the metrics reported at it.
    step: i64,
    last: BTreeMap<String, f64>,
    ended: bool,
}

struct Setup {
    uri: String,
    experiment: String,
    info: ExperimentInfo,
    saved: Option<Saved>,
    state_path: PathBuf,
    flush_timeout: Duration,
    log_artifacts: bool,
}

/// What is still to be sent for one trial.
#[derive(Debug, Default)]
struct Pending {
    /// Its params, until they are sent.
    params: Vec<(String, String)>,
    /// Its params were taken (they go once).
    logged_params: bool,
    /// Its directory, until noted in `mlflow.json`.
    path: Option<PathBuf>,
    started: bool,
    tags: Vec<(String, String)>,
    metrics: Vec<Json>,
    /// The highest step queued.
    step: i64,
    last: BTreeMap<String, f64>,
    end: Option<&'static str>,
}

/// The sending thread: makes the runs (answering `ready`), then sends events until the
/// callbacks are done and everything is sent or `flush_timeout` is over. Returns how many
/// events it could not send.
fn run(
    setup: Setup,
    events: Receiver<Event>,
    ready: SyncSender<std::result::Result<(), String>>,
) -> u64 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return 0;
        }
    };
    runtime.block_on(async move {
        let client = Client::new(&setup.uri);
        let began = client.begin(&setup).await;
        let mut sender = match began {
            Ok(saved) => Sender {
                client,
                saved,
                state_path: setup.state_path,
                pending: BTreeMap::new(),
                finish: None,
                refused: 0,
                log_artifacts: setup.log_artifacts,
            },
            Err(why) => {
                let _ = ready.send(Err(why.text));
                return 0;
            }
        };
        let _ = ready.send(Ok(()));
        sender.serve(events, &setup.info, setup.flush_timeout).await
    })
}

struct Sender {
    client: Client,
    saved: Saved,
    state_path: PathBuf,
    pending: BTreeMap<String, Pending>,
    finish: Option<&'static str>,
    /// Events the server refused (4xx), which are not sent again.
    refused: u64,
    log_artifacts: bool,
}

impl Sender {
    async fn serve(
        &mut self,
        events: Receiver<Event>,
        info: &ExperimentInfo,
        flush: Duration,
    ) -> u64 {
        let mut open = true;
        let mut deadline: Option<Instant> = None;
        let mut backoff = Duration::from_millis(250);
        let mut failing = false;
        loop {
            // Take what has come (waiting a little when there is nothing to send).
            let idle = self.pending.values().all(|p| p.is_empty()) && self.finish.is_none();
            if open {
                let first = match idle {
                    true => events.recv_timeout(Duration::from_millis(200)),
                    false => events.try_recv().map_err(|e| match e {
                        std::sync::mpsc::TryRecvError::Empty => {
                            std::sync::mpsc::RecvTimeoutError::Timeout
                        }
                        std::sync::mpsc::TryRecvError::Disconnected => {
                            std::sync::mpsc::RecvTimeoutError::Disconnected
                        }
                    }),
                };
                match first {
                    Ok(event) => {
                        self.take(event);
                        while let Ok(event) = events.try_recv() {
                            self.take(event);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        open = false;
                        deadline = Some(Instant::now() + flush);
                    }
                }
            }
            match self.send_all(info).await {
                Ok(()) => {
                    if failing {
                        tracing::info!("MLflow: the server answers again; sending what waited");
                    }
                    failing = false;
                    backoff = Duration::from_millis(250);
                    if !open {
                        return self.refused;
                    }
                }
                Err(why) => {
                    if !failing {
                        tracing::warn!("MLflow: {why}; retrying while the sweep goes on");
                    }
                    failing = true;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        let left = self.pending.values().map(Pending::count).sum::<usize>();
                        return self.refused + left as u64 + u64::from(self.finish.is_some());
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Start { trial, path, params } => {
                let known = self.saved.trials.contains_key(&trial);
                self.backfill(&trial, &path);
                let p = self.pending.entry(trial).or_default();
                p.path = Some(path);
                // A run's params are logged once (MLflow refuses to change them).
                if !known && !p.logged_params {
                    p.params = params;
                    p.logged_params = true;
                }
                p.started = true;
                p.tags.push(("rtune.status".into(), "RUNNING".into()));
            }
            Event::Result { trial, step, time_ms, values } => {
                self.queue_result(&trial, step, time_ms, values)
            }
            Event::Tags { trial, tags } => self.pending.entry(trial).or_default().tags.extend(tags),
            Event::End { trial, status, tags } => {
                let p = self.pending.entry(trial).or_default();
                p.tags.extend(tags);
                p.end = Some(status);
            }
            Event::Finish { status, trials } => {
                for (trial, path, status) in trials {
                    let ended = self.saved.trials.get(&trial).is_some_and(|t| t.ended);
                    let ending = self.pending.get(&trial).is_some_and(|p| p.end.is_some());
                    let ran =
                        self.saved.trials.contains_key(&trial) || self.pending.contains_key(&trial);
                    if ended || ending || !ran || !status.is_finished() {
                        continue;
                    }
                    self.backfill(&trial, &path);
                    let p = self.pending.entry(trial).or_default();
                    let (run, rtune) = match status {
                        TrialStatus::Error => ("FAILED", "ERROR"),
                        _ => ("FINISHED", "TERMINATED"),
                    };
                    p.tags.push(("rtune.status".into(), rtune.into()));
                    p.end = Some(run);
                }
                self.finish = Some(status);
            }
        }
    }

    /// One report, unless its step was sent or queued already (a trial going on from its
    /// checkpoint reports the steps after it again).
    fn queue_result(&mut self, trial: &str, step: i64, time_ms: i64, values: Vec<(String, f64)>) {
        let known_step = self.saved.trials.get(trial).map_or(0, |s| s.step);
        let p = self.pending.entry(trial.to_owned()).or_default();
        if step <= p.step.max(known_step) {
            return;
        }
        p.step = step;
        p.last = values.iter().cloned().collect();
        for (key, value) in values {
            let metric = json!({"key": key, "value": value, "timestamp": time_ms, "step": step});
            p.metrics.push(metric);
        }
    }

    /// Queues the rows of the trial's `result.json` (Ray's result file, one JSON object per
    /// report) beyond the last step sent or queued: what a killed driver reported and never
    /// sent.
    fn backfill(&mut self, trial: &str, dir: &Path) {
        let Ok(text) = std::fs::read_to_string(dir.join("result.json")) else { return };
        for row in text.lines().filter_map(|l| serde_json::from_str::<Json>(l).ok()) {
            let Some(row) = row.as_object() else { continue };
            let step = row.get("training_iteration").and_then(Json::as_f64).unwrap_or(0.0);
            let time = row.get("timestamp").and_then(Json::as_f64).unwrap_or(0.0);
            let values = row
                .iter()
                .filter(|(k, _)| !NOT_METRICS.contains(&k.as_str()))
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64().filter(|v| v.is_finite())?)))
                .collect();
            self.queue_result(trial, step as i64, (time * 1000.0) as i64, values);
        }
    }

    /// Sends everything pending, trial by trial (its run made first, its end last), then the
    /// sweep's end; stops at the first call to try again (what was sent is no longer pending).
    async fn send_all(&mut self, info: &ExperimentInfo) -> std::result::Result<(), String> {
        let trials: Vec<String> =
            self.pending.iter().filter(|(_, p)| !p.is_empty()).map(|(k, _)| k.clone()).collect();
        for trial in trials {
            self.send_trial(&trial).await?;
        }
        if let Some(status) = self.finish {
            let parent = self.saved.parent_run_id.clone();
            if let Some((best, metrics, step)) = self.best(info) {
                let metrics: Vec<Json> = metrics
                    .iter()
                    .map(
                        |(k, v)| json!({"key": k, "value": v, "timestamp": now_ms(), "step": step}),
                    )
                    .collect();
                let tags = vec![("rtune.best_trial".to_owned(), best.clone())];
                let sent = self.client.log_batch(&parent, &metrics, &[], &tags).await;
                settled(&mut self.refused, metrics.len(), sent)?;
                if std::mem::take(&mut self.log_artifacts) {
                    self.send_best_checkpoint(&best).await?;
                }
            }
            let ended = self.client.end_run(&parent, status).await;
            settled(&mut self.refused, 1, ended)?;
            self.finish = None;
        }
        Ok(())
    }

    async fn send_trial(&mut self, trial: &str) -> std::result::Result<(), String> {
        let refused = &mut self.refused;
        let p = self.pending.get_mut(trial).expect("listed");
        let run_id = match self.saved.trials.get(trial) {
            Some(saved) => saved.run_id.clone(),
            None => {
                let parent = self.saved.parent_run_id.as_str();
                let tags = [("mlflow.parentRunId", parent), ("rtune.trial_id", trial)];
                let made = self.client.create_run(&self.saved.experiment_id, trial, &tags).await;
                let run_id = match made {
                    Ok((run_id, _)) => run_id,
                    Err(f) if f.retry => return Err(f.text),
                    Err(f) => {
                        // Nothing of this trial can go anywhere.
                        settled(refused, p.count(), Err(f))?;
                        *p = Pending::default();
                        return Ok(());
                    }
                };
                let saved = SavedTrial { run_id: run_id.clone(), ..SavedTrial::default() };
                self.saved.trials.insert(trial.to_owned(), saved);
                save(&self.state_path, &self.saved);
                run_id
            }
        };
        while !p.params.is_empty() {
            let n = p.params.len().min(MAX_PARAMS);
            let sent = self.client.log_batch(&run_id, &[], &p.params[..n], &[]).await;
            settled(refused, n, sent)?;
            p.params.drain(..n);
        }
        if p.started {
            settled(refused, 1, self.client.set_running(&run_id).await)?;
            p.started = false;
        }
        while !p.tags.is_empty() || !p.metrics.is_empty() {
            let tags = p.tags.len().min(MAX_TAGS);
            let metrics = p.metrics.len().min(MAX_METRICS - tags);
            let sent =
                self.client.log_batch(&run_id, &p.metrics[..metrics], &[], &p.tags[..tags]).await;
            settled(refused, tags + metrics, sent)?;
            p.tags.drain(..tags);
            p.metrics.drain(..metrics);
        }
        let saved = self.saved.trials.get_mut(trial).expect("made above");
        saved.step = saved.step.max(p.step);
        if let Some(path) = p.path.take() {
            saved.path = path;
        }
        if !p.last.is_empty() {
            saved.last = std::mem::take(&mut p.last);
        }
        if let Some(status) = p.end {
            settled(refused, 1, self.client.end_run(&run_id, status).await)?;
            p.end = None;
            saved.ended = true;
        }
        save(&self.state_path, &self.saved);
        Ok(())
    }

    /// The latest checkpoint of trial `best` into the parent run's artifacts, as
    /// `best_checkpoint/...`; an artifact store the server does not proxy is a warning.
    async fn send_best_checkpoint(&mut self, best: &str) -> std::result::Result<(), String> {
        let dir = self.saved.trials.get(best).map(|t| t.path.clone()).unwrap_or_default();
        let latest = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("metadata.json").is_file())
            .filter(|p| {
                p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("checkpoint_"))
            })
            .max();
        let Some(checkpoint) = latest else {
            tracing::warn!("MLflow: trial {best} has no checkpoint to log as an artifact");
            return Ok(());
        };
        for name in crate::sys::relative_files(&checkpoint) {
            let file = checkpoint.join(&name);
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let at = format!("best_checkpoint/{name}");
            match self.client.put_artifact(&self.saved.artifact_uri, &at, bytes).await {
                Some(sent) => settled(&mut self.refused, 1, sent)?,
                None => {
                    tracing::warn!(
                        "MLflow: the server keeps artifacts at {}, which it does not serve \
                         (start it with --serve-artifacts): the checkpoint is not logged",
                        self.saved.artifact_uri
                    );
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The best trial by the sweep's metric (its last value), with its last metrics and step.
    fn best(&self, info: &ExperimentInfo) -> Option<(String, BTreeMap<String, f64>, i64)> {
        let (metric, mode) = info.metric.as_ref()?;
        let better = |a: f64, b: f64| if *mode == Mode::Max { a > b } else { a < b };
        let mut best: Option<(&String, &SavedTrial, f64)> = None;
        for (id, t) in &self.saved.trials {
            let Some(&v) = t.last.get(metric).filter(|v| v.is_finite()) else { continue };
            if best.is_none_or(|(_, _, b)| better(v, b)) {
                best = Some((id, t, v));
            }
        }
        best.map(|(id, t, _)| (id.clone(), t.last.clone(), t.step))
    }
}

impl Pending {
    fn is_empty(&self) -> bool {
        !self.started
            && self.params.is_empty()
            && self.tags.is_empty()
            && self.metrics.is_empty()
            && self.end.is_none()
    }

    fn count(&self) -> usize {
        self.params.len() + self.tags.len() + self.metrics.len() + usize::from(self.end.is_some())
    }
}

/// A call's outcome for the work it carried: done, or refused (`n` events counted, the first
/// refusal warned of; sending it again would not help), or to be tried again (`Err`).
fn settled(refused: &mut u64, n: usize, outcome: Call<()>) -> std::result::Result<(), String> {
    match outcome {
        Ok(()) => Ok(()),
        Err(f) if f.retry => Err(f.text),
        Err(f) => {
            if *refused == 0 {
                tracing::warn!("MLflow refused {}; it is not sent again", f.text);
            }
            *refused += n as u64;
            Ok(())
        }
    }
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
    flatten("", &json, out);
}

fn flatten(prefix: &str, value: &Json, out: &mut Vec<(String, String)>) {
    match value {
        Json::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        Json::String(s) => out.push((prefix.to_owned(), s.chars().take(MAX_PARAM_CHARS).collect())),
        other => {
            out.push((prefix.to_owned(), other.to_string().chars().take(MAX_PARAM_CHARS).collect()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(dir: &Path) -> Sender {
        Sender {
            client: Client::new("http://127.0.0.1:9"),
            saved: Saved::default(),
            state_path: dir.join(STATE_FILE),
            pending: BTreeMap::new(),
            finish: None,
            refused: 0,
            log_artifacts: false,
        }
    }

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

    /// A step sent or queued is not queued again, and a trial's result file fills in the steps
    /// after the last one sent (what a killed driver never sent), once.
    #[test]
    fn each_step_goes_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sender(dir.path());
        let saved = SavedTrial { run_id: "r".into(), step: 2, ..SavedTrial::default() };
        s.saved.trials.insert("t".into(), saved);
        let rows: String = (1..=4)
            .map(|i| {
                let row = json!({"training_iteration": i, "score": i as f64 / 10.0,
                                 "timestamp": 1_700_000_000 + i, "pid": 7, "done": false});
                format!("{row}\n")
            })
            .collect();
        std::fs::write(dir.path().join("result.json"), rows).unwrap();
        s.backfill("t", dir.path());
        s.queue_result("t", 4, 0, vec![("score".into(), 0.4)]);
        s.queue_result("t", 5, 0, vec![("score".into(), 0.5)]);
        s.backfill("t", dir.path());
        let p = &s.pending["t"];
        let steps: Vec<(i64, &str)> = p
            .metrics
            .iter()
            .map(|m| (m["step"].as_i64().unwrap(), m["key"].as_str().unwrap()))
            .collect();
        let want = [(3, "score"), (4, "score"), (5, "score")];
        assert_eq!(steps, want, "the step, its time, pid and done are no metrics; 1-2 were sent");
        assert_eq!(p.metrics[0]["timestamp"], json!(1_700_000_003_000i64));
    }
}
