//! The experiment directory's own files: `tuner.json` (the sweep's settings, written once) and
//! `experiment_state.json` (the sweep as it is now: every trial and the controller's snapshot),
//! and reading an experiment back from them and from its trials' files.

use std::collections::BTreeMap;
use std::path::Path;

use rtune_searchers::{Mode, Params, SearchSpace, TrialId, TrialStatus};
use serde::{Deserialize, Serialize};

use super::controller::ControllerState;
use super::result_grid::TrialResult;
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::train::{read_run, read_run_to_resume};

/// The version of the experiment files (`tuner.json`, `experiment_state.json`); `restore`
/// refuses others.
pub(super) const FORMAT: u32 = 1;

/// The sweep's settings file in the experiment directory.
pub const SETTINGS_FILE: &str = "tuner.json";

/// What `tuner.json` holds: the sweep's settings, written once when it starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Settings {
    pub(super) format: u32,
    pub(super) rtune_version: String,
    pub(super) experiment_id: String,
    pub(super) param_space: SearchSpace,
    pub(super) metric: Option<String>,
    pub(super) mode: Option<Mode>,
    pub(super) num_samples: i64,
    pub(super) max_concurrent_trials: Option<usize>,
    pub(super) time_budget_s: Option<f64>,
    pub(super) seed: u64,
    pub(super) fail_fast: bool,
    #[serde(default = "yes")]
    pub(super) reuse_actors: bool,
    /// The searcher's and the scheduler's kinds (`basic_variant`, `asha`, …).
    pub(super) search_alg: String,
    pub(super) scheduler: String,
}

fn yes() -> bool {
    true
}

impl Settings {
    /// Reads `tuner.json`, refusing other formats.
    pub(super) fn read(experiment: &Path) -> Result<Settings> {
        read_experiment_file(experiment, SETTINGS_FILE)
    }
}

/// The experiment state snapshot in the experiment directory.
pub const STATE_FILE: &str = "experiment_state.json";

/// Whether `path` already holds an experiment (its settings or its state), which a new sweep
/// must not write over. Other files may be there (`rtune run` puts its sweep file first).
pub fn holds_experiment(path: &Path) -> bool {
    path.join(SETTINGS_FILE).exists() || path.join(STATE_FILE).exists()
}

/// What `experiment_state.json` holds: the sweep as it is now (see `Sweep::save_state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedExperiment {
    pub(super) format: u32,
    pub(super) name: Option<String>,
    pub(super) experiment_id: String,
    pub(super) metric: Option<String>,
    pub(super) mode: Option<Mode>,
    pub(super) rtune_version: String,
    pub(super) timestamp: f64,
    /// Seconds the sweep has run, over all its drivers (for `time_budget_s`).
    pub(super) time_spent_s: f64,
    pub(super) trials: Vec<SavedTrialRow>,
    pub(super) controller: ControllerState,
}

/// A trial as `experiment_state.json` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedTrialRow {
    pub(super) trial_id: String,
    /// The controller's number for it (the index in its directory name).
    pub(super) index: TrialId,
    pub(super) status: TrialStatus,
    pub(super) params: Params,
    pub(super) error: Option<String>,
    /// Its directory, relative to the experiment's (which may have moved).
    pub(super) dir: String,
    /// Its last reported metrics (NaN and infinities as strings, as in result.json).
    pub(super) last_result: Option<serde_json::Map<String, serde_json::Value>>,
    /// The scheduler's bracket for it (ASHA, HyperBand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) bracket: Option<usize>,
}

impl SavedExperiment {
    /// Reads `experiment_state.json`, refusing other formats.
    pub(super) fn read(experiment: &Path) -> Result<SavedExperiment> {
        read_experiment_file(experiment, STATE_FILE)
    }
}

pub(super) fn not_restorable(experiment: &Path, why: String) -> Error {
    Error::config(
        "Tuner::restore",
        format!("{} is not an experiment this rtune can go on with: {why}", experiment.display()),
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

/// An experiment as its files hold it: its state, and every trial it lists with what its files
/// hold (`read_run`: all its rows, its recorded checkpoints). With `to_resume`, the unfinished
/// trials hold only what going on with them keeps (`read_run_to_resume`).
pub(super) fn read_experiment(
    path: &Path,
    run: &RunConfig,
    to_resume: bool,
) -> Result<(SavedExperiment, BTreeMap<TrialId, TrialResult>)> {
    let saved = SavedExperiment::read(path)?;
    let mut trials = BTreeMap::new();
    for row in &saved.trials {
        let dir = path.join(&row.dir);
        let result = if to_resume && !row.status.is_finished() {
            read_run_to_resume(&dir, run)?
        } else {
            read_run(&dir, run)?
        };
        let trial = TrialResult {
            trial_id: row.trial_id.clone(),
            status: row.status,
            params: row.params.clone(),
            result: Some(result),
            error: row.error.clone(),
            path: dir,
            bracket: row.bracket,
        };
        trials.insert(row.index, trial);
    }
    Ok((saved, trials))
}
