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
pub const UNIX_SCHEME: &str = "unix:@";

/// Connects to the abstract Unix socket `name` (at once: a local connect does not wait).
pub fn connect_abstract(name: &str) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let at = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    std::os::unix::net::UnixStream::connect_addr(&at)
}

/// The name of the report socket of the worker hub whose Unix socket is `name`.
pub fn report_socket_name(name: &str) -> String {
    format!("{name}/reports")
}

/// Serves `routes` on `listener` in the background until the returned sender is dropped. With
/// `keepalive`, HTTP/2 pings every that long drop a connection whose peer stops answering for as
/// long (a host that died without closing its sockets), which ends its streams.
pub fn serve_until_dropped(
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
    require(request, token, HUB_ONLY)
}

/// Why a worker hub refuses a call without its token.
pub(crate) const HUB_ONLY: &str = "this worker hub only serves the workers its driver started";

/// Server side of a sweep's watch token (from `driver.json`, readable by its owner only).
pub fn check_watch_token(
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

/// Whether `given` is the token a server requires (anything goes where it requires none).
pub(crate) fn token_matches(given: &str, required: Option<&str>) -> bool {
    required
        .filter(|t| !t.is_empty())
        .is_none_or(|t| constant_time_eq(given.as_bytes(), t.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh random cluster token (128 bits, hex).
pub fn new_token() -> String {
    format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}

/// Length-prefixed protobuf messages on a stream socket, where a message each way must cost no
/// more than a write and a read: a frame is a u32 (little-endian) length, then the encoded
/// message. The blocking side is the worker's training thread; the async side the driver.
pub mod frame {
    use std::io::{self, Read, Write};

    /// A frame longer than this is refused (a report is a few hundred bytes).
    const MAX_LEN: usize = 16 << 20;

    fn encode(message: &impl prost::Message) -> Vec<u8> {
        let len = message.encoded_len();
        let mut buf = Vec::with_capacity(4 + len);
        buf.extend_from_slice(&(len as u32).to_le_bytes());
        message.encode(&mut buf).expect("a Vec grows as needed");
        buf
    }

    fn length(header: [u8; 4]) -> io::Result<usize> {
        let len = u32::from_le_bytes(header) as usize;
        if len > MAX_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame of {len} bytes (at most {MAX_LEN})"),
            ));
        }
        Ok(len)
    }

    fn decode<M: prost::Message + Default>(body: &[u8]) -> io::Result<M> {
        M::decode(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Writes `message` as one frame.
    pub fn write(to: &mut impl Write, message: &impl prost::Message) -> io::Result<()> {
        to.write_all(&encode(message))
    }

    /// Reads one frame (an error at end of stream).
    pub fn read<M: prost::Message + Default>(from: &mut impl Read) -> io::Result<M> {
        let mut header = [0; 4];
        from.read_exact(&mut header)?;
        let mut body = vec![0; length(header)?];
        from.read_exact(&mut body)?;
        decode(&body)
    }

    /// Writes `message` as one frame on `stream` and reads the frame that answers it (the
    /// reader's buffer holds nothing unread between exchanges: every frame is answered).
    ///
    /// It waits for the answer in `poll` for input, not in a blocking read: a Unix stream
    /// socket's reader blocked in `recv` is woken each time the peer reads what it wrote (the
    /// kernel's "write space" wake-up does not say what it is for), which cost a context switch
    /// per exchange; `poll` sleeps through wake-ups for other than input.
    pub fn exchange<A, S>(
        stream: &mut io::BufReader<S>,
        message: &impl prost::Message,
    ) -> io::Result<A>
    where
        A: prost::Message + Default,
        S: Read + Write + std::os::fd::AsFd,
    {
        write(stream.get_mut(), message)?;
        wait_readable(stream.get_ref().as_fd())?;
        read(stream)
    }

    /// Sleeps until `fd` has input (or is closed, or failed).
    fn wait_readable(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        loop {
            // SAFETY: one valid pollfd, for a descriptor borrowed for the whole call.
            if unsafe { libc::poll(&mut poll, 1, -1) } >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// The first frame in `unread` and the bytes it took; None while it is not all there.
    fn parse<M: prost::Message + Default>(unread: &[u8]) -> io::Result<Option<(M, usize)>> {
        let Some(header) = unread.first_chunk::<4>() else { return Ok(None) };
        let end = 4 + length(*header)?;
        match unread.get(4..end) {
            Some(body) => Ok(Some((decode(body)?, end))),
            None => Ok(None),
        }
    }

    /// The answering side of a connection on which every frame read is answered before the
    /// next comes (the driver's side of a worker's report socket). It is woken for input only:
    /// registered for output too, it would be woken each time the peer read an answer, for
    /// nothing. Answers are written at once; there is room for them, since the peer reads each
    /// before it writes again.
    pub(crate) struct Answering {
        socket: tokio::io::unix::AsyncFd<std::os::unix::net::UnixStream>,
        unread: Vec<u8>,
    }

    impl Answering {
        pub fn new(socket: tokio::net::UnixStream) -> io::Result<Self> {
            let socket = socket.into_std()?;
            let interest = tokio::io::Interest::READABLE;
            // SAFETY: the socket is owned by the AsyncFd, whose field it stays (never replaced)
            // until both are dropped: its descriptor stays open and the same all along.
            let socket =
                unsafe { tokio::io::unix::AsyncFd::register_with_interest(socket, interest) }
                    .map_err(|e| e.into_parts().1)?;
            Ok(Answering { socket, unread: Vec::new() })
        }

        /// Reads the next frame; None at the end of the stream before a frame starts.
        pub async fn read<M: prost::Message + Default>(&mut self) -> io::Result<Option<M>> {
            let mut chunk = [0; 4096];
            loop {
                if let Some((message, used)) = parse(&self.unread)? {
                    self.unread.drain(..used);
                    return Ok(Some(message));
                }
                let mut ready = self.socket.readable().await?;
                let read = { ready.get_inner() }.read(&mut chunk);
                match read {
                    Ok(0) if self.unread.is_empty() => return Ok(None),
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => {
                        self.unread.extend_from_slice(&chunk[..n]);
                        // A short read drained the socket: forget its readiness now rather
                        // than learn it from a read that fails with WouldBlock (a system
                        // call per report, since the peer writes only once answered). Input
                        // that came since is not missed: tokio clears only the readiness this
                        // guard saw, not newer.
                        if n < chunk.len() {
                            ready.clear_ready();
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }

        /// Writes `message` as one frame, at once.
        pub fn answer(&self, message: &impl prost::Message) -> io::Result<()> {
            write(&mut self.socket.get_ref(), message).map_err(|e| {
                if e.kind() == io::ErrorKind::WouldBlock {
                    io::Error::other("the peer does not read its answers")
                } else {
                    e
                }
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::proto::{ReportRequest, WorkerKey};

        /// Frames written by either side read back whole on the other, in order (also when they
        /// come in pieces), and a length beyond the limit is refused rather than allocated.
        #[tokio::test]
        async fn frames_cross_between_the_blocking_and_the_async_side() {
            let request = |seq| ReportRequest {
                key: Some(WorkerKey { group: "g".into(), attempt: 1, rank: 0 }),
                seq,
                metrics_json: r#"{"loss":0.5}"#.into(),
                checkpoint: String::new(),
                uploaded: Vec::new(),
                times: None,
                joinable: false,
            };
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            ours.set_nonblocking(true).unwrap();
            let mut ours = Answering::new(tokio::net::UnixStream::from_std(ours).unwrap()).unwrap();
            let peer = std::thread::spawn(move || {
                let mut theirs = io::BufReader::new(theirs);
                let answer: ReportRequest = exchange(&mut theirs, &request(1)).unwrap();
                // A frame in two pieces, the second after a pause.
                let mut wire = Vec::new();
                write(&mut wire, &request(3)).unwrap();
                theirs.get_mut().write_all(&wire[..7]).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                theirs.get_mut().write_all(&wire[7..]).unwrap();
                (answer, read::<ReportRequest>(&mut theirs).unwrap())
            });
            assert_eq!(ours.read::<ReportRequest>().await.unwrap(), Some(request(1)));
            ours.answer(&request(2)).unwrap();
            assert_eq!(ours.read::<ReportRequest>().await.unwrap(), Some(request(3)));
            ours.answer(&request(4)).unwrap();
            assert_eq!(peer.join().unwrap(), (request(2), request(4)));
            assert_eq!(ours.read::<ReportRequest>().await.unwrap(), None);

            let huge = (MAX_LEN as u32 + 1).to_le_bytes();
            let error = read::<ReportRequest>(&mut huge.as_slice()).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
            let error = parse::<ReportRequest>(&huge).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        }
    }
}
