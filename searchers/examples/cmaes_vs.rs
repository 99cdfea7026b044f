//! rtune's CMA-ES on test functions, one trial at a time, many seeds: prints, as JSON lines, the
//! best value each run has found after every trial up to the budget (`bench/cmaes_peers.py`
//! runs the `cmaes` library and Optuna's `CmaEsSampler` on the same functions and prints the
//! table). Functions over [-5, 5]^d, each with its minimum 0 inside: sphere, ellipsoid
//! (condition 1e6), Rosenbrock (at (1, ..., 1)), Rastrigin.
//!
//! `cargo run --release -p rtune-searchers --example cmaes_vs -- [--seeds N] [--trials N]
//! [--dims D,..] [--functions F,..] [--restart none|ipop|bipop]` (default 30 seeds, 500
//! trials, dims 5,10, every function, no restarts).

use rtune_searchers::{
    CmaEs, CmaEsRestart, Metrics, Mode, Params, SearchSpace, Searcher, Suggestion, TrialId, uniform,
};

/// The test function `name` at `x`.
fn value(name: &str, x: &[f64]) -> f64 {
    let d = x.len() as f64;
    match name {
        "sphere" => x.iter().map(|v| v * v).sum(),
        "ellipsoid" => x
            .iter()
            .enumerate()
            .map(|(i, v)| 1e6f64.powf(i as f64 / (d - 1.0).max(1.0)) * v * v)
            .sum(),
        "rosenbrock" => {
            x.windows(2).map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2)).sum()
        }
        "rastrigin" => {
            10.0 * d
                + x.iter()
                    .map(|v| v * v - 10.0 * (2.0 * std::f64::consts::PI * v).cos())
                    .sum::<f64>()
        }
        other => panic!("no function {other}"),
    }
}

fn space(dims: usize) -> SearchSpace {
    (0..dims).fold(SearchSpace::new(), |s, i| {
        s.add(format!("x{i:02}"), uniform(-5.0, 5.0).expect("valid"))
    })
}

/// The best value after each trial of one run.
fn run(function: &str, dims: usize, seed: u64, trials: u64, restart: CmaEsRestart) -> Vec<f64> {
    let mut cmaes = CmaEs::with_space(space(dims)).expect("numeric").restart(restart).seed(seed);
    cmaes.set_metric("f", Mode::Min).expect("metric");
    let mut best = f64::INFINITY;
    let mut curve = Vec::with_capacity(trials as usize);
    for t in 0..trials {
        let Suggestion::Params(p) = cmaes.suggest(TrialId(t)).expect("suggest") else {
            panic!("CMA-ES stopped at trial {t}")
        };
        let x: Vec<f64> = (0..dims).map(|i| x_of(&p, i)).collect();
        let f = value(function, &x);
        best = best.min(f);
        curve.push(best);
        let r = Metrics::from([("f".to_string(), f)]);
        cmaes.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
    }
    curve
}

fn x_of(p: &Params, i: usize) -> f64 {
    p.get::<f64>(&format!("x{i:02}")).expect("x")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut trials, mut dims, mut restart) =
        (30u64, 500u64, vec![5usize, 10], CmaEsRestart::None);
    let mut functions: Vec<String> =
        ["sphere", "ellipsoid", "rosenbrock", "rastrigin"].map(String::from).to_vec();
    while let Some(flag) = args.next() {
        let value = args.next().expect("a flag's value");
        match flag.as_str() {
            "--seeds" => seeds = value.parse().expect("a count"),
            "--trials" => trials = value.parse().expect("a count"),
            "--dims" => dims = value.split(',').map(|d| d.parse().expect("a count")).collect(),
            "--restart" => restart = CmaEsRestart::from_name(&value).expect("none, ipop or bipop"),
            "--functions" => functions = value.split(',').map(String::from).collect(),
            other => panic!("unknown flag {other}"),
        }
    }
    for function in &functions {
        for &d in &dims {
            for seed in 0..seeds {
                let started = std::time::Instant::now();
                let curve = run(function, d, seed, trials, restart);
                let seconds = started.elapsed().as_secs_f64();
                let line = format!(
                    "{{\"function\": \"{function}\", \"dims\": {d}, \"seed\": {seed}, \
                     \"seconds\": {seconds}, \"best\": {curve:?}}}"
                );
                println!("{}", line.replace("inf", "1e308"));
            }
        }
    }
}
