//! The Gaussian process: a Matérn 5/2 kernel over the model's coordinates, fitted by maximum
//! marginal likelihood, and what the acquisition asks of it (the posterior's mean and spread
//! at many points at once, or at one with their gradients).

use super::lbfgs;
use super::linalg::{self, backward, cholesky, dot, forward, inverse_from};
use crate::math::{log_gauss_mass, norm_cdf};

/// Bounds of the fitted parameters' logs: length scales, kernel scale, noise variance.
const LOG_LENGTH: (f64, f64) = (-4.6, 4.6);
const LOG_SCALE: (f64, f64) = (-6.9, 6.9);
const LOG_NOISE: (f64, f64) = (-13.8, 0.0);
/// Added to the kernel's diagonal, for a Cholesky factor that never fails.
const JITTER: f64 = 1e-9;
/// The fit's climb: at most this many steps, until the gradient is below this (Optuna's
/// `gtol`).
const FIT_STEPS: usize = 200;
const FIT_GTOL: f64 = 1e-2;

/// A fitted Gaussian process over standardised values.
pub(super) struct Model {
    pub xs: Vec<Vec<f64>>,
    /// The standardised values at `xs`.
    pub y: Vec<f64>,
    /// The logs of the length scales (one per parameter: a categorical one's one-hot block
    /// shares it), the kernel scale and the noise variance.
    pub theta: Vec<f64>,
    /// Which of the length scales each coordinate has.
    scale_of: Vec<usize>,
    /// The Cholesky factor of the kernel matrix (lower, row-major) and `K⁻¹ y`.
    chol: Vec<f64>,
    alpha: Vec<f64>,
    /// The mean and standard deviation the values were standardised by.
    shift: f64,
    spread: f64,
}

/// The posterior at one point, with the gradients of its mean and spread.
pub(super) struct Posterior {
    pub mean: f64,
    pub sd: f64,
    pub d_mean: Vec<f64>,
    pub d_sd: Vec<f64>,
}

impl Model {
    /// Fits the kernel's parameters to `xs` and their values `ys` (to minimise), from `warm`
    /// where given; with `refit` false, takes `warm`'s as they are. `scale_of` names each
    /// coordinate's length scale.
    pub fn fit(
        xs: Vec<Vec<f64>>,
        ys: &[f64],
        scale_of: &[usize],
        warm: Option<&[f64]>,
        refit: bool,
    ) -> Model {
        let scales = scale_of.iter().max().map_or(0, |m| m + 1);
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        let sd = (ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / ys.len() as f64).sqrt();
        let sd = if sd > 0.0 { sd } else { 1.0 };
        let y: Vec<f64> = ys.iter().map(|v| (v - mean) / sd).collect();
        let warm = warm.filter(|w| w.len() == scales + 2);
        let mut theta = match warm {
            Some(w) => w.to_vec(),
            // Optuna's start: length scales, kernel scale and noise all 1 (the smoothest
            // account of the values, from which the climb finds the nearest).
            None => vec![0.0; scales + 2],
        };
        if warm.is_none() || refit {
            let (lo, hi): (Vec<f64>, Vec<f64>) =
                (0..scales + 2).map(|j| bounds_of(j, scales)).unzip();
            let posterior = |t: &[f64]| log_posterior(&xs, &y, scale_of, t);
            if let Some(climb) = lbfgs::maximise(posterior, &theta, (&lo, &hi), FIT_STEPS, FIT_GTOL)
            {
                theta = climb.x;
            }
        }
        let (chol, alpha) = factor(&xs, &y, scale_of, &theta);
        Model { xs, y, theta, scale_of: scale_of.to_vec(), chol, alpha, shift: mean, spread: sd }
    }

    /// The model with `pending` points observed at its mean there (the kernel's parameters
    /// kept).
    pub fn believing(self, pending: &[Vec<f64>]) -> Model {
        if pending.is_empty() {
            return self;
        }
        let (mut xs, mut y) = (self.xs.clone(), self.y.clone());
        y.extend(self.mean_sd_at(pending).into_iter().map(|(mean, _)| mean));
        xs.extend_from_slice(pending);
        let (chol, alpha) = factor(&xs, &y, &self.scale_of, &self.theta);
        Model { xs, y, chol, alpha, ..self }
    }

    /// Each coordinate's length scale.
    pub fn lengths(&self) -> Vec<f64> {
        self.scale_of.iter().map(|&j| self.theta[j].exp()).collect()
    }

    /// A value in the model's standardised units.
    pub fn standardised(&self, value: f64) -> f64 {
        (value - self.shift) / self.spread
    }

    /// The posterior mean and standard deviation at each of `xs`, solved all at once.
    pub fn mean_sd_at(&self, xs: &[Vec<f64>]) -> Vec<(f64, f64)> {
        let (n, m) = (self.xs.len(), xs.len());
        let kernel = Matern::new(&self.theta, &self.scale_of);
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
        linalg::forward_many(&self.chol, &mut k, n, m);
        let mut explained = vec![0.0; m];
        for row in k.chunks_exact(m) {
            explained.iter_mut().zip(row).for_each(|(s, v)| *s += v * v);
        }
        let sd = |e: f64| (kernel.scale - e).max(1e-12).sqrt();
        mean.into_iter().zip(explained).map(|(mean, e)| (mean, sd(e))).collect()
    }

    /// The posterior at `x`, with the gradients of its mean and standard deviation in `x`.
    pub fn posterior(&self, x: &[f64]) -> Posterior {
        let (n, d) = (self.xs.len(), x.len());
        let kernel = Matern::new(&self.theta, &self.scale_of);
        // The kernel to each observation, and its gradient in x (row i for observation i).
        let mut k = vec![0.0; n];
        let mut dk = vec![0.0; n * d];
        for (i, xi) in self.xs.iter().enumerate() {
            let a = (5.0 * kernel.r2(x, xi)).sqrt();
            let e = (-a).exp();
            k[i] = kernel.scale * (1.0 + a + a * a / 3.0) * e;
            let common = -kernel.scale * 5.0 / 3.0 * (1.0 + a) * e;
            for (q, g) in dk[i * d..(i + 1) * d].iter_mut().enumerate() {
                let w = kernel.inverse_lengths[q];
                *g = common * (x[q] - xi[q]) * w * w;
            }
        }
        let mean = dot(&k, &self.alpha);
        let v = forward(&self.chol, &k, n);
        let var = kernel.scale - dot(&v, &v);
        // K⁻¹ k: the variance's gradient is −2 (K⁻¹ k)ᵀ ∂k.
        let u = backward(&self.chol, &v, n);
        let (mut d_mean, mut d_var) = (vec![0.0; d], vec![0.0; d]);
        for i in 0..n {
            for (q, &g) in dk[i * d..(i + 1) * d].iter().enumerate() {
                d_mean[q] += self.alpha[i] * g;
                d_var[q] -= 2.0 * u[i] * g;
            }
        }
        if var <= 1e-12 {
            return Posterior { mean, sd: 1e-6, d_mean, d_sd: vec![0.0; d] };
        }
        let sd = var.sqrt();
        let d_sd = d_var.iter().map(|g| g / (2.0 * sd)).collect();
        Posterior { mean, sd, d_mean, d_sd }
    }

    /// The log of the probability that the value is at most `bound` (in the values' own
    /// units), at each of `xs`.
    pub fn log_prob_below(&self, xs: &[Vec<f64>], bound: f64) -> Vec<f64> {
        let bound = self.standardised(bound);
        let at = |(mean, sd): (f64, f64)| log_gauss_mass(f64::NEG_INFINITY, (bound - mean) / sd);
        self.mean_sd_at(xs).into_iter().map(at).collect()
    }

    /// [`Model::log_prob_below`] at one point, with its gradient.
    pub fn log_prob_below_grad(&self, x: &[f64], bound: f64) -> (f64, Vec<f64>) {
        let p = self.posterior(x);
        let z = (self.standardised(bound) - p.mean) / p.sd;
        let value = log_gauss_mass(f64::NEG_INFINITY, z);
        let slope = inverse_mills(z);
        (value, p.dz(z).map(|dz| slope * dz).collect())
    }

    /// The log of the expected improvement below `best` (standardised), at each of `xs`.
    pub fn log_ei(&self, xs: &[Vec<f64>], best: f64) -> Vec<f64> {
        let at = |(mean, sd): (f64, f64)| sd.ln() + log_h((best - mean) / sd);
        self.mean_sd_at(xs).into_iter().map(at).collect()
    }

    /// [`Model::log_ei`] at one point, with its gradient.
    pub fn log_ei_grad(&self, x: &[f64], best: f64) -> (f64, Vec<f64>) {
        let p = self.posterior(x);
        let z = (best - p.mean) / p.sd;
        let value = p.sd.ln() + log_h(z);
        // d log h / dz = Φ(z) / h(z).
        let slope = cdf_over_h(z);
        let grad = p.dz(z).zip(&p.d_sd).map(|(dz, ds)| ds / p.sd + slope * dz).collect();
        (value, grad)
    }
}

impl Posterior {
    /// The gradient of `z = (c − mean) / sd` for a constant `c`, given `z`.
    fn dz(&self, z: f64) -> impl Iterator<Item = f64> + '_ {
        self.d_mean.iter().zip(&self.d_sd).map(move |(dm, ds)| -(dm + z * ds) / self.sd)
    }
}

/// `log(φ(z) + z Φ(z))`, stable for very negative `z`.
pub(super) fn log_h(z: f64) -> f64 {
    let log_phi = -0.5 * z * z - 0.5 * (2.0 * std::f64::consts::PI).ln();
    if z > -5.0 {
        (log_phi.exp() + z * norm_cdf(z)).max(1e-300).ln()
    } else {
        let z2 = z * z;
        log_phi - 2.0 * (-z).ln() + (1.0 - 3.0 / z2 + 15.0 / (z2 * z2)).ln()
    }
}

/// `Φ(z) / (φ(z) + z Φ(z))`, the slope of [`log_h`]; its asymptotic form for very negative
/// `z`, as `log_h`'s.
fn cdf_over_h(z: f64) -> f64 {
    if z > -5.0 {
        let phi = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
        norm_cdf(z) / (phi + z * norm_cdf(z)).max(1e-300)
    } else {
        // The derivative of log_h's own form there.
        let (z2, z4) = (z * z, z.powi(4));
        -z - 2.0 / z + (6.0 / (z2 * z) - 60.0 / (z4 * z)) / (1.0 - 3.0 / z2 + 15.0 / z4)
    }
}

/// `φ(z) / Φ(z)`, the slope of `log Φ`; its asymptotic form where `Φ(z)` underflows.
fn inverse_mills(z: f64) -> f64 {
    if z > -35.0 {
        let phi = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
        phi / norm_cdf(z).max(1e-300)
    } else {
        let z2 = z * z;
        -z / (1.0 - 1.0 / z2 + 3.0 / (z2 * z2))
    }
}

/// The bounds of `theta[j]`, with `scales` length scales before the kernel scale and noise.
fn bounds_of(j: usize, scales: usize) -> (f64, f64) {
    match j {
        j if j < scales => LOG_LENGTH,
        j if j == scales => LOG_SCALE,
        _ => LOG_NOISE,
    }
}

/// The Matérn 5/2 kernel under `theta`, its exponentials taken once.
struct Matern {
    /// Per coordinate.
    inverse_lengths: Vec<f64>,
    scale: f64,
}

impl Matern {
    fn new(theta: &[f64], scale_of: &[usize]) -> Matern {
        Matern {
            inverse_lengths: scale_of.iter().map(|&j| (-theta[j]).exp()).collect(),
            scale: theta[theta.len() - 2].exp(),
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
fn kernel_matrix(xs: &[Vec<f64>], scale_of: &[usize], theta: &[f64]) -> Vec<f64> {
    let n = xs.len();
    let kernel = Matern::new(theta, scale_of);
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
fn factor(xs: &[Vec<f64>], y: &[f64], scale_of: &[usize], theta: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let n = xs.len();
    let chol = cholesky(&kernel_matrix(xs, scale_of, theta), n);
    let alpha = backward(&chol, &forward(&chol, y, n), n);
    (chol, alpha)
}

/// The log marginal likelihood of `y` at `xs` under `theta`, plus weak log-normal priors on
/// the parameters (length scales about 0.5, the kernel scale about 1, the noise about 1e-3,
/// each within a factor of e² or so), and its gradient in `theta`.
pub(super) fn log_posterior(
    xs: &[Vec<f64>],
    y: &[f64],
    scale_of: &[usize],
    theta: &[f64],
) -> Option<(f64, Vec<f64>)> {
    let n = xs.len();
    let scales = theta.len() - 2;
    let k = kernel_matrix(xs, scale_of, theta);
    let chol = cholesky(&k, n);
    let alpha = backward(&chol, &forward(&chol, y, n), n);
    let log_det: f64 = (0..n).map(|i| chol[i * n + i].ln()).sum::<f64>() * 2.0;
    let fit: f64 = y.iter().zip(&alpha).map(|(a, b)| a * b).sum();
    let mut value = -0.5 * fit - 0.5 * log_det;
    // K⁻¹, for W = α αᵀ − K⁻¹.
    let inv = inverse_from(&chol, n);
    let kernel = Matern::new(theta, scale_of);
    let w = |i: usize, j: usize| alpha[i] * alpha[j] - inv[i * n + j];
    let mut grad = vec![0.0; scales + 2];
    let noise = theta[scales + 1].exp();
    for i in 0..n {
        for j in 0..n {
            let wij = w(i, j);
            let kij = k[i * n + j] - if i == j { noise + JITTER } else { 0.0 };
            grad[scales] += 0.5 * wij * kij;
            if i == j {
                grad[scales + 1] += 0.5 * wij * noise;
                continue;
            }
            let s5r = (5.0 * kernel.r2(&xs[i], &xs[j])).sqrt();
            let common = kernel.scale * 5.0 / 3.0 * (1.0 + s5r) * (-s5r).exp();
            for (q, &s) in scale_of.iter().enumerate() {
                let u = (xs[i][q] - xs[j][q]) * kernel.inverse_lengths[q];
                grad[s] += 0.5 * wij * common * u * u;
            }
        }
    }
    // Priors, as Optuna's (on the parameters themselves, taken at their logs): on each
    // inverse squared length scale λ, −0.1/λ − 0.1λ (length scales near 1, the
    // coordinates' range); on the kernel scale, Gamma(2, 1); on the noise, Gamma(1.1, 30).
    for (j, g) in grad.iter_mut().enumerate() {
        let (p, dp) = match j {
            j if j < scales => {
                let lambda = (-2.0 * theta[j]).exp();
                (-0.1 / lambda - 0.1 * lambda, -0.2 / lambda + 0.2 * lambda)
            }
            j if j == scales => (theta[j] - theta[j].exp(), 1.0 - theta[j].exp()),
            _ => (0.1 * theta[j] - 30.0 * theta[j].exp(), 0.1 - 30.0 * theta[j].exp()),
        };
        value += p;
        *g += dp;
    }
    value.is_finite().then_some((value, grad))
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;
    use crate::rng::SearchRng;

    fn points(n: usize, d: usize, seed: u64) -> Vec<Vec<f64>> {
        let mut rng = SearchRng::seed_from_u64(seed);
        (0..n).map(|_| (0..d).map(|_| rng.random::<f64>()).collect()).collect()
    }

    /// `grad` against central differences of `f` at `x`.
    fn check_gradient(f: impl Fn(&[f64]) -> f64, x: &[f64], grad: &[f64]) {
        for j in 0..x.len() {
            let h = 1e-6;
            let (mut up, mut down) = (x.to_vec(), x.to_vec());
            up[j] += h;
            down[j] -= h;
            let numeric = (f(&up) - f(&down)) / (2.0 * h);
            assert!(
                (numeric - grad[j]).abs() < 1e-4 * (1.0 + numeric.abs()),
                "{j} at {x:?}: {numeric} against {}",
                grad[j]
            );
        }
    }

    /// The marginal likelihood's gradient is its derivative, in every parameter: on random
    /// points of 4 coordinates, the last two a categorical block sharing one length scale.
    #[test]
    fn the_likelihood_gradient_is_its_derivative() {
        let xs = points(12, 4, 1);
        let y: Vec<f64> = xs.iter().map(|x| (x[0] * 3.0).sin() + x[1] * x[1] - x[2]).collect();
        let scale_of = [0, 1, 2, 2];
        let theta = vec![-0.7, 0.2, -1.1, 0.3, -4.0];
        let (_, grad) = log_posterior(&xs, &y, &scale_of, &theta).unwrap();
        check_gradient(|t| log_posterior(&xs, &y, &scale_of, t).unwrap().0, &theta, &grad);
    }

    /// The acquisition's parts have the gradients the local search climbs: the posterior's
    /// mean and spread, the log expected improvement and the log probability of a bound, at
    /// points near and far from the observations.
    #[test]
    fn the_posteriors_gradients_are_its_derivatives() {
        let xs = points(15, 3, 2);
        let y: Vec<f64> = xs.iter().map(|x| (x[0] * 4.0).cos() + x[1] - 2.0 * x[2]).collect();
        let model = Model::fit(xs.clone(), &y, &[0, 1, 2], None, true);
        let best = model.y.iter().copied().fold(f64::INFINITY, f64::min);
        for x in points(6, 3, 3).into_iter().chain([vec![0.0, 1.0, 0.5]]) {
            let p = model.posterior(&x);
            check_gradient(|x| model.posterior(x).mean, &x, &p.d_mean);
            check_gradient(|x| model.posterior(x).sd, &x, &p.d_sd);
            let (ei, grad) = model.log_ei_grad(&x, best);
            assert!((ei - model.log_ei(std::slice::from_ref(&x), best)[0]).abs() < 1e-9);
            check_gradient(|x| model.log_ei_grad(x, best).0, &x, &grad);
            let (_, grad) = model.log_prob_below_grad(&x, 0.5);
            check_gradient(|x| model.log_prob_below_grad(x, 0.5).0, &x, &grad);
        }
    }

    /// The slopes of log h and log Φ agree with their derivatives on both sides of the
    /// switch to their asymptotic forms.
    #[test]
    fn the_tails_slopes_are_their_derivatives() {
        let log_cdf = |z: f64| log_gauss_mass(f64::NEG_INFINITY, z);
        for z in [-40.0, -30.0, -8.0, -5.01, -4.99, -2.0, 0.0, 1.5, 4.0] {
            // Wide enough for erfc's rounding, narrow enough for the curvature.
            let h = 1e-3;
            let slope = (log_h(z + h) - log_h(z - h)) / (2.0 * h);
            assert!((slope - cdf_over_h(z)).abs() < 1e-3 * slope.abs().max(1.0), "h at {z}");
            let slope = (log_cdf(z + h) - log_cdf(z - h)) / (2.0 * h);
            assert!((slope - inverse_mills(z)).abs() < 1e-3 * slope.abs().max(1.0), "Φ at {z}");
        }
    }

    /// With little noise the posterior goes through the observations, with almost no spread
    /// there, and the Cholesky factor reproduces the kernel matrix.
    #[test]
    fn the_posterior_interpolates_its_observations() {
        let xs = vec![vec![0.1, 0.2], vec![0.5, 0.9], vec![0.8, 0.3], vec![0.3, 0.6]];
        let y = [1.0, -0.5, 0.25, 2.0];
        let model = Model::fit(xs.clone(), &y, &[0, 1], None, true);
        for ((mean, sd), want) in model.mean_sd_at(&xs).into_iter().zip(&model.y) {
            assert!((mean - want).abs() < 0.05 && sd < 0.1, "{mean} {want} {sd}");
        }
        let n = xs.len();
        let k = kernel_matrix(&xs, &[0, 1], &model.theta);
        for i in 0..n {
            for j in 0..n {
                let back: f64 = (0..n).map(|q| model.chol[i * n + q] * model.chol[j * n + q]).sum();
                assert!((back - k[i * n + j]).abs() < 1e-9);
            }
        }
    }
}
