//! The cluster-wide resource pool: nodes offer CPUs, GPUs, memory and custom resources; trials
//! ask for *placement groups* (one bundle per worker) and get all bundles at once or none.
//!
//! In the pipeline this sits between the Tuner controller (which asks for a group when it wants to
//! start a trial and releases it when the trial ends) and the worker group (which spawns one worker
//! per [`BundlePlacement`], with its GPU ids as `CUDA_VISIBLE_DEVICES`). It is a pure, synchronous
//! state machine owned by one task: no clocks, no I/O, no async. Node agents, the head's gRPC
//! service and health checks live around it and feed it facts (`add_node`, `mark_node_dead`, …).
//!
//! # Lifecycle
//!
//! [`Pool::request`] → *pending* → [`Pool::schedule`] → *reserved* → [`Pool::release`].
//! [`Pool::cancel`] withdraws a pending group (and releases a reserved one). A request that could
//! not fit the alive cluster even if it were empty is refused at once with an error naming the
//! bundle and resource. When a node dies ([`Pool::mark_node_dead`]), every group holding a bundle
//! on it is released and reported; a node that rejoins comes back clean, holding nothing.
//!
//! A head uses [`Pool::mark_node_dead_keeping_survivors`] instead: the groups that lost a bundle
//! become *draining*, still holding their bundles on the other nodes, because their workers there
//! may still be running until they are killed. Released once those have exited, only then can
//! their CPUs and GPUs go to another group (never two trials on one device).
//!
//! # Gang reservation
//!
//! A group is reserved only when every bundle has a place; a pending group holds nothing. So two
//! trials can never each hold half of what both need, and no set of pending trials can deadlock:
//! if reserved groups are eventually released, the cluster eventually drains and every feasible
//! request fits it.
//!
//! # Fair order: FIFO with backfilling and one anchor
//!
//! Each [`Pool::schedule`] pass walks the pending requests oldest first and reserves every one
//! that fits the free resources now (*backfilling*: a request that fits may overtake an older one
//! that does not). Plain backfilling can starve a large request forever behind a stream of small
//! ones, so:
//!
//! 1. A pending request is *overtaken* in a pass when it stays pending while a younger request is
//!    reserved in that pass (at most once per pass; shown in [`GroupState::Pending`]).
//! 2. Once overtaken [`PoolConfig::max_overtakes`] times (default 4) it may become the **anchor**:
//!    the oldest such request that still does not fit takes the anchor when nobody holds it.
//!    There is at most one anchor; it stays with its request until that is reserved or cancelled
//!    (or no longer fits the alive cluster, see 5).
//! 3. The anchor gets a plan on the *empty* alive cluster, and the planned nodes are **fenced**:
//!    any other request — older or younger — may use a fenced node only if the anchor's planned
//!    share of that node still fits in what is left afterwards. Free room on fenced nodes then
//!    only grows, while unfenced nodes keep being backfilled at full speed.
//! 4. Every pass tries the anchor first: anywhere that fits now, else exactly as fenced. Once all
//!    groups that held fenced nodes when the fence was set have been released, it fits.
//! 5. When nodes join, die or rejoin the anchor is re-planned (or dropped if the alive cluster can
//!    no longer hold it; it stays pending without blocking anyone).
//!
//! So a request waits at most `max_overtakes` overtaking passes plus the lifetime of the groups
//! already on its fenced nodes; `max_overtakes = 0` gives conservative backfilling (the oldest
//! waiting request is fenced immediately). Infeasible-now requests (after node deaths) never hold
//! the anchor and never block anyone.
//!
//! # Placement and GPUs
//!
//! Strategies follow Ray: PACK (few nodes, best effort), SPREAD (distinct nodes, best effort),
//! STRICT_PACK (one node or nothing), STRICT_SPREAD (distinct nodes or nothing); the heuristics are
//! described in the `place` module. A node's GPUs are devices `0..n` of capacity 1 each. A bundle
//! asking for less than 1 GPU gets one device shared with others (the fullest device that still
//! has room, so whole devices stay whole); a bundle asking for 1 or more must ask for a whole
//! number and gets that many whole, unshared devices. A device is never handed out beyond 1.
//!
//! # Amounts
//!
//! CPU, GPU and custom amounts are kept as integer 1/10 000 units, memory as bytes, so repeated
//! reserve/release cycles never drift (see `resources`). Amounts are rounded to the nearest unit;
//! a positive amount never rounds to zero.
//!
//! # Cost
//!
//! A pass is linear in the pending requests with cheap early exits: it stops when no resource is
//! free anywhere, rejects a request in O(1) when its largest bundle or its totals exceed the
//! cluster's best node or free sum, and remembers which request *shapes* (strategy + bundles)
//! failed in this pass, so 10 000 pending requests of a few hundred shapes cost a few hundred
//! placement attempts. One placement attempt is O(nodes × bundles).

mod error;
mod ids;
mod infeasible;
#[cfg(test)]
mod invariants;
mod node;
mod place;
mod request;
mod resources;
mod shape;
mod status;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use error::PoolError;
pub(crate) use error::Result;
pub use node::{NodeId, NodeSpec};
pub use request::{BundlePlacement, PgId, PlacementRequest, Reservation, Strategy};
pub use resources::Resources;
pub use status::{BundleStatus, GpuUsage, GroupState, GroupStatus, NodeStatus, PoolStatus};

use place::{Fence, Plan, View};
use resources::{Demand, Free, Grant, Names, from_units};
use shape::{Shapes, Summary};

/// Settings of the pool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolConfig {
    /// Overtaking passes after which a waiting request may take the anchor (see the module docs).
    pub max_overtakes: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self { max_overtakes: 4 }
    }
}

impl PoolConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`max_overtakes`](Self::max_overtakes).
    pub fn max_overtakes(mut self, n: u32) -> Self {
        self.max_overtakes = n;
        self
    }
}

/// One node as the pool keeps it.
#[derive(Debug, Clone)]
pub struct Node {
    id: NodeId,
    address: String,
    alive: bool,
    pub(crate) cap: Free,
    pub(crate) free: Free,
    /// Reserved groups with at least one bundle here.
    holders: BTreeSet<PgId>,
}

/// One placement group: the request and its state, in one table.
#[derive(Debug, Clone)]
struct Group {
    label: String,
    strategy: Strategy,
    bundles: Vec<Resources>,
    demands: Vec<Demand>,
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    /// Waiting; details in `Pool::queue[seq]`.
    Pending { seq: u64 },
    /// Holding, per bundle, a node slot and GPU grant.
    Reserved { placed: Vec<(usize, Grant)> },
    /// Was reserved, then nodes under the bundles in `lost` died (those are gone from the pool):
    /// it keeps holding its other bundles, whose workers may still be running, until released.
    Draining { placed: Vec<(usize, Grant)>, lost: BTreeSet<usize> },
}

/// Per bundle, the node slot and GPU grant a group was given.
type Placed = [(usize, Grant)];

impl State {
    /// The bundles a reserved or draining group holds, with those lost with their nodes.
    fn held(&self) -> Option<(&Placed, &BTreeSet<usize>)> {
        static NONE_LOST: BTreeSet<usize> = BTreeSet::new();
        match self {
            State::Reserved { placed } => Some((placed, &NONE_LOST)),
            State::Draining { placed, lost } => Some((placed, lost)),
            State::Pending { .. } => None,
        }
    }
}

/// A pending request in arrival order.
#[derive(Debug, Clone)]
struct Queued {
    pg: PgId,
    shape: u32,
    overtaken: u32,
}

/// The resource pool. See the [module docs](self) for the lifecycle and the fair order.
#[derive(Debug)]
pub struct Pool {
    config: PoolConfig,
    names: Names,
    nodes: Vec<Node>,
    slots: HashMap<NodeId, usize>,
    /// Slots of alive nodes, ascending.
    alive: Vec<usize>,
    next_node: u64,
    groups: HashMap<PgId, Group>,
    /// Pending requests by arrival sequence number.
    queue: BTreeMap<u64, Queued>,
    next_pg: u64,
    next_seq: u64,
    fence: Option<Fence>,
    shapes: Shapes,
    /// Bumped whenever the set of alive nodes or their capacity changes.
    epoch: u64,
    pass: u64,
}

impl Default for Pool {
    fn default() -> Self {
        Self::new()
    }
}

impl Pool {
    /// An empty pool with the default [`PoolConfig`].
    pub fn new() -> Self {
        Self::with_config(PoolConfig::default())
    }

    /// An empty pool.
    pub fn with_config(config: PoolConfig) -> Self {
        Pool {
            config,
            names: Names::default(),
            nodes: Vec::new(),
            slots: HashMap::new(),
            alive: Vec::new(),
            next_node: 0,
            groups: HashMap::new(),
            queue: BTreeMap::new(),
            next_pg: 0,
            next_seq: 0,
            fence: None,
            shapes: Shapes::default(),
            epoch: 0,
            pass: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    // ----- nodes -----

    /// Adds an alive node under a fresh id.
    pub fn add_node(&mut self, spec: NodeSpec) -> Result<NodeId> {
        let mut id = NodeId(self.next_node);
        while self.slots.contains_key(&id) {
            id = NodeId(id.0.checked_add(1).ok_or(PoolError::DuplicateNode { node: id })?);
        }
        self.insert_node(id, spec)?;
        Ok(id)
    }

    /// Adds an alive node under an id chosen by the caller (for example by the head, from the
    /// node agent's registration).
    pub fn insert_node(&mut self, id: NodeId, spec: NodeSpec) -> Result<()> {
        if self.slots.contains_key(&id) {
            return Err(PoolError::DuplicateNode { node: id });
        }
        let cap = Free::from_spec(&spec.resources, &mut self.names)?;
        self.slots.insert(id, self.nodes.len());
        self.nodes.push(Node {
            id,
            address: spec.address,
            alive: true,
            free: cap.clone(),
            cap,
            holders: BTreeSet::new(),
        });
        self.next_node = self.next_node.max(id.0.saturating_add(1));
        self.topology_changed();
        Ok(())
    }

    /// Marks a node dead: every reserved group with a bundle on it is released (all its bundles,
    /// on every node) and returned, sorted, so the caller can fail those trials. Idempotent.
    pub fn mark_node_dead(&mut self, node: NodeId) -> Result<Vec<PgId>> {
        let slot = self.slot(node)?;
        let lost = self.evict(slot);
        let n = &mut self.nodes[slot];
        if n.alive {
            n.alive = false;
            n.free = n.cap.clone();
            self.topology_changed();
        }
        Ok(lost)
    }

    /// Marks `node` dead like [`mark_node_dead`](Self::mark_node_dead), except that the groups
    /// holding a bundle on it keep what they hold on the other nodes: they become draining (see
    /// [`GroupState::Draining`]) until [`release`](Self::release)d. Returns those groups.
    pub fn mark_node_dead_keeping_survivors(&mut self, node: NodeId) -> Result<Vec<PgId>> {
        let slot = self.slot(node)?;
        let hit: Vec<PgId> = std::mem::take(&mut self.nodes[slot].holders).into_iter().collect();
        let on_slot = |placed: &[(usize, Grant)]| -> Vec<usize> {
            placed.iter().enumerate().filter(|(_, (s, _))| *s == slot).map(|(i, _)| i).collect()
        };
        for pg in &hit {
            let Some(group) = self.groups.get_mut(pg) else { continue };
            match &mut group.state {
                State::Reserved { placed } => {
                    let placed = std::mem::take(placed);
                    let lost = on_slot(&placed).into_iter().collect();
                    group.state = State::Draining { placed, lost };
                }
                State::Draining { placed, lost } => lost.extend(on_slot(placed)),
                State::Pending { .. } => {}
            }
        }
        let n = &mut self.nodes[slot];
        if n.alive {
            n.alive = false;
            n.free = n.cap.clone();
            self.topology_changed();
        }
        Ok(hit)
    }

    /// Brings a node back, clean: nothing held, capacity from `spec` (which may differ from
    /// before). If the pool still thought it alive, it restarted unnoticed: the groups it held are
    /// released and returned, as with [`mark_node_dead`](Self::mark_node_dead).
    pub fn rejoin_node(&mut self, node: NodeId, spec: NodeSpec) -> Result<Vec<PgId>> {
        let slot = self.slot(node)?;
        // Validate before touching anything.
        let cap = Free::from_spec(&spec.resources, &mut self.names)?;
        let lost = self.evict(slot);
        let n = &mut self.nodes[slot];
        n.address = spec.address;
        n.alive = true;
        n.free = cap.clone();
        n.cap = cap;
        self.topology_changed();
        Ok(lost)
    }

    /// The address a node was added with.
    pub fn node_address(&self, node: NodeId) -> Option<&str> {
        let slot = *self.slots.get(&node)?;
        Some(&self.nodes[slot].address)
    }

    fn slot(&self, node: NodeId) -> Result<usize> {
        self.slots.get(&node).copied().ok_or(PoolError::UnknownNode { node })
    }

    /// Releases every group holding a bundle on `slot`.
    fn evict(&mut self, slot: usize) -> Vec<PgId> {
        let lost: Vec<PgId> = std::mem::take(&mut self.nodes[slot].holders).into_iter().collect();
        for &pg in &lost {
            self.release_reserved(pg);
        }
        lost
    }

    fn topology_changed(&mut self) {
        self.epoch += 1;
        self.alive = (0..self.nodes.len()).filter(|&s| self.nodes[s].alive).collect();
    }

    // ----- requests -----

    /// Queues a placement group. Refuses at once a request that is malformed or could not fit the
    /// alive cluster even if it were empty. Nothing is reserved until [`schedule`](Self::schedule).
    pub fn request(&mut self, req: PlacementRequest) -> Result<PgId> {
        let demands = self.demands(&req)?;
        let shape = match self.shapes.find(req.strategy, &demands) {
            Some(id) if self.shapes.info[id as usize].feasible == Some((self.epoch, true)) => id,
            _ => {
                self.feasible(req.strategy, &demands)?;
                let id = self.shapes.intern(req.strategy, &demands);
                self.shapes.info[id as usize].feasible = Some((self.epoch, true));
                id
            }
        };
        let pg = PgId(self.next_pg);
        self.next_pg += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.insert(seq, Queued { pg, shape, overtaken: 0 });
        self.groups.insert(
            pg,
            Group {
                label: req.label,
                strategy: req.strategy,
                bundles: req.bundles,
                demands,
                state: State::Pending { seq },
            },
        );
        Ok(pg)
    }

    /// Whether `req` would be accepted by [`request`](Self::request) now (dry run).
    pub fn check_feasible(&self, req: &PlacementRequest) -> Result<()> {
        let demands = self.demands(req)?;
        self.feasible(req.strategy, &demands)
    }

    /// Withdraws a pending group, or releases a reserved (or draining) one.
    pub fn cancel(&mut self, pg: PgId) -> Result<()> {
        match self.groups.get(&pg).map(|g| &g.state) {
            None => Err(self.missing(pg)),
            Some(State::Reserved { .. } | State::Draining { .. }) => {
                self.release_reserved(pg);
                Ok(())
            }
            Some(&State::Pending { seq }) => {
                self.queue.remove(&seq);
                self.groups.remove(&pg);
                if self.fence.as_ref().is_some_and(|f| f.pg == pg) {
                    self.fence = None;
                }
                Ok(())
            }
        }
    }

    /// Gives back everything a reserved (or draining) group holds.
    pub fn release(&mut self, pg: PgId) -> Result<()> {
        match self.groups.get(&pg).map(|g| &g.state) {
            None => Err(self.missing(pg)),
            Some(State::Pending { .. }) => Err(PoolError::NotReserved { pg }),
            Some(State::Reserved { .. } | State::Draining { .. }) => {
                self.release_reserved(pg);
                Ok(())
            }
        }
    }

    fn missing(&self, pg: PgId) -> PoolError {
        if pg.0 < self.next_pg {
            PoolError::GroupEnded { pg }
        } else {
            PoolError::UnknownGroup { pg }
        }
    }

    fn release_reserved(&mut self, pg: PgId) {
        let Some(group) = self.groups.remove(&pg) else {
            return;
        };
        let (placed, lost) = match group.state {
            State::Reserved { placed } => (placed, BTreeSet::new()),
            State::Draining { placed, lost } => (placed, lost),
            State::Pending { .. } => {
                // Not reserved: put it back untouched.
                self.groups.insert(pg, group);
                return;
            }
        };
        for (i, (slot, grant)) in placed.iter().enumerate() {
            if lost.contains(&i) {
                // Gone with its node (which may have rejoined clean since).
                continue;
            }
            let n = &mut self.nodes[*slot];
            n.holders.remove(&pg);
            if n.alive {
                n.free.give(&group.demands[i], grant, &n.cap);
            }
        }
    }

    /// Validates a request into internal demands (unknown custom names are infeasible).
    fn demands(&self, req: &PlacementRequest) -> Result<Vec<Demand>> {
        if req.bundles.is_empty() {
            return Err(PoolError::NoBundles);
        }
        let mut demands = Vec::with_capacity(req.bundles.len());
        let mut unknown = None;
        for (i, b) in req.bundles.iter().enumerate() {
            let (d, u) = Demand::from_bundle(i, b, &self.names)?;
            if let Some((name, v)) = u {
                unknown.get_or_insert(PoolError::ExceedsEveryNode {
                    bundle: i,
                    resource: name,
                    requested: v,
                    largest: 0.0,
                });
            }
            demands.push(d);
        }
        match unknown {
            Some(e) => Err(e),
            None => Ok(demands),
        }
    }

    /// Whether the demands fit the empty alive cluster; if not, says why.
    fn feasible(&self, strategy: Strategy, demands: &[Demand]) -> Result<()> {
        let view = self.view(true, false);
        if place::place(&view, demands, strategy).is_some() {
            return Ok(());
        }
        Err(self.why_infeasible(strategy, demands))
    }

    fn view(&self, empty: bool, fenced: bool) -> View<'_> {
        View {
            nodes: &self.nodes,
            alive: &self.alive,
            empty,
            fence: if fenced { self.fence.as_ref() } else { None },
        }
    }

    // ----- scheduling -----

    /// Runs one pass of the fair order over the pending requests (see the module docs) and
    /// returns the groups reserved by it, in the order they were reserved. Call it after anything
    /// that may let a request fit: a request, a release, a cancel, a node joining.
    pub fn schedule(&mut self) -> Vec<Reservation> {
        let mut out = Vec::new();
        if self.queue.is_empty() {
            return out;
        }
        self.pass += 1;
        self.refresh_fence();

        // 1. The anchor first, ignoring its own fence: anywhere that fits, else as fenced.
        if let Some(fence) = self.fence.take() {
            let pending =
                self.groups.get(&fence.pg).filter(|g| matches!(g.state, State::Pending { .. }));
            let plan = pending.and_then(|g| {
                let view = self.view(false, false);
                place::place(&view, &g.demands, g.strategy)
                    .or_else(|| place::place_fenced(&view, &g.demands, &fence))
            });
            match plan {
                Some(plan) => out.push(self.reserve(fence.pg, plan)),
                None if pending.is_some() => self.fence = Some(fence),
                None => {} // gone: the anchor is free again
            }
        }

        // 2. Everyone else oldest first, backfilling around the fence.
        let entries: Vec<(u64, PgId, u32)> =
            self.queue.iter().map(|(&seq, q)| (seq, q.pg, q.shape)).collect();
        let customs = self.names.len();
        let mut summary = Summary::of(&self.nodes, &self.alive, customs);
        let mut waiting: Vec<u64> = Vec::new();
        let mut youngest_reserved = None;
        for (seq, pg, shape) in entries {
            if self.fence.as_ref().is_some_and(|f| f.pg == pg) {
                waiting.push(seq);
                continue;
            }
            if summary.exhausted() {
                // Nothing younger can be reserved either, so nobody left is overtaken.
                break;
            }
            let plan = {
                let info = &self.shapes.info[shape as usize];
                if info.failed_pass == self.pass || !summary.may_fit(info) {
                    None
                } else {
                    self.groups
                        .get(&pg)
                        .and_then(|g| place::place(&self.view(false, true), &g.demands, g.strategy))
                }
            };
            match plan {
                Some(plan) => {
                    out.push(self.reserve(pg, plan));
                    summary = Summary::of(&self.nodes, &self.alive, customs);
                    youngest_reserved = Some(seq);
                }
                None => {
                    self.shapes.info[shape as usize].failed_pass = self.pass;
                    waiting.push(seq);
                    self.maybe_anchor(seq, pg, shape);
                }
            }
        }

        // 3. Count the overtaking.
        if let Some(youngest) = youngest_reserved {
            for seq in waiting.into_iter().take_while(|&s| s < youngest) {
                if let Some(q) = self.queue.get_mut(&seq) {
                    q.overtaken = q.overtaken.saturating_add(1);
                }
            }
        }
        self.compact_shapes();
        out
    }

    /// Gives the anchor to the waiting request at `seq` if it is free, the request has been
    /// overtaken often enough and it fits the empty alive cluster.
    fn maybe_anchor(&mut self, seq: u64, pg: PgId, shape: u32) {
        if self.fence.is_some() {
            return;
        }
        let Some(q) = self.queue.get(&seq) else {
            return;
        };
        if q.overtaken < self.config.max_overtakes {
            return;
        }
        let epoch = self.epoch;
        if self.shapes.info[shape as usize].feasible == Some((epoch, false)) {
            return;
        }
        let fence = self.plan_fence(pg);
        self.shapes.info[shape as usize].feasible = Some((epoch, fence.is_some()));
        self.fence = fence;
    }

    fn plan_fence(&self, pg: PgId) -> Option<Fence> {
        let g = self.groups.get(&pg)?;
        let plan = place::place(&self.view(true, false), &g.demands, g.strategy)?;
        Some(Fence::new(pg, self.epoch, &plan, &g.demands))
    }

    /// Re-plans the anchor after nodes changed, or drops it if it no longer fits.
    fn refresh_fence(&mut self) {
        if let Some(pg) = self.fence.as_ref().filter(|f| f.epoch != self.epoch).map(|f| f.pg) {
            self.fence = self.plan_fence(pg);
        }
    }

    fn reserve(&mut self, pg: PgId, plan: Plan) -> Reservation {
        for (slot, free) in plan.touched {
            self.nodes[slot].free = free;
        }
        let mut bundles = Vec::with_capacity(plan.bundles.len());
        for (slot, grant) in &plan.bundles {
            let n = &mut self.nodes[*slot];
            n.holders.insert(pg);
            bundles.push(placement(n.id, grant));
        }
        let mut label = String::new();
        if let Some(g) = self.groups.get_mut(&pg) {
            if let State::Pending { seq } = g.state {
                self.queue.remove(&seq);
            }
            g.state = State::Reserved { placed: plan.bundles };
            label.clone_from(&g.label);
        }
        Reservation { pg, label, bundles }
    }

    /// Drops shapes no pending request uses once they outnumber the pending requests.
    fn compact_shapes(&mut self) {
        if self.shapes.info.len() <= 2 * self.queue.len() + 1024 {
            return;
        }
        let old = std::mem::take(&mut self.shapes);
        for q in self.queue.values_mut() {
            if let Some(g) = self.groups.get(&q.pg) {
                let id = self.shapes.intern(g.strategy, &g.demands);
                if let Some(prev) = old.info.get(q.shape as usize) {
                    let info = &mut self.shapes.info[id as usize];
                    info.failed_pass = prev.failed_pass;
                    info.feasible = prev.feasible;
                }
                q.shape = id;
            }
        }
    }

    // ----- observing -----

    /// Where a reserved group's bundles are, in bundle order (None when pending or unknown).
    pub fn placement(&self, pg: PgId) -> Option<Vec<BundlePlacement>> {
        match &self.groups.get(&pg)?.state {
            State::Reserved { placed } => Some(
                placed.iter().map(|(slot, grant)| placement(self.nodes[*slot].id, grant)).collect(),
            ),
            State::Pending { .. } | State::Draining { .. } => None,
        }
    }

    /// Number of pending requests.
    pub fn pending_count(&self) -> usize {
        self.queue.len()
    }

    /// Number of reserved groups.
    pub fn reserved_count(&self) -> usize {
        self.groups.len() - self.queue.len()
    }

    /// A snapshot of nodes and groups, ordered by id.
    pub fn status(&self) -> PoolStatus {
        let mut nodes: Vec<NodeStatus> = self
            .nodes
            .iter()
            .map(|n| NodeStatus {
                id: n.id,
                address: n.address.clone(),
                alive: n.alive,
                total: n.cap.to_resources(&n.cap, &self.names),
                free: if n.alive {
                    n.free.to_resources(&n.cap, &self.names)
                } else {
                    Free::default().to_resources(&n.cap, &self.names)
                },
                gpu_free: n
                    .free
                    .gpus
                    .iter()
                    .map(|&u| if n.alive { from_units(u) } else { 0.0 })
                    .collect(),
                gpu_error: None,
                gpus: Vec::new(),
            })
            .collect();
        nodes.sort_by_key(|n| n.id);
        let positions: HashMap<u64, usize> =
            self.queue.keys().enumerate().map(|(i, &s)| (s, i)).collect();
        let mut groups: Vec<GroupStatus> = self
            .groups
            .iter()
            .map(|(&id, g)| {
                let (state, placed) = match &g.state {
                    State::Pending { seq } => (
                        GroupState::Pending {
                            queue_position: positions.get(seq).copied().unwrap_or(0),
                            overtaken: self.queue.get(seq).map_or(0, |q| q.overtaken),
                            anchored: self.fence.as_ref().is_some_and(|f| f.pg == id),
                        },
                        None,
                    ),
                    State::Reserved { placed } => (GroupState::Reserved, Some(placed)),
                    State::Draining { placed, lost } => (
                        GroupState::Draining { lost_bundles: lost.iter().copied().collect() },
                        Some(placed),
                    ),
                };
                let lost = g.state.held().map(|(_, lost)| lost);
                let bundles = g
                    .bundles
                    .iter()
                    .enumerate()
                    .map(|(i, r)| BundleStatus {
                        resources: r.clone(),
                        placement: placed
                            .and_then(|p| p.get(i))
                            .filter(|_| !lost.is_some_and(|l| l.contains(&i)))
                            .map(|(slot, grant)| placement(self.nodes[*slot].id, grant)),
                    })
                    .collect();
                GroupStatus { id, label: g.label.clone(), strategy: g.strategy, state, bundles }
            })
            .collect();
        groups.sort_by_key(|g| g.id);
        PoolStatus { nodes, groups }
    }
}

fn placement(node: NodeId, grant: &Grant) -> BundlePlacement {
    BundlePlacement {
        node,
        gpu_ids: grant.devices.clone(),
        gpu_fraction: if grant.devices.is_empty() { 0.0 } else { from_units(grant.per_device) },
    }
}
