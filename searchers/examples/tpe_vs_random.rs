//! TPE against random search at equal budget on Branin (2-D), Hartmann-6 (6-D) and a mixed
//! 10-D problem, 20 seeds each. Prints the median (and quartiles) of the best value found;
//! expected: TPE's median is well below random search's on all three.
//!
//! `cargo run --release -p rtune-searchers --example tpe_vs_random`
//!
//! Options: `--concurrency N` keeps N trials in flight (the oldest completes before the next
//! suggestion; default 1), `--liar on|off|both` sets TPE's constant liar (default on; `both`
//! prints TPE with and without it side by side, and how often the liar's run ended better).
//! The numbers in the TPE docs come from
//! `cargo run --release -p rtune-searchers --example tpe_vs_random -- --concurrency 1 --liar both`
//! and the same with `--concurrency 4`.

#[path = "../tests/it/problems.rs"]
mod problems;

use problems::{median, problems, random_best, tpe_best_with};

const SEEDS: u64 = 20;

fn quartiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), median(v.clone()), at(0.75))
}

fn cell(v: &[f64]) -> String {
    let (q1, q2, q3) = quartiles(v.to_vec());
    format!("{q2:>8.4} [{q1:>7.4}, {q3:>7.4}]")
}

fn usage() -> ! {
    eprintln!("usage: tpe_vs_random [--concurrency N] [--liar on|off|both]");
    std::process::exit(2)
}

fn main() {
    let mut concurrency = 1usize;
    let mut liars = vec![true];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--concurrency", Some(n)) => concurrency = n.parse().unwrap_or_else(|_| usage()),
            ("--liar", Some(v)) => {
                liars = match v.as_str() {
                    "on" => vec![true],
                    "off" => vec![false],
                    "both" => vec![true, false],
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    println!("{concurrency} trial(s) in flight, {SEEDS} seeds; best value found: median [q1, q3]");
    let mut header =
        format!("{:<10} {:>6} {:>9} | {:>26}", "problem", "budget", "optimum", "random");
    for liar in &liars {
        let name = if *liar { "tpe, liar on" } else { "tpe, liar off" };
        header += &format!(" | {name:>26} | {:>5}", "wins");
    }
    if liars.len() == 2 {
        header += &format!(" | {:>9}", "on < off");
    }
    println!("{header}");
    for problem in problems() {
        for budget in [50u64, 100, 200] {
            let random: Vec<f64> = (0..SEEDS).map(|s| random_best(&problem, budget, s)).collect();
            let mut line = format!(
                "{:<10} {:>6} {:>9.4} | {}",
                problem.name,
                budget,
                problem.optimum,
                cell(&random)
            );
            let mut runs = Vec::new();
            for liar in &liars {
                let tpe: Vec<f64> = (0..SEEDS)
                    .map(|s| tpe_best_with(&problem, budget, 1000 + s, concurrency, *liar))
                    .collect();
                let wins = random.iter().zip(&tpe).filter(|(r, t)| t < r).count();
                line += &format!(" | {} | {wins:>2}/{SEEDS}", cell(&tpe));
                runs.push(tpe);
            }
            if let [on, off] = &runs[..] {
                let better = on.iter().zip(off).filter(|(a, b)| a < b).count();
                line += &format!(" | {better:>6}/{SEEDS}");
            }
            println!("{line}");
        }
    }
}
