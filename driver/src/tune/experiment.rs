//! The experiment directory: every file name and path in it, making a new one, picking an
//! interrupted one up, and reading one back. Its own files are `tuner.json` (the sweep's
//! settings, written once), `experiment_state.json` (the sweep as it is now: every trial and the
//! controller's snapshot), `driver.log` and `driver.json`; each trial has a directory of its own
//! (`TorchTrainer_<id>_<index>_<params>_<date>`, with `error.txt` when it failed).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rtune_searchers::{
    Metrics, Mode, Objectives, Params, SearchSpace, TrialId, TrialStatus, Value,
};
use serde::{Deserialize, Serialize};

use super::config::{TuneConfig, TuneSettings};
use super::controller::ControllerState;
use super::trial::{LiveTrial, TrialResult};
use crate::config::RunConfig;
use crate::error::{Error, IoContext, Result};
use crate::outcome::WorkerFailure;
use crate::record::{read_run, read_run_to_resume};
use crate::setting::Setting;
use crate::storage::remote::Remote;
use crate::storage::unix_time;

/// The version of the experiment files (`tuner.json`, `experiment_state.json`); `restore`
/// refuses others.
pub(crate) const FORMAT: u32 = 1;

/// The sweep's settings file in the experiment directory.
pub const SETTINGS_FILE: &str = "tuner.json";

/// What `tuner.json` holds: the sweep's settings, written once when it starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub format: u32,
    pub rtune_version: String,
    pub experiment_id: String,
    pub param_space: SearchSpace,
    #[serde(flatten)]
    pub tune: TuneSettings,
    /// The searcher's and the scheduler's kinds (`basic_variant`, `asha`, …).
    pub search_alg: String,
    pub scheduler: String,
    /// Each trial's workers and what they hold, and how their training is sharded (absent
    /// from experiments of rtune before it was written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<crate::config::ScalingConfig>,
    /// The trials the sweep runs, as Ray counts them (`rtune::tune::trial_count`: a grid times
    /// `num_samples`); absent when it runs until stopped, and from experiments of rtune
    /// before it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u64>,
}

impl Settings {
    /// As flat keys and text values (nested keys dotted; strings bare, lists as JSON), for
    /// trackers that keep settings as text: what callbacks get as `ExperimentInfo::settings`.
    pub fn flat(&self) -> BTreeMap<String, String> {
        use crate::callback::{json_leaves, json_text};
        let json = serde_json::to_value(self).unwrap_or_default();
        let mut out: BTreeMap<String, String> = json_leaves(&json)
            .into_iter()
            .filter(|(_, v)| !v.is_null() && v.as_str() != Some(""))
            .map(|(k, v)| (k, json_text(v)))
            .collect();
        out.remove("format");
        out
    }

    /// Reads `tuner.json`, refusing other formats.
    pub fn read(experiment: &Path) -> Result<Settings> {
        read_experiment_file(experiment, SETTINGS_FILE)
    }

    /// The `TuneConfig` the sweep ran with, where it can be rebuilt from the settings alone.
    pub fn tune_config(&self) -> Result<TuneConfig> {
        if self.search_alg != "basic_variant" || self.scheduler != "fifo" {
            return Err(Error::config(
                "Tuner::restore",
                format!(
                    "the experiment ran with search_alg `{}` and scheduler `{}`, whose settings \
                     are code, not data: pass the same TuneConfig again with .tune_config(..)",
                    self.search_alg, self.scheduler
                ),
            ));
        }
        Ok(TuneConfig { settings: self.tune.clone(), search_alg: None, scheduler: None })
    }

    /// A `TuneConfig` given again on restore must be the sweep's.
    pub(crate) fn check_same(&self, tune: &TuneConfig) -> Result<()> {
        let searcher = tune
            .search_alg
            .as_ref()
            .map_or("basic_variant".into(), |s| s.save_state().kind().into());
        let scheduler =
            tune.scheduler.as_ref().map_or("fifo".into(), |s| s.save_state().kind().into());
        let (saved, given) = (&self.tune, &tune.settings);
        let differences = [
            (Setting::Metric, format!("{:?}", saved.metric), format!("{:?}", given.metric)),
            (Setting::Mode, format!("{:?}", saved.mode), format!("{:?}", given.mode)),
            (
                Setting::Objectives,
                format!("{:?}", saved.objectives),
                format!("{:?}", given.objectives),
            ),
            (
                Setting::Constraints,
                format!("{:?}", saved.constraints),
                format!("{:?}", given.constraints),
            ),
            (Setting::NumSamples, saved.num_samples.to_string(), given.num_samples.to_string()),
            (Setting::Seed, saved.seed.to_string(), given.seed.to_string()),
            (Setting::Scheduler, self.scheduler.clone(), scheduler),
            (Setting::SearchAlg, self.search_alg.clone(), searcher),
        ];
        match differences.into_iter().find(|(_, saved, given)| saved != given) {
            None => Ok(()),
            Some((field, saved, given)) => Err(Error::config(
                field,
                format!(
                    "is {given}, but the experiment being restored ran with {saved}; a \
                     restored sweep goes on with its own settings"
                ),
            )),
        }
    }
}

/// The experiment state snapshot in the experiment directory.
pub const STATE_FILE: &str = "experiment_state.json";

/// Where a live sweep's driver says how to reach it (`rtune watch`): its stream's address and
/// token, while it runs.
pub const DRIVER_FILE: &str = "driver.json";

/// The sweep file `rtune run` ran (its text, path and `--set`s), kept for `rtune resume`:
/// written with the new experiment, as a `Tuner::experiment_file`.
pub const SWEEP_FILE: &str = "sweep.json";

pub use crate::storage::RESULTS_PARQUET;

/// A failed trial's whole error, in its directory (progress lines and the terminal UI show
/// its first line: `outcome::error_summary`).
pub const ERROR_FILE: &str = "error.txt";

/// Whether `path` already holds an experiment (its settings or its state), which a new sweep
/// must not write over. Other files may be there (`rtune run` puts its sweep file first).
pub fn holds_experiment(path: &Path) -> bool {
    path.join(SETTINGS_FILE).exists() || path.join(STATE_FILE).exists()
}

/// Where the sweep in an experiment directory stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepState {
    /// A live driver runs it (who, as `lease::Holder` shows it).
    Running(String),
    /// Its driver stopped before the end (interrupted, killed, or ended by an error):
    /// `rtune resume` goes on with it.
    Interrupted,
    /// Its driver stopped it on a mistake in its settings (what the state file says of it), its
    /// trials cut short: resuming it goes on once the sweep file is fixed.
    Stopped(String),
    /// It ran to its end (its `results.parquet` is written then).
    Finished,
}

/// Where the sweep in the experiment directory `path` (or the staging copy of one on a store)
/// stands: its lease tells whether a driver runs it, its results table whether it ended.
pub fn sweep_state(path: &Path) -> SweepState {
    if let Err(Error::Held { holder, .. }) = super::lease::check_free(path) {
        return SweepState::Running(holder);
    }
    if path.join(RESULTS_PARQUET).exists() {
        return SweepState::Finished;
    }
    /// Of the state file, only why its driver stopped it.
    #[derive(Deserialize)]
    struct Stopped {
        stopped_by: Option<String>,
    }
    let stopped = std::fs::read(path.join(STATE_FILE)).ok();
    let stopped = stopped.and_then(|text| serde_json::from_slice::<Stopped>(&text).ok());
    match stopped.and_then(|s| s.stopped_by) {
        Some(mistake) => SweepState::Stopped(mistake),
        None => SweepState::Interrupted,
    }
}

/// What `experiment_state.json` holds: the sweep as it is now (see `Sweep::save_state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SavedExperiment {
    pub format: u32,
    pub name: Option<String>,
    pub experiment_id: String,
    /// What the sweep optimises (`metric` and `mode` for one objective, `objectives` for
    /// several).
    #[serde(flatten)]
    pub objectives: Objectives,
    /// Metrics that must be <= 0 for a trial to be feasible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    /// `CheckpointConfig`'s score attribute and order, which rank a trial's checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_score: Option<(String, Mode)>,
    pub rtune_version: String,
    pub timestamp: f64,
    /// Seconds the sweep has run, over all its drivers (for `time_budget_s`).
    pub time_spent_s: f64,
    pub controller: ControllerState,
    /// The mistake in the sweep's settings its driver stopped it on (a metric or constraint no
    /// trial reports): resuming it unchanged would meet it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Every trial the sweep started. Last, so that `write` can add the ended trials' rows.
    pub trials: Vec<SavedTrialRow>,
}

/// A trial as `experiment_state.json` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SavedTrialRow {
    pub trial_id: String,
    /// The controller's number for it (the index in its directory name).
    pub index: TrialId,
    pub status: TrialStatus,
    pub params: Params,
    pub error: Option<String>,
    /// Its directory, relative to the experiment's (which may have moved).
    pub dir: String,
    /// Its last reported metrics (NaN and infinities as strings, as in result.json).
    pub last_result: Option<serde_json::Map<String, serde_json::Value>>,
    /// The scheduler's bracket for it (ASHA, HyperBand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bracket: Option<usize>,
    /// Its run's failed attempts (retried under its `FailureConfig`), for its `TrainResult`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<WorkerFailure>,
    /// Its run's wall time and rank 0's time in the train function (last attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_loop_seconds: Option<f64>,
    /// Params its train function never read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread_params: Vec<String>,
}

impl SavedTrialRow {
    /// The row of `trial`, the controller's trial `index`.
    pub fn of(index: TrialId, status: TrialStatus, trial: &LiveTrial) -> SavedTrialRow {
        let result = trial.result.as_ref();
        SavedTrialRow {
            trial_id: trial.trial_id.clone(),
            index,
            status,
            params: trial.params.clone(),
            error: trial.error.clone(),
            dir: trial
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            last_result: result.and_then(|r| r.metrics.as_ref()).map(crate::metrics::to_json),
            bracket: trial.bracket,
            failures: result.map(|r| r.failures.clone()).unwrap_or_default(),
            fit_seconds: result.map(|r| r.fit_seconds),
            train_loop_seconds: result.map(|r| r.train_loop_seconds),
            unread_params: result.map(|r| r.unread_params.clone()).unwrap_or_default(),
        }
    }
}

/// The rows of the trials that have ended, kept out of memory: each is written once, when its
/// trial ends, to a file without a name (made in the experiment directory and unlinked at
/// once: it goes with the driver), and copied from there into every state snapshot. A sweep of
/// 10,000 trials would otherwise keep 10,000 rows in memory and serialise them all at every
/// snapshot.
pub(crate) struct EndedRows {
    file: std::fs::File,
    /// The bytes written: the rows, comma-separated.
    len: u64,
}

impl EndedRows {
    pub fn new(experiment: &Path) -> Result<EndedRows> {
        let path = experiment.join(format!(".ended_rows_{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        Ok(EndedRows { file, len: 0 })
    }

    /// Adds an ended trial's row.
    pub fn push(&mut self, row: &SavedTrialRow) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut text = if self.len == 0 { Vec::new() } else { vec![b','] };
        serde_json::to_writer(&mut text, row)?;
        self.file.write_all_at(&text, self.len)?;
        self.len += text.len() as u64;
        Ok(())
    }

    fn copy_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
        use std::io::{Read, Seek};
        let mut file = &self.file;
        file.seek(std::io::SeekFrom::Start(0))?;
        if std::io::copy(&mut file.take(self.len), out)? != self.len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl SavedExperiment {
    /// Reads `experiment_state.json`, refusing other formats.
    pub fn read(experiment: &Path) -> Result<SavedExperiment> {
        read_experiment_file(experiment, STATE_FILE)
    }

    /// Replaces `experiment_state.json` (atomically) with this state, its `trials` followed by
    /// the `ended` ones' rows.
    pub fn write(&self, experiment: &Path, ended: &EndedRows) -> Result<()> {
        let text = serde_json::to_vec(self).expect("the state serialises");
        // `{..,"trials":[..]}`: the ended rows go before the closing `]}`.
        let open = text.strip_suffix(b"]}").expect("trials is the state's last field");
        crate::storage::atomic_write_with(&experiment.join(STATE_FILE), |out| {
            out.write_all(open)?;
            if !ended.is_empty() {
                if !open.ends_with(b"[") {
                    out.write_all(b",")?;
                }
                ended.copy_to(out)?;
            }
            out.write_all(b"]}")
        })
    }
}

pub(crate) fn not_restorable(experiment: &Path, why: String) -> Error {
    Error::config(
        "experiment",
        format!("{} is not an experiment this rtune can read: {why}", experiment.display()),
    )
}

fn read_experiment_file<T: serde::de::DeserializeOwned>(
    experiment: &Path,
    name: &str,
) -> Result<T> {
    let path = experiment.join(name);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let what = if experiment.is_dir() { "no" } else { "no such directory, so no" };
            return Err(not_restorable(
                experiment,
                format!("{what} {name} (an experiment directory is <storage_path>/<name>)"),
            ));
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    let unreadable =
        |e: serde_json::Error| not_restorable(experiment, format!("{name} is unreadable: {e}"));
    /// The fields every format has.
    #[derive(Deserialize)]
    struct Version {
        format: serde_json::Value,
        rtune_version: Option<String>,
    }
    // The format first: a file of another version is named as such, not as unreadable. (Read
    // from the text again below: a `serde_json::Value` would sort the params' keys.)
    let version: Version = serde_json::from_slice(&text).map_err(unreadable)?;
    if version.format.as_u64() != Some(FORMAT.into()) {
        return Err(not_restorable(
            experiment,
            format!(
                "its {name} was written by rtune {} in format {}, and this rtune ({}) reads \
                 format {FORMAT} only",
                version.rtune_version.as_deref().unwrap_or("?"),
                version.format,
                env!("CARGO_PKG_VERSION")
            ),
        ));
    }
    serde_json::from_slice(&text).map_err(unreadable)
}

/// Whether `path` holds an experiment that `Tuner::restore` can go on with (for a store URL:
/// its staging copy, brought up to date first).
pub fn can_restore(path: &Path) -> bool {
    let Ok(path) = crate::storage::staging::local_copy(path) else { return false };
    Settings::read(&path).is_ok() && SavedExperiment::read(&path).is_ok()
}

/// An experiment as its files hold it: its state, and every trial it lists with what its files
/// hold (`read_run`: all its rows, its recorded checkpoints). With `to_resume`, the unfinished
/// trials hold only what going on with them keeps (`read_run_to_resume`).
pub(crate) fn read_experiment(
    path: &Path,
    run: &RunConfig,
    to_resume: bool,
) -> Result<(SavedExperiment, BTreeMap<TrialId, TrialResult>)> {
    let saved = SavedExperiment::read(path)?;
    let mut trials = BTreeMap::new();
    for row in &saved.trials {
        trials.insert(row.index, read_trial(path, row, run, to_resume)?);
    }
    Ok((saved, trials))
}

/// The trial `row` of the experiment in `path` with what its files hold (see
/// `read_experiment`).
pub(crate) fn read_trial(
    path: &Path,
    row: &SavedTrialRow,
    run: &RunConfig,
    to_resume: bool,
) -> Result<TrialResult> {
    let dir = path.join(&row.dir);
    let mut result = if to_resume && !row.status.is_finished() {
        read_run_to_resume(&dir, run)?
    } else {
        read_run(&dir, run)?
    };
    result.failures = row.failures.clone();
    result.fit_seconds = row.fit_seconds.unwrap_or_default();
    result.train_loop_seconds = row.train_loop_seconds.unwrap_or_default();
    result.unread_params = row.unread_params.clone();
    Ok(TrialResult {
        trial_id: row.trial_id.clone(),
        status: row.status,
        params: row.params.clone(),
        result: Some(result),
        error: row.error.clone(),
        path: dir,
        bracket: row.bracket,
        ranking: Default::default(),
    })
}

/// How every trial directory's name begins (Ray's `<trainable>_`).
pub(crate) const TRIAL_DIR_PREFIX: &str = "TorchTrainer_";

/// The driver's log in the experiment directory (the same lines as on stderr).
pub const DRIVER_LOG: &str = "driver.log";

/// The experiment directory of a sweep run with `run`: its storage path and name (a name made
/// from the date when it has none).
pub fn experiment_path(run: &RunConfig) -> PathBuf {
    let name = run.name.clone().unwrap_or_else(|| format!("TorchTrainer_{}", date()));
    run.resolved_storage_path().join(name)
}

/// Whether `run`'s experiment already exists: for one on a store, whether the store holds it
/// (a staging copy here may be of an experiment since removed from the store).
pub fn experiment_exists(run: &RunConfig) -> Result<bool> {
    let Some(root) = Remote::of_run(run) else {
        return Ok(holds_experiment(&experiment_path(run)));
    };
    let root = root?;
    let store = root.join(&experiment_name(run));
    crate::storage::remote::blocking(async {
        // A store that cannot be read is said as the storage path's mistake.
        root.check().await?;
        Ok(store.holds(SETTINGS_FILE).await? || store.holds(STATE_FILE).await?)
    })
}

/// Keeps this machine's staging copies within their budget (`storage::staging::prune`):
/// `keep` and the copies live drivers hold stay.
pub fn prune_staging(keep: &Path) {
    use crate::storage::staging;
    let held = |dir: &Path| super::lease::live_holder(dir).is_some();
    staging::prune(&staging::staging_root(), staging::budget(), keep, held);
}

/// `run`'s experiment's folder in its store, if it has one.
pub fn experiment_store(run: &RunConfig) -> Option<Result<Remote>> {
    Remote::of_run(run).map(|store| Ok(store?.join(&experiment_name(run))))
}

/// The name of `run`'s experiment folder.
fn experiment_name(run: &RunConfig) -> String {
    experiment_path(run).file_name().unwrap_or_default().to_string_lossy().into_owned()
}

/// Removes `run`'s experiment: its directory (a staging copy) and its folder in its store.
pub fn remove_experiment(run: &RunConfig) -> Result<()> {
    if let Some(store) = experiment_store(run) {
        let store = store?;
        crate::storage::remote::blocking(store.delete_all())?;
    }
    let path = experiment_path(run);
    match std::fs::remove_dir_all(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&path, e)),
        _ => Ok(()),
    }
}

/// Where `run`'s new experiment goes: an error when that already holds one. On a store, a
/// staging copy here of an experiment the store no longer holds goes first (unless a live
/// driver holds it).
pub(crate) fn new_experiment_path(run: &RunConfig) -> Result<PathBuf> {
    let path = experiment_path(run);
    if experiment_exists(run)? {
        return Err(Error::config(
            Setting::Name,
            format!(
                "{} already holds an experiment; pick another name, or go on with it with \
                 Tuner::restore",
                path.display()
            ),
        ));
    }
    if run.store_url().is_some() && path.exists() {
        if let Some(holder) = super::lease::live_holder(&path) {
            let path = path.display().to_string();
            return Err(Error::Held { path, holder: holder.to_string() });
        }
        std::fs::remove_dir_all(&path).at(&path)?;
    }
    Ok(path)
}

/// The new experiment directory `path`, with `files` (name, contents) and the sweep's settings
/// in `tuner.json`, written last: a directory without it holds no experiment yet. Its
/// experiment id.
pub(crate) fn make_experiment(
    path: &Path,
    mut settings: Settings,
    files: &[(String, Vec<u8>)],
) -> Result<String> {
    crate::storage::ensure_writable_dir(path).map_err(|e| {
        Error::config(Setting::StoragePath, format!("cannot write the experiment: {e}"))
    })?;
    for (name, contents) in files {
        crate::storage::atomic_write(&path.join(name), contents)?;
    }
    let experiment = format!("{:05x}", rand::random::<u32>() & 0xfffff);
    settings.experiment_id = experiment.clone();
    let text = serde_json::to_vec_pretty(&settings).expect("the settings serialise");
    crate::storage::atomic_write(&path.join(SETTINGS_FILE), &text)?;
    Ok(experiment)
}

/// Whether `name` may be given as an experiment file (`Tuner::experiment_file`): a plain file
/// name that is none of rtune's own.
pub(crate) fn check_experiment_file(name: &str) -> Result<()> {
    let own = [SETTINGS_FILE, STATE_FILE, DRIVER_LOG, DRIVER_FILE, ERROR_FILE, RESULTS_PARQUET];
    let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    if !plain || own.contains(&name) || name.starts_with(TRIAL_DIR_PREFIX) {
        return Err(Error::config(
            "Tuner::experiment_file",
            format!("`{name}` is not a file name of its own: use a plain name none of rtune's"),
        ));
    }
    Ok(())
}

/// An interrupted experiment as its files hold it.
pub(crate) struct PickedUp {
    /// Its state, without its trials (they are in `trials` and `ended`).
    pub saved: SavedExperiment,
    /// The trials not ended.
    pub trials: BTreeMap<TrialId, LiveTrial>,
    /// Each of those trials' results, up to where it goes on from.
    pub(crate) histories: BTreeMap<TrialId, Vec<Metrics>>,
    pub ended: EndedRows,
}

/// Reads the experiment in `path` back to go on with it: finished trials as their rows (their
/// files are read when the sweep's `ResultGrid` is), the others paused at their latest
/// checkpoints (the results after it are redone). Directories of trials started after the
/// state snapshot (the controller does not know them; they are created again) are removed, so
/// that every trial is in the experiment once.
pub(crate) fn pick_up(path: &Path, run: &RunConfig) -> Result<PickedUp> {
    let mut saved = SavedExperiment::read(path)?;
    let known: Vec<&str> = saved.trials.iter().map(|t| t.dir.as_str()).collect();
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let trial_dir = entry.path().is_dir() && name.starts_with(TRIAL_DIR_PREFIX);
        if trial_dir && !known.contains(&name.as_str()) {
            tracing::info!("{name} started after the last state snapshot; it runs again");
            std::fs::remove_dir_all(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
        }
    }
    let mut ended = EndedRows::new(path)?;
    let (mut trials, mut histories) = (BTreeMap::new(), BTreeMap::new());
    for row in std::mem::take(&mut saved.trials) {
        if row.status.is_finished() {
            ended.push(&row).map_err(|e| Error::io(path, e))?;
            continue;
        }
        let trial = read_trial(path, &row, run, true)?;
        histories.insert(row.index, trial.history().to_vec());
        trials.insert(row.index, LiveTrial::from_result(trial));
    }
    Ok(PickedUp { saved, trials, histories, ended })
}

/// How trial `trial`'s directory name begins (Ray's `<trainable>_<trial_id>_<index>_`), which
/// no other trial's does.
pub(crate) fn trial_dir_prefix(experiment_id: &str, trial: TrialId) -> String {
    format!("{TRIAL_DIR_PREFIX}{experiment_id}_{:05}_{}_", trial.0, trial.0)
}

/// A new trial's directory name: its prefix, its params in short, and the date.
pub(crate) fn trial_dir_name(experiment_id: &str, trial: TrialId, sampled: &Params) -> String {
    format!("{}{}_{}", trial_dir_prefix(experiment_id, trial), short_params(sampled), date())
}

/// The directory of trial `trial` in the experiment `path` (whose id is `experiment_id`), found
/// by its name's prefix; None when it has none (it never started).
pub(crate) fn find_trial_dir(
    path: &Path,
    experiment_id: &str,
    trial: TrialId,
) -> Result<Option<PathBuf>> {
    let prefix = trial_dir_prefix(experiment_id, trial);
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

/// Now, as trial directory names and experiment names write it.
pub(crate) fn date() -> String {
    crate::storage::date_string(unix_time())
}

/// `lr=0.001,hidden=64`: a trial directory's short form of its params (Ray's naming).
pub(crate) fn short_params(params: &Params) -> String {
    let mut text: String = params
        .flatten()
        .iter()
        .map(|(k, v)| match v.as_f64() {
            Some(x) if v.as_i64().is_none() => {
                let tiny_or_huge = x != 0.0 && !(1e-3..1e5).contains(&x.abs());
                if tiny_or_huge { format!("{k}={x:.3e}") } else { format!("{k}={x:.4}") }
            }
            _ => match v {
                Value::Str(text) => format!("{k}={text}"),
                other => format!("{k}={other}"),
            },
        })
        .collect::<Vec<_>>()
        .join(",")
        .chars()
        .map(|c| if c.is_alphanumeric() || "=,._-".contains(c) { c } else { '_' })
        .collect();
    text.truncate(80);
    text
}

#[cfg(test)]
mod tests {
    use rtune_searchers::{BasicVariant, Fifo, SearchSpace, Searcher, TrialScheduler, grid_search};

    use super::*;

    fn row(index: u64, status: TrialStatus) -> SavedTrialRow {
        SavedTrialRow {
            trial_id: format!("e_{index:05}"),
            index: TrialId(index),
            status,
            params: Params::new().with("i", index as i64).with("name", "a \"quoted\" ],} name"),
            error: (status == TrialStatus::Error).then(|| "it broke".to_owned()),
            dir: format!("TorchTrainer_e_{index:05}_{index}"),
            last_result: None,
            bracket: None,
            failures: Vec::new(),
            fit_seconds: Some(index as f64),
            train_loop_seconds: None,
            unread_params: Vec::new(),
        }
    }

    fn state(trials: Vec<SavedTrialRow>) -> SavedExperiment {
        let space = SearchSpace::new().add("i", grid_search([1, 2]));
        SavedExperiment {
            format: FORMAT,
            name: Some("e".into()),
            experiment_id: "e".into(),
            objectives: Objectives::default(),
            constraints: Vec::new(),
            checkpoint_score: None,
            rtune_version: "test".into(),
            timestamp: 0.0,
            time_spent_s: 1.0,
            controller: ControllerState {
                searcher: BasicVariant::new(space).unwrap().save_state(),
                scheduler: Fifo::new().save_state(),
                trials: Vec::new(),
                ended: Vec::new(),
                next_id: 0,
                no_more_trials: false,
            },
            stopped_by: None,
            trials,
        }
    }

    fn indexes(experiment: &Path) -> Vec<(u64, TrialStatus)> {
        let saved = SavedExperiment::read(experiment).unwrap();
        let mut rows: Vec<(u64, TrialStatus)> =
            saved.trials.iter().map(|r| (r.index.0, r.status)).collect();
        rows.sort_by_key(|(index, _)| *index);
        rows
    }

    /// The state file lists every trial once: the ones going on from memory, the ended ones
    /// from their rows on disk, whichever of the two is empty.
    #[test]
    fn the_state_lists_trials_going_on_and_ended_ones_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut ended = EndedRows::new(dir.path()).unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(leftovers.is_empty(), "the ended rows' file has no name");
        state(Vec::new()).write(dir.path(), &ended).unwrap();
        assert_eq!(indexes(dir.path()), []);

        let going_on = || vec![row(3, TrialStatus::Running), row(4, TrialStatus::Paused)];
        state(going_on()).write(dir.path(), &ended).unwrap();
        assert_eq!(indexes(dir.path()), [(3, TrialStatus::Running), (4, TrialStatus::Paused)]);

        ended.push(&row(0, TrialStatus::Terminated)).unwrap();
        state(Vec::new()).write(dir.path(), &ended).unwrap();
        assert_eq!(indexes(dir.path()), [(0, TrialStatus::Terminated)]);

        let mut errored = row(2, TrialStatus::Error);
        errored.failures.push(WorkerFailure {
            attempt: 0,
            rank: 1,
            message: "killed".into(),
            signal: Some(9),
            exit_code: None,
        });
        ended.push(&row(1, TrialStatus::Terminated)).unwrap();
        ended.push(&errored).unwrap();
        state(going_on()).write(dir.path(), &ended).unwrap();
        let saved = SavedExperiment::read(dir.path()).unwrap();
        assert_eq!(saved.time_spent_s, 1.0);
        assert_eq!(
            indexes(dir.path()),
            [
                (0, TrialStatus::Terminated),
                (1, TrialStatus::Terminated),
                (2, TrialStatus::Error),
                (3, TrialStatus::Running),
                (4, TrialStatus::Paused)
            ]
        );
        let back = saved.trials.iter().find(|r| r.index == TrialId(2)).unwrap();
        assert_eq!(back.params, errored.params);
        assert_eq!(back.failures, errored.failures);
        assert_eq!((back.error.as_deref(), back.fit_seconds), (Some("it broke"), Some(2.0)));
    }

    #[test]
    fn trial_directory_names_show_the_params() {
        let params =
            Params::new().with("lr", 1e-6).with("hidden", 64).with("opt", "adam/w").with("m", 0.9);
        assert_eq!(short_params(&params), "lr=1.000e-6,hidden=64,opt=adam_w,m=0.9000");
        assert_eq!(date().len(), "2026-11-23_11-58-10".len());
    }
}
