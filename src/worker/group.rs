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

use std::cell::{Cell, Ref, RefCell, RefMut};
use std::net::TcpListener;
use std::rc::Rc;
use std::time::Duration;

use crate::collective::{CollectiveError, GroupOptions, ProcessGroup, RingGroup};
use crate::error::{Error, Result};
use crate::worker::DriverLink;

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
        }
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
        RefMut::map(self.ring.borrow_mut(), |r| r.as_mut().expect("the group is being re-formed"))
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

/// The peers' collective listeners as the driver named them, index = rank.
pub(crate) fn peer_addresses(peers: &[String]) -> Result<Vec<std::net::SocketAddr>> {
    let parse =
        |p: &String| p.parse().map_err(|e| Error::Protocol(format!("peer address {p}: {e}")));
    peers.iter().map(parse).collect()
}
