//! ZDT1 for the multi-objective searchers' tests: two objectives to minimise over `n`
//! variables in [0, 1], the front at x₂… = 0.

use super::{Searcher, Suggestion};
use crate::metrics::{Metrics, Mode, Objective};
use crate::pareto::hypervolume_2d;
use crate::space::SearchSpace;
use crate::space::domain::uniform;
use crate::trial::TrialId;

/// ZDT1 with `n` variables: two objectives to minimise, the front at x₂… = 0.
pub(crate) fn zdt1(x: &[f64]) -> (f64, f64) {
    let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / (x.len() - 1) as f64;
    (x[0], g * (1.0 - (x[0] / g).sqrt()))
}

pub(crate) fn space(n: usize) -> SearchSpace {
    (0..n).fold(SearchSpace::new(), |s, i| s.add(format!("x{i:02}"), uniform(0.0, 1.0).unwrap()))
}

pub(crate) fn xs(p: &crate::params::Params, n: usize) -> Vec<f64> {
    (0..n).map(|i| p.get::<f64>(&format!("x{i:02}")).unwrap()).collect()
}

pub(crate) fn result(f: (f64, f64)) -> Metrics {
    Metrics::from([("f1".to_string(), f.0), ("f2".to_string(), f.1)])
}

pub(crate) fn objectives() -> [Objective; 2] {
    [
        Objective { metric: "f1".into(), mode: Mode::Min },
        Objective { metric: "f2".into(), mode: Mode::Min },
    ]
}

/// Runs `trials` trials of ZDT1 one after the other; the hypervolume of what they found.
pub(crate) fn run(s: &mut dyn Searcher, n: usize, trials: u64) -> f64 {
    let mut points = Vec::new();
    for t in 0..trials {
        let Suggestion::Params(p) = s.suggest(TrialId(t)).unwrap() else { panic!() };
        let f = zdt1(&xs(&p, n));
        points.push([f.0, f.1]);
        s.on_trial_complete(TrialId(t), Some(&result(f)), false).unwrap();
    }
    hypervolume_2d(&points, [1.1, 11.0])
}
