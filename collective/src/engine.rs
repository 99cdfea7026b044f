//! The data mover under every collective: one thread, two non-blocking sockets, `poll(2)`.
//!
//! A collective is described as one or two *lanes*. Lane 0 runs clockwise (sends to the next
//! rank, receives from the previous one); lane 1 runs counter-clockwise over the same two
//! sockets in the other direction, so each TCP connection carries data both ways. A lane is a
//! plan: the ordered list of buffer segments it sends and the ordered list it receives, each
//! received segment either copied into the buffer or added to it. A sent segment may depend on
//! a received one (the ring forwards what it just reduced); it is released element by element
//! as the receive side completes elements, so reduce-scatter and all-gather pipeline at the
//! granularity of whatever the kernel hands over in one read, without fixed chunk boundaries.
//!
//! Every socket carries first a 32-byte call header (see `wire`), which the receiver checks
//! against its own call before touching the data, so mismatched calls fail instead of mixing
//! streams. One deadline bounds the whole call; a closed or reset neighbour fails it at once.
//!
//! Not here: which segments make up all-reduce, broadcast or all-gather (`plan` functions
//! below are pure and tested alone) and the connection set-up (`ring`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::error::{CallInfo, CollectiveError, Op, Result};
use super::sys::{self, Pod, PollFd};
use super::wire::{self, RECORD_LEN};

/// What happens to a received segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// The bytes land directly in the buffer (no staging copy).
    Copy,
    /// Staged in scratch, then added to the buffer.
    Add,
    /// Staged, added, then divided by the value (the last reduce step of an average).
    AddDiv(f32),
}

/// A segment of the outgoing stream. Element `i` may go once the lane has completed
/// `dep + i + 1` received elements (`None`: it may go at once).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SendSeg {
    pub range: Range<usize>,
    pub(crate) dep: Option<usize>,
}

/// A segment of the incoming stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecvSeg {
    pub range: Range<usize>,
    pub mode: Mode,
}

/// What one lane sends and receives during one call, in stream order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LanePlan {
    pub sends: Vec<SendSeg>,
    pub(crate) recvs: Vec<RecvSeg>,
}

impl LanePlan {
    /// The same plan over a buffer that starts `by` elements later (all ranges minus `by`).
    pub(crate) fn rebased(mut self, by: usize) -> LanePlan {
        for g in &mut self.sends {
            g.range = g.range.start - by..g.range.end - by;
        }
        for g in &mut self.recvs {
            g.range = g.range.start - by..g.range.end - by;
        }
        self
    }
}

/// Which ring algorithm a lane runs over its segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RingKind {
    /// Reduce-scatter then all-gather (2(w-1) steps); `div` makes it an average.
    AllReduce { div: Option<f32> },
    /// All-gather only (w-1 steps); `segs[p]` starts out filled at ring position `p`.
    AllGather,
    /// Reduce-scatter only (w-1 steps): position `p` ends with `segs[(p + 1) % w]` reduced
    /// (and divided by `div`).
    ReduceScatter { div: Option<f32> },
}

/// The ring schedule for the rank at ring position `pos` of `w`, over `segs` (indexed by ring
/// position). At step `t` position `p` sends segment `p - t` and receives `p - t - 1` (mod w),
/// so what it sends at `t` is what it received at `t - 1`. In an all-reduce the owner of each
/// segment adds the last contribution (and divides) once, then the result only travels as a
/// copy: every rank ends with the same bytes.
pub(crate) fn ring_plan(pos: usize, segs: &[Range<usize>], kind: RingKind) -> LanePlan {
    let w = segs.len();
    let steps = match kind {
        RingKind::AllReduce { .. } => 2 * (w - 1),
        RingKind::AllGather | RingKind::ReduceScatter { .. } => w - 1,
    };
    let mut plan = LanePlan::default();
    let mut recv_start = Vec::with_capacity(steps);
    let mut recv_total = 0;
    for t in 0..steps {
        let send = (pos + 2 * w - t) % w;
        let recv = (pos + 2 * w - t - 1) % w;
        let mode = match kind {
            RingKind::AllReduce { div } | RingKind::ReduceScatter { div } if t + 2 == w => {
                div.map_or(Mode::Add, Mode::AddDiv)
            }
            RingKind::AllReduce { .. } | RingKind::ReduceScatter { .. } if t + 2 < w => Mode::Add,
            _ => Mode::Copy,
        };
        plan.sends.push(SendSeg {
            range: segs[send].clone(),
            dep: if t == 0 { None } else { Some(recv_start[t - 1]) },
        });
        plan.recvs.push(RecvSeg { range: segs[recv].clone(), mode });
        recv_start.push(recv_total);
        recv_total += segs[recv].len();
    }
    plan
}

/// A chain from the root around the ring: the root sends, the middle ranks forward as bytes
/// arrive, the last one only receives.
pub(crate) fn chain_plan(pos: usize, root_pos: usize, w: usize, range: Range<usize>) -> LanePlan {
    let dist = (pos + w - root_pos) % w;
    let mut plan = LanePlan::default();
    if dist > 0 {
        plan.recvs.push(RecvSeg { range: range.clone(), mode: Mode::Copy });
    }
    if dist + 1 < w {
        plan.sends.push(SendSeg { range, dep: if dist == 0 { None } else { Some(0) } });
    }
    plan
}

/// `n` elements starting at `base` cut into `w` nearly equal consecutive pieces.
pub fn split(base: usize, n: usize, w: usize) -> Vec<Range<usize>> {
    let (q, r) = (n / w, n % w);
    let mut start = base;
    (0..w)
        .map(|k| {
            let len = q + usize::from(k < r);
            let piece = start..start + len;
            start += len;
            piece
        })
        .collect()
}

/// One direction of the ring during one call: the link it sends on, the link it receives on,
/// and its plan (empty for a direction that only carries the call header).
pub(crate) struct Lane<'a, T> {
    pub out: &'a TcpStream,
    pub(crate) out_peer: usize,
    pub(crate) inp: &'a TcpStream,
    pub(crate) in_peer: usize,
    pub plan: LanePlan,
    /// Stages incoming data of `Add` segments; may be empty when the plan has none.
    pub scratch: &'a mut [T],
}

#[derive(Debug, Default, Clone, Copy)]
struct SendState {
    seg: usize,
    /// Bytes of the current segment already written.
    sent: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct RecvState {
    seg: usize,
    /// Bytes of the current segment read from the socket (including staged ones).
    bytes: usize,
    /// Elements of the current segment completed (copied or reduced).
    done: usize,
    /// Bytes staged in scratch and not yet reduced (less than one element after each read).
    fill: usize,
    /// Elements completed over the whole incoming stream; send dependencies count in these.
    total: usize,
}

/// A lane with its progress.
struct Run<'l, 'a, T> {
    lane: &'l mut Lane<'a, T>,
    hdr_sent: usize,
    hdr_in: [u8; RECORD_LEN],
    hdr_got: usize,
    send: SendState,
    recv: RecvState,
}

enum Step {
    Progress,
    /// The socket would block: wait for readiness.
    Blocked,
    /// Nothing may be sent until more is received.
    Waiting,
}

/// How long a failing call keeps trying to deliver its header to the neighbours.
const FLUSH_WAIT: Duration = Duration::from_millis(200);

/// Runs one collective call over `lanes` (all driven by this thread, each with its own
/// sockets) to completion, or fails it. Plan ranges index `buf`.
pub fn exchange<T: Pod>(
    call: CallInfo,
    buf: &mut [T],
    lanes: &mut [Lane<'_, T>],
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let header = wire::encode_header(&call);
    let mut runs: Vec<Run<'_, '_, T>> = lanes
        .iter_mut()
        .map(|lane| {
            let mut r = Run {
                lane,
                hdr_sent: 0,
                hdr_in: [0; RECORD_LEN],
                hdr_got: 0,
                send: SendState::default(),
                recv: RecvState::default(),
            };
            r.skip_empty();
            r
        })
        .collect();
    let result = event_loop(call, &header, buf, &mut runs, deadline, timeout)
        .map_err(|e| explain(e, &call, buf, &mut runs));
    if result.is_err() {
        // Our header may not be out yet (we read theirs first, or another lane failed first).
        // Finish sending it, briefly, so the neighbours can tell a mismatch from a closed
        // connection. Usually it is long out and this costs nothing.
        let until = deadline.min(Instant::now() + FLUSH_WAIT);
        for r in &mut runs {
            r.flush_header(&header, call.op, until);
        }
    }
    result
}

/// A link that closed may have been closed by a neighbour that found our calls mismatched
/// (it fails and closes at once). If its header is waiting unread, report the mismatch — the
/// cause — rather than the lost link.
fn explain<T: Pod>(
    err: CollectiveError,
    call: &CallInfo,
    buf: &mut [T],
    runs: &mut [Run<'_, '_, T>],
) -> CollectiveError {
    if !matches!(err, CollectiveError::PeerLost { .. }) {
        return err;
    }
    for r in runs.iter_mut() {
        while r.hdr_got < RECORD_LEN {
            match r.recv_step(call, buf) {
                Ok(Step::Progress) => {}
                Err(e @ (CollectiveError::Mismatch { .. } | CollectiveError::Protocol { .. })) => {
                    return e;
                }
                Ok(_) | Err(_) => break,
            }
        }
    }
    err
}

/// Tries every lane that has work; sleeps in poll(2) only when nothing moved.
fn event_loop<T: Pod>(
    call: CallInfo,
    header: &[u8; RECORD_LEN],
    buf: &mut [T],
    runs: &mut [Run<'_, '_, T>],
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let op = call.op;
    let mut fds = Vec::with_capacity(2 * runs.len());
    loop {
        let mut progressed = false;
        let mut pending = false;
        fds.clear();
        // Sends first, so our header is out before we can fail on theirs.
        for r in runs.iter_mut() {
            if r.out_pending() {
                pending = true;
                let events = match r.send_step(header, buf, op)? {
                    Step::Progress => {
                        progressed = true;
                        0
                    }
                    Step::Blocked => sys::POLLOUT,
                    Step::Waiting => 0,
                };
                fds.push(PollFd::new(r.lane.out.as_raw_fd(), events | sys::POLLRDHUP));
            }
        }
        for r in runs.iter_mut() {
            if r.in_pending() {
                pending = true;
                let events = match r.recv_step(&call, buf)? {
                    Step::Progress => {
                        progressed = true;
                        0
                    }
                    Step::Blocked | Step::Waiting => sys::POLLIN,
                };
                fds.push(PollFd::new(r.lane.inp.as_raw_fd(), events | sys::POLLRDHUP));
            }
        }
        if !pending {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(CollectiveError::Timeout { op, after: timeout });
        }
        if progressed {
            continue;
        }
        // Nothing moved: sleep until a socket is ready. POLLRDHUP is asked on every busy
        // socket so a neighbour that dies while we only wait to send is seen at once.
        sys::poll(&mut fds, deadline - now).map_err(|source| CollectiveError::Io { op, source })?;
        for fd in &fds {
            let closed = fd.revents() & (sys::POLLERR | sys::POLLHUP | sys::POLLRDHUP) != 0;
            if !closed {
                continue;
            }
            // A socket we still read from reports EOF or the error itself on the next read,
            // after any data still queued (a mismatch header explains more than a closed
            // link). One we only send on: the neighbour is gone.
            if runs.iter().any(|r| r.in_pending() && r.lane.inp.as_raw_fd() == fd.fd()) {
                continue;
            }
            let r = runs.iter().find(|r| r.lane.out.as_raw_fd() == fd.fd()).expect("polled");
            let source = r.lane.out.take_error().ok().flatten().unwrap_or_else(closed_by_peer);
            return Err(CollectiveError::PeerLost { rank: r.lane.out_peer, op, source });
        }
    }
}

impl<T: Pod> Run<'_, '_, T> {
    fn in_pending(&self) -> bool {
        self.hdr_got < RECORD_LEN || self.recv.seg < self.lane.plan.recvs.len()
    }

    fn out_pending(&self) -> bool {
        self.hdr_sent < RECORD_LEN || self.send.seg < self.lane.plan.sends.len()
    }

    /// Moves past segments that carry nothing.
    fn skip_empty(&mut self) {
        let plan = &self.lane.plan;
        while plan.sends.get(self.send.seg).is_some_and(|g| g.range.is_empty()) {
            self.send.seg += 1;
        }
        while plan.recvs.get(self.recv.seg).is_some_and(|g| g.range.is_empty()) {
            self.recv.seg += 1;
        }
    }

    fn recv_step(&mut self, call: &CallInfo, buf: &mut [T]) -> Result<Step> {
        let (sock, peer, op) = (self.lane.inp, self.lane.in_peer, call.op);
        if self.hdr_got < RECORD_LEN {
            let Some(n) = read_some(sock, &mut self.hdr_in[self.hdr_got..], peer, op)? else {
                return Ok(Step::Blocked);
            };
            self.hdr_got += n;
            if self.hdr_got == RECORD_LEN {
                let theirs = wire::decode_header(&self.hdr_in)
                    .map_err(|detail| CollectiveError::Protocol { peer, op, detail })?;
                if theirs != *call {
                    return Err(CollectiveError::Mismatch { peer, ours: *call, theirs });
                }
            }
            return Ok(Step::Progress);
        }
        let seg = &self.lane.plan.recvs[self.recv.seg];
        let st = &mut self.recv;
        let dst = &mut buf[seg.range.clone()];
        let seg_bytes = dst.len() * T::SIZE;
        match seg.mode {
            Mode::Copy => {
                let bytes = sys::as_bytes_mut(dst);
                let Some(n) = read_some(sock, &mut bytes[st.bytes..], peer, op)? else {
                    return Ok(Step::Blocked);
                };
                st.bytes += n;
                let done = st.bytes / T::SIZE;
                st.total += done - st.done;
                st.done = done;
            }
            Mode::Add | Mode::AddDiv(_) => {
                let div = if let Mode::AddDiv(d) = seg.mode { Some(d) } else { None };
                let scratch = &mut *self.lane.scratch;
                let staged = sys::as_bytes_mut(scratch);
                let room = (seg_bytes - st.bytes).min(staged.len() - st.fill);
                let Some(n) = read_some(sock, &mut staged[st.fill..st.fill + room], peer, op)?
                else {
                    return Ok(Step::Blocked);
                };
                st.fill += n;
                st.bytes += n;
                let k = st.fill / T::SIZE;
                T::reduce(&mut dst[st.done..st.done + k], &scratch[..k], div);
                st.done += k;
                st.total += k;
                let rest = st.fill - k * T::SIZE;
                if rest > 0 {
                    sys::as_bytes_mut(scratch).copy_within(k * T::SIZE..st.fill, 0);
                }
                st.fill = rest;
            }
        }
        if st.bytes == seg_bytes {
            *st = RecvState { seg: st.seg + 1, total: st.total, ..RecvState::default() };
            self.skip_empty();
        }
        Ok(Step::Progress)
    }

    fn send_step(&mut self, header: &[u8; RECORD_LEN], buf: &[T], op: Op) -> Result<Step> {
        let (sock, peer) = (self.lane.out, self.lane.out_peer);
        if self.hdr_sent < RECORD_LEN {
            let Some(n) = write_some(sock, &header[self.hdr_sent..], peer, op)? else {
                return Ok(Step::Blocked);
            };
            self.hdr_sent += n;
            return Ok(Step::Progress);
        }
        let seg = &self.lane.plan.sends[self.send.seg];
        let len = seg.range.len();
        let ready = match seg.dep {
            None => len,
            Some(dep) => self.recv.total.saturating_sub(dep).min(len),
        };
        let st = &mut self.send;
        let ready_bytes = ready * T::SIZE;
        if st.sent >= ready_bytes {
            return Ok(Step::Waiting);
        }
        let bytes = sys::as_bytes(&buf[seg.range.clone()]);
        let Some(n) = write_some(sock, &bytes[st.sent..ready_bytes], peer, op)? else {
            return Ok(Step::Blocked);
        };
        st.sent += n;
        if st.sent == len * T::SIZE {
            *st = SendState { seg: st.seg + 1, sent: 0 };
            self.skip_empty();
        }
        Ok(Step::Progress)
    }

    /// Best effort: finish sending our call header before `until`.
    fn flush_header(&mut self, header: &[u8; RECORD_LEN], op: Op, until: Instant) {
        let sock = self.lane.out;
        while self.hdr_sent < RECORD_LEN && Instant::now() < until {
            match write_some(sock, &header[self.hdr_sent..], self.lane.out_peer, op) {
                Ok(Some(n)) => self.hdr_sent += n,
                Ok(None) => {
                    let mut fd = [PollFd::new(sock.as_raw_fd(), sys::POLLOUT)];
                    if sys::poll(&mut fd, until.saturating_duration_since(Instant::now())).is_err()
                    {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
}

fn closed_by_peer() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer")
}

fn io_error(source: io::Error, peer: usize, op: Op) -> CollectiveError {
    use io::ErrorKind::*;
    match source.kind() {
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
            CollectiveError::PeerLost { rank: peer, op, source }
        }
        _ => CollectiveError::Io { op, source },
    }
}

/// One non-blocking read into a non-empty buffer: `Some(n > 0)`, or `None` if it would block.
fn read_some(sock: &TcpStream, buf: &mut [u8], peer: usize, op: Op) -> Result<Option<usize>> {
    debug_assert!(!buf.is_empty(), "a zero-length read would look like EOF");
    loop {
        match (&*sock).read(buf) {
            Ok(0) => {
                return Err(CollectiveError::PeerLost { rank: peer, op, source: closed_by_peer() });
            }
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e, peer, op)),
        }
    }
}

/// One non-blocking write of a non-empty buffer: `Some(n > 0)`, or `None` if it would block.
/// (std sends with MSG_NOSIGNAL, so a dead peer gives EPIPE, not SIGPIPE.)
fn write_some(sock: &TcpStream, buf: &[u8], peer: usize, op: Op) -> Result<Option<usize>> {
    loop {
        match (&*sock).write(buf) {
            Ok(0) => {
                return Err(CollectiveError::PeerLost { rank: peer, op, source: closed_by_peer() });
            }
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e, peer, op)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_balanced_and_covers() {
        assert_eq!(split(10, 7, 3), vec![10..13, 13..15, 15..17]);
        assert_eq!(split(0, 2, 4), vec![0..1, 1..2, 2..2, 2..2]);
        assert_eq!(split(0, 0, 2), vec![0..0, 0..0]);
    }

    /// Simulates the ring schedule symbolically: each element is the set of ranks summed in,
    /// and checks that every rank ends with every contribution exactly once.
    #[test]
    fn ring_plan_reduces_everything_once() {
        for w in 2..6 {
            let segs = split(0, 2 * w + 1, w);
            let plans: Vec<_> =
                (0..w).map(|p| ring_plan(p, &segs, RingKind::AllReduce { div: None })).collect();
            // state[rank][elem] = bitmask of contributions
            let mut state = vec![vec![0u32; 2 * w + 1]; w];
            for (p, s) in state.iter_mut().enumerate() {
                s.iter_mut().for_each(|e| *e = 1 << p);
            }
            for t in 0..2 * (w - 1) {
                let snapshot = state.clone();
                for p in 0..w {
                    let from = (p + w - 1) % w;
                    let sent = &plans[from].sends[t];
                    let got = &plans[p].recvs[t];
                    assert_eq!(sent.range, got.range, "w {w} step {t}: neighbours disagree");
                    for i in got.range.clone() {
                        let v = snapshot[from][i];
                        state[p][i] = if got.mode == Mode::Copy {
                            v
                        } else {
                            assert_eq!(state[p][i] & v, 0, "double count");
                            state[p][i] | v
                        };
                    }
                }
            }
            for s in &state {
                assert!(s.iter().all(|&e| e == (1 << w) - 1), "w {w}: {state:?}");
            }
        }
    }

    #[test]
    fn chain_plan_shapes() {
        assert_eq!(chain_plan(1, 1, 3, 0..4).recvs, vec![]);
        assert_eq!(chain_plan(2, 1, 3, 0..4).sends[0].dep, Some(0));
        assert_eq!(chain_plan(0, 1, 3, 0..4).sends, vec![]);
    }
}
