//! The node agent (`rtune node`): offers this machine to a head, runs worker processes on its
//! command and reports their exits.
//!
//! Workers are spawned with `PR_SET_PDEATHSIG = SIGKILL`, so they never outlive their agent:
//! killing the agent kills its workers, and the CPUs and GPUs they held are really free when
//! the head reports the node dead. When the session with the head ends (the head restarted, or
//! declared this node dead), the agent kills its workers and reconnects by itself, registering
//! again with its previous id: it rejoins clean.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use crate::cluster::pool::NodeSpec;
use crate::error::{Error, Result};
use crate::proto::{
    HeadCommand, Heartbeat, NodeMessage, RegisterNode, Registered, StartWorkerRequest, WorkerExit,
    WorkerLog, head_command, node_message,
};
use crate::sys::zygote;

/// How a node agent joins its head.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The head's host:port.
    pub head: String,
    pub token: Option<String>,
    /// What this node offers (its `address` is where its workers listen).
    pub spec: NodeSpec,
    /// How long to wait between reconnection attempts.
    pub retry: Duration,
    /// The devices this agent may use, when it runs under a `CUDA_VISIBLE_DEVICES`-style list
    /// (a Slurm step's GPUs): the pool's device indices 0..n map to these names.
    pub devices: Option<Vec<String>>,
    /// Serve one session only: the agent ends when its head ends it (a Slurm job's cluster
    /// ends with its driver) instead of reconnecting.
    pub once: bool,
    /// Workers ignore SIGTERM, so that a signal sent to every process of a job (Slurm's
    /// `scancel`, a time limit) stops them through their driver, which records the experiment
    /// first, instead of killing them under it.
    pub workers_ignore_sigterm: bool,
    /// When this turns true the agent drains: it starts no more workers and ends once the
    /// running ones have exited, or after `drain_grace`, killing what is left.
    pub drain: Option<tokio::sync::watch::Receiver<bool>>,
    pub drain_grace: Duration,
}

impl NodeConfig {
    /// An agent of `spec` that joins the head at `head` and reconnects when the session ends.
    pub fn new(head: impl Into<String>, token: Option<String>, spec: NodeSpec) -> NodeConfig {
        NodeConfig {
            head: head.into(),
            token,
            spec,
            retry: Duration::from_millis(500),
            devices: None,
            once: false,
            workers_ignore_sigterm: false,
            drain: None,
            drain_grace: Duration::from_secs(10),
        }
    }
}

/// Runs the agent until the process is killed (or, with `once`, its session ends, and with
/// `drain`, it has drained).
///
/// A node that offers GPUs first checks that its workers could use them (the CUDA probe, see
/// `sys::cuda_probe`, run as this binary with this agent's environment, as its workers will be):
/// if not, it offers none and tells the head why, so that a driver asking for GPUs is refused
/// with this node's name and the cause instead of trials failing on it.
pub async fn run(mut config: NodeConfig) -> Result<()> {
    remove_dead_scratch(&scratch_root());
    let gpu_error = match config.spec.resources.gpu > 0.0 {
        true => check_gpus(&mut config.spec).await,
        false => None,
    };
    let mut previous: Option<u64> = None;
    let mut announced = false;
    loop {
        if draining(&config.drain) {
            return Ok(());
        }
        match session(&config, gpu_error.as_deref(), previous, &mut announced).await {
            Ok(id) if config.once || draining(&config.drain) => {
                tracing::info!("session {id} with the head {} ended", config.head);
                return Ok(());
            }
            Ok(id) => {
                previous = Some(id);
                tracing::warn!("session with the head {} ended; reconnecting", config.head);
            }
            Err(Error::Config { field, message }) => {
                return Err(Error::Config { field, message });
            }
            Err(e) => {
                if !announced {
                    tracing::warn!("cannot reach the head at {}: {e}; retrying", config.head);
                    announced = true;
                }
            }
        }
        tokio::time::sleep(config.retry).await;
    }
}

/// Whether this node's workers could use its GPUs: None if so; else why, and `spec` offers
/// none.
async fn check_gpus(spec: &mut NodeSpec) -> Option<String> {
    let gpus = spec.resources.gpu;
    let probe = tokio::task::spawn_blocking(|| match std::env::current_exe() {
        Ok(exe) => crate::sys::cuda_probe::Probe::run(&exe),
        Err(e) => {
            Err(crate::sys::cuda_probe::CudaError::Probe(format!("the current executable: {e}")))
        }
    });
    let answer = probe.await.unwrap_or_else(|e| {
        Err(crate::sys::cuda_probe::CudaError::Probe(format!("the probe's task failed: {e}")))
    });
    match answer {
        Ok(probe) => {
            tracing::info!("workers on this node get CUDA: {probe}");
            if (probe.devices.len() as f64) < gpus {
                tracing::warn!(
                    "this node offers {gpus} GPU(s) but its workers see {} device(s)",
                    probe.devices.len()
                );
            }
            None
        }
        Err(e) => {
            tracing::warn!(
                "this node's {gpus} GPU(s) are not offered: its workers cannot use them: {e}"
            );
            *spec = spec.clone().gpus(0);
            Some(e.to_string())
        }
    }
}

/// One session: register, then serve commands until the stream ends. Returns the node id.
async fn session(
    config: &NodeConfig,
    gpu_error: Option<&str>,
    previous: Option<u64>,
    announced: &mut bool,
) -> Result<u64> {
    // Asked to end before it joined: nothing runs here yet, so it ends at once.
    let mut drain = config.drain.clone();
    let (up, mut down, registered) = tokio::select! {
        joined = join(config, gpu_error, previous) => joined?,
        _ = changed(&mut drain) => {
            return Err(Error::Protocol("asked to end before joining the head".into()));
        }
    };
    let node_id = registered.node_id;
    tracing::info!("registered with the head {} as node {node_id}", config.head);
    *announced = false;
    let interval = Duration::from_millis(registered.heartbeat_interval_ms.max(50));
    let mut heartbeat = tokio::time::interval(interval);
    let (event_tx, mut events) = mpsc::unbounded_channel::<NodeMessage>();
    // Worker id → the sender that kills it.
    let mut running: HashMap<String, oneshot::Sender<()>> = HashMap::new();
    // Workers to start once their binary is here (at once when it is cached), and those whose
    // binary is still being fetched (a kill meanwhile ends them before they start).
    let (ready_tx, mut ready) = mpsc::unbounded_channel();
    let mut fetching = std::collections::HashSet::<String>::new();
    let mut killed_while_fetching = std::collections::HashSet::<String>::new();
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    loop {
        if drain_deadline.is_none() && draining(&drain) {
            tracing::info!("draining: {} worker(s) still running", running.len());
            drain_deadline = Some(tokio::time::Instant::now() + config.drain_grace);
        }
        if drain_deadline.is_some() && running.is_empty() && fetching.is_empty() {
            break;
        }
        let deadline = drain_deadline.unwrap_or_else(far_future);
        tokio::select! {
            _ = tokio::time::sleep_until(deadline), if drain_deadline.is_some() => {
                let left = running.len();
                tracing::warn!("{left} worker(s) still running after the drain grace: killing them");
                break;
            }
            _ = changed(&mut drain), if drain_deadline.is_none() => {}
            command = down.next() => match command {
                Some(Ok(HeadCommand { kind: Some(kind) })) => match kind {
                    head_command::Kind::Start(start) if drain_deadline.is_some() => {
                        let error = "the node agent is shutting down".to_owned();
                        tracing::warn!("not starting worker {}: {error}", start.worker_id);
                        let (worker_id, pg_id) = (start.worker_id, start.pg_id);
                        let exit = WorkerExit { worker_id, pg_id, code: -1, signal: 0, error };
                        let _ = up.send(exited(exit)).await;
                    }
                    head_command::Kind::Start(start) => {
                        if let Some(fetch) = ready_or_fetch(start, config, &ready_tx) {
                            fetching.insert(fetch);
                        }
                    }
                    head_command::Kind::Kill(kill) => {
                        if let Some(worker) = running.remove(&kill.worker_id) {
                            let _ = worker.send(());
                        }
                        if fetching.remove(&kill.worker_id) {
                            killed_while_fetching.insert(kill.worker_id);
                        }
                    }
                    head_command::Kind::Registered(_) => {}
                },
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
            Some((start, exe)) = ready.recv() => {
                let worker = start.worker_id.clone();
                fetching.remove(&worker);
                let killed = killed_while_fetching.remove(&worker);
                match start_ready(start, exe, killed, node_id, config, event_tx.clone()) {
                    Ok(kill) => { running.insert(worker, kill); }
                    Err((exit, e)) => {
                        tracing::warn!("{e}");
                        let _ = up.send(exited(exit)).await;
                    }
                }
            }
            Some(event) = events.recv() => {
                if let Some(node_message::Kind::Exited(exit)) = &event.kind {
                    running.remove(&exit.worker_id);
                }
                if up.send(event).await.is_err() {
                    break;
                }
            }
            _ = heartbeat.tick() => {
                let beat = Heartbeat {
                    running_workers: running.len() as u32,
                    gpus_json: gpu_usage_json(config.devices.as_deref()),
                };
                if up.send(NodeMessage { kind: Some(node_message::Kind::Heartbeat(beat)) }).await.is_err() {
                    break;
                }
            }
        }
    }
    // The head no longer counts on these workers: end them before rejoining clean.
    for (_, kill) in running.drain() {
        let _ = kill.send(());
    }
    Ok(node_id)
}

/// Registers with the head: the session's way up, its commands, and the acknowledgement.
async fn join(
    config: &NodeConfig,
    gpu_error: Option<&str>,
    previous: Option<u64>,
) -> Result<(mpsc::Sender<NodeMessage>, tonic::Streaming<HeadCommand>, Registered)> {
    let mut client = super::client::connect_head(&config.head, config.token.as_deref()).await?;
    let (up, up_rx) = mpsc::channel::<NodeMessage>(256);
    let resources_json =
        serde_json::to_string(&config.spec.resources).expect("resources serialise");
    let register = RegisterNode {
        address: config.spec.address.clone(),
        resources_json,
        previous_node_id: previous,
        version: crate::sys::build_id::hex(crate::sys::build_id::build_id()),
        gpu_error: gpu_error.unwrap_or_default().to_owned(),
    };
    up.send(NodeMessage { kind: Some(node_message::Kind::Register(register)) })
        .await
        .map_err(|_| Error::Protocol("session closed".into()))?;
    let mut down = client
        .node_session(ReceiverStream::new(up_rx))
        .await
        .map_err(super::client::status_error)?
        .into_inner();
    let first =
        down.next().await.ok_or_else(|| Error::Protocol("the head closed the session".into()))?;
    let Some(head_command::Kind::Registered(registered)) =
        first.map_err(super::client::status_error)?.kind
    else {
        return Err(Error::Protocol("the head did not acknowledge the registration".into()));
    };
    Ok((up, down, registered))
}

fn draining(drain: &Option<tokio::sync::watch::Receiver<bool>>) -> bool {
    drain.as_ref().is_some_and(|d| *d.borrow())
}

/// Resolves when `drain` changes (never without one, or once its sender is gone).
async fn changed(drain: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    let ok = match drain {
        Some(d) => d.changed().await.is_ok(),
        None => false,
    };
    if !ok {
        std::future::pending::<()>().await;
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

fn exited(exit: WorkerExit) -> NodeMessage {
    NodeMessage { kind: Some(node_message::Kind::Exited(exit)) }
}

/// Queues `start` on `ready` once its binary is here: at once when it is cached (or named by
/// path, by an older driver), else after a fetch from the head in the background; returns the
/// worker's id in that case.
fn ready_or_fetch(
    start: StartWorkerRequest,
    config: &NodeConfig,
    ready: &mpsc::UnboundedSender<(StartWorkerRequest, Result<Option<std::path::PathBuf>>)>,
) -> Option<String> {
    let sha = start.binary_sha256.clone();
    match super::binary::cached(&super::binary::cache_dir(), &sha) {
        _ if sha.is_empty() => drop(ready.send((start, Ok(None)))),
        Some(exe) => drop(ready.send((start, Ok(Some(exe))))),
        None => {
            let worker = start.worker_id.clone();
            let (ready, head, token) = (ready.clone(), config.head.clone(), config.token.clone());
            tokio::spawn(async move {
                let exe = super::binary::fetch(&head, token.as_deref(), &sha).await;
                let _ = ready.send((start, exe.map(Some)));
            });
            return Some(worker);
        }
    }
    None
}

/// Where node agents give their workers scratch folders: one folder per agent process,
/// `<cache>/runs/<pid>-<start time>`, holding one per worker.
fn scratch_root() -> std::path::PathBuf {
    crate::config::cache_root().join("runs")
}

/// This agent's folder of scratch folders.
fn own_scratch() -> std::path::PathBuf {
    let pid = std::process::id();
    let start = crate::sys::process_start(pid).unwrap_or_default();
    scratch_root().join(format!("{pid}-{start}"))
}

/// Removes the scratch folders of agents no longer running (one SIGKILLed leaves its workers'
/// folders: its workers died with it) from `root`; those of agents alive (sharing this cache)
/// stay. What cannot be removed is left.
pub(crate) fn remove_dead_scratch(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name
            .split_once('-')
            .and_then(|(pid, start)| Some((pid.parse::<u32>().ok()?, start.parse::<u64>().ok()?)));
        let alive = owner.is_some_and(|(pid, start)| crate::sys::process_start(pid) == Some(start));
        if !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
            tracing::info!("removed {}: scratch folders of a node agent that is gone", name);
        }
    }
}

/// Starts a worker whose binary is here (`exe`, or why it could not be fetched), unless it was
/// `killed` while it was being fetched.
fn start_ready(
    start: StartWorkerRequest,
    exe: Result<Option<std::path::PathBuf>>,
    killed: bool,
    node_id: u64,
    config: &NodeConfig,
    events: mpsc::UnboundedSender<NodeMessage>,
) -> std::result::Result<oneshot::Sender<()>, (WorkerExit, String)> {
    let (worker_id, pg_id) = (start.worker_id.clone(), start.pg_id);
    let exit = |signal, error: String| WorkerExit { worker_id, pg_id, code: -1, signal, error };
    match exe {
        _ if killed => {
            let why = format!("worker {} was killed before it started", start.worker_id);
            Err((exit(libc::SIGKILL, String::new()), why))
        }
        Ok(exe) => spawn(start, exe, node_id, config, events),
        Err(e) => {
            let error = format!("cannot fetch the driver's binary from the head: {e}");
            Err((exit(0, error.clone()), error))
        }
    }
}

/// Starts one worker process from `exe` (the driver's binary cached here; None: by the path
/// the driver named): forked by that binary's fork server (see `sys::zygote`) unless warm
/// starts are off, else with exec. Its output and then its exit go up the session through
/// `events`.
fn spawn(
    start: StartWorkerRequest,
    exe: Option<std::path::PathBuf>,
    node_id: u64,
    config: &NodeConfig,
    events: mpsc::UnboundedSender<NodeMessage>,
) -> std::result::Result<oneshot::Sender<()>, (WorkerExit, String)> {
    let warm = start.env.get(zygote::WARM_START_ENV).is_none_or(|v| v != "0");
    let mut env: Vec<(String, String)> = start.env.into_iter().collect();
    env.push(("RTUNE_NODE_ID".to_owned(), node_id.to_string()));
    // The worker's own folder on this node, gone with it (see `config::SCRATCH_ENV`).
    let scratch = own_scratch().join(&start.worker_id);
    env.push((crate::config::SCRATCH_ENV.to_owned(), scratch.display().to_string()));
    if let Some(devices) = &config.devices
        && let Some((_, indices)) = env.iter_mut().find(|(k, _)| k == CUDA_VISIBLE_DEVICES)
    {
        *indices = super::map_devices(indices, devices);
    }
    let worker = Worker {
        id: start.worker_id,
        pg_id: start.pg_id,
        exe: exe.unwrap_or_else(|| start.executable.into()),
        env,
        scratch,
        ignore_sigterm: config.workers_ignore_sigterm,
    };
    if warm && zygote::warm_start_allowed() {
        return Ok(spawn_forked(worker, events));
    }
    spawn_exec(worker, events)
}

/// A worker to start on this node.
struct Worker {
    id: String,
    pg_id: u64,
    exe: std::path::PathBuf,
    /// Set on top of the agent's environment.
    env: Vec<(String, String)>,
    scratch: std::path::PathBuf,
    ignore_sigterm: bool,
}

impl Worker {
    fn exit(&self, code: i32, signal: i32, error: String) -> WorkerExit {
        WorkerExit { worker_id: self.id.clone(), pg_id: self.pg_id, code, signal, error }
    }

    /// What to do at its exit: remove its scratch folder, drop `keep`, and once its output is
    /// drained (the readers sent on `drained`), send its exit up, so the driver gets every line
    /// first.
    fn on_exit(
        &self,
        keep: impl Send + 'static,
        drained: oneshot::Receiver<Vec<tokio::task::JoinHandle<()>>>,
        events: mpsc::UnboundedSender<NodeMessage>,
    ) -> impl FnOnce(std::io::Result<std::process::ExitStatus>) + Send + 'static {
        let (scratch, gone) = (self.scratch.clone(), self.exit(-1, 0, String::new()));
        move |status| {
            if scratch.exists() {
                let _ = std::fs::remove_dir_all(&scratch);
            }
            drop(keep);
            let exit = match status {
                Ok(s) => WorkerExit {
                    code: s.code().unwrap_or(-1),
                    signal: s.signal().unwrap_or(0),
                    ..gone
                },
                Err(e) => WorkerExit { error: e.to_string(), ..gone },
            };
            tokio::spawn(async move {
                for reader in drained.await.unwrap_or_default() {
                    let _ = reader.await;
                }
                let _ = events.send(exited(exit));
            });
        }
    }
}

/// Starts `worker` with exec.
fn spawn_exec(
    worker: Worker,
    events: mpsc::UnboundedSender<NodeMessage>,
) -> std::result::Result<oneshot::Sender<()>, (WorkerExit, String)> {
    let mut command = std::process::Command::new(&worker.exe);
    command
        .envs(worker.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if worker.ignore_sigterm {
        use std::os::unix::process::CommandExt;
        // SAFETY: signal() is async-signal-safe. An ignored signal stays ignored across exec.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    let (drained_tx, drained) = oneshot::channel();
    let on_exit = worker.on_exit((), drained, events.clone());
    let supervised = crate::sys::spawn_supervised(command, on_exit).map_err(|e| {
        let error = format!("cannot start {}: {e}", worker.exe.display());
        (worker.exit(-1, 0, error.clone()), error)
    })?;
    let mut readers = Vec::new();
    if let Some(out) = supervised.stdout {
        readers.push(stream_output(out, false, worker.id.clone(), worker.pg_id, events.clone()));
    }
    if let Some(err) = supervised.stderr {
        readers.push(stream_output(err, true, worker.id.clone(), worker.pg_id, events));
    }
    let _ = drained_tx.send(readers);
    tracing::info!("started worker {} of placement group {}", worker.id, worker.pg_id);
    Ok(supervised.kill)
}

/// Starts `worker` forked by its binary's fork server; if that fails, with exec (as every later
/// worker of this agent is). The sender returned kills it when sent or dropped, from the start:
/// the fork server answers in the background.
fn spawn_forked(worker: Worker, events: mpsc::UnboundedSender<NodeMessage>) -> oneshot::Sender<()> {
    use tracing::Instrument;
    let (kill, killed) = oneshot::channel::<()>();
    let starting = async move {
        let started = match fork(&worker, &events).await {
            Ok(kill) => Ok(kill),
            Err(e) => {
                zygote::give_up(&e);
                spawn_exec(worker, events.clone())
            }
        };
        match started {
            Ok(kill) => {
                let _ = killed.await;
                let _ = kill.send(());
            }
            Err((exit, e)) => {
                tracing::warn!("{e}");
                let _ = events.send(exited(exit));
            }
        }
    };
    // In the agent's span, as its other lines are (a Slurm job's output names the node so).
    tokio::spawn(starting.instrument(tracing::Span::current()));
    kill
}

/// Forks `worker` from the fork server of its binary. A forked process cannot be handed the
/// agent's pipes, so its stdout and stderr are two FIFOs in the agent's scratch folder, read
/// as pipes are. The agent holds a writing end of each until the worker exits, so that they
/// end (the readers see their end) only once the worker's output is all read, whenever it
/// opened them.
async fn fork(
    worker: &Worker,
    events: &mpsc::UnboundedSender<NodeMessage>,
) -> std::io::Result<oneshot::Sender<()>> {
    let fifos = own_scratch().join(".fifos").join(worker.id.replace('/', "_"));
    std::fs::create_dir_all(&fifos)?;
    let (out, err) = (fifos.join("stdout"), fifos.join("stderr"));
    let folder = FifoDir(fifos);
    let (mut readers, mut ends) = (Vec::new(), Vec::new());
    for (path, stderr) in [(&out, false), (&err, true)] {
        crate::sys::make_fifo(path)?;
        readers.push((tokio::net::unix::pipe::OpenOptions::new().open_receiver(path)?, stderr));
        ends.push(crate::sys::open_fifo_writer(path)?);
    }
    let keep = (ends, folder);
    let (drained_tx, drained) = oneshot::channel();
    let on_exit = worker.on_exit(keep, drained, events.clone());
    let start = zygote::WarmStart {
        env: worker.env.clone(),
        stdout: &out,
        stderr: &err,
        ignore_sigterm: worker.ignore_sigterm,
    };
    let kill = zygote::spawn_warm(&worker.exe, start, on_exit).await?;
    let streams = readers
        .into_iter()
        .map(|(r, stderr)| {
            stream_output(r, stderr, worker.id.clone(), worker.pg_id, events.clone())
        })
        .collect();
    let _ = drained_tx.send(streams);
    tracing::info!("started worker {} of placement group {} (forked)", worker.id, worker.pg_id);
    Ok(kill)
}

/// A worker's FIFO folder, removed when dropped.
struct FifoDir(std::path::PathBuf);

impl Drop for FifoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// What this node's GPUs are doing (those of `devices`, when the agent has a list), for a
/// heartbeat: NVML's figures as JSON, empty where there is no NVML.
fn gpu_usage_json(devices: Option<&[String]>) -> String {
    let Some(mut gpus) = crate::sys::nvml::usage() else { return String::new() };
    if let Some(devices) = devices {
        gpus.retain(|g| g.named_in(devices));
    }
    if gpus.is_empty() { String::new() } else { serde_json::to_string(&gpus).unwrap_or_default() }
}

/// Sends a worker's output up the session in chunks of at most 64 KiB, until it closes.
fn stream_output(
    mut output: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    stderr: bool,
    worker_id: String,
    pg_id: u64,
    events: mpsc::UnboundedSender<NodeMessage>,
) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncReadExt;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = output.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let log =
                WorkerLog { worker_id: worker_id.clone(), pg_id, stderr, data: buf[..n].to_vec() };
            if events.send(NodeMessage { kind: Some(node_message::Kind::Log(log)) }).is_err() {
                break;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    /// A SIGKILLed agent's scratch folders go when an agent starts; those of a live agent
    /// (here, this process) stay, and so does a folder of a pid the kernel gave to another
    /// process since (its start time differs).
    #[test]
    fn dead_agents_scratch_folders_go() {
        let root = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id();
        let start = crate::sys::process_start(pid).unwrap();
        let dead = root.path().join(format!("{pid}-{start}"));
        std::fs::create_dir_all(dead.join("worker-1")).unwrap();
        std::fs::write(dead.join("worker-1/checkpoint.bin"), b"x").unwrap();
        let me = std::process::id();
        let live = root.path().join(format!("{me}-{}", crate::sys::process_start(me).unwrap()));
        std::fs::create_dir_all(live.join("worker-2")).unwrap();
        let reused = root.path().join(format!("{me}-1"));
        std::fs::create_dir_all(&reused).unwrap();
        super::remove_dead_scratch(root.path());
        assert!(dead.exists() && live.exists(), "the agent is alive: its folder stays");
        child.kill().unwrap();
        child.wait().unwrap();
        super::remove_dead_scratch(root.path());
        assert!(!dead.exists() && !reused.exists());
        assert!(live.join("worker-2").exists());
    }
}
