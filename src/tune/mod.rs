//! Ray Tune's half: sweeps whose trials are `TorchTrainer` runs. Built in steps: today the
//! controller's synchronous core (`controller`), which decides what runs, stops, pauses and
//! ends; the async shell that carries its commands out on the shared driver comes next.

pub mod controller;

pub use controller::{Command, Controller, ControllerConfig, Event, Trial};
