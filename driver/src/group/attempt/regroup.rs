//! An elastic group that goes on in place after losing ranks. A lost rank leaves the group
//! (`leave_in_place`) when the ranks left are at least the group's `min`; the others find out
//! in their next collective, which fails, and each asks to re-form the group (`on_regroup`)
//! with the steps it has completed. Once every live rank has asked, and they all stand at the
//! same step (none took the step in flight), each is answered with its place in the new group,
//! the run records the resize, and the attempt goes on. Anything else (ranks at different
//! steps, a rank waiting in a report meanwhile, a rank that never asks, too few left) fails the
//! attempt as a lost rank's, and the run starts the group again from its latest checkpoint.
//!
//! Growing in place (`take_in`): at a report every rank said it can take joiners at, and the
//! run gives the group more room (`OnReport::joiners`), the answer to that report asks the ranks
//! to re-form the group, and the new ranks start. Once every live rank has asked and every new
//! one has joined, all are answered with the group that has them (the new ones after the
//! others, told the steps it has completed); rank 0 then hands them the model and its
//! optimizer's state (`rtune::worker::join`).

use tonic::Status;

use super::{Attempt, Join, Reply, Worker, seat};
use crate::group::{Joiners, Launcher, OnReport, RankPlacement, Seat};
use crate::proto::{JoinReply, RegroupReply, RegroupRequest};

impl Attempt<'_> {
    /// Rank `rank` was lost for `why`: it leaves the group, which goes on in place without it,
    /// where it can; whether it did.
    pub(super) fn leave_in_place(
        &mut self,
        rank: usize,
        why: &str,
        on_report: &mut dyn OnReport,
    ) -> bool {
        let Some(min) = self.spec.run.elastic else { return false };
        // Before every rank has joined there is no group to go on with; a rank in this
        // process (local mode) is never lost alone; a command's cannot re-form their group.
        let left = self.live().saturating_sub(1);
        let why_not = if matches!(self.spec.launcher, Launcher::InProcess) {
            Some("its ranks run in the driver (local mode)".to_owned())
        } else if !self.spec.run.in_place {
            Some("its ranks cannot re-form a group (a command's)".to_owned())
        } else if let Some(f) = &self.failure {
            // Its own failure, heard before its exit, is no reason.
            Some(if f.rank == rank {
                "the attempt was failing".to_owned()
            } else {
                format!("rank {} had failed first: {}", f.rank, f.message)
            })
        } else if self.seats.is_empty() {
            Some("not every rank had joined the group".to_owned())
        } else if left < min {
            Some(format!("{left} rank(s) would be left, fewer than the group's min of {min}"))
        } else {
            None
        };
        if let Some(why_not) = why_not {
            self.not_in_place.get_or_insert(why_not);
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
        if self.spec.run.elastic.is_none() || self.workers[rank].gone {
            let _ = reply.send(Err(Status::failed_precondition("not in an elastic group")));
            return;
        }
        self.workers[rank].regroup = Some((request, reply));
        if self.regroup_by.is_none() {
            self.regroup_by = Some(std::time::Instant::now() + self.spec.run.collective_timeout);
        }
        self.try_regroup(on_report);
    }

    /// Whether ranks can join the group in place now: an elastic group whose ranks go on in
    /// place, of processes on this machine (a cluster's grow by a restart), whose optimizer
    /// state is whole on every rank (not ZeRO), not re-forming already.
    pub(super) fn can_take_joiners(&self) -> bool {
        self.spec.run.elastic.is_some()
            && self.spec.run.in_place
            && self.spec.run.sharding.is_none()
            && matches!(self.spec.launcher, Launcher::Local)
            && self.failure.is_none()
            && self.left.is_empty()
            && self.joining.is_none()
            && self.workers.iter().all(|w| w.regroup.is_none())
    }

    /// `joiners` join the group after its report `seq` (its ranks were told to re-form it):
    /// they start now, and must have joined within the start timeout.
    pub(super) fn take_in(&mut self, joiners: Joiners, seq: u64) {
        for placed in &joiners.ranks {
            let mut worker = Worker::started(None);
            worker.skipped = seq;
            self.to_spawn.push(self.workers.len());
            self.workers.push(worker);
            self.joined.push(placed.clone());
            let (node, address) = (placed.bind_host.clone(), placed.bind_host.clone());
            let gpus = placed.cuda_visible_devices.clone();
            self.seats.push(Seat { node, address, gpus, pid: 0 });
        }
        self.regroup_by = Some(std::time::Instant::now() + self.spec.run.start_timeout);
        self.joining = Some(joiners);
    }

    /// Answers every live rank's call to re-form the group, once all have asked (and every
    /// rank joining in place has joined).
    pub(super) fn try_regroup(&mut self, on_report: &mut dyn OnReport) {
        let live: Vec<usize> = (0..self.workers.len()).filter(|&r| !self.workers[r].gone).collect();
        let first_new = self.workers.len() - self.joining.as_ref().map_or(0, |j| j.ranks.len());
        let asked = |r: &usize| match *r >= first_new {
            true => matches!(self.workers[*r].join, Join::Waiting(..)),
            false => self.workers[*r].regroup.is_some(),
        };
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
        if self.left.is_empty() && self.joining.is_none() {
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
            .map(|&r| match (&self.workers[r].regroup, &self.workers[r].join) {
                (Some((q, _)), _) => q.collective_address.clone(),
                (None, Join::Waiting(q, _)) => q.collective_address.clone(),
                (None, _) => unreachable!("every live rank asked"),
            })
            .collect();
        for &r in live.iter().filter(|&&r| r >= first_new) {
            if let Join::Waiting(q, _) = &self.workers[r].join {
                self.seats[r] = seat(q, self.placed(r));
            }
        }
        // Node and local ranks as a fresh group of the live ranks' seats would have them.
        let nodes: Vec<&str> = live.iter().map(|&r| self.seats[r].node.as_str()).collect();
        let placed = RankPlacement::from_nodes(&nodes, &[], &[]);
        // Rank 0 writes the checkpoints: one that left may still run, cut off from this
        // driver, and finish a step the others take again. The new rank 0 names its checkpoints
        // by an attempt number of their own, so none is ever the old one's.
        let rank_0 = live.iter().chain(self.left.iter().map(|(r, _)| r)).min();
        if rank_0.is_some_and(|r| self.left.iter().any(|(left, _)| left == r)) {
            self.checkpoint_attempt = on_report.fresh_attempt();
        }
        let group_id = rand::random::<u64>();
        let world = live.len() as u32;
        // Ranks that join get the backend's setup for the group as it is now; the others keep
        // theirs (their ring re-forms, their backend goes on).
        let seats: Vec<Seat> = live.iter().map(|&r| self.seats[r].clone()).collect();
        let setup = self.spec.run.backend.setup(&self.spec.run.group, &seats);
        for (new_rank, &r) in live.iter().enumerate() {
            let at = &placed[new_rank];
            if let Some((_, reply)) = self.workers[r].regroup.take() {
                let _ = reply.send(Ok(RegroupReply {
                    rank: new_rank as u32,
                    world_size: world,
                    peers: peers.clone(),
                    collective_group_id: group_id,
                    local_rank: at.local_rank,
                    local_world_size: at.local_world_size,
                    node_rank: at.node_rank,
                    checkpoint_attempt: self.checkpoint_attempt,
                }));
                continue;
            }
            let Join::Waiting(_, reply) = std::mem::replace(&mut self.workers[r].join, Join::Done)
            else {
                continue;
            };
            let joining = self.joining.as_ref().expect("only ranks joining in place join now");
            let _ = reply.send(Ok(JoinReply {
                joins_running: true,
                steps_done: steps.first().copied().unwrap_or(0),
                resume_checkpoint: joining
                    .resume
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                resume_url: String::new(),
                start_iteration: joining.iteration,
                local_rank: at.local_rank,
                local_world_size: at.local_world_size,
                node_rank: at.node_rank,
                ..self.join_reply(new_rank, self.placed(r), (&peers, group_id), &setup)
            }));
        }
        self.regroup_by = None;
        let left = std::mem::take(&mut self.left);
        let mut why: Vec<String> =
            left.iter().map(|(r, why)| format!("rank {r} lost: {why}")).collect();
        let joined = self.joining.take();
        why.extend(joined.as_ref().map(|j| j.why.clone()));
        let from = live.len() + left.len() - joined.map_or(0, |j| j.ranks.len());
        on_report.resized(from, live.len(), &format!("{} (in place)", why.join("; ")));
    }

    /// Ranks asked to re-form the group and a live one did not within the collective timeout.
    pub(super) fn regroup_timed_out(&mut self) {
        let silent: Vec<usize> = (0..self.workers.len())
            .filter(|&r| !self.workers[r].gone && self.workers[r].regroup.is_none())
            .collect();
        let message = format!(
            "ranks {silent:?} did not re-form the group within {:?}",
            self.spec.run.collective_timeout
        );
        self.fail_regroup(&message);
    }

    /// The group cannot go on in place: the attempt fails as its lost ranks' (the run starts
    /// the group again from its latest checkpoint, at its new size).
    fn fail_regroup(&mut self, why: &str) {
        let rank = self.left.first().map_or(0, |(r, _)| *r);
        self.not_in_place.get_or_insert_with(|| why.to_owned());
        self.fail(rank, format!("could not go on in place: {why}"), None);
    }
}
