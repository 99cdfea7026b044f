//! A worker's collective group, shared by its `TrainContext` and its models: the ring, the
//! rank's place in it, and, in an elastic group (`ScalingConfig::elastic`), how it goes on in
//! place after losing a rank.
//!
//! Going on in place: a data-parallel step (`DistributedModel::backward_step`) whose gradient
//! all-reduce fails on a lost peer closes its links (so ranks blocked on them find out at
//! once), asks the driver to re-form the group (`Regroup`, with the steps it has completed) on a
//! new listener, and connects the new ring with the place the driver gave it. The step in flight
//! is dropped, not taken: the optimizer has not stepped, so every survivor holds the weights and
//! optimizer state of the same completed step (the driver checks that), and the dataset's
//! batches that gave the step give it again, cut for the new group (`redo`). Only that step's
//! compute is lost. Everything else that fails on a lost peer (a train function's own
//! `all_reduce`, a sharded model's collectives, NCCL) fails the attempt, and the run starts the
//! group again from its latest checkpoint, at its new size.
//!
//! Growing in place (see `worker::join`): at a report, the driver may answer that ranks join;
//! the rank re-forms the group with them (`Regroup`) and hands them, from rank 0, the model's
//! variables and optimizer state it keeps handles to here. Whether it can (`joinable`) is what
//! it tells the driver with each report.

use std::cell::{Cell, Ref, RefCell, RefMut};
use std::net::TcpListener;
use std::rc::Rc;
use std::time::Duration;

use tch::Tensor;

use crate::worker::DriverLink;
use rtune_collective::{CollectiveError, GroupOptions, ProcessGroup, RingGroup};
use rtune_driver::error::{Error, Result};

/// A rank's group, shared by its context and its models.
pub(crate) type SharedGroup = Rc<Group>;

/// A rank's place in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    pub local_world: usize,
    pub node_rank: usize,
}

/// See the module docs.
pub(crate) struct Group {
    /// None only while an elastic group re-forms.
    ring: RefCell<Option<Box<dyn ProcessGroup>>>,
    shape: Cell<Shape>,
    elastic: Option<Elastic>,
}

/// An elastic group's state, for going on in place.
pub(crate) struct Elastic {
    /// A connection of its own to the driver: a model asks through it, not the context's.
    link: RefCell<DriverLink>,
    /// Where the rank listens for its new ring.
    bind_host: String,
    timeout: Duration,
    /// Data-parallel steps completed in this attempt.
    steps_done: Cell<u64>,
    /// The step in flight: this rank's rows of it and the rows of its global batch (set by
    /// the dataset's batches, for the gradient's weighting).
    share: Cell<Option<(usize, usize)>>,
    /// Which batches gave the step in flight, and which must give it again after a regroup.
    last_batches: Cell<u64>,
    redo: Cell<Option<u64>>,
    batches_made: Cell<u64>,
    /// Since the last report: None, no collective yet; else whether the first was a
    /// data-parallel step with an optimizer whose state can be handed over.
    first_op: Cell<Option<bool>>,
    /// A rank that joined a running group: its model's start takes the optimizer state too.
    joins_running: Cell<bool>,
    /// What this rank hands over to ranks that join, and what it was handed when it joined.
    handover: RefCell<Handover>,
    /// The attempt number checkpoints are named by since the group last re-formed (the
    /// driver's answer); None before, when the attempt's own is.
    checkpoint_attempt: Cell<Option<u32>>,
}

/// An optimizer's state as ranks hand it over: its flat buffers, and each variable's steps.
pub(crate) struct OptimizerState {
    pub(crate) buffers: Vec<Tensor>,
    pub(crate) steps: Vec<i64>,
}

impl OptimizerState {
    /// Handles sharing the buffers' data.
    pub(crate) fn handles(&self) -> OptimizerState {
        let buffers = self.buffers.iter().map(Tensor::shallow_clone).collect();
        OptimizerState { buffers, steps: self.steps.clone() }
    }
}

/// See `Elastic::handover`.
#[derive(Default)]
struct Handover {
    /// The model's variables, every one in name order (handles sharing their data).
    vars: Vec<Tensor>,
    /// Its optimizer's state, as of its last step.
    optimizer: Option<OptimizerState>,
    /// On a rank that joined: the state it was handed, for its optimizer's first step.
    received: Option<OptimizerState>,
}

impl Elastic {
    pub(crate) fn new(link: DriverLink, bind_host: String, timeout: Duration) -> Elastic {
        Elastic {
            link: RefCell::new(link),
            bind_host,
            timeout,
            steps_done: Cell::new(0),
            share: Cell::new(None),
            last_batches: Cell::new(0),
            redo: Cell::new(None),
            batches_made: Cell::new(0),
            first_op: Cell::new(None),
            joins_running: Cell::new(false),
            handover: RefCell::new(Handover::default()),
            checkpoint_attempt: Cell::new(None),
        }
    }

    /// This rank joins a running group that has completed `steps_done` steps.
    pub(crate) fn joining(self, steps_done: u64) -> Elastic {
        self.steps_done.set(steps_done);
        self.joins_running.set(true);
        self
    }
}

impl Group {
    pub(crate) fn new(
        ring: Box<dyn ProcessGroup>,
        shape: Shape,
        elastic: Option<Elastic>,
    ) -> Rc<Group> {
        Rc::new(Group { ring: RefCell::new(Some(ring)), shape: Cell::new(shape), elastic })
    }

    /// The ring, to call a collective on.
    pub(crate) fn borrow_mut(&self) -> RefMut<'_, Box<dyn ProcessGroup>> {
        self.first_op(false);
        RefMut::map(self.ring.borrow_mut(), |r| r.as_mut().expect("the group is being re-formed"))
    }

    /// A collective is called: a data-parallel step whose optimizer's state can be handed over
    /// (`steps_in_place`), or anything else. The first since the last report says whether
    /// ranks can join at the next (`joinable`).
    pub(crate) fn first_op(&self, steps_in_place: bool) {
        if let Some(e) = self.elastic.as_ref().filter(|e| e.first_op.get().is_none()) {
            e.first_op.set(Some(steps_in_place));
        }
    }

    /// Whether ranks can join in place now (see `first_op`); starts over until the next report.
    pub(crate) fn take_joinable(&self) -> bool {
        self.elastic.as_ref().is_some_and(|e| e.first_op.take() == Some(true))
    }

    /// A model's start (its first broadcast) is not the loop's first collective.
    pub(crate) fn forget_first_op(&self) {
        if let Some(e) = &self.elastic {
            e.first_op.set(None);
        }
    }

    /// Keeps handles to a model's variables (every one, in name order), to hand to joiners.
    pub(crate) fn keep_vars(&self, vars: &[Tensor]) {
        if let Some(e) = &self.elastic {
            e.handover.borrow_mut().vars = vars.iter().map(Tensor::shallow_clone).collect();
        }
    }

    /// Keeps an optimizer's state as of its last step, to hand to joiners.
    pub(crate) fn keep_optimizer(&self, state: impl FnOnce() -> OptimizerState) {
        if let Some(e) = &self.elastic {
            e.handover.borrow_mut().optimizer = Some(state());
        }
    }

    /// What this rank hands over: its model's variables and its optimizer's state.
    pub(crate) fn handover(&self) -> (Vec<Tensor>, Option<OptimizerState>) {
        let Some(e) = &self.elastic else { return (Vec::new(), None) };
        let h = e.handover.borrow();
        (
            h.vars.iter().map(Tensor::shallow_clone).collect(),
            h.optimizer.as_ref().map(OptimizerState::handles),
        )
    }

    /// On a rank that joins a running group, once: true (its model's start takes the optimizer
    /// state as well as the variables).
    pub(crate) fn take_joins_running(&self) -> bool {
        self.elastic.as_ref().is_some_and(|e| e.joins_running.replace(false))
    }

    /// The optimizer state this rank was handed when it joined, for its optimizer.
    pub(crate) fn set_received(&self, state: OptimizerState) {
        if let Some(e) = &self.elastic {
            e.handover.borrow_mut().received = Some(state);
        }
    }

    pub(crate) fn take_received(&self) -> Option<OptimizerState> {
        self.elastic.as_ref().and_then(|e| e.handover.borrow_mut().received.take())
    }

    /// Ranks join at this report: the group re-forms with them (`Regroup`).
    pub(crate) fn grow(&self) -> Result<()> {
        match &self.elastic {
            Some(elastic) => self.regroup(elastic),
            None => Err(Error::Protocol("ranks join a group that is not elastic".into())),
        }
    }

    pub(crate) fn borrow(&self) -> Ref<'_, Box<dyn ProcessGroup>> {
        Ref::map(self.ring.borrow(), |r| r.as_ref().expect("the group is being re-formed"))
    }

    pub(crate) fn shape(&self) -> Shape {
        self.shape.get()
    }

    pub(crate) fn is_elastic(&self) -> bool {
        self.elastic.is_some()
    }

    /// The attempt number the driver gave checkpoints' names when the group last re-formed in
    /// place (a fresh one if it lost its rank 0); None if it never did.
    pub(crate) fn checkpoint_attempt(&self) -> Option<u32> {
        self.elastic.as_ref().and_then(|e| e.checkpoint_attempt.get())
    }

    /// A data-parallel step completed (its optimizer stepped).
    pub(crate) fn step_done(&self) {
        if let Some(e) = &self.elastic {
            e.steps_done.set(e.steps_done.get() + 1);
        }
    }

    /// The step in flight's rows here and in its global batch, where an elastic dataset's
    /// batches gave it.
    pub(crate) fn share(&self) -> Option<(usize, usize)> {
        self.elastic.as_ref().and_then(|e| e.share.get())
    }

    /// A new batches of an elastic dataset: its id.
    pub(crate) fn batches_made(&self) -> u64 {
        let Some(e) = &self.elastic else { return 0 };
        e.batches_made.set(e.batches_made.get() + 1);
        e.batches_made.get()
    }

    /// Whether batches `id` must give its last step again, cut for the group as it is now (a
    /// regroup dropped that step); asked before each step.
    pub(crate) fn redo(&self, id: u64) -> bool {
        let Some(e) = &self.elastic else { return false };
        let redo = e.redo.get() == Some(id);
        if redo {
            e.redo.set(None);
        }
        redo
    }

    /// Batches `id` gives a step of `rows` here, of a global batch of `global` rows.
    pub(crate) fn gave(&self, id: u64, rows: usize, global: usize) {
        if let Some(e) = &self.elastic {
            e.last_batches.set(id);
            e.share.set(Some((rows, global)));
        }
    }

    /// After `error` in a data-parallel step: an elastic group whose peer was lost re-forms
    /// in place and drops the step (Ok); anything else is the error.
    pub(crate) fn recover(&self, error: Error) -> Result<()> {
        let Some(elastic) = &self.elastic else { return Err(error) };
        let lost_peer = matches!(
            &error,
            Error::Collective(CollectiveError::PeerLost { .. } | CollectiveError::Timeout { .. })
        );
        if !lost_peer {
            return Err(error);
        }
        tracing::warn!("{error}: re-forming the group in place");
        self.regroup(elastic).map_err(|e| {
            Error::Worker(format!("{error}; the group could not go on in place: {e}"))
        })?;
        elastic.redo.set(Some(elastic.last_batches.get()));
        Ok(())
    }

    fn regroup(&self, elastic: &Elastic) -> Result<()> {
        // Closing the old links first: ranks blocked on them find out now, not at a timeout.
        drop(self.ring.borrow_mut().take());
        let (listener, address) = listen(&elastic.bind_host)?;
        let steps = elastic.steps_done.get();
        let reply = elastic.link.borrow_mut().regroup(steps, address)?;
        let peers = peer_addresses(&reply.peers)?;
        let (rank, world) = (reply.rank as usize, reply.world_size as usize);
        elastic.checkpoint_attempt.set(Some(reply.checkpoint_attempt));
        let options = GroupOptions::new(reply.collective_group_id).timeout(elastic.timeout);
        let ring = RingGroup::connect(rank, world, listener, &peers, options)?;
        *self.ring.borrow_mut() = Some(Box::new(ring));
        self.shape.set(Shape {
            rank,
            world,
            local_rank: reply.local_rank as usize,
            local_world: reply.local_world_size as usize,
            node_rank: reply.node_rank as usize,
        });
        tracing::info!("the group goes on in place: rank {rank} of {world}");
        Ok(())
    }
}

/// A collective listener on `host` (a free port), and its address as the driver hands it to
/// the peers.
pub(crate) fn listen(host: &str) -> Result<(TcpListener, String)> {
    let listener = TcpListener::bind((host, 0))
        .map_err(|e| Error::Worker(format!("collective listener on {host}: {e}")))?;
    let address = listener.local_addr().map_err(|e| Error::Worker(e.to_string()))?;
    Ok((listener, address.to_string()))
}

/// Every rank's `mine`, in rank order, on every rank (each rank broadcasts its own in turn:
/// for a few bytes a rank, as the tree backends' ports and metrics are).
pub(crate) fn all_gather_bytes(group: &mut dyn ProcessGroup, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut all = Vec::with_capacity(group.world_size());
    for root in 0..group.world_size() {
        let mut bytes = if root == group.rank() { mine.to_vec() } else { Vec::new() };
        group.broadcast_bytes(&mut bytes, root)?;
        all.push(bytes);
    }
    Ok(all)
}

/// The peers' collective listeners as the driver named them, index = rank.
pub(crate) fn peer_addresses(peers: &[String]) -> Result<Vec<std::net::SocketAddr>> {
    let parse =
        |p: &String| p.parse().map_err(|e| Error::Protocol(format!("peer address {p}: {e}")));
    peers.iter().map(parse).collect()
}
