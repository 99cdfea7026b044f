//! Why a placement request can never be placed, in words a user can act on (the resource and
//! the largest amount any node, or the whole cluster, has).

use super::error::PoolError;
use super::place;
use super::request::Strategy;
use super::resources::{CPU, Demand, Free, GPU, MEMORY, UNIT, from_units};

impl super::Pool {
    /// Why demands that fit no empty alive cluster do not, as specifically as it can say:
    /// the first bundle larger than every node, a total over the cluster, too few nodes.
    pub(super) fn why_infeasible(&self, strategy: Strategy, demands: &[Demand]) -> PoolError {
        if self.alive.is_empty() {
            return PoolError::NoAliveNodes;
        }
        let caps = || self.alive.iter().map(|&s| &self.nodes[s].cap);
        let largest = |f: &dyn Fn(&Free) -> u64| caps().map(f).max().unwrap_or(0);
        let cluster = |f: &dyn Fn(&Free) -> u64| caps().map(f).fold(0u64, u64::saturating_add);
        let exceeds =
            |bundle, resource: &str, requested: f64, largest: f64| PoolError::ExceedsEveryNode {
                bundle,
                resource: resource.to_owned(),
                requested,
                largest,
            };
        let max_cpu = largest(&|f| f.cpu);
        let max_mem = largest(&|f| f.mem);
        let max_gpu = largest(&|f| f.gpu_sum);
        for (i, d) in demands.iter().enumerate() {
            if d.cpu > max_cpu {
                return exceeds(i, CPU, from_units(d.cpu), from_units(max_cpu));
            }
            if d.mem > max_mem {
                return exceeds(i, MEMORY, d.mem as f64, max_mem as f64);
            }
            // A share needs one device (capacity 1), whole devices need that many on one node.
            let gpu_limit = if d.gpu < UNIT { max_gpu.min(UNIT) } else { max_gpu };
            if d.gpu > gpu_limit {
                return exceeds(i, GPU, from_units(d.gpu), from_units(gpu_limit));
            }
            for &(c, u) in &d.custom {
                let max = largest(&|f| f.custom(c));
                if u > max {
                    return exceeds(i, self.names.name(c), from_units(u), from_units(max));
                }
            }
            if !caps().any(|f| f.fits(d)) {
                return PoolError::NoNodeFitsBundle { bundle: i };
            }
        }
        let tot =
            |f: &dyn Fn(&Demand) -> u64| demands.iter().map(f).fold(0u64, u64::saturating_add);
        let mut totals = vec![
            (CPU.to_owned(), tot(&|d| d.cpu), max_cpu, cluster(&|f| f.cpu), true),
            (MEMORY.to_owned(), tot(&|d| d.mem), max_mem, cluster(&|f| f.mem), false),
            (GPU.to_owned(), tot(&|d| d.gpu), max_gpu, cluster(&|f| f.gpu_sum), true),
        ];
        let mut customs: Vec<u32> =
            demands.iter().flat_map(|d| d.custom.iter().map(|&(c, _)| c)).collect();
        customs.sort_unstable();
        customs.dedup();
        for c in customs {
            totals.push((
                self.names.name(c).to_owned(),
                tot(&|d| d.custom.iter().find(|&&(j, _)| j == c).map_or(0, |&(_, u)| u)),
                largest(&|f| f.custom(c)),
                cluster(&|f| f.custom(c)),
                true,
            ));
        }
        let amount = |u: u64, scaled: bool| if scaled { from_units(u) } else { u as f64 };
        match strategy {
            Strategy::StrictPack => {
                for (name, requested, largest, _, scaled) in totals {
                    if requested > largest {
                        return PoolError::StrictPackTooLarge {
                            resource: name,
                            requested: amount(requested, scaled),
                            largest: amount(largest, scaled),
                        };
                    }
                }
            }
            Strategy::StrictSpread => {
                let view = self.view(true, false);
                let matched = place::spread_matching(&view, demands).iter().flatten().count();
                return PoolError::TooFewNodes { bundles: demands.len(), nodes: matched };
            }
            Strategy::Pack | Strategy::Spread => {
                for (name, requested, _, available, scaled) in totals {
                    if requested > available {
                        return PoolError::ExceedsCluster {
                            resource: name,
                            requested: amount(requested, scaled),
                            available: amount(available, scaled),
                        };
                    }
                }
            }
        }
        PoolError::CannotPlace { strategy }
    }
}
