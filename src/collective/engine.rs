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
use std::time::Instant;

use super::error::{CallInfo, CollectiveError, Op, Result};
use super::sys::{self, Pod, PollFd};
use super::wire::{self, RECORD_LEN};

/// What happens to a received segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
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
    pub dep: Option<usize>,
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
    pub recvs: Vec<RecvSeg>,
}

/// Which ring algorithm a lane runs over its segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RingKind {
    /// Reduce-scatter then all-gather (2(w-1) steps); `div` makes it an average.
    AllReduce { div: Option<f32> },
    /// All-gather only (w-1 steps); `segs[p]` starts out filled at ring position `p`.
    AllGather,
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
        RingKind::AllGather => w - 1,
    };
    let mut plan = LanePlan::default();
    let mut recv_start = Vec::with_capacity(steps);
    let mut recv_total = 0;
    for t in 0..steps {
        let send = (pos + 2 * w - t) % w;
        let recv = (pos + 2 * w - t - 1) % w;
        let mode = match kind {
            RingKind::AllReduce { div } if t + 2 == w => div.map_or(Mode::Add, Mode::AddDiv),
            RingKind::AllReduce { .. } if t + 2 < w => Mode::Add,
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
pub(crate) fn split(base: usize, n: usize, w: usize) -> Vec<Range<usize>> {
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

/// The two ring links of a rank: index 0 goes to the next rank, 1 to the previous one.
pub(crate) struct Links<'a> {
    pub socks: [&'a TcpStream; 2],
    pub peers: [usize; 2],
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

enum Step {
    Progress,
    /// The socket would block: wait for readiness.
    Blocked,
    /// Nothing may be sent until more is received.
    Waiting,
}

/// Runs one collective call to completion, or fails it.
///
/// `lanes[0]` is clockwise, `lanes[1]` (if any) counter-clockwise. `scratch[l]` stages lane
/// `l`'s reduced segments; it must be non-empty when that lane has `Add` segments.
pub(crate) fn exchange<T: Pod>(
    links: &Links<'_>,
    call: CallInfo,
    buf: &mut [T],
    lanes: &[LanePlan],
    scratch: &mut [Vec<T>; 2],
    deadline: Instant,
    timeout: std::time::Duration,
) -> Result<()> {
    assert!(lanes.len() <= 2, "at most two ring directions");
    let mut ex = Exchange {
        links,
        call,
        header: wire::encode_header(&call),
        buf,
        lanes,
        scratch,
        hdr_sent: [0; 2],
        hdr_in: [[0; RECORD_LEN]; 2],
        hdr_got: [0; 2],
        send: [SendState::default(); 2],
        recv: [RecvState::default(); 2],
    };
    for l in 0..lanes.len() {
        ex.skip_empty(l);
    }
    loop {
        let mut progressed = false;
        let mut wanted = [0i16; 2];
        let mut pending = false;
        for s in 0..2 {
            if ex.in_pending(s) {
                pending = true;
                match ex.recv_step(s)? {
                    Step::Progress => progressed = true,
                    Step::Blocked => wanted[s] |= sys::POLLIN,
                    Step::Waiting => {}
                }
            }
        }
        for s in 0..2 {
            if ex.out_pending(s) {
                pending = true;
                match ex.send_step(s)? {
                    Step::Progress => progressed = true,
                    Step::Blocked => wanted[s] |= sys::POLLOUT,
                    Step::Waiting => {}
                }
            }
        }
        if !pending {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(CollectiveError::Timeout { op: call.op, after: timeout });
        }
        if progressed {
            continue;
        }
        // Nothing moved: sleep until a socket is ready. POLLRDHUP is asked on every busy
        // socket so a neighbour that dies while we only wait to send is seen at once.
        let mut fds = [PollFd::IDLE; 2];
        for (s, fd) in fds.iter_mut().enumerate() {
            if ex.in_pending(s) || ex.out_pending(s) {
                *fd = PollFd::new(links.socks[s].as_raw_fd(), wanted[s] | sys::POLLRDHUP);
            }
        }
        sys::poll(&mut fds, deadline - now)
            .map_err(|source| CollectiveError::Io { op: call.op, source })?;
        for (s, fd) in fds.iter().enumerate() {
            let closed = fd.revents() & (sys::POLLERR | sys::POLLHUP | sys::POLLRDHUP) != 0;
            // With a read pending, the next read reports EOF or the error itself (after any
            // data still queued); with only sends left, a closed neighbour is a lost one.
            if closed && !ex.in_pending(s) {
                let source =
                    links.socks[s].take_error().ok().flatten().unwrap_or_else(|| closed_by_peer());
                return Err(CollectiveError::PeerLost {
                    rank: links.peers[s],
                    op: call.op,
                    source,
                });
            }
        }
    }
}

struct Exchange<'a, 'b, T> {
    links: &'a Links<'a>,
    call: CallInfo,
    header: [u8; RECORD_LEN],
    buf: &'b mut [T],
    lanes: &'a [LanePlan],
    scratch: &'b mut [Vec<T>; 2],
    hdr_sent: [usize; 2],
    hdr_in: [[u8; RECORD_LEN]; 2],
    hdr_got: [usize; 2],
    send: [SendState; 2],
    recv: [RecvState; 2],
}

impl<T: Pod> Exchange<'_, '_, T> {
    // Lane l sends on socket l and receives on socket 1 - l.

    fn in_pending(&self, s: usize) -> bool {
        let l = 1 - s;
        self.hdr_got[s] < RECORD_LEN
            || (l < self.lanes.len() && self.recv[l].seg < self.lanes[l].recvs.len())
    }

    fn out_pending(&self, s: usize) -> bool {
        self.hdr_sent[s] < RECORD_LEN
            || (s < self.lanes.len() && self.send[s].seg < self.lanes[s].sends.len())
    }

    /// Moves lane `l` past segments that carry nothing.
    fn skip_empty(&mut self, l: usize) {
        let plan = &self.lanes[l];
        while plan.sends.get(self.send[l].seg).is_some_and(|g| g.range.is_empty()) {
            self.send[l].seg += 1;
        }
        while plan.recvs.get(self.recv[l].seg).is_some_and(|g| g.range.is_empty()) {
            self.recv[l].seg += 1;
        }
    }

    fn recv_step(&mut self, s: usize) -> Result<Step> {
        let sock = self.links.socks[s];
        let (peer, op) = (self.links.peers[s], self.call.op);
        if self.hdr_got[s] < RECORD_LEN {
            let got = self.hdr_got[s];
            let Some(n) = read_some(sock, &mut self.hdr_in[s][got..], peer, op)? else {
                return Ok(Step::Blocked);
            };
            self.hdr_got[s] += n;
            if self.hdr_got[s] == RECORD_LEN {
                let theirs = wire::decode_header(&self.hdr_in[s])
                    .map_err(|detail| CollectiveError::Protocol { peer, op, detail })?;
                if theirs != self.call {
                    return Err(CollectiveError::Mismatch { peer, ours: self.call, theirs });
                }
            }
            return Ok(Step::Progress);
        }
        let l = 1 - s;
        let lanes = self.lanes;
        let seg = &lanes[l].recvs[self.recv[l].seg];
        let st = &mut self.recv[l];
        let dst = &mut self.buf[seg.range.clone()];
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
                let scratch = &mut self.scratch[l];
                let staged = sys::as_bytes_mut(scratch);
                let room = (seg_bytes - st.bytes).min(staged.len() - st.fill);
                let window = &mut staged[st.fill..st.fill + room];
                let Some(n) = read_some(sock, window, peer, op)? else {
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
            self.skip_empty(l);
        }
        Ok(Step::Progress)
    }

    fn send_step(&mut self, s: usize) -> Result<Step> {
        let sock = self.links.socks[s];
        let (peer, op) = (self.links.peers[s], self.call.op);
        if self.hdr_sent[s] < RECORD_LEN {
            let Some(n) = write_some(sock, &self.header[self.hdr_sent[s]..], peer, op)? else {
                return Ok(Step::Blocked);
            };
            self.hdr_sent[s] += n;
            return Ok(Step::Progress);
        }
        let l = s;
        let lanes = self.lanes;
        let seg = &lanes[l].sends[self.send[l].seg];
        let len = seg.range.len();
        let ready = match seg.dep {
            None => len,
            Some(dep) => self.recv[l].total.saturating_sub(dep).min(len),
        };
        let st = &mut self.send[l];
        let ready_bytes = ready * T::SIZE;
        if st.sent >= ready_bytes {
            return Ok(Step::Waiting);
        }
        let bytes = sys::as_bytes(&self.buf[seg.range.clone()]);
        let Some(n) = write_some(sock, &bytes[st.sent..ready_bytes], peer, op)? else {
            return Ok(Step::Blocked);
        };
        st.sent += n;
        if st.sent == len * T::SIZE {
            *st = SendState { seg: st.seg + 1, sent: 0 };
            self.skip_empty(l);
        }
        Ok(Step::Progress)
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
