//! The parts of Ray Tune's half that need no libtorch: the controller core (`controller`), the
//! sweep's settings (`config`), the experiment directory (`experiment`), and what a sweep returns
//! (`trial`, `result_grid`). `rtune::tune` re-exports them with the sweep itself.

pub mod config;
pub mod controller;
pub mod experiment;
pub mod result_grid;
pub mod trial;

pub use config::{Samples, TuneConfig, TuneSettings};
pub use controller::{
    Command, Controller, ControllerConfig, ControllerState, Event, Reported, SavedTrial, Trial,
};
pub use experiment::{
    DRIVER_FILE, DRIVER_LOG, ERROR_FILE, RESULTS_PARQUET, SETTINGS_FILE, STATE_FILE, SWEEP_FILE,
    experiment_path, holds_experiment,
};
pub use result_grid::{ResultGrid, Scope};
pub use trial::TrialResult;
