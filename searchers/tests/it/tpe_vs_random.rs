//! TPE must beat random search at equal budget (median best value over 20 seeds) on Branin,
//! Hartmann-6 and a mixed 10-D problem. Budgets are small so the test stays fast in debug.

use crate::problems::{median, problems, random_best, tpe_best};

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
