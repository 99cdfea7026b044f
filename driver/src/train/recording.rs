//! What a run does with its attempt's reports and events (`OnReport`): it records them, asks
//! its steering whether to stop, and decides an elastic group's resizes at its checkpoints.

use super::Steering;
use super::placement::{Elastic, Placement};
use crate::error::Result;
use crate::group::{GroupReport, Joiners, OnReport, Seat, describe_seats};
use crate::metrics::GroupStart;
use crate::record::{self, RankZero, RunState};

/// An attempt's reports go into the run's record, then to the caller's decision; an elastic
/// group that can grow ends its attempt at a report that carries a checkpoint.
pub(super) struct Recording<'r, 'd, 's> {
    pub(super) run: &'r mut RunState,
    pub(super) steering: &'r mut (dyn Steering + 'd),
    pub(super) elastic: Option<&'r mut Elastic<'s>>,
    pub(super) placement: &'r mut Placement,
    /// Ranks that join in place after the last report (the room it grew into).
    pub(super) joiners: Option<Joiners>,
    /// The run's next attempt number: a group that re-forms without its rank 0 takes one.
    pub(super) next_attempt: &'r mut u32,
}

impl OnReport for Recording<'_, '_, '_> {
    fn report(&mut self, report: GroupReport) -> Result<bool> {
        let checkpointed = !report.checkpoint.is_empty();
        let (joinable, iteration) = (report.joinable, report.iteration);
        let stop = self.run.record(report)?;
        if self.steering.decide(self.run.last_metrics())? || stop {
            return Ok(true);
        }
        // Room to give back, or room for more ranks: this attempt ends here, the next starts
        // from this checkpoint.
        let Some(elastic) = self.elastic.as_deref_mut().filter(|e| e.resize.is_none()) else {
            return Ok(false);
        };
        if checkpointed {
            let steering = &*self.steering;
            let max = elastic.policy.max();
            match elastic.at_checkpoint(self.placement, || steering.may_grow(max)) {
                // Where the ranks can take them, the new ranks join the running group.
                Some(resize) if resize.grows() && joinable => {
                    self.joiners = Some(Joiners {
                        ranks: self.placement.local_ranks_from(resize.from),
                        why: resize.why,
                        resume: self.run.last_report_checkpoint().map(|c| c.path().to_owned()),
                        iteration,
                    });
                }
                resize => elastic.resize = resize,
            }
        }
        Ok(elastic.resize.is_some())
    }

    fn joiners(&mut self) -> Option<Joiners> {
        self.joiners.take()
    }

    fn flush_due(&self) -> Option<std::time::Instant> {
        self.run.flush_due()
    }

    fn flush(&mut self) -> Result<()> {
        self.run.flush()
    }

    fn placed(&mut self, seats: &[Seat], start: GroupStart) {
        let rank0 = seats.first().map(|s| RankZero {
            pid: s.pid,
            hostname: s.node.clone(),
            node_ip: s.address.clone(),
        });
        self.run.placed(describe_seats(seats), seats.len(), rank0, start);
    }

    fn uploaded(&mut self, names: &[String]) -> Result<()> {
        self.run.record_uploaded(names)
    }

    fn resized(&mut self, from: usize, to: usize, why: &str) {
        tracing::info!("resized from {from} to {to} ranks: {why}");
        if let Err(e) = self.run.resized(from, to, why) {
            tracing::warn!(
                "the resize is in the next row, but not in {}: {e}",
                record::RESIZES_FILE
            );
        }
        self.run.set_world_size(to);
        // The lost ranks' room goes back to the pool, where the group may grow into it again.
        if to < from {
            self.placement.shrink(from - to);
        }
    }

    fn fresh_attempt(&mut self) -> u32 {
        let fresh = *self.next_attempt;
        *self.next_attempt += 1;
        tracing::info!("checkpoints are named by attempt {fresh} from here (rank 0 was lost)");
        fresh
    }
}
