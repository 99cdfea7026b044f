//! Starting an attempt's worker processes: as children of the driver, or on the nodes of a
//! reserved placement group through the head. Either way a worker dies with what started it.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use tokio::sync::oneshot;

use super::hub::Hub;
use super::logs::{Stream, log_path, open_log};
use super::{
    AttemptSpec, Exit, ExitTx, HUB_TOKEN_ENV, RankPlacement, WORKER_ENV, WorkerSpec,
    in_process_runner, remote_worker_id,
};
use crate::error::{Error, Result};
use crate::setting::Setting;
use crate::sys::{build_id, zygote};

/// What rank `rank` is told at its start, a process on this machine or not, placed at
/// `placed`.
fn worker_spec(
    hub: &Hub,
    spec: &AttemptSpec,
    (rank, placed): (usize, &RankPlacement),
    local: bool,
) -> WorkerSpec {
    WorkerSpec {
        hub: if local { hub.local_url() } else { hub.url() },
        group: spec.run.group.clone(),
        attempt: spec.attempt,
        rank: rank as u32,
        train_fn: spec.run.train_fn,
        build_id: build_id::hex(build_id::build_id()),
        bind_host: placed.bind_host.clone(),
        // A node agent's worker of a run on a store shares nothing with this machine but the
        // store (see `cluster::binary` for the binary).
        scratch: !local && spec.run.store_url.is_some(),
    }
}

/// The `RTUNE_WORKER` spec and environment of rank `rank` placed at `placed`, a process on
/// this machine or not.
fn worker_env(
    hub: &Hub,
    spec: &AttemptSpec,
    (rank, placed): (usize, &RankPlacement),
    local: bool,
) -> Vec<(String, String)> {
    let worker = worker_spec(hub, spec, (rank, placed), local);
    let mut env = spec.run.env.clone();
    env.extend([
        (WORKER_ENV.to_owned(), serde_json::to_string(&worker).expect("spec serialises")),
        ("OMP_NUM_THREADS".to_owned(), spec.run.num_threads.to_string()),
    ]);
    if let Some(devices) = &placed.cuda_visible_devices {
        env.push(("CUDA_VISIBLE_DEVICES".to_owned(), devices.clone()));
    }
    if let Some(token) = hub.token() {
        env.push((HUB_TOKEN_ENV.to_owned(), token.to_owned()));
    }
    env
}

/// Starts rank `rank` on this machine, placed at `placed`; returns the sender that kills it.
/// With `warm_start`, it is forked by the driver's fork server (a fresh process without the
/// cost of loading the binary and libtorch again; see `sys::zygote`), else started as a child
/// with exec.
pub(super) async fn spawn_local(
    hub: &Hub,
    spec: &AttemptSpec,
    (rank, placed): (usize, &RankPlacement),
    exits: ExitTx,
) -> Result<oneshot::Sender<()>> {
    let (stdout_path, stderr_path) =
        (log_path(spec, rank, Stream::Stdout), log_path(spec, rank, Stream::Stderr));
    let (stdout, stderr) = (open_log(&stdout_path)?, open_log(&stderr_path)?);
    let on_exit = move |status: std::io::Result<std::process::ExitStatus>| {
        let exit = match status {
            Ok(status) => Exit::Status(status),
            Err(e) => Exit::Lost(format!("could not wait for the process: {e}")),
        };
        let _ = exits.send((rank, exit));
    };
    let env = worker_env(hub, spec, (rank, placed), true);
    let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
    if spec.run.warm_start && zygote::warm_start_allowed() {
        let (stdout, stderr) = (stdout_path.as_path(), stderr_path.as_path());
        let start = zygote::WarmStart { env: env.clone(), stdout, stderr, ignore_sigterm: false };
        match zygote::spawn_warm(&exe, start, on_exit.clone()).await {
            Ok(kill) => return Ok(kill),
            Err(e) => zygote::give_up(&e),
        }
    }
    let mut command = std::process::Command::new(&exe);
    command.envs(env).stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    crate::sys::spawn_supervised(command, on_exit)
        .map(|supervised| supervised.kill)
        .map_err(|e| Error::Worker(format!("cannot start worker {}: {e}", exe.display())))
}

/// Starts local mode's one rank on a thread of this process. Nothing can kill a thread: the
/// sender returned does nothing, and a train function whose attempt ended (failed, or the sweep
/// stopped it) ends at its next report, which the hub refuses, or with the process.
pub(super) fn spawn_in_process(
    hub: &Hub,
    spec: &AttemptSpec,
    exits: ExitTx,
) -> Result<oneshot::Sender<()>> {
    let runner = in_process_runner().ok_or_else(|| {
        Error::config(
            Setting::NumWorkers,
            "is 0 (local mode: the train function runs in this process), which needs \
             rtune::init() as the first line of main",
        )
    })?;
    if !spec.run.env.is_empty() {
        let names: Vec<&str> = spec.run.env.iter().map(|(name, _)| name.as_str()).collect();
        tracing::warn!(
            "local mode runs the train function in this process, whose environment is not \
             changed: set {} before starting it",
            names.join(", ")
        );
    }
    let worker = worker_spec(hub, spec, (0, &spec.ranks[0]), true);
    std::thread::Builder::new()
        .name("rtune-local-rank".into())
        // As much stack as a main thread: the train function is written for one.
        .stack_size(8 << 20)
        .spawn(move || {
            // The runner catches the train function's panics; one of its own must still end
            // the attempt, as a worker process's would.
            let exit = match std::panic::catch_unwind(|| runner(worker)) {
                Ok(code) => Exit::Status(ExitStatus::from_raw(code << 8)),
                Err(_) => Exit::Lost("the local-mode worker panicked (see the log)".into()),
            };
            let _ = exits.send((0, exit));
        })
        .map_err(|e| Error::Worker(format!("cannot start the local-mode thread: {e}")))?;
    Ok(oneshot::channel().0)
}

/// The CUDA device a rank running in this process uses for the GPU `given` it was placed on
/// (the first of a `CUDA_VISIBLE_DEVICES`-style list): its position among the devices this
/// process sees.
pub(super) fn in_process_device(given: &str) -> String {
    let first = crate::cluster::device_list(given).into_iter().next().unwrap_or_default();
    let ordinal = match crate::cluster::local_devices() {
        Some(visible) => visible.iter().position(|d| *d == first).unwrap_or(0),
        None => first.parse().unwrap_or(0),
    };
    format!("cuda:{ordinal}")
}

/// Starts rank `rank` on the node its bundle was placed on, through the head.
pub(super) async fn spawn_remote(
    hub: &Hub,
    spec: &AttemptSpec,
    rank: usize,
    mut client: crate::cluster::client::Client,
    pg: crate::cluster::pool::PgId,
) -> Result<oneshot::Sender<()>> {
    // The node runs this binary by its hash, fetched from the head (it need not share a file
    // system with this machine).
    let binary_sha256 = crate::cluster::binary::ensure_on_head(&mut client).await?;
    let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
    let worker_id = remote_worker_id(spec, rank);
    let mut env: std::collections::HashMap<String, String> =
        worker_env(hub, spec, (rank, &spec.ranks[rank]), false).into_iter().collect();
    if !spec.run.warm_start {
        // The node agent starts it with exec too.
        env.insert(zygote::WARM_START_ENV.to_owned(), "0".to_owned());
    }
    let request = crate::proto::StartWorkerRequest {
        worker_id: worker_id.clone(),
        pg_id: pg.0,
        bundle: rank as u32,
        executable: exe.display().to_string(),
        build_id: build_id::hex(build_id::build_id()),
        env,
        binary_sha256,
    };
    crate::cluster::client::start_worker(&mut client, request).await?;
    let (kill, killed) = oneshot::channel::<()>();
    tokio::spawn(async move {
        // Sent or dropped (the attempt ended), the worker must go, like a local kill_on_drop;
        // its exit arrives through the watch stream.
        let _ = killed.await;
        let _ = crate::cluster::client::kill_worker(&mut client, worker_id).await;
    });
    Ok(kill)
}
