//! The head's gRPC service: each call is forwarded to the task that owns the cluster's state
//! as a message (`Msg`), with a reply slot where the call needs an answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{Asked, Msg};
use crate::cluster::pool::{NodeId, NodeSpec, PgId, PlacementRequest, Resources};
use crate::proto::head_server::Head;
use crate::proto::{
    BinaryChunk, BinaryId, DriverEvent, DriverHello, HasBinaryReply, HeadCommand, KillWorkerReply,
    KillWorkerRequest, LeaseGranted, NodeMessage, PutBinaryReply, Registered, ReleaseReply,
    ReleaseRequest, ReserveReply, ReserveRequest, StartWorkerReply, StartWorkerRequest,
    StatusReply, StatusRequest, WatchWorkersRequest, WorkerEvent, driver_event, head_command,
    node_message,
};
use crate::rpc::Reply;

pub(super) struct HeadService {
    pub(super) tx: mpsc::UnboundedSender<Msg>,
    pub(super) heartbeat_interval: Duration,
    /// Drivers' binaries by content hash, which agents fetch (see `cluster::binary`).
    pub(super) binaries: std::path::PathBuf,
    pub(super) metrics: Arc<std::sync::OnceLock<SocketAddr>>,
}

impl HeadService {
    async fn ask<T>(&self, msg: impl FnOnce(Reply<T>) -> Msg) -> std::result::Result<T, Status> {
        crate::rpc::ask(&self.tx, msg, |_| Status::unavailable("the head is shutting down")).await
    }
}

type Stream<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = std::result::Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Head for HeadService {
    type NodeSessionStream = Stream<HeadCommand>;
    type WatchWorkersStream = Stream<WorkerEvent>;
    type DriverSessionStream = Stream<DriverEvent>;
    type GetBinaryStream = Stream<BinaryChunk>;

    async fn driver_session(
        &self,
        request: Request<DriverHello>,
    ) -> std::result::Result<Response<Self::DriverSessionStream>, Status> {
        let name = request.into_inner().name;
        let lease = self.ask(|reply| Msg::OpenLease { name, reply }).await?;
        let (events, outbound) = mpsc::channel(1);
        let granted = LeaseGranted { lease_id: lease };
        let _ =
            events.send(Ok(DriverEvent { kind: Some(driver_event::Kind::Granted(granted)) })).await;
        // The stream's receiver is dropped when the driver's connection or stream goes away.
        let tx = self.tx.clone();
        tokio::spawn(async move {
            events.closed().await;
            let _ = tx.send(Msg::LeaseEnded { lease });
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(outbound))))
    }

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
        let gpu_error = Some(register.gpu_error).filter(|e| !e.is_empty());
        let (commands, outbound) = mpsc::channel(256);
        let (node, session) = self
            .ask(|reply| Msg::Register {
                spec,
                previous,
                gpu_error,
                commands: commands.clone(),
                reply,
            })
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
                    Some(node_message::Kind::Heartbeat(beat)) => {
                        // What an agent sends is only shown: a malformed list shows nothing.
                        let gpus = serde_json::from_str(&beat.gpus_json).unwrap_or_default();
                        Msg::Heartbeat { node, session, gpus }
                    }
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
        let request = request.into_inner();
        let placement: PlacementRequest = serde_json::from_str(&request.request_json)
            .map_err(|e| Status::invalid_argument(format!("placement request: {e}")))?;
        let asked = Asked {
            wait: request.wait_for_capacity,
            if_free_now: request.if_free_now,
            elastic: request.elastic,
        };
        let lease = request.lease_id;
        self.ask(|reply| Msg::Reserve { request: placement, lease, asked, reply })
            .await
            .map(Response::new)
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
        let mut status = self.ask(|reply| Msg::Status { reply }).await?;
        status.metrics_address = self.metrics.get().map(ToString::to_string).unwrap_or_default();
        Ok(Response::new(status))
    }

    async fn has_binary(
        &self,
        request: Request<BinaryId>,
    ) -> std::result::Result<Response<HasBinaryReply>, Status> {
        let has =
            crate::cluster::binary::cached(&self.binaries, &request.into_inner().sha256).is_some();
        Ok(Response::new(HasBinaryReply { has }))
    }

    async fn put_binary(
        &self,
        request: Request<Streaming<BinaryChunk>>,
    ) -> std::result::Result<Response<PutBinaryReply>, Status> {
        let path = crate::cluster::binary::receive(&self.binaries, request.into_inner())
            .await
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::info!("holding a driver's binary as {}", path.display());
        Ok(Response::new(PutBinaryReply {}))
    }

    async fn get_binary(
        &self,
        request: Request<BinaryId>,
    ) -> std::result::Result<Response<Self::GetBinaryStream>, Status> {
        let chunks = crate::cluster::binary::send(&self.binaries, &request.into_inner().sha256)
            .map_err(|e| Status::not_found(e.to_string()))?;
        Ok(Response::new(Box::pin(ReceiverStream::new(chunks))))
    }
}
