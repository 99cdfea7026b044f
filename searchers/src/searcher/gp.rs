//! Gaussian-process Bayesian optimisation, in the manner of Optuna's `GPSampler`.
//!
//! * The space as the model sees it: each numeric parameter scaled to [0, 1] (log domains in
//!   their log, steps widened by half a step each side, as CMA-ES's); each categorical one a
//!   one-hot block.
//! * The model ([`model`]): a Gaussian process with a Matérn 5/2 kernel, a length scale per
//!   parameter (a categorical one's block shares its own, which makes the kernel Optuna's
//!   Hamming distance), a kernel scale and a noise variance, fitted to the completed trials'
//!   standardised values by maximising the marginal likelihood with Optuna's priors, by
//!   L-BFGS within bounds ([`lbfgs`]) on the logs of the parameters, from all ones at the
//!   first fit and from the last fit after: at every suggestion up to 100 completed trials,
//!   then each time they have grown by a tenth (a fit is cubic in the trials, and each adds
//!   little to it then).
//! * The next trial maximises the log expected improvement over the best value, as Optuna's:
//!   it is evaluated at `n_candidates` random points and the completed trials' best few; local
//!   searches start from the best trial, the best candidate and up to 8 others drawn in
//!   proportion to their expected improvement; each climbs the numeric coordinates by L-BFGS
//!   on the acquisition's gradient (in units of each coordinate's length scale) and sets each
//!   categorical block to its best category, in turn until neither moves. A parameter with a
//!   step is then put on its grid, so the model sees the point that ran. Trials still running
//!   count as observed at the model's mean there (the "kriging believer"), so trials in flight
//!   spread instead of landing on one point.
//! * The first `n_startup_trials` (10) trials are random draws from the domains. Failed trials
//!   teach nothing; a NaN value counts as the worst seen.
//! * Constraints ([`Searcher::set_constraints`]: metrics that must be <= 0), as Optuna's
//!   `GPSampler` takes them: a Gaussian process more per constraint, fitted the same way, and
//!   the acquisition is the log expected improvement over the best *feasible* trial plus the
//!   log probability that each constraint is <= 0 there; while no trial is feasible, the log
//!   probability alone. A constraint a result lacks, or holds as NaN, counts as its worst
//!   value seen.
//!
//! The state (every trial's point and value, the last fit, the random stream) is serde data: a
//! restored sweep suggests as the uninterrupted one would.
//!
//! # Against Optuna's `GPSampler`
//!
//! Given the same trials, the fit lands on Optuna 5.0's kernel parameters and the acquisition
//! search on its acquisition value or near it. On `make bench-hpo`'s eight tasks (30 seeds,
//! 100 trials) its regret is within or below Optuna's interval on seven; on Hartmann-6 only
//! over 60 seeds. A suggestion after 100 completed trials takes 2.4-7.5 ms, after 500 37-47 ms
//! (Optuna's: 100-2,000 ms and 384-658 ms). The figures and the commands are in
//! BENCHMARKS.md ("Search against the field").

use std::collections::BTreeMap;

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::tpe::ModelSpace;
use super::tpe::parzen::{NumericSpec, ParamKind};
use super::{
    Searcher, SearcherState, Suggestion, checked_metric, objective_of, wrong_state, wrong_width,
};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode, Score, check_constraints, violation_of};
use crate::rng::SearchRng;
use crate::space::SearchSpace;
use crate::trial::TrialId;
use crate::value::Value;
use model::Model;

mod lbfgs;
mod linalg;
mod model;

const NAME: &str = "GP";

/// Up to this many completed trials the kernels are fitted again at every suggestion.
const REFIT_ALWAYS: usize = 100;

/// The Gaussian-process searcher. See the module docs.
#[derive(Clone, Debug)]
pub struct Gp {
    /// Its own (`with_space`) or the Tuner's, with its sampled params' domains.
    model: ModelSpace,
    metric: Option<String>,
    mode: Option<Mode>,
    /// Metrics that must be <= 0: see the module docs.
    constraints: Vec<String>,
    n_startup_trials: usize,
    n_candidates: usize,
    state: GpState,
}

/// What [`Gp`] learns: every trial it suggested (its point, its value once completed), the
/// last fit of the kernel's parameters, and its random stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpState {
    rng: SearchRng,
    trials: BTreeMap<TrialId, Seen>,
    /// The logs of the length scales, the kernel scale and the noise variance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fitted: Option<Vec<f64>>,
    /// How many completed trials the last fit saw.
    #[serde(default)]
    fitted_at: usize,
    /// The same for each constraint's process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    fitted_constraints: Vec<Vec<f64>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Seen {
    /// The point in the model's coordinates.
    x: Vec<f64>,
    /// Running: None; completed: the value to minimise (None if it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<f64>,
    done: bool,
    /// Completed: each constraint's value (NaN where the result lacks it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    constraints: Vec<Score>,
}

/// How a parameter of the space sits in the model's coordinates.
#[derive(Clone, Debug)]
enum Coord {
    /// One coordinate in [0, 1].
    Number(NumericSpec),
    /// A one-hot block of this many coordinates.
    Choice(usize),
}

impl Coord {
    /// How many coordinates it takes.
    fn width(&self) -> usize {
        match *self {
            Coord::Number(_) => 1,
            Coord::Choice(k) => k,
        }
    }
}

impl Gp {
    /// A GP searcher with seed 0, over the param space of the Tuner it is handed to
    /// ([`Searcher::set_space`]).
    pub fn new() -> Self {
        Gp {
            model: ModelSpace::none(NAME),
            metric: None,
            mode: None,
            constraints: Vec::new(),
            n_startup_trials: 10,
            n_candidates: 1024,
            state: GpState {
                rng: SearchRng::seed_from_u64(0),
                trials: BTreeMap::new(),
                fitted: None,
                fitted_at: 0,
                fitted_constraints: Vec::new(),
            },
        }
    }

    /// A GP searcher over `space` of its own (a Tuner's is then not used). Fails if the space
    /// is invalid or holds a `grid_search`.
    pub fn with_space(space: SearchSpace) -> Result<Self> {
        let mut gp = Self::new();
        gp.set_space(&space)?;
        Ok(gp)
    }

    searcher_builders!(metric, mode, seed);

    /// Random trials before the model (default 10; at least 1).
    pub fn n_startup_trials(mut self, n: usize) -> Self {
        self.n_startup_trials = n;
        self
    }

    /// Random points the acquisition is evaluated at before the local search (default 1024).
    pub fn n_candidates(mut self, n: usize) -> Self {
        self.n_candidates = n;
        self
    }

    fn check_settings(&self) -> Result<()> {
        if self.n_startup_trials < 1 {
            return Err(Error::config(NAME, "n_startup_trials", 0, "at least 1"));
        }
        if self.n_candidates < 1 {
            return Err(Error::config(NAME, "n_candidates", 0, "at least 1"));
        }
        Ok(())
    }

    /// Each leaf's place in the model's coordinates.
    fn coords(&self) -> Vec<Coord> {
        let coord = |kind| match kind {
            ParamKind::Numeric(spec) => Coord::Number(spec),
            ParamKind::Categorical(k) => Coord::Choice(k),
        };
        self.model.leaves.iter().map(|leaf| coord(leaf.kind())).collect()
    }

    /// A random point of the model's coordinates (a random category in each block).
    fn random_point(coords: &[Coord], rng: &mut SearchRng) -> Vec<f64> {
        let mut x = Vec::new();
        for c in coords {
            match *c {
                Coord::Number(_) => x.push(rng.random::<f64>()),
                Coord::Choice(k) => {
                    let pick = rng.random_range(0..k.max(1));
                    x.extend((0..k).map(|i| if i == pick { 1.0 } else { 0.0 }));
                }
            }
        }
        x
    }

    /// The values of a point.
    fn values_of(&self, coords: &[Coord], x: &[f64]) -> Vec<Value> {
        let mut at = 0;
        let mut values = Vec::with_capacity(coords.len());
        for (leaf, c) in self.model.leaves.iter().zip(coords) {
            match c {
                Coord::Number(spec) => {
                    values.push(leaf.value(spec.at_unit(x[at])));
                    at += 1;
                }
                Coord::Choice(k) => {
                    let block = &x[at..at + k];
                    let best = (0..*k).max_by(|&a, &b| block[a].total_cmp(&block[b]));
                    values.push(leaf.value(best.unwrap_or(0) as f64));
                    at += k;
                }
            }
        }
        values
    }

    /// Which length scale each coordinate has: a numeric parameter's own, a categorical
    /// one's shared by its block.
    fn scale_of(coords: &[Coord]) -> Vec<usize> {
        coords.iter().enumerate().flat_map(|(j, c)| std::iter::repeat_n(j, c.width())).collect()
    }

    /// The next point: a random one during start-up, else the acquisition's best.
    fn next_point(&mut self, coords: &[Coord]) -> Vec<f64> {
        let done: Vec<(&Vec<f64>, f64, &[Score])> = self
            .state
            .trials
            .values()
            .filter(|t| t.done)
            .filter_map(|t| t.value.map(|v| (&t.x, v, t.constraints.as_slice())))
            .collect();
        if done.len() < self.n_startup_trials {
            return Self::random_point(coords, &mut self.state.rng);
        }
        let scale_of = Self::scale_of(coords);
        let xs: Vec<Vec<f64>> = done.iter().map(|d| d.0.clone()).collect();
        let ys = worst_for_missing(done.iter().map(|d| d.1));
        // How far each trial is from feasible, and a process per constraint.
        let violations: Vec<f64> =
            done.iter().map(|d| violation_of(d.2.iter().map(|c| c.0))).collect();
        // The kernels' parameters are fitted again at every trial up to 100, then each time
        // the trials have grown by a tenth (a fit is cubic in them; each adds little then).
        let n = done.len();
        let refit = n < REFIT_ALWAYS || n * 10 >= self.state.fitted_at * 11;
        if refit {
            self.state.fitted_at = n;
        }
        let mut feasibility = Vec::with_capacity(self.constraints.len());
        for k in 0..self.constraints.len() {
            let cs = worst_for_missing(done.iter().map(|d| d.2.get(k).map_or(f64::NAN, |c| c.0)));
            let warm = self.state.fitted_constraints.get(k).map(Vec::as_slice);
            feasibility.push(Model::fit(xs.clone(), &cs, &scale_of, warm, refit));
        }
        self.state.fitted_constraints = feasibility.iter().map(|m| m.theta.clone()).collect();
        let pending: Vec<Vec<f64>> =
            self.state.trials.values().filter(|t| !t.done).map(|t| t.x.clone()).collect();
        let model = Model::fit(xs, &ys, &scale_of, self.state.fitted.as_deref(), refit);
        self.state.fitted = Some(model.theta.clone());
        // The improvement is over the best feasible trial; with none, only feasibility counts.
        let best = (0..done.len())
            .filter(|&i| violations[i] == 0.0)
            .map(|i| model.y[i])
            .min_by(f64::total_cmp);
        let acquisition = Acquisition { model: model.believing(&pending), best, feasibility };
        // Random candidates, and the best trials so far (the feasible first).
        let mut candidates: Vec<Vec<f64>> = (0..self.n_candidates)
            .map(|_| Self::random_point(coords, &mut self.state.rng))
            .collect();
        let mut ranked: Vec<usize> = (0..done.len()).collect();
        ranked.sort_by(|&a, &b| {
            violations[a].total_cmp(&violations[b]).then(done[a].1.total_cmp(&done[b].1))
        });
        candidates.extend(ranked.iter().take(5).map(|&i| done[i].0.clone()));
        let values = acquisition.values(&candidates);
        // The local searches start from the best trial, the best candidate, and others drawn
        // with a chance in proportion to their expected improvement (Optuna's roulette).
        let mut starts = vec![self.n_candidates];
        starts.extend(roulette(&values, LOCAL_SEARCHES - 1, &mut self.state.rng));
        starts.dedup();
        let mut best_point = (f64::NEG_INFINITY, Vec::new());
        for i in starts {
            let (value, x) = acquisition.local_search(coords, candidates[i].clone(), values[i]);
            if value > best_point.0 || best_point.1.is_empty() {
                best_point = (value, x);
            }
        }
        Self::on_grid(coords, best_point.1)
    }

    /// `x` with each numeric coordinate of a parameter with a step moved to the grid point
    /// its value rounds to: the point the trial runs at.
    fn on_grid(coords: &[Coord], mut x: Vec<f64>) -> Vec<f64> {
        let mut at = 0;
        for c in coords {
            match c {
                Coord::Number(spec) => {
                    if spec.step.is_some() {
                        x[at] = spec.unit_of(spec.align(spec.at_unit(x[at])));
                    }
                    at += 1;
                }
                Coord::Choice(k) => at += k,
            }
        }
        x
    }
}

/// Local searches from the acquisition's random candidates, at most (Optuna's 10).
const LOCAL_SEARCHES: usize = 10;
/// A local search's rounds (a climb, then each categorical block), at most.
const LOCAL_ROUNDS: usize = 10;

/// `n` of the indices of `values` (log weights): the largest, then others drawn without
/// replacement with a chance in proportion to their weight; fewer where the rest weigh 0.
fn roulette(values: &[f64], n: usize, rng: &mut SearchRng) -> Vec<usize> {
    let Some(top) = (0..values.len()).max_by(|&a, &b| values[a].total_cmp(&values[b])) else {
        return Vec::new();
    };
    let mut weights: Vec<f64> = values.iter().map(|v| (v - values[top]).exp()).collect();
    weights[top] = 0.0;
    weights.iter_mut().for_each(|w| *w = if w.is_finite() { *w } else { 0.0 });
    let mut chosen = vec![top];
    while chosen.len() < n {
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            break;
        }
        let mut u = rng.random::<f64>() * total;
        let pick = weights.iter().position(|&w| {
            u -= w;
            u < 0.0 && w > 0.0
        });
        let Some(pick) = pick.or_else(|| weights.iter().rposition(|&w| w > 0.0)) else { break };
        weights[pick] = 0.0;
        chosen.push(pick);
    }
    chosen
}

/// What the next trial maximises: the log expected improvement over the best feasible trial
/// (standardised; with none, nothing) plus, for each constraint, the log probability that it
/// is met.
struct Acquisition {
    model: Model,
    best: Option<f64>,
    feasibility: Vec<Model>,
}

impl Acquisition {
    /// At each of `xs`.
    fn values(&self, xs: &[Vec<f64>]) -> Vec<f64> {
        let mut total = self.best.map_or(vec![0.0; xs.len()], |best| self.model.log_ei(xs, best));
        for m in &self.feasibility {
            total.iter_mut().zip(m.log_prob_below(xs, 0.0)).for_each(|(t, p)| *t += p);
        }
        total
    }

    /// At `x`, with its gradient.
    fn value_grad(&self, x: &[f64]) -> (f64, Vec<f64>) {
        let (mut value, mut grad) = match self.best {
            Some(best) => self.model.log_ei_grad(x, best),
            None => (0.0, vec![0.0; x.len()]),
        };
        for m in &self.feasibility {
            let (v, g) = m.log_prob_below_grad(x, 0.0);
            value += v;
            grad.iter_mut().zip(g).for_each(|(a, b)| *a += b);
        }
        (value, grad)
    }

    /// From `x` (where the acquisition is `value`): the numeric coordinates climbed by
    /// L-BFGS, each in units of its length scale (so that every direction curves alike, as
    /// Optuna's preconditioning), then each categorical block set to its best category; again
    /// until a round moves nothing. The best point found and its value.
    fn local_search(&self, coords: &[Coord], mut x: Vec<f64>, mut value: f64) -> (f64, Vec<f64>) {
        let (mut numeric, mut blocks, mut at) = (Vec::new(), Vec::new(), 0);
        for c in coords {
            match *c {
                Coord::Number(_) => numeric.push(at),
                Coord::Choice(k) => blocks.push((at, k)),
            }
            at += c.width();
        }
        let lengths = self.model.lengths();
        let scale: Vec<f64> = numeric.iter().map(|&q| lengths[q]).collect();
        let (lo, hi) =
            (vec![0.0; numeric.len()], scale.iter().map(|l| 1.0 / l).collect::<Vec<_>>());
        for _ in 0..LOCAL_ROUNDS {
            let mut moved = false;
            if !numeric.is_empty() {
                let place = |z: &[f64], x: &[f64]| {
                    let mut y = x.to_vec();
                    for ((&q, z), s) in numeric.iter().zip(z).zip(&scale) {
                        y[q] = (z * s).clamp(0.0, 1.0);
                    }
                    y
                };
                let f = |z: &[f64]| {
                    let (v, g) = self.value_grad(&place(z, &x));
                    let g = numeric.iter().zip(&scale).map(|(&q, s)| g[q] * s).collect();
                    v.is_finite().then_some((v, g))
                };
                let z0: Vec<f64> = numeric.iter().zip(&scale).map(|(&q, s)| x[q] / s).collect();
                let climb = lbfgs::maximise(f, &z0, (&lo, &hi), CLIMB_STEPS, CLIMB_GTOL);
                if let Some(climb) = climb.filter(|c| c.value > value && c.steps > 0) {
                    (value, x) = (climb.value, place(&climb.x, &x));
                    moved = true;
                }
            }
            for &(start, k) in &blocks {
                let options: Vec<Vec<f64>> = (0..k)
                    .map(|pick| {
                        let mut y = x.clone();
                        y[start..start + k].iter_mut().enumerate().for_each(|(i, v)| {
                            *v = if i == pick { 1.0 } else { 0.0 };
                        });
                        y
                    })
                    .collect();
                let scores = self.values(&options);
                let top = (0..k).max_by(|&a, &b| scores[a].total_cmp(&scores[b]));
                if let Some(top) = top.filter(|&t| scores[t] > value) {
                    (value, x) = (scores[top], options[top].clone());
                    moved = true;
                }
            }
            if !moved || blocks.is_empty() {
                break;
            }
        }
        (value, x)
    }
}

/// The acquisition's climb: at most this many steps, until its gradient (in length-scale
/// units) is below this (Optuna's `pgtol`).
const CLIMB_STEPS: usize = 200;
const CLIMB_GTOL: f64 = 1e-2;

impl Default for Gp {
    fn default() -> Self {
        Self::new()
    }
}

/// Values to model, with NaN and infinite ones as the worst finite one seen (0 if none is).
fn worst_for_missing(values: impl Iterator<Item = f64> + Clone) -> Vec<f64> {
    let worst = values.clone().filter(|v| v.is_finite()).fold(f64::MIN, f64::max);
    let worst = if worst == f64::MIN { 0.0 } else { worst };
    values.map(|v| if v.is_finite() { v } else { worst }).collect()
}

impl Searcher for Gp {
    fn set_space(&mut self, space: &SearchSpace) -> Result<()> {
        self.model.offer(space).map(drop)
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        (self.metric, self.mode) = checked_metric(NAME, metric, mode)?;
        Ok(())
    }

    fn set_constraints(&mut self, constraints: &[String]) -> Result<()> {
        check_constraints(NAME, constraints)?;
        self.constraints = constraints.to_vec();
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        self.model.check()?;
        self.check_settings()
    }

    fn metric(&self) -> Option<&str> {
        self.metric.as_deref()
    }

    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion> {
        self.model.check()?;
        objective_of(NAME, &self.metric, self.mode)?;
        self.check_settings()?;
        let coords = self.coords();
        let x = self.next_point(&coords);
        let values = self.values_of(&coords, &x);
        let params = self.model.params(&values, &mut self.state.rng)?;
        let seen = Seen { x, value: None, done: false, constraints: Vec::new() };
        self.state.trials.insert(trial, seen);
        Ok(Suggestion::Params(params))
    }

    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        let objective = objective_of(NAME, &self.metric, self.mode)?;
        let value = match result.filter(|_| !error) {
            // Minimised: the score is higher-is-better, a NaN the worst.
            Some(result) => Some(-objective.score(result)?),
            None => None,
        };
        let constrained = |r: &Metrics| {
            let value = |c: &String| Score(r.get(c).copied().unwrap_or(f64::NAN));
            self.constraints.iter().map(value).collect()
        };
        let constraints = result.filter(|_| value.is_some()).map_or(Vec::new(), constrained);
        let seen = self
            .state
            .trials
            .get_mut(&trial)
            .ok_or(Error::UnknownTrial { component: NAME, trial })?;
        seen.value = value;
        seen.done = true;
        seen.constraints = constraints;
        Ok(())
    }

    fn save_state(&self) -> SearcherState {
        SearcherState::Gp(self.state.clone())
    }

    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        match state {
            SearcherState::Gp(s) => {
                let width: usize = self.coords().iter().map(Coord::width).sum();
                if !s.trials.values().all(|t| t.x.len() == width) {
                    return Err(wrong_width(NAME, self.model.leaves.len()));
                }
                self.state = s;
                Ok(())
            }
            other => Err(wrong_state(NAME, &other)),
        }
    }
}

#[cfg(test)]
mod tests;
