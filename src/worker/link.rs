//! The worker's link to its driver: blocking gRPC calls (join, report, finish) from the training
//! thread, over a small runtime of its own, carrying the hub's token when it requires one.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::error::{Error, Result};
use crate::proto::worker_hub_client::WorkerHubClient;
use crate::proto::{FinishRequest, JoinReply, JoinRequest, ReportReply, ReportRequest, WorkerKey};
use crate::rpc::{AddToken, UNIX_SCHEME};
use crate::sys::build_id;
use crate::worker::HUB_TOKEN_ENV;

/// The worker's connection to its driver: blocking calls from the training thread.
type HubClient = WorkerHubClient<InterceptedService<Channel, AddToken>>;

pub(crate) struct DriverLink {
    runtime: tokio::runtime::Runtime,
    client: HubClient,
    key: WorkerKey,
    /// The report stream, opened at the first report: requests go in, replies come back.
    reports: Option<(mpsc::Sender<ReportRequest>, Streaming<ReportReply>)>,
}

impl DriverLink {
    fn call<T>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&mut HubClient) -> std::result::Result<T, tonic::Status>,
    ) -> Result<T> {
        let client = &mut self.client;
        self.runtime
            .block_on(f(client))
            .map_err(|s| Error::Protocol(format!("{what} (worker to driver): {}", s.message())))
    }

    /// Connects to the hub at `hub` (a URL) as the worker `key`.
    pub(crate) fn connect(hub: &str, key: WorkerKey) -> Result<DriverLink> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Worker(format!("tokio runtime: {e}")))?;
        // The hub's abstract Unix socket (for workers on its machine) or a URL.
        let socket = hub.strip_prefix(UNIX_SCHEME).map(str::to_owned);
        let url = if socket.is_some() { "http://localhost" } else { hub };
        let endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())
            .map_err(|e| Error::Protocol(format!("bad hub address {hub}: {e}")))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true);
        let token = std::env::var(HUB_TOKEN_ENV).ok();
        let auth = AddToken::bearer(token.as_deref())?;
        let connected = runtime.block_on(async {
            match socket {
                Some(name) => {
                    let connect = tower::service_fn(move |_: tonic::transport::Uri| {
                        let stream = connect_abstract(&name);
                        async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream?)) }
                    });
                    endpoint.connect_with_connector(connect).await
                }
                None => endpoint.connect().await,
            }
        });
        let client = connected
            .map(|channel| WorkerHubClient::with_interceptor(channel, auth))
            .map_err(|e| Error::Protocol(format!("cannot reach the driver at {hub}: {e}")))?;
        Ok(DriverLink { runtime, client, key, reports: None })
    }

    /// Joins the attempt with this rank's collective listener address; answered once every
    /// rank has joined.
    pub(crate) fn join(&mut self, collective_address: String) -> Result<JoinReply> {
        let request = JoinRequest {
            key: Some(self.key.clone()),
            build_id: build_id::build_id().to_vec(),
            pid: std::process::id(),
            collective_address,
            hostname: String::new(),
        };
        self.call("join", async |c| Ok(c.join(request).await?.into_inner()))
    }

    pub(crate) fn key(&self) -> &WorkerKey {
        &self.key
    }

    /// The attempt of the run this worker belongs to.
    pub(crate) fn attempt(&self) -> u32 {
        self.key.attempt
    }

    pub(crate) fn report(
        &mut self,
        seq: u64,
        metrics_json: String,
        checkpoint: String,
    ) -> Result<ReportReply> {
        let request = ReportRequest { key: Some(self.key.clone()), seq, metrics_json, checkpoint };
        let mut reports = self.reports.take();
        let reply = self.call("report", async |c| {
            if reports.is_none() {
                // One message in flight at most: the reply comes before the next report.
                let (tx, rx) = mpsc::channel(1);
                let replies = c.reports(ReceiverStream::new(rx)).await?.into_inner();
                reports = Some((tx, replies));
            }
            let (tx, replies) = reports.as_mut().expect("opened above");
            tx.send(request).await.map_err(|_| Status::unavailable("the report stream closed"))?;
            replies
                .message()
                .await?
                .ok_or_else(|| Status::unavailable("the driver ended the stream"))
        })?;
        self.reports = reports;
        Ok(reply)
    }

    pub(crate) fn finish(&mut self, request: FinishRequest) -> Result<()> {
        self.call("finish", async |c| c.finish(request).await.map(drop))
    }
}

/// Connects to the abstract Unix socket `name` (at once: a local connect does not wait).
fn connect_abstract(name: &str) -> std::io::Result<tokio::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let at = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let stream = std::os::unix::net::UnixStream::connect_addr(&at)?;
    stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(stream)
}
