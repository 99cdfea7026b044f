//! The worker's link to its driver: blocking gRPC calls (join, report, finish) from the training
//! thread, over a small runtime of its own, carrying the hub's token when it requires one. On the
//! driver's machine, reports go as frames over the hub's report socket instead (a write and a
//! read on the training thread, no runtime in between).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::worker::HUB_TOKEN_ENV;
use rtune_driver::error::{Error, Result};
use rtune_driver::proto::report_answer::Answer;
use rtune_driver::proto::worker_hub_client::WorkerHubClient;
use rtune_driver::proto::{
    FinishRequest, JoinReply, JoinRequest, RegroupReply, RegroupRequest, ReportAnswer, ReportHello,
    ReportReply, ReportRequest, WorkerKey,
};
use rtune_driver::rpc::{AddToken, UNIX_SCHEME, connect_abstract, frame, report_socket_name};
use rtune_driver::sys::build_id;

/// The worker's connection to its driver: blocking calls from the training thread.
type HubClient = WorkerHubClient<InterceptedService<Channel, AddToken>>;

pub(crate) struct DriverLink {
    runtime: tokio::runtime::Runtime,
    client: HubClient,
    key: WorkerKey,
    /// The hub's Unix socket, when it is on this machine.
    socket: Option<String>,
    token: Option<String>,
    /// Where reports go, opened at the first report.
    reports: Option<Reports>,
}

/// The way a worker's reports go to its driver, each answered before the next is sent.
enum Reports {
    /// Frames on the hub's report socket (a worker on the driver's machine).
    Socket(std::io::BufReader<std::os::unix::net::UnixStream>),
    /// The `Reports` stream: requests go in, replies come back.
    Stream(mpsc::Sender<ReportRequest>, Streaming<ReportReply>),
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
            match socket.clone() {
                Some(name) => {
                    let connect = tower::service_fn(move |_: tonic::transport::Uri| {
                        let stream = connect_abstract(&name).and_then(|s| {
                            s.set_nonblocking(true)?;
                            tokio::net::UnixStream::from_std(s)
                        });
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
        Ok(DriverLink { runtime, client, key, socket, token, reports: None })
    }

    /// Joins the attempt with this rank's collective listener address; answered once every
    /// rank has joined.
    pub(crate) fn join(&mut self, collective_address: String) -> Result<JoinReply> {
        let request = JoinRequest {
            key: Some(self.key.clone()),
            build_id: build_id::build_id().to_vec(),
            pid: std::process::id(),
            collective_address,
            hostname: rtune_driver::sys::hostname(),
            cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default(),
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

    /// Sends `request` as this rank's (its key set here); waits for the driver's answer.
    pub(crate) fn report(&mut self, mut request: ReportRequest) -> Result<ReportReply> {
        request.key = Some(self.key.clone());
        let reports = match self.reports.take() {
            Some(reports) => reports,
            None => self.open_reports()?,
        };
        let (reply, reports) = match reports {
            Reports::Socket(mut socket) => {
                (answered(frame::exchange(&mut socket, &request))?, Reports::Socket(socket))
            }
            Reports::Stream(tx, mut replies) => {
                let reply = self.call("report", async |_| {
                    tx.send(request)
                        .await
                        .map_err(|_| Status::unavailable("the report stream closed"))?;
                    replies
                        .message()
                        .await?
                        .ok_or_else(|| Status::unavailable("the driver ended the stream"))
                })?;
                (reply, Reports::Stream(tx, replies))
            }
        };
        self.reports = Some(reports);
        Ok(reply)
    }

    /// Opens the way reports go: the hub's report socket where it has one on this machine (it
    /// answers the hello, or refuses it without the right token), else the `Reports` stream.
    fn open_reports(&mut self) -> Result<Reports> {
        if let Some(name) = &self.socket {
            match connect_abstract(&report_socket_name(name)) {
                Ok(stream) => {
                    let hello = ReportHello { token: self.token.clone().unwrap_or_default() };
                    let mut socket = std::io::BufReader::new(stream);
                    let answer: ReportAnswer =
                        frame::exchange(&mut socket, &hello).map_err(report_failed)?;
                    return match answer.answer {
                        None => Ok(Reports::Socket(socket)),
                        Some(Answer::Error(why)) => Err(report_failed(why)),
                        Some(Answer::Reply(_)) => {
                            Err(report_failed("the driver answered the hello as a report"))
                        }
                    };
                }
                // A driver without a report socket: its stream does the same.
                Err(e) => tracing::debug!("no report socket ({e}); reports go over gRPC"),
            }
        }
        self.call("report", async |c| {
            // One message in flight at most: the reply comes before the next report.
            let (tx, rx) = mpsc::channel(1);
            let replies = c.reports(ReceiverStream::new(rx)).await?.into_inner();
            Ok(Reports::Stream(tx, replies))
        })
    }

    /// Asks to re-form an elastic group after a lost rank, with the steps this rank completed
    /// and its new collective listener; answered once every live rank has asked.
    pub(crate) fn regroup(
        &mut self,
        steps_done: u64,
        collective_address: String,
    ) -> Result<RegroupReply> {
        let key = Some(self.key.clone());
        let request = RegroupRequest { key, steps_done, collective_address };
        self.call("regroup", async |c| Ok(c.regroup(request).await?.into_inner()))
    }

    pub(crate) fn finish(&mut self, request: FinishRequest) -> Result<()> {
        self.call("finish", async |c| c.finish(request).await.map(drop))
    }
}

/// The driver's answer to a report on the report socket, as the worker's result.
fn answered(answer: std::io::Result<ReportAnswer>) -> Result<ReportReply> {
    match answer.map_err(report_failed)?.answer {
        Some(Answer::Reply(reply)) => Ok(reply),
        Some(Answer::Error(why)) => Err(report_failed(why)),
        None => Err(report_failed("the driver answered a report with neither reply nor error")),
    }
}

fn report_failed(why: impl std::fmt::Display) -> Error {
    Error::Protocol(format!("report (worker to driver): {why}"))
}
