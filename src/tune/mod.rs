//! Ray Tune's half: sweeps whose trials are full `TorchTrainer` runs on the process's shared
//! driver. The controller (`controller`) is a synchronous core that decides what runs, stops
//! and ends; the `Tuner` (`tuner`) is the thin async shell that carries its commands out.

pub mod controller;
mod tuner;

pub use controller::{Command, Controller, ControllerConfig, Event, Trial};
pub use tuner::{ResultGrid, STATE_FILE, TrialResult, TuneConfig, Tuner};
