//! Population based training (Ray's `PopulationBasedTraining`, asynchronous mode).
//!
//! Every `perturbation_interval` (in `time_attr` units, after `burn_in_period`), a reporting
//! trial is ranked among the unfinished trials by its last score. If it is in the bottom
//! `quantile_fraction`, it exploits a trial drawn from the top quantile: the decision
//! [`Decision::Exploit`] names that source (whose latest checkpoint the controller clones) and
//! the new params, explored from the source's:
//!
//! * a `Domain` in `hyperparam_mutations`: with probability `resample_probability` a fresh
//!   draw, otherwise the source's value times one of `perturbation_factors` (1.2 or 0.8;
//!   integers are truncated, as Python's `int()` does);
//! * a list (a constant list, a `choice` or a `grid_search`): with probability
//!   `resample_probability`, or if the current value is not in the list, a random element;
//!   otherwise the neighbour one step left or right (clamped at the ends);
//! * a nested space: the same, recursively; a dependent value: re-evaluated or perturbed.
//!
//! Otherwise the trial continues, or pauses if other trials are waiting (so the population
//! advances together). `choose_trial_to_run` picks the waiting trial that has trained least.
//!
//! Results that are not finite numbers (see the [module docs](super)): the quantiles rank
//! `±inf` like any number (`+inf` is the top in `max` mode). A trial whose last score is NaN
//! is left out of the ranking (it neither takes a bottom place from a poor trial nor can be a
//! source) and, when it reaches a perturbation, exploits a top trial whenever there is a top
//! quantile: a deliberate difference, since Ray sorts with Python's `sorted`, where NaN lands
//! wherever the sort leaves it.

use std::collections::BTreeMap;

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::{
    Decision, ExploitStatus, SchedulerState, SchedulerStatus, Target, TrialScheduler, wrong_state,
};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode, opt_score_serde, same_opt_score};
use crate::params::Params;
use crate::rng::SearchRng;
use crate::space::{Domain, Param, SearchSpace};
use crate::trial::{TrialId, TrialStatus, TrialsView};
use crate::value::Value;

const NAME: &str = "PBT";

/// Population based training. Defaults as Ray: `time_attr = "time_total_s"`,
/// `perturbation_interval = 60`, `burn_in_period = 0`, `quantile_fraction = 0.25`,
/// `resample_probability = 0.25`, `perturbation_factors = (1.2, 0.8)`.
#[derive(Clone, Debug)]
pub struct Pbt {
    target: Target,
    perturbation_interval: f64,
    burn_in_period: f64,
    mutations: SearchSpace,
    quantile_fraction: f64,
    resample_probability: f64,
    perturbation_factors: (f64, f64),
    state: PbtState,
}

/// The evolving part of a [`Pbt`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PbtState {
    rng: SearchRng,
    #[serde(with = "crate::serde_util::map_as_pairs")]
    trials: BTreeMap<TrialId, PbtTrial>,
    num_perturbations: u64,
    /// The latest exploits, newest first (at most [`RECENT_EXPLOITS`]).
    #[serde(default)]
    recent: Vec<ExploitStatus>,
}

/// Exploits kept for [`TrialScheduler::status`].
const RECENT_EXPLOITS: usize = 8;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct PbtTrial {
    /// `sign × value` at the last perturbation time, NaN kept.
    #[serde(with = "opt_score_serde")]
    last_score: Option<f64>,
    last_perturbation_time: f64,
    last_train_time: f64,
    finished: bool,
}

impl PartialEq for PbtTrial {
    fn eq(&self, other: &Self) -> bool {
        same_opt_score(self.last_score, other.last_score)
            && self.last_perturbation_time == other.last_perturbation_time
            && self.last_train_time == other.last_train_time
            && self.finished == other.finished
    }
}

impl Default for Pbt {
    fn default() -> Self {
        Self::new()
    }
}

impl Pbt {
    /// PBT with Ray's defaults and no mutations yet (set them with
    /// [`hyperparam_mutations`](Self::hyperparam_mutations)).
    pub fn new() -> Self {
        Self {
            target: Target::new(NAME, "time_total_s"),
            perturbation_interval: 60.0,
            burn_in_period: 0.0,
            mutations: SearchSpace::new(),
            quantile_fraction: 0.25,
            resample_probability: 0.25,
            perturbation_factors: (1.2, 0.8),
            state: PbtState {
                rng: SearchRng::seed_from_u64(0),
                trials: BTreeMap::new(),
                num_perturbations: 0,
                recent: Vec::new(),
            },
        }
    }

    target_builders!();

    /// Time between perturbations of one trial.
    pub fn perturbation_interval(mut self, t: impl Into<f64>) -> Self {
        self.perturbation_interval = t.into();
        self
    }

    /// No perturbation before this time.
    pub fn burn_in_period(mut self, t: impl Into<f64>) -> Self {
        self.burn_in_period = t.into();
        self
    }

    /// What may change and how (see the module docs). Keys follow the trials' params.
    pub fn hyperparam_mutations(mut self, space: SearchSpace) -> Self {
        self.mutations = space;
        self
    }

    /// Fraction of trials in the top and bottom quantiles (0 to 0.5).
    pub fn quantile_fraction(mut self, f: f64) -> Self {
        self.quantile_fraction = f;
        self
    }

    /// Probability of resampling instead of perturbing.
    pub fn resample_probability(mut self, p: f64) -> Self {
        self.resample_probability = p;
        self
    }

    /// The two factors a perturbed number is multiplied by (one, at random).
    pub fn perturbation_factors(mut self, up: f64, down: f64) -> Self {
        self.perturbation_factors = (up, down);
        self
    }

    /// Seed of the exploration stream.
    pub fn seed(mut self, seed: u64) -> Self {
        self.state.rng = SearchRng::seed_from_u64(seed);
        self
    }

    /// Exploits decided so far.
    pub fn num_perturbations(&self) -> u64 {
        self.state.num_perturbations
    }

    fn check(&self) -> Result<()> {
        if self.mutations.is_empty() {
            return Err(Error::config(
                NAME,
                "hyperparam_mutations",
                "{}",
                "at least one parameter to mutate",
            ));
        }
        self.mutations.validate()?;
        if !(self.perturbation_interval.is_finite() && self.perturbation_interval > 0.0) {
            return Err(Error::config(
                NAME,
                "perturbation_interval",
                self.perturbation_interval,
                "a number > 0",
            ));
        }
        if !(0.0..=0.5).contains(&self.quantile_fraction) {
            return Err(Error::config(
                NAME,
                "quantile_fraction",
                self.quantile_fraction,
                "between 0 and 0.5",
            ));
        }
        if !(0.0..=1.0).contains(&self.resample_probability) {
            return Err(Error::config(
                NAME,
                "resample_probability",
                self.resample_probability,
                "between 0 and 1",
            ));
        }
        let (a, b) = self.perturbation_factors;
        if !(a.is_finite() && b.is_finite()) {
            return Err(Error::config(
                NAME,
                "perturbation_factors",
                format!("({a}, {b})"),
                "finite numbers",
            ));
        }
        Ok(())
    }

    /// Ray's `_quantiles`: (bottom, top) among unfinished trials with a score that is a number.
    fn quantiles(&self, trials: &dyn TrialsView) -> (Vec<TrialId>, Vec<TrialId>) {
        let mut ranked: Vec<(TrialId, f64)> = self
            .state
            .trials
            .iter()
            .filter(|(id, t)| {
                !t.finished && trials.get(**id).is_none_or(|info| !info.status.is_finished())
            })
            .filter_map(|(id, t)| t.last_score.filter(|s| !s.is_nan()).map(|s| (*id, s)))
            .collect();
        ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        if ranked.len() <= 1 {
            return (Vec::new(), Vec::new());
        }
        let n = ranked.len();
        let mut k = (n as f64 * self.quantile_fraction).ceil() as usize;
        if k as f64 > n as f64 / 2.0 {
            k = n / 2;
        }
        let ids: Vec<TrialId> = ranked.into_iter().map(|(id, _)| id).collect();
        (ids[..k].to_vec(), ids[n - k..].to_vec())
    }

    fn explore(&mut self, source: &Params) -> Result<Params> {
        let mut out = source.clone();
        let mutations = self.mutations.clone();
        self.explore_space(&mutations, &mut Vec::new(), source, &mut out)?;
        Ok(out)
    }

    fn explore_space(
        &mut self,
        space: &SearchSpace,
        prefix: &mut Vec<String>,
        source: &Params,
        out: &mut Params,
    ) -> Result<()> {
        for (key, param) in space.iter() {
            prefix.push(key.to_string());
            let path: Vec<&str> = prefix.iter().map(String::as_str).collect();
            let current = source.value_at(&path).cloned();
            let list = match param {
                Param::Grid(values) | Param::Sample(Domain::Choice(values)) => Some(values.clone()),
                Param::Const(Value::List(values)) => Some(values.clone()),
                _ => None,
            };
            let rng = &mut self.state.rng;
            let new = match (param, list) {
                (Param::Nested(inner), _) => {
                    let inner = inner.clone();
                    self.explore_space(&inner, prefix, source, out)?;
                    prefix.pop();
                    continue;
                }
                (_, Some(values)) if !values.is_empty() => {
                    let at = current.as_ref().and_then(|c| values.iter().position(|v| v == c));
                    let resample = rng.random::<f64>() < self.resample_probability;
                    match at {
                        Some(i) if !resample => {
                            let shift: i64 = if rng.random::<bool>() { 1 } else { -1 };
                            let j = (i as i64 + shift).clamp(0, values.len() as i64 - 1) as usize;
                            values[j].clone()
                        }
                        _ => values[rng.random_range(0..values.len())].clone(),
                    }
                }
                (Param::Const(v), _) => v.clone(),
                (Param::Sample(d), _) => {
                    let resample = rng.random::<f64>() < self.resample_probability;
                    match (resample, current.as_ref().and_then(perturb_factor)) {
                        (false, Some(kind)) => {
                            let f = if rng.random::<bool>() {
                                self.perturbation_factors.0
                            } else {
                                self.perturbation_factors.1
                            };
                            kind.scale(f)
                        }
                        _ => d.sample(rng),
                    }
                }
                (Param::Dependent(dep), _) => {
                    let resample = rng.random::<f64>() < self.resample_probability;
                    match (resample, current.as_ref().and_then(perturb_factor)) {
                        (false, Some(kind)) => {
                            let f = if rng.random::<bool>() {
                                self.perturbation_factors.0
                            } else {
                                self.perturbation_factors.1
                            };
                            kind.scale(f)
                        }
                        _ => dep.eval(out, rng).map_err(|e| Error::Dependent {
                            path: path.join("."),
                            source: Box::new(e),
                        })?,
                    }
                }
                (Param::Grid(_), _) => current.clone().unwrap_or(Value::Null),
            };
            out.set_path(&path, new)?;
            prefix.pop();
        }
        Ok(())
    }
}

enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn scale(self, f: f64) -> Value {
        match self {
            // Python's int() truncates toward zero.
            Num::Int(i) => {
                Value::Int(((i as f64) * f).trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64)
            }
            Num::Float(x) => Value::Float(x * f),
        }
    }
}

fn perturb_factor(v: &Value) -> Option<Num> {
    match *v {
        Value::Int(i) => Some(Num::Int(i)),
        Value::Float(x) => Some(Num::Float(x)),
        _ => None,
    }
}

impl TrialScheduler for Pbt {
    fn validate(&self) -> Result<()> {
        self.check()
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        self.target.set(metric, mode)
    }

    fn on_trial_add(&mut self, _: &dyn TrialsView, trial: TrialId) -> Result<()> {
        self.check()?;
        self.target.check()?;
        self.state.trials.entry(trial).or_default();
        Ok(())
    }

    fn on_trial_result(
        &mut self,
        trials: &dyn TrialsView,
        trial: TrialId,
        result: &Metrics,
    ) -> Result<Decision> {
        self.check()?;
        let (time, score) = self.target.read(result)?;
        let interval = self.perturbation_interval;
        let Some(state) = self.state.trials.get_mut(&trial) else {
            return Err(Error::UnknownTrial { component: NAME, trial });
        };
        if time - state.last_perturbation_time < interval || time < self.burn_in_period {
            return Ok(Decision::Continue);
        }
        state.last_score = Some(score);
        state.last_train_time = time;
        state.last_perturbation_time = time;

        let (lower, upper) = self.quantiles(trials);
        if (score.is_nan() || lower.contains(&trial)) && !upper.is_empty() {
            let source = upper[self.state.rng.random_range(0..upper.len())];
            let Some(source_info) = trials.get(source) else {
                return Err(Error::UnknownTrial { component: NAME, trial: source });
            };
            let new_params = self.explore(source_info.params)?;
            // The trial continues from the source's checkpoint, so from the source's clock.
            if let Some(src) = self.state.trials.get(&source).cloned()
                && let Some(t) = self.state.trials.get_mut(&trial)
            {
                t.last_perturbation_time = src.last_perturbation_time;
                t.last_train_time = src.last_train_time;
            }
            self.state.num_perturbations += 1;
            self.state.recent.insert(0, ExploitStatus { time, trial, source });
            self.state.recent.truncate(RECENT_EXPLOITS);
            return Ok(Decision::Exploit { source, new_params });
        }
        let waiting = trials.iter().any(|t| {
            t.id != trial && matches!(t.status, TrialStatus::Pending | TrialStatus::Paused)
        });
        Ok(if waiting { Decision::Pause } else { Decision::Continue })
    }

    fn on_trial_complete(
        &mut self,
        _: &dyn TrialsView,
        trial: TrialId,
        _: Option<&Metrics>,
        _: bool,
    ) -> Result<()> {
        if let Some(t) = self.state.trials.get_mut(&trial) {
            t.finished = true;
        }
        Ok(())
    }

    /// The population takes turns in the slots: at a perturbation, a trial gives its slot up
    /// (pauses) while others wait.
    fn time_shares(&self) -> bool {
        true
    }

    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId> {
        trials
            .iter()
            .filter(|t| matches!(t.status, TrialStatus::Pending | TrialStatus::Paused))
            .map(|t| {
                let trained = self.state.trials.get(&t.id).map_or(0.0, |s| s.last_train_time);
                (trained, t.id)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, id)| id)
    }

    fn save_state(&self) -> SchedulerState {
        SchedulerState::Pbt(self.state.clone())
    }

    fn status(&self) -> SchedulerStatus {
        SchedulerStatus {
            kind: "pbt".to_owned(),
            time_attr: self.target.time_attr.clone(),
            exploits: self.state.recent.clone(),
            perturbations: self.state.num_perturbations,
            ..SchedulerStatus::default()
        }
    }

    fn restore_state(&mut self, state: SchedulerState) -> Result<()> {
        match state {
            SchedulerState::Pbt(s) => {
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
    use crate::space::domain::loguniform;
    use crate::trial::TrialTable;

    fn r(t: f64, acc: f64) -> Metrics {
        Metrics::from([("t".to_string(), t), ("acc".to_string(), acc)])
    }

    #[test]
    fn bottom_trial_exploits_a_top_trial() {
        let mutations = SearchSpace::new()
            .add("lr", loguniform(1e-4, 1e-1).unwrap())
            .add("batch", vec![16, 32, 64]);
        let mut pbt = Pbt::new()
            .time_attr("t")
            .metric("acc")
            .mode(Mode::Max)
            .perturbation_interval(1)
            .hyperparam_mutations(mutations)
            .resample_probability(0.0)
            .seed(4);
        let mut view = TrialTable::new();
        for i in 0..4 {
            let p = Params::new().with("lr", 0.01).with("batch", 32).with("other", "kept");
            view.add(TrialId(i), p);
            view.set_status(TrialId(i), TrialStatus::Running);
            pbt.on_trial_add(&view, TrialId(i)).unwrap();
        }
        // Trial 0 alone has no quantiles; 1 and 2 land in the bottom quantile of 2 and 3 trials.
        for (i, acc) in [(0, 0.9), (1, 0.8), (2, 0.7)] {
            let d = pbt.on_trial_result(&view, TrialId(i), &r(1.0, acc)).unwrap();
            assert_eq!(matches!(d, Decision::Exploit { .. }), i > 0, "{d:?}");
        }
        let d = pbt.on_trial_result(&view, TrialId(3), &r(1.0, 0.1)).unwrap();
        let Decision::Exploit { source, new_params } = d else { panic!("{d:?}") };
        assert_eq!(source, TrialId(0), "the single top-quantile trial");
        let status = pbt.status();
        let latest = ExploitStatus { time: 1.0, trial: TrialId(3), source: TrialId(0) };
        assert_eq!(status.exploits.first(), Some(&latest), "newest first");
        assert_eq!(status.perturbations as usize, status.exploits.len());
        let lr = new_params.get::<f64>("lr").unwrap();
        assert!((lr - 0.012).abs() < 1e-12 || (lr - 0.008).abs() < 1e-12, "{lr}");
        let batch = new_params.get::<i64>("batch").unwrap();
        assert!(batch == 16 || batch == 64, "{batch}");
        assert_eq!(new_params.get::<String>("other").unwrap(), "kept");
        // Within the interval: nothing happens.
        assert_eq!(
            pbt.on_trial_result(&view, TrialId(0), &r(1.5, 0.9)).unwrap(),
            Decision::Continue
        );
    }

    #[test]
    fn needs_mutations() {
        let mut pbt = Pbt::new().metric("acc").mode(Mode::Max);
        assert!(matches!(
            pbt.on_trial_add(&TrialTable::new(), TrialId(0)),
            Err(Error::InvalidConfig { setting: "hyperparam_mutations", .. })
        ));
    }

    /// Four running trials with `lr` to mutate, reporting at `t = 1` (perturbation interval
    /// 1); returns the source each report exploits, if any.
    fn exploits(mode: Mode, values: &[(u64, f64)]) -> Vec<Option<TrialId>> {
        let mut pbt = Pbt::new()
            .time_attr("t")
            .metric("acc")
            .mode(mode)
            .perturbation_interval(1)
            .hyperparam_mutations(SearchSpace::new().add("lr", loguniform(1e-4, 1e-1).unwrap()))
            .seed(1);
        let mut view = TrialTable::new();
        for i in 0..4 {
            view.add(TrialId(i), Params::new().with("lr", 0.01));
            view.set_status(TrialId(i), TrialStatus::Running);
            pbt.on_trial_add(&view, TrialId(i)).unwrap();
        }
        values
            .iter()
            .map(|&(i, v)| match pbt.on_trial_result(&view, TrialId(i), &r(1.0, v)).unwrap() {
                Decision::Exploit { source, .. } => Some(source),
                _ => None,
            })
            .collect()
    }

    /// `+inf` is the top of a `max` ranking (it used to be the bottom).
    #[test]
    fn infinities_rank_in_the_modes_direction() {
        let got = exploits(Mode::Max, &[(0, f64::INFINITY), (1, 0.5), (2, 0.7), (3, 0.1)]);
        assert_eq!(got, [None, Some(TrialId(0)), None, Some(TrialId(0))]);
        // A loss of −inf is the best one.
        let got = exploits(Mode::Min, &[(0, f64::NEG_INFINITY), (1, 0.5)]);
        assert_eq!(got, [None, Some(TrialId(0))]);
    }

    /// A trial reporting NaN exploits a top trial, and is never a source.
    #[test]
    fn nan_trial_exploits_a_top_trial() {
        let got = exploits(Mode::Max, &[(0, 0.9), (1, 0.5), (2, 0.7), (3, f64::NAN)]);
        assert_eq!(got[3], Some(TrialId(0)));
        // With no top quantile (a single number ranked), it continues.
        let got = exploits(Mode::Max, &[(0, 0.9), (3, f64::NAN)]);
        assert_eq!(got, [None, None]);
    }

    /// NaN trials are left out of the quantiles: they do not take the bottom place from the
    /// poorest trial with a number.
    #[test]
    fn nan_trials_stay_out_of_the_quantiles() {
        let nan = f64::NAN;
        let got = exploits(Mode::Max, &[(0, nan), (1, nan), (2, 0.9), (3, 0.1)]);
        // Trial 2 is the only number when it reports: no quantiles. Then 0.1 is the bottom of
        // {0.1, 0.9} and exploits 0.9 (ranked as −inf, a NaN would have been the bottom).
        assert_eq!(got, [None, None, None, Some(TrialId(2))]);
    }
}
