//! rtune's GP (and TPE, and random search) on test functions with a known minimum, one trial at
//! a time, many seeds: prints, as JSON lines, the best value each run has found after every
//! trial and its seconds (`bench/gp_peers.py` runs Optuna's `GPSampler` and `TPESampler` on
//! the same functions and prints the table): Branin (2-D, minimum 0.397887) and Hartmann-6
//! (6-D in [0, 1], minimum −3.32237) from the searchers' test problems, Rosenbrock-5 (in
//! [-5, 5]^5, minimum 0).
//!
//! `cargo run --release -p rtune-searchers --example gp_vs -- [--seeds N] [--trials N]
//! [--searchers gp,tpe,random] [--functions branin,hartmann6,rosenbrock5]`
//! (default 30 seeds, 100 trials, all of them).

use rtune_searchers::{
    BasicVariant, Gp, Metrics, Mode, Params, SearchSpace, Searcher, Suggestion, Tpe, TrialId,
    uniform,
};

#[path = "../tests/it/problems.rs"]
mod problems;
use problems::Problem;

fn rosenbrock5_space() -> SearchSpace {
    (0..5)
        .fold(SearchSpace::new(), |s, i| s.add(format!("x{i}"), uniform(-5.0, 5.0).expect("valid")))
}

fn rosenbrock5(p: &Params) -> f64 {
    let x: Vec<f64> = (0..5).map(|i| p.get::<f64>(&format!("x{i}")).expect("x")).collect();
    x.windows(2).map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2)).sum()
}

/// The problem `name`: Branin and Hartmann-6 as the searchers' tests have them, and
/// Rosenbrock-5.
fn problem(name: &str) -> Problem {
    match name {
        "rosenbrock5" => {
            Problem { name: "rosenbrock5", space: rosenbrock5_space, f: rosenbrock5, optimum: 0.0 }
        }
        name => problems::problems()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no function {name}")),
    }
}

fn searcher(kind: &str, problem: &Problem, seed: u64, trials: u64) -> Box<dyn Searcher> {
    let space = (problem.space)();
    let mut searcher: Box<dyn Searcher> = match kind {
        "gp" => Box::new(Gp::with_space(space).expect("space").seed(seed)),
        "tpe" => Box::new(Tpe::with_space(space).expect("space").seed(seed)),
        "random" => {
            Box::new(BasicVariant::new(space).expect("space").num_samples(trials).seed(seed))
        }
        other => panic!("no searcher {other}"),
    };
    searcher.set_metric("f", Mode::Min).expect("metric");
    searcher
}

/// The best value after each trial of one run, and its seconds.
fn run(kind: &str, problem: &Problem, seed: u64, trials: u64) -> (Vec<f64>, f64) {
    let mut searcher = searcher(kind, problem, seed, trials);
    let mut best = f64::INFINITY;
    let mut curve = Vec::with_capacity(trials as usize);
    let started = std::time::Instant::now();
    for t in 0..trials {
        let Suggestion::Params(p) = searcher.suggest(TrialId(t)).expect("suggest") else {
            panic!("{kind} stopped at trial {t}")
        };
        let f = (problem.f)(&p);
        best = best.min(f);
        curve.push(best);
        let r = Metrics::from([("f".to_string(), f)]);
        searcher.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
    }
    (curve, started.elapsed().as_secs_f64())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut trials) = (30u64, 100u64);
    let list = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
    let mut searchers = list("gp,tpe,random");
    let mut functions = list("branin,hartmann6,rosenbrock5");
    while let Some(flag) = args.next() {
        let value = args.next().expect("a flag's value");
        match flag.as_str() {
            "--seeds" => seeds = value.parse().expect("a count"),
            "--trials" => trials = value.parse().expect("a count"),
            "--searchers" => searchers = list(&value),
            "--functions" => functions = list(&value),
            other => panic!("unknown flag {other}"),
        }
    }
    for function in &functions {
        let problem = problem(function);
        for kind in &searchers {
            for seed in 0..seeds {
                let (curve, seconds) = run(kind, &problem, seed, trials);
                let line = format!(
                    "{{\"searcher\": \"{kind}\", \"function\": \"{function}\", \"seed\": {seed}, \
                     \"seconds\": {seconds}, \"best\": {curve:?}}}"
                );
                println!("{}", line.replace("inf", "1e308"));
            }
        }
    }
}
