//! Placement: finding nodes (and GPU devices) for all bundles of one group, per strategy, on a
//! view of the cluster. Pure functions; the pool decides what to do with a plan.
//!
//! The heuristics are greedy and deterministic (ties go to the lower node slot):
//!
//! * node order "best fit": fewest free GPU units first, then fewest free CPUs, so CPU-only work
//!   lands on GPU-less or GPU-exhausted nodes and fragments stay small;
//! * STRICT_PACK: the first node in best-fit order that holds every bundle;
//! * PACK: STRICT_PACK if possible, otherwise bundles largest first, each onto a node the group
//!   already uses, else onto the node with the most free room (so the rest can follow it);
//! * STRICT_SPREAD: an exact bipartite matching of bundles to distinct nodes (augmenting paths),
//!   so heterogeneous bundles are never refused when a distinct layout exists;
//! * SPREAD: STRICT_SPREAD if possible, otherwise bundles largest first, each onto the node that
//!   holds the fewest bundles of the group so far (then the one with the most free room).

use std::collections::VecDeque;

use super::Node;
use super::PgId;
use super::request::Strategy;
use super::resources::{Demand, Free, Grant};

/// Nodes kept for the anchored request: another request may use a fenced node only where the
/// anchor's share of that node still fits in what is left afterwards.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    pub pg: PgId,
    /// Topology epoch the plan was made for.
    pub epoch: u64,
    /// Bundle index → node slot of the plan.
    pub(crate) assign: Vec<usize>,
    /// Node slot → the demands planned there (largest first), sorted by slot.
    pub shares: Vec<(usize, Vec<Demand>)>,
}

impl Fence {
    pub fn new(pg: PgId, epoch: u64, plan: &Plan, demands: &[Demand]) -> Fence {
        let assign: Vec<usize> = plan.bundles.iter().map(|(slot, _)| *slot).collect();
        let mut shares: Vec<(usize, Vec<Demand>)> = Vec::new();
        for (i, &slot) in assign.iter().enumerate() {
            match shares.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, ds)) => ds.push(demands[i].clone()),
                None => shares.push((slot, vec![demands[i].clone()])),
            }
        }
        for (_, ds) in &mut shares {
            ds.sort_by_key(|d| std::cmp::Reverse(d.size_key()));
        }
        shares.sort_by_key(|(s, _)| *s);
        Fence { pg, epoch, assign, shares }
    }

    fn share(&self, slot: usize) -> Option<&[Demand]> {
        self.shares
            .binary_search_by_key(&slot, |(s, _)| *s)
            .ok()
            .map(|i| self.shares[i].1.as_slice())
    }
}

/// The cluster as one placement attempt sees it.
pub struct View<'a> {
    pub nodes: &'a [Node],
    /// Slots of alive nodes.
    pub alive: &'a [usize],
    /// Plan as if nothing were reserved (feasibility checks, anchor plans).
    pub empty: bool,
    /// Fence the attempt must respect (None for the anchored request itself).
    pub(crate) fence: Option<&'a Fence>,
}

impl View<'_> {
    fn base(&self, slot: usize) -> &Free {
        let n = &self.nodes[slot];
        if self.empty { &n.cap } else { &n.free }
    }

    fn best_fit_order(&self) -> Vec<usize> {
        self.order(|f| (f.gpu_sum, f.cpu))
    }

    fn most_free_order(&self) -> Vec<usize> {
        self.order(|f| (u64::MAX - f.cpu, u64::MAX - f.gpu_sum))
    }

    /// Alive slots by ascending `key`, ties by slot (keys computed once, slots make them unique).
    fn order(&self, key: impl Fn(&Free) -> (u64, u64)) -> Vec<usize> {
        let mut keyed: Vec<(u64, u64, usize)> = self
            .alive
            .iter()
            .map(|&s| {
                let (a, b) = key(self.base(s));
                (a, b, s)
            })
            .collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, _, s)| s).collect()
    }
}

/// Where every bundle goes, and the nodes' free resources once it is taken.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Per bundle, in request order: node slot and GPU grant.
    pub bundles: Vec<(usize, Grant)>,
    /// Free resources of every touched node after the plan.
    pub(crate) touched: Vec<(usize, Free)>,
}

/// Free resources under construction during one attempt.
struct Scratch<'v, 'a> {
    view: &'v View<'a>,
    touched: Vec<(usize, Free)>,
}

impl<'v, 'a> Scratch<'v, 'a> {
    fn new(view: &'v View<'a>) -> Self {
        Scratch { view, touched: Vec::new() }
    }

    fn free(&self, slot: usize) -> &Free {
        match self.touched.iter().find(|(s, _)| *s == slot) {
            Some((_, f)) => f,
            None => self.view.base(slot),
        }
    }

    /// Whether `d` fits on `slot` now, and leaves room for the fence's share there.
    fn fits(&self, slot: usize, d: &Demand) -> bool {
        let f = self.free(slot);
        if !f.fits(d) {
            return false;
        }
        match self.view.fence.and_then(|fence| fence.share(slot)) {
            None => true,
            Some(share) => {
                let mut after = f.clone();
                after.take(d).is_some() && after.fits_all(share)
            }
        }
    }

    fn take(&mut self, slot: usize, d: &Demand) -> Option<Grant> {
        if !self.fits(slot, d) {
            return None;
        }
        let i = match self.touched.iter().position(|(s, _)| *s == slot) {
            Some(i) => i,
            None => {
                let f = self.view.base(slot).clone();
                self.touched.push((slot, f));
                self.touched.len() - 1
            }
        };
        self.touched[i].1.take(d)
    }

    fn finish(self, grants: Vec<Option<(usize, Grant)>>) -> Option<Plan> {
        let bundles = grants.into_iter().collect::<Option<Vec<_>>>()?;
        Some(Plan { bundles, touched: self.touched })
    }
}

/// Bundle indices, largest first (stable, so equal bundles keep request order).
fn largest_first(demands: &[Demand]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..demands.len()).collect();
    idx.sort_by_key(|&i| std::cmp::Reverse(demands[i].size_key()));
    idx
}

/// Finds a layout of all `demands` under `strategy`, or None.
pub fn place(view: &View<'_>, demands: &[Demand], strategy: Strategy) -> Option<Plan> {
    if view.alive.is_empty() || demands.is_empty() {
        return None;
    }
    match strategy {
        Strategy::StrictPack => strict_pack(view, demands),
        Strategy::Pack => strict_pack(view, demands).or_else(|| greedy_pack(view, demands)),
        Strategy::StrictSpread => strict_spread(view, demands),
        Strategy::Spread => strict_spread(view, demands).or_else(|| greedy_spread(view, demands)),
    }
}

/// Sum of the bundles, for a cheap per-node pre-check.
struct Totals {
    cpu: u64,
    mem: u64,
    gpu: u64,
    whole: u64,
    custom: Vec<(u32, u64)>,
}

impl Totals {
    fn of(demands: &[Demand]) -> Totals {
        let mut t = Totals { cpu: 0, mem: 0, gpu: 0, whole: 0, custom: Vec::new() };
        for d in demands {
            t.cpu = t.cpu.saturating_add(d.cpu);
            t.mem = t.mem.saturating_add(d.mem);
            t.gpu = t.gpu.saturating_add(d.gpu);
            t.whole = t.whole.saturating_add(d.whole_gpus());
            for &(i, u) in &d.custom {
                match t.custom.iter_mut().find(|(j, _)| *j == i) {
                    Some((_, v)) => *v = v.saturating_add(u),
                    None => t.custom.push((i, u)),
                }
            }
        }
        t
    }

    fn may_fit(&self, f: &Free) -> bool {
        f.cpu >= self.cpu
            && f.mem >= self.mem
            && f.gpu_sum >= self.gpu
            && f.whole >= self.whole
            && self.custom.iter().all(|&(i, u)| f.custom(i) >= u)
    }
}

fn strict_pack(view: &View<'_>, demands: &[Demand]) -> Option<Plan> {
    let totals = Totals::of(demands);
    let order = largest_first(demands);
    for slot in view.best_fit_order() {
        if !totals.may_fit(view.base(slot)) {
            continue;
        }
        let mut scratch = Scratch::new(view);
        let mut grants = vec![None; demands.len()];
        let mut ok = true;
        for &i in &order {
            match scratch.take(slot, &demands[i]) {
                Some(g) => grants[i] = Some((slot, g)),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return scratch.finish(grants);
        }
    }
    None
}

fn greedy_pack(view: &View<'_>, demands: &[Demand]) -> Option<Plan> {
    let order = view.most_free_order();
    let mut used: Vec<usize> = Vec::new();
    let mut scratch = Scratch::new(view);
    let mut grants = vec![None; demands.len()];
    for i in largest_first(demands) {
        let d = &demands[i];
        let slot = used.iter().copied().find(|&s| scratch.fits(s, d)).or_else(|| {
            order.iter().copied().find(|&s| !used.contains(&s) && scratch.fits(s, d))
        })?;
        let g = scratch.take(slot, d)?;
        if !used.contains(&slot) {
            used.push(slot);
        }
        grants[i] = Some((slot, g));
    }
    scratch.finish(grants)
}

fn greedy_spread(view: &View<'_>, demands: &[Demand]) -> Option<Plan> {
    let order = view.most_free_order();
    let mut count: Vec<(usize, usize)> = Vec::new(); // (slot, bundles of this group on it)
    let mut scratch = Scratch::new(view);
    let mut grants = vec![None; demands.len()];
    for i in largest_first(demands) {
        let d = &demands[i];
        let held = |s: usize, count: &[(usize, usize)]| {
            count.iter().find(|(t, _)| *t == s).map_or(0, |(_, c)| *c)
        };
        let slot = order
            .iter()
            .enumerate()
            .filter(|&(_, &s)| scratch.fits(s, d))
            .min_by_key(|&(pos, &s)| (held(s, &count), pos))
            .map(|(_, &s)| s)?;
        let g = scratch.take(slot, d)?;
        match count.iter_mut().find(|(t, _)| *t == slot) {
            Some((_, c)) => *c += 1,
            None => count.push((slot, 1)),
        }
        grants[i] = Some((slot, g));
    }
    scratch.finish(grants)
}

/// Maximum matching of bundles to distinct nodes that each hold the bundle alone.
/// Returns, per bundle, its node slot (None where unmatched).
pub(crate) fn spread_matching(view: &View<'_>, demands: &[Demand]) -> Vec<Option<usize>> {
    let order = view.best_fit_order();
    let scratch = Scratch::new(view);
    // Candidate nodes per bundle; identical bundles share one list.
    let mut adj: Vec<std::rc::Rc<Vec<usize>>> = Vec::with_capacity(demands.len());
    for (i, d) in demands.iter().enumerate() {
        let same = (0..i).find(|&j| demands[j] == *d);
        adj.push(match same {
            Some(j) => adj[j].clone(),
            None => {
                std::rc::Rc::new(order.iter().copied().filter(|&s| scratch.fits(s, d)).collect())
            }
        });
    }
    let slots = view.nodes.len();
    let mut node_of: Vec<Option<usize>> = vec![None; demands.len()];
    let mut bundle_on: Vec<Option<usize>> = vec![None; slots];
    for b in largest_first(demands) {
        // Greedy first: a free candidate needs no search.
        if let Some(&s) = adj[b].iter().find(|&&s| bundle_on[s].is_none()) {
            bundle_on[s] = Some(b);
            node_of[b] = Some(s);
            continue;
        }
        // Augmenting path by breadth-first search over alternating edges.
        let mut reached_from: Vec<Option<usize>> = vec![None; slots];
        let mut queue = VecDeque::from([b]);
        let mut end = None;
        'search: while let Some(x) = queue.pop_front() {
            for &s in adj[x].iter() {
                if reached_from[s].is_some() {
                    continue;
                }
                reached_from[s] = Some(x);
                match bundle_on[s] {
                    None => {
                        end = Some(s);
                        break 'search;
                    }
                    Some(y) => queue.push_back(y),
                }
            }
        }
        let Some(mut s) = end else { continue };
        // Flip the path: every bundle on it moves to the node it reached.
        while let Some(x) = reached_from[s] {
            let prev = node_of[x];
            bundle_on[s] = Some(x);
            node_of[x] = Some(s);
            match prev {
                Some(p) if x != b => s = p,
                _ => break,
            }
        }
    }
    node_of
}

fn strict_spread(view: &View<'_>, demands: &[Demand]) -> Option<Plan> {
    if demands.len() > view.alive.len() {
        return None;
    }
    let matching = spread_matching(view, demands);
    let mut scratch = Scratch::new(view);
    let mut grants = vec![None; demands.len()];
    for (i, slot) in matching.into_iter().enumerate() {
        let slot = slot?;
        grants[i] = Some((slot, scratch.take(slot, &demands[i])?));
    }
    scratch.finish(grants)
}

/// Lays out the anchored request exactly as its fence planned, if every share fits now.
pub(crate) fn place_fenced(view: &View<'_>, demands: &[Demand], fence: &Fence) -> Option<Plan> {
    if fence.assign.len() != demands.len() {
        return None;
    }
    let mut scratch = Scratch::new(view);
    let mut grants = vec![None; demands.len()];
    for i in largest_first(demands) {
        let slot = fence.assign[i];
        if !view.alive.contains(&slot) {
            return None;
        }
        grants[i] = Some((slot, scratch.take(slot, &demands[i])?));
    }
    scratch.finish(grants)
}
