//! HyperBand with synchronous successive-halving brackets (Ray's `HyperBandScheduler`).
//!
//! With `η = reduction_factor` and `s_max + 1 = round(log_η(max_t)) + 1` brackets per band,
//! bracket `s` (filled in order `s = 0, 1, ..` as Ray does, or `s = s_max, .., 0` with
//! [`HyperBand::aggressive_first`], as the HyperBand and BOHB papers do) takes `n₀ = ceil((s_max+1)/(s+1) · η^s)` trials
//! and first runs them to `r₀ = floor(max_t / η^s)` (brackets with `r₀ = 0` are skipped, as in
//! Ray). Trials reaching the bracket's milestone are paused until every live trial of the
//! bracket has reached it; then the best `ceil(n/η)` are promoted to the next milestone
//! (`r·η`, capped at `max_t`; the last round always runs to `max_t`) and the rest are
//! stopped. A full band starts a new band.
//!
//! Differences from Ray, both deliberate: milestones are cumulative (`r₀·η^k` capped at
//! `max_t`; Ray's capping arithmetic can end a bracket below `max_t`), and in the last round a
//! trial reaching `max_t` is stopped at once instead of being paused until its peers arrive.
//!
//! A bracket's first round closes once all its trials were added and have reached the
//! milestone, or, when no trial will be added anymore ([`TrialScheduler::on_no_more_trials`]),
//! with the trials it has. Its trials are made one at a time, as slots free up and nothing
//! else can run: a trial paused at the milestone gives its slot to the next one, and a
//! model-based searcher ([`Bohb`](crate::Bohb)) suggests each from every result so far, as
//! hpbandster does. (Ray closes a round on the trials added so far and relies on its Tuner's
//! queue of pending trials to fill the bracket first.)
//!
//! Promoted trials that were paused are handed out by `choose_trial_to_run`; losers that were
//! paused are returned by `take_stop_requests`. [`TrialScheduler::bracket`] tells which bracket
//! (its index among the brackets created, in creation order; [`HyperBand::bracket_fill`] lists
//! them) a trial ran in.
//!
//! Results that are not finite numbers (see the [module docs](super)): a round ranks trials by
//! their last score with `±inf` ordered like any number (`+inf` is the best in `max` mode) and
//! a NaN below every number, so a trial whose last result is NaN is among the first stopped
//! when its round ends (a deliberate difference: Ray sorts with Python's `sorted`, where NaN
//! compares false with everything and lands wherever the sort leaves it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Decision, SchedulerState, Target, TrialScheduler, best_first, wrong_state};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode, get_metric, opt_score_serde, same_opt_score};
use crate::trial::{TrialId, TrialStatus, TrialsView};

const NAME: &str = "HyperBand";

/// More brackets per band than this means a reduction factor barely above 1: refused.
const MAX_BRACKETS: usize = 1000;

/// Synchronous HyperBand. Defaults as Ray: `time_attr = "training_iteration"`, `max_t = 81`,
/// `reduction_factor = 3`, `stop_last_trials = true`.
#[derive(Clone, Debug)]
pub struct HyperBand {
    target: Target,
    max_t: f64,
    eta: f64,
    stop_last_trials: bool,
    aggressive_first: bool,
    state: HyperBandState,
}

/// The evolving part of a [`HyperBand`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HyperBandState {
    brackets: Vec<HbBracket>,
    /// Each band lists its brackets by index; `None` for a skipped (`r₀ = 0`) slot.
    bands: Vec<Vec<Option<usize>>>,
    /// The bracket being filled.
    current: Option<usize>,
    /// No trial will be added anymore: rounds close with the trials their brackets have.
    #[serde(default)]
    no_more_trials: bool,
    /// Live trials and their bracket.
    #[serde(with = "crate::serde_util::map_as_pairs")]
    trial_bracket: BTreeMap<TrialId, usize>,
    /// Every trial added and its bracket, kept after the trial ends.
    #[serde(default, with = "crate::serde_util::map_as_pairs")]
    assigned: BTreeMap<TrialId, usize>,
    stop_requests: Vec<TrialId>,
    num_stopped: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct HbBracket {
    s: usize,
    n0: usize,
    r0: f64,
    /// Trials kept at the current round.
    n: usize,
    /// Current milestone.
    milestone: f64,
    /// Halvings left.
    halves: usize,
    /// Live trials in the order they joined: (trial, last time, last score).
    live: Vec<LiveTrial>,
    added: usize,
    progress: f64,
    total_work: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct LiveTrial {
    trial: TrialId,
    time: f64,
    /// The last score (`sign × value`, NaN kept).
    #[serde(with = "opt_score_serde")]
    score: Option<f64>,
}

impl PartialEq for LiveTrial {
    fn eq(&self, other: &Self) -> bool {
        self.trial == other.trial
            && self.time == other.time
            && same_opt_score(self.score, other.score)
    }
}

/// Bracket shape: `(n₀, r₀)` for bracket `s` of a band with `s_max + 1` brackets.
fn shape(s: usize, s_max_1: usize, eta: f64, max_t: f64) -> (usize, f64) {
    let n0 = (s_max_1 as f64 / (s + 1) as f64 * eta.powi(s as i32) - 1e-9).ceil().max(0.0);
    let r0 = (max_t / eta.powi(s as i32) + 1e-9).floor();
    (n0 as usize, r0)
}

impl Default for HyperBand {
    fn default() -> Self {
        Self::new()
    }
}

impl HyperBand {
    /// HyperBand with Ray's defaults.
    pub fn new() -> Self {
        Self {
            target: Target::new(NAME, "training_iteration"),
            max_t: 81.0,
            eta: 3.0,
            stop_last_trials: true,
            aggressive_first: false,
            state: HyperBandState::default(),
        }
    }

    target_builders!();

    /// Maximum time per trial (≥ 1).
    pub fn max_t(mut self, t: impl Into<f64>) -> Self {
        self.max_t = t.into();
        self
    }

    /// η (> 1).
    pub fn reduction_factor(mut self, eta: impl Into<f64>) -> Self {
        self.eta = eta.into();
        self
    }

    /// Stop trials at the end of the last round (otherwise they keep running).
    pub fn stop_last_trials(mut self, on: bool) -> Self {
        self.stop_last_trials = on;
        self
    }

    /// Brackets per band, `round(log_η(max_t)) + 1`.
    /// Fill each band's brackets from the most aggressive (the most trials, the smallest
    /// first budget) to the least, as the HyperBand and BOHB papers (and hpbandster) do,
    /// instead of Ray's order, least aggressive first (default off). With a model-based
    /// searcher ([`Bohb`](crate::Bohb)) the cheap first brackets feed its model early.
    pub fn aggressive_first(mut self, on: bool) -> Self {
        self.aggressive_first = on;
        self
    }

    pub fn brackets_per_band(&self) -> usize {
        ((self.max_t.ln() / self.eta.ln()).round().max(0.0) as usize) + 1
    }

    /// `(n₀, r₀)` of each bracket slot of a band, in the order they are filled (`r₀ = 0`
    /// slots are skipped when filling).
    pub fn bracket_shapes(&self) -> Result<Vec<(usize, f64)>> {
        self.check()?;
        let s_max_1 = self.brackets_per_band();
        let shapes = (0..s_max_1).map(|s| shape(s, s_max_1, self.eta, self.max_t));
        Ok(if self.aggressive_first { shapes.rev().collect() } else { shapes.collect() })
    }

    /// Sizes of the brackets created so far: `(s, n₀, trials added)`.
    pub fn bracket_fill(&self) -> Vec<(usize, usize, usize)> {
        self.state.brackets.iter().map(|b| (b.s, b.n0, b.added)).collect()
    }

    fn check(&self) -> Result<()> {
        if !(self.max_t.is_finite() && self.max_t >= 1.0) {
            return Err(Error::config(NAME, "max_t", self.max_t, "a finite number ≥ 1"));
        }
        self.target.whole_iterations("max_t", self.max_t)?;
        if !(self.eta.is_finite() && self.eta > 1.0) {
            return Err(Error::config(NAME, "reduction_factor", self.eta, "a number > 1"));
        }
        if self.brackets_per_band() > MAX_BRACKETS {
            return Err(Error::config(
                NAME,
                "reduction_factor",
                self.eta,
                format!("a factor giving at most {MAX_BRACKETS} brackets per band for this max_t"),
            ));
        }
        Ok(())
    }

    fn new_bracket(&self, s: usize, n0: usize, r0: f64) -> HbBracket {
        // Planned work, for ordering brackets by completion.
        let mut work = 0.0;
        let (mut n, mut r, mut prev) = (n0 as f64, r0, 0.0);
        for k in 0..=s {
            work += n * (r - prev);
            prev = r;
            n = (n / self.eta).ceil();
            r = if k + 1 == s { self.max_t } else { (r * self.eta).min(self.max_t) };
        }
        HbBracket {
            s,
            n0,
            r0,
            n: n0,
            milestone: r0,
            halves: s,
            live: Vec::new(),
            added: 0,
            progress: 0.0,
            total_work: work,
        }
    }

    fn add(&mut self, trial: TrialId) -> Result<()> {
        self.check()?;
        let s_max_1 = self.brackets_per_band();
        let need_new = match self.state.current {
            None => true,
            Some(b) => self.state.brackets.get(b).is_none_or(|b| b.added >= b.n0),
        };
        if need_new {
            loop {
                if self.state.bands.last().is_none_or(|band| band.len() >= s_max_1) {
                    self.state.bands.push(Vec::new());
                }
                let k = self.state.bands.last().map_or(0, Vec::len);
                let s = if self.aggressive_first { s_max_1 - 1 - k } else { k };
                let (n0, r0) = shape(s, s_max_1, self.eta, self.max_t);
                let slot = if r0 < 1.0 || n0 == 0 {
                    None
                } else {
                    self.state.brackets.push(self.new_bracket(s, n0, r0));
                    Some(self.state.brackets.len() - 1)
                };
                if let Some(band) = self.state.bands.last_mut() {
                    band.push(slot);
                }
                if slot.is_some() {
                    self.state.current = slot;
                    break;
                }
            }
        }
        let Some(b) = self.state.current else {
            return Err(Error::NotConfigured { component: NAME });
        };
        let Some(bracket) = self.state.brackets.get_mut(b) else {
            return Err(Error::InvalidState {
                expected: NAME,
                problem: format!("bracket {b} being filled does not exist"),
            });
        };
        bracket.live.push(LiveTrial { trial, time: 0.0, score: None });
        bracket.added += 1;
        self.state.trial_bracket.insert(trial, b);
        self.state.assigned.insert(trial, b);
        Ok(())
    }

    /// Ray's `_process_bracket`: the decision for `reporting` (if it is in the bracket).
    fn process(&mut self, b: usize, reporting: Option<TrialId>) -> Decision {
        let (eta, max_t, stop_last) = (self.eta, self.max_t, self.stop_last_trials);
        let Some(bracket) = self.state.brackets.get_mut(b) else {
            return Decision::Continue;
        };
        let mut action = Decision::Pause;
        if !bracket.round_done(self.state.no_more_trials) {
            return action;
        }
        if bracket.halves == 0 {
            // Final round done: everyone left stops.
            if stop_last {
                for t in std::mem::take(&mut bracket.live) {
                    if Some(t.trial) == reporting {
                        action = Decision::Stop;
                    } else {
                        self.state.stop_requests.push(t.trial);
                    }
                    // At max_t: its whole budget, not an early stop (not counted).
                    self.state.trial_bracket.remove(&t.trial);
                }
            } else {
                action = Decision::Continue;
            }
            return action;
        }
        bracket.halves -= 1;
        bracket.n = (bracket.n as f64 / eta - 1e-9).ceil().max(1.0) as usize;
        // The last round runs to max_t even when r₀·η^s falls short of it.
        bracket.milestone =
            if bracket.halves == 0 { max_t } else { (bracket.milestone * eta).min(max_t) };
        let mut ranked: Vec<LiveTrial> = std::mem::take(&mut bracket.live);
        // Best first, NaN (and no score) last; ties keep the joining order.
        ranked.sort_by(|x, y| best_first(x.score.unwrap_or(f64::NAN), y.score.unwrap_or(f64::NAN)));
        let keep = bracket.n.min(ranked.len());
        let losers = ranked.split_off(keep);
        for t in losers {
            if Some(t.trial) == reporting {
                action = Decision::Stop;
            } else {
                self.state.stop_requests.push(t.trial);
            }
            self.state.trial_bracket.remove(&t.trial);
            self.state.num_stopped += 1;
        }
        let milestone = bracket.milestone;
        for t in &ranked {
            if Some(t.trial) == reporting && t.time < milestone {
                action = Decision::Continue;
            }
        }
        // Restore the joining order among the survivors.
        ranked.sort_by_key(|t| t.trial);
        bracket.live = ranked;
        action
    }
}

impl HbBracket {
    /// Every trial of the bracket (all it takes, or all there will be) is at the milestone.
    fn round_done(&self, no_more_trials: bool) -> bool {
        (self.added >= self.n0 || no_more_trials)
            && self.live.iter().all(|t| t.time >= self.milestone)
    }

    fn continue_trial(&self, time: f64, stop_last: bool) -> bool {
        (!stop_last && self.halves == 0) || time < self.milestone
    }

    fn completion(&self) -> f64 {
        if self.total_work > 0.0 { self.progress / self.total_work } else { 0.0 }
    }
}

impl TrialScheduler for HyperBand {
    fn validate(&self) -> Result<()> {
        self.check()
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        self.target.set(metric, mode)
    }

    fn on_trial_add(&mut self, _: &dyn TrialsView, trial: TrialId) -> Result<()> {
        self.target.check()?;
        self.add(trial)
    }

    /// Brackets waiting to be filled close their rounds with the trials they have.
    fn on_no_more_trials(&mut self) {
        self.state.no_more_trials = true;
        for b in 0..self.state.brackets.len() {
            if !self.state.brackets[b].live.is_empty() {
                self.process(b, None);
            }
        }
    }

    fn on_trial_result(
        &mut self,
        _: &dyn TrialsView,
        trial: TrialId,
        result: &Metrics,
    ) -> Result<Decision> {
        let (time, score) = self.target.read(result)?;
        let Some(&b) = self.state.trial_bracket.get(&trial) else {
            return Err(Error::UnknownTrial { component: NAME, trial });
        };
        let stop_last = self.stop_last_trials;
        let Some(bracket) = self.state.brackets.get_mut(b) else {
            return Err(Error::UnknownTrial { component: NAME, trial });
        };
        let Some(entry) = bracket.live.iter_mut().find(|t| t.trial == trial) else {
            return Err(Error::UnknownTrial { component: NAME, trial });
        };
        bracket.progress += (time - entry.time).max(0.0);
        entry.time = time;
        entry.score = Some(score);
        if bracket.continue_trial(time, stop_last) {
            return Ok(Decision::Continue);
        }
        if bracket.halves == 0 && stop_last {
            // Reached max_t in the final round: done, no need to wait for the others.
            bracket.live.retain(|t| t.trial != trial);
            self.state.trial_bracket.remove(&trial);
            return Ok(Decision::Stop);
        }
        Ok(self.process(b, Some(trial)))
    }

    fn on_trial_complete(
        &mut self,
        _: &dyn TrialsView,
        trial: TrialId,
        _: Option<&Metrics>,
        _: bool,
    ) -> Result<()> {
        let Some(b) = self.state.trial_bracket.remove(&trial) else {
            return Ok(());
        };
        if let Some(bracket) = self.state.brackets.get_mut(b) {
            bracket.live.retain(|t| t.trial != trial);
            if !bracket.live.is_empty() {
                self.process(b, None);
            }
        }
        Ok(())
    }

    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId> {
        let stop_last = self.stop_last_trials;
        for band in &self.state.bands {
            let mut order: Vec<&HbBracket> =
                band.iter().flatten().filter_map(|b| self.state.brackets.get(*b)).collect();
            order.sort_by(|x, y| x.completion().total_cmp(&y.completion()));
            for bracket in order {
                for t in &bracket.live {
                    let runnable = match trials.get(t.trial).map(|i| i.status) {
                        Some(TrialStatus::Pending) => true,
                        Some(TrialStatus::Paused) => bracket.continue_trial(t.time, stop_last),
                        _ => false,
                    };
                    if runnable {
                        return Some(t.trial);
                    }
                }
            }
        }
        None
    }

    fn take_stop_requests(&mut self) -> Vec<TrialId> {
        std::mem::take(&mut self.state.stop_requests)
    }

    fn budget_reached(&self, result: &Metrics) -> bool {
        get_metric(result, &self.target.time_attr).is_ok_and(|t| t >= self.max_t)
    }

    fn bracket(&self, trial: TrialId) -> Option<usize> {
        self.state.assigned.get(&trial).copied()
    }

    fn save_state(&self) -> SchedulerState {
        SchedulerState::HyperBand(self.state.clone())
    }

    fn restore_state(&mut self, state: SchedulerState) -> Result<()> {
        match state {
            SchedulerState::HyperBand(s) => {
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

    #[test]
    fn rays_bracket_shapes() {
        let hb = HyperBand::new();
        assert_eq!(hb.brackets_per_band(), 5);
        assert_eq!(
            hb.bracket_shapes().unwrap(),
            vec![(5, 81.0), (8, 27.0), (15, 9.0), (34, 3.0), (81, 1.0)]
        );
    }

    #[test]
    fn pauses_until_the_round_is_done_then_promotes_the_best() {
        // max_t 9, eta 3: brackets (s=0: 3 trials to 9), (s=1: ceil(3/2*3)=5 trials, r0=3),
        // (s=2: 9 trials, r0=1).
        let mut hb = HyperBand::new().max_t(9).metric("acc").mode(Mode::Max);
        let mut view = TrialTable::new();
        for i in 0..8 {
            view.add(TrialId(i), Params::new());
            hb.on_trial_add(&view, TrialId(i)).unwrap();
        }
        assert_eq!(hb.bracket_fill(), vec![(0, 3, 3), (1, 5, 5)]);
        let r = |t: f64, acc: f64| {
            Metrics::from([("training_iteration".to_string(), t), ("acc".to_string(), acc)])
        };
        // Bracket s=1: trials 3..8, milestone 3; keep ceil(5/3) = 2.
        for (i, acc) in (3..8).zip([0.1, 0.9, 0.3, 0.8, 0.2]) {
            view.set_status(TrialId(i), TrialStatus::Running);
            assert_eq!(
                hb.on_trial_result(&view, TrialId(i), &r(1.0, acc)).unwrap(),
                Decision::Continue
            );
        }
        for (i, acc) in (3..7).zip([0.1, 0.9, 0.3, 0.8]) {
            assert_eq!(
                hb.on_trial_result(&view, TrialId(i), &r(3.0, acc)).unwrap(),
                Decision::Pause
            );
            view.set_status(TrialId(i), TrialStatus::Paused);
        }
        // The last one completes the round and loses.
        assert_eq!(hb.on_trial_result(&view, TrialId(7), &r(3.0, 0.2)).unwrap(), Decision::Stop);
        let mut stopped = hb.take_stop_requests();
        stopped.sort();
        assert_eq!(stopped, vec![TrialId(3), TrialId(5)]);
        for i in [3, 5, 7] {
            view.set_status(TrialId(i), TrialStatus::Terminated);
        }
        for i in 0..3 {
            view.set_status(TrialId(i), TrialStatus::Running);
        }
        assert_eq!(hb.choose_trial_to_run(&view), Some(TrialId(4)));
        view.set_status(TrialId(4), TrialStatus::Running);
        assert_eq!(hb.choose_trial_to_run(&view), Some(TrialId(6)));
        // Final round: reaching 9 stops.
        assert_eq!(hb.on_trial_result(&view, TrialId(4), &r(9.0, 0.95)).unwrap(), Decision::Stop);
    }

    /// Runs bracket s = 1 of `max_t = 9` (trials 3 to 7, keeping 2 of 5) to its first
    /// milestone with these last values; returns the trials it keeps.
    fn first_round(mode: Mode, values: [f64; 5]) -> Vec<TrialId> {
        let mut hb = HyperBand::new().max_t(9).metric("acc").mode(mode);
        let mut view = TrialTable::new();
        for i in 0..8 {
            view.add(TrialId(i), Params::new());
            hb.on_trial_add(&view, TrialId(i)).unwrap();
        }
        let r = |t: f64, acc: f64| {
            Metrics::from([("training_iteration".to_string(), t), ("acc".to_string(), acc)])
        };
        let mut stopped = Vec::new();
        for (i, value) in (3..8).zip(values) {
            view.set_status(TrialId(i), TrialStatus::Running);
            if hb.on_trial_result(&view, TrialId(i), &r(3.0, value)).unwrap() == Decision::Stop {
                stopped.push(TrialId(i));
            }
        }
        stopped.extend(hb.take_stop_requests());
        (3..8).map(TrialId).filter(|t| !stopped.contains(t)).collect()
    }

    /// `±inf` rank like any number in the mode's direction (they used to rank last).
    #[test]
    fn infinities_rank_in_the_modes_direction() {
        let inf = f64::INFINITY;
        // Losses: −inf is the best, +inf the worst.
        assert_eq!(first_round(Mode::Min, [-inf, 1.0, inf, 0.5, 2.0]), [TrialId(3), TrialId(6)]);
        assert_eq!(first_round(Mode::Max, [0.1, inf, 0.3, -inf, 0.2]), [TrialId(4), TrialId(5)]);
    }

    /// A NaN ranks below every number, `−inf` scores included, so it is among the first
    /// stopped; Ray's `sorted` leaves it wherever the sort puts it.
    #[test]
    fn nan_ranks_below_every_number() {
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        // Max mode: 0.9 and −inf are kept over three NaNs (which used to tie with −inf and win
        // on joining order).
        assert_eq!(first_round(Mode::Max, [nan, 0.9, -inf, nan, nan]), [TrialId(4), TrialId(5)]);
        // Min mode: a loss of +inf (score −inf) still beats a NaN.
        assert_eq!(first_round(Mode::Min, [nan, inf, nan, 1.0, nan]), [TrialId(4), TrialId(6)]);
    }

    /// The bracket of each trial: its index among the brackets created, kept after it ends and
    /// through the saved state.
    #[test]
    fn brackets_are_told_and_saved() {
        let mut hb = HyperBand::new().max_t(9).metric("acc").mode(Mode::Max);
        let view = TrialTable::new();
        for i in 0..10 {
            hb.on_trial_add(&view, TrialId(i)).unwrap();
        }
        let brackets: Vec<Option<usize>> = (0..11).map(|i| hb.bracket(TrialId(i))).collect();
        // Bracket 0 (s = 0) takes 3 trials, bracket 1 (s = 1) 5, bracket 2 (s = 2) the rest.
        let want = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2].map(Some);
        assert_eq!(brackets[..10], want);
        assert_eq!(brackets[10], None, "never added");
        hb.on_trial_complete(&view, TrialId(4), None, true).unwrap();
        assert_eq!(hb.bracket(TrialId(4)), Some(1), "known after the trial ended");
        let json = serde_json::to_string(&hb.save_state()).unwrap();
        let mut back = HyperBand::new().max_t(9).metric("acc").mode(Mode::Max);
        back.restore_state(serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!((0..10).map(|i| back.bracket(TrialId(i))).collect::<Vec<_>>(), want);
    }

    /// With `aggressive_first`, a band fills its brackets from the most trials at the smallest
    /// budget to the fewest at the whole budget (the papers' order).
    #[test]
    fn aggressive_first_fills_the_papers_order() {
        let hb = || HyperBand::new().metric("acc").mode(Mode::Max).max_t(81.0);
        let ray = hb().bracket_shapes().unwrap();
        assert_eq!(ray, [(5, 81.0), (8, 27.0), (15, 9.0), (34, 3.0), (81, 1.0)]);
        let mut paper = hb().aggressive_first(true);
        let shapes = paper.bracket_shapes().unwrap();
        assert_eq!(shapes, ray.iter().rev().copied().collect::<Vec<_>>());
        let table = TrialTable::new();
        for i in 0..(81 + 34) {
            paper.on_trial_add(&table, TrialId(i)).unwrap();
        }
        let fill: Vec<(usize, usize, usize)> = paper.bracket_fill();
        assert_eq!(fill, [(4, 81, 81), (3, 34, 34)]);
    }
}
