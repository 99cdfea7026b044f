//! Command trainables, the worker side: any executable as the train function, one process per
//! worker, started by the worker process with torchrun's environment and spoken to through a
//! line protocol on its stdin and stdout.
//!
//! # The protocol (version 1)
//!
//! The command's environment has torchrun's variables (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
//! `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `ROLE_RANK`, `ROLE_WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`: a PyTorch script calling `init_process_group("gloo")` runs unchanged) and
//! rtune's:
//!
//! | variable | value |
//! | --- | --- |
//! | `RTUNE_PROTOCOL` | `1` |
//! | `RTUNE_PARAMS` | the trial's params as a JSON object |
//! | `RTUNE_PARAMS_FILE` | the same JSON in a file (`params.json` of the trial) |
//! | `RTUNE_CHECKPOINT` | the checkpoint folder to resume from; unset on a fresh start |
//! | `RTUNE_ITERATION` | reports made before this start (the next one is this + 1) |
//! | `RTUNE_TRIAL_ID`, `RTUNE_TRIAL_NAME`, `RTUNE_EXPERIMENT_NAME`, `RTUNE_RUN_DIR` | who and where |
//!
//! A report is one line on stdout: `@rtune ` and a JSON object, `{"metrics": {"loss": 0.3},
//! "checkpoint": "/a/folder"}` (`checkpoint` optional). Metrics are numbers; the strings `"nan"`,
//! `"inf"` and `"-inf"` stand for the values JSON cannot write. The folder's files are copied
//! into the trial's checkpoint before the answer (rank 0's only, as with `ctx.report`), so the
//! command may delete or reuse it afterwards. Every rank reports the same number of times.
//!
//! After each report the command reads one line from stdin: `continue`, or `stop` when the
//! scheduler ended the trial. A stopped command should exit soon with status 0; one still
//! running after its grace period gets SIGTERM, and SIGKILL 5 s later. Every other stdout line
//! and all of stderr go to the worker's logs. Exit status 0 ends the run, any other fails it
//! (with the last lines of stderr in the error). The command dies with its worker.
//!
//! `examples/command/rtune_report.py` is the protocol in twenty lines of Python.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Deserialize;

use crate::worker::{HUB_TOKEN_ENV, TrainContext, WORKER_ENV};
use rtune_collective::ReduceOp;
use rtune_driver::error::Error;
use rtune_driver::metrics::Metrics;
use rtune_driver::train::command::{COMMAND_ENV, CommandSpec};

pub const REPORT_PREFIX: &str = "@rtune ";
/// Lines of the command's stderr kept for the error of a failed run.
const STDERR_TAIL: usize = 20;
/// How long a failed command's stderr may take to end after the command did.
const STDERR_WAIT: Duration = Duration::from_secs(5);
/// After SIGTERM, how long a stopped command has before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// A report line, as the command writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportLine {
    metrics: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    checkpoint: Option<PathBuf>,
}

/// What the stdout reader hands the training thread.
enum Line {
    Report(ReportLine),
    Bad { number: usize, problem: String },
    End,
}

/// Names the running program to `rtune stack` (its pid and state join the worker's stack)
/// until dropped.
struct ProgramNamed;

impl ProgramNamed {
    fn new(pid: u32) -> Self {
        rtune_driver::sys::stacks::command_child(Some(pid));
        ProgramNamed
    }
}

impl Drop for ProgramNamed {
    fn drop(&mut self) {
        rtune_driver::sys::stacks::command_child(None);
    }
}

/// The train function of a command trainable (see the module docs).
pub fn run_command(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let spec: CommandSpec = serde_json::from_str(
        &std::env::var(COMMAND_ENV).with_context(|| format!("{COMMAND_ENV} is not set"))?,
    )
    .with_context(|| format!("{COMMAND_ENV} is not a command spec"))?;
    let port = master_port(ctx)?;
    let mut child = start(&spec, ctx, port)?;
    let _named = ProgramNamed::new(child.id());
    let shown = spec.argv.join(" ");
    let stdin = child.stdin.take().expect("piped");
    let answers = answer_thread(stdin);
    let lines = read_stdout(child.stdout.take().expect("piped"));
    let tail = keep_stderr_tail(child.stderr.take().expect("piped"));
    let failed = |child: &mut Child, e: anyhow::Error| {
        let _ = child.kill();
        let _ = child.wait();
        Err(e)
    };
    for line in lines {
        let report = match line {
            Line::Report(report) => report,
            Line::Bad { number, problem } => {
                let e = anyhow!(
                    "`{shown}`: stdout line {number} starts with {REPORT_PREFIX:?} but is not a \
                     report: {problem}; write {REPORT_PREFIX}{{\"metrics\": {{\"loss\": 0.3}}, \
                     \"checkpoint\": \"/optional/folder\"}}"
                );
                return failed(&mut child, e);
            }
            Line::End => break,
        };
        let metrics = match numbers(report.metrics) {
            Ok(metrics) => metrics,
            Err(e) => return failed(&mut child, e.context(format!("`{shown}` reported"))),
        };
        let checkpoint = match &report.checkpoint {
            None => None,
            Some(folder) => match take_checkpoint(ctx, &spec.working_dir, folder) {
                Ok(writer) => Some(writer),
                Err(e) => return failed(&mut child, e),
            },
        };
        match ctx.report_maybe_with(metrics, checkpoint) {
            Ok(()) => {
                let _ = answers.send("continue");
            }
            Err(Error::StopRequested) => {
                let _ = answers.send("stop");
                drop(answers);
                stop(&mut child, Duration::from_secs_f64(spec.stop_grace_s));
                return Err(Error::StopRequested.into());
            }
            Err(e) => return failed(&mut child, e.into()),
        }
    }
    drop(answers);
    let status = child.wait().with_context(|| format!("waiting for `{shown}`"))?;
    if status.success() {
        return Ok(());
    }
    let tail = tail.lines();
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    let how = match (status.code(), signal) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended with {status}"),
    };
    // The last line first (a Python traceback ends with the exception), for one-line views.
    let message = match tail.last() {
        None => format!("`{shown}` {how} (its stderr was empty)"),
        Some(last) => {
            format!("`{shown}` {how}: {last}\nthe end of its stderr:\n{}", tail.join("\n"))
        }
    };
    match signal {
        Some(signal) => Err(anyhow::Error::new(CommandKilled(signal)).context(message)),
        None => Err(anyhow!(message)),
    }
}

/// A command killed by a signal nobody in rtune sent (SIGKILL, the OOM killer): its worker
/// tells the driver why, then ends by the same signal, so that the driver sees the rank lost
/// (an elastic group restarts at its new size) rather than failed.
#[derive(Debug)]
pub(crate) struct CommandKilled(pub(crate) i32);

impl std::fmt::Display for CommandKilled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "killed by signal {}", self.0)
    }
}

impl std::error::Error for CommandKilled {}

/// torchrun's `MASTER_PORT`: a port free on rank 0's host now, chosen there and shared with
/// every rank through the group (a sum where only rank 0 adds; ports are exact in an f32).
fn master_port(ctx: &mut TrainContext) -> anyhow::Result<u16> {
    let mut port = [0f32];
    if ctx.world_rank() == 0 {
        let listener = std::net::TcpListener::bind((ctx.master_host(), 0))
            .with_context(|| format!("finding a free port on {}", ctx.master_host()))?;
        port[0] = f32::from(listener.local_addr()?.port());
    }
    ctx.all_reduce(&mut port, ReduceOp::Sum)?;
    Ok(port[0] as u16)
}

/// Starts the command with torchrun's and rtune's environment, its stdio piped.
fn start(spec: &CommandSpec, ctx: &TrainContext, port: u16) -> anyhow::Result<Child> {
    let (program, args) = spec.argv.split_first().context("the command is empty")?;
    // The command gets every param; what it reads is its own affair.
    ctx.params().read_all();
    let params = serde_json::to_string(ctx.params()).context("params as JSON")?;
    let params_file = ctx.run_dir().join(rtune_driver::storage::PARAMS_FILE);
    if !params_file.exists() {
        rtune_driver::storage::atomic_write(&params_file, params.as_bytes())?;
    }
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .current_dir(&spec.working_dir)
        .env_remove(WORKER_ENV)
        .env_remove(HUB_TOKEN_ENV)
        .env_remove(COMMAND_ENV)
        .env_remove("RTUNE_CHECKPOINT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let rank = ctx.world_rank().to_string();
    let world = ctx.world_size().to_string();
    let vars = [
        ("RANK", rank.clone()),
        ("LOCAL_RANK", ctx.local_rank().to_string()),
        ("WORLD_SIZE", world.clone()),
        ("LOCAL_WORLD_SIZE", ctx.local_world_size().to_string()),
        ("GROUP_RANK", ctx.node_rank().to_string()),
        ("ROLE_RANK", rank),
        ("ROLE_WORLD_SIZE", world),
        ("MASTER_ADDR", ctx.master_host().to_owned()),
        ("MASTER_PORT", port.to_string()),
        ("RTUNE_PROTOCOL", "1".to_owned()),
        ("RTUNE_PARAMS", params),
        ("RTUNE_PARAMS_FILE", params_file.display().to_string()),
        ("RTUNE_ITERATION", ctx.iteration().to_string()),
        ("RTUNE_TRIAL_ID", ctx.trial_id().unwrap_or_default().to_owned()),
        ("RTUNE_TRIAL_NAME", ctx.trial_name().unwrap_or_default().to_owned()),
        ("RTUNE_EXPERIMENT_NAME", ctx.experiment_name().unwrap_or_default().to_owned()),
        ("RTUNE_RUN_DIR", ctx.run_dir().display().to_string()),
    ];
    command.envs(vars);
    if let Some(checkpoint) = ctx.checkpoint() {
        command.env("RTUNE_CHECKPOINT", checkpoint.path());
    }
    if std::env::var_os("PYTHONUNBUFFERED").is_none() {
        // Its prints reach the log (and the UI's log tail) as they happen.
        command.env("PYTHONUNBUFFERED", "1");
    }
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec. The command
    // dies with this worker: the training thread that forks it is the process's main thread.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().with_context(|| {
        format!("cannot start `{}` in {}", spec.argv.join(" "), spec.working_dir.display())
    })
}

/// Writes the answers to the command's stdin on a thread of their own: a command that never
/// reads them must not block the training thread once the pipe is full.
fn answer_thread(mut stdin: ChildStdin) -> mpsc::Sender<&'static str> {
    let (tx, rx) = mpsc::channel::<&'static str>();
    std::thread::spawn(move || {
        for answer in rx {
            if writeln!(stdin, "{answer}").and_then(|()| stdin.flush()).is_err() {
                return; // it closed its stdin or ended: nobody is listening
            }
        }
    });
    tx
}

/// Reads the command's stdout on a thread: report lines come back through the iterator, every
/// other line goes to this worker's stdout (its log).
fn read_stdout(stdout: std::process::ChildStdout) -> mpsc::IntoIter<Line> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        let mut number = 0;
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => number += 1,
            }
            let text = String::from_utf8_lossy(&buf);
            let Some(json) = text.strip_prefix(REPORT_PREFIX) else {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&buf).and_then(|()| out.flush());
                continue;
            };
            let line = match serde_json::from_str::<ReportLine>(json.trim_end()) {
                Ok(report) => Line::Report(report),
                Err(e) => Line::Bad { number, problem: e.to_string() },
            };
            if tx.send(line).is_err() {
                return;
            }
        }
        let _ = tx.send(Line::End);
    });
    rx.into_iter()
}

/// The last lines of a command's stderr, as a thread copies them.
struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    /// Closed when the thread has read stderr to its end.
    done: std::sync::mpsc::Receiver<()>,
}

impl StderrTail {
    /// The last lines, once the command's stderr has ended: a command that exits has closed
    /// it, but the thread may not have read its last lines yet (they are what says why it
    /// failed). A process of its own that keeps the pipe open is not waited for past
    /// `STDERR_WAIT`.
    fn lines(self) -> Vec<String> {
        let _ = self.done.recv_timeout(STDERR_WAIT);
        self.lines.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default()
    }
}

/// Copies the command's stderr to this worker's stderr, keeping the last lines.
fn keep_stderr_tail(stderr: std::process::ChildStderr) -> StderrTail {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
    let kept = tail.clone();
    let (finished, done) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _finished = finished;
        let mut reader = BufReader::new(stderr);
        let mut buf = Vec::new();
        while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
            let _ = std::io::stderr().write_all(&buf);
            if let Ok(mut tail) = kept.lock() {
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(String::from_utf8_lossy(&buf).trim_end().to_owned());
            }
            buf.clear();
        }
    });
    StderrTail { lines: tail, done }
}

/// A report's metrics as numbers; `"nan"`, `"inf"`, `"-inf"` (any case) stand for themselves.
fn numbers(map: serde_json::Map<String, serde_json::Value>) -> anyhow::Result<Metrics> {
    let mut metrics = Metrics::new();
    for (name, value) in map {
        let number = match &value {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "nan" => Some(f64::NAN),
                "inf" | "+inf" | "infinity" => Some(f64::INFINITY),
                "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            },
            _ => None,
        };
        match number {
            Some(v) => metrics.insert(name, v),
            None => bail!(
                "metric {name:?} = {value}: metrics must be numbers (or \"nan\", \"inf\", \
                 \"-inf\")"
            ),
        };
    }
    Ok(metrics)
}

/// A checkpoint for the next report holding a copy of `folder` (relative to the working
/// directory); on ranks whose checkpoint is not kept, an empty one.
fn take_checkpoint(
    ctx: &TrainContext,
    working_dir: &Path,
    folder: &Path,
) -> anyhow::Result<rtune_driver::storage::checkpoint::CheckpointWriter> {
    let writer = ctx.new_checkpoint()?;
    if writer.is_kept() {
        let folder = working_dir.join(folder);
        if !folder.is_dir() {
            bail!("the reported checkpoint {} is not a folder", folder.display());
        }
        rtune_driver::storage::checkpoint::copy_dir(&folder, writer.path())?;
    }
    Ok(writer)
}

/// Waits up to `grace` for a command told to stop, then SIGTERM, then SIGKILL.
fn stop(child: &mut Child, grace: Duration) {
    if wait_for(child, grace) {
        return;
    }
    tracing::warn!("the command did not exit within {grace:?} of `stop`: sending SIGTERM");
    // SAFETY: kill(2) on our own child's pid, which has not been reaped (try_wait said so).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    if !wait_for(child, TERM_GRACE) {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Whether `child` exited within `limit`.
fn wait_for(child: &mut Child, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= until => return false,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_take_json_numbers_and_the_named_non_finite_values() {
        let map = serde_json::json!({"a": 1, "b": 0.5, "c": "NaN", "d": "-inf", "e": "Infinity"});
        let serde_json::Value::Object(map) = map else { unreachable!() };
        let m = numbers(map).unwrap();
        assert_eq!(m["a"], 1.0);
        assert_eq!(m["b"], 0.5);
        assert!(m["c"].is_nan());
        assert_eq!(m["d"], f64::NEG_INFINITY);
        assert_eq!(m["e"], f64::INFINITY);
    }

    #[test]
    fn a_metric_that_is_no_number_is_named() {
        let serde_json::Value::Object(map) = serde_json::json!({"acc": "high"}) else {
            unreachable!()
        };
        let e = numbers(map).unwrap_err().to_string();
        assert!(e.contains("\"acc\"") && e.contains("must be numbers"), "{e}");
    }

    #[test]
    fn report_lines_refuse_unknown_keys() {
        let bad = serde_json::from_str::<ReportLine>(r#"{"metrics": {}, "chekpoint": "x"}"#);
        assert!(bad.unwrap_err().to_string().contains("chekpoint"));
    }
}
