//! A limited-memory BFGS that keeps to a box: the kernel's fit and the acquisition's local
//! search climb with it, as Optuna's `GPSampler` does with SciPy's L-BFGS-B.
//!
//! The direction is the two-loop recursion's over the coordinates that are free (not held at
//! a bound by a gradient pointing out of the box); a step is projected onto the box and taken
//! when it rises enough (Armijo), else halved. It stops when the free gradient is below
//! `gtol`, when a step gains next to nothing, or after `max_iter` steps.

use super::linalg::dot;

/// Steps of curvature kept.
const MEMORY: usize = 8;

/// Where the climb ended, its value, and how many steps it took.
pub(super) struct Climb {
    pub x: Vec<f64>,
    pub value: f64,
    pub steps: usize,
}

/// Maximises `f` (its value and gradient at a point; `None` where it cannot be evaluated)
/// over the box `lo..=hi` from `x0`.
pub(super) fn maximise(
    mut f: impl FnMut(&[f64]) -> Option<(f64, Vec<f64>)>,
    x0: &[f64],
    (lo, hi): (&[f64], &[f64]),
    max_iter: usize,
    gtol: f64,
) -> Option<Climb> {
    let project = |x: &mut [f64]| {
        for ((v, l), h) in x.iter_mut().zip(lo).zip(hi) {
            *v = v.clamp(*l, *h);
        }
    };
    let mut x = x0.to_vec();
    project(&mut x);
    // Minimised: the negated value and gradient.
    let negated = |(v, g): (f64, Vec<f64>)| (-v, g.into_iter().map(|g| -g).collect::<Vec<_>>());
    let (mut value, mut grad) = negated(f(&x)?);
    let mut history: Vec<(Vec<f64>, Vec<f64>, f64)> = Vec::new();
    let mut steps = 0;
    while steps < max_iter {
        // A coordinate at a bound whose descent leaves the box is held there.
        let free: Vec<bool> = (0..x.len())
            .map(|i| !((x[i] <= lo[i] && grad[i] > 0.0) || (x[i] >= hi[i] && grad[i] < 0.0)))
            .collect();
        let free_grad: Vec<f64> =
            grad.iter().zip(&free).map(|(g, &f)| if f { *g } else { 0.0 }).collect();
        if free_grad.iter().all(|g| g.abs() <= gtol) {
            break;
        }
        let mut direction = two_loop(&free_grad, &history);
        direction.iter_mut().zip(&free).for_each(|(d, &f)| *d = if f { *d } else { 0.0 });
        if dot(&direction, &free_grad) >= 0.0 {
            direction = free_grad.iter().map(|g| -g).collect();
            history.clear();
        }
        // The first step, with no curvature known, is kept short.
        let mut t = if history.is_empty() { 1.0f64.min(1.0 / norm(&free_grad)) } else { 1.0 };
        let mut accepted = None;
        for _ in 0..30 {
            let mut next: Vec<f64> = x.iter().zip(&direction).map(|(x, d)| x + t * d).collect();
            project(&mut next);
            let moved: Vec<f64> = next.iter().zip(&x).map(|(a, b)| a - b).collect();
            if moved.iter().all(|m| *m == 0.0) {
                break;
            }
            if let Some((v, g)) = f(&next).map(negated)
                && v.is_finite()
                && v <= value + 1e-4 * dot(&grad, &moved)
            {
                accepted = Some((next, v, g, moved));
                break;
            }
            t *= 0.5;
        }
        let Some((next, v, g, s)) = accepted else { break };
        steps += 1;
        let y: Vec<f64> = g.iter().zip(&grad).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > 1e-12 {
            if history.len() == MEMORY {
                history.remove(0);
            }
            history.push((s, y, 1.0 / sy));
        }
        let gained = value - v;
        (x, value, grad) = (next, v, g);
        // SciPy's default `factr`: a relative gain at the round-off of doubles.
        if gained <= 2.2e-9 * value.abs().max(1.0) {
            break;
        }
    }
    Some(Climb { x, value: -value, steps })
}

/// `-H g`, with `H` the inverse Hessian the kept steps estimate.
fn two_loop(g: &[f64], history: &[(Vec<f64>, Vec<f64>, f64)]) -> Vec<f64> {
    let mut q = g.to_vec();
    let mut alphas = Vec::with_capacity(history.len());
    for (s, y, rho) in history.iter().rev() {
        let a = rho * dot(s, &q);
        q.iter_mut().zip(y).for_each(|(q, y)| *q -= a * y);
        alphas.push(a);
    }
    if let Some((s, y, _)) = history.last() {
        let gamma = dot(s, y) / dot(y, y);
        q.iter_mut().for_each(|q| *q *= gamma);
    }
    for ((s, y, rho), a) in history.iter().zip(alphas.into_iter().rev()) {
        let b = rho * dot(y, &q);
        q.iter_mut().zip(s).for_each(|(q, s)| *q += (a - b) * s);
    }
    q.iter_mut().for_each(|q| *q = -*q);
    q
}

fn norm(v: &[f64]) -> f64 {
    dot(v, v).sqrt().max(1e-300)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rosenbrock's valley, negated: its maximum is at (1, 1).
    fn valley(x: &[f64]) -> Option<(f64, Vec<f64>)> {
        let (a, b) = (x[0], x[1]);
        let v = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
        let g = vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)];
        Some((-v, g.into_iter().map(|g| -g).collect()))
    }

    #[test]
    fn it_climbs_a_curved_valley_to_its_top() {
        let c = maximise(valley, &[-1.2, 1.0], (&[-2.0, -2.0], &[2.0, 2.0]), 500, 1e-8).unwrap();
        assert!((c.x[0] - 1.0).abs() < 1e-4 && (c.x[1] - 1.0).abs() < 1e-4, "{:?}", c.x);
        assert!(c.value > -1e-8, "{}", c.value);
    }

    #[test]
    fn a_top_outside_the_box_is_met_at_its_bound() {
        // The valley's top (1, 1) lies outside; within x ≤ 0.5 the best is on that bound.
        let c = maximise(valley, &[-1.0, 0.0], (&[-2.0, -2.0], &[0.5, 2.0]), 500, 1e-8).unwrap();
        assert_eq!(c.x[0], 0.5, "{:?}", c.x);
        assert!((c.x[1] - 0.25).abs() < 1e-4, "{:?}", c.x);
        assert!(c.steps > 0);
    }
}
