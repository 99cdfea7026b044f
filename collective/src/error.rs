//! The one error type of the collective layer.
//!
//! Every failure a caller can see names the operation it happened in and, where a peer is to
//! blame, that peer's rank, so a worker can turn it into a trial error that says what happened.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// `Result` with [`CollectiveError`].
pub type Result<T, E = CollectiveError> = std::result::Result<T, E>;

/// The operation an error happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Building the group: connecting to the ring neighbours and the handshake.
    Connect,
    AllReduce,
    Broadcast,
    BroadcastBytes,
    AllGather,
    Barrier,
    ReduceScatter,
}

impl Op {
    pub fn code(self) -> u8 {
        match self {
            Op::Connect => 0,
            Op::AllReduce => 1,
            Op::Broadcast => 2,
            Op::BroadcastBytes => 3,
            Op::AllGather => 4,
            Op::Barrier => 5,
            Op::ReduceScatter => 6,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Op> {
        Some(match code {
            0 => Op::Connect,
            1 => Op::AllReduce,
            2 => Op::Broadcast,
            3 => Op::BroadcastBytes,
            4 => Op::AllGather,
            5 => Op::Barrier,
            6 => Op::ReduceScatter,
            _ => return None,
        })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Connect => "connect",
            Op::AllReduce => "all_reduce",
            Op::Broadcast => "broadcast",
            Op::BroadcastBytes => "broadcast_bytes",
            Op::AllGather => "all_gather",
            Op::Barrier => "barrier",
            Op::ReduceScatter => "reduce_scatter",
        })
    }
}

/// What one rank announced for one collective call (the per-call header on the wire).
/// Two neighbours whose announcements differ called different collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallInfo {
    pub op: Op,
    /// Position of the call in the group's sequence of collectives (0 for the first).
    pub seq: u64,
    /// Element count (f32 or bytes, depending on the op).
    pub len: u64,
    /// Root rank for broadcasts; the reduce op code (1 sum, 2 avg) for all_reduce; else 0.
    pub arg: u32,
    /// Ring directions used (1 or 2); every rank must agree, see `GroupOptions::bidirectional`.
    pub(crate) lanes: u8,
}

impl fmt::Display for CallInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call #{} {}(len {}", self.seq, self.op, self.len)?;
        match self.op {
            Op::Broadcast | Op::BroadcastBytes => write!(f, ", root {}", self.arg)?,
            Op::AllReduce => {
                write!(f, ", {}", if self.arg == 2 { "avg" } else { "sum" })?;
            }
            _ => {}
        }
        write!(f, ", {} ring direction(s))", self.lanes)
    }
}

/// Everything that can go wrong in the collective layer.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// The caller passed something inconsistent (rank out of range, wrong output length...).
    /// Nothing was sent, so the group stays usable.
    #[error("invalid argument to {op}: {what}")]
    InvalidArgument { op: Op, what: String },

    /// A ring neighbour could not be reached before the connect timeout.
    #[error("could not connect to rank {peer} at {addr} within {after:?}: {source}")]
    Connect {
        peer: usize,
        addr: SocketAddr,
        after: Duration,
        #[source]
        source: io::Error,
    },

    /// A connection was made but the other side is not the expected member of this group
    /// (other group id, world size, rank or protocol version).
    #[error("handshake with rank {peer} failed: {reason}")]
    Handshake { peer: usize, reason: String },

    /// A neighbour's connection closed or reset: its process died, or it failed (perhaps
    /// because it saw a failure further along the ring) and closed its links.
    #[error("lost rank {rank} during {op}: {source}")]
    PeerLost {
        rank: usize,
        op: Op,
        #[source]
        source: io::Error,
    },

    /// The operation did not finish within the group's timeout: some rank stopped calling
    /// collectives, or hangs.
    #[error("{op} timed out after {after:?} (a rank stopped calling collectives or hangs)")]
    Timeout { op: Op, after: Duration },

    /// A neighbour called a different collective (other op, length, root or sequence number).
    #[error("rank {peer} made a different collective call: ours is {ours}, theirs is {theirs}")]
    Mismatch { peer: usize, ours: CallInfo, theirs: CallInfo },

    /// A neighbour sent bytes that are not a valid header: the streams are out of step.
    #[error("protocol error from rank {peer} during {op}: {detail}")]
    Protocol { peer: usize, op: Op, detail: String },

    /// An I/O error that is not a lost connection (socket setup, poll).
    #[error("I/O error during {op}: {source}")]
    Io {
        op: Op,
        #[source]
        source: io::Error,
    },

    /// An earlier collective failed; the ranks are out of step, so the group refuses more work.
    /// Build a new group.
    #[error("process group is unusable after an earlier failure: {cause}")]
    Poisoned { cause: String },

    /// The NCCL library (GPU collectives) could not be loaded or a call failed.
    #[error("NCCL {call}: {message}")]
    Nccl { call: &'static str, message: String },
}

impl CollectiveError {
    /// Whether the error leaves the group usable (only argument errors caught before any I/O).
    pub(crate) fn poisons(&self) -> bool {
        !matches!(self, CollectiveError::InvalidArgument { .. })
    }
}
