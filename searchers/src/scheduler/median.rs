//! Median stopping rule (Vizier; Ray's `MedianStoppingRule`): after the grace period, a trial
//! whose best score so far is strictly worse than the median of the other trials' running mean
//! scores (over `[grace_period, t]`, among trials that have reached `t`) is stopped, or paused
//! with `hard_stop = false` (a soft-stopped trial is never judged again and later runs FIFO).
//! With fewer than `min_samples_required` comparable trials, a trial yields (pauses) when
//! others are waiting to run and it has run `min_time_slice` since its last pause.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{
    Decision, SchedulerState, Target, TrialScheduler, first_pending_then_paused, wrong_state,
};
use crate::error::{Error, Result};
use crate::math::median;
use crate::metrics::{Metrics, Mode, score_serde};
use crate::trial::{TrialId, TrialStatus, TrialsView};

const NAME: &str = "MedianStopping";

/// The median stopping rule. Defaults as Ray: `time_attr = "time_total_s"`,
/// `grace_period = 60`, `min_samples_required = 3`, `min_time_slice = 0`, `hard_stop = true`.
#[derive(Clone, Debug)]
pub struct MedianStopping {
    target: Target,
    grace_period: f64,
    min_samples_required: usize,
    min_time_slice: f64,
    hard_stop: bool,
    state: MedianStoppingState,
}

/// The evolving part of a [`MedianStopping`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MedianStoppingState {
    #[serde(with = "crate::serde_util::map_as_pairs")]
    results: BTreeMap<TrialId, Vec<Point>>,
    stopped: BTreeSet<TrialId>,
    #[serde(with = "crate::serde_util::map_as_pairs")]
    last_pause: BTreeMap<TrialId, f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Point {
    time: f64,
    #[serde(with = "score_serde")]
    score: f64,
}

impl Default for MedianStopping {
    fn default() -> Self {
        Self::new()
    }
}

impl MedianStopping {
    /// The rule with Ray's defaults.
    pub fn new() -> Self {
        Self {
            target: Target::new(NAME, "time_total_s"),
            grace_period: 60.0,
            min_samples_required: 3,
            min_time_slice: 0.0,
            hard_stop: true,
            state: MedianStoppingState::default(),
        }
    }

    /// The result key measuring progress.
    pub fn time_attr(mut self, attr: impl Into<String>) -> Self {
        self.target.time_attr = attr.into();
        self
    }

    /// The metric (or pass it through `set_metric`).
    pub fn metric(mut self, metric: impl Into<String>) -> Self {
        self.target.metric = Some(metric.into());
        self
    }

    /// The direction.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.target.mode = Some(mode);
        self
    }

    /// Time before which no trial is judged (and from which running means start).
    pub fn grace_period(mut self, t: impl Into<f64>) -> Self {
        self.grace_period = t.into();
        self
    }

    /// Minimum number of other trials to take a median over.
    pub fn min_samples_required(mut self, n: usize) -> Self {
        self.min_samples_required = n;
        self
    }

    /// Minimum time a trial runs between two yields.
    pub fn min_time_slice(mut self, t: impl Into<f64>) -> Self {
        self.min_time_slice = t.into();
        self
    }

    /// Stop (true) or pause (false) trials below the median.
    pub fn hard_stop(mut self, on: bool) -> Self {
        self.hard_stop = on;
        self
    }

    fn check(&self) -> Result<()> {
        if !self.grace_period.is_finite() || self.grace_period < 0.0 {
            return Err(Error::config(
                NAME,
                "grace_period",
                self.grace_period,
                "a finite number ≥ 0",
            ));
        }
        if !self.min_time_slice.is_finite() || self.min_time_slice < 0.0 {
            return Err(Error::config(
                NAME,
                "min_time_slice",
                self.min_time_slice,
                "a finite number ≥ 0",
            ));
        }
        Ok(())
    }

    fn running_mean(&self, points: &[Point], time: f64) -> Option<f64> {
        let scoped: Vec<f64> = points
            .iter()
            .filter(|p| self.grace_period <= p.time && p.time <= time)
            .map(|p| p.score)
            .collect();
        if scoped.is_empty() {
            return None;
        }
        if scoped.iter().any(|s| !s.is_finite()) {
            return Some(f64::NEG_INFINITY);
        }
        Some(scoped.iter().sum::<f64>() / scoped.len() as f64)
    }
}

impl TrialScheduler for MedianStopping {
    fn validate(&self) -> Result<()> {
        self.check()
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        self.target.set(metric, mode)
    }

    fn on_trial_add(&mut self, _: &dyn TrialsView, _: TrialId) -> Result<()> {
        self.check()?;
        self.target.check()
    }

    fn on_trial_result(
        &mut self,
        trials: &dyn TrialsView,
        trial: TrialId,
        result: &Metrics,
    ) -> Result<Decision> {
        self.check()?;
        let (time, score) = self.target.read(result)?;
        if self.state.stopped.contains(&trial) {
            return Ok(Decision::Continue);
        }
        self.state.results.entry(trial).or_default().push(Point { time, score });
        if time < self.grace_period {
            return Ok(Decision::Continue);
        }
        let means: Vec<f64> = self
            .state
            .results
            .iter()
            .filter(|(id, pts)| **id != trial && pts.last().is_some_and(|p| p.time >= time))
            .filter_map(|(_, pts)| self.running_mean(pts, time))
            .collect();
        let last_pause = self.state.last_pause.get(&trial).copied().unwrap_or(f64::NEG_INFINITY);
        if means.len() < self.min_samples_required {
            let waiting = trials.iter().any(|t| {
                t.id != trial && matches!(t.status, TrialStatus::Pending | TrialStatus::Paused)
            });
            if time - last_pause > self.min_time_slice && waiting {
                self.state.last_pause.insert(trial, time);
                return Ok(Decision::Pause);
            }
            return Ok(Decision::Continue);
        }
        let mut means = means;
        let Some(median) = median(&mut means) else {
            return Ok(Decision::Continue);
        };
        let best =
            self.state.results[&trial].iter().map(|p| p.score).fold(f64::NEG_INFINITY, f64::max);
        if best < median {
            self.state.stopped.insert(trial);
            return Ok(if self.hard_stop { Decision::Stop } else { Decision::Pause });
        }
        Ok(Decision::Continue)
    }

    fn on_trial_complete(
        &mut self,
        _: &dyn TrialsView,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        if let (false, Some(r)) = (error, result) {
            let (time, score) = self.target.read(r)?;
            let pts = self.state.results.entry(trial).or_default();
            // The final result is usually the last reported one; record it once.
            if pts.last().is_none_or(|p| p.time != time) {
                pts.push(Point { time, score });
            }
        }
        Ok(())
    }

    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId> {
        first_pending_then_paused(trials)
    }

    fn save_state(&self) -> SchedulerState {
        SchedulerState::MedianStopping(self.state.clone())
    }

    fn restore_state(&mut self, state: SchedulerState) -> Result<()> {
        match state {
            SchedulerState::MedianStopping(s) => {
                self.state = s;
                Ok(())
            }
            other => Err(wrong_state(NAME, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;
    use crate::trial::TrialTable;

    fn r(t: f64, loss: f64) -> Metrics {
        Metrics::from([("t".to_string(), t), ("loss".to_string(), loss)])
    }

    fn rule(hard: bool) -> MedianStopping {
        MedianStopping::new()
            .time_attr("t")
            .metric("loss")
            .mode(Mode::Min)
            .grace_period(1)
            .min_samples_required(2)
            .hard_stop(hard)
    }

    #[test]
    fn stops_trials_worse_than_the_median() {
        let mut view = TrialTable::new();
        let mut m = rule(true);
        for i in 0..4 {
            view.add(TrialId(i), Params::new());
            view.set_status(TrialId(i), TrialStatus::Running);
            m.on_trial_add(&view, TrialId(i)).unwrap();
        }
        for t in 1..=3 {
            for (i, loss) in [(0, 1.0), (1, 2.0)] {
                let d = m.on_trial_result(&view, TrialId(i), &r(f64::from(t), loss)).unwrap();
                assert_eq!(d, Decision::Continue, "not enough samples, nobody waiting");
            }
        }
        // Trial 2 is better than the median (1.5) of the others' running means; trial 3 worse.
        assert_eq!(m.on_trial_result(&view, TrialId(2), &r(2.0, 0.5)).unwrap(), Decision::Continue);
        assert_eq!(m.on_trial_result(&view, TrialId(3), &r(2.0, 3.0)).unwrap(), Decision::Stop);
        let mut soft = rule(false);
        for t in 1..=3 {
            for (i, loss) in [(0, 1.0), (1, 2.0)] {
                soft.on_trial_result(&view, TrialId(i), &r(f64::from(t), loss)).unwrap();
            }
        }
        assert_eq!(soft.on_trial_result(&view, TrialId(3), &r(2.0, 3.0)).unwrap(), Decision::Pause);
        assert_eq!(
            soft.on_trial_result(&view, TrialId(3), &r(3.0, 9.0)).unwrap(),
            Decision::Continue
        );
    }

    #[test]
    fn yields_when_others_wait_and_samples_are_few() {
        let mut view = TrialTable::new();
        view.add(TrialId(0), Params::new());
        view.add(TrialId(1), Params::new());
        view.set_status(TrialId(0), TrialStatus::Running);
        let mut m = rule(true);
        assert_eq!(m.on_trial_result(&view, TrialId(0), &r(0.5, 1.0)).unwrap(), Decision::Continue);
        assert_eq!(m.on_trial_result(&view, TrialId(0), &r(1.0, 1.0)).unwrap(), Decision::Pause);
    }
}
