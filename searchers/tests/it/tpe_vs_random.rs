//! TPE must beat random search at equal budget (median best value over 20 seeds) on Branin,
//! Hartmann-6 and a mixed 10-D problem. Budgets are small so the test stays fast in debug.

use crate::problems::{best_of, median, problems, random_best, tpe_best};
use rtune_searchers::Tpe;

const SEEDS: u64 = 20;

#[test]
fn tpe_beats_random_search_at_equal_budget() {
    for (problem, budget) in problems().iter().zip([60, 80, 80]) {
        let random: Vec<f64> = (0..SEEDS).map(|s| random_best(problem, budget, s)).collect();
        let tpe: Vec<f64> = (0..SEEDS).map(|s| tpe_best(problem, budget, 1000 + s)).collect();
        let (r, t) = (median(random), median(tpe));
        println!("{}: random {r:.4}, tpe {t:.4} (optimum {})", problem.name, problem.optimum);
        assert!(t < r, "{}: TPE median {t} is not below random median {r}", problem.name);
    }
}

/// Multivariate TPE (the default) against TPE one parameter at a time, on Hartmann-6, whose
/// optimum lies where several coordinates are right together: the better median over 20 seeds.
#[test]
fn multivariate_tpe_beats_univariate_on_hartmann6() {
    let problem = &problems()[1];
    assert_eq!(problem.name, "hartmann6");
    let run = |multivariate: bool, seed: u64| {
        let space = (problem.space)();
        let mut s = Tpe::with_space(space).expect("space").seed(seed).multivariate(multivariate);
        best_of(&mut s, problem, 80)
    };
    let joint = median((0..SEEDS).map(|s| run(true, s)).collect());
    let single = median((0..SEEDS).map(|s| run(false, s)).collect());
    println!("hartmann6 at 80 trials: multivariate {joint:.4}, univariate {single:.4}");
    assert!(joint < single, "multivariate median {joint} is not below univariate {single}");
}
