//! `rtune serve`: an exported model behind the Open Inference Protocol (KServe v2, Triton's),
//! over HTTP/JSON ([`http`]) and gRPC ([`grpc`]), with the same inputs, outputs and refusals
//! on both ([`protocol`]). Requests go to the replica with the fewest in flight; each replica
//! batches the requests that arrive together ([`batch`]); a full queue is answered at once
//! (503, RESOURCE_EXHAUSTED), never queued without end. SIGTERM (or Ctrl-C) stops taking
//! requests, answers those in flight and returns.
//!
//! What predicts is the caller's ([`Engine`], loaded per replica): this module sees no tensor.

mod batch;
mod grpc;
mod http;
pub mod protocol;
mod stats;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use batch::{Batching, Engine, Load};
pub use protocol::{Model, TensorSpec};

use batch::Replicas;
use protocol::{Answer, Code, Input, Refusal, Rows};
use stats::Stats;

use crate::error::{Error, Result};

/// How a server listens, batches and limits.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// HTTP's `HOST:PORT` (port 0: any free one).
    pub http: String,
    /// gRPC's `HOST:PORT`.
    pub grpc: String,
    /// Needed off loopback: clients send it as a bearer token.
    pub token: Option<String>,
    pub replicas: usize,
    pub batching: Batching,
    pub limits: Limits,
    /// A line of throughput and latency this often while requests come (None: never).
    pub report_every: Option<Duration>,
}

/// What a request may take.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A request body's bytes (HTTP's body, gRPC's message).
    pub max_body_bytes: usize,
    /// From arrival to answer.
    pub request_timeout: Duration,
}

/// What both fronts share: the model, its replicas, the counts, and whether it is stopping.
pub(crate) struct Front {
    model: Arc<Model>,
    replicas: Replicas,
    stats: Arc<Stats>,
    limits: Limits,
    token: Option<String>,
    draining: AtomicBool,
    /// Requests a front is answering now.
    active: AtomicUsize,
}

/// Counts a request as active while it lives.
pub(crate) struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the server metadata says of rtune: its name, version and the protocol's extensions
/// it answers.
const EXTENSIONS: [&str; 1] = ["binary_tensor_data"];

impl Front {
    fn active(&self) -> Active<'_> {
        self.active.fetch_add(1, Ordering::SeqCst);
        Active(&self.active)
    }

    /// Once no front is answering a request.
    async fn idle(&self) {
        while self.active.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn ready(&self) -> bool {
        !self.draining.load(Ordering::SeqCst)
    }

    fn refuse_when_draining(&self) -> std::result::Result<(), Refusal> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(Refusal::new(Code::Draining, "the server is stopping: send it elsewhere"));
        }
        Ok(())
    }

    /// Seconds a refused client waits before it tries again (Retry-After's least).
    fn retry_after_s(&self) -> u64 {
        1
    }

    fn server(&self) -> (&'static str, &'static str, &'static [&'static str]) {
        ("rtune", env!("CARGO_PKG_VERSION"), &EXTENSIONS)
    }

    fn server_metadata(&self) -> serde_json::Value {
        let (name, version, extensions) = self.server();
        serde_json::json!({ "name": name, "version": version, "extensions": extensions })
    }

    /// The token check of a request whose authorization (HTTP header, gRPC metadata) is
    /// `given`.
    fn check_token(&self, given: Option<&str>) -> std::result::Result<(), Refusal> {
        let Some(token) = &self.token else { return Ok(()) };
        if given.and_then(|g| g.strip_prefix("Bearer ")) == Some(token.as_str()) {
            return Ok(());
        }
        Err(Refusal::new(
            Code::Unauthorized,
            "this server needs its token as a bearer token (authorization: Bearer TOKEN)",
        ))
    }

    /// A request's inputs predicted by a replica, within the request's deadline.
    async fn infer(
        &self,
        name: &str,
        version: &str,
        inputs: Vec<Input>,
    ) -> std::result::Result<Answer, Refusal> {
        self.refuse_when_draining()?;
        self.model.check_name(name, version)?;
        let rows = Rows::from_inputs(&self.model.schema, inputs)?;
        if rows.count == 0 {
            return Err(Refusal::bad("the request has no rows"));
        }
        let timeout = self.limits.request_timeout;
        let answer = self.replicas.submit(rows, timeout)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(Refusal::new(
                Code::Internal,
                "the replica ended before it answered (it is started again): retry",
            )),
            Err(_) => Err(Refusal::new(
                Code::Timeout,
                format!("no answer within {} s (--request-timeout)", timeout.as_secs_f64()),
            )),
        }
    }
}

/// Where a running server listens.
#[derive(Debug, Clone, Copy)]
pub struct Listening {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
}

fn listener(
    address: &str,
    token: Option<&str>,
    flag: &'static str,
) -> Result<std::net::TcpListener> {
    let at = crate::monitor::check_address(address, token).map_err(|why| {
        let cluster_token = format!("the cluster token ({})", crate::config::TOKEN_ENV);
        let why = why.replace(&cluster_token, "a token (--token or $RTUNE_TOKEN)");
        Error::config(flag, why.replace("scrapers", "clients"))
    })?;
    let listener = std::net::TcpListener::bind(at)
        .map_err(|e| Error::config(flag, format!("is {address:?}: cannot listen there: {e}")))?;
    listener.set_nonblocking(true).map_err(|e| Error::io(flag, e))?;
    Ok(listener)
}

/// Serves `model` (each replica's loaded by `load`) until SIGTERM or Ctrl-C; `started` is
/// told where it listens once every replica is ready. Returns once the requests in flight
/// are answered.
pub fn serve(
    config: ServeConfig,
    model: Model,
    load: Load,
    started: impl FnOnce(Listening),
) -> Result<()> {
    let token = config.token.clone().filter(|t| !t.is_empty());
    let http = listener(&config.http, token.as_deref(), "--http")?;
    let grpc = listener(&config.grpc, token.as_deref(), "--grpc")?;
    let listening = Listening {
        http: http.local_addr().map_err(|e| Error::io("--http", e))?,
        grpc: grpc.local_addr().map_err(|e| Error::io("--grpc", e))?,
    };
    let model = Arc::new(model);
    let stats = Arc::new(Stats::new(&model.name));
    let replicas = Replicas::start(
        config.replicas.max(1),
        model.clone(),
        load,
        config.batching,
        stats.clone(),
    )?;
    let front = Arc::new(Front {
        model,
        replicas,
        stats,
        limits: config.limits.clone(),
        token,
        draining: AtomicBool::new(false),
        active: AtomicUsize::new(0),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rtune-serve")
        .enable_all()
        .build()
        .map_err(|e| Error::io("the server's runtime", e))?;
    runtime.block_on(run(front.clone(), http, grpc, config.report_every, listening, started))?;
    drop(runtime);
    match Arc::try_unwrap(front) {
        Ok(front) => front.replicas.stop(),
        Err(_) => tracing::debug!("a front still holds the replicas; they end with the process"),
    }
    Ok(())
}

async fn run(
    front: Arc<Front>,
    http: std::net::TcpListener,
    grpc: std::net::TcpListener,
    report_every: Option<Duration>,
    listening: Listening,
    started: impl FnOnce(Listening),
) -> Result<()> {
    let http = tokio::net::TcpListener::from_std(http).map_err(|e| Error::io("--http", e))?;
    let grpc = tokio::net::TcpListener::from_std(grpc).map_err(|e| Error::io("--grpc", e))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let http_task = tokio::spawn(serve_http(front.clone(), http, stopped.clone()));
    let service = pb_server(front.clone());
    let mut grpc_stopped = stopped.clone();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc);
    let grpc_task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = grpc_stopped.wait_for(|s| *s).await;
        };
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
    });
    let reporter = report_every.map(|every| {
        let (front, mut stopped) = (front.clone(), stopped.clone());
        tokio::spawn(async move {
            let mut since = Instant::now();
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                let last = tokio::select! {
                    _ = tick.tick() => false,
                    _ = stopped.wait_for(|s| *s) => true,
                };
                if last {
                    // What came after the last line, once every request is answered.
                    front.idle().await;
                }
                if let Some(line) = front.stats.line(since, &front.replicas.in_flight()) {
                    eprintln!("{line}");
                }
                if last {
                    break;
                }
                since = Instant::now();
            }
        })
    });
    started(listening);
    wait_for_signal().await;
    // No new requests; those in flight are answered.
    front.draining.store(true, Ordering::SeqCst);
    let _ = stop.send(true);
    let patience = front.limits.request_timeout + Duration::from_secs(1);
    let drained = tokio::time::timeout(patience, front.idle()).await;
    if drained.is_err() {
        tracing::warn!("requests still in flight after {patience:?}; stopping without them");
    }
    http_task.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), grpc_task).await;
    if let Some(reporter) = reporter {
        let _ = tokio::time::timeout(Duration::from_secs(1), reporter).await;
    }
    Ok(())
}

fn pb_server(
    front: Arc<Front>,
) -> crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer<grpc::Service>
{
    let limit = front.limits.max_body_bytes;
    crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer::new(
        grpc::Service(front),
    )
    .max_decoding_message_size(limit)
    .max_encoding_message_size(usize::MAX)
}

async fn serve_http(
    front: Arc<Front>,
    listener: tokio::net::TcpListener,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!("rtune serve (http): {e}");
                    continue;
                }
            },
            _ = stopped.wait_for(|s| *s) => break,
        };
        let _ = stream.set_nodelay(true);
        let front = front.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request| http::answer(front.clone(), request));
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) =
                hyper::server::conn::http1::Builder::new().serve_connection(io, service).await
            {
                tracing::debug!("rtune serve (http): {e}");
            }
        });
    }
}

/// Until SIGTERM or SIGINT.
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
