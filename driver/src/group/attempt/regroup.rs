//! An elastic group that goes on in place after losing ranks. A lost rank leaves the group
//! (`leave_in_place`) when the ranks left are at least the group's `min`; the others find out
//! in their next collective, which fails, and each asks to re-form the group (`on_regroup`)
//! with the steps it has completed. Once every live rank has asked, and they all stand at the
//! same step (none took the step in flight), each is answered with its place in the new group,
//! the run records the resize, and the attempt goes on. Anything else (ranks at different
//! steps, a rank waiting in a report meanwhile, a rank that never asks, too few left) fails the
//! attempt as a lost rank's, and the run starts the group again from its latest checkpoint.

use tonic::Status;

use super::{Attempt, Reply};
use crate::group::{Launcher, OnReport, RankPlacement};
use crate::proto::{RegroupReply, RegroupRequest};

impl Attempt<'_> {
    /// Rank `rank` was lost for `why`: it leaves the group, which goes on in place without it,
    /// where it can; whether it did.
    pub(super) fn leave_in_place(
        &mut self,
        rank: usize,
        why: &str,
        on_report: &mut dyn OnReport,
    ) -> bool {
        let Some(min) = self.spec.elastic else { return false };
        // Before every rank has joined there is no group to go on with; a rank in this
        // process (local mode) is never lost alone; a command's cannot re-form their group.
        let joined = !self.seats.is_empty();
        let in_process = matches!(self.spec.launcher, Launcher::InProcess);
        let stays = self.spec.in_place && !in_process;
        if self.failure.is_some() || !joined || !stays || self.live() <= min {
            return false;
        }
        self.workers[rank].gone = true;
        self.left.push((rank, why.to_owned()));
        // A report it made before it was lost is not waited for with the others'.
        if let Some(at) = self.pending.iter().position(|(r, ..)| *r == rank) {
            drop(self.pending.remove(at));
        }
        self.complete_report(on_report);
        self.try_regroup(on_report);
        true
    }

    /// A live rank asks to re-form the group (its collective failed on a lost peer).
    pub(super) fn on_regroup(
        &mut self,
        rank: usize,
        request: RegroupRequest,
        reply: Reply<RegroupReply>,
        on_report: &mut dyn OnReport,
    ) {
        if self.spec.elastic.is_none() || self.workers[rank].gone {
            let _ = reply.send(Err(Status::failed_precondition("not in an elastic group")));
            return;
        }
        self.workers[rank].regroup = Some((request, reply));
        if self.regroup_by.is_none() {
            self.regroup_by = Some(std::time::Instant::now() + self.spec.collective_timeout);
        }
        self.try_regroup(on_report);
    }

    /// Answers every live rank's call to re-form the group, once all have asked.
    fn try_regroup(&mut self, on_report: &mut dyn OnReport) {
        let live: Vec<usize> = (0..self.workers.len()).filter(|&r| !self.workers[r].gone).collect();
        let asked = |r: &usize| self.workers[*r].regroup.is_some();
        if !live.iter().any(asked) {
            return;
        }
        if !live.iter().all(asked) {
            // A live rank waiting in a report while the others re-form the group waits for
            // them, as they wait for it: neither can be answered.
            let reporting = |r: &usize| self.pending.iter().any(|(p, ..)| p == r);
            if live.iter().all(|r| asked(r) || reporting(r)) {
                self.fail_regroup("a rank waited in a report while the others re-formed the group");
            }
            return;
        }
        if self.left.is_empty() {
            self.fail_regroup("the ranks' collectives failed with every rank still there");
            return;
        }
        let steps: Vec<u64> = live
            .iter()
            .filter_map(|&r| self.workers[r].regroup.as_ref().map(|(q, _)| q.steps_done))
            .collect();
        if steps.iter().any(|&s| s != steps[0]) {
            let message = format!("the ranks left stood at different steps ({steps:?})");
            self.fail_regroup(&message);
            return;
        }
        let peers: Vec<String> = live
            .iter()
            .filter_map(|&r| self.workers[r].regroup.as_ref())
            .map(|(q, _)| q.collective_address.clone())
            .collect();
        // Node and local ranks as a fresh group of the live ranks' seats would have them.
        let nodes: Vec<&str> = live.iter().map(|&r| self.seats[r].node.as_str()).collect();
        let placed = RankPlacement::from_nodes(&nodes, &[], &[]);
        let group_id = rand::random::<u64>();
        let world = live.len() as u32;
        for (new_rank, &r) in live.iter().enumerate() {
            let Some((_, reply)) = self.workers[r].regroup.take() else { continue };
            let _ = reply.send(Ok(RegroupReply {
                rank: new_rank as u32,
                world_size: world,
                peers: peers.clone(),
                collective_group_id: group_id,
                local_rank: placed[new_rank].local_rank,
                local_world_size: placed[new_rank].local_world_size,
                node_rank: placed[new_rank].node_rank,
            }));
        }
        self.regroup_by = None;
        let left = std::mem::take(&mut self.left);
        let why: Vec<String> =
            left.iter().map(|(r, why)| format!("rank {r} lost: {why}")).collect();
        let from = live.len() + left.len();
        on_report.resized(from, live.len(), &format!("{} (in place)", why.join("; ")));
    }

    /// Ranks asked to re-form the group and a live one did not within the collective timeout.
    pub(super) fn regroup_timed_out(&mut self) {
        let silent: Vec<usize> = (0..self.workers.len())
            .filter(|&r| !self.workers[r].gone && self.workers[r].regroup.is_none())
            .collect();
        let message = format!(
            "ranks {silent:?} did not re-form the group within {:?}",
            self.spec.collective_timeout
        );
        self.fail_regroup(&message);
    }

    /// The group cannot go on in place: the attempt fails as its lost ranks' (the run starts
    /// the group again from its latest checkpoint, at its new size).
    fn fail_regroup(&mut self, why: &str) {
        let rank = self.left.first().map_or(0, |(r, _)| *r);
        self.fail(rank, format!("could not go on in place: {why}"), None);
    }
}
