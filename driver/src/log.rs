//! rtune's logs: `tracing` events, written to stderr and filtered by `RUST_LOG` (default: rtune's
//! own at `info`, everything else at `warn`), and also to the log files registered with
//! [`tee_to`] while they are (a sweep's `driver.log` in its experiment directory).
//!
//! [`install`] is called by `rtune::init()`; a program that installed its own subscriber first
//! keeps it (and then no experiment log file is written).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::EitherWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The log files being written, with the id of their guard.
static FILES: Mutex<Vec<(u64, Arc<Mutex<File>>)>> = Mutex::new(Vec::new());

/// Installs rtune's subscriber unless the program has one (see the module docs).
pub fn install() {
    let filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,rtune=info"));
    // What reaches stderr is decided by its writer, per event, and not by a second filter: a
    // filter that can change at run time makes every callsite "sometimes enabled", so that
    // the trace-level spans of h2, hyper and tonic (several per gRPC call) would be created and
    // filtered one by one instead of being turned off once, at their callsites.
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(StderrGate)
        .with_ansi(false)
        .with_target(false)
        .with_filter(filter());
    let files =
        tracing_subscriber::fmt::layer().with_writer(Tee).with_ansi(false).with_filter(filter());
    let _ = tracing_subscriber::registry().with(stderr).with(files).try_init();
}

/// What reaches stderr: everything the filter lets through, warnings and errors only
/// (`quiet_stderr`), or nothing (`mute_stderr`, while a terminal UI owns the screen).
static STDERR: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(ALL);
const ALL: u8 = 0;
const WARNINGS: u8 = 1;
const NOTHING: u8 = 2;

/// The target of the warning that a trial failed for good, with its whole error: a command
/// that shows trials' ends itself (`quiet_stderr`) keeps it off stderr, where the trial's end
/// is said once, in one line; the files named by `tee_to` (`driver.log`) have it.
pub(crate) const TRIAL_FAILED: &str = "rtune::trial_failed";

/// Only warnings and errors on stderr from now on (the files named by `tee_to` still get
/// everything), but for trials' failures (`TRIAL_FAILED`): for commands that print their own
/// progress. `RUST_LOG`, when set, wins.
pub fn quiet_stderr() {
    if std::env::var_os("RUST_LOG").is_none() {
        STDERR.store(WARNINGS, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Nothing on stderr while `on` (a terminal UI draws the screen); then as `quiet_stderr`.
pub fn mute_stderr(on: bool) {
    let level = if on { NOTHING } else { WARNINGS };
    STDERR.store(level, std::sync::atomic::Ordering::Relaxed);
}

/// The stderr layer's writer: stderr for the events `STDERR` lets through, else nothing.
struct StderrGate;

impl<'a> MakeWriter<'a> for StderrGate {
    type Writer = EitherWriter<std::io::Stderr, std::io::Sink>;

    fn make_writer(&'a self) -> Self::Writer {
        EitherWriter::A(std::io::stderr())
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        let shown = match STDERR.load(std::sync::atomic::Ordering::Relaxed) {
            ALL => true,
            WARNINGS => *meta.level() <= tracing::Level::WARN && meta.target() != TRIAL_FAILED,
            _ => false,
        };
        if shown { EitherWriter::A(std::io::stderr()) } else { EitherWriter::B(std::io::sink()) }
    }
}

/// Writes every log line to `path` too (appending), until the guard is dropped.
pub(crate) fn tee_to(path: &Path) -> std::io::Result<TeeGuard> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    FILES.lock().unwrap_or_else(|p| p.into_inner()).push((id, Arc::new(Mutex::new(file))));
    Ok(TeeGuard(id))
}

/// Stops the writing to a `tee_to` file when dropped.
#[derive(Debug)]
pub(crate) struct TeeGuard(u64);

impl Drop for TeeGuard {
    fn drop(&mut self) {
        FILES.lock().unwrap_or_else(|p| p.into_inner()).retain(|(id, _)| *id != self.0);
    }
}

/// The writer of the file layer: every registered file.
struct Tee;

impl<'a> MakeWriter<'a> for Tee {
    type Writer = Tee;

    fn make_writer(&'a self) -> Tee {
        Tee
    }
}

impl Write for Tee {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let files: Vec<Arc<Mutex<File>>> = FILES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, f)| f.clone())
            .collect();
        for file in files {
            // A log file that cannot be written must not take the sweep down with it.
            let _ = file.lock().unwrap_or_else(|p| p.into_inner()).write_all(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
