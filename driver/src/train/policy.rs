//! The run's two policies, side by side and pure (Ray Train v2's `FailurePolicy` and
//! `ScalingPolicy`): what a run does when an attempt ends, and when an elastic group resizes.
//! They decide from what happened and where the group is; the run (`run`) carries the decision
//! out. Neither touches a process, the pool or a file, so tests drive them directly.
//!
//! * Failures: [`FailureConfig::decide`] (retry, fail, or halted: an attempt that ended while
//!   the run was being stopped is no failure).
//! * Scaling: [`ScalingPolicy`], for an elastic group (`ScalingConfig::elastic`): at a report
//!   that carries a checkpoint, give room back to a run that waits, grow into room, or nothing;
//!   after an attempt, the resize it ended for, if any.
//! * [`after_attempt`] puts the two together: the run's next step after an attempt.

use crate::config::{FailureConfig, FailureDecision, ScalingConfig};
use crate::group::AttemptOutcome;
use crate::outcome::WorkerFailure;

/// A change of a group's size: from how many ranks to how many, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resize {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) why: String,
}

impl Resize {
    pub(super) fn new(from: usize, to: usize, why: impl Into<String>) -> Resize {
        Resize { from, to, why: why.into() }
    }

    pub(super) fn grows(&self) -> bool {
        self.to > self.from
    }
}

/// What an elastic group does at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ResizeDecision {
    Nothing,
    /// Take room for up to this many more ranks.
    Grow(usize),
    /// Give room back: end the attempt here and go on at this size.
    Shrink(Resize),
}

/// An elastic group's scaling policy: between its fewest and most ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScalingPolicy {
    min: usize,
    max: usize,
    /// A group that grew shrinks back to `min` when another run waits for room.
    give_way: bool,
    /// ZeRO: a lost rank held optimizer state nobody else has.
    sharded: bool,
}

impl ScalingPolicy {
    /// The policy of a group scaled by `scaling`; None for a rigid group.
    pub(super) fn of(scaling: &ScalingConfig) -> Option<ScalingPolicy> {
        scaling.is_elastic().then(|| ScalingPolicy {
            min: scaling.ranks(),
            max: scaling.max_ranks(),
            give_way: scaling.shrink_for_waiting,
            sharded: scaling.sharding.is_some(),
        })
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// How many more ranks a group of `world` may take.
    pub(super) fn room_to_grow(&self, world: usize) -> usize {
        self.max.saturating_sub(world)
    }

    /// At a report with a checkpoint, of a group of `world` ranks: `gives_back` says its room
    /// goes back to a pool other runs wait in (on one machine; a cluster's group is placed
    /// anew at each start), `others_wait` whether one waits, `may_grow` whether this group is
    /// the one to grow now (no run waits to start, and it is the one furthest along). The two
    /// are asked only when the answer matters, in that order.
    pub(super) fn at_checkpoint(
        &self,
        (world, gives_back): (usize, bool),
        others_wait: impl FnOnce() -> bool,
        may_grow: impl FnOnce() -> bool,
    ) -> ResizeDecision {
        if self.give_way && gives_back && world > self.min && others_wait() {
            let why = "another run waits for room in the pool";
            return ResizeDecision::Shrink(Resize::new(world, self.min, why));
        }
        match self.room_to_grow(world) {
            by if may_grow() && by > 0 => ResizeDecision::Grow(by),
            _ => ResizeDecision::Nothing,
        }
    }

    /// The resize an attempt that ended as `outcome` is for: the one it stopped at (`asked`,
    /// decided at a checkpoint), or the ranks it lost where enough are left to go on.
    pub(super) fn after_attempt(
        &self,
        outcome: &AttemptOutcome,
        asked: Option<Resize>,
    ) -> Option<Resize> {
        match outcome {
            AttemptOutcome::Completed { stopped: true, .. } => asked,
            AttemptOutcome::Lost { ranks, world, not_in_place, .. }
                if world - ranks.len() >= self.min =>
            {
                let said: Vec<String> =
                    ranks.iter().map(|(rank, why)| format!("rank {rank} lost: {why}")).collect();
                let how = match self.sharded {
                    true => "from the latest checkpoint's optimizer shards (ZeRO)",
                    false => "from the latest checkpoint",
                };
                let why_not = not_in_place.as_ref().map(|w| format!("; not in place: {w}"));
                let why = format!("{} ({how}{})", said.join("; "), why_not.unwrap_or_default());
                Some(Resize::new(*world, world - ranks.len(), why))
            }
            _ => None,
        }
    }
}

/// What a run does after an attempt.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// The train function ran to its end (or stopped as asked).
    Finish { train_seconds: f64, unread_params: Vec<String> },
    /// Start again from the latest checkpoint at another size.
    Resize(Resize),
    /// Start again from the latest checkpoint after this failure.
    Retry(WorkerFailure),
    /// The failures ran out: the run has failed, this one its last.
    Fail(WorkerFailure),
    /// The attempt ended while the run was being stopped: no failure of the run's.
    Halt(WorkerFailure),
}

/// The run's next step after an attempt ended as `outcome`: the scaling policy's resize (for
/// an elastic group; `asked` is what it decided at a checkpoint), else its end, else the
/// failure policy's decision on its `failures_before + 1`-th failure (`halting`, asked then:
/// whether the run was being stopped).
pub(super) fn after_attempt(
    outcome: AttemptOutcome,
    asked: Option<Resize>,
    scaling: Option<&ScalingPolicy>,
    failures: &FailureConfig,
    (failures_before, halting): (usize, impl FnOnce() -> bool),
) -> Next {
    if let Some(resize) = scaling.and_then(|policy| policy.after_attempt(&outcome, asked)) {
        return Next::Resize(resize);
    }
    match outcome {
        AttemptOutcome::Completed { train_seconds, unread_params, .. } => {
            Next::Finish { train_seconds, unread_params }
        }
        AttemptOutcome::Failed(failure) | AttemptOutcome::Lost { failure, .. } => {
            match failures.decide(failures_before + 1, halting()) {
                FailureDecision::Retry => Next::Retry(failure),
                FailureDecision::Fail => Next::Fail(failure),
                FailureDecision::Halted => Next::Halt(failure),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(rank: usize) -> WorkerFailure {
        WorkerFailure {
            attempt: 0,
            rank,
            message: "killed".into(),
            signal: Some(9),
            exit_code: None,
        }
    }

    fn completed(stopped: bool) -> AttemptOutcome {
        AttemptOutcome::Completed { train_seconds: 1.5, unread_params: vec![], stopped }
    }

    fn lost(ranks: &[usize], world: usize) -> AttemptOutcome {
        let ranks = ranks.iter().map(|&r| (r, "killed by signal 9".to_owned())).collect();
        AttemptOutcome::Lost { ranks, world, failure: failure(0), not_in_place: None }
    }

    fn elastic(min: usize, max: usize) -> ScalingConfig {
        ScalingConfig::elastic(min, max)
    }

    #[test]
    fn a_rigid_group_has_no_scaling_policy() {
        assert_eq!(ScalingPolicy::of(&ScalingConfig::workers(2)), None);
        let policy = ScalingPolicy::of(&elastic(2, 4)).unwrap();
        assert_eq!((policy.min, policy.max(), policy.room_to_grow(3)), (2, 4, 1));
    }

    /// At a checkpoint: room goes back to a waiting run first (on one machine, once grown, when
    /// asked to), else the group grows into what it may take, else nothing.
    #[test]
    fn at_a_checkpoint_a_group_gives_way_grows_or_stays() {
        let policy = ScalingPolicy::of(&elastic(2, 4).shrink_for_waiting(true)).unwrap();
        let at = |world, gives_back, others_wait: bool, may_grow: bool| {
            policy.at_checkpoint((world, gives_back), || others_wait, || may_grow)
        };
        let give_way = Resize::new(3, 2, "another run waits for room in the pool");
        assert_eq!(at(3, true, true, true), ResizeDecision::Shrink(give_way));
        // At its fewest it cannot give way; on a cluster it has nothing to give back.
        assert_eq!(at(2, true, true, true), ResizeDecision::Grow(2));
        assert_eq!(at(3, false, true, true), ResizeDecision::Grow(1));
        assert_eq!(at(3, true, false, false), ResizeDecision::Nothing);
        assert_eq!(at(4, true, false, true), ResizeDecision::Nothing);
        // Without `shrink_for_waiting` a waiting run takes nothing from it (nor is it asked).
        let keeps = ScalingPolicy::of(&elastic(2, 4)).unwrap();
        let never = || -> bool { unreachable!("no need to ask") };
        assert_eq!(keeps.at_checkpoint((3, true), never, || false), ResizeDecision::Nothing);
    }

    /// After an attempt: the resize it stopped for; lost ranks with enough left shrink the
    /// group (saying each rank and how it goes on); too few left is a failure.
    #[test]
    fn after_an_attempt_lost_ranks_shrink_the_group_while_enough_are_left() {
        let policy = ScalingPolicy::of(&elastic(2, 4)).unwrap();
        let asked = Resize::new(2, 4, "room appeared in the pool");
        assert_eq!(
            policy.after_attempt(&completed(true), Some(asked.clone())),
            Some(asked.clone())
        );
        assert_eq!(policy.after_attempt(&completed(false), Some(asked)), None);
        let shrink = policy.after_attempt(&lost(&[1], 3), None).unwrap();
        assert_eq!((shrink.from, shrink.to), (3, 2));
        assert_eq!(shrink.why, "rank 1 lost: killed by signal 9 (from the latest checkpoint)");
        assert_eq!(policy.after_attempt(&lost(&[0, 1], 3), None), None);
        // Why it was not in place is said with it.
        let mut refused = lost(&[0], 3);
        if let AttemptOutcome::Lost { not_in_place, .. } = &mut refused {
            *not_in_place = Some("rank 2 had failed first: collective timed out".into());
        }
        let why = policy.after_attempt(&refused, None).unwrap().why;
        assert_eq!(
            why,
            "rank 0 lost: killed by signal 9 (from the latest checkpoint; not in place: rank 2 had \
             failed first: collective timed out)"
        );
        let zero = ScalingPolicy::of(&elastic(1, 2).sharding(crate::config::Sharding::Zero1));
        let why = zero.unwrap().after_attempt(&lost(&[0], 2), None).unwrap().why;
        assert!(why.ends_with("(from the latest checkpoint's optimizer shards (ZeRO))"), "{why}");
    }

    /// The two policies together: a resize first, then the end, then the failure decision
    /// counted with the failures before.
    #[test]
    fn after_an_attempt_the_run_resizes_finishes_retries_fails_or_halts() {
        let scaling = ScalingPolicy::of(&elastic(2, 4)).unwrap();
        let once = FailureConfig::max_failures(1);
        let next = |outcome, before, halting| {
            after_attempt(outcome, None, Some(&scaling), &once, (before, || halting))
        };
        assert!(matches!(next(lost(&[2], 3), 5, false), Next::Resize(r) if r.to == 2));
        assert_eq!(
            next(completed(false), 0, false),
            Next::Finish { train_seconds: 1.5, unread_params: vec![] }
        );
        assert_eq!(next(lost(&[0, 1], 3), 0, false), Next::Retry(failure(0)));
        assert_eq!(next(lost(&[0, 1], 3), 1, false), Next::Fail(failure(0)));
        assert_eq!(next(lost(&[0, 1], 3), 1, true), Next::Halt(failure(0)));
        // A rigid group never resizes: a lost rank is a failure.
        let rigid = after_attempt(lost(&[1], 3), None, None, &once, (0, || false));
        assert_eq!(rigid, Next::Retry(failure(0)));
        let failed = AttemptOutcome::Failed(failure(1));
        let unlimited = FailureConfig::max_failures(-1);
        let retried = after_attempt(failed, None, None, &unlimited, (1000, || false));
        assert_eq!(retried, Next::Retry(failure(1)));
    }
}
