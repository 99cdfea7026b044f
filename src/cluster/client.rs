//! Talking to a head: connections that carry the cluster token, and the calls a driver makes
//! (reserve a placement group, start and kill workers on its nodes, watch their exits).

use std::collections::BTreeMap;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::cluster::pool::{PgId, PlacementRequest, PoolStatus, Reservation};
use crate::error::{Error, Result};
use crate::proto::head_client::HeadClient;
use crate::proto::{
    KillWorkerRequest, ReleaseRequest, ReserveRequest, StartWorkerRequest, StatusRequest,
    WatchWorkersRequest, WorkerEvent,
};

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct AddToken(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for AddToken {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

pub type Client = HeadClient<InterceptedService<Channel, AddToken>>;

/// Connects to the head at `address` (host:port).
pub async fn connect_head(address: &str, token: Option<&str>) -> Result<Client> {
    let url =
        if address.contains("://") { address.to_owned() } else { format!("http://{address}") };
    let endpoint = tonic::transport::Endpoint::from_shared(url)
        .map_err(|e| Error::config("head address", format!("{address:?}: {e}; use HOST:PORT")))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Error::Protocol(format!("cannot reach the head at {address}: {e}")))?;
    let token = match token.filter(|t| !t.is_empty()) {
        Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| {
            Error::config("cluster token", "contains characters a header cannot carry")
        })?),
        None => None,
    };
    Ok(HeadClient::with_interceptor(channel, AddToken(token)))
}

/// A gRPC status as an rtune error; a refused token becomes a config error that says so.
pub fn status_error(status: Status) -> Error {
    if status.code() == tonic::Code::Unauthenticated {
        Error::config("cluster token", status.message().to_owned())
    } else {
        Error::Protocol(format!("head: {}", status.message()))
    }
}

/// The head's pool snapshot.
pub async fn status(client: &mut Client) -> Result<PoolStatus> {
    let reply = client.status(StatusRequest {}).await.map_err(status_error)?.into_inner();
    serde_json::from_str(&reply.status_json).map_err(|e| Error::Protocol(format!("status: {e}")))
}

/// A reserved placement group on the cluster.
#[derive(Debug, Clone)]
pub struct ClusterReservation {
    pub reservation: Reservation,
    /// Node id → the node's address.
    pub node_addresses: BTreeMap<u64, String>,
}

impl ClusterReservation {
    pub fn pg(&self) -> PgId {
        self.reservation.pg
    }
}

/// Reserves `request`, waiting until it is reserved.
pub async fn reserve(
    client: &mut Client,
    request: &PlacementRequest,
) -> Result<ClusterReservation> {
    let request_json = serde_json::to_string(request).expect("request serialises");
    let reply = client.reserve(ReserveRequest { request_json }).await.map_err(|s| {
        if s.code() == tonic::Code::InvalidArgument {
            Error::config(
                "ScalingConfig",
                format!("the cluster cannot hold this worker group: {}", s.message()),
            )
        } else {
            status_error(s)
        }
    })?;
    let reply = reply.into_inner();
    let reservation = serde_json::from_str(&reply.reservation_json)
        .map_err(|e| Error::Protocol(format!("reservation: {e}")))?;
    Ok(ClusterReservation {
        reservation,
        node_addresses: reply.node_addresses.into_iter().collect(),
    })
}

pub async fn release(client: &mut Client, pg: PgId) -> Result<()> {
    client.release(ReleaseRequest { pg_id: pg.0 }).await.map_err(status_error)?;
    Ok(())
}

pub async fn start_worker(client: &mut Client, request: StartWorkerRequest) -> Result<()> {
    client.start_worker(request).await.map_err(status_error)?;
    Ok(())
}

pub async fn kill_worker(client: &mut Client, worker_id: String) -> Result<()> {
    client.kill_worker(KillWorkerRequest { worker_id }).await.map_err(status_error)?;
    Ok(())
}

/// The output and exits of `pg`'s workers, as they happen.
pub async fn watch(client: &mut Client, pg: PgId) -> Result<tonic::Streaming<WorkerEvent>> {
    Ok(client
        .watch_workers(WatchWorkersRequest { pg_id: pg.0 })
        .await
        .map_err(status_error)?
        .into_inner())
}
