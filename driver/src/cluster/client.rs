//! Talking to a head: connections that carry the cluster token, and the calls a driver makes
//! (reserve a placement group, start and kill workers on its nodes, watch their exits).

use std::collections::BTreeMap;
use std::time::Duration;

use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::cluster::pool::{PgId, PlacementRequest, PoolStatus, Reservation};
use crate::error::{Error, Result};
use crate::proto::head_client::HeadClient;
use crate::proto::{
    DriverEvent, DriverHello, KillWorkerRequest, ReleaseRequest, ReserveRequest,
    StartWorkerRequest, StatusRequest, WatchWorkersRequest, WorkerEvent, driver_event,
};
pub use crate::rpc::AddToken;
use crate::setting::Setting;

pub(crate) type Client = HeadClient<InterceptedService<Channel, AddToken>>;

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
    Ok(HeadClient::with_interceptor(channel, AddToken::bearer(token)?))
}

/// The address this machine is reached at by the cluster whose head is at `head` (`HOST:PORT`,
/// or an `http://` URL): the one its connection to the head goes out from.
pub fn address_toward(head: &str) -> Result<std::net::IpAddr> {
    let head = head.trim_start_matches("http://").trim_start_matches("https://");
    let stream = std::net::TcpStream::connect(head)
        .map_err(|e| Error::Protocol(format!("cannot reach the head at {head}: {e}")))?;
    Ok(stream.local_addr().map_err(|e| Error::io("the connection to the head", e))?.ip())
}

/// A gRPC status as an rtune error; a refused token becomes a config error that says so.
pub(crate) fn status_error(status: Status) -> Error {
    if status.code() == tonic::Code::Unauthenticated {
        Error::config("cluster token", status.message().to_owned())
    } else {
        Error::Protocol(format!("head: {}", status.message()))
    }
}

/// The head's pool snapshot.
pub async fn status(client: &mut Client) -> Result<PoolStatus> {
    head_status(client).await.map(|(pool, _)| pool)
}

/// The cluster's pool, and where its head serves its metrics (None: nowhere).
pub async fn head_status(client: &mut Client) -> Result<(PoolStatus, Option<String>)> {
    let reply = client.status(StatusRequest {}).await.map_err(status_error)?.into_inner();
    let pool = serde_json::from_str(&reply.status_json)
        .map_err(|e| Error::Protocol(format!("status: {e}")))?;
    Ok((pool, Some(reply.metrics_address).filter(|a| !a.is_empty())))
}

/// A reserved placement group on the cluster.
#[derive(Debug, Clone)]
pub(crate) struct ClusterReservation {
    pub reservation: Reservation,
    /// Node id → the node's address.
    pub(crate) node_addresses: BTreeMap<u64, String>,
}

impl ClusterReservation {
    pub fn pg(&self) -> PgId {
        self.reservation.pg
    }
}

/// A driver's lease on the head: the groups reserved under it are released (their workers
/// killed) when it ends, which is when this value is dropped or the driver process dies.
pub(crate) struct Lease {
    id: u64,
    /// Keeps the lease's stream open (and drains it) until dropped.
    stream: tokio::task::JoinHandle<()>,
}

impl Lease {
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stream.abort();
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("id", &self.id).finish()
    }
}

/// Opens the driver's lease (`name`: what it runs, for the head's log).
pub(crate) async fn open_lease(client: &mut Client, name: &str) -> Result<Lease> {
    let mut stream = client
        .driver_session(DriverHello { name: name.to_owned() })
        .await
        .map_err(status_error)?
        .into_inner();
    let first = stream.message().await.map_err(status_error)?;
    let Some(DriverEvent { kind: Some(driver_event::Kind::Granted(granted)) }) = first else {
        return Err(Error::Protocol("the head granted no driver lease".into()));
    };
    let stream = tokio::spawn(async move { while let Ok(Some(_)) = stream.message().await {} });
    Ok(Lease { id: granted.lease_id, stream })
}

/// How a reservation waits.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReserveOptions {
    /// The driver's lease (see [`open_lease`]).
    pub lease: u64,
    /// Wait for nodes to join when the alive cluster is too small, instead of refusing.
    pub(crate) wait_for_capacity: bool,
    /// Give up after this long (None: wait as long as it takes).
    pub timeout: Option<Duration>,
    /// An elastic group: a node's death shrinks it (its driver goes on with the workers left)
    /// instead of releasing it.
    pub(crate) elastic: bool,
}

/// How often a waiting reservation says what it waits for.
const WAIT_REPORT: Duration = Duration::from_secs(10);

/// Reserves `request`, waiting until it is reserved. While it waits it says, every few seconds,
/// what it waits for and who holds the cluster; after `options.timeout` it gives up with that.
pub(crate) async fn reserve(
    client: &mut Client,
    request: &PlacementRequest,
    options: &ReserveOptions,
) -> Result<ClusterReservation> {
    let request_json = serde_json::to_string(request).expect("request serialises");
    let message = ReserveRequest {
        request_json,
        lease_id: options.lease,
        wait_for_capacity: options.wait_for_capacity,
        if_free_now: false,
        elastic: options.elastic,
    };
    let mut asking = client.clone();
    let call = asking.reserve(message);
    tokio::pin!(call);
    let started = tokio::time::Instant::now();
    let deadline = options.timeout.map(|t| started + t);
    let mut report = tokio::time::interval_at(started + Duration::from_secs(2), WAIT_REPORT);
    let reply = loop {
        tokio::select! {
            reply = &mut call => break reply,
            _ = report.tick() => {
                let why = waiting_for(client, request).await;
                tracing::info!(
                    "{} has waited {:.0} s for its placement group: {why}",
                    request.label,
                    started.elapsed().as_secs_f64()
                );
            }
            _ = async { tokio::time::sleep_until(deadline.expect("checked")).await },
                if deadline.is_some() => {
                let why = waiting_for(client, request).await;
                return Err(Error::Protocol(format!(
                    "no placement for {} within {:?}: {why}",
                    request.label,
                    options.timeout.unwrap_or_default()
                )));
            }
        }
    };
    let reply = reply.map_err(|s| {
        if s.code() == tonic::Code::InvalidArgument {
            Error::config(
                Setting::Scaling,
                format!("the cluster cannot hold this worker group: {}", s.message()),
            )
        } else {
            status_error(s)
        }
    })?;
    reservation_of(reply.into_inner())
}

/// Reserves `request` if it fits the cluster's free room now and no other request waits for
/// room (they come first); None if not, at once.
pub(crate) async fn reserve_if_free(
    client: &mut Client,
    request: &PlacementRequest,
    options: &ReserveOptions,
) -> Result<Option<ClusterReservation>> {
    let message = ReserveRequest {
        request_json: serde_json::to_string(request).expect("request serialises"),
        lease_id: options.lease,
        wait_for_capacity: false,
        if_free_now: true,
        elastic: options.elastic,
    };
    match client.reserve(message).await {
        Ok(reply) => reservation_of(reply.into_inner()).map(Some),
        // No room now, or more than the alive cluster holds: not now, either way.
        Err(s)
            if matches!(
                s.code(),
                tonic::Code::ResourceExhausted | tonic::Code::InvalidArgument
            ) =>
        {
            Ok(None)
        }
        Err(s) => Err(status_error(s)),
    }
}

/// Reserves the most bundles of `request` in `sizes` (each its first bundle) that fit the
/// cluster's free room now, trying the largest first (see `reserve_if_free`): how many, and the
/// reservation; None if no size in `sizes` fits now.
pub(crate) async fn reserve_most_free(
    client: &mut Client,
    request: &PlacementRequest,
    sizes: std::ops::RangeInclusive<usize>,
    options: &ReserveOptions,
) -> Result<Option<(usize, ClusterReservation)>> {
    let mut asked = request.clone();
    for size in sizes.rev() {
        asked.bundles = vec![request.bundles[0].clone(); size];
        if let Some(r) = reserve_if_free(client, &asked, options).await? {
            return Ok(Some((size, r)));
        }
    }
    Ok(None)
}

/// The reservation a head's reply carries.
fn reservation_of(reply: crate::proto::ReserveReply) -> Result<ClusterReservation> {
    let reservation = serde_json::from_str(&reply.reservation_json)
        .map_err(|e| Error::Protocol(format!("reservation: {e}")))?;
    Ok(ClusterReservation {
        reservation,
        node_addresses: reply.node_addresses.into_iter().collect(),
    })
}

/// What a waiting `request` waits for, from the head's status: "2 × {CPU: 1} (SPREAD); 1 of
/// 2 CPU free on 1 alive node(s); held by: trial_3 (1 CPU)".
async fn waiting_for(client: &mut Client, request: &PlacementRequest) -> String {
    let want_cpu: f64 = request.bundles.iter().map(|b| b.cpu).sum();
    let want_gpu: f64 = request.bundles.iter().map(|b| b.gpu).sum();
    let mut text = format!(
        "{} bundle(s), {want_cpu} CPU and {want_gpu} GPU in all ({:?})",
        request.bundles.len(),
        request.strategy
    );
    let Ok(status) = status(client).await else {
        return text;
    };
    let alive: Vec<_> = status.nodes.iter().filter(|n| n.alive).collect();
    let free_cpu: f64 = alive.iter().map(|n| n.free.cpu).sum();
    let total_cpu: f64 = alive.iter().map(|n| n.total.cpu).sum();
    let free_gpu: f64 = alive.iter().map(|n| n.free.gpu).sum();
    text.push_str(&format!(
        "; {free_cpu} of {total_cpu} CPU and {free_gpu} GPU free on {} alive node(s)",
        alive.len()
    ));
    let holders: Vec<String> = status
        .groups
        .iter()
        .filter(|g| !matches!(g.state, crate::cluster::pool::GroupState::Pending { .. }))
        .map(|g| {
            let cpu: f64 =
                g.bundles.iter().filter(|b| b.placement.is_some()).map(|b| b.resources.cpu).sum();
            format!("{} ({cpu} CPU)", g.label)
        })
        .collect();
    if !holders.is_empty() {
        text.push_str(&format!("; held by: {}", holders.join(", ")));
    }
    text
}

pub(crate) async fn release(client: &mut Client, pg: PgId) -> Result<()> {
    client.release(ReleaseRequest { pg_id: pg.0 }).await.map_err(status_error)?;
    Ok(())
}

pub(crate) async fn start_worker(client: &mut Client, request: StartWorkerRequest) -> Result<()> {
    client.start_worker(request).await.map_err(status_error)?;
    Ok(())
}

pub(crate) async fn kill_worker(client: &mut Client, worker_id: String) -> Result<()> {
    client.kill_worker(KillWorkerRequest { worker_id }).await.map_err(status_error)?;
    Ok(())
}

/// The output and exits of `pg`'s workers, as they happen.
pub(crate) async fn watch(client: &mut Client, pg: PgId) -> Result<tonic::Streaming<WorkerEvent>> {
    Ok(client
        .watch_workers(WatchWorkersRequest { pg_id: pg.0 })
        .await
        .map_err(status_error)?
        .into_inner())
}
