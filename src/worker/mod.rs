//! Worker processes: a trial's workers are child processes re-running the user's own binary.
//! `rtune::init()`, the first line of `main`, notices the `RTUNE_WORKER` variable the driver set,
//! runs the worker and exits; in the driver it returns at once.
//!
//! Place in the pipeline: below the trainer, beside the cluster. This is the worker side only:
//! `process` joins the driver through `link`, builds the collective group and calls the train
//! function on this thread with a `context`. The driver side (spawning, supervising, recording)
//! is `group`; the two share the worker protocol and the `RTUNE_WORKER` spec defined here.
//! Train functions travel as an offset from `init` into the binary, which is why the build id of
//! the worker's binary must match the driver's.

mod backend;
mod buckets;
pub(crate) mod command;
mod context;
pub(crate) mod group;
mod join;
mod link;
mod model_optimizer;
pub(crate) mod process;
mod shard;
mod shard_optimizer;
mod sharded;
mod timing;

pub use command::{REPORT_PREFIX, run_command};
pub(crate) use context::ContextParts;
pub use context::{DistributedModel, TrainContext};
pub(crate) use link::DriverLink;
pub use model_optimizer::{ModelOptimizer, OptimizerStep};
pub(crate) use rtune_driver::group::{HUB_TOKEN_ENV, WORKER_ENV, WorkerSpec};
pub use shard::{Balance, BatchSpec, Batches, DatasetShard, RESIDENT_BYTES};
#[allow(deprecated)]
pub use shard_optimizer::{OptimizerSettings, ShardOptimizer};
pub use sharded::{ShardedModel, Sharding};

/// A train function: runs on every worker, reports through the context.
pub type TrainFn = fn(&mut TrainContext) -> anyhow::Result<()>;

/// Turns this process into a worker when the driver started it as one (and never returns then);
/// does nothing in any other process. Call it first in `main`.
pub fn init() {
    rtune_driver::log::install();
    // A process started to probe CUDA for its driver answers and exits (see `cuda`).
    crate::cuda::probe_if_asked();
    // The driver's fork server (`sys::zygote`) forks workers that go on below, in `run_worker`.
    rtune_driver::sys::zygote::serve_if_asked(|| exit_now(run_worker()));
    if std::env::var_os(WORKER_ENV).is_none() {
        // The driver's process (or a head's, a node agent's): local mode
        // (`ScalingConfig::local`) runs a worker here.
        rtune_driver::sys::raise_open_files_limit();
        rtune_driver::group::set_in_process_runner(process::run);
        return;
    }
    exit_now(run_worker());
}

/// Ends a worker process once it has told the driver how it ended: `_exit`, without running
/// libtorch's static destructors (tearing down its operator registry costs more CPU than a
/// short trial's whole training; the files a worker writes are closed and synced already).
pub(crate) fn exit_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process at once; nothing after it runs.
    unsafe { libc::_exit(code) }
}

/// Runs the worker its environment describes; the process exit code.
fn run_worker() -> i32 {
    let spec = std::env::var(WORKER_ENV).unwrap_or_default();
    match serde_json::from_str::<WorkerSpec>(&spec) {
        Ok(spec) => match process::run_to_end(spec) {
            (code, None) => code,
            (code, Some(signal)) => {
                // Told the driver why already; ends as its command did (`CommandKilled`).
                use std::io::Write;
                let _ = std::io::stdout().flush();
                let _ = std::io::stderr().flush();
                // SAFETY: signal(2) and raise(2) on this worker process, which is done.
                unsafe {
                    libc::signal(signal, libc::SIG_DFL);
                    libc::raise(signal);
                }
                code
            }
        },
        Err(e) => {
            tracing::error!("bad {WORKER_ENV}: {e}");
            2
        }
    }
}

/// # Safety
/// `offset` must come from a `TrainFnId` made in a process running the very same binary (the
/// caller checks the build id first).
pub(crate) unsafe fn train_fn_at(offset: i64) -> TrainFn {
    if offset == rtune_driver::train::TrainFnId::COMMAND.offset() {
        return run_command;
    }
    let address = rtune_driver::train::TrainFnId::address(offset);
    // SAFETY: per the contract, `address` is where the same binary placed the same `TrainFn`
    // (`TrainFnId::of` takes only functions of `TrainContext`, the one `TrainContextType`).
    unsafe { std::mem::transmute::<usize, TrainFn>(address) }
}
