//! ASHA, asynchronous successive halving (Ray's `AsyncHyperBandScheduler`).
//!
//! Each bracket has rungs at `grace_period · rf^(k+s)` for `k = 0..` below `max_t`. When a trial
//! reaches a rung it has not been recorded at, its score is compared with the cutoff of the
//! rung, the `(1 − 1/rf)·100` percentile of the scores recorded there so far, computed as Ray
//! does (`np.nanpercentile`, NumPy's `linear` method to the last bit: see the crate's `math`
//! module); below it, the trial stops; either way it is recorded. Nothing waits: the first
//! trials at a rung always continue. With `stop_last_trials`, a trial reaching `max_t` is
//! stopped. Replayed against Ray's `AsyncHyperBandScheduler` on the same stream of finite
//! results, every decision is the same.
//!
//! With several brackets, a new trial picks one at random with probability
//! `∝ e^(number of rungs)`, drawn from this scheduler's own seeded generator (Ray draws from
//! NumPy's global one): the same seed gives the same brackets, and the saved state keeps each
//! trial's bracket. [`TrialScheduler::bracket`] tells which bracket a trial ran in.
//!
//! Results that are not finite numbers (see the [module docs](super)):
//!
//! * `+inf` in `max` mode (`−inf` in `min` mode) is the best score: it is never below a cutoff,
//!   and it raises the cutoffs after it as any high score does.
//! * A NaN at a rung that has a cutoff **stops the trial** (a deliberate difference: Ray
//!   compares `NaN < cutoff`, which is false, and lets the diverged trial run on). At a rung
//!   with no cutoff yet it continues, like any first trial there.
//! * A NaN is recorded at the rung (the trial has passed it) but left out of the cutoff, as
//!   `nanpercentile` leaves it out in Ray: it does not drag later cutoffs down and let poor
//!   trials through that Ray stops.
//! * A cutoff next to an infinite score takes the limit where NumPy's arithmetic gives NaN
//!   (with which Ray stops nobody at that rung): see `math::np_lerp`.
//!
//! Each rung keeps its scores sorted, so a decision costs O(log n) plus one insertion.

use std::collections::{BTreeMap, BTreeSet};

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::{
    Decision, RungStatus, SchedulerState, SchedulerStatus, Target, TrialScheduler,
    first_pending_then_paused, wrong_state,
};
use crate::error::{Error, Result};
use crate::math::nanpercentile_sorted;
use crate::metrics::{Metrics, Mode, get_metric, same_score, score_serde};
use crate::rng::SearchRng;
use crate::trial::{TrialId, TrialsView};

const NAME: &str = "ASHA";

/// More rungs than this means a reduction factor barely above 1: refused.
const MAX_RUNGS: usize = 1000;

/// Asynchronous successive halving. Defaults as Ray: `time_attr = "training_iteration"`,
/// `max_t = 100`, `grace_period = 1`, `reduction_factor = 4`, `brackets = 1`,
/// `stop_last_trials = true`.
#[derive(Clone, Debug)]
pub struct Asha {
    target: Target,
    max_t: f64,
    grace_period: f64,
    reduction_factor: f64,
    brackets: usize,
    stop_last_trials: bool,
    seed: u64,
    core: Option<AshaState>,
}

/// The evolving part of an [`Asha`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AshaState {
    rng: SearchRng,
    brackets: Vec<Bracket>,
    /// Every trial added, with its bracket (kept after the trial ends).
    #[serde(with = "crate::serde_util::map_as_pairs")]
    trial_bracket: BTreeMap<TrialId, usize>,
    /// Trials that ended: their results are refused, a second completion is ignored.
    #[serde(default)]
    completed: BTreeSet<TrialId>,
    num_stopped: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Bracket {
    /// Highest milestone first (as Ray keeps them).
    rungs: Vec<Rung>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "RungRepr", into = "RungRepr")]
struct Rung {
    milestone: f64,
    /// Every trial that passed the rung, with its score (NaN included).
    recorded: BTreeMap<TrialId, f64>,
    /// The recorded scores but NaN, ascending: what the cutoff is taken from.
    sorted: Vec<f64>,
}

impl PartialEq for Rung {
    fn eq(&self, other: &Self) -> bool {
        self.milestone == other.milestone
            && self.recorded.len() == other.recorded.len()
            && self
                .recorded
                .iter()
                .zip(&other.recorded)
                .all(|((i, a), (j, b))| i == j && same_score(*a, *b))
    }
}

#[derive(Serialize, Deserialize)]
struct RungRepr {
    milestone: f64,
    recorded: Vec<(TrialId, ScoreRepr)>,
}

#[derive(Serialize, Deserialize)]
#[serde(transparent)]
struct ScoreRepr(#[serde(with = "score_serde")] f64);

impl From<RungRepr> for Rung {
    fn from(r: RungRepr) -> Self {
        let recorded: BTreeMap<TrialId, f64> =
            r.recorded.into_iter().map(|(k, v)| (k, v.0)).collect();
        let mut sorted: Vec<f64> = recorded.values().copied().filter(|x| !x.is_nan()).collect();
        sorted.sort_by(f64::total_cmp);
        Rung { milestone: r.milestone, recorded, sorted }
    }
}

impl From<Rung> for RungRepr {
    fn from(r: Rung) -> Self {
        RungRepr {
            milestone: r.milestone,
            recorded: r.recorded.into_iter().map(|(k, v)| (k, ScoreRepr(v))).collect(),
        }
    }
}

impl Rung {
    fn record(&mut self, trial: TrialId, score: f64) {
        self.recorded.insert(trial, score);
        if !score.is_nan() {
            let at = self.sorted.partition_point(|x| x.total_cmp(&score).is_lt());
            self.sorted.insert(at, score);
        }
    }

    /// Ray's `np.nanpercentile(recorded, (1 - 1/rf) * 100)`; `None` with nothing but NaN
    /// recorded (NumPy's NaN there stops no trial in Ray either).
    fn cutoff(&self, rf: f64) -> Option<f64> {
        nanpercentile_sorted(&self.sorted, (1.0 - 1.0 / rf) * 100.0)
    }
}

impl Default for Asha {
    fn default() -> Self {
        Self::new()
    }
}

impl Asha {
    /// ASHA with Ray's defaults.
    pub fn new() -> Self {
        Self {
            target: Target::new(NAME, "training_iteration"),
            max_t: 100.0,
            grace_period: 1.0,
            reduction_factor: 4.0,
            brackets: 1,
            stop_last_trials: true,
            seed: 0,
            core: None,
        }
    }

    target_builders!();

    /// Maximum time per trial.
    pub fn max_t(mut self, t: impl Into<f64>) -> Self {
        self.max_t = t.into();
        self.core = None;
        self
    }

    /// Time before which no trial is stopped (the first rung).
    pub fn grace_period(mut self, t: impl Into<f64>) -> Self {
        self.grace_period = t.into();
        self.core = None;
        self
    }

    /// Halving rate (> 1).
    pub fn reduction_factor(mut self, rf: impl Into<f64>) -> Self {
        self.reduction_factor = rf.into();
        self.core = None;
        self
    }

    /// Number of brackets (≥ 1).
    pub fn brackets(mut self, n: usize) -> Self {
        self.brackets = n;
        self.core = None;
        self
    }

    /// Stop trials that reach `max_t`.
    pub fn stop_last_trials(mut self, on: bool) -> Self {
        self.stop_last_trials = on;
        self
    }

    /// Seed for the bracket draw (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self.core = None;
        self
    }

    /// The rung milestones of each bracket (highest first); validates the settings.
    pub fn milestones(&self) -> Result<Vec<Vec<f64>>> {
        self.check()?;
        Ok(self
            .build()
            .brackets
            .iter()
            .map(|b| b.rungs.iter().map(|r| r.milestone).collect())
            .collect())
    }

    /// Trials stopped early so far (before `max_t`).
    pub fn num_stopped(&self) -> u64 {
        self.core.as_ref().map_or(0, |c| c.num_stopped)
    }

    fn check(&self) -> Result<()> {
        let pos = |x: f64| x.is_finite() && x > 0.0;
        if !pos(self.max_t) {
            return Err(Error::config(NAME, "max_t", self.max_t, "a finite number > 0"));
        }
        if !pos(self.grace_period) || self.grace_period > self.max_t {
            return Err(Error::config(
                NAME,
                "grace_period",
                self.grace_period,
                "0 < grace_period ≤ max_t",
            ));
        }
        self.target.whole_iterations("max_t", self.max_t)?;
        self.target.whole_iterations("grace_period", self.grace_period)?;
        if !(self.reduction_factor.is_finite() && self.reduction_factor > 1.0) {
            return Err(Error::config(
                NAME,
                "reduction_factor",
                self.reduction_factor,
                "a number > 1",
            ));
        }
        if self.brackets == 0 {
            return Err(Error::config(NAME, "brackets", 0, "at least 1"));
        }
        let rungs = (self.max_t / self.grace_period).ln() / self.reduction_factor.ln();
        if rungs > MAX_RUNGS as f64 || self.brackets > MAX_RUNGS {
            return Err(Error::config(
                NAME,
                "reduction_factor",
                self.reduction_factor,
                format!("a factor and bracket count giving at most {MAX_RUNGS} rungs"),
            ));
        }
        Ok(())
    }

    fn build(&self) -> AshaState {
        let rf = self.reduction_factor;
        let levels = (self.max_t / self.grace_period).ln() / rf.ln();
        let brackets = (0..self.brackets)
            .map(|s| {
                // Ray: int(log(max_t / min_t) / log(rf) - s + 1), with slack for float error.
                let n = (levels - s as f64 + 1.0 + 1e-9).floor().max(0.0) as usize;
                let rungs = (0..n)
                    .rev()
                    .map(|k| Rung {
                        milestone: self.grace_period * rf.powi((k + s) as i32),
                        recorded: BTreeMap::new(),
                        sorted: Vec::new(),
                    })
                    .collect();
                Bracket { rungs }
            })
            .collect();
        AshaState {
            rng: SearchRng::seed_from_u64(self.seed),
            brackets,
            trial_bracket: BTreeMap::new(),
            completed: BTreeSet::new(),
            num_stopped: 0,
        }
    }

    fn core(&mut self) -> Result<&mut AshaState> {
        if self.core.is_none() {
            self.check()?;
            self.core = Some(self.build());
        }
        self.core.as_mut().ok_or(Error::NotConfigured { component: NAME })
    }
}

impl Bracket {
    /// Ray's `_Bracket.on_result`, but for a NaN score (see the module docs).
    fn on_result(
        &mut self,
        trial: TrialId,
        t: f64,
        score: f64,
        rf: f64,
        stop_last: bool,
    ) -> Decision {
        let mut action = Decision::Continue;
        for rung in &mut self.rungs {
            let recorded = rung.recorded.contains_key(&trial);
            if t >= rung.milestone && recorded && !stop_last {
                break;
            }
            if t < rung.milestone || recorded {
                continue;
            }
            if let Some(cutoff) = rung.cutoff(rf)
                && (score.is_nan() || score < cutoff)
            {
                action = Decision::Stop;
            }
            rung.record(trial, score);
            break;
        }
        action
    }
}

impl TrialScheduler for Asha {
    fn validate(&self) -> Result<()> {
        self.check()
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        self.target.set(metric, mode)
    }

    fn on_trial_add(&mut self, _: &dyn TrialsView, trial: TrialId) -> Result<()> {
        self.target.check()?;
        let core = self.core()?;
        let n = core.brackets.len();
        let idx = if n <= 1 {
            0
        } else {
            let max = core.brackets.iter().map(|b| b.rungs.len()).max().unwrap_or(0);
            let w: Vec<f64> =
                core.brackets.iter().map(|b| (b.rungs.len() as f64 - max as f64).exp()).collect();
            let total: f64 = w.iter().sum();
            let u: f64 = core.rng.random::<f64>() * total;
            let mut acc = 0.0;
            let mut pick = n - 1;
            for (i, wi) in w.iter().enumerate() {
                acc += wi;
                if u < acc {
                    pick = i;
                    break;
                }
            }
            pick
        };
        core.trial_bracket.insert(trial, idx);
        Ok(())
    }

    fn on_trial_result(
        &mut self,
        _: &dyn TrialsView,
        trial: TrialId,
        result: &Metrics,
    ) -> Result<Decision> {
        let (t, score) = self.target.read(result)?;
        let (max_t, rf, stop_last) = (self.max_t, self.reduction_factor, self.stop_last_trials);
        let core = self.core()?;
        if core.completed.contains(&trial) {
            return Err(Error::UnknownTrial { component: NAME, trial });
        }
        let action = if t >= max_t && stop_last {
            Decision::Stop
        } else {
            let Some(&b) = core.trial_bracket.get(&trial) else {
                return Err(Error::UnknownTrial { component: NAME, trial });
            };
            match core.brackets.get_mut(b) {
                Some(bracket) => bracket.on_result(trial, t, score, rf, stop_last),
                None => return Err(Error::UnknownTrial { component: NAME, trial }),
            }
        };
        // Early stops only: a trial stopped at max_t ran its whole budget.
        if action == Decision::Stop && t < max_t {
            core.num_stopped += 1;
        }
        Ok(action)
    }

    fn on_trial_complete(
        &mut self,
        _: &dyn TrialsView,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        let read = match (error, result) {
            (false, Some(r)) => Some(self.target.read(r)?),
            _ => None,
        };
        let (rf, stop_last) = (self.reduction_factor, self.stop_last_trials);
        let core = self.core()?;
        let Some(&b) = core.trial_bracket.get(&trial) else {
            return Ok(());
        };
        if !core.completed.insert(trial) {
            return Ok(());
        }
        if let (Some((t, score)), Some(bracket)) = (read, core.brackets.get_mut(b)) {
            bracket.on_result(trial, t, score, rf, stop_last);
        }
        Ok(())
    }

    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId> {
        first_pending_then_paused(trials)
    }

    fn status(&self) -> SchedulerStatus {
        let sign = self.target.mode.map_or(1.0, Mode::sign);
        let rf = self.reduction_factor;
        let rungs = self.core.iter().flat_map(|core| {
            core.brackets.iter().enumerate().flat_map(move |(b, bracket)| {
                bracket.rungs.iter().rev().map(move |rung| RungStatus {
                    bracket: b,
                    milestone: rung.milestone,
                    recorded: rung.recorded.len(),
                    cutoff: rung.cutoff(rf).map(|c| c * sign).filter(|c| c.is_finite()),
                })
            })
        });
        SchedulerStatus {
            kind: "asha".to_owned(),
            time_attr: self.target.time_attr.clone(),
            rungs: rungs.collect(),
            stopped: self.core.as_ref().map_or(0, |c| c.num_stopped),
            ..SchedulerStatus::default()
        }
    }

    fn budget_reached(&self, result: &Metrics) -> bool {
        get_metric(result, &self.target.time_attr).is_ok_and(|t| t >= self.max_t)
    }

    fn bracket(&self, trial: TrialId) -> Option<usize> {
        self.core.as_ref()?.trial_bracket.get(&trial).copied()
    }

    fn save_state(&self) -> SchedulerState {
        // Never used: an empty state (restoring it leaves the scheduler fresh).
        SchedulerState::Asha(self.core.clone().unwrap_or_else(|| AshaState {
            rng: SearchRng::seed_from_u64(self.seed),
            brackets: Vec::new(),
            trial_bracket: BTreeMap::new(),
            completed: BTreeSet::new(),
            num_stopped: 0,
        }))
    }

    fn restore_state(&mut self, state: SchedulerState) -> Result<()> {
        match state {
            SchedulerState::Asha(s) => {
                self.check()?;
                if s.brackets.is_empty() && s.trial_bracket.is_empty() {
                    self.core = None;
                    return Ok(());
                }
                let fresh = self.build();
                let same_rungs = fresh.brackets.len() == s.brackets.len()
                    && fresh.brackets.iter().zip(&s.brackets).all(|(a, b)| {
                        a.rungs.len() == b.rungs.len()
                            && a.rungs.iter().zip(&b.rungs).all(|(x, y)| x.milestone == y.milestone)
                    });
                if !same_rungs {
                    return Err(Error::InvalidState {
                        expected: NAME,
                        problem: "the saved rungs differ from this scheduler's settings".into(),
                    });
                }
                self.core = Some(s);
                Ok(())
            }
            other => Err(wrong_state(NAME, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::TrialTable;

    fn result(t: f64, acc: f64) -> Metrics {
        Metrics::from([("training_iteration".to_string(), t), ("acc".to_string(), acc)])
    }

    #[test]
    fn status_shows_each_rung_and_its_cutoff_in_the_metrics_units() {
        let view = TrialTable::new();
        let mut a = Asha::new().metric("acc").mode(Mode::Min).max_t(4).reduction_factor(2);
        assert!(a.status().rungs.is_empty(), "nothing before the first trial");
        for i in 0..3 {
            a.on_trial_add(&view, TrialId(i)).unwrap();
        }
        a.on_trial_result(&view, TrialId(0), &result(1.0, 0.25)).unwrap();
        a.on_trial_result(&view, TrialId(1), &result(1.0, 0.75)).unwrap();
        // 0.9 is a worse loss than the median 0.5 of {0.25, 0.75}: stopped.
        assert_eq!(
            a.on_trial_result(&view, TrialId(2), &result(1.0, 0.9)).unwrap(),
            Decision::Stop
        );
        let status = a.status();
        assert_eq!(
            (status.kind.as_str(), status.time_attr.as_str()),
            ("asha", "training_iteration")
        );
        assert_eq!(status.stopped, 2, "trial 1's 0.75 was worse than trial 0's 0.25 alone");
        let rungs: Vec<(f64, usize, Option<f64>)> =
            status.rungs.iter().map(|r| (r.milestone, r.recorded, r.cutoff)).collect();
        // numpy: percentile([-0.9, -0.75, -0.25], 50) = -0.75, shown as the loss 0.75.
        assert_eq!(rungs, [(1.0, 3, Some(0.75)), (2.0, 0, None), (4.0, 0, None)]);
        // A trial stopped at max_t ran its whole budget: not an early stop.
        for t in [2.0, 4.0] {
            a.on_trial_result(&view, TrialId(0), &result(t, 0.1)).unwrap();
        }
        assert_eq!(a.status().stopped, 2, "trial 0 ran to max_t");
    }

    #[test]
    fn rays_default_rungs() {
        let a = Asha::new();
        assert_eq!(a.milestones().unwrap(), vec![vec![64.0, 16.0, 4.0, 1.0]]);
        let a = Asha::new().max_t(81).grace_period(1).reduction_factor(3).brackets(3);
        assert_eq!(
            a.milestones().unwrap(),
            vec![
                vec![81.0, 27.0, 9.0, 3.0, 1.0],
                vec![81.0, 27.0, 9.0, 3.0],
                vec![81.0, 27.0, 9.0]
            ]
        );
        assert!(Asha::new().reduction_factor(1).milestones().is_err());
        assert!(Asha::new().grace_period(0).milestones().is_err());
    }

    /// Iterations are whole: a fractional max_t or grace_period is refused where time_attr
    /// counts them, and taken where it is a time.
    #[test]
    fn a_fraction_of_an_iteration_is_refused() {
        let err = Asha::new().max_t(16.5).milestones().unwrap_err().to_string();
        assert!(
            err.contains("max_t") && err.contains("whole number of iterations (16 or 17)"),
            "{err}"
        );
        assert!(Asha::new().grace_period(1.5).milestones().is_err());
        assert!(Asha::new().time_attr("time_total_s").max_t(16.5).milestones().is_ok());
        use crate::scheduler::{HyperBand, TrialScheduler};
        assert!(HyperBand::new().max_t(16.5).validate().is_err());
        assert!(HyperBand::new().max_t(16).validate().is_ok());
    }

    #[test]
    fn stops_below_the_rung_quantile() {
        let view = TrialTable::new();
        let mut a = Asha::new().metric("acc").mode(Mode::Max).reduction_factor(2);
        for i in 0..4 {
            a.on_trial_add(&view, TrialId(i)).unwrap();
        }
        // First trial at the rung: nothing recorded, continues.
        assert_eq!(
            a.on_trial_result(&view, TrialId(0), &result(1.0, 0.5)).unwrap(),
            Decision::Continue
        );
        assert_eq!(
            a.on_trial_result(&view, TrialId(1), &result(1.0, 0.9)).unwrap(),
            Decision::Continue
        );
        // Median of {0.5, 0.9} is 0.7: 0.6 is below.
        assert_eq!(
            a.on_trial_result(&view, TrialId(2), &result(1.0, 0.6)).unwrap(),
            Decision::Stop
        );
        // NaN is the worst score.
        assert_eq!(
            a.on_trial_result(&view, TrialId(3), &result(1.0, f64::NAN)).unwrap(),
            Decision::Stop
        );
        // Between rungs: continue.
        assert_eq!(
            a.on_trial_result(&view, TrialId(1), &result(1.5, 0.1)).unwrap(),
            Decision::Continue
        );
        assert_eq!(
            a.on_trial_result(&view, TrialId(1), &result(100.0, 0.1)).unwrap(),
            Decision::Stop
        );
        let e = a.on_trial_result(&view, TrialId(1), &Metrics::new()).unwrap_err();
        assert!(matches!(e, Error::MissingMetric { .. }));
    }

    fn decide(a: &mut Asha, trial: u64, t: f64, value: f64) -> Decision {
        let view = TrialTable::new();
        if a.bracket(TrialId(trial)).is_none() {
            a.on_trial_add(&view, TrialId(trial)).unwrap();
        }
        a.on_trial_result(&view, TrialId(trial), &result(t, value)).unwrap()
    }

    /// `−inf` in `min` mode is the best score: it continues, and the rung's cutoff rises with
    /// it (it used to count as the worst score, be stopped, and lower the cutoff).
    #[test]
    fn best_infinity_continues_and_raises_the_cutoff() {
        let mut a = Asha::new().metric("acc").mode(Mode::Min).max_t(4).reduction_factor(2);
        assert_eq!(decide(&mut a, 0, 1.0, 1.0), Decision::Continue);
        assert_eq!(decide(&mut a, 1, 1.0, 2.0), Decision::Stop);
        assert_eq!(decide(&mut a, 2, 1.0, f64::NEG_INFINITY), Decision::Continue);
        // Scores {−2, −1, +inf}: the median is −1, and a loss of 1.2 is worse.
        assert_eq!(decide(&mut a, 3, 1.0, 1.2), Decision::Stop);
        // In max mode +inf is the best.
        let mut a = Asha::new().metric("acc").mode(Mode::Max).max_t(4).reduction_factor(2);
        assert_eq!(decide(&mut a, 0, 1.0, 0.5), Decision::Continue);
        assert_eq!(decide(&mut a, 1, 1.0, f64::INFINITY), Decision::Continue);
        assert_eq!(decide(&mut a, 2, 1.0, 0.6), Decision::Stop, "below the median of {{0.5, inf}}");
        assert_eq!(a.status().rungs[0].cutoff, Some(0.6), "median of {{0.5, 0.6, inf}}");
    }

    /// A NaN stops its trial at a rung that has a cutoff (Ray's `NaN < cutoff` is false and lets
    /// it run), continues where there is none, and counts at the rung but not in the cutoff.
    #[test]
    fn nan_stops_where_there_is_a_cutoff_but_stays_out_of_it() {
        let mut a = Asha::new().metric("acc").mode(Mode::Max).max_t(4).reduction_factor(2);
        assert_eq!(decide(&mut a, 0, 1.0, f64::NAN), Decision::Continue, "no cutoff yet");
        assert_eq!(decide(&mut a, 1, 1.0, 0.5), Decision::Continue, "only a NaN recorded");
        assert_eq!(decide(&mut a, 2, 1.0, f64::NAN), Decision::Stop);
        assert_eq!(decide(&mut a, 3, 1.0, 0.9), Decision::Continue);
        // The two NaNs are left out: the cutoff is the median of {0.5, 0.9}, 0.7. Had they
        // entered as −inf, it would be −inf and 0.6 would go on.
        let rung = &a.status().rungs[0];
        assert_eq!((rung.recorded, rung.cutoff), (4, Some(0.7)));
        assert_eq!(decide(&mut a, 4, 1.0, 0.6), Decision::Stop);
        // A NaN trial that went on is recorded at the rung: it is not judged there again.
        assert_eq!(decide(&mut a, 0, 1.5, 0.1), Decision::Continue);
        // At the next rung it is judged like any other.
        assert_eq!(decide(&mut a, 3, 2.0, 0.9), Decision::Continue);
        assert_eq!(decide(&mut a, 0, 2.0, f64::NAN), Decision::Stop);
    }

    /// A score exactly on the cutoff continues, as in Ray: the cutoff must be NumPy's to the
    /// last bit. `np.percentile([0.1, 0.4], 75)` is 0.325, where `a + (b − a)·t` gives
    /// 0.32500000000000007 and would stop the trial; `np.percentile([0.1, 1.3], 75)` is 1.0,
    /// where the textbook formula gives 0.9999999999999999 and would let that score through.
    #[test]
    fn a_score_on_the_cutoff_is_judged_as_in_ray() {
        let two = |x: f64, y: f64| {
            let mut a = Asha::new().metric("acc").mode(Mode::Max).reduction_factor(4);
            decide(&mut a, 0, 1.0, x);
            decide(&mut a, 1, 1.0, y);
            a
        };
        let textbook = 0.1 + (0.4 - 0.1) * 0.75;
        assert!(textbook > 0.325, "{textbook}: the case must tell the formulas apart");
        let mut a = two(0.1, 0.4);
        assert_eq!(a.status().rungs[0].cutoff, Some(0.325));
        assert_eq!(decide(&mut a, 2, 1.0, 0.325), Decision::Continue);
        let below = 0.999_999_999_999_999_9;
        assert_eq!(0.1 + (1.3 - 0.1) * 0.75, below, "the textbook cutoff");
        let mut a = two(0.1, 1.3);
        assert_eq!(decide(&mut a, 2, 1.0, below), Decision::Stop);
        // Reduction factor 6: Ray's percent (1 − 1/6)·100 goes through NumPy's `/ 100`, one
        // bit above 1 − 1/6; np.percentile([0, 0.1, 0.2, 0.30000000000000004], 83.33…) is
        // 0.25000000000000006, so 0.25 stops.
        let mut a = Asha::new().metric("acc").mode(Mode::Max).reduction_factor(6);
        for (i, x) in [0.0, 0.1, 0.2, 0.1 + 0.2].into_iter().enumerate() {
            decide(&mut a, i as u64, 1.0, x);
        }
        assert_eq!(a.status().rungs[0].cutoff, Some(0.250_000_000_000_000_06));
        assert_eq!(decide(&mut a, 9, 1.0, 0.25), Decision::Stop);
    }

    fn brackets_of(a: &Asha, n: u64) -> Vec<usize> {
        (0..n).map(|i| a.bracket(TrialId(i)).unwrap()).collect()
    }

    /// A trial has had its whole budget at `max_t` (a stop then ends it finished), not before;
    /// a result without the time attribute has not.
    #[test]
    fn the_budget_is_reached_at_max_t() {
        let a = Asha::new().metric("acc").mode(Mode::Max).max_t(8);
        let at = |t: f64| a.budget_reached(&result(t, 0.5));
        assert_eq!((at(4.0), at(8.0), at(9.0)), (false, true, true));
        assert!(!a.budget_reached(&Metrics::new()));
    }

    /// Brackets come from the scheduler's seeded generator: the same seed, the same brackets,
    /// through a save and restore too; the bracket stays known after the trial ends.
    #[test]
    fn brackets_are_seeded_and_kept_in_the_saved_state() {
        let view = TrialTable::new();
        let make = |seed: u64| {
            Asha::new()
                .metric("acc")
                .mode(Mode::Max)
                .max_t(81)
                .reduction_factor(3)
                .brackets(3)
                .seed(seed)
        };
        let add = |a: &mut Asha, ids: std::ops::Range<u64>| {
            for i in ids {
                a.on_trial_add(&view, TrialId(i)).unwrap();
            }
        };
        let (mut a, mut b, mut c) = (make(5), make(5), make(6));
        add(&mut a, 0..200);
        add(&mut b, 0..200);
        add(&mut c, 0..200);
        let drawn = brackets_of(&a, 200);
        assert_eq!(drawn, brackets_of(&b, 200), "same seed, same brackets");
        assert_ne!(drawn, brackets_of(&c, 200), "another seed, other brackets");
        // Ray's weights: ∝ e^(rungs), rungs 5, 4, 3: 0.665, 0.245, 0.090.
        let share = |k: usize| drawn.iter().filter(|b| **b == k).count() as f64 / 200.0;
        assert!(share(0) > 0.5 && share(1) > 0.1 && share(2) > 0.02, "{drawn:?}");
        assert!(share(0) > share(1) && share(1) > share(2), "{drawn:?}");
        assert_eq!(a.bracket(TrialId(999)), None);
        assert_eq!(Asha::new().bracket(TrialId(0)), None, "nothing added yet");

        // Save after 100, restore into a fresh one, add the rest: the uninterrupted sequence.
        let mut first = make(5);
        add(&mut first, 0..100);
        let result = Metrics::from([("training_iteration".into(), 1.0), ("acc".into(), 0.5)]);
        first.on_trial_complete(&view, TrialId(3), Some(&result), false).unwrap();
        assert_eq!(first.bracket(TrialId(3)), Some(drawn[3]), "known after the trial ended");
        let json = serde_json::to_string(&first.save_state()).unwrap();
        let state: SchedulerState = serde_json::from_str(&json).unwrap();
        assert_eq!(state, first.save_state());
        let mut resumed = make(5);
        resumed.restore_state(state).unwrap();
        add(&mut resumed, 100..200);
        assert_eq!(brackets_of(&resumed, 200), drawn);
        let e = resumed.on_trial_result(&view, TrialId(3), &result).unwrap_err();
        assert!(matches!(e, Error::UnknownTrial { .. }), "an ended trial reports no more: {e}");
        // A single bracket: every trial is in bracket 0.
        let mut one = Asha::new().metric("acc").mode(Mode::Max);
        add(&mut one, 0..3);
        assert_eq!(brackets_of(&one, 3), [0, 0, 0]);
        // Through a Box<dyn TrialScheduler> as the controller holds it.
        let boxed: Box<dyn TrialScheduler> = Box::new(one);
        assert_eq!(boxed.bracket(TrialId(2)), Some(0));
    }

    /// A rung holding NaN and infinities survives a save and restore as it was.
    #[test]
    fn non_finite_scores_survive_the_saved_state() {
        let mut a = Asha::new().metric("acc").mode(Mode::Max).max_t(4).reduction_factor(2);
        for (i, x) in [f64::NAN, f64::INFINITY, 0.5, f64::NEG_INFINITY].into_iter().enumerate() {
            decide(&mut a, i as u64, 1.0, x);
        }
        let json = serde_json::to_string(&a.save_state()).unwrap();
        let state: SchedulerState = serde_json::from_str(&json).unwrap();
        assert_eq!(state, a.save_state(), "{json}");
        let mut b = Asha::new().metric("acc").mode(Mode::Max).max_t(4).reduction_factor(2);
        b.restore_state(state).unwrap();
        assert_eq!(b.status(), a.status());
        assert_eq!(decide(&mut b, 7, 1.0, 0.4), decide(&mut a, 7, 1.0, 0.4));
    }
}
