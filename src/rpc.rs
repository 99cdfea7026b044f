//! gRPC plumbing shared by the head, the node agent, the driver's worker hub and the workers: a
//! server that runs until dropped, the reply-owner pattern (one task owns some state; gRPC
//! handlers only ask it), and the cluster token on both sides of a call. A leaf: no protocol
//! knowledge beyond tonic's.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Status};

use crate::error::{Error, Result};

/// Where the owner of some state puts its answer to one call.
pub(crate) type Reply<T> = oneshot::Sender<std::result::Result<T, Status>>;

/// Why an owner gave no answer.
pub(crate) enum Unanswered {
    /// The message never reached it (it is gone).
    NotDelivered,
    /// It dropped the reply slot (it ended while the call waited).
    Dropped,
}

/// Hands `make(reply)` to the task that owns the state behind `owner` and waits for its
/// answer; `gone` turns a missing answer into the caller's status.
pub(crate) async fn ask<M, T>(
    owner: &mpsc::UnboundedSender<M>,
    make: impl FnOnce(Reply<T>) -> M,
    gone: impl Fn(Unanswered) -> Status,
) -> std::result::Result<T, Status> {
    let (reply, answer) = oneshot::channel();
    owner.send(make(reply)).map_err(|_| gone(Unanswered::NotDelivered))?;
    answer.await.map_err(|_| gone(Unanswered::Dropped))?
}

/// How a server address names an abstract Unix socket (Linux): `unix:@NAME`.
pub(crate) const UNIX_SCHEME: &str = "unix:@";

/// Serves `routes` on `listener` in the background until the returned sender is dropped. With
/// `keepalive`, HTTP/2 pings every that long drop a connection whose peer stops answering for as
/// long (a host that died without closing its sockets), which ends its streams.
pub(crate) fn serve_until_dropped(
    routes: tonic::service::Routes,
    listener: tokio::net::TcpListener,
    what: &'static str,
    keepalive: Option<Duration>,
) -> oneshot::Sender<()> {
    // Small request/reply messages (a worker's report waits for its answer): without nodelay,
    // Nagle's algorithm holds each reply back for the peer's delayed ACK.
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |stream| {
            stream.inspect(|s| {
                let _ = s.set_nodelay(true);
            })
        },
    );
    serve_incoming_until_dropped(routes, incoming, what, keepalive)
}

/// The same on a Unix socket (for processes on this machine: no TCP/IP stack on the way).
pub(crate) fn serve_unix_until_dropped(
    routes: tonic::service::Routes,
    listener: tokio::net::UnixListener,
    what: &'static str,
) -> oneshot::Sender<()> {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    serve_incoming_until_dropped(routes, incoming, what, None)
}

fn serve_incoming_until_dropped<IO>(
    routes: tonic::service::Routes,
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    what: &'static str,
    keepalive: Option<Duration>,
) -> oneshot::Sender<()>
where
    IO: tonic::transport::server::Connected
        + tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + Unpin
        + Send
        + 'static,
{
    let (shutdown, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let serve = tonic::transport::Server::builder()
            .http2_keepalive_interval(keepalive)
            .http2_keepalive_timeout(keepalive)
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        if let Err(e) = serve.await {
            tracing::error!("{what} stopped: {e}");
        }
    });
    shutdown
}

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct AddToken(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl AddToken {
    /// Adds `token` (nothing when None or empty).
    pub fn bearer(token: Option<&str>) -> Result<AddToken> {
        match token.filter(|t| !t.is_empty()) {
            Some(t) => Ok(AddToken(Some(format!("Bearer {t}").parse().map_err(|_| {
                Error::config("cluster token", "contains characters a header cannot carry")
            })?))),
            None => Ok(AddToken(None)),
        }
    }
}

impl tonic::service::Interceptor for AddToken {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Server side of the cluster token: a head with a token refuses calls without it.
pub(crate) fn check_token(
    request: tonic::Request<()>,
    token: Option<&str>,
) -> std::result::Result<tonic::Request<()>, tonic::Status> {
    match presented(&request, token) {
        Presented::Right => Ok(request),
        Presented::Wrong => Err(tonic::Status::unauthenticated(
            "the head refused it; use the token `rtune head` printed (--token or RTUNE_TOKEN)",
        )),
        Presented::Missing => Err(tonic::Status::unauthenticated(
            "none given, but this head requires one; pass the token `rtune head` printed \
             (--token or RTUNE_TOKEN)",
        )),
    }
}

/// Server side of a worker hub's token: only the workers its driver started (which got the
/// token in their environment) may call it.
pub(crate) fn check_hub_token(
    request: tonic::Request<()>,
    token: Option<&str>,
) -> std::result::Result<tonic::Request<()>, tonic::Status> {
    require(request, token, "this worker hub only serves the workers its driver started")
}

/// Server side of a sweep's watch token (from `driver.json`, readable by its owner only).
pub(crate) fn check_watch_token(
    request: tonic::Request<()>,
    token: Option<&str>,
) -> std::result::Result<tonic::Request<()>, tonic::Status> {
    require(request, token, "this sweep serves whoever can read its driver.json")
}

/// `request` if it carries `token` (or none is required), else refused with `who`.
fn require(
    request: tonic::Request<()>,
    token: Option<&str>,
    who: &str,
) -> std::result::Result<tonic::Request<()>, tonic::Status> {
    match presented(&request, token) {
        Presented::Right => Ok(request),
        Presented::Wrong | Presented::Missing => {
            Err(tonic::Status::unauthenticated(format!("{who} (wrong or no token)")))
        }
    }
}

enum Presented {
    /// The right token, or none is required.
    Right,
    Wrong,
    Missing,
}

fn presented(request: &tonic::Request<()>, token: Option<&str>) -> Presented {
    let Some(token) = token.filter(|t| !t.is_empty()) else { return Presented::Right };
    let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
    match given.and_then(|v| v.strip_prefix("Bearer ")) {
        Some(t) if constant_time_eq(t.as_bytes(), token.as_bytes()) => Presented::Right,
        Some(_) => Presented::Wrong,
        None => Presented::Missing,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh random cluster token (128 bits, hex).
pub fn new_token() -> String {
    format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}
