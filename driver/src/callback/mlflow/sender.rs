//! The logger's sending thread: what waits to be sent for each trial, sent in batches in order
//! (a trial's run made first, its end last), retried with backoff while the server does not
//! answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use rtune_searchers::Mode;
use serde_json::{Value as Json, json};

use super::rest::{Call, Client};
use super::{
    Ended, Event, ExperimentInfo, MAX_METRICS, MAX_PARAMS, MAX_TAGS, NOT_METRICS, Saved,
    SavedTrial, Setup, now_ms, save,
};

/// What is still to be sent for one trial.
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Its params, until they are sent.
    params: Vec<(String, String)>,
    /// Its params were taken (they go once).
    logged_params: bool,
    /// Making its run was tried (and may have made it).
    create_tried: bool,
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
/// events the server refused, and how many it could not send in time (noted in `mlflow.json`,
/// for a resume or `rtune sync` to send).
pub(super) fn run(
    setup: Setup,
    events: Receiver<Event>,
    ready: SyncSender<std::result::Result<(), String>>,
) -> (u64, u64) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return (0, 0);
        }
    };
    runtime.block_on(async move {
        let client = Client::new(&setup.uri);
        let began = client.begin(&setup).await;
        let mut sender = match began {
            Ok(saved) => Sender {
                backlog: setup.backlog,
                client,
                saved,
                state_path: setup.state_path,
                pending: BTreeMap::new(),
                finish: None,
                finish_error: None,
                refused: 0,
                restored: setup.info.restored,
                log_artifacts: setup.log_artifacts,
                best_checkpoints: BTreeMap::new(),
            },
            Err(why) => {
                let _ = ready.send(Err(why.text));
                return (0, 0);
            }
        };
        let _ = ready.send(Ok(()));
        sender.serve(events, &setup.info, setup.flush_timeout).await
    })
}

pub(super) struct Sender {
    /// Kept for the metrics endpoint (`Callback::backlog`).
    backlog: std::sync::Arc<super::Backlog>,
    client: Client,
    saved: Saved,
    state_path: PathBuf,
    pending: BTreeMap<String, Pending>,
    finish: Option<&'static str>,
    /// The error the sweep ended with.
    finish_error: Option<String>,
    /// Events the server refused (4xx), which are not sent again.
    refused: u64,
    /// A restored sweep's: a trial's run may exist though `mlflow.json` does not name it.
    restored: bool,
    log_artifacts: bool,
    /// Each ended trial's best checkpoint, as the sweep's end named it.
    best_checkpoints: BTreeMap<String, PathBuf>,
}

impl Sender {
    async fn serve(
        &mut self,
        events: Receiver<Event>,
        info: &ExperimentInfo,
        flush: Duration,
    ) -> (u64, u64) {
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
                        let mut taken = 1;
                        self.take(event);
                        while let Ok(event) = events.try_recv() {
                            taken += 1;
                            self.take(event);
                        }
                        self.backlog.queued.fetch_sub(taken, Ordering::Relaxed);
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        open = false;
                        deadline = Some(Instant::now() + flush);
                    }
                }
            }
            let sent = self.send_all(info).await;
            let unsent = self.pending.values().map(Pending::count).sum::<usize>();
            self.backlog.unsent.store(unsent as u64, Ordering::Relaxed);
            match sent {
                Ok(()) => {
                    if failing {
                        tracing::info!("MLflow: the server answers again; sending what waited");
                    }
                    failing = false;
                    backoff = Duration::from_millis(250);
                    if !open {
                        if self.saved.unsent > 0 {
                            self.saved.unsent = 0;
                            save(&self.state_path, &self.saved);
                        }
                        return (self.refused, 0);
                    }
                }
                Err(why) => {
                    if !failing {
                        tracing::warn!("MLflow: {why}; retrying while the sweep goes on");
                    }
                    failing = true;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        // Kept: the rows are in the trials' files, and what was sent of them
                        // in mlflow.json.
                        let left = self.pending.values().map(Pending::count).sum::<usize>();
                        self.saved.unsent = left as u64 + u64::from(self.finish.is_some());
                        save(&self.state_path, &self.saved);
                        return (self.refused, self.saved.unsent);
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
                let p = self.catch_up(trial, path, params);
                p.started = true;
                p.tags.push(("rtune.status".into(), "RUNNING".into()));
            }
            Event::Result { trial, step, time_ms, values } => {
                self.queue_result(&trial, step, time_ms, values)
            }
            Event::Tags { trial, tags } => self.pending.entry(trial).or_default().tags.extend(tags),
            Event::End { ended, tags } => self.end(ended, tags),
            Event::Finish { status, trials, error } => {
                self.finish_error = error;
                for ended in trials {
                    if let Some(checkpoint) = &ended.checkpoint {
                        self.best_checkpoints.insert(ended.trial.clone(), checkpoint.clone());
                    }
                    let (trial, status) = (&ended.trial, ended.status);
                    let done = self.saved.trials.get(trial).is_some_and(|t| t.ended);
                    let ending = self.pending.get(trial).is_some_and(|p| p.end.is_some());
                    if done || ending || !status.is_finished() {
                        continue;
                    }
                    let tags = vec![("rtune.status".into(), ended.statuses().1.into())];
                    self.end(ended, tags);
                }
                self.finish = Some(status);
            }
        }
    }

    /// Queues a trial's end, after what its run may lack (a killed driver may have ended the
    /// trial before its run was whole, or made).
    fn end(&mut self, ended: Ended, tags: Vec<(String, String)>) {
        // Ended and sent already (`rtune sync` tells every trial's end again).
        if self.saved.trials.get(&ended.trial).is_some_and(|t| t.ended) {
            return;
        }
        let status = ended.statuses().0;
        let p = self.catch_up(ended.trial, ended.path, ended.params);
        p.tags.extend(tags);
        p.end = Some(status);
    }

    /// What is pending for a trial (in `path`) as it starts or ends, with what its run may
    /// lack queued first: its params, unless its run has them or they are queued (MLflow keeps
    /// a run's params once: it refuses to change them), and the steps of its result file not
    /// sent.
    fn catch_up(
        &mut self,
        trial: String,
        path: PathBuf,
        params: Vec<(String, String)>,
    ) -> &mut Pending {
        self.backfill(&trial, &path);
        let logged = self.saved.trials.get(&trial).is_some_and(|t| t.params_logged);
        let p = self.pending.entry(trial).or_default();
        if !logged && !p.logged_params {
            p.params = params;
            p.logged_params = true;
        }
        p.path = Some(path);
        p
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
            if status == "KILLED" {
                // Interrupted: the runs still running stop with the sweep (not ended: a resumed
                // sweep marks them RUNNING again).
                let running: Vec<String> = self
                    .saved
                    .trials
                    .values()
                    .filter(|t| !t.ended)
                    .map(|t| t.run_id.clone())
                    .collect();
                for run in running {
                    settled(&mut self.refused, 1, self.client.end_run(&run, status).await)?;
                }
            } else if let Some((best, metrics, step)) = self.best(info) {
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
            if let Some(error) = self.finish_error.take() {
                let tags = [("rtune.error".to_owned(), error.chars().take(5000).collect())];
                let sent = self.client.log_batch(&parent, &[], &[], &tags).await;
                settled(&mut self.refused, 1, sent)?;
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
                let (experiment, parent) = (&self.saved.experiment_id, &self.saved.parent_run_id);
                // A run made by a request whose answer was lost, or by a driver killed before
                // it noted the run: found, not made twice.
                let found = match p.create_tried || self.restored {
                    true => {
                        self.client.find_run(experiment, parent, trial).await.map_err(|f| f.text)?
                    }
                    false => None,
                };
                p.create_tried = true;
                let tags = [("mlflow.parentRunId", parent.as_str()), ("rtune.trial_id", trial)];
                let made = match found {
                    Some(run_id) => Ok((run_id, String::new())),
                    None => self.client.create_run(experiment, trial, &tags).await,
                };
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
        if !p.params.is_empty() {
            while !p.params.is_empty() {
                let n = p.params.len().min(MAX_PARAMS);
                let sent = self.client.log_batch(&run_id, &[], &p.params[..n], &[]).await;
                settled(refused, n, sent)?;
                p.params.drain(..n);
            }
            let saved = self.saved.trials.get_mut(trial).expect("made above");
            saved.params_logged = true;
            save(&self.state_path, &self.saved);
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

    /// The best checkpoint of trial `best` (by the sweep's rule, `TrialResult::checkpoint`)
    /// into the parent run's artifacts, as `best_checkpoint/...`, its files down from the store
    /// first where it is a stub; an artifact store the server does not proxy is a warning.
    async fn send_best_checkpoint(&mut self, best: &str) -> std::result::Result<(), String> {
        let Some(checkpoint) = self.best_checkpoints.get(best).cloned() else {
            tracing::warn!("MLflow: trial {best} has no checkpoint to log as an artifact");
            return Ok(());
        };
        let whole = crate::outcome::Checkpoint { path: checkpoint.clone() };
        let fetched = tokio::task::spawn_blocking(move || whole.files().map(|_| ()));
        fetched.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        let files = crate::sys::relative_files(&checkpoint);
        // Its bookkeeping (`.uploaded`, ..) is no part of the checkpoint.
        let files = files.into_iter().filter(|name| !name.split('/').any(|p| p.starts_with('.')));
        for name in files {
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
        let (metric, mode) = (info.objectives.metric()?, info.objectives.mode()?);
        let better = |a: f64, b: f64| if mode == Mode::Max { a > b } else { a < b };
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

#[cfg(test)]
mod tests {
    use super::super::STATE_FILE;
    use super::*;
    use rtune_searchers::TrialStatus;

    fn sender(dir: &Path) -> Sender {
        Sender {
            backlog: Default::default(),
            client: Client::new("http://127.0.0.1:9"),
            saved: Saved::default(),
            state_path: dir.join(STATE_FILE),
            pending: BTreeMap::new(),
            finish: None,
            finish_error: None,
            refused: 0,
            restored: false,
            log_artifacts: false,
            best_checkpoints: BTreeMap::new(),
        }
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

    /// A trial's end, or the sweep's for the finished trials whose runs are not ended,
    /// completes runs that `mlflow.json` does not know (their driver was killed before it noted
    /// them) or whose params were not logged: params, every reported step, the status and the
    /// end. Ended runs and unfinished trials are left.
    #[test]
    fn the_end_completes_runs_a_killed_driver_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sender(dir.path());
        s.restored = true;
        let known = SavedTrial { run_id: "r".into(), step: 1, ..SavedTrial::default() };
        let ended = SavedTrial { run_id: "e".into(), ended: true, ..SavedTrial::default() };
        s.saved.trials.insert("known".into(), known);
        s.saved.trials.insert("ended".into(), ended);
        for trial in ["unknown", "known", "ended", "running", "stopped"] {
            let rows: String = (1..=2)
                .map(|i| format!("{}\n", json!({"training_iteration": i, "score": i})))
                .collect();
            std::fs::create_dir_all(dir.path().join(trial)).unwrap();
            std::fs::write(dir.path().join(trial).join("result.json"), rows).unwrap();
        }
        let ended = |trial: &str, status| Ended {
            trial: trial.into(),
            path: dir.path().join(trial),
            status,
            params: vec![("rate".into(), "0.1".into())],
            checkpoint: None,
        };
        // Ended by a scheduler on resume, with no start in this driver.
        let tags = vec![("rtune.decision".into(), "stopped early".into())];
        s.take(Event::End { ended: ended("stopped", TrialStatus::Paused), tags });
        s.take(Event::Finish {
            status: "FINISHED",
            trials: vec![
                ended("unknown", TrialStatus::Terminated),
                ended("known", TrialStatus::Error),
                ended("ended", TrialStatus::Terminated),
                ended("running", TrialStatus::Running),
            ],
            error: None,
        });
        let steps = |p: &Pending| p.metrics.iter().map(|m| m["step"].as_i64().unwrap()).collect();
        let unknown = &s.pending["unknown"];
        assert_eq!(unknown.params, [("rate".to_owned(), "0.1".to_owned())]);
        assert_eq!(steps(unknown), vec![1, 2]);
        assert_eq!(unknown.end, Some("FINISHED"));
        assert_eq!(unknown.path.as_deref(), Some(&*dir.path().join("unknown")));
        let known = &s.pending["known"];
        assert_eq!((known.params.len(), steps(known), known.end), (1, vec![2], Some("FAILED")));
        assert!(known.tags.contains(&("rtune.status".into(), "ERROR".into())));
        let stopped = &s.pending["stopped"];
        assert_eq!((stopped.params.len(), steps(stopped)), (1, vec![1, 2]));
        assert_eq!(stopped.tags, [("rtune.decision".to_owned(), "stopped early".to_owned())]);
        assert_eq!(stopped.end, Some("FINISHED"), "a stopped trial's run is finished");
        assert!(!s.pending.contains_key("ended") && !s.pending.contains_key("running"));
        assert_eq!(s.finish, Some("FINISHED"));
    }
}
