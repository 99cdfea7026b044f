//! A constrained problem for the searchers' constraint tests: minimise the distance² to
//! (0.8, 0.8) over [0, 1]², feasible where `x + y - 1 <= 0` (the metric `excess`). The
//! unconstrained optimum is infeasible; the feasible one is (0.5, 0.5), at 0.18.

use super::{Searcher, Suggestion};
use crate::metrics::{Metrics, Mode};
use crate::space::SearchSpace;
use crate::space::domain::uniform;
use crate::trial::TrialId;

pub(crate) fn space() -> SearchSpace {
    SearchSpace::new().add("x", uniform(0.0, 1.0).unwrap()).add("y", uniform(0.0, 1.0).unwrap())
}

/// The constraint's metric name, as the searchers are given it.
pub(crate) fn constraints() -> Vec<String> {
    vec!["excess".to_owned()]
}

/// Sets the objective (`loss`, minimised) and, if `constrained`, the constraint.
pub(crate) fn configure(s: &mut dyn Searcher, constrained: bool) {
    s.set_metric("loss", Mode::Min).unwrap();
    if constrained {
        s.set_constraints(&constraints()).unwrap();
    }
}

/// What a trial at `(x, y)` reports.
pub(crate) fn result(x: f64, y: f64) -> Metrics {
    let loss = (x - 0.8).powi(2) + (y - 0.8).powi(2);
    Metrics::from([("loss".to_owned(), loss), ("excess".to_owned(), x + y - 1.0)])
}

/// Runs `trials` trials one after the other; how many of the last `last` were feasible, and
/// the best feasible loss of all.
pub(crate) fn run(s: &mut dyn Searcher, trials: u64, last: u64) -> (u64, f64) {
    let (mut feasible, mut best) = (0, f64::INFINITY);
    for t in 0..trials {
        let Suggestion::Params(p) = s.suggest(TrialId(t)).unwrap() else { panic!("suggests") };
        let (x, y) = (p.get::<f64>("x").unwrap(), p.get::<f64>("y").unwrap());
        let r = result(x, y);
        if r["excess"] <= 0.0 {
            best = best.min(r["loss"]);
            feasible += u64::from(t >= trials - last);
        }
        s.on_trial_complete(TrialId(t), Some(&r), false).unwrap();
    }
    (feasible, best)
}

/// Over 4 seeds, the feasible trials among the last `last` of `trials`, without constraints
/// and with them, and the worst of the constrained runs' best feasible losses.
pub(crate) fn compare(make: impl Fn(u64) -> Box<dyn Searcher>, trials: u64, last: u64) -> [f64; 3] {
    let (mut free, mut held, mut worst_best) = (0, 0, 0.0f64);
    for seed in 0..4 {
        let mut s = make(seed);
        configure(&mut *s, false);
        free += run(&mut *s, trials, last).0;
        let mut s = make(seed);
        configure(&mut *s, true);
        let (feasible, best) = run(&mut *s, trials, last);
        held += feasible;
        worst_best = worst_best.max(best);
    }
    [free as f64 / (4 * last) as f64, held as f64 / (4 * last) as f64, worst_best]
}

/// TPE, NSGA-II, the GP and random search take constraints (a limiter passes them on); CMA-ES,
/// BOHB and a repeater refuse them, naming what takes them. A name given twice is refused.
#[test]
fn which_searchers_take_constraints() {
    use super::{BasicVariant, Bohb, CmaEs, ConcurrencyLimiter, Gp, Nsga2, Repeater, Tpe};
    let c = constraints();
    let takes: Vec<Box<dyn Searcher>> = vec![
        Box::new(Tpe::new()),
        Box::new(Nsga2::new()),
        Box::new(Gp::new()),
        Box::new(BasicVariant::new(space()).unwrap()),
        Box::new(ConcurrencyLimiter::new(Tpe::new(), 2).unwrap()),
    ];
    for mut s in takes {
        s.set_constraints(&c).unwrap();
        let twice = [c[0].clone(), c[0].clone()];
        let e = s.set_constraints(&twice).unwrap_err().to_string();
        assert!(e.contains("each metric once"), "{e}");
    }
    let refuses: Vec<(Box<dyn Searcher>, &str)> = vec![
        (Box::new(CmaEs::new()), "CMA-ES does not take constraints"),
        (Box::new(Bohb::new()), "BOHB does not take constraints"),
        (Box::new(Repeater::new(Tpe::new(), 2).unwrap()), "this searcher does not take"),
    ];
    for (mut s, says) in refuses {
        let e = s.set_constraints(&c).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("TPE, NSGA-II, the GP and random search"), "{e}");
    }
}
