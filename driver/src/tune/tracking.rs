//! `rtune sync`: what a sweep's end could not send to its tracking server (MLflow's, down or
//! too slow then) sent from the experiment's files, whenever the server is back.

use std::path::Path;

use rtune_searchers::TrialStatus;

use super::experiment::{Settings, SweepState, sweep_state};
use super::result_grid::ResultGrid;
use crate::callback::{Callback, ExperimentInfo, MlflowLogger, TrialInfo};
use crate::error::{Error, Result};

/// What a sync did: nothing to do, or the events it could not send (0: all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// The sweep logged to no tracking server.
    NoTracker,
    /// It was sent; this much is still not (the server went away again).
    Sent { unsent: u64 },
}

/// Sends the MLflow runs of the experiment in `dir` what they lack, from its files: each
/// trial's rows not sent, its params and end, and the parent run's end (the sweep's outcome, or
/// KILLED for an interrupted one). The server must answer (else an error naming it). A sweep a
/// driver runs is refused (`Error::Held`): its own logger sends as it goes.
pub fn sync_tracking(dir: &Path) -> Result<Synced> {
    let Some(logger) = MlflowLogger::for_experiment(dir) else { return Ok(Synced::NoTracker) };
    let state = sweep_state(dir);
    if let SweepState::Running(holder) = state {
        return Err(Error::Held { path: dir.display().to_string(), holder });
    }
    let grid = ResultGrid::from_path(dir)?;
    // Held while it sends: no driver goes on with the sweep meanwhile.
    let _lease = super::lease::Lease::take(dir)?;
    let settings = Settings::read(dir)?;
    let info = ExperimentInfo {
        name: dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        path: dir.to_owned(),
        objectives: grid.objectives.clone(),
        param_space: settings.param_space.clone(),
        settings: settings.flat(),
        restored: true,
        constraints: grid.constraints.clone(),
        trials: settings.trials,
        ..ExperimentInfo::default()
    };
    logger.on_experiment_begin(&info)?;
    let trials: Vec<TrialInfo> = grid
        .trials
        .iter()
        .map(|t| TrialInfo {
            trial_id: t.trial_id().to_owned(),
            status: t.status(),
            params: t.params().clone(),
            path: t.path().to_owned(),
            stopped: false,
            checkpoint: t.checkpoint().ok().map(|c| c.path().to_owned()),
        })
        .collect();
    let over = matches!(state, SweepState::Finished | SweepState::Stopped(_));
    for trial in &trials {
        match trial.status {
            TrialStatus::Error => logger.on_trial_error(trial, trial_error(&grid, trial))?,
            // Ended with the sweep's end below (whether the sweep stopped it early is not in
            // its files).
            TrialStatus::Terminated if over => {}
            TrialStatus::Terminated => logger.on_trial_complete(trial)?,
            // Its rows; its run is KILLED with the parent's below, RUNNING again on resume.
            _ => logger.on_trial_start(trial)?,
        }
    }
    match over {
        true => logger.on_experiment_end(&trials)?,
        false => logger.on_experiment_interrupt()?,
    }
    Ok(Synced::Sent { unsent: logger.unsent() })
}

fn trial_error<'g>(grid: &'g ResultGrid, trial: &TrialInfo) -> &'g str {
    let found = grid.trials.iter().find(|t| t.trial_id() == trial.trial_id);
    found.and_then(|t| t.error()).unwrap_or("failed")
}
