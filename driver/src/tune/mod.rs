//! Ray Tune's half: sweeps whose trials are full `TorchTrainer` runs on the process's shared
//! driver. One owner each:
//!
//! * `controller`: the synchronous core that decides what runs, stops and ends;
//! * `sweep`: the thin async shell that feeds it events and carries its commands out, one trial
//!   at a time a task (`trial_task`, where every command about a running trial is dispatched);
//! * `tuner`: the `Tuner` builder, and `prepare`, which checks every setting before anything
//!   runs; `config` (`TuneConfig`) and `control` (`Control`) are what a user hands it;
//! * `experiment`: the experiment directory, every file name and path in it; `trial` and
//!   `result_grid`: what a sweep returns; `tracking`: what a sweep's end could not send to its
//!   tracking server, sent from its files (`rtune sync`).
//!
//! A whole sweep, in code: `rtune`'s crate docs.

pub mod config;
pub mod control;
pub mod controller;
pub mod experiment;
pub mod lease;
pub mod result_grid;
mod snapshots;
mod sweep;
mod tracking;
pub mod trial;
mod trial_task;
mod tuner;

pub use config::{Samples, TuneConfig, TuneSettings};
pub use control::Control;
pub use controller::{Command, Event, Trial};
pub use experiment::{
    DRIVER_FILE, DRIVER_LOG, ERROR_FILE, RESULTS_PARQUET, SETTINGS_FILE, STATE_FILE, SWEEP_FILE,
    SweepState, experiment_exists, experiment_path, experiment_store, holds_experiment,
    prune_staging, remove_experiment, sweep_state,
};
pub use result_grid::{ResultGrid, Scope};
pub use tracking::{Synced, sync_tracking};
pub use trial::TrialResult;
pub use tuner::{Checked, Tuner, trial_count};
