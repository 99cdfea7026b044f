//! Gaussian-process Bayesian optimisation, in the manner of Optuna's `GPSampler`.
//!
//! * The space as the model sees it: each numeric parameter scaled to [0, 1] (log domains in
//!   their log, steps widened by half a step each side, as CMA-ES's); each categorical one a
//!   one-hot block.
//! * The model: a Gaussian process with a Matérn 5/2 kernel, a length scale per coordinate, a
//!   kernel scale and a noise variance, fitted to the completed trials' standardised values by
//!   maximising the marginal likelihood (with weak log-normal priors, by Adam on the logs of
//!   the parameters, warm-started from the last fit): at every suggestion up to 100 completed
//!   trials, then each time they have grown by a tenth (a fit is cubic in the trials, and
//!   each adds little to it then).
//! * The next trial maximises the log expected improvement over the best value: `n_candidates`
//!   random points and the completed trials' best few, then the best of them refined by a
//!   shrinking local search. Trials still running count as observed at the model's mean there
//!   (the "kriging believer"), so trials in flight spread instead of landing on one point.
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
//! On Branin, Hartmann-6 and Rosenbrock-5, 20 seeds, its median best value after 25, 50 and 100
//! trials is inside the quartiles of Optuna 5.0's `GPSampler`, or better, at 8 of 9 points and
//! above them at one. A suggestion after 100 completed trials takes 2.5-2.7 ms, after 500
//! 37-39 ms (Optuna's: 67-107 ms and 384-658 ms). The figures and the commands (`make
//! bench-gp`, `bench/gp_peers.py --time-at 500`) are in BENCHMARKS.md.

use std::collections::BTreeMap;

use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::tpe::ModelSpace;
use super::tpe::parzen::{NumericSpec, ParamKind};
use super::{
    Searcher, SearcherState, Suggestion, checked_metric, objective_of, wrong_state, wrong_width,
};
use crate::error::{Error, Result};
use crate::math::{log_gauss_mass, norm_cdf};
use crate::metrics::{Metrics, Mode, Score, check_constraints, violation_of};
use crate::rng::SearchRng;
use crate::space::SearchSpace;
use crate::trial::TrialId;
use crate::value::Value;
use linalg::{backward, cholesky, forward, inverse_from};

mod linalg;

const NAME: &str = "GP";

/// Bounds of the fitted parameters' logs: length scales, kernel scale, noise variance.
const LOG_LENGTH: (f64, f64) = (-4.6, 4.6);
const LOG_SCALE: (f64, f64) = (-6.9, 6.9);
const LOG_NOISE: (f64, f64) = (-13.8, 0.0);
/// Added to the kernel's diagonal, for a Cholesky factor that never fails.
const JITTER: f64 = 1e-9;
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
            feasibility.push(Model::fit(xs.clone(), &cs, warm, refit));
        }
        self.state.fitted_constraints = feasibility.iter().map(|m| m.theta.clone()).collect();
        let pending: Vec<Vec<f64>> =
            self.state.trials.values().filter(|t| !t.done).map(|t| t.x.clone()).collect();
        let model = Model::fit(xs, &ys, self.state.fitted.as_deref(), refit);
        self.state.fitted = Some(model.theta.clone());
        // The improvement is over the best feasible trial; with none, only feasibility counts.
        let best = (0..done.len())
            .filter(|&i| violations[i] == 0.0)
            .map(|i| model.y[i])
            .min_by(f64::total_cmp);
        let model = model.believing(&pending);
        let acquisition = |xs: &[Vec<f64>]| {
            let mut total = best.map_or(vec![0.0; xs.len()], |best| model.log_ei(xs, best));
            for m in &feasibility {
                total.iter_mut().zip(m.log_prob_below(xs, 0.0)).for_each(|(t, p)| *t += p);
            }
            total
        };
        // Random candidates, and the best trials so far (the feasible first).
        let mut candidates: Vec<Vec<f64>> = (0..self.n_candidates)
            .map(|_| Self::random_point(coords, &mut self.state.rng))
            .collect();
        let mut ranked: Vec<usize> = (0..done.len()).collect();
        ranked.sort_by(|&a, &b| {
            violations[a].total_cmp(&violations[b]).then(done[a].1.total_cmp(&done[b].1))
        });
        candidates.extend(ranked.iter().take(5).map(|&i| done[i].0.clone()));
        let mut scored: Vec<(f64, Vec<f64>)> =
            acquisition(&candidates).into_iter().zip(candidates).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.truncate(5);
        // A shrinking local search from the best few.
        let mut best_point = scored[0].clone();
        for (mut score, mut x) in scored {
            let mut step = 0.1;
            for _ in 0..40 {
                let y = self.perturb(coords, &x, step);
                let s = acquisition(std::slice::from_ref(&y))[0];
                if s > score {
                    (score, x) = (s, y);
                } else {
                    step *= 0.8;
                }
            }
            if score > best_point.0 {
                best_point = (score, x);
            }
        }
        best_point.1
    }

    /// `x` moved by a Gaussian step of `step` in each numeric coordinate, and, with a small
    /// chance, another category in each block.
    fn perturb(&mut self, coords: &[Coord], x: &[f64], step: f64) -> Vec<f64> {
        let rng = &mut self.state.rng;
        let mut y = x.to_vec();
        let mut at = 0;
        for c in coords {
            match *c {
                Coord::Number(_) => {
                    let z: f64 = StandardNormal.sample(rng);
                    y[at] = (y[at] + step * z).clamp(0.0, 1.0);
                    at += 1;
                }
                Coord::Choice(k) => {
                    if rng.random::<f64>() < 0.1 {
                        let pick = rng.random_range(0..k.max(1));
                        for i in 0..k {
                            y[at + i] = if i == pick { 1.0 } else { 0.0 };
                        }
                    }
                    at += k;
                }
            }
        }
        y
    }
}

impl Default for Gp {
    fn default() -> Self {
        Self::new()
    }
}

/// A fitted Gaussian process over standardised values.
struct Model {
    xs: Vec<Vec<f64>>,
    /// The standardised values at `xs`.
    y: Vec<f64>,
    /// The logs of the length scales, the kernel scale and the noise variance.
    theta: Vec<f64>,
    /// The Cholesky factor of the kernel matrix (lower, row-major) and `K⁻¹ y`.
    chol: Vec<f64>,
    alpha: Vec<f64>,
    /// The mean and standard deviation the values were standardised by.
    shift: f64,
    spread: f64,
}

impl Model {
    /// Fits the kernel's parameters to `xs` and their values `ys` (to minimise), from `warm`
    /// where given; with `refit` false, takes `warm`'s as they are.
    fn fit(xs: Vec<Vec<f64>>, ys: &[f64], warm: Option<&[f64]>, refit: bool) -> Model {
        let d = xs[0].len();
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        let sd = (ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / ys.len() as f64).sqrt();
        let sd = if sd > 0.0 { sd } else { 1.0 };
        let y: Vec<f64> = ys.iter().map(|v| (v - mean) / sd).collect();
        let mut theta = match warm.filter(|w| w.len() == d + 2) {
            Some(w) => w.to_vec(),
            None => {
                let mut t = vec![(0.5f64).ln(); d];
                t.extend([0.0, (1e-3f64).ln()]);
                t
            }
        };
        // Adam on the log posterior (see `log_posterior`).
        let iterations = match (warm.is_some(), refit) {
            (true, false) => 0,
            (true, true) => 25,
            (false, _) => 80,
        };
        let (mut m, mut v) = (vec![0.0; d + 2], vec![0.0; d + 2]);
        let (lr, b1, b2) = (0.05, 0.9, 0.999);
        for t in 1..=iterations {
            let Some((_, grad)) = log_posterior(&xs, &y, &theta) else { break };
            for j in 0..d + 2 {
                m[j] = b1 * m[j] + (1.0 - b1) * grad[j];
                v[j] = b2 * v[j] + (1.0 - b2) * grad[j] * grad[j];
                let step =
                    lr * (m[j] / (1.0 - b1.powi(t))) / ((v[j] / (1.0 - b2.powi(t))).sqrt() + 1e-8);
                theta[j] = clamp_theta(j, d, theta[j] + step);
            }
        }
        let (chol, alpha) = factor(&xs, &y, &theta);
        Model { xs, y, theta, chol, alpha, shift: mean, spread: sd }
    }

    /// The model with `pending` points observed at its mean there (the kernel's parameters
    /// kept).
    fn believing(self, pending: &[Vec<f64>]) -> Model {
        if pending.is_empty() {
            return self;
        }
        let (mut xs, mut y) = (self.xs.clone(), self.y.clone());
        for p in pending {
            y.push(self.mean_sd(p).0);
            xs.push(p.clone());
        }
        let (chol, alpha) = factor(&xs, &y, &self.theta);
        Model { xs, y, chol, alpha, ..self }
    }

    /// The posterior mean and standard deviation at `x`.
    fn mean_sd(&self, x: &[f64]) -> (f64, f64) {
        self.mean_sd_at(std::slice::from_ref(&x.to_vec()))[0]
    }

    /// The posterior mean and standard deviation at each of `xs`, solved all at once.
    fn mean_sd_at(&self, xs: &[Vec<f64>]) -> Vec<(f64, f64)> {
        let (n, m) = (self.xs.len(), xs.len());
        let kernel = Matern::new(&self.theta);
        // The kernel between each observation (a row) and each point (a column).
        let mut k = vec![0.0; n * m];
        for (row, xi) in k.chunks_exact_mut(m).zip(&self.xs) {
            for (cell, x) in row.iter_mut().zip(xs) {
                *cell = kernel.at(xi, x);
            }
        }
        let mut mean = vec![0.0; m];
        for (row, a) in k.chunks_exact(m).zip(&self.alpha) {
            mean.iter_mut().zip(row).for_each(|(s, v)| *s += a * v);
        }
        if m == 1 {
            // One point (the local search's): the solve as dot products, which vectorise.
            k = forward(&self.chol, &k, n);
        } else {
            linalg::forward_many(&self.chol, &mut k, n, m);
        }
        let mut explained = vec![0.0; m];
        for row in k.chunks_exact(m) {
            explained.iter_mut().zip(row).for_each(|(s, v)| *s += v * v);
        }
        let sd = |e: f64| (kernel.scale - e).max(1e-12).sqrt();
        mean.into_iter().zip(explained).map(|(mean, e)| (mean, sd(e))).collect()
    }

    /// The log of the probability that the value is at most `bound` (in the values' own
    /// units), at each of `xs`.
    fn log_prob_below(&self, xs: &[Vec<f64>], bound: f64) -> Vec<f64> {
        let z = |(mean, sd): (f64, f64)| ((bound - self.shift) / self.spread - mean) / sd;
        self.mean_sd_at(xs).into_iter().map(|p| log_gauss_mass(f64::NEG_INFINITY, z(p))).collect()
    }

    /// The log of the expected improvement below `best`, at each of `xs`.
    fn log_ei(&self, xs: &[Vec<f64>], best: f64) -> Vec<f64> {
        let at = |(mean, sd): (f64, f64)| sd.ln() + log_h((best - mean) / sd);
        self.mean_sd_at(xs).into_iter().map(at).collect()
    }
}

/// Values to model, with NaN and infinite ones as the worst finite one seen (0 if none is).
fn worst_for_missing(values: impl Iterator<Item = f64> + Clone) -> Vec<f64> {
    let worst = values.clone().filter(|v| v.is_finite()).fold(f64::MIN, f64::max);
    let worst = if worst == f64::MIN { 0.0 } else { worst };
    values.map(|v| if v.is_finite() { v } else { worst }).collect()
}

/// `log(φ(z) + z Φ(z))`, stable for very negative `z`.
fn log_h(z: f64) -> f64 {
    let log_phi = -0.5 * z * z - 0.5 * (2.0 * std::f64::consts::PI).ln();
    if z > -5.0 {
        (log_phi.exp() + z * norm_cdf(z)).max(1e-300).ln()
    } else {
        let z2 = z * z;
        log_phi - 2.0 * (-z).ln() + (1.0 - 3.0 / z2 + 15.0 / (z2 * z2)).ln()
    }
}

fn clamp_theta(j: usize, d: usize, value: f64) -> f64 {
    let (lo, hi) = match j {
        j if j < d => LOG_LENGTH,
        j if j == d => LOG_SCALE,
        _ => LOG_NOISE,
    };
    value.clamp(lo, hi)
}

/// The Matérn 5/2 kernel under `theta`, its exponentials taken once.
struct Matern {
    inverse_lengths: Vec<f64>,
    scale: f64,
}

impl Matern {
    fn new(theta: &[f64]) -> Matern {
        let d = theta.len() - 2;
        Matern {
            inverse_lengths: theta[..d].iter().map(|t| (-t).exp()).collect(),
            scale: theta[d].exp(),
        }
    }

    /// The squared scaled distance between `a` and `b`.
    fn r2(&self, a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).zip(&self.inverse_lengths).map(|((a, b), w)| ((a - b) * w).powi(2)).sum()
    }

    /// The kernel between `a` and `b` (without the noise).
    fn at(&self, a: &[f64], b: &[f64]) -> f64 {
        let r2 = self.r2(a, b);
        let s5r = (5.0 * r2).sqrt();
        self.scale * (1.0 + s5r + 5.0 / 3.0 * r2) * (-s5r).exp()
    }
}

/// The kernel matrix of `xs` with the noise on its diagonal.
fn kernel_matrix(xs: &[Vec<f64>], theta: &[f64]) -> Vec<f64> {
    let n = xs.len();
    let kernel = Matern::new(theta);
    let noise = theta[theta.len() - 1].exp() + JITTER;
    let mut k = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let v = kernel.at(&xs[i], &xs[j]) + if i == j { noise } else { 0.0 };
            k[i * n + j] = v;
            k[j * n + i] = v;
        }
    }
    k
}

/// The Cholesky factor of the kernel matrix of `xs`, and `K⁻¹ y`.
fn factor(xs: &[Vec<f64>], y: &[f64], theta: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let n = xs.len();
    let chol = cholesky(&kernel_matrix(xs, theta), n);
    let alpha = backward(&chol, &forward(&chol, y, n), n);
    (chol, alpha)
}

/// The log marginal likelihood of `y` at `xs` under `theta`, plus weak log-normal priors on
/// the parameters (length scales about 0.5, the kernel scale about 1, the noise about 1e-3,
/// each within a factor of e² or so), and its gradient in `theta`.
fn log_posterior(xs: &[Vec<f64>], y: &[f64], theta: &[f64]) -> Option<(f64, Vec<f64>)> {
    let n = xs.len();
    let d = theta.len() - 2;
    let k = kernel_matrix(xs, theta);
    let chol = cholesky(&k, n);
    let alpha = backward(&chol, &forward(&chol, y, n), n);
    let log_det: f64 = (0..n).map(|i| chol[i * n + i].ln()).sum::<f64>() * 2.0;
    let fit: f64 = y.iter().zip(&alpha).map(|(a, b)| a * b).sum();
    let mut value = -0.5 * fit - 0.5 * log_det;
    // K⁻¹, for W = α αᵀ − K⁻¹.
    let inv = inverse_from(&chol, n);
    let kernel = Matern::new(theta);
    let w = |i: usize, j: usize| alpha[i] * alpha[j] - inv[i * n + j];
    let mut grad = vec![0.0; d + 2];
    let noise = theta[d + 1].exp();
    for i in 0..n {
        for j in 0..n {
            let wij = w(i, j);
            let kij = k[i * n + j] - if i == j { noise + JITTER } else { 0.0 };
            grad[d] += 0.5 * wij * kij;
            if i == j {
                grad[d + 1] += 0.5 * wij * noise;
                continue;
            }
            let s5r = (5.0 * kernel.r2(&xs[i], &xs[j])).sqrt();
            let common = kernel.scale * 5.0 / 3.0 * (1.0 + s5r) * (-s5r).exp();
            for (q, g) in grad.iter_mut().enumerate().take(d) {
                let u = (xs[i][q] - xs[j][q]) * kernel.inverse_lengths[q];
                *g += 0.5 * wij * common * u * u;
            }
        }
    }
    // Priors: log-normal, their logs' means and standard deviations.
    let prior =
        |t: f64, mean: f64, sd: f64| (-0.5 * ((t - mean) / sd).powi(2), -(t - mean) / (sd * sd));
    for (j, g) in grad.iter_mut().enumerate() {
        let (mean, sd) = match j {
            j if j < d => ((0.5f64).ln(), 1.5),
            j if j == d => (0.0, 2.0),
            _ => ((1e-3f64).ln(), 2.5),
        };
        let (p, dp) = prior(theta[j], mean, sd);
        value += p;
        *g += dp;
    }
    value.is_finite().then_some((value, grad))
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
                let width: usize = self
                    .coords()
                    .iter()
                    .map(|c| match c {
                        Coord::Number(_) => 1,
                        Coord::Choice(k) => *k,
                    })
                    .sum();
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
