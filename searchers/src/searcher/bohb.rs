//! BOHB's searcher (Falkner, Klein and Hutter, "BOHB: Robust and Efficient Hyperparameter
//! Optimization at Scale", ICML 2018), as `hpbandster`'s reference implementation builds it.
//!
//! BOHB is HyperBand whose new configurations come from a model instead of random draws. Paired
//! with the [`HyperBand`](crate::HyperBand) scheduler (Ray's `TuneBOHB` with
//! `HyperBandForBOHB`), every trial of a bracket asks this searcher for its parameters when the
//! bracket opens (the Tuner makes a bracket's trials at once); with
//! [`HyperBand::aggressive_first`](crate::HyperBand::aggressive_first) the brackets come in the
//! paper's order, the cheap ones first, which feeds the model early. [`Asha`](crate::Asha)
//! works the same way (Syne Tune's asynchronous BOHB).
//!
//! * Every result is an observation at its budget: the value of `time_attr`
//!   (`training_iteration` by default) when it was reported. A trial stopped early is observed
//!   at the budgets it reached; a model of a small budget knows many trials, a model of a large
//!   one fewer and better ones.
//! * The model: of the budgets with enough observations, the largest. Its observations are
//!   ranked; the best `top_n_percent` (15%, at least `min_points_in_model`, which defaults to
//!   the number of parameters + 1) fit the density `l(x)` and the next ones (at least as many)
//!   `g(x)`: product kernels over the parameters (Gaussian on each numeric parameter scaled to
//!   [0, 1], log-scaled where its domain is; Aitchison and Aitken's on each choice), with
//!   Scott's normal-reference bandwidths, at least `min_bandwidth`, as statsmodels'
//!   `KDEMultivariate` gives hpbandster. A budget whose good or bad group has no more points
//!   than there are parameters has no model.
//! * A suggestion is a random draw from the domains with probability `random_fraction` (1/3),
//!   or while no budget has a model; else the best of `num_samples` (64) candidates by
//!   `g(x) / l(x)` (lowest): each candidate is a good observation perturbed, its numbers by a
//!   Gaussian truncated to [0, 1] of `bandwidth_factor` (3) times their bandwidth, each of its
//!   choices kept with probability 1 − bandwidth, else drawn at random.
//!
//! # Against its peers
//!
//! Median regret over 20 seeds after 1, 4 and 32 whole evaluations of budget, the BOHB paper's
//! counting ones (8 choices, 8 floats) and noisy Hartmann-6, budgets 9 to 729, eta 3, HyperBand
//! in the papers' bracket order (lower is better):
//!
//! | problem | budget | random + HyperBand | BOHB + HyperBand | hpbandster's BOHB | DEHB |
//! |---|--:|--:|--:|--:|--:|
//! | counting ones | 1 | 4.229 | 3.098 | 3.474 | 4.868 |
//! | counting ones | 4 | 3.896 | 3.042 | 3.381 | 4.660 |
//! | counting ones | 32 | 3.367 | 1.252 | 1.782 | 3.390 |
//! | Hartmann-6 | 1 | 2.296 | 1.333 | 1.516 | 2.058 |
//! | Hartmann-6 | 4 | 1.558 | 1.031 | 1.164 | 1.421 |
//! | Hartmann-6 | 32 | 0.974 | 0.430 | 0.430 | 1.019 |
//!
//! rtune's trials go on from their checkpoints when promoted (a promotion costs the added
//! budget); hpbandster and DEHB count a promoted evaluation's budget whole. Every budget, and
//! the command (`make bench-bohb BENCH_ARGS="--seeds 20 --budget 32"`), are in BENCHMARKS.md.
//!
//! Trials that fail keep the observations they reported; a result that is NaN ranks last.
//! Domains are those [`Tpe`](crate::Tpe) models; `grid_search` is refused, as by TPE. The
//! state (the observations and the random stream) is serde data: a restored sweep suggests as
//! the uninterrupted one would.

use std::collections::BTreeMap;

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::tpe::parzen::ParamKind;
use super::tpe::{Leaf, ModelSpace};
use super::{Searcher, SearcherState, Suggestion, checked_metric, wrong_state, wrong_width};
use crate::error::{Error, Result};
use crate::math::{norm_cdf, norm_ppf};
use crate::metrics::{Metrics, Mode, Objective, Score, get_metric};
use crate::rng::SearchRng;
use crate::space::SearchSpace;
use crate::trial::TrialId;
use crate::value::Value;

const NAME: &str = "BOHB";

/// How one parameter is modelled: on [0, 1], or as one of `n` choices.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dim {
    /// Kernel-space bounds (log-scaled where the domain is) and whether it is log.
    Unit {
        lo: f64,
        hi: f64,
        log: bool,
    },
    /// A `randn` parameter: its model coordinate is already in (0, 1).
    Normal,
    Choice(usize),
}

impl Dim {
    fn of(leaf: &Leaf) -> Dim {
        match (leaf.kind(), leaf) {
            (_, Leaf::Normal { .. }) => Dim::Normal,
            (ParamKind::Numeric(spec), _) => {
                let (lo, hi) = spec.kernel_bounds();
                Dim::Unit { lo, hi, log: spec.log }
            }
            (ParamKind::Categorical(n), _) => Dim::Choice(n.max(1)),
        }
    }

    /// A model coordinate (TPE's) on this dimension's scale.
    fn to_unit(self, c: f64) -> f64 {
        match self {
            Dim::Unit { lo, hi, log } => {
                let z = if log { c.max(f64::MIN_POSITIVE).ln() } else { c };
                if hi > lo { ((z - lo) / (hi - lo)).clamp(0.0, 1.0) } else { 0.5 }
            }
            Dim::Normal => c.clamp(0.0, 1.0),
            Dim::Choice(n) => c.round().clamp(0.0, (n - 1) as f64),
        }
    }

    /// The model coordinate of a point on this dimension's scale.
    fn coord_of(self, u: f64) -> f64 {
        match self {
            Dim::Unit { lo, hi, log } => {
                let z = lo + u.clamp(0.0, 1.0) * (hi - lo);
                if log { z.exp() } else { z }
            }
            Dim::Normal => u,
            Dim::Choice(_) => u,
        }
    }
}

/// BOHB's model-based searcher. See the module docs.
#[derive(Clone, Debug)]
pub struct Bohb {
    /// Its own (`with_space`) or the Tuner's, with its leaves and their domains.
    model: ModelSpace,
    dims: Vec<Dim>,
    metric: Option<String>,
    mode: Option<Mode>,
    time_attr: String,
    top_n_percent: f64,
    min_points_in_model: Option<usize>,
    num_samples: usize,
    random_fraction: f64,
    bandwidth_factor: f64,
    min_bandwidth: f64,
    state: BohbState,
}

/// The evolving part of a [`Bohb`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BohbState {
    rng: SearchRng,
    /// Suggested trials (still running or not): their point, on the model's scales.
    #[serde(with = "crate::serde_util::map_as_pairs")]
    points: BTreeMap<TrialId, Vec<f64>>,
    /// The observations of each budget, the smallest budget first.
    budgets: Vec<Budget>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Budget {
    budget: f64,
    /// Trial → its score at this budget (its last result there).
    #[serde(with = "crate::serde_util::map_as_pairs")]
    scores: BTreeMap<TrialId, Score>,
}

/// A budget with a model: the budget, its good points and its bad points.
type Fitted<'a> = (f64, Vec<&'a [f64]>, Vec<&'a [f64]>);

/// A fitted density: product kernels over the dimensions.
struct Kde<'a> {
    points: Vec<&'a [f64]>,
    bandwidths: Vec<f64>,
}

impl Bohb {
    /// A BOHB searcher with hpbandster's defaults and seed 0, over the param space of the
    /// Tuner it is handed to ([`Searcher::set_space`]).
    pub fn new() -> Self {
        Bohb {
            model: ModelSpace::none(NAME),
            dims: Vec::new(),
            metric: None,
            mode: None,
            time_attr: "training_iteration".into(),
            top_n_percent: 15.0,
            min_points_in_model: None,
            num_samples: 64,
            random_fraction: 1.0 / 3.0,
            bandwidth_factor: 3.0,
            min_bandwidth: 1e-3,
            state: BohbState {
                rng: SearchRng::seed_from_u64(0),
                points: BTreeMap::new(),
                budgets: Vec::new(),
            },
        }
    }

    /// A BOHB searcher over `space` of its own (a Tuner's is then not used). Fails if the
    /// space is invalid or holds a `grid_search`.
    pub fn with_space(space: SearchSpace) -> Result<Self> {
        let mut bohb = Self::new();
        bohb.set_space(&space)?;
        Ok(bohb)
    }

    searcher_builders!(metric, mode, seed);

    /// The result key that is a result's budget (default `training_iteration`): the
    /// scheduler's `time_attr`.
    pub fn time_attr(mut self, attr: impl Into<String>) -> Self {
        self.time_attr = attr.into();
        self
    }

    /// The share of a budget's observations, in percent, that fit the good density (default
    /// 15).
    pub fn top_n_percent(mut self, percent: f64) -> Self {
        self.top_n_percent = percent;
        self
    }

    /// The fewest points a density is fitted to (default: the number of parameters + 1).
    pub fn min_points_in_model(mut self, n: usize) -> Self {
        self.min_points_in_model = Some(n);
        self
    }

    /// Candidates drawn from the good observations per model-based suggestion (default 64).
    pub fn num_samples(mut self, n: usize) -> Self {
        self.num_samples = n;
        self
    }

    /// The probability that a suggestion is a random draw, model or not (default 1/3).
    pub fn random_fraction(mut self, fraction: f64) -> Self {
        self.random_fraction = fraction;
        self
    }

    /// How much wider than the good density's bandwidths candidates spread (default 3).
    pub fn bandwidth_factor(mut self, factor: f64) -> Self {
        self.bandwidth_factor = factor;
        self
    }

    /// The smallest bandwidth (default 1e-3).
    pub fn min_bandwidth(mut self, bandwidth: f64) -> Self {
        self.min_bandwidth = bandwidth;
        self
    }

    /// The budgets observed so far, smallest first, each with its number of observations.
    pub fn observations(&self) -> Vec<(f64, usize)> {
        self.state.budgets.iter().map(|b| (b.budget, b.scores.len())).collect()
    }

    /// The budget a model-based suggestion now uses, if any has enough observations.
    pub fn model_budget(&self) -> Option<f64> {
        self.fitted().map(|(budget, ..)| budget)
    }

    fn objective(&self) -> Result<Objective> {
        match (&self.metric, self.mode) {
            (Some(m), Some(mode)) => Objective::new(NAME, m, mode),
            _ => Err(Error::NotConfigured { component: NAME }),
        }
    }

    fn check_settings(&self) -> Result<()> {
        if !(self.top_n_percent > 0.0 && self.top_n_percent < 100.0) {
            return Err(Error::config(NAME, "top_n_percent", self.top_n_percent, "in (0, 100)"));
        }
        if self.num_samples == 0 {
            return Err(Error::config(NAME, "num_samples", 0, "at least 1"));
        }
        if !(0.0..=1.0).contains(&self.random_fraction) {
            return Err(Error::config(NAME, "random_fraction", self.random_fraction, "in [0, 1]"));
        }
        if !(self.bandwidth_factor.is_finite() && self.bandwidth_factor > 0.0) {
            return Err(Error::config(
                NAME,
                "bandwidth_factor",
                self.bandwidth_factor,
                "a finite factor > 0",
            ));
        }
        if !(self.min_bandwidth.is_finite() && self.min_bandwidth > 0.0) {
            return Err(Error::config(
                NAME,
                "min_bandwidth",
                self.min_bandwidth,
                "a finite bandwidth > 0",
            ));
        }
        if self.min_points_in_model == Some(0) {
            return Err(Error::config(NAME, "min_points_in_model", 0, "at least 1"));
        }
        if self.time_attr.is_empty() {
            return Err(Error::config(NAME, "time_attr", "\"\"", "a result key"));
        }
        Ok(())
    }

    fn min_points(&self) -> usize {
        self.min_points_in_model.unwrap_or(self.dims.len() + 1)
    }

    /// The largest budget with a model: its good and bad points.
    fn fitted(&self) -> Option<Fitted<'_>> {
        let d = self.dims.len();
        let min = self.min_points();
        for level in self.state.budgets.iter().rev() {
            let n = level.scores.len();
            if n < min + 2 {
                continue;
            }
            let mut ranked: Vec<(TrialId, f64)> =
                level.scores.iter().map(|(t, s)| (*t, s.0)).collect();
            // Best first; ties by age.
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let n_good = min.max((self.top_n_percent * n as f64 / 100.0) as usize);
            let n_bad = min.max(((100.0 - self.top_n_percent) * n as f64 / 100.0) as usize);
            let point = |(t, _): &(TrialId, f64)| self.state.points.get(t).map(Vec::as_slice);
            let good: Vec<&[f64]> = ranked.iter().take(n_good).filter_map(point).collect();
            let bad: Vec<&[f64]> =
                ranked.iter().skip(n_good).take(n_bad).filter_map(point).collect();
            if good.len() > d && bad.len() > d {
                return Some((level.budget, good, bad));
            }
        }
        None
    }

    /// Statsmodels' normal-reference bandwidths of `points`, at least `min_bandwidth`.
    fn kde<'a>(&self, points: Vec<&'a [f64]>) -> Kde<'a> {
        let n = points.len() as f64;
        let d = self.dims.len();
        let bandwidths = (0..d)
            .map(|j| {
                let mean = points.iter().map(|p| p[j]).sum::<f64>() / n;
                let var = points.iter().map(|p| (p[j] - mean).powi(2)).sum::<f64>() / n;
                let bw = 1.06 * var.sqrt() * n.powf(-1.0 / (4.0 + d as f64));
                let bw = bw.max(self.min_bandwidth);
                match self.dims[j] {
                    // Past (n−1)/n the kernel would favour other choices over its own.
                    Dim::Choice(c) => bw.min((c - 1) as f64 / c as f64),
                    _ => bw,
                }
            })
            .collect();
        Kde { points, bandwidths }
    }

    /// The density of `kde` at `x`.
    fn pdf(&self, kde: &Kde<'_>, x: &[f64]) -> f64 {
        let total: f64 = kde
            .points
            .iter()
            .map(|p| {
                let mut product = 1.0;
                for (j, dim) in self.dims.iter().enumerate() {
                    let h = kde.bandwidths[j];
                    product *= match dim {
                        Dim::Choice(c) if *c > 1 => {
                            if x[j] == p[j] {
                                1.0 - h
                            } else {
                                h / (*c - 1) as f64
                            }
                        }
                        Dim::Choice(_) => 1.0,
                        _ => {
                            let z = (x[j] - p[j]) / h;
                            (-0.5 * z * z).exp() / (h * (2.0 * std::f64::consts::PI).sqrt())
                        }
                    };
                }
                product
            })
            .sum();
        total / kde.points.len() as f64
    }

    /// A point on the model's scales drawn from the domains.
    fn random_point(&mut self) -> Vec<f64> {
        let values: Vec<Value> =
            self.model.domains.iter().map(|d| d.sample(&mut self.state.rng)).collect();
        self.model
            .leaves
            .iter()
            .zip(&values)
            .zip(&self.dims)
            .map(|((leaf, v), dim)| dim.to_unit(leaf.coord(v).unwrap_or(0.0)))
            .collect()
    }

    /// The point of a model-based suggestion: the best of `num_samples` candidates by
    /// `g(x) / l(x)`, each a good point perturbed.
    fn model_point(&mut self, good: &[Vec<f64>], bad: &[Vec<f64>]) -> Vec<f64> {
        let l = self.kde(good.iter().map(Vec::as_slice).collect());
        let g = self.kde(bad.iter().map(Vec::as_slice).collect());
        let mut best: Option<(f64, Vec<f64>)> = None;
        for _ in 0..self.num_samples {
            let datum = &good[self.state.rng.random_range(0..good.len())];
            let mut candidate = Vec::with_capacity(datum.len());
            for (j, dim) in self.dims.iter().enumerate() {
                let m = datum[j];
                let bw = l.bandwidths[j];
                candidate.push(match dim {
                    Dim::Choice(c) => {
                        if self.state.rng.random::<f64>() < 1.0 - bw {
                            m
                        } else {
                            self.state.rng.random_range(0..*c) as f64
                        }
                    }
                    _ => truncated_normal(&mut self.state.rng, m, bw * self.bandwidth_factor),
                });
            }
            let ratio = self.pdf(&g, &candidate).max(1e-32) / self.pdf(&l, &candidate).max(1e-32);
            if ratio.is_finite() && best.as_ref().is_none_or(|(b, _)| ratio < *b) {
                best = Some((ratio, candidate));
            }
        }
        match best {
            Some((_, point)) => point,
            None => self.random_point(),
        }
    }

    fn record(&mut self, trial: TrialId, result: &Metrics) -> Result<()> {
        if !self.state.points.contains_key(&trial) {
            return Err(Error::UnknownTrial { component: NAME, trial });
        }
        let score = self.objective()?.score(result)?;
        let budget = get_metric(result, &self.time_attr)?;
        if !budget.is_finite() {
            return Ok(());
        }
        let levels = &mut self.state.budgets;
        let at = levels.partition_point(|l| l.budget < budget);
        if levels.get(at).is_none_or(|l| l.budget != budget) {
            levels.insert(at, Budget { budget, scores: BTreeMap::new() });
        }
        levels[at].scores.insert(trial, Score(score));
        Ok(())
    }
}

/// A draw from N(m, sd²) truncated to [0, 1].
fn truncated_normal(rng: &mut SearchRng, m: f64, sd: f64) -> f64 {
    let (a, b) = (norm_cdf((0.0 - m) / sd), norm_cdf((1.0 - m) / sd));
    if b.partial_cmp(&a) != Some(std::cmp::Ordering::Greater) {
        return m.clamp(0.0, 1.0);
    }
    let u = a + rng.random::<f64>() * (b - a);
    (m + sd * norm_ppf(u.clamp(1e-300, 1.0 - 1e-16))).clamp(0.0, 1.0)
}

impl Default for Bohb {
    fn default() -> Self {
        Self::new()
    }
}

impl Searcher for Bohb {
    fn set_space(&mut self, space: &SearchSpace) -> Result<()> {
        if self.model.offer(space)? {
            self.dims = self.model.leaves.iter().map(Dim::of).collect();
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        self.model.check()?;
        self.check_settings()
    }

    fn set_constraints(&mut self, _: &[String]) -> Result<()> {
        Err(Error::NoConstraints { component: NAME })
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        (self.metric, self.mode) = checked_metric(NAME, metric, mode)?;
        Ok(())
    }

    fn metric(&self) -> Option<&str> {
        self.metric.as_deref()
    }

    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion> {
        self.model.check()?;
        self.objective()?;
        self.check_settings()?;
        let random = self.state.rng.random::<f64>() < self.random_fraction;
        let model = if random {
            None
        } else {
            self.fitted().map(|(_, good, bad)| {
                let own = |points: Vec<&[f64]>| -> Vec<Vec<f64>> {
                    points.into_iter().map(<[f64]>::to_vec).collect()
                };
                (own(good), own(bad))
            })
        };
        let point = match model {
            Some((good, bad)) => self.model_point(&good, &bad),
            None => self.random_point(),
        };
        let values: Vec<Value> = self
            .model
            .leaves
            .iter()
            .zip(&self.dims)
            .zip(&point)
            .map(|((leaf, dim), u)| leaf.value(dim.coord_of(*u)))
            .collect();
        let params = self.model.params(&values, &mut self.state.rng)?;
        // The point as the model will see it: where its values really are.
        let point = self
            .model
            .leaves
            .iter()
            .zip(&self.dims)
            .zip(&values)
            .zip(&point)
            .map(|(((leaf, dim), v), u)| leaf.coord(v).map_or(*u, |c| dim.to_unit(c)))
            .collect();
        self.state.points.insert(trial, point);
        Ok(Suggestion::Params(params))
    }

    fn on_trial_result(&mut self, trial: TrialId, result: &Metrics) -> Result<()> {
        self.record(trial, result)
    }

    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        if !self.state.points.contains_key(&trial) {
            return Err(Error::UnknownTrial { component: NAME, trial });
        }
        match result {
            Some(result) if !error => self.record(trial, result),
            _ => Ok(()),
        }
    }

    fn save_state(&self) -> SearcherState {
        SearcherState::Bohb(self.state.clone())
    }

    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        match state {
            SearcherState::Bohb(s) => {
                let n = self.dims.len();
                if !s.points.values().all(|p| p.len() == n) {
                    return Err(wrong_width(NAME, n));
                }
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
    use crate::space::domain::*;
    use crate::space::{Param, grid_search};

    fn space() -> SearchSpace {
        SearchSpace::new()
            .add("x", uniform(-5.0, 5.0).unwrap())
            .add("lr", loguniform(1e-4, 1e-1).unwrap())
            .add("n", randint(1, 9).unwrap())
            .add("q", qlograndint(8, 256, 8).unwrap())
            .add("z", qrandn(0.0, 1.0, 0.5).unwrap())
            .add("c", choice(["a", "b", "c"]))
            .add("k", 3)
    }

    fn result(loss: f64, budget: f64) -> Metrics {
        Metrics::from([("loss".to_string(), loss), ("training_iteration".to_string(), budget)])
    }

    /// A loss that falls with the budget and is smallest at x = 1, lr = 1e-2, c = "b".
    fn loss(p: &crate::params::Params, budget: f64) -> f64 {
        let x = p.get::<f64>("x").unwrap();
        let lr = p.get::<f64>("lr").unwrap();
        let c = if p.get::<String>("c").unwrap() == "b" { 0.0 } else { 1.0 };
        (x - 1.0).powi(2) + (lr.log10() + 2.0).powi(2) + c + 4.0 / budget
    }

    /// Runs `n` trials, each observed at budgets 1 and 3 (and 9 for every third).
    fn sweep(b: &mut Bohb, n: u64) -> Vec<crate::params::Params> {
        sweep_from(b, 0, n)
    }

    #[test]
    fn grid_is_refused_and_settings_are_checked() {
        let s = SearchSpace::new().add("g", grid_search([1, 2]));
        let e = Bohb::with_space(s).unwrap_err();
        assert!(matches!(&e, Error::Unsupported { path, .. } if path == "g"), "{e}");
        for (b, setting) in [
            (Bohb::with_space(space()).unwrap().top_n_percent(100.0), "top_n_percent"),
            (Bohb::with_space(space()).unwrap().num_samples(0), "num_samples"),
            (Bohb::with_space(space()).unwrap().random_fraction(1.5), "random_fraction"),
            (Bohb::with_space(space()).unwrap().bandwidth_factor(0.0), "bandwidth_factor"),
            (Bohb::with_space(space()).unwrap().min_bandwidth(f64::NAN), "min_bandwidth"),
            (Bohb::with_space(space()).unwrap().min_points_in_model(0), "min_points_in_model"),
            (Bohb::with_space(space()).unwrap().time_attr(""), "time_attr"),
        ] {
            match b.validate() {
                Err(Error::InvalidConfig { setting: s, .. }) => assert_eq!(s, setting),
                other => panic!("{setting}: {other:?}"),
            }
        }
        let mut b = Bohb::with_space(space()).unwrap();
        assert_eq!(b.suggest(TrialId(0)).unwrap_err(), Error::NotConfigured { component: NAME });
    }

    /// Every suggestion is a value of its domain, random or from the model.
    #[test]
    fn suggestions_stay_in_their_domains() {
        let mut b = Bohb::with_space(space()).unwrap().metric("loss").mode(Mode::Min).seed(5);
        let s = space();
        for p in sweep(&mut b, 60) {
            for (key, param) in s.iter() {
                if let Param::Sample(d) = param {
                    let v = p.value(key).unwrap();
                    assert!(d.contains(v), "{key} = {v:?} not in {}", d.describe());
                }
            }
        }
        assert!(b.model_budget().is_some());
    }

    /// The model is the largest budget with enough observations: budget 9 once a third of the
    /// trials reached it in numbers enough, before that budget 3.
    #[test]
    fn the_model_is_the_largest_budget_with_enough_observations() {
        let s = SearchSpace::new().add("x", uniform(-5.0, 5.0).unwrap());
        let s = s.add("lr", loguniform(1e-4, 1e-1).unwrap()).add("c", choice(["a", "b"]));
        let mut b = Bohb::with_space(s).unwrap().metric("loss").mode(Mode::Min).seed(1);
        // 3 parameters: at least 4 points a density, more than 3 in each, 6 observations.
        sweep(&mut b, 3);
        assert_eq!(b.model_budget(), None, "{:?}", b.observations());
        sweep_from(&mut b, 3, 9);
        assert_eq!(b.observations(), [(1.0, 12), (3.0, 12), (9.0, 4)]);
        assert_eq!(b.model_budget(), Some(3.0));
        sweep_from(&mut b, 12, 30);
        assert_eq!(b.model_budget(), Some(9.0), "{:?}", b.observations());
    }

    /// Trials `first..first + n`, as `sweep`.
    fn sweep_from(b: &mut Bohb, first: u64, n: u64) -> Vec<crate::params::Params> {
        let mut suggested = Vec::new();
        for i in first..first + n {
            let Suggestion::Params(p) = b.suggest(TrialId(i)).unwrap() else { panic!() };
            let budgets: &[f64] = if i % 3 == 0 { &[1.0, 3.0, 9.0] } else { &[1.0, 3.0] };
            for &budget in budgets {
                b.on_trial_result(TrialId(i), &result(loss(&p, budget), budget)).unwrap();
            }
            b.on_trial_complete(TrialId(i), None, false).unwrap();
            suggested.push(p);
        }
        suggested
    }

    /// Once modelled, suggestions land nearer the optimum than random draws do.
    #[test]
    fn model_suggestions_beat_random_draws() {
        let s = SearchSpace::new().add("x", uniform(-5.0, 5.0).unwrap());
        let s = s.add("lr", loguniform(1e-4, 1e-1).unwrap()).add("c", choice(["a", "b", "c"]));
        let mean_loss = |random_fraction: f64| {
            let mut b = Bohb::with_space(s.clone())
                .unwrap()
                .metric("loss")
                .mode(Mode::Min)
                .seed(11)
                .random_fraction(random_fraction);
            let suggested = sweep(&mut b, 80);
            suggested[40..].iter().map(|p| loss(p, 9.0)).sum::<f64>() / 40.0
        };
        let (model, random) = (mean_loss(0.0), mean_loss(1.0));
        assert!(model < random / 2.0, "model {model}, random {random}");
    }

    /// A restored searcher suggests what the uninterrupted one does.
    #[test]
    fn a_restored_searcher_goes_on_as_the_first() {
        let fresh = || Bohb::with_space(space()).unwrap().metric("loss").mode(Mode::Min).seed(9);
        let mut a = fresh();
        sweep(&mut a, 30);
        let saved = serde_json::to_string(&a.save_state()).unwrap();
        let mut b = fresh();
        b.restore_state(serde_json::from_str(&saved).unwrap()).unwrap();
        assert_eq!(sweep_tail(&mut a), sweep_tail(&mut b));
        let other =
            Bohb::with_space(SearchSpace::new().add("x", uniform(0.0, 1.0).unwrap())).unwrap();
        let mut other = other.metric("loss").mode(Mode::Min);
        let e = other.restore_state(serde_json::from_str(&saved).unwrap()).unwrap_err();
        assert!(matches!(e, Error::InvalidState { .. }), "{e}");
    }

    fn sweep_tail(b: &mut Bohb) -> Vec<crate::params::Params> {
        (30..40)
            .map(|i| {
                let Suggestion::Params(p) = b.suggest(TrialId(i)).unwrap() else { panic!() };
                b.on_trial_result(TrialId(i), &result(loss(&p, 1.0), 1.0)).unwrap();
                b.on_trial_complete(TrialId(i), None, false).unwrap();
                p
            })
            .collect()
    }

    /// A result without the budget's key is a typed error naming what is there.
    #[test]
    fn a_result_without_its_budget_is_named() {
        let mut b = Bohb::with_space(space()).unwrap().metric("loss").mode(Mode::Min);
        b.suggest(TrialId(0)).unwrap();
        let r = Metrics::from([("loss".to_string(), 1.0)]);
        let e = b.on_trial_result(TrialId(0), &r).unwrap_err();
        assert!(
            matches!(&e, Error::MissingMetric { metric, .. } if metric == "training_iteration")
        );
    }
}
