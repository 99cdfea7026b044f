//! The driver side of one attempt of a worker group: spawn N worker processes, answer their
//! joins and reports, watch them exit, and end the attempt as one unit.
//!
//! One owner: `run_attempt` owns all of the attempt's state and is the only code that touches
//! it; the hub forwards worker calls here and a task per child forwards its exit. The attempt
//! fails as soon as any worker fails (error, panic, signal, or exiting without finishing): the
//! others are killed at once (they may be blocked in a collective with the dead one) and the
//! attempt returns when every process is gone, so no worker outlives its attempt.
//!
//! Processes are spawned from the thread that runs this future; each gets
//! `PR_SET_PDEATHSIG = SIGKILL`, so workers die with their driver instead of being orphaned.

use std::fs::OpenOptions;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::error::{Error, IoContext, Result};
use crate::outcome::WorkerFailure;
use crate::proto::{FinishRequest, JoinReply, JoinRequest, ReportReply, ReportRequest};
use crate::sys::build_id;
use crate::worker::hub::{Hub, HubCall, Reply};
use crate::worker::{WORKER_ENV, WorkerSpec};

/// Where one rank runs.
#[derive(Debug, Clone)]
pub(crate) struct RankPlacement {
    /// `CUDA_VISIBLE_DEVICES` for a GPU worker, None for a CPU worker.
    pub cuda_visible_devices: Option<String>,
    /// Host its collective listener binds (its node's address).
    pub bind_host: String,
    pub node_rank: u32,
    pub local_rank: u32,
    pub local_world_size: u32,
}

impl RankPlacement {
    /// Ranks placed on `nodes[rank]` (any comparable node key): node ranks in order of first
    /// appearance, local ranks in rank order within a node.
    pub fn from_nodes<K: PartialEq + Copy>(
        nodes: &[K],
        hosts: &[String],
        devices: &[Option<String>],
    ) -> Vec<RankPlacement> {
        let mut distinct: Vec<K> = Vec::new();
        for &n in nodes {
            if !distinct.contains(&n) {
                distinct.push(n);
            }
        }
        nodes
            .iter()
            .enumerate()
            .map(|(rank, n)| RankPlacement {
                cuda_visible_devices: devices.get(rank).cloned().flatten(),
                bind_host: hosts.get(rank).cloned().unwrap_or_else(|| "127.0.0.1".into()),
                node_rank: distinct.iter().position(|d| d == n).unwrap_or(0) as u32,
                local_rank: nodes[..rank].iter().filter(|m| *m == n).count() as u32,
                local_world_size: nodes.iter().filter(|m| *m == n).count() as u32,
            })
            .collect()
    }
}

/// How an attempt starts its processes.
#[derive(Clone)]
pub(crate) enum Launcher {
    /// Child processes of the driver.
    Local,
    /// Through the head, on the nodes of a reserved placement group.
    Cluster { client: Box<crate::cluster::client::Client>, pg: crate::cluster::pool::PgId },
}

/// How a worker process ended, as the attempt sees it.
#[derive(Debug)]
pub(crate) enum Exit {
    Status(ExitStatus),
    /// Never started, could not be waited for, or lost with its node.
    Lost(String),
}

type ExitTx = mpsc::UnboundedSender<(usize, Exit)>;

/// Everything one attempt needs.
#[derive(Clone)]
pub(crate) struct AttemptSpec {
    pub group: String,
    pub attempt: u32,
    pub train_fn: i64,
    pub params_json: String,
    pub run_dir: PathBuf,
    pub resume: Option<PathBuf>,
    pub start_iteration: u64,
    pub num_threads: u32,
    pub ranks: Vec<RankPlacement>,
    pub launcher: Launcher,
    pub collective_timeout: Duration,
    pub start_timeout: Duration,
}

/// A report that every rank has made: rank 0's metrics and checkpoint.
#[derive(Debug)]
pub(crate) struct GroupReport {
    /// `training_iteration` of this report (counting iterations before a resume).
    pub iteration: u64,
    pub metrics_json: String,
    pub checkpoint: String,
}

#[derive(Debug)]
pub(crate) enum AttemptOutcome {
    /// Every worker finished (perhaps because a report asked them to stop).
    Completed {
        train_seconds: f64,
    },
    Failed(WorkerFailure),
}

/// Decides each complete report: Ok(true) asks the run to stop; Err fails the attempt.
pub(crate) type OnReport<'a> = dyn FnMut(GroupReport) -> Result<bool> + 'a;

/// Where a rank stands in the rendezvous.
enum Join {
    NotYet,
    /// Joined; its reply waits until every rank has joined.
    Waiting(JoinRequest, Reply<JoinReply>),
    /// Answered (or refused because the attempt failed).
    Done,
}

struct Worker {
    join: Join,
    reports: u64,
    finish: Option<FinishRequest>,
    exited: bool,
    kill: Option<oneshot::Sender<()>>,
}

/// Runs one attempt to its end.
pub(crate) async fn run_attempt(
    hub: &Hub,
    spec: &AttemptSpec,
    on_report: &mut OnReport<'_>,
) -> Result<AttemptOutcome> {
    let mut calls = hub.register(&spec.group);
    let (exit_tx, mut exits) = mpsc::unbounded_channel::<(usize, Exit)>();
    let mut workers = Vec::with_capacity(spec.ranks.len());
    if let Launcher::Cluster { client, pg } = &spec.launcher {
        // Watch before starting anything, so no exit is missed.
        match crate::cluster::client::watch(&mut (**client).clone(), *pg).await {
            Ok(stream) => forward_cluster_exits(stream, spec, exit_tx.clone()),
            Err(e) => {
                hub.unregister(&spec.group);
                return Err(e);
            }
        }
    }
    for rank in 0..spec.ranks.len() {
        let started = match &spec.launcher {
            Launcher::Local => spawn_local(hub, spec, rank, exit_tx.clone()),
            Launcher::Cluster { client, pg } => {
                spawn_remote(hub, spec, rank, (**client).clone(), *pg).await
            }
        };
        match started {
            Ok(kill) => workers.push(Worker {
                join: Join::NotYet,
                reports: 0,
                finish: None,
                exited: false,
                kill: Some(kill),
            }),
            Err(e) => {
                kill_all(&mut workers);
                drain_exits(workers.len(), &mut exits).await;
                hub.unregister(&spec.group);
                return Err(e);
            }
        }
    }
    drop(exit_tx);

    let mut state = Attempt { spec, workers, pending: Vec::new(), failure: None, stopped: false };
    let deadline = tokio::time::Instant::now() + spec.start_timeout;
    while !state.all_exited() {
        let joining =
            state.failure.is_none() && state.workers.iter().any(|w| matches!(w.join, Join::NotYet));
        tokio::select! {
            Some(call) = calls.recv() => state.on_call(call, on_report),
            Some((rank, status)) = exits.recv() => state.on_exit(rank, status),
            _ = tokio::time::sleep_until(deadline), if joining => {
                let rank = state.workers.iter().position(|w| matches!(w.join, Join::NotYet)).unwrap_or(0);
                state.fail(rank, format!(
                    "did not join within {:?} (see logs/rank_{rank}.stderr in the run directory)",
                    spec.start_timeout
                ), None);
            }
        }
    }
    hub.unregister(&spec.group);
    // Answer calls that raced with the end, so no worker waits on a dropped group.
    calls.close();
    while let Ok(call) = calls.try_recv() {
        refuse(call, Status::aborted("the attempt has ended"));
    }
    let train_seconds =
        state.workers.first().and_then(|w| w.finish.as_ref()).map_or(0.0, |f| f.train_seconds);
    Ok(match state.failure {
        Some(failure) => AttemptOutcome::Failed(failure),
        None => AttemptOutcome::Completed { train_seconds },
    })
}

struct Attempt<'s> {
    spec: &'s AttemptSpec,
    workers: Vec<Worker>,
    /// Reports waiting for the other ranks: (rank, request, reply), for the lowest open seq.
    pending: Vec<(usize, ReportRequest, Reply<ReportReply>)>,
    failure: Option<WorkerFailure>,
    stopped: bool,
}

impl Attempt<'_> {
    fn all_exited(&self) -> bool {
        self.workers.iter().all(|w| w.exited)
    }

    fn fail(&mut self, rank: usize, message: String, status: Option<ExitStatus>) {
        if self.failure.is_none() {
            self.failure = Some(WorkerFailure {
                attempt: self.spec.attempt,
                rank,
                message,
                signal: status.and_then(|s| s.signal()),
                exit_code: status.and_then(|s| s.code()),
            });
        }
        for (_, _, reply) in self.pending.drain(..) {
            let _ = reply.send(Err(Status::aborted("another rank failed")));
        }
        // Dropping the replies of joins still waiting makes those workers' calls fail.
        for w in &mut self.workers {
            if matches!(w.join, Join::Waiting(..)) {
                w.join = Join::Done;
            }
        }
        kill_all(&mut self.workers);
    }

    fn rank_of(&self, key: Option<&crate::proto::WorkerKey>) -> std::result::Result<usize, Status> {
        let key = key.ok_or_else(|| Status::invalid_argument("missing worker key"))?;
        if key.attempt != self.spec.attempt {
            return Err(Status::failed_precondition(format!(
                "attempt {} has ended (now {})",
                key.attempt, self.spec.attempt
            )));
        }
        let rank = key.rank as usize;
        if rank >= self.workers.len() {
            return Err(Status::invalid_argument(format!("no rank {rank}")));
        }
        if self.failure.is_some() {
            return Err(Status::aborted("the attempt is failing"));
        }
        Ok(rank)
    }

    fn on_call(&mut self, call: HubCall, on_report: &mut OnReport<'_>) {
        match call {
            HubCall::Join(request, reply) => match self.rank_of(request.key.as_ref()) {
                Ok(rank) => self.on_join(rank, request, reply),
                Err(status) => drop(reply.send(Err(status))),
            },
            HubCall::Report(request, reply) => match self.rank_of(request.key.as_ref()) {
                Ok(rank) => self.on_report(rank, request, reply, on_report),
                Err(status) => drop(reply.send(Err(status))),
            },
            HubCall::Finish(request, reply) => {
                let _ = reply.send(Ok(Default::default()));
                let rank = request.key.as_ref().map_or(0, |k| k.rank as usize);
                if rank < self.workers.len()
                    && request.key.as_ref().is_some_and(|k| k.attempt == self.spec.attempt)
                {
                    self.on_finish(rank, request);
                }
            }
        }
    }

    fn on_join(&mut self, rank: usize, request: JoinRequest, reply: Reply<JoinReply>) {
        if request.build_id != build_id::build_id() {
            let message = format!(
                "worker binary differs from the driver's (build id {} vs driver {}); \
                 the executable was rebuilt or replaced while running: restart the driver",
                build_id::hex(&request.build_id),
                build_id::hex(build_id::build_id())
            );
            let _ = reply.send(Err(Status::failed_precondition(message.clone())));
            self.fail(rank, message, None);
            return;
        }
        self.workers[rank].join = Join::Waiting(request, reply);
        if self.workers.iter().any(|w| matches!(w.join, Join::NotYet)) {
            return;
        }
        let peers: Vec<String> = self
            .workers
            .iter()
            .map(|w| match &w.join {
                Join::Waiting(request, _) => request.collective_address.clone(),
                _ => String::new(),
            })
            .collect();
        let group_id = rand::random::<u64>();
        let world = self.workers.len() as u32;
        for (rank, w) in self.workers.iter_mut().enumerate() {
            let Join::Waiting(_, reply) = std::mem::replace(&mut w.join, Join::Done) else {
                continue;
            };
            let placed = &self.spec.ranks[rank];
            let device = if placed.cuda_visible_devices.is_some() { "cuda:0" } else { "cpu" };
            let _ = reply.send(Ok(JoinReply {
                peers: peers.clone(),
                world_size: world,
                local_rank: placed.local_rank,
                local_world_size: placed.local_world_size,
                node_rank: placed.node_rank,
                params_json: self.spec.params_json.clone(),
                run_dir: self.spec.run_dir.display().to_string(),
                resume_checkpoint: self
                    .spec
                    .resume
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                start_iteration: self.spec.start_iteration,
                collective_group_id: group_id,
                collective_timeout_ms: self.spec.collective_timeout.as_millis() as u64,
                device: device.to_owned(),
                num_threads: self.spec.num_threads,
            }));
        }
    }

    fn on_report(
        &mut self,
        rank: usize,
        request: ReportRequest,
        reply: Reply<ReportReply>,
        on_report: &mut OnReport<'_>,
    ) {
        let expected = self.workers[rank].reports + 1;
        if request.seq != expected {
            let message = format!("sent report {} but report {expected} was due", request.seq);
            let _ = reply.send(Err(Status::invalid_argument(message.clone())));
            self.fail(rank, message, None);
            return;
        }
        self.workers[rank].reports = expected;
        self.pending.push((rank, request, reply));
        if self.pending.len() < self.workers.len() {
            return;
        }
        // Every rank has made report `expected`: rank 0's is the run's.
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|(rank, ..)| *rank);
        let first = &pending[0].1;
        let report = GroupReport {
            iteration: self.spec.start_iteration + expected,
            metrics_json: first.metrics_json.clone(),
            checkpoint: first.checkpoint.clone(),
        };
        match on_report(report) {
            Ok(stop) => {
                self.stopped |= stop;
                let iteration = self.spec.start_iteration + expected;
                for (_, _, reply) in pending {
                    let _ = reply.send(Ok(ReportReply { stop, training_iteration: iteration }));
                }
            }
            Err(e) => {
                let message = format!("driver could not record report {expected}: {e}");
                self.fail(0, message, None);
            }
        }
    }

    fn on_finish(&mut self, rank: usize, request: FinishRequest) {
        let (ok, error) = (request.ok, request.error.clone());
        let reports = self.workers[rank].reports;
        self.workers[rank].finish = Some(request);
        if !ok {
            self.fail(rank, error, None);
        } else if let Some(max) = self.workers.iter().map(|w| w.reports).max()
            && max > reports
            && !self.stopped
        {
            self.fail(
                rank,
                format!(
                    "returned after {reports} reports while another rank made {max}; \
                     every rank must call report the same number of times"
                ),
                None,
            );
        }
    }

    fn on_exit(&mut self, rank: usize, exit: Exit) {
        let Some(worker) = self.workers.get(rank) else { return };
        if worker.exited {
            return;
        }
        let status = match exit {
            Exit::Status(status) => status,
            Exit::Lost(why) => {
                self.workers[rank].exited = true;
                self.workers[rank].kill = None;
                self.fail(rank, why, None);
                return;
            }
        };
        self.workers[rank].exited = true;
        self.workers[rank].kill = None;
        let finished_ok = self.workers[rank].finish.as_ref().is_some_and(|f| f.ok);
        if status.success() && finished_ok {
            return;
        }
        let message = match (status.signal(), &self.workers[rank].finish) {
            (_, Some(finish)) if !finish.ok => finish.error.clone(),
            (Some(signal), _) => format!("killed by signal {signal} ({})", signal_name(signal)),
            (None, _) if status.success() => {
                "exited without finishing (did the train function call process::exit?)".into()
            }
            (None, _) => format!(
                "exited with code {} (see logs/rank_{rank}.stderr in the run directory)",
                status.code().unwrap_or(-1)
            ),
        };
        self.fail(rank, message, Some(status));
    }
}

fn refuse(call: HubCall, status: Status) {
    match call {
        HubCall::Join(_, reply) => drop(reply.send(Err(status))),
        HubCall::Report(_, reply) => drop(reply.send(Err(status))),
        HubCall::Finish(_, reply) => drop(reply.send(Ok(Default::default()))),
    }
}

fn kill_all(workers: &mut [Worker]) {
    for w in workers {
        if let Some(kill) = w.kill.take() {
            let _ = kill.send(());
        }
    }
}

async fn drain_exits(started: usize, exits: &mut mpsc::UnboundedReceiver<(usize, Exit)>) {
    let mut left = started;
    while left > 0 && exits.recv().await.is_some() {
        left -= 1;
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

/// The `RTUNE_WORKER` spec and environment of rank `rank`.
fn worker_env(hub: &Hub, spec: &AttemptSpec, rank: usize) -> Vec<(String, String)> {
    let worker = WorkerSpec {
        hub: hub.url(),
        group: spec.group.clone(),
        attempt: spec.attempt,
        rank: rank as u32,
        train_fn: spec.train_fn,
        build_id: build_id::hex(build_id::build_id()),
        bind_host: spec.ranks[rank].bind_host.clone(),
    };
    let mut env = vec![
        (WORKER_ENV.to_owned(), serde_json::to_string(&worker).expect("spec serialises")),
        ("OMP_NUM_THREADS".to_owned(), spec.num_threads.to_string()),
    ];
    if let Some(devices) = &spec.ranks[rank].cuda_visible_devices {
        env.push(("CUDA_VISIBLE_DEVICES".to_owned(), devices.clone()));
    }
    if let Some(token) = hub.token() {
        env.push((crate::worker::hub::HUB_TOKEN_ENV.to_owned(), token.to_owned()));
    }
    env
}

fn log_path(spec: &AttemptSpec, rank: usize, stream: &str) -> PathBuf {
    spec.run_dir.join("logs").join(format!("rank_{rank}.{stream}"))
}

/// Starts rank `rank` as a child of the driver; returns the sender that kills it.
fn spawn_local(
    hub: &Hub,
    spec: &AttemptSpec,
    rank: usize,
    exits: ExitTx,
) -> Result<oneshot::Sender<()>> {
    let logs = spec.run_dir.join("logs");
    std::fs::create_dir_all(&logs).at(&logs)?;
    let log = |stream: &str| {
        let path = log_path(spec, rank, stream);
        OpenOptions::new().create(true).append(true).open(&path).at(&path)
    };
    let (stdout, stderr) = (log("stdout")?, log("stderr")?);
    let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
    let mut command = std::process::Command::new(&exe);
    command.envs(worker_env(hub, spec, rank)).stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    crate::sys::spawn_supervised(command, move |status| {
        let exit = match status {
            Ok(status) => Exit::Status(status),
            Err(e) => Exit::Lost(format!("could not wait for the process: {e}")),
        };
        let _ = exits.send((rank, exit));
    })
    .map(|supervised| supervised.kill)
    .map_err(|e| Error::Worker(format!("cannot start worker {}: {e}", exe.display())))
}

fn remote_worker_id(spec: &AttemptSpec, rank: usize) -> String {
    format!("{}/{}/{rank}", spec.group, spec.attempt)
}

/// Starts rank `rank` on the node its bundle was placed on, through the head.
async fn spawn_remote(
    hub: &Hub,
    spec: &AttemptSpec,
    rank: usize,
    mut client: crate::cluster::client::Client,
    pg: crate::cluster::pool::PgId,
) -> Result<oneshot::Sender<()>> {
    let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
    let worker_id = remote_worker_id(spec, rank);
    let request = crate::proto::StartWorkerRequest {
        worker_id: worker_id.clone(),
        pg_id: pg.0,
        bundle: rank as u32,
        executable: exe.display().to_string(),
        build_id: build_id::hex(build_id::build_id()),
        env: worker_env(hub, spec, rank).into_iter().collect(),
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

/// Turns the head's event stream into the attempt's exits (worker id → rank), appending the
/// workers' output to `logs/rank_N.{stdout,stderr}` in the run directory as it arrives.
fn forward_cluster_exits(
    mut stream: tonic::Streaming<crate::proto::WorkerEvent>,
    spec: &AttemptSpec,
    exits: ExitTx,
) {
    use crate::proto::worker_event::Kind;
    use std::io::Write;

    let ids: Vec<String> = (0..spec.ranks.len()).map(|r| remote_worker_id(spec, r)).collect();
    let logs: Vec<[PathBuf; 2]> = (0..spec.ranks.len())
        .map(|r| [log_path(spec, r, "stdout"), log_path(spec, r, "stderr")])
        .collect();
    tokio::spawn(async move {
        loop {
            let kind = match stream.message().await {
                Ok(Some(event)) => event.kind,
                Ok(None) | Err(_) => {
                    // The head went away: every worker still counted is lost to us.
                    for rank in 0..ids.len() {
                        let _ = exits.send((rank, Exit::Lost("lost contact with the head".into())));
                    }
                    return;
                }
            };
            match kind {
                Some(Kind::Log(log)) => {
                    let Some(rank) = ids.iter().position(|id| *id == log.worker_id) else {
                        continue;
                    };
                    let path = &logs[rank][usize::from(log.stderr)];
                    let written =
                        path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
                            OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(path)?
                                .write_all(&log.data)
                        });
                    if let Err(e) = written {
                        eprintln!("rtune: cannot write {}: {e}", path.display());
                    }
                }
                Some(Kind::Exit(event)) => {
                    let Some(rank) = ids.iter().position(|id| *id == event.worker_id) else {
                        continue;
                    };
                    let exit = if !event.error.is_empty() {
                        Exit::Lost(event.error)
                    } else if event.signal != 0 {
                        Exit::Status(ExitStatus::from_raw(event.signal))
                    } else {
                        Exit::Status(ExitStatus::from_raw((event.code & 0xff) << 8))
                    };
                    if exits.send((rank, exit)).is_err() {
                        return;
                    }
                }
                None => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::WorkerKey;

    fn spec(world: usize) -> AttemptSpec {
        let nodes = vec![0u64; world];
        AttemptSpec {
            group: "g".into(),
            attempt: 0,
            train_fn: 0,
            params_json: "{}".into(),
            run_dir: PathBuf::from("/nonexistent"),
            resume: None,
            start_iteration: 0,
            num_threads: 1,
            ranks: RankPlacement::from_nodes(&nodes, &[], &[]),
            launcher: Launcher::Local,
            collective_timeout: Duration::from_secs(1),
            start_timeout: Duration::from_secs(1),
        }
    }

    fn two_workers(spec: &AttemptSpec) -> Attempt<'_> {
        let worker =
            || Worker { join: Join::NotYet, reports: 0, finish: None, exited: false, kill: None };
        Attempt {
            spec,
            workers: vec![worker(), worker()],
            pending: Vec::new(),
            failure: None,
            stopped: false,
        }
    }

    fn join(
        rank: u32,
        build_id: Vec<u8>,
    ) -> (JoinRequest, oneshot::Receiver<std::result::Result<JoinReply, Status>>, Reply<JoinReply>)
    {
        let (tx, rx) = oneshot::channel();
        let request = JoinRequest {
            key: Some(WorkerKey { group: "g".into(), attempt: 0, rank }),
            build_id,
            pid: 1,
            collective_address: format!("127.0.0.1:{}", 1000 + rank),
            hostname: String::new(),
        };
        (request, rx, tx)
    }

    #[test]
    fn a_worker_from_another_binary_is_refused_and_fails_the_attempt() {
        let spec = spec(2);
        let mut attempt = two_workers(&spec);
        let (request, mut answer, reply) = join(1, vec![0xde, 0xad]);
        attempt.on_join(1, request, reply);
        let status = answer.try_recv().expect("answered").expect_err("refused");
        assert!(status.message().contains("differs from the driver's"), "{}", status.message());
        let failure = attempt.failure.expect("the attempt fails");
        assert_eq!(failure.rank, 1);
        assert!(failure.message.contains("build id dead"), "{}", failure.message);
    }

    #[test]
    fn joins_are_answered_together_with_every_peer() {
        let spec = spec(2);
        let mut attempt = two_workers(&spec);
        let (r0, mut a0, t0) = join(0, build_id::build_id().to_vec());
        attempt.on_join(0, r0, t0);
        assert!(a0.try_recv().is_err(), "rank 0 waits for rank 1");
        let (r1, mut a1, t1) = join(1, build_id::build_id().to_vec());
        attempt.on_join(1, r1, t1);
        let (x, y) = (a0.try_recv().unwrap().unwrap(), a1.try_recv().unwrap().unwrap());
        assert_eq!(x.peers, vec!["127.0.0.1:1000", "127.0.0.1:1001"]);
        assert_eq!(x.peers, y.peers);
        assert_eq!(x.collective_group_id, y.collective_group_id);
        assert_eq!((y.local_rank, y.local_world_size, y.node_rank), (1, 2, 0));
        assert!(attempt.failure.is_none());
    }

    #[test]
    fn ranks_on_nodes_get_node_and_local_ranks() {
        let hosts: Vec<String> = ["a", "b", "a", "b"].iter().map(|s| s.to_string()).collect();
        let ranks = RankPlacement::from_nodes(&[7u64, 3, 7, 3], &hosts, &[]);
        let got: Vec<(u32, u32, u32)> =
            ranks.iter().map(|r| (r.node_rank, r.local_rank, r.local_world_size)).collect();
        assert_eq!(got, vec![(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2)]);
        assert_eq!(ranks[1].bind_host, "b");
    }
}
