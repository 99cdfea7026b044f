//! Tree-structured Parzen Estimator, modelled on Optuna's default `TPESampler` (independent,
//! i.e. one estimator per parameter).
//!
//! * The first `n_startup_trials` (10) completed trials are random draws from the domains (the
//!   same draws [`BasicVariant`](crate::BasicVariant) makes).
//! * Then completed trials are split into a good group of the `gamma(n) = min(ceil(0.1·n), 25)`
//!   best and a bad group of the rest. Per parameter, a Parzen estimator `l` is fitted to the
//!   good values and `g` to the bad ones (Optuna's weights, prior, bandwidths and magic clip;
//!   see the `parzen` module); `n_ei_candidates` (24) candidates are drawn from `l` and the one
//!   maximising `ln l(x) − ln g(x)` is chosen.
//! * Constant liar (on by default): trials suggested but not finished join the bad group, so
//!   concurrent suggestions spread out instead of piling onto one point. See
//!   [below](#the-constant-liar-on-by-default) for why it is on.
//! * Several objectives ([`Searcher::set_objectives`]; `TuneConfig::objectives` in rtune), as
//!   Optuna's multi-objective TPE: the good group is the `ceil(0.1·n)` best (no cap) by
//!   non-dominated fronts, the front that does not fit whole cut by greedy hypervolume subset
//!   selection (reference point 1.1 times its worst), its points weighted evenly.
//!   `evaluated_rewards` are refused then (a reward is one number). Measured against Optuna in
//!   [`Nsga2`](crate::Nsga2)'s docs.
//! * Constraints ([`Searcher::set_constraints`]: metrics that must be <= 0), as Optuna's
//!   constrained TPE: the good group is filled with feasible trials first, by score (or by
//!   fronts with several objectives), and only where too few are feasible with the infeasible
//!   ones that violate least ([`violation`]).
//!
//! Domains: `uniform`, `quniform`, `loguniform`, `qloguniform` (log and/or step grid),
//! `randint`, `qrandint`, `lograndint`, `qlograndint` (integer grids, log where asked),
//! `choice` (categorical), `randn`/`qrandn` (modelled on the normal's CDF scale, where the
//! prior is uniform, so the random start and the model agree). Constants and nested spaces pass
//! through. Dependent values are evaluated after the sampled ones and are not modelled (they
//! are functions of what is). `grid_search` is refused at construction with
//! [`Error::Unsupported`]: a grid promises every value, a model-based searcher does not; use
//! `choice` instead.
//!
//! Trials that end with an error, or with no result at all, are left out of the model. A trial
//! that ends without a final result but reported intermediate ones counts with its last one
//! (like a pruned trial in Optuna). Results are ranked by [`Mode::score`]: `±inf` like any
//! number, a NaN as the worst result (Optuna fails a trial whose value is NaN and leaves it out
//! of the model; here it counts as bad, which steers the model away from where it diverged).
//!
//! # Known points: `points_to_evaluate`, `evaluated_rewards`
//!
//! [`points_to_evaluate`](Tpe::points_to_evaluate) are parameter sets the user already knows,
//! suggested first, in order (as Ray's and Optuna's searchers do). A point may give only some
//! parameters: the others are chosen as for any suggestion (random draws during start-up, the
//! model after). Their results become observations like any other trial's. With
//! [`evaluated_rewards`](Tpe::evaluated_rewards) (one per point, in the metric's units), the
//! points are not run: they enter the model as completed trials before the first suggestion
//! (Ray's semantics), count towards `n_startup_trials`, and rank as the oldest trials. A
//! partial evaluated point is known to the model only through the parameters it gives (as in
//! Optuna). The saved state records which points were suggested and whether the evaluated
//! ones were taken in, so a resumed sweep repeats neither.
//!
//! # Multivariate, on by default with one objective
//!
//! With one objective, the parameters every trial has are modelled together, as Optuna 5.0's
//! `TPESampler` does by default: the good group's mixture has a kernel per good trial that is the product of that
//! trial's kernels on every parameter (each with its one-parameter bandwidth), so a candidate
//! is drawn from one good trial's neighbourhood in all parameters at once and scored by the
//! joint densities' ratio. One parameter at a time, a valley that runs across parameters (the
//! right values of two coordinates together) looks like a plateau. Conditional parameters,
//! which some trials lack, stay one at a time. [`Tpe::multivariate`]`(false)` (in a sweep
//! file, `search = { type = "tpe", multivariate = false }`) models each parameter alone, as
//! rtune did before and Optuna before 5.0.
//!
//! Measured with `hpo_vs` (30 seeds, 100 trials, one at a time; the median best value, lower
//! is better):
//!
//! | task | one at a time | multivariate |
//! |---|--:|--:|
//! | Branin (2-D) | 0.4456 | 0.4183 |
//! | Hartmann-6 | −2.8837 | −3.2176 |
//! | Rosenbrock-10 | 10,211 | 3,144 |
//! | Levy-10 | 11.15 | 17.11 |
//! | HPOLib naval (9 categorical) | −4.1782 | −4.3938 |
//! | HPOLib parkinsons | −1.9069 | −2.0418 |
//! | HPOLib protein | −0.6257 | −0.6467 |
//! | HPOLib slice | −3.4796 | −3.6418 |
//!
//! Better on seven of the eight; worse on Levy-10, whose many local minima sit on a grid
//! along each axis, which one parameter at a time follows. Optuna 5.0's TPE (multivariate) on
//! the same tasks and seeds: 0.4183, −3.1934, 3,421, 16.60 and −4.3881 (naval).
//!
//! With several objectives it stays one at a time unless asked: on ZDT1 and ZDT2 (30
//! parameters, `moo_vs`, 20 seeds, median hypervolume) multivariate did worse, 9.454 against
//! 9.880 after 500 trials on ZDT1 and 8.588 against 8.625 on ZDT2.
//!
//! # The constant liar, on by default
//!
//! Optuna's `TPESampler` turned `constant_liar` on by default in 5.0; here it was on before.
//! With one trial
//! in flight it changes nothing (no trial is running when the next is suggested: the runs are
//! identical, bit for bit). With several, without it every suggestion made while the others
//! run sees the same model and lands near the same point; with it, the running trials count
//! as bad ones and the suggestions spread. Measured with the `tpe_vs_random` example (median
//! best value over 20 seeds, lower is better; `on < off`: seeds where the liar's run ended
//! better):
//!
//! | problem   | budget | random  | 1 in flight (on = off) | 4 in flight, on | 4 in flight, off | on < off |
//! |-----------|-------:|--------:|-------:|--------:|--------:|------:|
//! | branin    |     50 |  1.3740 | 0.5907 |  0.8679 |  1.0081 |  9/20 |
//! | branin    |    100 |  0.9003 | 0.4905 |  0.4562 |  0.5115 | 12/20 |
//! | branin    |    200 |  0.6427 | 0.4048 |  0.4013 |  0.4073 | 14/20 |
//! | hartmann6 |     50 | −1.7326 | −2.5674 | −2.2544 | −2.1014 | 12/20 |
//! | hartmann6 |    100 | −1.9789 | −2.9612 | −2.9256 | −2.7964 | 11/20 |
//! | hartmann6 |    200 | −2.2893 | −3.1742 | −3.1485 | −3.1557 | 12/20 |
//! | mixed10   |     50 | 18.1971 | 8.1383 |  9.7201 |  9.9522 | 11/20 |
//! | mixed10   |    100 | 15.9502 | 4.7785 |  4.6908 |  4.3871 | 12/20 |
//! | mixed10   |    200 | 13.4859 | 2.6991 |  2.4525 |  3.0477 | 15/20 |
//!
//! With four trials in flight the liar's median is the better one in 7 of the 9 rows and its
//! run ends better in more than half of the seeds in 8 of them; it costs nothing with one.
//! Produced by (the second command for the 4-in-flight columns):
//!
//! ```text
//! cargo run --release -p rtune-searchers --example tpe_vs_random -- --concurrency 1 --liar both
//! cargo run --release -p rtune-searchers --example tpe_vs_random -- --concurrency 4 --liar both
//! ```
//!
//! For Optuna's behaviour before 5.0, turn it off: [`Tpe::constant_liar`]`(false)` (in a sweep
//! file, `search = { type = "tpe", constant_liar = false }`).

mod leaf;
mod model_space;
pub(crate) mod parzen;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub(crate) use self::leaf::Leaf;
pub(crate) use self::model_space::ModelSpace;
use self::parzen::{Estimator, Joint, ParamKind, ParzenSettings, default_weights};
use super::points::Points;
use super::{Searcher, SearcherState, Suggestion, checked_metric, wrong_state, wrong_width};
use crate::error::{Error, Result};
use crate::metrics::{
    Metrics, Mode, Objective, Score, check_constraints, check_objectives, is_zero, opt_score_serde,
    score_serde, violation,
};
use crate::params::Params;
use crate::pareto::best_by_fronts;
use crate::rng::SearchRng;
use crate::space::SearchSpace;
use crate::trial::TrialId;
use crate::value::Value;

const NAME: &str = "TPE";

/// Tree-structured Parzen Estimator searcher. See the module docs.
#[derive(Clone, Debug)]
pub struct Tpe {
    /// Its own (`with_space`) or the Tuner's, with its leaves and their domains (for random
    /// start-up draws).
    model: ModelSpace,
    metric: Option<String>,
    mode: Option<Mode>,
    /// Several objectives (`metric` and `mode` are then unset): see the module docs.
    objectives: Vec<Objective>,
    /// Metrics that must be <= 0: see the module docs.
    constraints: Vec<String>,
    n_startup_trials: usize,
    n_ei_candidates: usize,
    gamma_fraction: f64,
    gamma_max: usize,
    prior_weight: f64,
    consider_magic_clip: bool,
    consider_endpoints: bool,
    constant_liar: bool,
    /// Unset: multivariate with one objective, one at a time with several.
    multivariate: Option<bool>,
    points: Points,
    state: TpeState,
}

/// The evolving part of a [`Tpe`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TpeState {
    rng: SearchRng,
    /// Suggested, not yet complete.
    #[serde(with = "crate::serde_util::map_as_pairs")]
    live: BTreeMap<TrialId, LiveTrial>,
    /// Completed trials with a score, in completion order (evaluated points first).
    observations: Vec<Observation>,
    /// How many of `points_to_evaluate` have been suggested.
    #[serde(default)]
    points_suggested: usize,
    /// Whether the evaluated points are among the observations.
    #[serde(default)]
    warm_started: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct LiveTrial {
    coords: Vec<f64>,
    #[serde(with = "opt_score_serde")]
    last_score: Option<f64>,
    /// With several objectives, the last result's score of each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    last_scores: Vec<Score>,
    /// The last result's violation of the constraints.
    #[serde(default, with = "score_serde", skip_serializing_if = "is_zero")]
    last_violation: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Observation {
    /// The trial, or for an evaluated point its index among the points.
    trial: TrialId,
    /// One per leaf; `None` where an evaluated point does not say.
    coords: Vec<Option<f64>>,
    /// With several objectives, the first one's.
    #[serde(with = "score_serde")]
    score: f64,
    /// With several objectives, each one's score.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    scores: Vec<Score>,
    /// An evaluated point (`evaluated_rewards`), not a trial.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    evaluated: bool,
    /// How far it is from meeting the constraints ([`violation`]; 0: feasible).
    #[serde(default, with = "score_serde", skip_serializing_if = "is_zero")]
    violation: f64,
}

/// Sorts oldest first: evaluated points (`false`), then trials in id order.
type Age = (bool, TrialId);

/// A result's score, each objective's with several, and its violation of the constraints.
type Scored = (f64, Vec<Score>, f64);

impl Observation {
    /// Oldest first: evaluated points, then trials in id order.
    fn age(&self) -> Age {
        (!self.evaluated, self.trial)
    }
}

impl Tpe {
    /// A TPE searcher with Optuna's defaults and seed 0, over the param space of the Tuner it
    /// is handed to ([`Searcher::set_space`]).
    pub fn new() -> Self {
        Self {
            model: ModelSpace::none(NAME),
            metric: None,
            mode: None,
            objectives: Vec::new(),
            constraints: Vec::new(),
            n_startup_trials: 10,
            n_ei_candidates: 24,
            gamma_fraction: 0.1,
            gamma_max: 25,
            prior_weight: 1.0,
            consider_magic_clip: true,
            consider_endpoints: false,
            constant_liar: true,
            multivariate: None,
            points: Points::new(NAME),
            state: TpeState {
                rng: SearchRng::seed_from_u64(0),
                live: BTreeMap::new(),
                observations: Vec::new(),
                points_suggested: 0,
                warm_started: false,
            },
        }
    }

    /// A TPE searcher over `space` of its own (a Tuner's is then not used). Fails if the space
    /// is invalid or holds a `grid_search`.
    pub fn with_space(space: SearchSpace) -> Result<Self> {
        let mut tpe = Self::new();
        tpe.set_space(&space)?;
        Ok(tpe)
    }

    /// Parameter sets to suggest first, in order (Ray's and Optuna's `points_to_evaluate`;
    /// see the module docs). A point may give only some parameters. A point that does not fit
    /// the space (a key it does not have, a value outside its domain) is an
    /// [`Error::InvalidConfig`] for `points_to_evaluate` from [`Searcher::validate`] and
    /// [`Searcher::suggest`], naming the point, the key, the value and what would fit.
    pub fn points_to_evaluate<P: Into<Params>>(
        mut self,
        points: impl IntoIterator<Item = P>,
    ) -> Self {
        self.points.set_points(&self.model.space, points.into_iter().map(Into::into).collect());
        self
    }

    /// Known results of the points, one per point, in the metric's units (Ray's
    /// `evaluated_rewards`): the points are not run but taken into the model as completed
    /// trials. A count that differs from the points' is an [`Error::InvalidConfig`] for
    /// `evaluated_rewards`.
    pub fn evaluated_rewards(mut self, rewards: impl IntoIterator<Item = f64>) -> Self {
        self.points.set_rewards(&self.model.space, rewards.into_iter().collect());
        self
    }

    searcher_builders!(metric, mode, seed);

    /// Completed trials drawn at random before the model is used (default 10).
    pub fn n_startup_trials(mut self, n: usize) -> Self {
        self.n_startup_trials = n;
        self
    }

    /// Candidates drawn from `l(x)` per parameter (default 24, must be ≥ 1).
    pub fn n_ei_candidates(mut self, n: usize) -> Self {
        self.n_ei_candidates = n;
        self
    }

    /// `gamma(n) = min(ceil(fraction·n), max)` (default 0.1 and 25).
    pub fn gamma(mut self, fraction: f64, max: usize) -> Self {
        self.gamma_fraction = fraction;
        self.gamma_max = max;
        self
    }

    /// Weight of the prior kernel (default 1.0).
    pub fn prior_weight(mut self, w: f64) -> Self {
        self.prior_weight = w;
        self
    }

    /// Optuna's bandwidth floor (default on).
    pub fn consider_magic_clip(mut self, on: bool) -> Self {
        self.consider_magic_clip = on;
        self
    }

    /// Let the outermost kernels' bandwidths see the bounds (default off).
    pub fn consider_endpoints(mut self, on: bool) -> Self {
        self.consider_endpoints = on;
        self
    }

    /// Count running trials as bad ones (default on; Optuna's default is off). See
    /// [the module docs](crate::searcher::tpe#the-constant-liar-on-by-default) for what it
    /// changes, measured.
    pub fn constant_liar(mut self, on: bool) -> Self {
        self.constant_liar = on;
        self
    }

    /// Model the parameters together (multivariate TPE; by default with one objective, as in
    /// Optuna 5.0, and not with several): each good trial's values are drawn and scored as one
    /// point, which finds valleys that run across several parameters. Parameters some trials
    /// lack (conditional ones) stay univariate.
    pub fn multivariate(mut self, on: bool) -> Self {
        self.multivariate = Some(on);
        self
    }

    /// Number of completed trials the model knows (evaluated points included, once the first
    /// suggestion has taken them in).
    pub fn num_observations(&self) -> usize {
        self.state.observations.len()
    }

    /// Takes the evaluated points into the observations, once.
    fn warm_start(&mut self, objective: &Objective) -> Result<()> {
        if self.state.warm_started {
            return Ok(());
        }
        for (k, (values, reward)) in self.points.evaluated()?.into_iter().enumerate() {
            let coords = self
                .model
                .leaves
                .iter()
                .zip(values)
                .map(|(leaf, v)| v.as_ref().and_then(|v| leaf.coord(v)))
                .collect();
            self.state.observations.push(Observation {
                trial: TrialId(k as u64),
                coords,
                score: objective.mode.score(reward),
                scores: Vec::new(),
                evaluated: true,
                violation: 0.0,
            });
        }
        self.state.warm_started = true;
        Ok(())
    }

    fn objective(&self) -> Result<Objective> {
        match (&self.metric, self.mode, self.objectives.first()) {
            (Some(m), Some(mode), _) => Objective::new(NAME, m, mode),
            (_, _, Some(first)) => Ok(first.clone()),
            _ => Err(Error::NotConfigured { component: NAME }),
        }
    }

    /// A result's score, with several objectives each one's (the first is the score), and its
    /// violation of the constraints.
    fn scores_of(&self, result: &Metrics) -> Result<Scored> {
        let violation = violation(&self.constraints, result);
        if self.objectives.is_empty() {
            return Ok((self.objective()?.score(result)?, Vec::new(), violation));
        }
        let scores: Vec<Score> =
            self.objectives.iter().map(|o| o.score(result).map(Score)).collect::<Result<_>>()?;
        Ok((scores[0].0, scores, violation))
    }

    fn check_settings(&self) -> Result<()> {
        if self.n_ei_candidates == 0 {
            return Err(Error::config(NAME, "n_ei_candidates", 0, "at least 1"));
        }
        if !(self.gamma_fraction > 0.0 && self.gamma_fraction <= 1.0) {
            return Err(Error::config(NAME, "gamma fraction", self.gamma_fraction, "in (0, 1]"));
        }
        if self.gamma_max == 0 {
            return Err(Error::config(NAME, "gamma max", 0, "at least 1"));
        }
        if !(self.prior_weight.is_finite() && self.prior_weight > 0.0) {
            return Err(Error::config(
                NAME,
                "prior_weight",
                self.prior_weight,
                "a finite weight > 0",
            ));
        }
        Ok(())
    }

    /// The size of the good group of `n` observations: uncapped with several objectives, as
    /// Optuna's `default_gamma_multiobjective`.
    fn gamma_of(&self, n: usize) -> usize {
        let g = (self.gamma_fraction * n as f64).ceil().max(0.0) as usize;
        if self.objectives.is_empty() { g.min(self.gamma_max) } else { g }
    }

    /// Model-based coordinates for a new trial, one leaf at a time.
    fn model_coords(&mut self) -> Vec<f64> {
        let obs = &self.state.observations;
        let n_below = self.gamma_of(obs.len()).min(obs.len());
        // The good group: the best by score (ties by age), or with several objectives by
        // non-dominated fronts and the hypervolume they add; feasible trials before the others,
        // which rank by how little they violate the constraints.
        let good: Vec<usize> = if self.objectives.is_empty() {
            let mut ranked: Vec<usize> = (0..obs.len()).collect();
            ranked.sort_by(|&a, &b| {
                (obs[a].violation.total_cmp(&obs[b].violation))
                    .then(obs[b].score.total_cmp(&obs[a].score))
                    .then(obs[a].age().cmp(&obs[b].age()))
            });
            ranked.truncate(n_below);
            ranked
        } else {
            let (feasible, mut infeasible): (Vec<usize>, Vec<usize>) =
                (0..obs.len()).partition(|&i| obs[i].violation == 0.0);
            let scores: Vec<Vec<f64>> =
                feasible.iter().map(|&i| obs[i].scores.iter().map(|s| s.0).collect()).collect();
            let mut good: Vec<usize> =
                best_by_fronts(&scores, n_below).into_iter().map(|k| feasible[k]).collect();
            infeasible.sort_by(|&a, &b| {
                obs[a].violation.total_cmp(&obs[b].violation).then(obs[a].age().cmp(&obs[b].age()))
            });
            good.extend(infeasible.into_iter().take(n_below.saturating_sub(good.len())));
            good
        };
        let mut is_good = vec![false; obs.len()];
        for &i in &good {
            is_good[i] = true;
        }
        type Row<'a> = (Age, &'a [Option<f64>]);
        fn row(o: &Observation) -> Row<'_> {
            (o.age(), o.coords.as_slice())
        }
        let mut below: Vec<Row<'_>> = good.iter().map(|&i| row(&obs[i])).collect();
        let mut above: Vec<Row<'_>> =
            obs.iter().zip(&is_good).filter(|(_, g)| !**g).map(|(o, _)| row(o)).collect();
        let live: Vec<(Age, Vec<Option<f64>>)> = if self.constant_liar {
            let coords = |t: &LiveTrial| t.coords.iter().copied().map(Some).collect();
            self.state.live.iter().map(|(id, t)| ((true, *id), coords(t))).collect()
        } else {
            Vec::new()
        };
        above.extend(live.iter().map(|(age, c)| (*age, c.as_slice())));
        // Oldest first, as Optuna's weights expect.
        below.sort_by_key(|(age, _)| *age);
        above.sort_by_key(|(age, _)| *age);
        let settings = ParzenSettings {
            prior_weight: self.prior_weight,
            consider_magic_clip: self.consider_magic_clip,
            consider_endpoints: self.consider_endpoints,
        };
        // Several objectives weigh the good group evenly (Optuna's multi-objective TPE).
        let good_weights = |n| match self.objectives.is_empty() {
            true => default_weights(n),
            false => vec![1.0; n],
        };
        let leaves = &self.model.leaves;
        let mut coords = vec![0.0; leaves.len()];
        // Multivariate: the parameters every trial has, drawn and scored together.
        let mut joint: Vec<usize> = match self.multivariate.unwrap_or(self.objectives.is_empty()) {
            true => (0..leaves.len())
                .filter(|&j| {
                    below.iter().chain(&above).all(|(_, c)| matches!(c.get(j), Some(Some(_))))
                })
                .collect(),
            false => Vec::new(),
        };
        // One parameter alone is modelled as the univariate loop below does.
        if joint.len() < 2 {
            joint.clear();
        }
        if !joint.is_empty() {
            let kinds: Vec<ParamKind> = joint.iter().map(|&j| leaves[j].kind()).collect();
            let rows = |group: &[Row<'_>]| -> Vec<Vec<f64>> {
                group
                    .iter()
                    .map(|(_, c)| joint.iter().map(|&j| c[j].unwrap_or(0.0)).collect())
                    .collect()
            };
            let (good, rest) = (rows(&below), rows(&above));
            let l = Joint::build(&kinds, &good, &good_weights(good.len()), &settings);
            let g = Joint::build(&kinds, &rest, &default_weights(rest.len()), &settings);
            let mut best = (f64::NEG_INFINITY, Vec::new());
            for c in l.sample(&mut self.state.rng, self.n_ei_candidates) {
                let score = l.log_pdf(&c) - g.log_pdf(&c);
                if score > best.0 || best.1.is_empty() {
                    best = (score, c);
                }
            }
            for (&j, c) in joint.iter().zip(best.1) {
                coords[j] = c;
            }
        }
        let mut column = Vec::with_capacity(above.len().max(below.len()));
        for (j, leaf) in leaves.iter().enumerate() {
            if joint.contains(&j) {
                continue;
            }
            let kind = leaf.kind();
            column.clear();
            column.extend(below.iter().filter_map(|(_, c)| c.get(j).copied().flatten()));
            let l = Estimator::build(&kind, &column, &good_weights(column.len()), &settings);
            column.clear();
            column.extend(above.iter().filter_map(|(_, c)| c.get(j).copied().flatten()));
            let g = Estimator::build(&kind, &column, &default_weights(column.len()), &settings);
            let candidates = l.sample(&mut self.state.rng, self.n_ei_candidates);
            let mut best = (f64::NEG_INFINITY, candidates.first().copied().unwrap_or(0.0));
            // Grids and categories repeat candidates: score each distinct one once.
            let mut seen: Vec<f64> = Vec::with_capacity(candidates.len());
            for c in candidates {
                if seen.contains(&c) {
                    continue;
                }
                seen.push(c);
                let score = l.log_pdf(c) - g.log_pdf(c);
                if score > best.0 {
                    best = (score, c);
                }
            }
            coords[j] = best.1;
        }
        coords
    }
}

impl Default for Tpe {
    fn default() -> Self {
        Self::new()
    }
}

impl Searcher for Tpe {
    fn set_space(&mut self, space: &SearchSpace) -> Result<()> {
        if self.model.offer(space)? {
            self.points.set_space(&self.model.space);
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        self.model.check()?;
        self.check_settings()?;
        self.points.check()
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        (self.metric, self.mode) = checked_metric(NAME, metric, mode)?;
        Ok(())
    }

    fn set_objectives(&mut self, objectives: &[Objective]) -> Result<()> {
        check_objectives(NAME, objectives)?;
        self.objectives = objectives.to_vec();
        (self.metric, self.mode) = (None, None);
        Ok(())
    }

    fn set_constraints(&mut self, constraints: &[String]) -> Result<()> {
        check_constraints(NAME, constraints)?;
        self.constraints = constraints.to_vec();
        Ok(())
    }

    fn metric(&self) -> Option<&str> {
        self.metric.as_deref().or(self.objectives.first().map(|o| o.metric.as_str()))
    }

    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion> {
        self.model.check()?;
        let objective = self.objective()?;
        self.check_settings()?;
        self.points.check()?;
        if self.objectives.len() > 1 && self.points.has_rewards() {
            return Err(Error::config(
                NAME,
                "evaluated_rewards",
                "one per point",
                "none with several objectives (a reward is one number): run the points",
            ));
        }
        self.warm_start(&objective)?;
        let point = self.points.to_run()?.get(self.state.points_suggested).cloned();
        let startup = self.state.observations.len() < self.n_startup_trials;
        let (mut values, mut coords): (Vec<Value>, Vec<f64>) = if startup {
            let values: Vec<Value> =
                self.model.domains.iter().map(|d| d.sample(&mut self.state.rng)).collect();
            let coords = self
                .model
                .leaves
                .iter()
                .zip(&values)
                .map(|(l, v)| l.coord(v).unwrap_or(0.0))
                .collect();
            (values, coords)
        } else {
            let coords = self.model_coords();
            let values = self.model.leaves.iter().zip(&coords).map(|(l, c)| l.value(*c)).collect();
            (values, coords)
        };
        // A point's own values replace what was chosen for the parameters it gives.
        let given = point.as_deref().unwrap_or_default();
        for (i, (v, leaf)) in given.iter().zip(&self.model.leaves).enumerate() {
            let Some(v) = v else { continue };
            if let (Some(slot), Some(c)) = (coords.get_mut(i), leaf.coord(v)) {
                *slot = c;
            }
            if let Some(slot) = values.get_mut(i) {
                *slot = v.clone();
            }
        }
        let params = self.model.params(&values, &mut self.state.rng)?;
        let live =
            LiveTrial { coords, last_score: None, last_scores: Vec::new(), last_violation: 0.0 };
        self.state.live.insert(trial, live);
        if point.is_some() {
            self.state.points_suggested += 1;
        }
        Ok(Suggestion::Params(params))
    }

    fn on_trial_result(&mut self, trial: TrialId, result: &Metrics) -> Result<()> {
        let (score, scores, violation) = self.scores_of(result)?;
        match self.state.live.get_mut(&trial) {
            Some(t) => {
                (t.last_score, t.last_scores, t.last_violation) = (Some(score), scores, violation);
                Ok(())
            }
            None => Err(Error::UnknownTrial { component: NAME, trial }),
        }
    }

    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        let scored = match (error, result) {
            (true, _) => None,
            (false, Some(r)) => Some(self.scores_of(r)?),
            (false, None) => {
                let t = self.state.live.get(&trial);
                t.and_then(|t| Some((t.last_score?, t.last_scores.clone(), t.last_violation)))
            }
        };
        let Some(t) = self.state.live.remove(&trial) else {
            return Err(Error::UnknownTrial { component: NAME, trial });
        };
        if let Some((score, scores, violation)) = scored {
            let coords = t.coords.into_iter().map(Some).collect();
            let observation =
                Observation { trial, coords, score, scores, evaluated: false, violation };
            self.state.observations.push(observation);
        }
        Ok(())
    }

    fn save_state(&self) -> SearcherState {
        SearcherState::Tpe(self.state.clone())
    }

    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        match state {
            SearcherState::Tpe(s) => {
                let n = self.model.leaves.len();
                let fits = s.observations.iter().all(|o| o.coords.len() == n)
                    && s.live.values().all(|t| t.coords.len() == n);
                if !fits {
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
    use crate::space::Param;
    use crate::space::domain::*;
    use crate::space::grid_search;

    /// Integers beyond 2^53 are not exact in f64: the model's coordinates must still come back
    /// as values of the domain (proptest found `randint` bounds near 6.4e18 sampling below low).
    #[test]
    fn integer_suggestions_stay_on_their_grid_beyond_2_pow_53() {
        let domains = [
            Domain::RandInt { low: 6_364_276_667_439_316_129, high: 6_364_276_667_439_932_929 },
            Domain::RandInt { low: i64::MAX - 5, high: i64::MAX },
            Domain::RandInt { low: i64::MIN, high: i64::MIN + 3 },
            Domain::QRandInt { low: i64::MAX - 1000, high: i64::MAX, q: 7 },
            Domain::LogRandInt { low: 1 << 60, high: (1 << 60) + 100, base: 10.0 },
            Domain::QLogRandInt { low: 1 << 58, high: (1 << 58) + 10_000, q: 16, base: 10.0 },
        ];
        let space = domains
            .iter()
            .enumerate()
            .fold(SearchSpace::new(), |s, (i, d)| s.add(format!("p{i}"), d.clone()));
        let mut t = Tpe::with_space(space)
            .unwrap()
            .metric("loss")
            .mode(Mode::Min)
            .seed(7)
            .n_startup_trials(3);
        for i in 0..30u64 {
            let Suggestion::Params(p) = t.suggest(TrialId(i)).unwrap() else { panic!("no params") };
            for (k, d) in domains.iter().enumerate() {
                let v = p.value(&format!("p{k}")).unwrap();
                assert!(d.contains(v), "trial {i}: {} gave {v:?}", d.describe());
            }
            let r = Metrics::from([("loss".to_string(), (i % 5) as f64)]);
            t.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
        }
    }

    /// A linear integer range narrower than 2^53 is modelled exactly wherever it lies: the
    /// suggestions far out are the same offsets from `low` as those near zero.
    #[test]
    fn integer_model_is_translation_invariant() {
        let run = |low: i64| {
            let space = SearchSpace::new().add("k", Domain::RandInt { low, high: low + 1000 });
            let mut t = Tpe::with_space(space)
                .unwrap()
                .metric("loss")
                .mode(Mode::Min)
                .seed(3)
                .n_startup_trials(4);
            (0..20u64)
                .map(|i| {
                    let Suggestion::Params(p) = t.suggest(TrialId(i)).unwrap() else { panic!() };
                    let k = p.get::<i64>("k").unwrap();
                    let r = Metrics::from([("loss".to_string(), ((k - low) as f64 - 300.0).abs())]);
                    t.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
                    k - low
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(0), run(1 << 62));
    }

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

    /// Built without a space, a searcher takes the one it is handed (a Tuner's) and then
    /// suggests exactly as one built with it; one built with its own keeps it; one never given
    /// a space says so instead of suggesting empty params.
    #[test]
    fn a_searcher_without_a_space_takes_the_tuners() {
        let draw = |mut s: Tpe| {
            s.set_metric("loss", Mode::Min).unwrap();
            s.validate().unwrap();
            (0..3).map(|i| s.suggest(TrialId(i)).unwrap()).collect::<Vec<_>>()
        };
        let mut handed = Tpe::new().seed(5);
        handed.set_space(&space()).unwrap();
        assert_eq!(draw(handed), draw(Tpe::with_space(space()).unwrap().seed(5)));

        let own = SearchSpace::new().add("y", uniform(0.0, 1.0).unwrap());
        let mut kept = Tpe::with_space(own).unwrap();
        kept.set_space(&space()).unwrap();
        for suggestion in draw(kept) {
            let Suggestion::Params(params) = suggestion else { panic!("{suggestion:?}") };
            assert_eq!(params.keys().collect::<Vec<_>>(), ["y"]);
        }

        let mut none = Tpe::new();
        assert!(matches!(none.validate(), Err(Error::NoSpace { component: "TPE" })));
        none.set_metric("loss", Mode::Min).unwrap();
        let e = none.suggest(TrialId(0)).unwrap_err();
        assert!(e.to_string().contains("no search space"), "{e}");
        // A grid in the handed space is refused as with `with_space`.
        let grid = SearchSpace::new().add("g", grid_search([1, 2]));
        assert!(matches!(Tpe::new().set_space(&grid), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn grid_is_refused_with_a_typed_error() {
        let s = SearchSpace::new().add("m", SearchSpace::new().add("g", grid_search([1, 2])));
        let e = Tpe::with_space(s).unwrap_err();
        assert!(matches!(&e, Error::Unsupported { path, .. } if path == "m.g"), "{e}");
    }

    #[test]
    fn needs_metric() {
        let mut t = Tpe::with_space(space()).unwrap();
        assert_eq!(t.suggest(TrialId(0)).unwrap_err(), Error::NotConfigured { component: NAME });
    }

    #[test]
    fn model_suggestions_stay_in_their_domains() {
        let mut t = Tpe::with_space(space()).unwrap().metric("loss").mode(Mode::Min).seed(5);
        let s = space();
        for i in 0..40 {
            let Suggestion::Params(p) = t.suggest(TrialId(i)).unwrap() else { panic!() };
            for (key, param) in s.iter() {
                if let Param::Sample(d) = param {
                    let v = p.value(key).unwrap();
                    assert!(d.contains(v), "{key} = {v:?} not in {}", d.describe());
                }
            }
            let loss = p.get::<f64>("x").unwrap().powi(2);
            let r = Metrics::from([("loss".to_string(), loss)]);
            t.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
        }
        assert_eq!(t.num_observations(), 40);
    }

    /// With the constant liar, trials suggested while others run spread out instead of piling
    /// onto the current best region.
    #[test]
    fn constant_liar_spreads_concurrent_suggestions() {
        let spread = |liar: bool| {
            let s = SearchSpace::new().add("x", uniform(0.0, 1.0).unwrap());
            let mut t = Tpe::with_space(s)
                .unwrap()
                .metric("loss")
                .mode(Mode::Min)
                .seed(3)
                .constant_liar(liar);
            for i in 0..30 {
                let Suggestion::Params(p) = t.suggest(TrialId(i)).unwrap() else { panic!() };
                let x = p.get::<f64>("x").unwrap();
                let r = Metrics::from([("loss".to_string(), (x - 0.3).abs())]);
                t.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
            }
            let xs: Vec<f64> = (30..38)
                .map(|i| match t.suggest(TrialId(i)).unwrap() {
                    Suggestion::Params(p) => p.get::<f64>("x").unwrap(),
                    _ => panic!(),
                })
                .collect();
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64
        };
        let (with, without) = (spread(true), spread(false));
        assert!(with > without, "variance with liar {with}, without {without}");
    }

    #[test]
    fn dependent_values_are_evaluated_after_sampling() {
        let s = SearchSpace::new()
            .add("hidden", choice([64, 128]))
            .add("batch", crate::space::dependent(|p| Ok(p.get::<i64>("hidden")? / 2)));
        let mut t = Tpe::with_space(s).unwrap().metric("loss").mode(Mode::Min);
        for i in 0..15 {
            let Suggestion::Params(p) = t.suggest(TrialId(i)).unwrap() else { panic!() };
            assert_eq!(p.get::<i64>("batch").unwrap() * 2, p.get::<i64>("hidden").unwrap());
            let r = Metrics::from([("loss".to_string(), 1.0)]);
            t.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
        }
    }

    #[test]
    fn missing_metric_is_typed() {
        let mut t = Tpe::with_space(space()).unwrap().metric("loss").mode(Mode::Min);
        t.suggest(TrialId(0)).unwrap();
        let r = Metrics::from([("acc".to_string(), 1.0)]);
        let e = t.on_trial_complete(TrialId(0), Some(&r), false).unwrap_err();
        assert_eq!(e, Error::MissingMetric { metric: "loss".into(), present: vec!["acc".into()] });
    }

    fn point(entries: &[(&str, Value)]) -> Params {
        entries.iter().cloned().collect()
    }

    fn params(t: &mut Tpe, id: u64) -> Params {
        match t.suggest(TrialId(id)).unwrap() {
            Suggestion::Params(p) => p,
            other => panic!("{other:?}"),
        }
    }

    fn complete(t: &mut Tpe, id: u64, loss: f64) {
        let r = Metrics::from([("loss".to_string(), loss)]);
        t.on_trial_complete(TrialId(id), Some(&r), false).unwrap();
    }

    /// Points are suggested first, in order, a partial one completed from the space; their
    /// results become observations like any trial's.
    #[test]
    fn points_are_suggested_first_and_learned_from() {
        let full = point(&[
            ("x", 1.0.into()),
            ("lr", 0.01.into()),
            ("n", 3.into()),
            ("q", 64.into()),
            ("z", 0.5.into()),
            ("c", "b".into()),
        ]);
        let partial = point(&[("c", "c".into()), ("x", (-2).into())]);
        let mut t = Tpe::with_space(space())
            .unwrap()
            .metric("loss")
            .mode(Mode::Min)
            .seed(2)
            .points_to_evaluate([full.clone(), partial]);
        assert_eq!(t.validate(), Ok(()));
        assert_eq!(params(&mut t, 0), full.with("k", 3));
        let p = params(&mut t, 1);
        assert_eq!(p.get::<String>("c").unwrap(), "c");
        assert_eq!(p.value("x"), Some(&Value::Float(-2.0)), "an integer for a float domain");
        for (key, param) in space().iter() {
            if let Param::Sample(d) = param {
                assert!(d.contains(p.value(key).unwrap()), "{key} in {}", d.describe());
            }
        }
        let third = params(&mut t, 2);
        let x = third.get::<f64>("x").unwrap();
        assert!(x != 1.0 && x != -2.0, "then a plain suggestion: {third:?}");
        complete(&mut t, 1, 0.5);
        complete(&mut t, 0, 0.25);
        assert_eq!(t.num_observations(), 2, "the points' results are observations");
        // The point trials' coordinates are the points' values.
        let first = &t.state.observations[1];
        assert_eq!(first.trial, TrialId(0));
        assert_eq!(first.coords[0], Some(1.0));
        assert_eq!(first.coords[5], Some(1.0), "choice index of \"b\"");
    }

    #[test]
    fn points_that_do_not_fit_are_refused_by_tpe() {
        let t = Tpe::with_space(space())
            .unwrap()
            .metric("loss")
            .mode(Mode::Min)
            .points_to_evaluate([point(&[("lr", 0.5.into())])]);
        let e = t.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "TPE: invalid `points_to_evaluate` = point 0: `lr` = float 0.5; expected a value of \
             loguniform(0.0001, 0.1)"
        );
        assert_eq!(t.clone().suggest(TrialId(0)).unwrap_err(), e);
        let t = Tpe::with_space(space())
            .unwrap()
            .points_to_evaluate([Params::new()])
            .evaluated_rewards([]);
        assert!(matches!(
            t.validate(),
            Err(Error::InvalidConfig { setting: "evaluated_rewards", .. })
        ));
    }

    /// Mean distance to 0.8 of the 10 suggestions after 30 evaluated points whose losses are
    /// their distances to 0.8 (or after nothing).
    fn distance_after(evaluated: bool, seed: u64) -> f64 {
        let s = SearchSpace::new()
            .add("x", uniform(0.0, 1.0).unwrap())
            .add("y", uniform(0.0, 1.0).unwrap());
        let xs: Vec<f64> = (0..30).map(|k| (f64::from(k) + 0.5) / 30.0).collect();
        let mut t = Tpe::with_space(s).unwrap().metric("loss").mode(Mode::Min).seed(seed);
        if evaluated {
            // Partial points: y is not known for them.
            t = t
                .points_to_evaluate(xs.iter().map(|x| point(&[("x", (*x).into())])))
                .evaluated_rewards(xs.iter().map(|x| (x - 0.8).abs()));
        }
        let mut total = 0.0;
        for i in 0..10 {
            let x = params(&mut t, i).get::<f64>("x").unwrap();
            assert!(!evaluated || !xs.contains(&x), "an evaluated point is not run");
            total += (x - 0.8).abs();
            complete(&mut t, i, (x - 0.8).abs());
        }
        assert_eq!(t.num_observations(), if evaluated { 40 } else { 10 });
        total / 10.0
    }

    /// Evaluated points are not run but enter the model: with good results around 0.8, the
    /// next suggestions gather there at once (without them, the first ten are random draws,
    /// about 0.34 from 0.8 on average).
    #[test]
    fn evaluated_rewards_steer_the_model() {
        let (mut with, mut without) = (0.0, 0.0);
        for seed in 0..6 {
            let (w, wo) = (distance_after(true, seed), distance_after(false, seed));
            assert!(
                w < wo,
                "seed {seed}: mean distance {w} with the evaluated points, {wo} without"
            );
            with += w / 6.0;
            without += wo / 6.0;
        }
        assert!(with < 0.1 && without > 0.3, "{with} with, {without} without");
    }

    /// Saved and restored, a TPE neither suggests its points again nor takes its evaluated
    /// points in twice, and goes on exactly as if it had not stopped.
    #[test]
    fn points_survive_a_restore() {
        let make = || {
            let points = (0..3).map(|i| point(&[("x", f64::from(i).into())]));
            Tpe::with_space(space())
                .unwrap()
                .metric("loss")
                .mode(Mode::Min)
                .seed(8)
                .points_to_evaluate(points)
        };
        let mut full = make();
        let all: Vec<Params> = (0..6)
            .map(|i| {
                let p = params(&mut full, i);
                complete(&mut full, i, f64::from(i as u32));
                p
            })
            .collect();
        let mut first = make();
        for i in 0..2 {
            assert_eq!(params(&mut first, i), all[i as usize]);
            complete(&mut first, i, f64::from(i as u32));
        }
        let json = serde_json::to_string(&first.save_state()).unwrap();
        let mut resumed = make();
        resumed.restore_state(serde_json::from_str(&json).unwrap()).unwrap();
        for i in 2..6 {
            assert_eq!(params(&mut resumed, i), all[i as usize], "trial {i}");
            complete(&mut resumed, i, f64::from(i as u32));
        }
        assert_eq!(all[2].get::<f64>("x").unwrap(), 2.0);

        let evaluated = || {
            Tpe::with_space(space())
                .unwrap()
                .metric("loss")
                .mode(Mode::Min)
                .points_to_evaluate([point(&[("x", 1.0.into())]), point(&[("x", 2.0.into())])])
                .evaluated_rewards([0.5, f64::NAN])
        };
        let mut first = evaluated();
        params(&mut first, 0);
        assert_eq!(first.num_observations(), 2);
        let json = serde_json::to_string(&first.save_state()).unwrap();
        let mut resumed = evaluated();
        resumed.restore_state(serde_json::from_str(&json).unwrap()).unwrap();
        params(&mut resumed, 1);
        assert_eq!(resumed.num_observations(), 2, "not taken in again");
        // A NaN reward is the worst observation, as a NaN result is.
        assert_eq!(resumed.state.observations[1].score, f64::NEG_INFINITY);
    }

    /// Several objectives: the good group is the best non-dominated fronts (Optuna's
    /// multi-objective TPE); on ZDT1 it finds a larger hypervolume than random search for
    /// every seed, its state restores exactly, and a reward (one number) is refused.
    #[test]
    fn several_objectives_beat_random_search_and_restore() {
        use crate::searcher::zdt::{objectives, result, run, space, xs, zdt1};
        let n = 10;
        for seed in 0..5 {
            let mut tpe = Tpe::with_space(space(n)).unwrap().seed(seed);
            tpe.set_objectives(&objectives()).unwrap();
            let mut random =
                crate::BasicVariant::new(space(n)).unwrap().seed(seed).num_samples(150);
            random.set_objectives(&objectives()).unwrap();
            let (model, rs) = (run(&mut tpe, n, 150), run(&mut random, n, 150));
            assert!(model > rs, "seed {seed}: TPE {model} against random {rs}");
            assert!(tpe.state.observations.iter().all(|o| o.scores.len() == 2));
        }
        let make = || {
            let mut s = Tpe::with_space(space(n)).unwrap().seed(3);
            s.set_objectives(&objectives()).unwrap();
            s
        };
        let mut a = make();
        run(&mut a, n, 30);
        // One trial reported and is still running: its scores are kept with it.
        let Suggestion::Params(p) = a.suggest(TrialId(30)).unwrap() else { panic!() };
        a.on_trial_result(TrialId(30), &result(zdt1(&xs(&p, n)))).unwrap();
        let json = serde_json::to_string(&a.save_state()).unwrap();
        let mut b = make();
        b.restore_state(serde_json::from_str(&json).unwrap()).unwrap();
        for s in [&mut a, &mut b] {
            s.on_trial_complete(TrialId(30), None, false).unwrap();
        }
        for t in 31..40 {
            assert_eq!(a.suggest(TrialId(t)).unwrap(), b.suggest(TrialId(t)).unwrap());
        }
        assert_eq!(a.state.observations[30].scores.len(), 2, "the last result's scores count");

        let mut rewarded = Tpe::with_space(space(n))
            .unwrap()
            .points_to_evaluate([crate::params::Params::new().with("x00", 0.5)])
            .evaluated_rewards([1.0]);
        rewarded.set_objectives(&objectives()).unwrap();
        let e = rewarded.suggest(TrialId(0)).unwrap_err().to_string();
        assert!(e.contains("`evaluated_rewards`") && e.contains("several objectives"), "{e}");
        let twice = [objectives()[1].clone(), objectives()[1].clone()];
        assert!(
            make().set_objectives(&twice).unwrap_err().to_string().contains("each metric once")
        );
    }

    /// With constraints the good group is the feasible trials': after start-up most
    /// suggestions are feasible (without, most chase the infeasible optimum) and the best
    /// feasible trial comes near the feasible optimum (0.18). A trial that lacks the
    /// constraint is infinitely infeasible, and that survives a restore.
    #[test]
    fn constraints_steer_toward_feasible_trials() {
        use crate::searcher::constrained;
        let make = |seed| -> Box<dyn Searcher> {
            Box::new(Tpe::with_space(constrained::space()).unwrap().seed(seed))
        };
        let [free, held, worst_best] = constrained::compare(make, 80, 40);
        eprintln!("TPE feasible: {free} without constraints, {held} with; best {worst_best}");
        assert!(held > 0.5 && held > free + 0.3, "{free} {held}");
        assert!(worst_best < 0.21, "{worst_best}");

        let mut s = make(3);
        constrained::configure(&mut *s, true);
        constrained::run(&mut *s, 12, 1);
        let Suggestion::Params(_) = s.suggest(TrialId(12)).unwrap() else { panic!() };
        let unconstrained = Metrics::from([("loss".to_owned(), 0.0)]);
        s.on_trial_complete(TrialId(12), Some(&unconstrained), false).unwrap();
        let saved = serde_json::to_string(&s.save_state()).unwrap();
        assert!(saved.contains("\"violation\":\"inf\""), "{saved}");
        let mut restored = make(3);
        constrained::configure(&mut *restored, true);
        restored.restore_state(serde_json::from_str(&saved).unwrap()).unwrap();
        assert_eq!(restored.suggest(TrialId(13)).unwrap(), s.suggest(TrialId(13)).unwrap());
    }
}
