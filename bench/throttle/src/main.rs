//! A throttling TCP proxy for the benchmark suite:
//!
//!     throttle --listen 127.0.0.1:0 --upstream 127.0.0.1:PORT --rate-mb 25 --delay-ms 20
//!
//! prints the address it listens on as its first line of stdout, then relays every connection
//! it accepts to `--upstream`. Each direction of each connection is a link of its own: a token
//! bucket of `--rate-mb` MB/s (10^6 bytes; 0: no cap; `--up-rate-mb`, if given, for the
//! direction from the client to upstream) with a 64 KiB burst, and every byte is
//! delivered `--delay-ms / 2` after the link has carried it, so that a request and its answer
//! gain `--delay-ms` of round trip. The delay is a queue of timestamped chunks, not a sleep:
//! reading goes on while earlier chunks wait for their time.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::sleep_until;

/// One read: up to this many bytes.
const BUFFER: usize = 256 << 10;
/// The token bucket's depth, and the pieces a chunk is written in.
const BURST: usize = 64 << 10;
/// Reading stops while this many bytes wait to be written (a slow receiver).
const MAX_QUEUED: usize = 8 << 20;

/// See `wait`.
const TIMER_SLACK: Duration = Duration::from_millis(1);

#[derive(Clone, Copy)]
struct Link {
    /// Bytes per second; infinite with no cap.
    rate: f64,
    /// Half the round-trip delay: from carried to delivered, one way.
    half_delay: Duration,
}

impl Link {
    fn carry(&self, bytes: usize) -> Duration {
        if self.rate.is_finite() {
            Duration::from_secs_f64(bytes as f64 / self.rate)
        } else {
            Duration::ZERO
        }
    }
}

/// Bytes read at `read`, waiting to be written: `buf[sent..len]`, its byte `i` due at
/// `max(start + carry(i + 1), read) + half_delay` (the bucket's credit speeds bytes up, never
/// ahead of the delay).
struct Chunk {
    buf: Vec<u8>,
    len: usize,
    sent: usize,
    start: Instant,
    read: Instant,
}

/// Relays `r` to `w` through `link` until `r` ends (then shuts `w`'s side down) or either fails.
async fn pipe(mut r: OwnedReadHalf, mut w: OwnedWriteHalf, link: Link) -> io::Result<()> {
    let mut queue: VecDeque<Chunk> = VecDeque::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut rbuf = vec![0u8; BUFFER];
    let mut queued = 0usize;
    let mut eof = false;
    // When the link has carried everything read so far.
    let mut free = Instant::now();
    loop {
        if eof && queue.is_empty() {
            return w.shutdown().await;
        }
        let can_read = !eof && queued < MAX_QUEUED;
        // The head chunk's next piece: the bytes up to `piece_end` and when they are due.
        let due = queue.front().map(|c| {
            let piece_end = (c.sent + BURST).min(c.len);
            ((c.start + link.carry(piece_end)).max(c.read) + link.half_delay, c)
        });
        tokio::select! {
            // Reads wait while the link is busy (no tokens left): the sender meets TCP's
            // back-pressure, as on a slow link.
            got = async {
                wait(free).await;
                r.read(&mut rbuf).await
            }, if can_read => {
                let n = match got {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                    Err(e) => return Err(e),
                };
                if n == 0 {
                    eof = true;
                    continue;
                }
                let now = Instant::now();
                // A token bucket of BURST bytes: the link may have saved up to BURST of credit.
                let start = free.max(now.checked_sub(link.carry(BURST)).unwrap_or(now));
                free = start + link.carry(n);
                // A short read is copied out (a whole buffer for it would hold 256 KiB a few
                // bytes at a time); a long one takes the buffer, and reading goes on in a spare.
                let buf = if n < BUFFER / 4 {
                    rbuf[..n].to_vec()
                } else {
                    let next = spare.pop().unwrap_or_else(|| vec![0u8; BUFFER]);
                    std::mem::replace(&mut rbuf, next)
                };
                queue.push_back(Chunk { buf, len: n, sent: 0, start, read: now });
                queued += n;
            }
            wrote = async {
                let (due, c) = due.unwrap();
                wait(due).await;
                // Every byte due by now, in whole pieces (the last piece may be short).
                let since = Instant::now().saturating_duration_since(c.start + link.half_delay);
                let mut end = if link.rate.is_finite() {
                    ((since.as_secs_f64() * link.rate) as usize).min(c.len)
                } else {
                    c.len
                };
                end = end.max((c.sent + BURST).min(c.len));
                w.write(&c.buf[c.sent..end]).await
            }, if due.is_some() => {
                let n = wrote?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                let c = queue.front_mut().unwrap();
                c.sent += n;
                queued -= n;
                if c.sent == c.len {
                    let buf = queue.pop_front().unwrap().buf;
                    if buf.len() == BUFFER && spare.len() < MAX_QUEUED / BUFFER {
                        spare.push(buf);
                    }
                }
            }
        }
    }
}

/// Sleeps until about `until`: tokio's timer wakes on a millisecond tick after its deadline, so
/// the deadline is taken up to TIMER_SLACK early (at most half the wait) to centre the wake-up
/// on `until`.
async fn wait(until: Instant) {
    let now = Instant::now();
    if until > now {
        let left = until - now;
        sleep_until((until - TIMER_SLACK.min(left / 2)).into()).await;
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, up: Link, down: Link) -> io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pipe(cr, sw, up));
    let down = tokio::spawn(pipe(sr, cw, down));
    let _ = up.await;
    let _ = down.await;
    Ok(())
}

fn usage() -> ! {
    eprintln!(
        "usage: throttle --listen ADDR --upstream ADDR [--rate-mb MB_PER_S] [--up-rate-mb \
         MB_PER_S] [--delay-ms MS]\n(a cap of MB_PER_S x 10^6 bytes/s per connection and \
         direction, 0 for none; --up-rate-mb: from the client to upstream, if not --rate-mb; \
         MS of round trip)"
    );
    std::process::exit(2)
}

fn rate(mb: f64) -> f64 {
    if mb > 0.0 { mb * 1e6 } else { f64::INFINITY }
}

#[tokio::main]
async fn main() -> io::Result<()> {
    let mut listen: Option<String> = None;
    let mut upstream: Option<String> = None;
    let (mut rate_mb, mut up_rate_mb, mut delay_ms) = (0f64, None, 0f64);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        let number = || value.parse::<f64>().ok().filter(|x| *x >= 0.0).unwrap_or_else(|| usage());
        match flag.as_str() {
            "--listen" => listen = Some(value.clone()),
            "--upstream" => upstream = Some(value.clone()),
            "--rate-mb" => rate_mb = number(),
            "--up-rate-mb" => up_rate_mb = Some(number()),
            "--delay-ms" => delay_ms = number(),
            _ => usage(),
        }
    }
    let (Some(listen), Some(upstream)) = (listen, upstream) else { usage() };
    let upstream: SocketAddr = tokio::net::lookup_host(&upstream)
        .await?
        .next()
        .ok_or_else(|| io::Error::other(format!("{upstream}: no address")))?;
    let half_delay = Duration::from_secs_f64(delay_ms / 2e3);
    let down = Link { rate: rate(rate_mb), half_delay };
    let up = Link { rate: rate(up_rate_mb.unwrap_or(rate_mb)), half_delay };
    let listener = TcpListener::bind(&listen).await?;
    println!("{}", listener.local_addr()?);
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                // Out of file descriptors, say: the connections open go on.
                eprintln!("throttle: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            if let Err(e) = relay(client, upstream, up, down).await {
                eprintln!("throttle: {e}");
            }
        });
    }
}
