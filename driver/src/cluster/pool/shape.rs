//! Request shapes and the cluster summary: the fast path that lets one scheduling pass reject
//! most of 10 000 pending requests in O(1) each. A *shape* is a strategy plus its bundles; every
//! pending request refers to one, and a shape that failed to fit in a pass is not tried again in
//! that pass (free resources only shrink within a pass, and the fence only grows).

use std::collections::HashMap;

use super::Node;
use super::request::Strategy;
use super::resources::Demand;

/// What every request of one shape (strategy + bundles) needs, for O(1) rejection.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    strategy: Strategy,
    bundles: usize,
    max_cpu: u64,
    max_mem: u64,
    max_share: u64,
    max_whole: u64,
    tot_cpu: u64,
    tot_mem: u64,
    tot_gpu: u64,
    tot_whole: u64,
    max_custom: Vec<(u32, u64)>,
    tot_custom: Vec<(u32, u64)>,
    /// Last pass in which a request of this shape did not fit.
    pub(crate) failed_pass: u64,
    /// `(epoch, fits the empty alive cluster)`.
    pub(crate) feasible: Option<(u64, bool)>,
}

impl Shape {
    pub fn new(strategy: Strategy, demands: &[Demand]) -> Shape {
        let mut s = Shape {
            strategy,
            bundles: demands.len(),
            max_cpu: 0,
            max_mem: 0,
            max_share: 0,
            max_whole: 0,
            tot_cpu: 0,
            tot_mem: 0,
            tot_gpu: 0,
            tot_whole: 0,
            max_custom: Vec::new(),
            tot_custom: Vec::new(),
            failed_pass: 0,
            feasible: None,
        };
        for d in demands {
            s.max_cpu = s.max_cpu.max(d.cpu);
            s.max_mem = s.max_mem.max(d.mem);
            s.max_share = s.max_share.max(d.gpu_share());
            s.max_whole = s.max_whole.max(d.whole_gpus());
            s.tot_cpu = s.tot_cpu.saturating_add(d.cpu);
            s.tot_mem = s.tot_mem.saturating_add(d.mem);
            s.tot_gpu = s.tot_gpu.saturating_add(d.gpu);
            s.tot_whole = s.tot_whole.saturating_add(d.whole_gpus());
            for &(i, u) in &d.custom {
                match s.max_custom.iter_mut().find(|(j, _)| *j == i) {
                    Some((_, v)) => *v = (*v).max(u),
                    None => s.max_custom.push((i, u)),
                }
                match s.tot_custom.iter_mut().find(|(j, _)| *j == i) {
                    Some((_, v)) => *v = v.saturating_add(u),
                    None => s.tot_custom.push((i, u)),
                }
            }
        }
        s
    }
}

/// Free resources of the alive cluster at a glance (an over-approximation of what fits).
#[derive(Debug, Default)]
pub(crate) struct Summary {
    nodes: usize,
    max_cpu: u64,
    max_mem: u64,
    max_device: u64,
    max_whole: u64,
    max_gpu: u64,
    sum_cpu: u64,
    sum_mem: u64,
    sum_gpu: u64,
    max_custom: Vec<u64>,
    sum_custom: Vec<u64>,
}

impl Summary {
    pub fn of(nodes: &[Node], alive: &[usize], customs: usize) -> Summary {
        let mut s = Summary {
            nodes: alive.len(),
            max_custom: vec![0; customs],
            sum_custom: vec![0; customs],
            ..Summary::default()
        };
        for &slot in alive {
            let f = &nodes[slot].free;
            s.max_cpu = s.max_cpu.max(f.cpu);
            s.max_mem = s.max_mem.max(f.mem);
            s.max_device = s.max_device.max(f.max_device());
            s.max_whole = s.max_whole.max(f.whole);
            s.max_gpu = s.max_gpu.max(f.gpu_sum);
            s.sum_cpu = s.sum_cpu.saturating_add(f.cpu);
            s.sum_mem = s.sum_mem.saturating_add(f.mem);
            s.sum_gpu = s.sum_gpu.saturating_add(f.gpu_sum);
            for (i, &u) in f.custom.iter().enumerate().take(customs) {
                s.max_custom[i] = s.max_custom[i].max(u);
                s.sum_custom[i] = s.sum_custom[i].saturating_add(u);
            }
        }
        s
    }

    pub(crate) fn exhausted(&self) -> bool {
        self.sum_cpu == 0
            && self.sum_mem == 0
            && self.sum_gpu == 0
            && self.sum_custom.iter().all(|&u| u == 0)
    }

    pub(crate) fn may_fit(&self, s: &Shape) -> bool {
        let custom = |v: &[u64], i: u32| v.get(i as usize).copied().unwrap_or(0);
        let per_bundle = s.max_cpu <= self.max_cpu
            && s.max_mem <= self.max_mem
            && s.max_share <= self.max_device
            && s.max_whole <= self.max_whole
            && s.max_custom.iter().all(|&(i, u)| u <= custom(&self.max_custom, i));
        let in_total = s.tot_cpu <= self.sum_cpu
            && s.tot_mem <= self.sum_mem
            && s.tot_gpu <= self.sum_gpu
            && s.tot_custom.iter().all(|&(i, u)| u <= custom(&self.sum_custom, i));
        let strategy = match s.strategy {
            Strategy::StrictPack => {
                s.tot_cpu <= self.max_cpu
                    && s.tot_mem <= self.max_mem
                    && s.tot_gpu <= self.max_gpu
                    && s.tot_whole <= self.max_whole
                    && s.tot_custom.iter().all(|&(i, u)| u <= custom(&self.max_custom, i))
            }
            Strategy::StrictSpread => s.bundles <= self.nodes,
            Strategy::Pack | Strategy::Spread => true,
        };
        per_bundle && in_total && strategy
    }
}

/// Interned request shapes; only pending requests refer to them.
#[derive(Debug, Default)]
pub(crate) struct Shapes {
    ids: HashMap<(Strategy, Vec<Demand>), u32>,
    pub info: Vec<Shape>,
}

impl Shapes {
    pub(crate) fn intern(&mut self, strategy: Strategy, demands: &[Demand]) -> u32 {
        let key = (strategy, demands.to_vec());
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.info.len() as u32;
        self.info.push(Shape::new(strategy, demands));
        self.ids.insert(key, id);
        id
    }

    pub fn find(&self, strategy: Strategy, demands: &[Demand]) -> Option<u32> {
        // Lookup needs an owned key; shapes are small (a few bundles).
        self.ids.get(&(strategy, demands.to_vec())).copied()
    }
}
