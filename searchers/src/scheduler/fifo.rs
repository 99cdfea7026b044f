//! FIFO: lets every trial run to completion, in creation order (Ray's `FIFOScheduler`).

use super::{Decision, SchedulerState, TrialScheduler, first_pending_then_paused, wrong_state};
use crate::error::Result;
use crate::metrics::{Metrics, Mode};
use crate::trial::{TrialId, TrialsView};

/// Runs trials first in, first out; never pauses or stops one.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fifo;

impl Fifo {
    /// The FIFO scheduler.
    pub fn new() -> Self {
        Fifo
    }
}

impl TrialScheduler for Fifo {
    fn set_metric(&mut self, _: &str, _: Mode) -> Result<()> {
        Ok(())
    }

    fn set_objectives(&mut self, _: &[crate::metrics::Objective]) -> Result<()> {
        Ok(())
    }

    fn on_trial_add(&mut self, _: &dyn TrialsView, _: TrialId) -> Result<()> {
        Ok(())
    }

    fn on_trial_result(&mut self, _: &dyn TrialsView, _: TrialId, _: &Metrics) -> Result<Decision> {
        Ok(Decision::Continue)
    }

    fn on_trial_complete(
        &mut self,
        _: &dyn TrialsView,
        _: TrialId,
        _: Option<&Metrics>,
        _: bool,
    ) -> Result<()> {
        Ok(())
    }

    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId> {
        first_pending_then_paused(trials)
    }

    fn save_state(&self) -> SchedulerState {
        SchedulerState::Fifo
    }

    fn restore_state(&mut self, state: SchedulerState) -> Result<()> {
        match state {
            SchedulerState::Fifo => Ok(()),
            other => Err(wrong_state("FIFO", &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;
    use crate::trial::{TrialStatus, TrialTable};

    #[test]
    fn pending_before_paused_in_id_order() {
        let mut t = TrialTable::new();
        for i in 0..3 {
            t.add(TrialId(i), Params::new());
        }
        t.set_status(TrialId(0), TrialStatus::Paused);
        t.set_status(TrialId(1), TrialStatus::Running);
        let mut f = Fifo::new();
        assert_eq!(f.choose_trial_to_run(&t), Some(TrialId(2)));
        t.set_status(TrialId(2), TrialStatus::Running);
        assert_eq!(f.choose_trial_to_run(&t), Some(TrialId(0)));
        assert_eq!(f.on_trial_result(&t, TrialId(1), &Metrics::new()).unwrap(), Decision::Continue);
    }
}
