//! rtune's GP (and TPE, and random search) on test functions with a known minimum, one trial at
//! a time, many seeds: prints, as JSON lines, the best value each run has found after every
//! trial and its seconds (`bench/gp_peers.py` runs Optuna's `GPSampler` and `TPESampler` on
//! the same functions and prints the table): Branin (2-D, minimum 0.397887), Hartmann-6 (6-D in
//! [0, 1], minimum −3.32237), Rosenbrock-5 (in [-5, 5]^5, minimum 0).
//!
//! `cargo run --release -p rtune-searchers --example gp_vs -- [--seeds N] [--trials N]
//! [--searchers gp,tpe,random] [--functions branin,hartmann6,rosenbrock5]`
//! (default 30 seeds, 100 trials, all of them).

use rtune_searchers::{
    BasicVariant, Gp, Metrics, Mode, Params, SearchSpace, Searcher, Suggestion, Tpe, TrialId,
    uniform,
};

const HARTMANN_A: [[f64; 6]; 4] = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
];
const HARTMANN_P: [[f64; 6]; 4] = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
];
const HARTMANN_ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];

/// The function's dimensions and bounds.
fn bounds(name: &str) -> Vec<(f64, f64)> {
    match name {
        "branin" => vec![(-5.0, 10.0), (0.0, 15.0)],
        "hartmann6" => vec![(0.0, 1.0); 6],
        "rosenbrock5" => vec![(-5.0, 5.0); 5],
        other => panic!("no function {other}"),
    }
}

/// The test function `name` at `x`.
fn value(name: &str, x: &[f64]) -> f64 {
    match name {
        "branin" => {
            let pi = std::f64::consts::PI;
            let (b, c, t) = (5.1 / (4.0 * pi * pi), 5.0 / pi, 1.0 / (8.0 * pi));
            (x[1] - b * x[0] * x[0] + c * x[0] - 6.0).powi(2) + 10.0 * (1.0 - t) * x[0].cos() + 10.0
        }
        "hartmann6" => -(0..4)
            .map(|i| {
                let inner: f64 =
                    (0..6).map(|j| HARTMANN_A[i][j] * (x[j] - HARTMANN_P[i][j]).powi(2)).sum();
                HARTMANN_ALPHA[i] * (-inner).exp()
            })
            .sum::<f64>(),
        "rosenbrock5" => {
            x.windows(2).map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2)).sum()
        }
        other => panic!("no function {other}"),
    }
}

fn space(name: &str) -> SearchSpace {
    bounds(name).iter().enumerate().fold(SearchSpace::new(), |s, (i, (lo, hi))| {
        s.add(format!("x{i}"), uniform(*lo, *hi).expect("valid"))
    })
}

fn searcher(kind: &str, function: &str, seed: u64, trials: u64) -> Box<dyn Searcher> {
    let space = space(function);
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
fn run(kind: &str, function: &str, seed: u64, trials: u64) -> (Vec<f64>, f64) {
    let mut searcher = searcher(kind, function, seed, trials);
    let dims = bounds(function).len();
    let mut best = f64::INFINITY;
    let mut curve = Vec::with_capacity(trials as usize);
    let started = std::time::Instant::now();
    for t in 0..trials {
        let Suggestion::Params(p) = searcher.suggest(TrialId(t)).expect("suggest") else {
            panic!("{kind} stopped at trial {t}")
        };
        let x: Vec<f64> = (0..dims).map(|i| x_of(&p, i)).collect();
        let f = value(function, &x);
        best = best.min(f);
        curve.push(best);
        let r = Metrics::from([("f".to_string(), f)]);
        searcher.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
    }
    (curve, started.elapsed().as_secs_f64())
}

fn x_of(p: &Params, i: usize) -> f64 {
    p.get::<f64>(&format!("x{i}")).expect("x")
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
        for kind in &searchers {
            for seed in 0..seeds {
                let (curve, seconds) = run(kind, function, seed, trials);
                let line = format!(
                    "{{\"searcher\": \"{kind}\", \"function\": \"{function}\", \"seed\": {seed}, \
                     \"seconds\": {seconds}, \"best\": {curve:?}}}"
                );
                println!("{}", line.replace("inf", "1e308"));
            }
        }
    }
}
