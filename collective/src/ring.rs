//! `RingGroup`: the CPU process group, a ring of TCP connections between a trial's workers.
//!
//! Each rank holds two connections: one it opened to the next rank and one the previous rank
//! opened to it. Building the ring only connects; the addresses come from the rendezvous
//! (`worker`), which collects every rank's listener address and hands the list to all ranks.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::engine::{self, Lane, LanePlan, RingKind};
use super::error::{CallInfo, CollectiveError, Op, Result};
use super::sys::{self, Pod, PollFd};
use super::wire::{Hello, RECORD_LEN};
use super::{ProcessGroup, ReduceOp};

/// Below this many bytes a collective uses one ring direction: a second lane only pays off
/// once the transfer is bandwidth-bound rather than latency-bound.
const BIDIRECTIONAL_MIN_BYTES: usize = 256 * 1024;

/// How long an accepted connection may take to introduce itself before it is dropped as stray.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// Settings of a [`RingGroup`]. `group_id` and `bidirectional` must be the same on every rank
/// (both are checked); the rest may differ.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// Identifies this group (e.g. a hash of trial id and attempt), so a connection from
    /// another group that reached a reused port is refused.
    pub(crate) group_id: u64,
    /// Upper bound for one collective call. A rank that stops calling makes the others fail
    /// with [`CollectiveError::Timeout`] after this long.
    pub timeout: Duration,
    /// Upper bound for building the ring (neighbours may start later than us).
    pub connect_timeout: Duration,
    /// Use both ring directions for large buffers (half the data each way).
    pub bidirectional: bool,
    /// Staging buffer per direction for incoming data that is reduced (not copied); the
    /// largest read a reduction step does.
    pub chunk_bytes: usize,
    /// SO_SNDBUF/SO_RCVBUF to set; `None` keeps the kernel's autotuning.
    pub socket_buffer_bytes: Option<usize>,
    /// From this many bytes per rank on, an all_reduce or broadcast drives its two ring
    /// directions from two threads (the caller's and a scoped helper) instead of one
    /// `poll(2)` loop. Default `usize::MAX`, never: on the 2-core machines measured, two
    /// threads were slower at 1-10 MB and no better at 30-100 MB (each rank is bound by the
    /// kernel's socket copies either way); it may pay off with more cores than ranks.
    pub lane_threads_min_bytes: usize,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            group_id: 0,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(60),
            bidirectional: true,
            chunk_bytes: 1024 * 1024,
            socket_buffer_bytes: None,
            lane_threads_min_bytes: usize::MAX,
        }
    }
}

impl GroupOptions {
    pub fn new(group_id: u64) -> Self {
        GroupOptions { group_id, ..Default::default() }
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn bidirectional(mut self, on: bool) -> Self {
        self.bidirectional = on;
        self
    }

    pub fn chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    pub fn lane_threads_min_bytes(mut self, bytes: usize) -> Self {
        self.lane_threads_min_bytes = bytes;
        self
    }

    pub fn socket_buffer_bytes(mut self, bytes: Option<usize>) -> Self {
        self.socket_buffer_bytes = bytes;
        self
    }
}

/// The plans of one call: `lanes[0]` runs clockwise, `lanes[1]` (if any) counter-clockwise.
/// `halves: Some(h)` says lane 0 only touches `buf[..h]` and lane 1 only `buf[h..]`; then,
/// for buffers of `GroupOptions::lane_threads_min_bytes` or more, the two directions run on
/// two threads.
struct Plans {
    lanes: Vec<LanePlan>,
    halves: Option<usize>,
}

/// Ring all-reduce over TCP. See the module docs of `collective` for the algorithm.
#[derive(Debug)]
pub struct RingGroup {
    rank: usize,
    world: usize,
    opts: GroupOptions,
    /// `[to next rank, from previous rank]`; `None` when alone.
    links: Option<[TcpStream; 2]>,
    /// Sequence number of the next collective call.
    seq: u64,
    /// Why the group stopped working, once it has.
    poisoned: Option<String>,
    /// Staging buffers for reductions, one per ring direction, kept between calls.
    scratch: [Vec<f32>; 2],
}

impl RingGroup {
    /// Builds the ring: connects to rank `rank + 1`, accepts rank `rank - 1` on `listener`
    /// (already bound; its address is `peers[rank]`), and checks both in a handshake.
    ///
    /// A neighbour that is not listening yet is retried until `opts.connect_timeout`;
    /// connections from other groups or ranks are refused and waiting continues.
    pub fn connect(
        rank: usize,
        world_size: usize,
        listener: TcpListener,
        peers: &[SocketAddr],
        opts: GroupOptions,
    ) -> Result<RingGroup> {
        let invalid = |what: String| CollectiveError::InvalidArgument { op: Op::Connect, what };
        if world_size == 0 || world_size > u32::MAX as usize {
            return Err(invalid(format!("world size {world_size} is not in 1..=2^32-1")));
        }
        if rank >= world_size {
            return Err(invalid(format!("rank {rank} is not below world size {world_size}")));
        }
        if peers.len() != world_size {
            return Err(invalid(format!(
                "{} peer addresses for world size {world_size}",
                peers.len()
            )));
        }
        if opts.chunk_bytes < 4 {
            return Err(invalid(format!("chunk_bytes {} is below one f32", opts.chunk_bytes)));
        }
        let scratch_len = opts.chunk_bytes / 4;
        let mut group = RingGroup {
            rank,
            world: world_size,
            opts,
            links: None,
            seq: 0,
            poisoned: None,
            scratch: [vec![0.0; scratch_len], vec![0.0; scratch_len]],
        };
        if world_size > 1 {
            group.links = Some(group.build_ring(listener, peers)?);
        }
        Ok(group)
    }

    /// Why the group refuses further calls, if it does.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    fn next(&self) -> usize {
        (self.rank + 1) % self.world
    }

    fn prev(&self) -> usize {
        (self.rank + self.world - 1) % self.world
    }

    fn hello(&self) -> Hello {
        Hello { group_id: self.opts.group_id, world: self.world as u32, rank: self.rank as u32 }
    }

    /// Checks a peer's hello against what we expect from `peer`.
    fn check_hello(&self, bytes: &[u8; RECORD_LEN], peer: usize) -> Result<(), String> {
        let h = Hello::decode(bytes).map_err(|e| e.to_string())?;
        if h.group_id != self.opts.group_id {
            return Err(format!("group id {:#x}, expected {:#x}", h.group_id, self.opts.group_id));
        }
        if h.world as usize != self.world {
            return Err(format!("world size {}, expected {}", h.world, self.world));
        }
        if h.rank as usize != peer {
            return Err(format!("rank {}, expected {peer}", h.rank));
        }
        Ok(())
    }

    fn build_ring(&self, listener: TcpListener, peers: &[SocketAddr]) -> Result<[TcpStream; 2]> {
        let start = Instant::now();
        let deadline = start + self.opts.connect_timeout;
        let io_err = |source| CollectiveError::Io { op: Op::Connect, source };
        let next = self.next();

        // Connect first, accept second: connecting only needs the neighbour's listener to be
        // bound (the kernel completes it from the backlog), so no rank waits on another here.
        let mut to_next = self.connect_next(peers[next], deadline, start)?;
        self.tune(&to_next).map_err(io_err)?;
        to_next.set_write_timeout(Some(left(deadline))).map_err(io_err)?;
        to_next.write_all(&self.hello().encode()).map_err(io_err)?;

        let from_prev = self.accept_prev(&listener, deadline, start)?;
        drop(listener);

        to_next.set_read_timeout(Some(left(deadline))).map_err(io_err)?;
        let mut ack = [0u8; RECORD_LEN];
        if let Err(e) = to_next.read_exact(&mut ack) {
            let reason = match e.kind() {
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => {
                    "it closed the connection during the handshake (another group or rank \
                     at that address?)"
                        .to_string()
                }
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(CollectiveError::Timeout {
                        op: Op::Connect,
                        after: start.elapsed(),
                    });
                }
                _ => format!("reading its reply: {e}"),
            };
            return Err(CollectiveError::Handshake { peer: next, reason });
        }
        self.check_hello(&ack, next)
            .map_err(|reason| CollectiveError::Handshake { peer: next, reason })?;

        for s in [&to_next, &from_prev] {
            s.set_read_timeout(None).map_err(io_err)?;
            s.set_write_timeout(None).map_err(io_err)?;
            s.set_nonblocking(true).map_err(io_err)?;
        }
        Ok([to_next, from_prev])
    }

    fn connect_next(
        &self,
        addr: SocketAddr,
        deadline: Instant,
        start: Instant,
    ) -> Result<TcpStream> {
        let mut backoff = Duration::from_millis(5);
        loop {
            let attempt = left(deadline).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&addr, attempt) {
                Ok(s) => return Ok(s),
                Err(source) => {
                    // Refused: not listening yet (or not yet started); anything else may be
                    // transient too. Retry until the deadline.
                    if Instant::now() + backoff >= deadline {
                        return Err(CollectiveError::Connect {
                            peer: self.next(),
                            addr,
                            after: start.elapsed(),
                            source,
                        });
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(200));
                }
            }
        }
    }

    fn accept_prev(
        &self,
        listener: &TcpListener,
        deadline: Instant,
        start: Instant,
    ) -> Result<TcpStream> {
        let io_err = |source| CollectiveError::Io { op: Op::Connect, source };
        let prev = self.prev();
        listener.set_nonblocking(true).map_err(io_err)?;
        let mut refused: Option<String> = None;
        loop {
            match listener.accept() {
                Ok((mut s, from)) => {
                    s.set_nonblocking(false).map_err(io_err)?;
                    s.set_read_timeout(Some(
                        left(deadline).min(HELLO_WAIT).max(Duration::from_millis(1)),
                    ))
                    .map_err(io_err)?;
                    let mut hello = [0u8; RECORD_LEN];
                    let checked = match s.read_exact(&mut hello) {
                        Ok(()) => self.check_hello(&hello, prev),
                        Err(e) => Err(format!("no hello ({e})")),
                    };
                    match checked {
                        Ok(()) => {
                            self.tune(&s).map_err(io_err)?;
                            s.set_write_timeout(Some(left(deadline))).map_err(io_err)?;
                            s.write_all(&self.hello().encode()).map_err(io_err)?;
                            return Ok(s);
                        }
                        // Stray or misdirected: drop it (the other side sees EOF) and keep
                        // waiting for the real previous rank.
                        Err(why) => {
                            refused = Some(format!("refused a connection from {from}: {why}"))
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(match refused {
                            Some(reason) => CollectiveError::Handshake { peer: prev, reason },
                            None => {
                                CollectiveError::Timeout { op: Op::Connect, after: start.elapsed() }
                            }
                        });
                    }
                    let mut fd = [PollFd::new(listener.as_raw_fd(), sys::POLLIN)];
                    sys::poll(&mut fd, deadline - now).map_err(io_err)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e)),
            }
        }
    }

    fn tune(&self, s: &TcpStream) -> io::Result<()> {
        s.set_nodelay(true)?;
        if let Some(bytes) = self.opts.socket_buffer_bytes {
            sys::set_socket_buffers(s, bytes)?;
        }
        Ok(())
    }

    fn ensure_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(cause) => Err(CollectiveError::Poisoned { cause: cause.clone() }),
            None => Ok(()),
        }
    }

    /// How many ring directions a call moving `bytes` per rank uses (same on every rank).
    fn lane_count(&self, bytes: usize) -> u8 {
        if self.opts.bidirectional && bytes >= BIDIRECTIONAL_MIN_BYTES { 2 } else { 1 }
    }

    /// This rank's position on the counter-clockwise ring.
    fn ccw(&self, rank: usize) -> usize {
        (self.world - rank) % self.world
    }

    /// Runs one call over the links and poisons the group if it fails: after a failure the
    /// ranks no longer agree on where the streams are, so no later call could be trusted.
    ///
    /// `(op, len, arg)` fill the call header.
    fn run<T: Pod>(
        &mut self,
        (op, len, arg): (Op, usize, u32),
        buf: &mut [T],
        Plans { lanes: plans, halves }: Plans,
        scratch: &mut [Vec<T>; 2],
    ) -> Result<()> {
        let call = CallInfo { op, seq: self.seq, len: len as u64, arg, lanes: plans.len() as u8 };
        self.seq += 1;
        let deadline = Instant::now() + self.opts.timeout;
        let timeout = self.opts.timeout;
        let [to_next, from_prev] = self.links.as_ref().expect("world > 1 has links");
        let (next, prev) = (self.next(), self.prev());
        let threaded = plans.len() == 2
            && halves.is_some()
            && buf.len() * T::SIZE >= self.opts.lane_threads_min_bytes;
        let mut plans = plans.into_iter();
        let plan0 = plans.next().unwrap_or_default();
        let plan1 = plans.next().unwrap_or_default();
        let [s0, s1] = scratch;
        // Lane 0 sends to the next rank, lane 1 to the previous one; a lane without a plan
        // still carries the call header, so both neighbours check every call.
        let lane0 = |buf_scratch| Lane {
            out: to_next,
            out_peer: next,
            inp: from_prev,
            in_peer: prev,
            plan: plan0,
            scratch: buf_scratch,
        };
        let result = if threaded {
            let h = halves.unwrap();
            let (b0, b1) = buf.split_at_mut(h);
            let mut l0 = [lane0(&mut s0[..])];
            let mut l1 = [Lane {
                out: from_prev,
                out_peer: prev,
                inp: to_next,
                in_peer: next,
                plan: plan1.rebased(h),
                scratch: &mut s1[..],
            }];
            let failures = AtomicUsize::new(0);
            // On failure a lane shuts the read side of both links: the other lane's poll
            // wakes (reads see EOF, POLLRDHUP) and it stops too instead of waiting for the
            // deadline, while its header can still go out. The first error is reported; the
            // links are closed for good below.
            let run_lane = |b: &mut [T], l: &mut [Lane<'_, T>]| {
                let r = engine::exchange(call, b, l, deadline, timeout);
                r.map_err(|e| {
                    let order = failures.fetch_add(1, Ordering::SeqCst);
                    let _ = to_next.shutdown(Shutdown::Read);
                    let _ = from_prev.shutdown(Shutdown::Read);
                    (order, e)
                })
            };
            let (r0, r1) = std::thread::scope(|scope| {
                let helper = scope.spawn(|| run_lane(b1, &mut l1));
                let r0 = run_lane(b0, &mut l0);
                (r0, helper.join().expect("lane thread panicked"))
            });
            match (r0, r1) {
                (Ok(()), Ok(())) => Ok(()),
                (Err((_, e)), Ok(())) | (Ok(()), Err((_, e))) => Err(e),
                (Err((a, ea)), Err((b, eb))) => Err(if a < b { ea } else { eb }),
            }
        } else {
            let mut lanes = [
                lane0(&mut s0[..]),
                Lane {
                    out: from_prev,
                    out_peer: prev,
                    inp: to_next,
                    in_peer: next,
                    plan: plan1,
                    scratch: &mut s1[..],
                },
            ];
            engine::exchange(call, buf, &mut lanes, deadline, timeout)
        };
        if let Err(e) = &result
            && e.poisons()
        {
            self.poisoned = Some(e.to_string());
            // Closing both links makes the neighbours fail now instead of at their timeout.
            for s in self.links.iter().flatten() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        result
    }

    /// `run` for a call that adds what it receives, with the group's staging buffers (moved
    /// out for the call so `run` can borrow `self` whole; moving Vecs is free).
    fn run_reducing(
        &mut self,
        header: (Op, usize, u32),
        buf: &mut [f32],
        plans: Plans,
    ) -> Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.run(header, buf, plans, &mut scratch);
        self.scratch = scratch;
        result
    }

    fn broadcast_typed<T: Pod>(&mut self, op: Op, buf: &mut [T], root: usize) -> Result<()> {
        let n = buf.len();
        let (w, h) = (self.world, n / 2);
        let plans = if self.lane_count(n * T::SIZE) == 2 {
            vec![
                engine::chain_plan(self.rank, root, w, 0..h),
                engine::chain_plan(self.ccw(self.rank), self.ccw(root), w, h..n),
            ]
        } else {
            vec![engine::chain_plan(self.rank, root, w, 0..n)]
        };
        let plans = Plans { lanes: plans, halves: Some(h) };
        self.run((op, n, root as u32), buf, plans, &mut Default::default())
    }

    fn all_gather_typed<T: Pod>(&mut self, op: Op, input: &[T], output: &mut [T]) -> Result<()> {
        let (w, m) = (self.world, input.len());
        output[self.rank * m..(self.rank + 1) * m].copy_from_slice(input);
        if w == 1 {
            return Ok(());
        }
        let h = m / 2;
        let plans = if self.lane_count(m * T::SIZE) == 2 {
            let cw: Vec<_> = (0..w).map(|k| k * m..k * m + h).collect();
            let ccw: Vec<_> = (0..w)
                .map(|p| {
                    let k = self.ccw(p); // position p on the ccw ring is rank (w - p) % w
                    k * m + h..(k + 1) * m
                })
                .collect();
            vec![
                engine::ring_plan(self.rank, &cw, RingKind::AllGather),
                engine::ring_plan(self.ccw(self.rank), &ccw, RingKind::AllGather),
            ]
        } else {
            let segs: Vec<_> = (0..w).map(|k| k * m..(k + 1) * m).collect();
            vec![engine::ring_plan(self.rank, &segs, RingKind::AllGather)]
        };
        // The directions interleave (half of every block each), so they share one thread.
        let plans = Plans { lanes: plans, halves: None };
        self.run((op, m, 0), output, plans, &mut Default::default())
    }

    fn check_root(&self, op: Op, root: usize) -> Result<()> {
        if root >= self.world {
            return Err(CollectiveError::InvalidArgument {
                op,
                what: format!("root {root} is not below world size {}", self.world),
            });
        }
        Ok(())
    }
}

impl ProcessGroup for RingGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.ensure_usable()?;
        let w = self.world;
        if w == 1 {
            return Ok(()); // sum and average of one contribution are the contribution
        }
        let (div, arg) = reduction(op, w);
        let kind = RingKind::AllReduce { div };
        let n = buf.len();
        let h = n / 2;
        let plans = if self.lane_count(n * 4) == 2 {
            vec![
                engine::ring_plan(self.rank, &engine::split(0, h, w), kind),
                engine::ring_plan(self.ccw(self.rank), &engine::split(h, n - h, w), kind),
            ]
        } else {
            vec![engine::ring_plan(self.rank, &engine::split(0, n, w), kind)]
        };
        let plans = Plans { lanes: plans, halves: Some(h) };
        self.run_reducing((Op::AllReduce, n, arg), buf, plans)
    }

    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<()> {
        self.ensure_usable()?;
        self.check_root(Op::Broadcast, root)?;
        if self.world == 1 {
            return Ok(());
        }
        self.broadcast_typed(Op::Broadcast, buf, root)
    }

    fn broadcast_bytes(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        self.ensure_usable()?;
        self.check_root(Op::BroadcastBytes, root)?;
        if self.world == 1 {
            return Ok(());
        }
        // Two calls: the length first, so the others can size their buffers, then the bytes.
        let mut len = (buf.len() as u64).to_le_bytes();
        self.broadcast_typed(Op::BroadcastBytes, &mut len, root)?;
        let len = u64::from_le_bytes(len);
        let n = usize::try_from(len).map_err(|_| CollectiveError::Protocol {
            peer: root,
            op: Op::BroadcastBytes,
            detail: format!("length {len} does not fit in memory"),
        })?;
        if self.rank != root {
            buf.clear();
            buf.resize(n, 0);
        }
        if n == 0 {
            return Ok(());
        }
        self.broadcast_typed(Op::BroadcastBytes, buf, root)
    }

    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) -> Result<()> {
        self.ensure_usable()?;
        if output.len() != self.world * input.len() {
            return Err(CollectiveError::InvalidArgument {
                op: Op::AllGather,
                what: format!(
                    "output holds {} elements, expected world size {} x input {}",
                    output.len(),
                    self.world,
                    input.len()
                ),
            });
        }
        self.all_gather_typed(Op::AllGather, input, output)
    }

    fn reduce_scatter(
        &mut self,
        input: &mut [f32],
        counts: &[usize],
        output: &mut [f32],
        op: ReduceOp,
    ) -> Result<()> {
        self.ensure_usable()?;
        let (w, rank) = (self.world, self.rank);
        let invalid =
            |what: String| CollectiveError::InvalidArgument { op: Op::ReduceScatter, what };
        if counts.len() != w || counts.iter().sum::<usize>() != input.len() {
            return Err(invalid(format!(
                "counts {counts:?} must be one per rank ({w}) adding up to the input's {}",
                input.len()
            )));
        }
        if output.len() != counts[rank] {
            let want = counts[rank];
            return Err(invalid(format!(
                "output holds {} elements, rank {rank}'s piece {want}",
                output.len()
            )));
        }
        let starts: Vec<usize> =
            counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
        let piece = |r: usize| starts[r]..starts[r] + counts[r];
        if w > 1 {
            let (div, arg) = reduction(op, w);
            let kind = RingKind::ReduceScatter { div };
            // Ring position p ends with segment (p + 1) % w: that is its rank's piece. With two
            // lanes the clockwise one takes the first half of every piece and the
            // counter-clockwise one (where position p is rank ccw(p)) the second half.
            let segs = |rank_at: fn(&Self, usize) -> usize,
                        part: fn(Range<usize>) -> Range<usize>| {
                let at = |x: usize| rank_at(self, (x + w - 1) % w);
                (0..w).map(|x| part(piece(at(x)))).collect::<Vec<_>>()
            };
            let plans = if self.lane_count(input.len() * 4) == 2 {
                vec![
                    engine::ring_plan(
                        rank,
                        &segs(|_, p| p, |r| r.start..r.start + r.len() / 2),
                        kind,
                    ),
                    engine::ring_plan(
                        self.ccw(rank),
                        &segs(Self::ccw, |r| r.start + r.len() / 2..r.end),
                        kind,
                    ),
                ]
            } else {
                vec![engine::ring_plan(rank, &segs(|_, p| p, |r| r), kind)]
            };
            // The directions interleave (half of every piece each), so they share one thread.
            let plans = Plans { lanes: plans, halves: None };
            self.run_reducing((Op::ReduceScatter, input.len(), arg), input, plans)?;
        }
        output.copy_from_slice(&input[piece(rank)]);
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        self.ensure_usable()?;
        if self.world == 1 {
            return Ok(());
        }
        // A one-byte all-gather: a rank returns only after every rank's byte reached it,
        // i.e. after every rank entered the barrier.
        let mut out = vec![0u8; self.world];
        self.all_gather_typed(Op::Barrier, &[1u8], &mut out)
    }
}

/// Time left until `deadline` (zero once passed).
/// What a reduction does at its last step (divide, for an average over `world` ranks), and its
/// code in the call header.
fn reduction(op: ReduceOp, world: usize) -> (Option<f32>, u32) {
    match op {
        ReduceOp::Sum => (None, 1),
        ReduceOp::Avg => (Some(world as f32), 2),
    }
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
