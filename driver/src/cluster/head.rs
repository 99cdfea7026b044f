//! The head: serves `rtune.v1.Head`, owning the cluster's resource pool.
//!
//! One task owns all cluster state (`HeadState`: the pool, node sessions, workers, watchers,
//! driver leases); the gRPC service forwards each call to it as a message, with a reply slot.
//!
//! * **Releases wait for exits.** A group's resources go back to the pool only once every
//!   worker it started has exited: releasing kills them first. So a CPU or GPU is never handed
//!   to a new group while an old worker still runs on it.
//! * **Node liveness.** A node whose session ends, or that sends nothing for longer than the
//!   heartbeat timeout, is dead: its resources leave the pool, every worker it ran is reported
//!   lost to the drivers watching it (which fail over under their `FailureConfig`), and each
//!   placement group with a bundle on it is released as above: its surviving workers on other
//!   nodes are killed, and their resources come back once they have exited. An elastic group
//!   is not: it keeps its bundles on the other nodes, whose workers go on without the lost ones,
//!   until its driver releases it. A node that comes back registers anew and starts clean.
//! * **Driver leases.** A driver opens a `DriverSession` stream and reserves under its lease;
//!   when the stream ends (the driver died) its groups are released as above and its waiting
//!   requests withdrawn, so a dead driver holds nothing.
//! * **Waiting for capacity.** A request the alive cluster is too small for is refused, unless
//!   it asks to wait (a retry after a node was lost): then it is parked until nodes join.
//! * **Room now, or not.** A request may ask to be reserved only if it fits the free room at
//!   once and nothing else waits (an elastic group taking more than its min): waiting requests
//!   come before growth.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Status};

use crate::cluster::pool::{NodeId, NodeSpec, PgId, PlacementRequest, Pool, PoolStatus};
use crate::error::{Error, Result};
use crate::proto::head_server::HeadServer;
use crate::proto::{
    HeadCommand, KillWorkerRequest, ReserveReply, StartWorkerReply, StartWorkerRequest,
    StatusReply, WorkerEvent, WorkerExit, WorkerLog, head_command, worker_event,
};
use crate::sys::nvml::GpuUsage;

mod service;
use service::HeadService;

/// How a head serves.
#[derive(Debug, Clone)]
pub struct HeadConfig {
    pub bind: SocketAddr,
    /// Required from every caller when set.
    pub token: Option<String>,
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
}

impl Default for HeadConfig {
    fn default() -> Self {
        HeadConfig {
            bind: ([127, 0, 0, 1], 0).into(),
            token: None,
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(5),
        }
    }
}

impl HeadConfig {
    /// Refuses a non-loopback bind without a token: anyone who reaches the head could run code
    /// on every node.
    pub fn validate(&self) -> Result<()> {
        if !self.bind.ip().is_loopback() && self.token.as_deref().unwrap_or("").is_empty() {
            return Err(Error::config(
                "head --bind",
                format!(
                    "{} is not loopback; a cluster token is required (--token)",
                    self.bind.ip()
                ),
            ));
        }
        Ok(())
    }
}

/// A running head; stops when dropped.
pub struct HeadHandle {
    pub address: SocketAddr,
    /// The pool as of the head's last tick (twice a heartbeat interval), for its metrics.
    pub pool: Arc<std::sync::Mutex<Option<PoolStatus>>>,
    /// Where its metrics are served, once they are: said in its status (`rtune status`).
    metrics: Arc<std::sync::OnceLock<SocketAddr>>,
    _shutdown: oneshot::Sender<()>,
}

impl HeadHandle {
    /// Says in the head's status where its metrics are served.
    pub fn metrics_served_at(&self, address: SocketAddr) {
        let _ = self.metrics.set(address);
    }
}

/// Starts a head inside the current tokio runtime.
pub async fn serve(config: HeadConfig) -> Result<HeadHandle> {
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(config.bind).await.map_err(|e| {
        Error::config("head --bind", format!("cannot listen on {}: {e}", config.bind))
    })?;
    let address = listener.local_addr().map_err(|e| Error::io("head socket", e))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let pool = Arc::new(std::sync::Mutex::new(None));
    let metrics = Arc::new(std::sync::OnceLock::new());
    tokio::spawn(run_state(HeadState::new(config.clone()), rx, pool.clone()));
    let ticker = tx.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(config.heartbeat_interval / 2);
        loop {
            every.tick().await;
            if ticker.send(Msg::Tick).is_err() {
                break;
            }
        }
    });
    let token = config.token.clone();
    let service = HeadServer::with_interceptor(
        HeadService {
            tx,
            heartbeat_interval: config.heartbeat_interval,
            binaries: super::binary::cache_dir(),
            metrics: metrics.clone(),
        },
        move |req: Request<()>| crate::rpc::check_token(req, token.as_deref()),
    );
    let routes = tonic::service::Routes::new(service);
    let keepalive = Some(config.heartbeat_timeout);
    let shutdown = crate::rpc::serve_until_dropped(routes, listener, "head", keepalive);
    Ok(HeadHandle { address, pool, metrics, _shutdown: shutdown })
}

use crate::rpc::Reply;
type CommandTx = mpsc::Sender<std::result::Result<HeadCommand, Status>>;

enum Msg {
    Register {
        spec: NodeSpec,
        previous: Option<NodeId>,
        /// Why its GPUs are not offered (the agent's CUDA probe), if so.
        gpu_error: Option<String>,
        commands: CommandTx,
        reply: Reply<(NodeId, u64)>,
    },
    Heartbeat {
        node: NodeId,
        session: u64,
        gpus: Vec<GpuUsage>,
    },
    Exited {
        node: NodeId,
        session: u64,
        exit: WorkerExit,
    },
    Log {
        node: NodeId,
        session: u64,
        log: WorkerLog,
    },
    SessionEnded {
        node: NodeId,
        session: u64,
    },
    Reserve {
        request: PlacementRequest,
        lease: u64,
        asked: Asked,
        reply: Reply<ReserveReply>,
    },
    OpenLease {
        name: String,
        reply: Reply<u64>,
    },
    LeaseEnded {
        lease: u64,
    },
    Release {
        pg: PgId,
    },
    Start {
        request: StartWorkerRequest,
        reply: Reply<StartWorkerReply>,
    },
    Kill {
        worker: String,
    },
    Watch {
        pg: PgId,
        events: mpsc::UnboundedSender<std::result::Result<WorkerEvent, Status>>,
    },
    Status {
        reply: Reply<StatusReply>,
    },
    Tick,
}

struct NodeSession {
    session: u64,
    commands: CommandTx,
    last_seen: Instant,
}

struct HeadState {
    config: HeadConfig,
    pool: Pool,
    sessions: HashMap<NodeId, NodeSession>,
    next_session: u64,
    /// worker id → (placement group, node)
    workers: HashMap<String, (PgId, NodeId)>,
    watchers: HashMap<PgId, Vec<mpsc::UnboundedSender<std::result::Result<WorkerEvent, Status>>>>,
    waiting: HashMap<PgId, Reply<ReserveReply>>,
    /// Groups being released: their workers were told to die; released when the last has exited.
    releasing: HashSet<PgId>,
    /// Driver lease → (what it runs, the groups reserved under it).
    leases: HashMap<u64, (String, HashSet<PgId>)>,
    next_lease: u64,
    /// Requests waiting for the cluster to grow.
    parked: Vec<Parked>,
    /// Elastic groups: a node's death shrinks them instead of releasing them.
    elastic: HashSet<PgId>,
    /// What each node said of its GPUs: why they are unusable (at registration), what they
    /// are doing (with each heartbeat). For `Status`, and for refusals of GPU requests.
    gpus: HashMap<NodeId, NodeGpus>,
}

#[derive(Default)]
struct NodeGpus {
    error: Option<String>,
    usage: Vec<GpuUsage>,
}

struct Parked {
    request: PlacementRequest,
    lease: u64,
    elastic: bool,
    reply: Reply<ReserveReply>,
}

/// How a reservation was asked for (`ReserveRequest`'s flags).
#[derive(Debug, Clone, Copy, Default)]
struct Asked {
    /// Park it while the alive cluster is too small, instead of refusing it.
    wait: bool,
    /// Reserve it now or refuse it: no queueing, and not while anything else waits.
    if_free_now: bool,
    /// Keep its bundles on the other nodes when a node under it dies.
    elastic: bool,
}

async fn run_state(
    mut state: HeadState,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    pool: Arc<std::sync::Mutex<Option<PoolStatus>>>,
) {
    while let Some(msg) = rx.recv().await {
        let tick = matches!(msg, Msg::Tick);
        state.handle(msg);
        if tick {
            *pool.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.status());
        }
    }
}

impl HeadState {
    fn new(config: HeadConfig) -> Self {
        HeadState {
            config,
            pool: Pool::new(),
            sessions: HashMap::new(),
            next_session: 1,
            workers: HashMap::new(),
            watchers: HashMap::new(),
            waiting: HashMap::new(),
            releasing: HashSet::new(),
            leases: HashMap::new(),
            next_lease: 1,
            parked: Vec::new(),
            elastic: HashSet::new(),
            gpus: HashMap::new(),
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Register { spec, previous, gpu_error, commands, reply } => {
                let result = self.register(spec, previous, commands);
                if let Ok((node, _)) = &result {
                    self.gpus.insert(*node, NodeGpus { error: gpu_error, usage: Vec::new() });
                }
                let _ = reply.send(result);
                self.unpark();
                self.schedule();
            }
            Msg::Heartbeat { node, session, gpus } => {
                if let Some(s) = self.sessions.get_mut(&node).filter(|s| s.session == session) {
                    s.last_seen = Instant::now();
                    self.gpus.entry(node).or_default().usage = gpus;
                }
            }
            Msg::Exited { node, session, exit } => {
                if self.is_current(node, session) {
                    self.workers.remove(&exit.worker_id);
                    let pg = PgId(exit.pg_id);
                    self.notify(pg, exit);
                    self.release_if_drained(pg);
                }
            }
            Msg::Log { node, session, log } => {
                if self.is_current(node, session) {
                    self.publish(PgId(log.pg_id), worker_event::Kind::Log(log));
                }
            }
            Msg::SessionEnded { node, session } => {
                if self.is_current(node, session) {
                    self.node_lost(node, "its agent disconnected");
                }
            }
            Msg::Reserve { request, lease, asked, reply } => {
                let parked = Parked { request, lease, elastic: asked.elastic, reply };
                if asked.if_free_now {
                    self.reserve_if_free(parked);
                } else {
                    self.reserve(parked, asked.wait);
                }
            }
            Msg::OpenLease { name, reply } => {
                let lease = self.next_lease;
                self.next_lease += 1;
                self.leases.insert(lease, (name, HashSet::new()));
                let _ = reply.send(Ok(lease));
            }
            Msg::LeaseEnded { lease } => {
                self.parked.retain(|p| p.lease != lease);
                if let Some((name, groups)) = self.leases.remove(&lease)
                    && !groups.is_empty()
                {
                    tracing::info!(
                        "the driver of {name} is gone; releasing its {} placement \
                         group(s)",
                        groups.len()
                    );
                    for pg in groups {
                        self.release(pg);
                    }
                }
            }
            Msg::Release { pg } => self.release(pg),
            Msg::Start { request, reply } => {
                let _ = reply.send(self.start(request));
            }
            Msg::Kill { worker } => self.kill(worker),
            Msg::Watch { pg, events } => self.watchers.entry(pg).or_default().push(events),
            Msg::Status { reply } => {
                let json = serde_json::to_string(&self.status()).expect("status serialises");
                let _ = reply.send(Ok(StatusReply { status_json: json, ..Default::default() }));
            }
            Msg::Tick => {
                let timeout = self.config.heartbeat_timeout;
                let silent: Vec<NodeId> = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| s.last_seen.elapsed() > timeout)
                    .map(|(id, _)| *id)
                    .collect();
                for node in silent {
                    self.node_lost(node, &format!("silent for more than {timeout:?}"));
                }
                // A parked request whose driver stopped waiting (timeout, exit) goes.
                self.parked.retain(|p| !p.reply.is_closed());
            }
        }
    }

    /// Whether `session` is `node`'s live session: messages from an ended one are stale.
    fn is_current(&self, node: NodeId, session: u64) -> bool {
        self.sessions.get(&node).is_some_and(|s| s.session == session)
    }

    fn register(
        &mut self,
        spec: NodeSpec,
        previous: Option<NodeId>,
        commands: CommandTx,
    ) -> std::result::Result<(NodeId, u64), Status> {
        let known = previous.filter(|id| self.pool.node_address(*id).is_some());
        let node = match known {
            Some(id) => {
                // A rejoin: whatever the pool thought it held is gone.
                if self.sessions.contains_key(&id) {
                    self.node_lost(id, "it registered again");
                }
                let released = self
                    .pool
                    .rejoin_node(id, spec)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                self.lose_workers_on(id, &format!("node {id} rejoined"));
                for pg in released {
                    self.release(pg);
                }
                id
            }
            None => {
                self.pool.add_node(spec).map_err(|e| Status::invalid_argument(e.to_string()))?
            }
        };
        let session = self.next_session;
        self.next_session += 1;
        self.sessions.insert(node, NodeSession { session, commands, last_seen: Instant::now() });
        Ok((node, session))
    }

    fn node_lost(&mut self, node: NodeId, why: &str) {
        let address = self.pool.node_address(node).unwrap_or("?").to_owned();
        tracing::warn!("node {node} ({address}) is dead: {why}");
        // Dropping the session's command sender ends its stream, so a live agent reconnects.
        self.sessions.remove(&node);
        // The broken groups keep what they hold elsewhere until their survivors have exited.
        let broken = self.pool.mark_node_dead_keeping_survivors(node).unwrap_or_default();
        self.lose_workers_on(node, &format!("node {node} ({address}) was lost: {why}"));
        // An elastic group's driver shrinks it to its workers left; it releases it later.
        for pg in broken {
            if !self.elastic.contains(&pg) {
                self.release(pg);
            }
        }
        self.schedule();
    }

    /// Reports every worker that ran on `node` lost and forgets it (it cannot be killed or
    /// heard from any more; a node dies with its workers).
    fn lose_workers_on(&mut self, node: NodeId, why: &str) {
        let lost: Vec<(String, PgId)> = self
            .workers
            .iter()
            .filter(|(_, (_, on))| *on == node)
            .map(|(id, (pg, _))| (id.clone(), *pg))
            .collect();
        for (worker, pg) in lost {
            self.workers.remove(&worker);
            let exit = WorkerExit {
                worker_id: worker,
                pg_id: pg.0,
                code: -1,
                signal: 0,
                error: format!("{why} (its node died)"),
            };
            self.notify(pg, exit);
        }
    }

    /// Sends a kill for `worker` to its node agent (if both are still known).
    fn kill(&mut self, worker: String) {
        if let Some((_, node)) = self.workers.get(&worker)
            && let Some(s) = self.sessions.get(node)
        {
            let kill = KillWorkerRequest { worker_id: worker };
            let _ =
                s.commands.try_send(Ok(HeadCommand { kind: Some(head_command::Kind::Kill(kill)) }));
        }
    }

    /// Releases `pg`: withdrawn at once if pending or if no worker of it is running, else its
    /// workers are killed and it is released when the last one has exited.
    fn release(&mut self, pg: PgId) {
        self.waiting.remove(&pg);
        let running: Vec<String> =
            self.workers.iter().filter(|(_, (p, _))| *p == pg).map(|(id, _)| id.clone()).collect();
        self.releasing.insert(pg);
        for worker in running {
            self.kill(worker);
        }
        self.release_if_drained(pg);
    }

    /// Finishes the release of `pg` once none of its workers is running.
    fn release_if_drained(&mut self, pg: PgId) {
        if !self.releasing.contains(&pg) || self.workers.values().any(|(p, _)| *p == pg) {
            return;
        }
        self.releasing.remove(&pg);
        self.elastic.remove(&pg);
        // A group that ended already (a node's death, a release before) is not an error here.
        let _ = self.pool.cancel(pg);
        self.watchers.remove(&pg);
        for (_, groups) in self.leases.values_mut() {
            groups.remove(&pg);
        }
        self.schedule();
    }

    /// Queues a reservation, parks it while the cluster is too small (when it may wait), or
    /// refuses it.
    fn reserve(&mut self, parked: Parked, wait: bool) -> Option<PgId> {
        let Parked { request, lease, elastic, reply } = parked;
        if lease != 0 && !self.leases.contains_key(&lease) {
            let _ = reply.send(Err(Status::failed_precondition(format!(
                "driver lease {lease} has ended; open a new session"
            ))));
            return None;
        }
        match self.pool.request(request.clone()) {
            Ok(pg) => {
                if let Some((_, groups)) = self.leases.get_mut(&lease) {
                    groups.insert(pg);
                }
                if elastic {
                    self.elastic.insert(pg);
                }
                self.waiting.insert(pg, reply);
                self.schedule();
                return Some(pg);
            }
            Err(e) if wait && e.is_capacity() => {
                tracing::info!("{} waits for the cluster to grow: {e}", request.label);
                self.parked.push(Parked { request, lease, elastic, reply });
            }
            Err(e) => {
                let note = match e.is_capacity() {
                    true => super::unusable_gpus_note(&self.status(), &request),
                    false => String::new(),
                };
                drop(reply.send(Err(Status::invalid_argument(format!("{e}{note}")))))
            }
        }
        None
    }

    /// Reserves `parked` if it fits the free room now and no other request waits for room;
    /// else refuses it with RESOURCE_EXHAUSTED, holding nothing.
    fn reserve_if_free(&mut self, parked: Parked) {
        if !self.waiting.is_empty() || !self.parked.is_empty() {
            let _ = parked.reply.send(Err(Status::resource_exhausted(
                "other placement groups wait for room; they come first",
            )));
            return;
        }
        // Queued as any request and scheduled at once (its reply goes out then); one the pass
        // did not reserve is withdrawn.
        let Some(pg) = self.reserve(parked, false) else { return };
        if let Some(reply) = self.waiting.remove(&pg) {
            let _ = self.pool.cancel(pg);
            self.elastic.remove(&pg);
            for (_, groups) in self.leases.values_mut() {
                groups.remove(&pg);
            }
            let _ = reply.send(Err(Status::resource_exhausted("no room for it now")));
        }
    }

    /// The pool's status with what the nodes said of their GPUs.
    fn status(&self) -> PoolStatus {
        let mut status = self.pool.status();
        for n in &mut status.nodes {
            if let Some(gpus) = self.gpus.get(&n.id) {
                n.gpu_error = gpus.error.clone();
                // A dead node's last figures are not what its GPUs do now.
                n.gpus = if n.alive { gpus.usage.clone() } else { Vec::new() };
            }
        }
        status
    }

    /// The cluster grew: parked requests try again (and park again if still too large).
    fn unpark(&mut self) {
        for parked in std::mem::take(&mut self.parked) {
            if !parked.reply.is_closed() {
                let _ = self.reserve(parked, true);
            }
        }
    }

    fn notify(&mut self, pg: PgId, exit: WorkerExit) {
        self.publish(pg, worker_event::Kind::Exit(exit));
    }

    fn publish(&mut self, pg: PgId, kind: worker_event::Kind) {
        if let Some(watchers) = self.watchers.get_mut(&pg) {
            let event = WorkerEvent { kind: Some(kind) };
            watchers.retain(|w| w.send(Ok(event.clone())).is_ok());
        }
    }

    fn schedule(&mut self) {
        for reservation in self.pool.schedule() {
            let pg = reservation.pg;
            let Some(reply) = self.waiting.remove(&pg) else {
                // Its driver went away while it waited.
                let _ = self.pool.release(pg);
                continue;
            };
            let node_addresses = reservation
                .bundles
                .iter()
                .map(|b| (b.node.0, self.pool.node_address(b.node).unwrap_or_default().to_owned()))
                .collect();
            let json = serde_json::to_string(&reservation).expect("reservation serialises");
            if reply
                .send(Ok(ReserveReply { pg_id: pg.0, reservation_json: json, node_addresses }))
                .is_err()
            {
                let _ = self.pool.release(pg);
            }
        }
    }

    fn start(
        &mut self,
        request: StartWorkerRequest,
    ) -> std::result::Result<StartWorkerReply, Status> {
        let pg = PgId(request.pg_id);
        if self.releasing.contains(&pg) {
            return Err(Status::failed_precondition(format!("placement group {pg} is released")));
        }
        let placement = self.pool.placement(pg).ok_or_else(|| {
            Status::failed_precondition(format!("placement group {pg} is not reserved"))
        })?;
        let bundle = placement
            .get(request.bundle as usize)
            .ok_or_else(|| Status::invalid_argument(format!("no bundle {}", request.bundle)))?;
        let session = self
            .sessions
            .get(&bundle.node)
            .ok_or_else(|| Status::unavailable(format!("node {} is not connected", bundle.node)))?;
        self.workers.insert(request.worker_id.clone(), (pg, bundle.node));
        let start = HeadCommand { kind: Some(head_command::Kind::Start(request)) };
        session
            .commands
            .try_send(Ok(start))
            .map_err(|_| Status::unavailable(format!("node {} is not keeping up", bundle.node)))?;
        Ok(StartWorkerReply {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pool::{Resources, Strategy};

    type Commands = mpsc::Receiver<std::result::Result<HeadCommand, Status>>;

    fn register(head: &mut HeadState, cpus: f64) -> (NodeId, u64, Commands) {
        register_with(head, Resources::new().cpu(cpus), None)
    }

    fn register_with(
        head: &mut HeadState,
        resources: Resources,
        gpu_error: Option<&str>,
    ) -> (NodeId, u64, Commands) {
        let (commands, inbox) = mpsc::channel(16);
        let (reply, answer) = oneshot::channel();
        let spec = NodeSpec::new("127.0.0.1", resources);
        let gpu_error = gpu_error.map(str::to_owned);
        head.handle(Msg::Register { spec, previous: None, gpu_error, commands, reply });
        let (node, session) = answer.blocking_recv().unwrap().unwrap();
        (node, session, inbox)
    }

    fn reserve(head: &mut HeadState, bundle: Resources) -> std::result::Result<u64, Status> {
        let (reply, answer) = oneshot::channel();
        let request = PlacementRequest::uniform(Strategy::Pack, 1, bundle);
        head.handle(Msg::Reserve { request, lease: 0, asked: Asked::default(), reply });
        answer.blocking_recv().unwrap().map(|r| r.pg_id)
    }

    /// A node whose workers could not use its GPUs offers none; a group asking for a GPU is
    /// refused with that node and the cause, and the status shows both it and the GPUs a node
    /// reported in its heartbeat.
    #[test]
    fn gpus_a_node_cannot_use_are_named_when_a_group_asks_for_them() {
        let mut head = HeadState::new(HeadConfig::default());
        let cause = "no NVIDIA driver on n1 (libcuda.so.1: not found); install the driver";
        let (bad, _, _inbox) = register_with(&mut head, Resources::new().cpu(4.0), Some(cause));
        let (good, session, _inbox2) = register_with(&mut head, Resources::new().cpu(4.0), None);
        let refused = reserve(&mut head, Resources::new().cpu(1.0).gpu(1.0)).unwrap_err();
        let text = refused.message();
        assert!(text.contains(&format!("node {bad} (127.0.0.1) has GPUs")), "{text}");
        assert!(text.contains(cause), "{text}");
        // A CPU group is not told about GPUs.
        assert!(reserve(&mut head, Resources::new().cpu(1.0)).is_ok());
        let gpu = GpuUsage {
            index: 0,
            name: "NVIDIA H100".into(),
            uuid: "GPU-1".into(),
            memory_used: 1,
            memory_total: 2,
            utilization: 50,
        };
        head.handle(Msg::Heartbeat { node: good, session, gpus: vec![gpu.clone()] });
        let status = head.pool.status();
        assert!(status.nodes.iter().all(|n| n.gpu_error.is_none()), "the pool knows nothing");
        let (reply, answer) = oneshot::channel();
        head.handle(Msg::Status { reply });
        let json = answer.blocking_recv().unwrap().unwrap().status_json;
        let status: crate::cluster::pool::PoolStatus = serde_json::from_str(&json).unwrap();
        let node = |id: NodeId| status.nodes.iter().find(|n| n.id == id).unwrap();
        assert_eq!(node(bad).gpu_error.as_deref(), Some(cause));
        assert_eq!(node(good).gpus, vec![gpu]);
    }

    fn free_cpu(head: &HeadState, node: NodeId) -> f64 {
        head.pool.status().nodes.iter().find(|n| n.id == node).unwrap().free.cpu
    }

    fn kills(inbox: &mut Commands) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(Ok(HeadCommand { kind: Some(head_command::Kind::Kill(k)) })) = inbox.try_recv()
        {
            out.push(k.worker_id);
        }
        out
    }

    /// A 2-node group loses a node: the survivor is killed, and its CPU is held until it has
    /// exited, never handed out while it may still run.
    #[test]
    fn a_broken_group_frees_its_survivors_only_after_they_exit() {
        let mut head = HeadState::new(HeadConfig::default());
        let (a, session_a, _inbox_a) = register(&mut head, 1.0);
        let (b, session_b, mut inbox_b) = register(&mut head, 1.0);
        let pg = spread_over_two(&mut head, Asked::default());
        let _ = kills(&mut inbox_b);

        head.handle(Msg::SessionEnded { node: a, session: session_a });
        let survivor = format!("w{}", b.0);
        assert_eq!(kills(&mut inbox_b), vec![survivor.clone()], "the survivor is told to die");
        assert_eq!(free_cpu(&head, b), 0.0, "held while the survivor may still run");
        // Another group waiting for that CPU does not get it yet.
        let (reply, mut next) = oneshot::channel();
        let one = PlacementRequest::uniform(Strategy::Pack, 1, Resources::new().cpu(1.0));
        head.handle(Msg::Reserve { request: one, lease: 0, asked: Asked::default(), reply });
        assert!(next.try_recv().is_err(), "reserved on a CPU a live worker still uses");

        killed(&mut head, (b, session_b), survivor, pg);
        let reserved = next.try_recv().expect("reserved once the survivor exited").unwrap();
        assert_eq!(head.pool.placement(PgId(reserved.pg_id)).unwrap()[0].node, b);
        head.pool.check_invariants().unwrap();
    }

    /// `worker` of `pg` on `node` (its session) exited, killed by SIGKILL.
    fn killed(head: &mut HeadState, (node, session): (NodeId, u64), worker: String, pg: PgId) {
        let exit = WorkerExit {
            worker_id: worker,
            pg_id: pg.0,
            code: -1,
            signal: 9,
            ..Default::default()
        };
        head.handle(Msg::Exited { node, session, exit });
    }

    /// Reserves a group of 2 one-CPU bundles on distinct nodes, asked as `asked`, and starts a
    /// worker `w<node>` in each bundle.
    fn spread_over_two(head: &mut HeadState, asked: Asked) -> PgId {
        let (reply, answer) = oneshot::channel();
        let request =
            PlacementRequest::uniform(Strategy::StrictSpread, 2, Resources::new().cpu(1.0));
        head.handle(Msg::Reserve { request, lease: 0, asked, reply });
        let pg = PgId(answer.blocking_recv().unwrap().unwrap().pg_id);
        let placement = head.pool.placement(pg).unwrap();
        for (bundle, p) in placement.iter().enumerate() {
            let worker_id = format!("w{}", p.node.0);
            let request = StartWorkerRequest {
                worker_id,
                pg_id: pg.0,
                bundle: bundle as u32,
                ..Default::default()
            };
            let (reply, answer) = oneshot::channel();
            head.handle(Msg::Start { request, reply });
            answer.blocking_recv().unwrap().unwrap();
        }
        pg
    }

    /// An elastic group that loses a node keeps its worker on the other one running (not told
    /// to die, its CPU held) until its driver releases it; then it goes as any group does.
    #[test]
    fn an_elastic_group_keeps_its_survivors_when_a_node_dies() {
        let mut head = HeadState::new(HeadConfig::default());
        let (a, session_a, _inbox_a) = register(&mut head, 1.0);
        let (b, session_b, mut inbox_b) = register(&mut head, 1.0);
        let pg = spread_over_two(&mut head, Asked { elastic: true, ..Asked::default() });
        let _ = kills(&mut inbox_b);

        head.handle(Msg::SessionEnded { node: a, session: session_a });
        assert_eq!(kills(&mut inbox_b), Vec::<String>::new(), "the survivor runs on");
        assert_eq!(free_cpu(&head, b), 0.0, "its CPU stays with the group");
        head.pool.check_invariants().unwrap();

        head.handle(Msg::Release { pg });
        let survivor = format!("w{}", b.0);
        assert_eq!(kills(&mut inbox_b), vec![survivor.clone()], "released: told to die");
        killed(&mut head, (b, session_b), survivor, pg);
        assert_eq!(free_cpu(&head, b), 1.0, "free once it exited");
        assert!(!head.elastic.contains(&pg), "forgotten once released");
        head.pool.check_invariants().unwrap();
    }

    /// Asks for `cpus` in one bundle if free now; the pg reserved, or the refusal's code.
    fn if_free(head: &mut HeadState, cpus: f64) -> std::result::Result<u64, tonic::Code> {
        let (reply, answer) = oneshot::channel();
        let request = PlacementRequest::uniform(Strategy::Pack, 1, Resources::new().cpu(cpus));
        let asked = Asked { if_free_now: true, ..Asked::default() };
        head.handle(Msg::Reserve { request, lease: 0, asked, reply });
        answer.blocking_recv().unwrap().map(|r| r.pg_id).map_err(|s| s.code())
    }

    /// A request for room now is reserved only when it fits what is free and nothing waits;
    /// refused, it holds nothing and queues nothing.
    #[test]
    fn room_now_is_given_only_when_free_and_nobody_waits() {
        let mut head = HeadState::new(HeadConfig::default());
        let (node, _, _inbox) = register(&mut head, 2.0);
        let held = reserve(&mut head, Resources::new().cpu(1.0)).unwrap();
        assert_eq!(if_free(&mut head, 2.0), Err(tonic::Code::ResourceExhausted));
        assert_eq!(if_free(&mut head, 3.0), Err(tonic::Code::InvalidArgument), "never fits");
        assert_eq!(free_cpu(&head, node), 1.0, "a refusal holds nothing");
        assert!(head.waiting.is_empty() && head.pool.status().groups.len() == 1, "nor queues");

        // A plain request waits for 2 CPUs: room for 1 now goes to nobody else first.
        let (reply, mut waits) = oneshot::channel();
        let two = PlacementRequest::uniform(Strategy::Pack, 1, Resources::new().cpu(2.0));
        head.handle(Msg::Reserve { request: two, lease: 0, asked: Asked::default(), reply });
        assert_eq!(if_free(&mut head, 1.0), Err(tonic::Code::ResourceExhausted));
        head.handle(Msg::Release { pg: PgId(held) });
        let two = PgId(waits.try_recv().expect("the waiting one was reserved").unwrap().pg_id);
        head.handle(Msg::Release { pg: two });

        let got = if_free(&mut head, 2.0).expect("free now, and nobody waits");
        assert!(head.pool.placement(PgId(got)).is_some());
        assert_eq!(free_cpu(&head, node), 0.0);
        head.pool.check_invariants().unwrap();
    }
}
