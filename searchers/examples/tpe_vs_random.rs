//! TPE against random search at equal budget on Branin (2-D), Hartmann-6 (6-D) and a mixed
//! 10-D problem, 20 seeds each. Prints the median (and quartiles) of the best value found;
//! expected: TPE's median is well below random search's on all three.
//!
//! `cargo run --release -p rtune-searchers --example tpe_vs_random`

#[path = "../tests/it/problems.rs"]
mod problems;

use problems::{median, problems, random_best, tpe_best};

const SEEDS: u64 = 20;

fn quartiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), median(v.clone()), at(0.75))
}

fn main() {
    println!(
        "{:<10} {:>6} {:>9} | {:>26} | {:>26} | {:>5}",
        "problem", "budget", "optimum", "random: median [q1, q3]", "tpe: median [q1, q3]", "wins"
    );
    for problem in problems() {
        for budget in [50u64, 100, 200] {
            let random: Vec<f64> = (0..SEEDS).map(|s| random_best(&problem, budget, s)).collect();
            let tpe: Vec<f64> = (0..SEEDS).map(|s| tpe_best(&problem, budget, 1000 + s)).collect();
            let wins = random.iter().zip(&tpe).filter(|(r, t)| t < r).count();
            let (r1, r2, r3) = quartiles(random);
            let (t1, t2, t3) = quartiles(tpe);
            println!(
                "{:<10} {:>6} {:>9.4} | {:>8.4} [{:>7.4}, {:>7.4}] | {:>8.4} [{:>7.4}, {:>7.4}] | {:>2}/{}",
                problem.name, budget, problem.optimum, r2, r1, r3, t2, t1, t3, wins, SEEDS
            );
        }
    }
}
