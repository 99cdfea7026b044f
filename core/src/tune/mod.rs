//! The parts of Ray Tune's half that need no libtorch: the controller core (`controller`), the
//! sweep's settings (`config`), the experiment directory (`experiment`), and what a sweep returns
//! (`trial`, `result_grid`), and the handle that steers a running sweep (`control`).
//! `rtune::tune` re-exports them with the sweep itself.

pub mod config;
pub mod control;
pub mod controller;
pub mod experiment;
pub mod lease;
pub mod result_grid;
pub mod trial;

pub use config::{Samples, TuneConfig, TuneSettings};
pub use control::Control;
pub use controller::{
    Command, Controller, ControllerConfig, ControllerState, Event, Reported, SavedTrial, Trial,
};
pub use experiment::{
    DRIVER_FILE, DRIVER_LOG, ERROR_FILE, RESULTS_PARQUET, SETTINGS_FILE, STATE_FILE, SWEEP_FILE,
    SweepState, experiment_path, holds_experiment, sweep_state,
};
pub use lease::Lease;
pub use result_grid::{ResultGrid, Scope};
pub use trial::TrialResult;
