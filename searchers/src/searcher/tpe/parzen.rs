//! Parzen estimators for TPE, one parameter at a time (Optuna's univariate estimator): a
//! mixture of truncated normals (numerical parameters, optionally log-scaled and/or on a step
//! grid) or of smoothed one-hot rows (categorical), plus a prior kernel; and [`Joint`], the same
//! kernels multiplied across parameters (multivariate TPE).
//!
//! Bandwidths follow Optuna: each kernel's sigma is the larger gap to its sorted neighbours
//! (the outermost kernels use their inner gap, `consider_endpoints = false`), clipped to
//! `[(high − low) / min(100, n_kernels + 1), high − low]` ("magic clip"); the prior kernel sits
//! at the middle with sigma `high − low`. Discrete parameters work on bounds widened by half a
//! step and score a grid point by the kernel mass of its cell.

use rand::{Rng, RngExt};
use rand_distr::StandardNormal;

use crate::math::{INV_SQRT_2PI, clamp_f64, gauss_mass, log_gauss_mass, logsumexp_iter};

/// A numerical parameter as TPE sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct NumericSpec {
    /// Smallest value (a grid point when `step` is set).
    pub low: f64,
    /// Largest value (a grid point when `step` is set).
    pub high: f64,
    /// Grid step.
    pub step: Option<f64>,
    /// Model in log space.
    pub log: bool,
}

impl NumericSpec {
    pub(crate) fn transform(&self, x: f64) -> f64 {
        if self.log { x.max(f64::MIN_POSITIVE).ln() } else { x }
    }

    pub(crate) fn untransform(&self, z: f64) -> f64 {
        if self.log { z.exp() } else { z }
    }

    /// Kernel-space bounds: widened by half a step for grids, log-scaled for log parameters.
    pub(crate) fn kernel_bounds(&self) -> (f64, f64) {
        let half = self.step.map_or(0.0, |s| s / 2.0);
        (self.transform(self.low - half), self.transform(self.high + half))
    }

    /// The model coordinate at `u` in [0, 1] of the kernel-space bounds (the scale CMA-ES and
    /// the GP search in: log domains in their log, steps widened by half a step).
    pub(crate) fn at_unit(&self, u: f64) -> f64 {
        let (lo, hi) = self.kernel_bounds();
        self.untransform(lo + u * (hi - lo))
    }

    /// Where `x` sits in [0, 1] of the kernel-space bounds: [`NumericSpec::at_unit`]'s inverse.
    pub(crate) fn unit_of(&self, x: f64) -> f64 {
        let (lo, hi) = self.kernel_bounds();
        if hi > lo { ((self.transform(x) - lo) / (hi - lo)).clamp(0.0, 1.0) } else { 0.5 }
    }

    /// Put a value on the grid (if any) and inside the bounds.
    pub fn align(&self, x: f64) -> f64 {
        let x = match self.step {
            Some(s) if s > 0.0 => self.low + ((x - self.low) / s).round() * s,
            _ => x,
        };
        clamp_f64(x, self.low, self.high)
    }
}

/// The shape of one parameter.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ParamKind {
    Numeric(NumericSpec),
    /// Number of choices.
    Categorical(usize),
}

/// Estimator settings (Optuna's `_ParzenEstimatorParameters`, univariate).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ParzenSettings {
    pub prior_weight: f64,
    pub consider_magic_clip: bool,
    pub consider_endpoints: bool,
}

/// Optuna's `default_weights`: flat for fewer than 25 observations, else a linear ramp from
/// `1/n` for the oldest `n − 25` and flat for the newest 25.
pub(crate) fn default_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let ramp_len = n - 25;
    let mut w = Vec::with_capacity(n);
    let start = 1.0 / n as f64;
    for i in 0..ramp_len {
        let t = if ramp_len == 1 { 0.0 } else { i as f64 / (ramp_len - 1) as f64 };
        w.push(start + (1.0 - start) * t);
    }
    w.extend(std::iter::repeat_n(1.0, 25));
    w
}

pub(crate) enum Estimator {
    Numeric(NumericEstimator),
    Categorical { probs: Vec<f64>, log_probs: Vec<f64> },
}

pub(crate) struct NumericEstimator {
    spec: NumericSpec,
    lo: f64,
    hi: f64,
    mus: Vec<f64>,
    sigmas: Vec<f64>,
    /// Cumulative mixture weights, for picking a kernel.
    cum_weights: Vec<f64>,
    inv_sigmas: Vec<f64>,
    /// weight / (mass of the kernel inside the bounds), per kernel; continuous parameters also
    /// fold in the density's scale 1/(sigma·√(2π)).
    coef: Vec<f64>,
}

impl Estimator {
    /// Build from observations (`obs` in parameter units, or choice indices) with per-observation
    /// weights (same length).
    pub fn build(kind: &ParamKind, obs: &[f64], weights: &[f64], s: &ParzenSettings) -> Self {
        let mix = mixture(obs.len(), weights, s.prior_weight);
        match kind {
            ParamKind::Categorical(n_choices) => categorical(*n_choices, obs, &mix, s),
            ParamKind::Numeric(spec) => Estimator::Numeric(numeric(*spec, obs, &mix, s)),
        }
    }

    /// Draw `n` candidates.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R, n: usize) -> Vec<f64> {
        match self {
            Estimator::Categorical { probs, .. } => {
                (0..n).map(|_| pick(rng, probs, false) as f64).collect()
            }
            Estimator::Numeric(e) => (0..n).map(|_| e.sample_one(rng)).collect(),
        }
    }

    /// Log density (continuous parameters, in the model's space: log-scaled for log parameters)
    /// or log probability (grids and categories) at `x`.
    pub fn log_pdf(&self, x: f64) -> f64 {
        match self {
            Estimator::Categorical { log_probs, .. } => {
                let i = x as usize;
                log_probs.get(i).copied().unwrap_or(f64::NEG_INFINITY)
            }
            Estimator::Numeric(e) => e.log_pdf(x),
        }
    }
}

/// The mixture's weights: the observations' then the prior's, normalised (the prior alone
/// without observations).
fn mixture(n_obs: usize, weights: &[f64], prior_weight: f64) -> Vec<f64> {
    let mut mix: Vec<f64> = if n_obs == 0 {
        vec![1.0]
    } else {
        weights.iter().copied().chain(std::iter::once(prior_weight)).collect()
    };
    let total: f64 = mix.iter().sum();
    if total > 0.0 && total.is_finite() {
        mix.iter_mut().for_each(|w| *w /= total);
    } else {
        let n = mix.len() as f64;
        mix.iter_mut().for_each(|w| *w = 1.0 / n);
    }
    mix
}

fn cumulative(w: &[f64]) -> Vec<f64> {
    let mut sum = 0.0;
    w.iter()
        .map(|w| {
            sum += w;
            sum
        })
        .collect()
}

/// Several parameters modelled together (multivariate TPE, Optuna's default since 5.0): a
/// mixture whose kernel k is the product over the parameters of observation k's kernels (the
/// prior's last), each with its univariate bandwidth. A draw picks a kernel, then every
/// parameter from it; the density sums the kernels' products, so what the good trials had
/// together (a valley along a diagonal) is kept together.
pub(crate) struct Joint {
    cum_weights: Vec<f64>,
    log_weights: Vec<f64>,
    params: Vec<Kernels>,
}

/// One parameter's kernels, kept apart.
enum Kernels {
    /// Built with unit weights: each kernel's coefficient is its own normalisation.
    Numeric { e: NumericEstimator, log_coef: Vec<f64> },
    /// Per kernel, its choices' cumulative probabilities and their logs.
    Categorical { cum: Vec<Vec<f64>>, logs: Vec<Vec<f64>> },
}

impl Joint {
    /// From `rows` (per observation, a coordinate for each parameter of `kinds`) with their
    /// weights.
    pub fn build(
        kinds: &[ParamKind],
        rows: &[Vec<f64>],
        weights: &[f64],
        s: &ParzenSettings,
    ) -> Self {
        let mix = mixture(rows.len(), weights, s.prior_weight);
        let unit = vec![1.0; mix.len()];
        let params = kinds
            .iter()
            .enumerate()
            .map(|(j, kind)| {
                let column: Vec<f64> = rows.iter().map(|r| r[j]).collect();
                match kind {
                    ParamKind::Numeric(spec) => {
                        let e = numeric(*spec, &column, &unit, s);
                        let log_coef = e.coef.iter().map(|c| c.ln()).collect();
                        Kernels::Numeric { e, log_coef }
                    }
                    ParamKind::Categorical(n) => categorical_kernels(*n, &column, s),
                }
            })
            .collect();
        let log_weights = mix.iter().map(|w| w.ln()).collect();
        Joint { cum_weights: cumulative(&mix), log_weights, params }
    }

    /// Draw `n` points, a coordinate per parameter.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R, n: usize) -> Vec<Vec<f64>> {
        (0..n)
            .map(|_| {
                let k = pick(rng, &self.cum_weights, true);
                self.params.iter().map(|p| p.sample(rng, k)).collect()
            })
            .collect()
    }

    /// Log density of the point `x` (a coordinate per parameter).
    pub fn log_pdf(&self, x: &[f64]) -> f64 {
        logsumexp_iter(self.log_weights.iter().enumerate().map(|(k, w)| {
            w + self.params.iter().zip(x).map(|(p, x)| p.log_kernel(k, *x)).sum::<f64>()
        }))
    }
}

impl Kernels {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R, k: usize) -> f64 {
        match self {
            Kernels::Numeric { e, .. } => e.sample_kernel(rng, k),
            Kernels::Categorical { cum, .. } => pick(rng, &cum[k], true) as f64,
        }
    }

    fn log_kernel(&self, k: usize, x: f64) -> f64 {
        match self {
            Kernels::Numeric { e, log_coef } => e.log_kernel(k, log_coef[k], x),
            Kernels::Categorical { logs, .. } => {
                logs[k].get(x as usize).copied().unwrap_or(f64::NEG_INFINITY)
            }
        }
    }
}

/// Optuna's categorical kernel of an observation: `prior_weight / kernels` on every choice plus
/// 1 on the observed one, over the row's sum `total` (the prior's kernel is flat).
struct ChoiceKernel {
    base: f64,
    total: f64,
    n_choices: usize,
}

impl ChoiceKernel {
    /// For `n_obs` observations of a parameter of `n_choices` (at least 1).
    fn new(n_choices: usize, n_obs: usize, s: &ParzenSettings) -> Self {
        let base = s.prior_weight / (n_obs + 1) as f64;
        ChoiceKernel { base, total: base * n_choices as f64 + 1.0, n_choices }
    }

    /// The observation `o`'s cell at choice `c`, before dividing by `total`.
    fn cell(&self, o: f64, c: usize) -> f64 {
        let idx = (o as usize).min(self.n_choices - 1);
        self.base + if c == idx { 1.0 } else { 0.0 }
    }
}

/// Each observation's categorical kernel, then the prior's, kept apart.
fn categorical_kernels(n_choices: usize, obs: &[f64], s: &ParzenSettings) -> Kernels {
    let n_choices = n_choices.max(1);
    let kernel = ChoiceKernel::new(n_choices, obs.len(), s);
    let flat = vec![1.0 / n_choices as f64; n_choices];
    let rows: Vec<Vec<f64>> = obs
        .iter()
        .map(|&o| (0..n_choices).map(|c| kernel.cell(o, c) / kernel.total).collect())
        .chain(std::iter::once(flat))
        .collect();
    Kernels::Categorical {
        cum: rows.iter().map(|r| cumulative(r)).collect(),
        logs: rows.iter().map(|r| r.iter().map(|p| p.ln()).collect()).collect(),
    }
}

/// Index drawn from weights (`cumulative`: the slice already holds cumulative sums).
fn pick<R: Rng + ?Sized>(rng: &mut R, w: &[f64], cumulative: bool) -> usize {
    let u: f64 = rng.random();
    if cumulative {
        let total = w.last().copied().unwrap_or(0.0);
        let target = u * total;
        w.partition_point(|c| *c <= target).min(w.len().saturating_sub(1))
    } else {
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        for (i, p) in w.iter().enumerate() {
            acc += p;
            if u * total < acc {
                return i;
            }
        }
        w.len().saturating_sub(1)
    }
}

fn categorical(n_choices: usize, obs: &[f64], mix: &[f64], s: &ParzenSettings) -> Estimator {
    let n_choices = n_choices.max(1);
    let mut probs = vec![0.0; n_choices];
    if obs.is_empty() {
        probs.iter_mut().for_each(|p| *p = 1.0 / n_choices as f64);
    } else {
        let kernel = ChoiceKernel::new(n_choices, obs.len(), s);
        let prior_row = 1.0 / n_choices as f64;
        for (k, w) in mix.iter().enumerate() {
            match obs.get(k) {
                Some(&o) => {
                    for (c, p) in probs.iter_mut().enumerate() {
                        *p += w * kernel.cell(o, c) / kernel.total;
                    }
                }
                None => probs.iter_mut().for_each(|p| *p += w * prior_row),
            }
        }
    }
    let log_probs = probs.iter().map(|p| p.ln()).collect();
    Estimator::Categorical { probs, log_probs }
}

fn numeric(spec: NumericSpec, obs: &[f64], mix: &[f64], s: &ParzenSettings) -> NumericEstimator {
    let (lo, hi) = spec.kernel_bounds();
    let width = hi - lo;
    let mut mus: Vec<f64> = obs.iter().map(|x| clamp_f64(spec.transform(*x), lo, hi)).collect();
    let n = mus.len();
    let prior_mu = 0.5 * (lo + hi);

    // Optuna's univariate bandwidths.
    let mut order: Vec<usize> = (0..=n).collect();
    let with_prior: Vec<f64> = mus.iter().copied().chain(std::iter::once(prior_mu)).collect();
    order.sort_by(|a, b| with_prior[*a].total_cmp(&with_prior[*b]));
    let mut ends = Vec::with_capacity(n + 3);
    ends.push(lo);
    ends.extend(order.iter().map(|i| with_prior[*i]));
    ends.push(hi);
    let m = n + 1;
    let mut sorted_sigmas: Vec<f64> =
        (0..m).map(|i| (ends[i + 1] - ends[i]).max(ends[i + 2] - ends[i + 1])).collect();
    if !s.consider_endpoints && ends.len() >= 4 {
        sorted_sigmas[0] = ends[2] - ends[1];
        sorted_sigmas[m - 1] = ends[m] - ends[m - 1];
    }
    let mut sigmas = vec![0.0; m];
    for (rank, &i) in order.iter().enumerate() {
        sigmas[i] = sorted_sigmas[rank];
    }
    sigmas.truncate(n);
    let max_sigma = width;
    let min_sigma =
        if s.consider_magic_clip { width / (100.0f64).min(1.0 + (n + 1) as f64) } else { 1e-12 };
    for sg in &mut sigmas {
        *sg = clamp_f64(*sg, min_sigma.min(max_sigma), max_sigma);
    }
    mus.push(prior_mu);
    sigmas.push(width);

    let cum_weights = cumulative(mix);
    let continuous = spec.step.is_none();
    let coef = mix
        .iter()
        .zip(mus.iter().zip(&sigmas))
        .map(|(w, (mu, sg))| {
            let sg = sg.max(1e-300);
            // Every centre lies inside the bounds and sigma ≤ their width, so the mass inside is
            // at least ~0.34: no underflow here.
            let z = gauss_mass((lo - mu) / sg, (hi - mu) / sg).max(1e-300);
            let scale = if continuous { INV_SQRT_2PI / sg } else { 1.0 };
            w / z * scale
        })
        .collect();
    let inv_sigmas = sigmas.iter().map(|s| 1.0 / s.max(1e-300)).collect();
    NumericEstimator { spec, lo, hi, mus, sigmas, inv_sigmas, cum_weights, coef }
}

impl NumericEstimator {
    fn sample_one<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        if self.hi.partial_cmp(&self.lo) != Some(std::cmp::Ordering::Greater) {
            return self.spec.low;
        }
        let k = pick(rng, &self.cum_weights, true);
        self.sample_kernel(rng, k)
    }

    /// A draw from kernel `k` alone.
    fn sample_kernel<R: Rng + ?Sized>(&self, rng: &mut R, k: usize) -> f64 {
        if self.hi.partial_cmp(&self.lo) != Some(std::cmp::Ordering::Greater) {
            return self.spec.low;
        }
        let (mu, sigma) = (self.mus[k], self.sigmas[k].max(1e-300));
        // Rejection from the untruncated normal: every kernel centre lies inside the bounds and
        // sigma ≤ high − low, so at least ~34% of draws land inside.
        let mut z = None;
        for _ in 0..256 {
            let e: f64 = rng.sample(StandardNormal);
            let c = mu + sigma * e;
            if c >= self.lo && c <= self.hi {
                z = Some(c);
                break;
            }
        }
        let z = z.unwrap_or_else(|| clamp_f64(mu, self.lo, self.hi));
        self.spec.align(self.spec.untransform(z))
    }

    /// Kernel `k`'s log density (or log mass on a grid) at `x`, `log_coef` its coefficient's
    /// log.
    fn log_kernel(&self, k: usize, log_coef: f64, x: f64) -> f64 {
        if self.hi.partial_cmp(&self.lo) != Some(std::cmp::Ordering::Greater) {
            return 0.0;
        }
        let (mu, inv) = (self.mus[k], self.inv_sigmas[k]);
        match self.spec.step {
            None => {
                let d = (self.spec.transform(x) - mu) * inv;
                log_coef - 0.5 * d * d
            }
            Some(step) => {
                let a = self.spec.transform(x - step / 2.0).max(self.lo);
                let b = self.spec.transform(x + step / 2.0).min(self.hi);
                log_coef + log_gauss_mass((a - mu) * inv, (b - mu) * inv)
            }
        }
    }

    fn log_pdf(&self, x: f64) -> f64 {
        if self.hi.partial_cmp(&self.lo) != Some(std::cmp::Ordering::Greater) {
            return 0.0;
        }
        // Sum in linear space (one exp or two erfc per kernel); only if the whole sum is too
        // small to trust, redo it in log space.
        const TINY: f64 = 1e-280;
        let kernels = || self.mus.iter().zip(&self.inv_sigmas).zip(&self.coef);
        match self.spec.step {
            None => {
                let z = self.spec.transform(x);
                let sum: f64 = kernels()
                    .map(|((mu, inv), c)| {
                        let d = (z - mu) * inv;
                        c * (-0.5 * d * d).exp()
                    })
                    .sum();
                if sum > TINY && sum.is_finite() {
                    return sum.ln();
                }
                logsumexp_iter(kernels().map(|((mu, inv), c)| {
                    let d = (z - mu) * inv;
                    c.ln() - 0.5 * d * d
                }))
            }
            Some(step) => {
                let a = self.spec.transform(x - step / 2.0).max(self.lo);
                let b = self.spec.transform(x + step / 2.0).min(self.hi);
                let sum: f64 = kernels()
                    .map(|((mu, inv), c)| c * gauss_mass((a - mu) * inv, (b - mu) * inv))
                    .sum();
                if sum > TINY && sum.is_finite() {
                    return sum.ln();
                }
                logsumexp_iter(
                    kernels().map(|((mu, inv), c)| {
                        c.ln() + log_gauss_mass((a - mu) * inv, (b - mu) * inv)
                    }),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SearchRng;

    const S: ParzenSettings =
        ParzenSettings { prior_weight: 1.0, consider_magic_clip: true, consider_endpoints: false };

    #[test]
    fn weights_match_optuna() {
        assert_eq!(default_weights(3), vec![1.0; 3]);
        let w = default_weights(30);
        assert_eq!(w.len(), 30);
        assert!((w[0] - 1.0 / 30.0).abs() < 1e-12);
        assert_eq!(w[4], 1.0);
        assert_eq!(w[29], 1.0);
    }

    #[test]
    fn numeric_estimator_concentrates_near_observations() {
        let spec = NumericSpec { low: 0.0, high: 10.0, step: None, log: false };
        let obs = [2.0, 2.1, 1.9, 2.05];
        let e = Estimator::build(&ParamKind::Numeric(spec), &obs, &[1.0; 4], &S);
        assert!(e.log_pdf(2.0) > e.log_pdf(8.0));
        let mut rng = SearchRng::seed_from_u64(1);
        let xs = e.sample(&mut rng, 200);
        assert!(xs.iter().all(|x| (0.0..=10.0).contains(x)));
        // Magic clip keeps the 4 kernels at least 10/6 wide.
        let near = xs.iter().filter(|x| (**x - 2.0).abs() < 2.0).count();
        assert!(near > 100, "{near}");
        // Density integrates to ~1 over the bounds.
        let n = 10_000;
        let integral: f64 = (0..n)
            .map(|i| e.log_pdf((i as f64 + 0.5) * 10.0 / n as f64).exp() * 10.0 / n as f64)
            .sum();
        assert!((integral - 1.0).abs() < 1e-3, "{integral}");
    }

    #[test]
    fn discrete_log_estimator_gives_probabilities_on_the_grid() {
        let spec = NumericSpec { low: 1.0, high: 64.0, step: Some(1.0), log: true };
        let e = Estimator::build(&ParamKind::Numeric(spec), &[4.0, 5.0], &[1.0; 2], &S);
        let total: f64 = (1..=64).map(|i| e.log_pdf(f64::from(i)).exp()).sum();
        assert!((total - 1.0).abs() < 1e-3, "{total}");
        let mut rng = SearchRng::seed_from_u64(2);
        for x in e.sample(&mut rng, 100) {
            assert_eq!(x, x.round());
            assert!((1.0..=64.0).contains(&x));
        }
    }

    /// Good points in two clusters on a diagonal: the joint model puts its mass on them, where the
    /// product of the two marginals rates the off-diagonal corners as high; it is a density
    /// over the box (numerical and categorical parameters alike) and draws stay inside.
    #[test]
    fn joint_estimator_keeps_what_observations_had_together() {
        let unit = ParamKind::Numeric(NumericSpec { low: 0.0, high: 1.0, step: None, log: false });
        let along = [0.18, 0.2, 0.22, 0.78, 0.8, 0.82];
        let rows: Vec<Vec<f64>> = along.iter().map(|&v| vec![v, v]).collect();
        let joint = Joint::build(&[unit.clone(), unit.clone()], &rows, &[1.0; 6], &S);
        let x = Estimator::build(&unit, &along, &[1.0; 6], &S);
        let product = |a: f64, b: f64| x.log_pdf(a) + x.log_pdf(b);
        assert!((product(0.2, 0.2) - product(0.2, 0.8)).abs() < 1e-12);
        assert!(joint.log_pdf(&[0.2, 0.2]) > joint.log_pdf(&[0.2, 0.8]) + 1.0);
        let n = 400;
        let h = 1.0 / n as f64;
        let integral: f64 = (0..n * n)
            .map(|i| {
                let (a, b) = ((i / n) as f64 + 0.5, (i % n) as f64 + 0.5);
                joint.log_pdf(&[a * h, b * h]).exp() * h * h
            })
            .sum();
        assert!((integral - 1.0).abs() < 1e-2, "{integral}");

        let mixed = Joint::build(
            &[ParamKind::Categorical(3), unit],
            &[vec![1.0, 0.3], vec![2.0, 0.9]],
            &[1.0; 2],
            &S,
        );
        let total: f64 = (0..3)
            .map(|c| {
                (0..n)
                    .map(|i| mixed.log_pdf(&[c as f64, (i as f64 + 0.5) * h]).exp() * h)
                    .sum::<f64>()
            })
            .sum();
        assert!((total - 1.0).abs() < 1e-3, "{total}");
        assert!(mixed.log_pdf(&[1.0, 0.3]) > mixed.log_pdf(&[1.0, 0.9]));
        let mut rng = SearchRng::seed_from_u64(3);
        for point in mixed.sample(&mut rng, 200) {
            assert!([0.0, 1.0, 2.0].contains(&point[0]) && (0.0..=1.0).contains(&point[1]));
        }
    }

    #[test]
    fn categorical_estimator_prefers_observed_choices() {
        let e = Estimator::build(&ParamKind::Categorical(3), &[1.0, 1.0, 0.0], &[1.0; 3], &S);
        let p: Vec<f64> = (0..3).map(|i| e.log_pdf(f64::from(i)).exp()).collect();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(p[1] > p[0] && p[0] > p[2], "{p:?}");
    }
}
