//! Worker processes: a trial's workers are child processes re-running the user's own binary.
//! `rtune::init()`, the first line of `main`, notices the `RTUNE_WORKER` variable the driver set,
//! runs the worker and exits; in the driver it returns at once.
//!
//! Place in the pipeline: below the trainer. The driver side (`group`) spawns and supervises the
//! processes of one attempt and serves the worker protocol (`hub`); the worker side (`process`)
//! joins, builds the collective group and calls the train function on this thread.
//! Train functions travel as an offset from `init` into the binary, which is why the build id of
//! the worker's binary must match the driver's.

pub(crate) mod group;
pub(crate) mod hub;
pub(crate) mod process;

use serde::{Deserialize, Serialize};

use crate::train::TrainFn;

/// The environment variable that makes a process a worker.
pub(crate) const WORKER_ENV: &str = "RTUNE_WORKER";

/// What the driver tells a worker process at spawn time (as JSON in `RTUNE_WORKER`); the rest
/// comes in the join reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WorkerSpec {
    /// URL of the driver's worker hub, e.g. `http://127.0.0.1:40123`.
    pub hub: String,
    pub group: String,
    pub attempt: u32,
    pub rank: u32,
    /// The train function as an offset from `init`'s address.
    pub train_fn: i64,
    /// Hex build id of the driver's binary.
    pub build_id: String,
    /// Host to bind the collective listener on.
    pub bind_host: String,
}

/// Turns this process into a worker when the driver started it as one (and never returns then);
/// does nothing in any other process. Call it first in `main`.
pub fn init() {
    let Some(spec) = std::env::var_os(WORKER_ENV) else { return };
    let code = match serde_json::from_str::<WorkerSpec>(&spec.to_string_lossy()) {
        Ok(spec) => process::run(spec),
        Err(e) => {
            eprintln!("rtune worker: bad {WORKER_ENV}: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn anchor() -> usize {
    init as fn() as usize
}

pub(crate) fn train_fn_offset(f: TrainFn) -> i64 {
    f as usize as i64 - anchor() as i64
}

/// # Safety
/// `offset` must come from `train_fn_offset` in a process running the very same binary (the
/// caller checks the build id first).
pub(crate) unsafe fn train_fn_at(offset: i64) -> TrainFn {
    let address = (anchor() as i64 + offset) as usize;
    // SAFETY: per the contract, `address` is where the same binary placed the same `TrainFn`.
    unsafe { std::mem::transmute::<usize, TrainFn>(address) }
}
