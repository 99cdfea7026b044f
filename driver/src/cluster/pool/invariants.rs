//! The pool's self-check, recomputing every node's free resources from the reserved groups.

use std::collections::BTreeSet;

use super::resources::{CPU, Free, MEMORY, UNIT};
use super::{PgId, Pool, State, Strategy};

impl Pool {
    /// Verifies the pool's own accounting: no node or device over-committed, free equals capacity
    /// minus what reserved groups hold, reserved groups whole and on alive nodes as their strategy
    /// demands, draining groups holding their bundles on alive nodes only, pending groups holding
    /// nothing. For tests.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut held: Vec<Free> = self
            .nodes
            .iter()
            .map(|n| Free { gpus: vec![0; n.cap.gpus.len()], ..Free::default() })
            .collect();
        let mut holders: Vec<BTreeSet<PgId>> = vec![BTreeSet::new(); self.nodes.len()];
        let mut pending = 0;
        for (&pg, g) in &self.groups {
            match &g.state {
                State::Pending { seq } => {
                    pending += 1;
                    if self.queue.get(seq).map(|q| q.pg) != Some(pg) {
                        return Err(format!("pending group {pg} is not queued at {seq}"));
                    }
                }
                state => {
                    let Some((placed, lost)) = state.held() else { continue };
                    if placed.len() != g.demands.len() {
                        return Err(format!(
                            "group {pg} holds {} of {} bundles",
                            placed.len(),
                            g.demands.len()
                        ));
                    }
                    let mut slots: Vec<usize> = placed.iter().map(|(s, _)| *s).collect();
                    slots.sort_unstable();
                    slots.dedup();
                    match g.strategy {
                        // A draining group's strategy held when it was reserved.
                        _ if !lost.is_empty() => {}
                        Strategy::StrictPack if slots.len() != 1 => {
                            return Err(format!(
                                "STRICT_PACK group {pg} is on {} nodes",
                                slots.len()
                            ));
                        }
                        Strategy::StrictSpread if slots.len() != placed.len() => {
                            return Err(format!("STRICT_SPREAD group {pg} shares nodes"));
                        }
                        _ => {}
                    }
                    for (i, (slot, grant)) in placed.iter().enumerate() {
                        if lost.contains(&i) {
                            continue;
                        }
                        let d = &g.demands[i];
                        let n = &self.nodes[*slot];
                        if !n.alive {
                            return Err(format!(
                                "group {pg} holds bundle {i} on dead node {}",
                                n.id
                            ));
                        }
                        holders[*slot].insert(pg);
                        let h = &mut held[*slot];
                        h.cpu += d.cpu;
                        h.mem += d.mem;
                        for &(c, u) in &d.custom {
                            if h.custom.len() <= c as usize {
                                h.custom.resize(c as usize + 1, 0);
                            }
                            h.custom[c as usize] += u;
                        }
                        let expect = if d.gpu_share() > 0 { 1 } else { d.whole_gpus() as usize };
                        if grant.devices.len() != expect {
                            return Err(format!(
                                "group {pg} bundle {i} got {} GPU devices, wants {expect}",
                                grant.devices.len()
                            ));
                        }
                        let per = if d.gpu_share() > 0 { d.gpu_share() } else { UNIT };
                        if !grant.devices.is_empty() && grant.per_device != per {
                            return Err(format!(
                                "group {pg} bundle {i} got {} per device, wants {per}",
                                grant.per_device
                            ));
                        }
                        let mut devs = grant.devices.clone();
                        devs.sort_unstable();
                        devs.dedup();
                        if devs.len() != grant.devices.len() {
                            return Err(format!("group {pg} bundle {i} got a GPU device twice"));
                        }
                        for &dev in &grant.devices {
                            match h.gpus.get_mut(dev as usize) {
                                Some(u) => *u += grant.per_device,
                                None => {
                                    return Err(format!(
                                        "group {pg} bundle {i} got missing GPU {dev}"
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
        if pending != self.queue.len() {
            return Err(format!("{pending} pending groups but {} queued", self.queue.len()));
        }
        for (slot, n) in self.nodes.iter().enumerate() {
            if n.holders != holders[slot] {
                return Err(format!(
                    "node {} holders {:?} != {:?}",
                    n.id, n.holders, holders[slot]
                ));
            }
            if !n.alive {
                if !n.holders.is_empty() {
                    return Err(format!("dead node {} has holders", n.id));
                }
                continue;
            }
            let h = &held[slot];
            let over =
                |what: &str, used: u64, cap: u64, free: u64| -> std::result::Result<(), String> {
                    if used > cap {
                        return Err(format!("node {} {what} over-committed: {used} > {cap}", n.id));
                    }
                    if cap - used != free {
                        return Err(format!("node {} {what} free {free} != {cap} - {used}", n.id));
                    }
                    Ok(())
                };
            over(CPU, h.cpu, n.cap.cpu, n.free.cpu)?;
            over(MEMORY, h.mem, n.cap.mem, n.free.mem)?;
            for c in 0..n.cap.custom.len().max(h.custom.len()) {
                let used = h.custom.get(c).copied().unwrap_or(0);
                over(
                    self.names.name(c as u32),
                    used,
                    n.cap.custom(c as u32),
                    n.free.custom(c as u32),
                )?;
            }
            for (dev, &used) in h.gpus.iter().enumerate() {
                over(&format!("GPU {dev}"), used, UNIT, n.free.gpus[dev])?;
            }
            let whole = n.free.gpus.iter().filter(|&&u| u == UNIT).count() as u64;
            if whole != n.free.whole || n.free.gpus.iter().sum::<u64>() != n.free.gpu_sum {
                return Err(format!("node {} GPU totals out of date", n.id));
            }
        }
        if let Some(f) = &self.fence {
            match self.groups.get(&f.pg).map(|g| &g.state) {
                Some(State::Pending { .. }) => {}
                _ => return Err(format!("anchor {} is not pending", f.pg)),
            }
        }
        Ok(())
    }
}
