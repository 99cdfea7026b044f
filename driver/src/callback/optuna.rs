//! [`OptunaJournal`]: the sweep as an Optuna study in an Optuna journal file (the format of
//! Optuna's `JournalStorage` with `JournalFileBackend`), so that `optuna-dashboard <file>` shows
//! it and `optuna.load_study` reads it. One Optuna trial per rtune trial, made when the trial is
//! (WAITING, then RUNNING), with its sampled params and their distributions; the sweep's metric
//! at each `training_iteration` as intermediate values; its end as COMPLETE (with the last value
//! of the metric), PRUNED (stopped by the sweep, as a pruner would: with its last value, as
//! Optuna gives one), or FAIL. A multi-objective sweep is a study of as many directions, each
//! trial completed with its objectives' last values (from a result that had them all), and no
//! intermediate values (Optuna keeps those for one objective only).
//!
//! A journal is a log of JSON operations, one per line, that readers replay; ids are positions
//! in that replay (the n-th study made, the n-th trial). So a writer that shares the file (with
//! another sweep, or Optuna itself) appends under Optuna's own lock (`<file>.lock`, a symbolic
//! link) after replaying what others appended since it last looked. Trial events are written at
//! once, reports in batches (at most every half second, and at every trial event). A journal
//! that cannot be written once the sweep runs is a warning, not the sweep's end: what was not
//! written goes at the next write. A restored sweep goes on with the same study: its trials are
//! found by their `rtune_trial_id` attribute, and a step written twice is one value.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rtune_searchers::{Domain, Metrics, Mode, Param, Value};
use serde_json::{Value as Json, json};

use super::{Callback, ExperimentInfo, TrialInfo};
use crate::error::{Error, IoContext, Result};
use crate::setting::Setting;

/// See the module docs.
#[derive(Debug)]
pub struct OptunaJournal {
    path: PathBuf,
    study: Mutex<Option<Study>>,
}

impl OptunaJournal {
    /// Writes the sweep into the journal file at `path` (made if missing; other studies in it
    /// stay as they are).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        OptunaJournal { path: path.into(), study: Mutex::new(None) }
    }

    /// Whether the journal can be written, and if not why: its folder exists and is writable,
    /// and a file already there is a journal (every line an operation). Before the sweep, so a
    /// wrong path is one error before anything runs.
    pub fn check(&self) -> std::result::Result<(), String> {
        let path = &self.path;
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !folder.is_dir() {
            return Err(format!("its folder {} does not exist", folder.display()));
        }
        if path.is_dir() {
            return Err("it is a folder; name a file in it, e.g. optuna.log".into());
        }
        let text = |e: Error| e.to_string();
        if path.exists() {
            let file = OpenOptions::new().read(true).append(true).open(path).at(path);
            Replay::default().catch_up(file.map_err(text)?, path, false).map_err(text)
        } else {
            // Writable: made and removed again (the sweep makes it when it begins).
            File::create(path).at(path).map_err(text)?;
            fs::remove_file(path).at(path).map_err(text)
        }
    }

    /// A mistake in the settings (exit 2 from `rtune run`): `run.optuna` in a sweep file.
    fn refused(&self, why: &str) -> Error {
        Error::config(Setting::Optuna, format!("{}: {why}", self.path.display()))
    }

    fn with(&self, f: impl FnOnce(&mut Study) -> Result<()>) -> Result<()> {
        let mut study = self.study.lock().unwrap_or_else(|p| p.into_inner());
        match study.as_mut() {
            Some(study) => f(study),
            None => Ok(()),
        }
    }
}

impl Callback for OptunaJournal {
    fn name(&self) -> String {
        "OptunaJournal".into()
    }

    /// Makes the study (named as the experiment), or finds it again for a restored sweep. A
    /// sweep without a metric, or a journal already holding a study of this name for a new
    /// sweep, is refused (`Error::Config`: nothing runs).
    fn on_experiment_begin(&self, experiment: &ExperimentInfo) -> Result<()> {
        if experiment.objectives.is_empty() {
            return Err(self.refused(
                "a study has an objective: set the sweep's metric and mode (tune.metric, \
                 tune.mode)",
            ));
        }
        let metrics: Vec<String> = experiment.objectives.iter().map(|o| o.metric.clone()).collect();
        let params = experiment.param_space.sampled();
        let params = params.into_iter().map(|(name, param)| (name, param.clone())).collect();
        let mut study = Study {
            path: self.path.clone(),
            replay: Replay { study_name: experiment.name.clone(), ..Replay::default() },
            worker_id: format!("rtune-{}-{}", std::process::id(), crate::sys::unix_time()),
            metrics,
            params,
            last: HashMap::new(),
            pending: Vec::new(),
            flushed: Instant::now(),
            warned: false,
        };
        let path =
            std::path::absolute(&experiment.path).unwrap_or_else(|_| experiment.path.clone());
        let (name, path) = (&experiment.name, path.display().to_string());
        let metric = study.metrics.join(",");
        let directions: Vec<u8> =
            experiment.objectives.iter().map(|o| if o.mode == Mode::Min { 1 } else { 2 }).collect();
        let mut taken = false;
        let made = study.write(|replay| {
            if replay.study_id.is_some() {
                taken = !experiment.restored;
                return Vec::new();
            }
            let study = replay.emit(json!({"op_code": CREATE_STUDY, "study_name": name,
                                           "directions": directions}));
            let id = replay.study_id.expect("made");
            let attr = |k: &str, v: &str| {
                json!({"op_code": SET_STUDY_USER_ATTR, "study_id": id, "user_attr": {k: v}})
            };
            vec![study, attr("rtune_experiment", &path), attr("rtune_metric", &metric)]
        });
        made.map_err(|why| {
            Error::Storage(format!("Optuna journal {}: {why}", self.path.display()))
        })?;
        if taken {
            return Err(self.refused(&format!(
                "it already holds a study named {name:?}; give this sweep another journal"
            )));
        }
        *self.study.lock().unwrap_or_else(|p| p.into_inner()) = Some(study);
        Ok(())
    }

    fn on_trial_add(&self, trial: &TrialInfo) -> Result<()> {
        self.with(|study| {
            if !study.replay.trials.contains_key(&trial.trial_id) {
                let (params, distributions) = study.optuna_params(&trial.params);
                study.pending.push(Op::Create {
                    trial: trial.trial_id.clone(),
                    params,
                    distributions,
                });
            }
            study.flush(true);
            Ok(())
        })
    }

    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        self.with(|study| {
            study.pending.push(Op::State {
                trial: trial.trial_id.clone(),
                state: RUNNING,
                values: None,
                at: crate::sys::unix_time(),
            });
            study.flush(true);
            Ok(())
        })
    }

    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        self.with(|study| {
            let values: Option<Vec<f64>> = study
                .metrics
                .iter()
                .map(|m| result.get(m).copied().filter(|v| v.is_finite()))
                .collect();
            let step = result.get("training_iteration").copied();
            if let Some(values) = values {
                let trial = trial.trial_id.clone();
                // Optuna keeps intermediate values of a study with one objective only.
                if let ([value], Some(step)) = (values.as_slice(), step) {
                    let (trial, step, value) = (trial.clone(), step as i64, *value);
                    study.pending.push(Op::Value { trial, step, value });
                }
                study.last.insert(trial, values);
            }
            study.flush(false);
            Ok(())
        })
    }

    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        let state = if trial.stopped { PRUNED } else { COMPLETE };
        self.end(trial, state)
    }

    fn on_trial_error(&self, trial: &TrialInfo, _error: &str) -> Result<()> {
        self.end(trial, FAIL)
    }

    fn on_experiment_end(&self, _trials: &[TrialInfo]) -> Result<()> {
        self.with(|study| {
            study.flush(true);
            Ok(())
        })
    }

    fn on_experiment_interrupt(&self) -> Result<()> {
        self.on_experiment_end(&[])
    }
}

impl OptunaJournal {
    fn end(&self, trial: &TrialInfo, state: u8) -> Result<()> {
        let at = crate::sys::unix_time();
        self.with(|study| {
            let values = study.last.get(&trial.trial_id).cloned();
            let trial = trial.trial_id.clone();
            study.pending.push(Op::State { trial, state, values, at });
            study.flush(true);
            Ok(())
        })
    }
}

// Optuna's `JournalOperation` codes, and its `TrialState` values.
const CREATE_STUDY: u8 = 0;
const DELETE_STUDY: u8 = 1;
const SET_STUDY_USER_ATTR: u8 = 2;
const CREATE_TRIAL: u8 = 4;
const SET_TRIAL_STATE_VALUES: u8 = 6;
const SET_TRIAL_INTERMEDIATE_VALUE: u8 = 7;
const RUNNING: u8 = 0;
const COMPLETE: u8 = 1;
const PRUNED: u8 = 2;
const FAIL: u8 = 3;
const WAITING: u8 = 4;

/// How often reports are written while nothing else is.
const REPORTS_EVERY: Duration = Duration::from_millis(500);

/// What is still to be written; trials are named by their rtune ids, whose Optuna ids are known
/// only when the journal is replayed up to the write.
#[derive(Debug)]
enum Op {
    Create {
        trial: String,
        params: serde_json::Map<String, Json>,
        distributions: serde_json::Map<String, Json>,
    },
    State {
        trial: String,
        state: u8,
        values: Option<Vec<f64>>,
        at: f64,
    },
    Value {
        trial: String,
        step: i64,
        value: f64,
    },
}

/// The sweep's study as this writer knows it.
#[derive(Debug)]
struct Study {
    path: PathBuf,
    replay: Replay,
    worker_id: String,
    /// The objectives' metrics (one, or several for a multi-objective sweep).
    metrics: Vec<String>,
    /// The sampled params, by dotted name.
    params: Vec<(String, Param)>,
    /// Each trial's last values of the metrics (from a result that had them all).
    last: HashMap<String, Vec<f64>>,
    pending: Vec<Op>,
    flushed: Instant,
    /// A failed write was warned of (once until one succeeds).
    warned: bool,
}

impl Study {
    /// Writes what is pending (reports only every `REPORTS_EVERY`, unless `now`); a failure is
    /// a warning and the operations stay pending.
    fn flush(&mut self, now: bool) {
        if self.pending.is_empty() || (!now && self.flushed.elapsed() < REPORTS_EVERY) {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let outcome =
            self.write(|replay| pending.iter().filter_map(|op| replay.render(op)).collect());
        match outcome {
            Ok(()) => {
                self.flushed = Instant::now();
                self.warned = false;
            }
            Err(why) => {
                if !self.warned {
                    tracing::warn!(
                        "Optuna journal {}: {why}; tried again at the next write",
                        self.path.display()
                    );
                    self.warned = true;
                }
                self.pending = pending;
            }
        }
    }

    /// Under the journal's lock: replays what was appended since the last look, then appends
    /// the lines `ops` gives (each applied to the replay it is given: `Replay::emit`). The
    /// replay stays as it was when the append fails.
    fn write(
        &mut self,
        ops: impl FnOnce(&mut Replay) -> Vec<Json>,
    ) -> std::result::Result<(), String> {
        let _lock = JournalLock::acquire(&self.path).map_err(|e| e.to_string())?;
        let path = &self.path;
        let text = |e: std::io::Error| format!("{e}");
        let mut file =
            OpenOptions::new().read(true).create(true).append(true).open(path).map_err(text)?;
        let reader = file.try_clone().map_err(text)?;
        self.replay.catch_up(reader, path, true).map_err(|e| e.to_string())?;
        let mut next = self.replay.clone();
        let mut lines = String::new();
        for mut line in ops(&mut next) {
            line["worker_id"] = Json::from(self.worker_id.as_str());
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        if !lines.is_empty() {
            file.write_all(lines.as_bytes()).and_then(|()| file.sync_data()).map_err(text)?;
        }
        next.offset = self.replay.offset + lines.len() as u64;
        self.replay = next;
        Ok(())
    }

    /// A trial's sampled params as Optuna keeps them (its internal representation: a float for
    /// numbers, the index for a choice) with their distributions (JSON text, as Optuna's
    /// `distribution_to_json`).
    fn optuna_params(
        &self,
        params: &rtune_searchers::Params,
    ) -> (serde_json::Map<String, Json>, serde_json::Map<String, Json>) {
        let (mut internal, mut distributions) = (serde_json::Map::new(), serde_json::Map::new());
        for (name, param) in &self.params {
            let Some(value) = params.value(name) else { continue };
            if let Some((repr, dist)) = distribution(param, value) {
                internal.insert(name.clone(), repr);
                distributions.insert(name.clone(), Json::from(dist.to_string()));
            }
        }
        (internal, distributions)
    }
}

/// The Optuna distribution of a sampled param, and `value`'s internal representation in it.
/// Normal domains, which Optuna has no distribution for, become floats over six standard
/// deviations either side (widened to the value); step is dropped where Optuna refuses it with
/// a log scale.
fn distribution(param: &Param, value: &Value) -> Option<(Json, Json)> {
    let number = match value {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    };
    let float = |low: f64, high: f64, log: bool, step: Option<f64>| json!({"name": "FloatDistribution", "attributes": {"step": step, "low": low, "high": high, "log": log}});
    let int = |low: i64, high: i64, log: bool, step: i64| json!({"name": "IntDistribution", "attributes": {"log": log, "step": step, "low": low, "high": high}});
    // Ray's quantised integer bounds: moved inwards to multiples of q.
    let on_grid = |low: i64, high: i64, q: i64| {
        (low.div_euclid(q) * q + if low.rem_euclid(q) == 0 { 0 } else { q }, high.div_euclid(q) * q)
    };
    let categorical = |choices: &[Value]| {
        let as_json = |c: &Value| match c {
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_) => {
                serde_json::to_value(c).unwrap_or(Json::Null)
            }
            // Optuna's choices are scalars: a list or map is shown as its JSON text.
            other => Json::from(serde_json::to_string(other).unwrap_or_default()),
        };
        let index = choices.iter().position(|c| c == value)?;
        let choices: Vec<Json> = choices.iter().map(as_json).collect();
        Some((
            Json::from(index),
            json!({"name": "CategoricalDistribution", "attributes": {"choices": choices}}),
        ))
    };
    let dist = match param {
        Param::Grid(values) => return categorical(values),
        Param::Sample(Domain::Choice(values)) => return categorical(values),
        Param::Sample(domain) => match *domain {
            Domain::Uniform { low, high } => float(low, high, false, None),
            Domain::QUniform { low, high, q } => float(low, high, false, Some(q)),
            Domain::LogUniform { low, high, .. } | Domain::QLogUniform { low, high, .. } => {
                float(low, high, true, None)
            }
            Domain::Randn { mean, sd } | Domain::QRandn { mean, sd, .. } => {
                let v = number?;
                float((mean - 6.0 * sd).min(v), (mean + 6.0 * sd).max(v), false, None)
            }
            Domain::RandInt { low, high } => int(low, high - 1, false, 1),
            Domain::LogRandInt { low, high, .. } => int(low, high - 1, true, 1),
            Domain::QRandInt { low, high, q } => {
                let (low, high) = on_grid(low, high, q);
                int(low, high, false, q)
            }
            Domain::QLogRandInt { low, high, q, .. } => {
                let (low, high) = on_grid(low, high, q);
                int(low, high, true, 1)
            }
            Domain::Choice(_) => unreachable!("matched above"),
        },
        _ => return None,
    };
    Some((Json::from(number?), dist))
}

/// What replaying a journal tells this writer: the ids the next study and trial get, and the
/// sweep's study and trials.
#[derive(Debug, Clone, Default)]
struct Replay {
    /// Bytes of the file replayed.
    offset: u64,
    /// Studies by name (deleted ones gone), and how many were ever made.
    studies: HashMap<String, u64>,
    next_study: u64,
    /// Trials ever made (in studies that existed).
    trial_count: u64,
    /// The sweep's study: its name, and its id once it exists.
    study_name: String,
    study_id: Option<u64>,
    /// Its trials by rtune trial id: the Optuna trial id and state.
    trials: HashMap<String, (u64, u8)>,
    by_id: BTreeMap<u64, String>,
}

impl Replay {
    /// Applies the lines after `offset`. A last line without its newline is a writer's that
    /// died mid-write: no reader took it, and with `repair` it is cut off (else left).
    fn catch_up(&mut self, mut file: File, path: &Path, repair: bool) -> Result<()> {
        let len = file.metadata().at(path)?.len();
        if len < self.offset {
            return Err(Error::Storage(format!(
                "Optuna journal {}: it shrank while this sweep wrote to it",
                path.display()
            )));
        }
        file.seek(SeekFrom::Start(self.offset)).at(path)?;
        let mut new = Vec::new();
        file.read_to_end(&mut new).at(path)?;
        let whole = new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < new.len() && repair {
            tracing::warn!("Optuna journal {}: cut off a half-written last line", path.display());
            file.set_len(self.offset + whole as u64).at(path)?;
        }
        for line in new[..whole].split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            let op: Json = serde_json::from_slice(line).map_err(|e| {
                Error::Storage(format!(
                    "Optuna journal {}: a line after byte {} is not an operation ({e}); is it an \
                     Optuna journal?",
                    path.display(),
                    self.offset
                ))
            })?;
            self.apply(&op);
        }
        self.offset += whole as u64;
        Ok(())
    }

    /// One operation, as Optuna's replay applies it (only what ids and this sweep's trials
    /// depend on).
    fn apply(&mut self, op: &Json) {
        let code = op["op_code"].as_u64();
        let study_id = op["study_id"].as_u64();
        match code.map(|c| c as u8) {
            Some(CREATE_STUDY) => {
                let name = op["study_name"].as_str().unwrap_or_default().to_owned();
                if !self.studies.contains_key(&name) {
                    if name == self.study_name {
                        self.study_id = Some(self.next_study);
                    }
                    self.studies.insert(name, self.next_study);
                    self.next_study += 1;
                }
            }
            Some(DELETE_STUDY) => {
                self.studies.retain(|_, id| Some(*id) != study_id);
                if self.study_id.is_some() && self.study_id == study_id {
                    self.study_id = None;
                    self.trials.clear();
                    self.by_id.clear();
                }
            }
            Some(CREATE_TRIAL) if self.studies.values().any(|&id| Some(id) == study_id) => {
                let id = self.trial_count;
                self.trial_count += 1;
                let rtune_id = op["user_attrs"]["rtune_trial_id"].as_str();
                if let Some(rtune_id) = rtune_id.filter(|_| self.study_id == study_id) {
                    let state = op["state"].as_u64().map_or(RUNNING, |s| s as u8);
                    self.trials.insert(rtune_id.to_owned(), (id, state));
                    self.by_id.insert(id, rtune_id.to_owned());
                }
            }
            Some(SET_TRIAL_STATE_VALUES) => {
                let id = op["trial_id"].as_u64().unwrap_or(u64::MAX);
                let state = op["state"].as_u64().map(|s| s as u8);
                if let (Some(rtune_id), Some(state)) = (self.by_id.get(&id), state)
                    && let Some(known) = self.trials.get_mut(rtune_id)
                    && !is_finished(known.1)
                {
                    known.1 = state;
                }
            }
            _ => {}
        }
    }

    /// `line`, applied.
    fn emit(&mut self, line: Json) -> Json {
        self.apply(&line);
        line
    }

    /// The journal line for `op` in the current state (applied), if it still has something to
    /// say: a trial made once, started once, ended once, and nothing after its end.
    fn render(&mut self, op: &Op) -> Option<Json> {
        let line = match op {
            Op::Create { trial, params, distributions } => {
                if self.trials.contains_key(trial) {
                    return None;
                }
                let study_id = self.study_id?;
                json!({"op_code": CREATE_TRIAL, "study_id": study_id, "datetime_start": null,
                       "state": WAITING, "value": null, "values": null,
                       "distributions": distributions, "params": params,
                       "user_attrs": {"rtune_trial_id": trial}, "system_attrs": {},
                       "intermediate_values": {}})
            }
            Op::State { trial, state, values, at } => {
                let &(id, now) = self.trials.get(trial)?;
                if is_finished(now) || now == *state {
                    return None;
                }
                let time = crate::sys::iso_utc(*at);
                match (*state, values) {
                    (RUNNING, _) => json!({"op_code": SET_TRIAL_STATE_VALUES, "trial_id": id,
                                           "state": RUNNING, "values": null, "datetime_start": time}),
                    // A trial that never reported its metric has no value to complete with.
                    (COMPLETE, None) | (FAIL, _) => {
                        json!({"op_code": SET_TRIAL_STATE_VALUES, "trial_id": id, "state": FAIL,
                               "values": null, "datetime_complete": time})
                    }
                    (state, values) => json!({"op_code": SET_TRIAL_STATE_VALUES, "trial_id": id,
                                              "state": state, "values": values,
                                              "datetime_complete": time}),
                }
            }
            Op::Value { trial, step, value } => {
                let &(id, now) = self.trials.get(trial)?;
                if is_finished(now) {
                    return None;
                }
                json!({"op_code": SET_TRIAL_INTERMEDIATE_VALUE, "trial_id": id, "step": step,
                       "intermediate_value": value})
            }
        };
        Some(self.emit(line))
    }
}

fn is_finished(state: u8) -> bool {
    matches!(state, COMPLETE | PRUNED | FAIL)
}

/// Optuna's `JournalFileSymlinkLock`: `<journal>.lock`, a symbolic link to the journal, made by
/// whoever holds the lock. One left by a writer that died is taken over once the journal has
/// not changed for `STALE_AFTER` (Optuna's grace period).
struct JournalLock(PathBuf);

const STALE_AFTER: Duration = Duration::from_secs(30);

impl JournalLock {
    fn acquire(journal: &Path) -> Result<JournalLock> {
        let mut name = journal.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        let target = journal.file_name().map_or_else(|| journal.to_path_buf(), PathBuf::from);
        let (mut wait, mut changed, mut seen) = (Duration::from_millis(1), Instant::now(), None);
        loop {
            match std::os::unix::fs::symlink(&target, &lock) {
                Ok(()) => return Ok(JournalLock(lock)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let modified = fs::metadata(&lock).and_then(|m| m.modified()).ok();
                    if modified != seen {
                        (seen, changed) = (modified, Instant::now());
                    } else if changed.elapsed() > STALE_AFTER {
                        tracing::warn!(
                            "{}: taking over a lock left for {STALE_AFTER:?}",
                            lock.display()
                        );
                        let _ = fs::remove_file(&lock);
                        continue;
                    }
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(200));
                }
                Err(e) => return Err(Error::io(&lock, e)),
            }
        }
    }
}

impl Drop for JournalLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use rtune_searchers::{Params, SearchSpace, TrialStatus, choice, loguniform, randn};

    use super::*;

    fn experiment(dir: &Path, restored: bool) -> ExperimentInfo {
        ExperimentInfo {
            path: dir.join("sweep"),
            name: "sweep".into(),
            objectives: rtune_searchers::Objectives::one("acc", Mode::Max),
            param_space: SearchSpace::new()
                .add("lr", loguniform(1e-4, 1e-1))
                .add("opt", SearchSpace::new().add("kind", choice(["sgd", "adam"])))
                .add("epochs", 3),
            restored,
            ..Default::default()
        }
    }

    fn trial(i: usize) -> TrialInfo {
        let opt = rtune_searchers::Map::from_iter([("kind".to_owned(), Value::from("adam"))]);
        TrialInfo {
            trial_id: format!("abc_{i:05}"),
            status: TrialStatus::Running,
            params: Params::new().with("lr", 0.01).with("opt", opt).with("epochs", 3),
            path: PathBuf::from("/nowhere"),
            stopped: false,
            checkpoint: None,
        }
    }

    fn lines(path: &Path) -> Vec<Json> {
        let text = fs::read_to_string(path).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn result(step: f64, acc: f64) -> Metrics {
        [("training_iteration".to_owned(), step), ("acc".to_owned(), acc)].into_iter().collect()
    }

    /// Ids are positions in the replay: a study and trials made by others (one study deleted,
    /// one trial of a deleted study not counted) come first; params and distributions are as
    /// Optuna keeps them, nested keys dotted.
    #[test]
    fn ids_follow_what_others_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optuna.log");
        let theirs = [
            json!({"op_code": 0, "worker_id": "w", "study_name": "a", "directions": [1]}),
            json!({"op_code": 0, "worker_id": "w", "study_name": "b", "directions": [1]}),
            json!({"op_code": 1, "worker_id": "w", "study_id": 0}),
            json!({"op_code": 4, "worker_id": "w", "study_id": 1, "datetime_start": null}),
            json!({"op_code": 4, "worker_id": "w", "study_id": 0, "datetime_start": null}),
        ];
        let text: String = theirs.iter().map(|l| format!("{l}\n")).collect();
        fs::write(&path, text).unwrap();
        let journal = OptunaJournal::new(&path);
        journal.check().unwrap();
        journal.on_experiment_begin(&experiment(dir.path(), false)).unwrap();
        journal.on_trial_add(&trial(0)).unwrap();
        journal.on_trial_start(&trial(0)).unwrap();
        journal.on_trial_result(&trial(0), &result(1.0, 0.5)).unwrap();
        journal.on_trial_result(&trial(0), &result(2.0, 0.75)).unwrap();
        journal.on_trial_complete(&trial(0)).unwrap();
        let ours = lines(&path).split_off(theirs.len());
        assert_eq!(ours[0]["study_name"], "sweep");
        // Study 2 (two made before it, whatever was deleted); trial 1 (one counted before it).
        assert!(ours[1..3].iter().all(|l| l["study_id"] == 2), "{ours:?}");
        let create = &ours[3];
        assert_eq!((create["op_code"].as_u64(), &create["study_id"]), (Some(4), &json!(2)));
        assert_eq!(create["params"], json!({"lr": 0.01, "opt.kind": 1}));
        let dist: Json =
            serde_json::from_str(create["distributions"]["opt.kind"].as_str().unwrap()).unwrap();
        assert_eq!(dist["attributes"]["choices"], json!(["sgd", "adam"]));
        let rest: Vec<(u64, &Json)> =
            ours[4..].iter().map(|l| (l["op_code"].as_u64().unwrap(), &l["trial_id"])).collect();
        assert_eq!(rest, [(6, &json!(1)), (7, &json!(1)), (7, &json!(1)), (6, &json!(1))]);
        let end = ours.last().unwrap();
        assert_eq!((&end["state"], &end["values"]), (&json!(COMPLETE), &json!([0.75])));
    }

    /// A restored sweep finds its study and trials again and writes nothing it wrote before; a
    /// new sweep of the same name is refused; an ended trial is never written to again.
    #[test]
    fn a_restored_sweep_goes_on_with_its_study() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optuna.log");
        let first = OptunaJournal::new(&path);
        first.on_experiment_begin(&experiment(dir.path(), false)).unwrap();
        for i in 0..2 {
            first.on_trial_add(&trial(i)).unwrap();
            first.on_trial_start(&trial(i)).unwrap();
            first.on_trial_result(&trial(i), &result(1.0, 0.5)).unwrap();
        }
        first.on_trial_error(&trial(1), "broke").unwrap();
        let written = lines(&path).len();
        let again = OptunaJournal::new(&path);
        let e = again.on_experiment_begin(&experiment(dir.path(), false)).unwrap_err();
        assert!(e.to_string().contains("already holds a study named \"sweep\""), "{e}");
        let second = OptunaJournal::new(&path);
        second.on_experiment_begin(&experiment(dir.path(), true)).unwrap();
        second.on_trial_add(&trial(0)).unwrap();
        second.on_trial_start(&trial(0)).unwrap();
        second.on_trial_start(&trial(1)).unwrap();
        second.on_trial_result(&trial(1), &result(2.0, 0.9)).unwrap();
        second.on_experiment_end(&[]).unwrap();
        assert_eq!(lines(&path).len(), written, "a restored sweep wrote again what was there");
        second.on_trial_result(&trial(0), &result(2.0, 0.8)).unwrap();
        second.on_trial_complete(&TrialInfo { stopped: true, ..trial(0) }).unwrap();
        let end = lines(&path).pop().unwrap();
        assert_eq!((&end["state"], &end["values"]), (&json!(PRUNED), &json!([0.8])));
    }

    /// A last line a writer left half-written is cut off before anything is appended (no reader
    /// took it); a file that is no journal is refused by `check`.
    #[test]
    fn a_half_written_line_is_cut_off_and_other_files_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optuna.log");
        let whole = json!({"op_code": 0, "worker_id": "w", "study_name": "a", "directions": [1]});
        fs::write(&path, format!("{whole}\n{{\"op_code\": 4, \"stu")).unwrap();
        OptunaJournal::new(&path).check().unwrap();
        let journal = OptunaJournal::new(&path);
        journal.on_experiment_begin(&experiment(dir.path(), false)).unwrap();
        let all = lines(&path);
        assert_eq!((&all[0], &all[1]["study_name"]), (&whole, &json!("sweep")));
        assert!(!dir.path().join("optuna.log.lock").exists(), "the lock stayed");
        let notes = dir.path().join("notes.txt");
        fs::write(&notes, "hello\n").unwrap();
        let why = OptunaJournal::new(&notes).check().unwrap_err();
        assert!(why.contains("is it an Optuna journal?"), "{why}");
    }

    /// Each domain's Optuna distribution: integer bounds inclusive (Ray's quantised ones moved
    /// inwards), normals over six deviations widened to the value, a value not among the
    /// choices left out.
    #[test]
    fn domains_become_optuna_distributions() {
        let attrs = |param: Param, value: Value| {
            let (repr, dist) = distribution(&param, &value)?;
            Some((repr, dist["name"].clone(), dist["attributes"].clone()))
        };
        let (repr, name, a) =
            attrs(Param::Sample(Domain::RandInt { low: 2, high: 9 }), Value::Int(4)).unwrap();
        assert_eq!((repr, name), (json!(4.0), json!("IntDistribution")));
        assert_eq!((&a["low"], &a["high"], &a["step"]), (&json!(2), &json!(8), &json!(1)));
        let (_, _, a) =
            attrs(Param::Sample(Domain::QRandInt { low: 3, high: 19, q: 5 }), Value::Int(10))
                .unwrap();
        assert_eq!((&a["low"], &a["high"], &a["step"]), (&json!(5), &json!(15), &json!(5)));
        let normal = randn(0.0, 1.0).unwrap();
        let (_, _, a) = attrs(Param::Sample(normal), Value::Float(7.5)).unwrap();
        assert_eq!((&a["low"], &a["high"]), (&json!(-6.0), &json!(7.5)));
        let grid = Param::Grid(vec![Value::from(1), Value::from(vec![1, 2])]);
        let (repr, _, a) = attrs(grid.clone(), Value::from(vec![1, 2])).unwrap();
        assert_eq!((repr, &a["choices"]), (json!(1), &json!([1, "[1,2]"])));
        assert!(attrs(grid, Value::from(3)).is_none());
    }
}
