//! Where a rank's time goes between two reports: its steps (the train function's time from one
//! report's return to the next report), the part of it spent waiting for the next batch, and the
//! part spent in collectives (with the bytes they moved); and around the steps, how long the last
//! report kept it waiting, what its checkpoint weighed and took to write, and how long its
//! uploads took. The figures ride on each report (`ReportRequest.times`): no message of their
//! own.
//!
//! One rank is one process, so the counters are the process's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use rtune_driver::proto::RankTimes;

static DATA_NS: AtomicU64 = AtomicU64::new(0);
static COLLECTIVE_NS: AtomicU64 = AtomicU64::new(0);
static COLLECTIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static REPORT_NS: AtomicU64 = AtomicU64::new(0);
static CHECKPOINT_BYTES: AtomicU64 = AtomicU64::new(0);
static CHECKPOINT_WRITE_NS: AtomicU64 = AtomicU64::new(0);
static UPLOAD_NS: AtomicU64 = AtomicU64::new(0);
static UPLOAD_WAIT_NS: AtomicU64 = AtomicU64::new(0);

/// `RTUNE_RANK_TIMES=0` in the driver's environment turns the ranks' timers off (no data-wait,
/// collective, report or upload figures), to measure what they cost (`bench/ddp_timers.sh`); on
/// by default.
pub const RANK_TIMES_ENV: &str = "RTUNE_RANK_TIMES";

fn timers_on() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    !*OFF.get_or_init(|| std::env::var(RANK_TIMES_ENV).is_ok_and(|v| v == "0"))
}

fn timed<T>(counter: &AtomicU64, f: impl FnOnce() -> T) -> T {
    if !timers_on() {
        return f();
    }
    let began = Instant::now();
    let out = f();
    counter.fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    out
}

/// `f`, counted as waiting for data.
pub(crate) fn data<T>(f: impl FnOnce() -> T) -> T {
    timed(&DATA_NS, f)
}

/// `f`, a collective moving `bytes` from this rank, counted as such.
pub(crate) fn collective<T>(bytes: usize, f: impl FnOnce() -> T) -> T {
    if timers_on() {
        COLLECTIVE_BYTES.fetch_add(bytes as u64, Relaxed);
    }
    timed(&COLLECTIVE_NS, f)
}

/// `f`, a report, counted as the time it kept the train function (said with the next one).
pub(crate) fn report<T>(f: impl FnOnce() -> T) -> T {
    REPORT_NS.store(0, Relaxed);
    timed(&REPORT_NS, f)
}

/// `f`, an upload of a checkpoint to the run's store (in a report or in the background).
pub(crate) fn upload<T>(f: impl FnOnce() -> T) -> T {
    timed(&UPLOAD_NS, f)
}

/// `f`, a report's wait for an earlier checkpoint's background upload.
pub(crate) fn upload_wait<T>(f: impl FnOnce() -> T) -> T {
    timed(&UPLOAD_WAIT_NS, f)
}

/// The checkpoint the next report carries: `bytes`, written since `created`.
pub(crate) fn checkpoint(bytes: u64, created: Instant) {
    CHECKPOINT_BYTES.store(bytes, Relaxed);
    CHECKPOINT_WRITE_NS.store(created.elapsed().as_nanos() as u64, Relaxed);
}

/// The figures since `step_began` (the last report's return), the counters set back to 0.
pub(crate) fn take(step_began: Instant) -> RankTimes {
    let seconds = |counter: &AtomicU64| counter.swap(0, Relaxed) as f64 * 1e-9;
    RankTimes {
        step_s: step_began.elapsed().as_secs_f64(),
        data_s: seconds(&DATA_NS),
        collective_s: seconds(&COLLECTIVE_NS),
        collective_bytes: COLLECTIVE_BYTES.swap(0, Relaxed),
        report_s: seconds(&REPORT_NS),
        checkpoint_bytes: CHECKPOINT_BYTES.swap(0, Relaxed),
        checkpoint_write_s: seconds(&CHECKPOINT_WRITE_NS),
        checkpoint_upload_s: seconds(&UPLOAD_NS),
        checkpoint_wait_s: seconds(&UPLOAD_WAIT_NS),
        // Set by `gpu` for a GPU rank.
        gpu_utilization: 0.0,
        gpu_memory_bytes: 0,
    }
}

/// The rank's GPU (its CUDA device `ordinal`) as NVML sees it now, into `times`; nothing where
/// NVML is not (the figures are then absent, not 0). Which of the machine's GPUs that is is
/// found once per device, not at every report: a report then asks NVML of that GPU only.
pub(crate) fn gpu(times: &mut RankTimes, ordinal: usize) {
    use rtune_driver::sys::nvml;
    static FOUND: std::sync::Mutex<Option<(usize, Option<u32>)>> = std::sync::Mutex::new(None);
    let index = {
        let mut found = FOUND.lock().unwrap_or_else(|p| p.into_inner());
        match *found {
            Some((seen, index)) if seen == ordinal => index,
            _ => {
                let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
                let index = nvml::usage().and_then(|gpus| {
                    nvml::of_device(&gpus, visible.as_deref(), ordinal).map(|g| g.index)
                });
                *found = Some((ordinal, index));
                index
            }
        }
    };
    if let Some(gpu) = index.and_then(nvml::device_usage) {
        times.gpu_utilization = f64::from(gpu.utilization) / 100.0;
        times.gpu_memory_bytes = gpu.memory_used;
    }
}
