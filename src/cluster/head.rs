//! The head: serves `rtune.v1.Head`, owning the cluster's resource pool.
//!
//! One task owns all cluster state (`HeadState`: the pool, node sessions, workers, watchers);
//! the gRPC service forwards each call to it as a message, with a reply slot. Node liveness:
//! a node whose session ends, or that sends nothing for longer than the heartbeat timeout, is
//! dead: its resources leave the pool, the placement groups with a bundle on it are released,
//! and every worker it ran is reported lost to the drivers watching it, which fail over under
//! their `FailureConfig`. A node that comes back registers anew and starts clean.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::cluster::pool::{NodeId, NodeSpec, PgId, PlacementRequest, Pool, Resources};
use crate::error::{Error, Result};
use crate::proto::head_server::{Head, HeadServer};
use crate::proto::{
    HeadCommand, KillWorkerReply, KillWorkerRequest, NodeMessage, Registered, ReleaseReply,
    ReleaseRequest, ReserveReply, ReserveRequest, StartWorkerReply, StartWorkerRequest,
    StatusReply, StatusRequest, WatchWorkersRequest, WorkerEvent, WorkerExit, WorkerLog,
    head_command, node_message, worker_event,
};

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
    _shutdown: oneshot::Sender<()>,
}

/// Starts a head inside the current tokio runtime.
pub async fn serve(config: HeadConfig) -> Result<HeadHandle> {
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(config.bind).await.map_err(|e| {
        Error::config("head --bind", format!("cannot listen on {}: {e}", config.bind))
    })?;
    let address = listener.local_addr().map_err(|e| Error::io("head socket", e))?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run_state(HeadState::new(config.clone()), rx));
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
        HeadService { tx, heartbeat_interval: config.heartbeat_interval },
        move |req: Request<()>| super::check_token(req, token.as_deref()),
    );
    let routes = tonic::service::Routes::new(service);
    let shutdown = crate::worker::hub::serve_until_dropped(routes, listener, "head");
    Ok(HeadHandle { address, _shutdown: shutdown })
}

type Reply<T> = oneshot::Sender<std::result::Result<T, Status>>;
type CommandTx = mpsc::Sender<std::result::Result<HeadCommand, Status>>;

enum Msg {
    Register {
        spec: NodeSpec,
        previous: Option<NodeId>,
        commands: CommandTx,
        reply: Reply<(NodeId, u64)>,
    },
    Heartbeat {
        node: NodeId,
        session: u64,
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
        reply: Reply<ReserveReply>,
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
}

async fn run_state(mut state: HeadState, mut rx: mpsc::UnboundedReceiver<Msg>) {
    while let Some(msg) = rx.recv().await {
        state.handle(msg);
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
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Register { spec, previous, commands, reply } => {
                let result = self.register(spec, previous, commands);
                let _ = reply.send(result);
                self.schedule();
            }
            Msg::Heartbeat { node, session } => {
                if let Some(s) = self.sessions.get_mut(&node).filter(|s| s.session == session) {
                    s.last_seen = Instant::now();
                }
            }
            Msg::Exited { node, session, exit } => {
                if self.is_current(node, session) {
                    self.workers.remove(&exit.worker_id);
                    self.notify(PgId(exit.pg_id), exit);
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
            Msg::Reserve { request, reply } => match self.pool.request(request) {
                Ok(pg) => {
                    self.waiting.insert(pg, reply);
                    self.schedule();
                }
                Err(e) => drop(reply.send(Err(Status::invalid_argument(e.to_string())))),
            },
            Msg::Release { pg } => {
                // A group already released by a node's death is not an error here.
                let _ = self.pool.cancel(pg);
                self.waiting.remove(&pg);
                self.watchers.remove(&pg);
                self.schedule();
            }
            Msg::Start { request, reply } => {
                let _ = reply.send(self.start(request));
            }
            Msg::Kill { worker } => {
                if let Some((_, node)) = self.workers.get(&worker)
                    && let Some(s) = self.sessions.get(node)
                {
                    let kill = HeadCommand {
                        kind: Some(head_command::Kind::Kill(KillWorkerRequest {
                            worker_id: worker,
                        })),
                    };
                    let _ = s.commands.try_send(Ok(kill));
                }
            }
            Msg::Watch { pg, events } => self.watchers.entry(pg).or_default().push(events),
            Msg::Status { reply } => {
                let json = serde_json::to_string(&self.pool.status()).expect("status serialises");
                let _ = reply.send(Ok(StatusReply { status_json: json }));
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
                self.forget_groups(&released, id, "rejoined");
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
        eprintln!("rtune head: node {node} ({address}) is dead: {why}");
        // Dropping the session's command sender ends its stream, so a live agent reconnects.
        self.sessions.remove(&node);
        let released = self.pool.mark_node_dead(node).unwrap_or_default();
        self.forget_groups(&released, node, &format!("node {node} ({address}) was lost: {why}"));
        self.schedule();
    }

    /// Reports every worker of `groups` lost (the pool released those groups).
    fn forget_groups(&mut self, groups: &[PgId], node: NodeId, why: &str) {
        let lost: Vec<(String, PgId)> = self
            .workers
            .iter()
            .filter(|(_, (pg, _))| groups.contains(pg))
            .map(|(id, (pg, _))| (id.clone(), *pg))
            .collect();
        for (worker, pg) in lost {
            self.workers.remove(&worker);
            let on_node = if self.sessions.contains_key(&node) { "" } else { " (its node died)" };
            let exit = WorkerExit {
                worker_id: worker,
                pg_id: pg.0,
                code: -1,
                signal: 0,
                error: format!("{why}{on_node}"),
            };
            self.notify(pg, exit);
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

struct HeadService {
    tx: mpsc::UnboundedSender<Msg>,
    heartbeat_interval: Duration,
}

impl HeadService {
    async fn ask<T>(&self, msg: impl FnOnce(Reply<T>) -> Msg) -> std::result::Result<T, Status> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(msg(reply)).map_err(|_| Status::unavailable("the head is shutting down"))?;
        answer.await.map_err(|_| Status::unavailable("the head is shutting down"))?
    }
}

type Stream<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = std::result::Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Head for HeadService {
    type NodeSessionStream = Stream<HeadCommand>;
    type WatchWorkersStream = Stream<WorkerEvent>;

    async fn node_session(
        &self,
        request: Request<Streaming<NodeMessage>>,
    ) -> std::result::Result<Response<Self::NodeSessionStream>, Status> {
        let mut inbound = request.into_inner();
        let first =
            inbound.next().await.ok_or_else(|| Status::invalid_argument("empty session"))??;
        let Some(node_message::Kind::Register(register)) = first.kind else {
            return Err(Status::invalid_argument("a session must start with RegisterNode"));
        };
        let resources: Resources = serde_json::from_str(&register.resources_json)
            .map_err(|e| Status::invalid_argument(format!("resources: {e}")))?;
        let spec = NodeSpec::new(register.address.clone(), resources);
        let previous = register.previous_node_id.map(NodeId);
        let (commands, outbound) = mpsc::channel(256);
        let (node, session) = self
            .ask(|reply| Msg::Register { spec, previous, commands: commands.clone(), reply })
            .await?;
        let interval = self.heartbeat_interval.as_millis() as u64;
        let registered = Registered { node_id: node.0, heartbeat_interval_ms: interval };
        let _ = commands
            .send(Ok(HeadCommand { kind: Some(head_command::Kind::Registered(registered)) }))
            .await;
        drop(commands);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            while let Some(Ok(message)) = inbound.next().await {
                let msg = match message.kind {
                    Some(node_message::Kind::Heartbeat(_)) => Msg::Heartbeat { node, session },
                    Some(node_message::Kind::Exited(exit)) => Msg::Exited { node, session, exit },
                    Some(node_message::Kind::Log(log)) => Msg::Log { node, session, log },
                    _ => continue,
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
            let _ = tx.send(Msg::SessionEnded { node, session });
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(outbound))))
    }

    async fn reserve(
        &self,
        request: Request<ReserveRequest>,
    ) -> std::result::Result<Response<ReserveReply>, Status> {
        let placement: PlacementRequest = serde_json::from_str(&request.into_inner().request_json)
            .map_err(|e| Status::invalid_argument(format!("placement request: {e}")))?;
        self.ask(|reply| Msg::Reserve { request: placement, reply }).await.map(Response::new)
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> std::result::Result<Response<ReleaseReply>, Status> {
        let pg = PgId(request.into_inner().pg_id);
        self.tx.send(Msg::Release { pg }).map_err(|_| Status::unavailable("shutting down"))?;
        Ok(Response::new(ReleaseReply {}))
    }

    async fn start_worker(
        &self,
        request: Request<StartWorkerRequest>,
    ) -> std::result::Result<Response<StartWorkerReply>, Status> {
        let request = request.into_inner();
        self.ask(|reply| Msg::Start { request, reply }).await.map(Response::new)
    }

    async fn kill_worker(
        &self,
        request: Request<KillWorkerRequest>,
    ) -> std::result::Result<Response<KillWorkerReply>, Status> {
        let worker = request.into_inner().worker_id;
        self.tx.send(Msg::Kill { worker }).map_err(|_| Status::unavailable("shutting down"))?;
        Ok(Response::new(KillWorkerReply {}))
    }

    async fn watch_workers(
        &self,
        request: Request<WatchWorkersRequest>,
    ) -> std::result::Result<Response<Self::WatchWorkersStream>, Status> {
        let pg = PgId(request.into_inner().pg_id);
        let (events, rx) = mpsc::unbounded_channel();
        self.tx
            .send(Msg::Watch { pg, events })
            .map_err(|_| Status::unavailable("shutting down"))?;
        Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))))
    }

    async fn status(
        &self,
        _: Request<StatusRequest>,
    ) -> std::result::Result<Response<StatusReply>, Status> {
        self.ask(|reply| Msg::Status { reply }).await.map(Response::new)
    }
}
