//! Collectives for data-parallel training on CPU: the process group a trial's workers average
//! their gradients through.
//!
//! Place in the pipeline: a crate of its own, under both the driver (whose errors carry a
//! [`CollectiveError`]) and the worker side (`rtune::worker`, whose Torch backend builds the
//! group), as burn keeps burn-collective apart. A trial runs N worker processes; after the
//! rendezvous has collected every rank's listener address and sent the list to all ranks,
//! each worker builds a [`RingGroup`] and the training loop calls
//! [`ProcessGroup::all_reduce`] on its flattened gradients every step (and
//! [`ProcessGroup::broadcast`] once for the initial weights). GPU training uses NCCL behind
//! the same trait (`nccl.rs` beside this file: libnccl opened at run time and bootstrapped over
//! this ring).
//!
//! The CPU backend is a ring all-reduce over TCP, measured faster than Gloo on 2 cores over
//! loopback: 100 MB float32 between 2 processes at 1.8–2.0 GB/s against 1.1–1.3 GB/s for
//! `torch.distributed` with Gloo (`bench/allreduce.sh` runs both side by side):
//!
//! * **Algorithm.** Reduce-scatter then all-gather around the ring, both phases streamed:
//!   a rank forwards each element as soon as it has reduced it, so the 2(w-1) steps overlap.
//!   Large buffers are split in two halves, one going clockwise and one counter-clockwise, so
//!   both directions of every TCP connection carry data.
//! * **Determinism.** Each element is summed in one fixed order (along the ring, starting at
//!   a fixed rank) by one owner, then only copied; every rank ends with identical bytes.
//! * **One thread.** A single `poll(2)` loop per call sends and receives on both links at
//!   once, with non-blocking sockets. (Driving the two directions from two threads is an
//!   option, [`GroupOptions::lane_threads_min_bytes`]; on 2 cores it measured no faster.)
//! * **Failure.** Every call has a deadline ([`GroupOptions::timeout`]); a neighbour whose
//!   connection closes or resets fails the call at once with [`CollectiveError::PeerLost`];
//!   each call starts with a header (op, sequence number, length, root, directions) that the
//!   neighbours check, so mismatched calls fail with [`CollectiveError::Mismatch`]. After any
//!   failure the group is poisoned and closes its links so the other ranks fail fast too.
//!
//! ```no_run
//! use std::net::{SocketAddr, TcpListener};
//! use rtune_collective::{GroupOptions, ProcessGroup, ReduceOp, RingGroup};
//!
//! # fn publish(_: SocketAddr) -> Vec<SocketAddr> { Vec::new() }
//! # fn main() -> rtune_collective::Result<()> {
//! let (rank, world) = (0, 2);
//! let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//! // The rendezvous: send our address to the driver, get every rank's back (index = rank).
//! let peers = publish(listener.local_addr().unwrap());
//! let mut group = RingGroup::connect(rank, world, listener, &peers, GroupOptions::new(0x7a1))?;
//! let mut grads = vec![0.5f32; 1 << 20];
//! group.all_reduce(&mut grads, ReduceOp::Avg)?;
//! # Ok(()) }
//! ```
//!
//! Not here: the rendezvous (address exchange), choosing the group id, retrying a failed
//! group (the worker group rebuilds one), and anything tensor-shaped (callers pass `&mut [f32]`).

mod engine;
mod error;
pub mod poll;
mod ring;
mod sys;
mod wire;

pub use error::{CallInfo, CollectiveError, Op, Result};
pub use ring::{GroupOptions, RingGroup};

/// How `all_reduce` combines the ranks' buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// The sum divided by the world size (the mean of the ranks' gradients).
    Avg,
}

/// A group of ranks that run collectives together. Every rank must make the same calls in the
/// same order with matching arguments; otherwise the call fails (never silently mixes data).
///
/// All calls block until done or failed; none waits longer than the group's timeout. After an
/// error other than [`CollectiveError::InvalidArgument`] every further call fails with
/// [`CollectiveError::Poisoned`].
pub trait ProcessGroup: Send {
    fn rank(&self) -> usize;

    fn world_size(&self) -> usize;

    /// Combines `buf` across ranks in place; every rank ends with the same bytes.
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()>;

    /// Copies `root`'s `buf` into every rank's `buf` (same length on every rank).
    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<()>;

    /// Copies `root`'s bytes to every rank; the length travels too, and the other ranks' `buf`
    /// is resized to it.
    fn broadcast_bytes(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<()>;

    /// Concatenates every rank's `input` in rank order into `output`, whose length must be
    /// `world_size * input.len()`.
    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) -> Result<()>;

    /// Reduces `input` (the same length on every rank) across ranks, cut into consecutive
    /// pieces of `counts[0]`, `counts[1]`, .. elements (one per rank, summing to `input.len()`,
    /// sizes may differ), and leaves rank `r` its reduced piece in `output` (`counts[r]` long):
    /// the first half of a ring all-reduce, at half its traffic. `input` is scratch.
    fn reduce_scatter(
        &mut self,
        input: &mut [f32],
        counts: &[usize],
        output: &mut [f32],
        op: ReduceOp,
    ) -> Result<()>;

    /// Returns once every rank has entered the barrier.
    fn barrier(&mut self) -> Result<()>;
}
