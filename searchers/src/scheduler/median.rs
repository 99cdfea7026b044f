//! Median stopping rule (Vizier; Ray's `MedianStoppingRule`): after the grace period, a trial
//! whose best score so far is strictly worse than the median of the other trials' running mean
//! scores (over `[grace_period, t]`, among trials that have reached `t`) is stopped, or paused
//! with `hard_stop = false` (a soft-stopped trial is never judged again and later runs FIFO).
//! With fewer than `min_samples_required` comparable trials, a trial yields (pauses) when
//! others are waiting to run and it has run `min_time_slice` since its last pause.
//!
//! Means and the median are NumPy's to the last bit (`np.mean` sums pairwise; the median of an
//! even count is the `np.mean` of the two middle values).
//!
//! Results that are not finite numbers (see the [module docs](super)):
//!
//! * `±inf` are ordered like any number: a running mean holding `+inf` in `max` mode is `+inf`
//!   (one holding both infinities is not a number and is left out, as below).
//! * A NaN result is left out of its trial's running mean, and a trial with no number in
//!   `[grace_period, t]` is not a sample. In Ray, one NaN (or one such trial, whose mean of
//!   nothing is NaN) makes the median NaN, which stops every trial it judges.
//! * A NaN never raises its trial's best score, and a trial whose results so far are all NaN
//!   is stopped (or paused) as soon as there is a median to compare with: a deliberate
//!   difference, since Ray's `max` over a list starting with NaN is NaN, with which its trial
//!   runs on. A median that is not a number (the means hold both `+inf` and `−inf`) stops
//!   nobody.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{
    Decision, SchedulerState, Target, TrialScheduler, first_pending_then_paused, wrong_state,
};
use crate::error::{Error, Result};
use crate::math::{median, np_mean};
use crate::metrics::{Metrics, Mode, same_score, score_serde};
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

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Point {
    time: f64,
    /// `sign × value`, NaN kept.
    #[serde(with = "score_serde")]
    score: f64,
}

impl PartialEq for Point {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && same_score(self.score, other.score)
    }
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

    target_builders!();

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

    /// The mean score over `[grace_period, time]`, NaN results left out; `None` if there is
    /// no number there or the mean is not one.
    fn running_mean(&self, points: &[Point], time: f64) -> Option<f64> {
        let scoped: Vec<f64> = points
            .iter()
            .filter(|p| self.grace_period <= p.time && p.time <= time && !p.score.is_nan())
            .map(|p| p.score)
            .collect();
        np_mean(&scoped).filter(|m| !m.is_nan())
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
        let Some(median) = median(&mut means).filter(|m| !m.is_nan()) else {
            return Ok(Decision::Continue);
        };
        // The best number so far; None if every result was NaN.
        let best = self.state.results[&trial]
            .iter()
            .map(|p| p.score)
            .filter(|s| !s.is_nan())
            .max_by(f64::total_cmp);
        if best.is_none_or(|b| b < median) {
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

    /// Feeds `(trial, t, loss)` to a hard rule with `min_samples_required = 2`; the decisions.
    fn feed(reports: &[(u64, f64, f64)]) -> Vec<Decision> {
        let mut view = TrialTable::new();
        for i in 0..6 {
            view.add(TrialId(i), Params::new());
            view.set_status(TrialId(i), TrialStatus::Running);
        }
        let mut m = rule(true);
        reports
            .iter()
            .map(|&(i, t, loss)| m.on_trial_result(&view, TrialId(i), &r(t, loss)).unwrap())
            .collect()
    }

    /// A loss of −inf is the best score, and a running mean holding it is the best mean.
    #[test]
    fn infinities_are_ordered_in_the_modes_direction() {
        let inf = f64::INFINITY;
        // Trial 2's best is +inf: above any median, it continues (it used to be stopped).
        let d = feed(&[(0, 1.0, 1.0), (1, 1.0, 2.0), (2, 1.0, -inf)]);
        assert_eq!(d[2], Decision::Continue);
        // Trial 1's running mean is +inf: the median of {−1, +inf} is +inf, so a loss of 0.5
        // is stopped (with −inf as the worst score the median was −inf and stopped nobody).
        let d = feed(&[(0, 1.0, 1.0), (1, 1.0, -inf), (2, 1.0, 0.5)]);
        assert_eq!(d[2], Decision::Stop);
        // Means of +inf and −inf have no median: nobody is stopped.
        let d = feed(&[(0, 1.0, inf), (1, 1.0, -inf), (2, 1.0, 9.0)]);
        assert_eq!(d[2], Decision::Continue);
    }

    /// A NaN never raises its trial's best: a trial with nothing but NaN is stopped once there
    /// is a median, while a NaN after good results does not stop the trial.
    #[test]
    fn nan_counts_as_the_worst_result_of_its_trial() {
        let nan = f64::NAN;
        let d = feed(&[(0, 1.0, 1.0), (1, 1.0, 2.0), (2, 1.0, nan)]);
        assert_eq!(d[2], Decision::Stop);
        let d = feed(&[(0, 1.0, 1.0), (0, 2.0, 1.0), (1, 1.0, 2.0), (1, 2.0, 2.0)]);
        assert!(d.iter().all(|d| *d == Decision::Continue), "too few samples, nobody waiting");
        let d = feed(&[
            (0, 1.0, 1.0),
            (0, 2.0, 1.0),
            (1, 1.0, 2.0),
            (1, 2.0, 2.0),
            (2, 1.0, 0.5),
            (2, 2.0, nan),
        ]);
        assert_eq!(d[4..], [Decision::Continue, Decision::Continue], "best 0.5 beats 1.5");
    }

    /// NaN results are left out of running means (in Ray one NaN makes the median NaN), and a
    /// trial with nothing but NaN in its window is not a sample.
    #[test]
    fn nan_results_stay_out_of_the_median() {
        let nan = f64::NAN;
        // Trial 0's mean is 1.0 over its numbers, trial 1's 2.0: the median 1.5 stops a loss
        // of 1.8. With its NaN as −inf, trial 0's mean was −inf and the median let 1.8 through.
        let d = feed(&[(0, 1.0, 1.0), (0, 2.0, nan), (1, 1.0, 2.0), (1, 2.0, 2.0), (2, 2.0, 1.8)]);
        assert_eq!(d[4], Decision::Stop);
        // Trials 0 and 1 have only NaN: no samples, so trial 2 is not judged at all.
        let d = feed(&[(0, 1.0, nan), (1, 1.0, nan), (2, 1.0, 9.0)]);
        assert_eq!(d[2], Decision::Continue);
    }

    #[test]
    fn nan_results_survive_the_saved_state() {
        let mut m = rule(true);
        let view = TrialTable::new();
        for (t, loss) in [(1.0, f64::NAN), (2.0, f64::INFINITY), (3.0, 0.5)] {
            m.on_trial_result(&view, TrialId(0), &r(t, loss)).unwrap();
        }
        let json = serde_json::to_string(&m.save_state()).unwrap();
        let state: SchedulerState = serde_json::from_str(&json).unwrap();
        assert_eq!(state, m.save_state(), "{json}");
    }
}
