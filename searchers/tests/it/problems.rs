//! Benchmark problems for comparing searchers: Branin (2-D), Hartmann-6 (6-D) and a mixed
//! 10-D problem (floats, log floats, integers, log integers, categoricals). Shared by the
//! `tpe_vs_random` test and example (the example includes this file with `#[path]`).

#![allow(dead_code)]

use rtune_searchers::{
    BasicVariant, Metrics, Mode, Params, SearchSpace, Searcher, Suggestion, Tpe, TrialId, choice,
    lograndint, loguniform, randint, uniform,
};

/// A minimisation problem.
pub struct Problem {
    pub name: &'static str,
    pub space: fn() -> SearchSpace,
    pub f: fn(&Params) -> f64,
    /// Known minimum.
    pub optimum: f64,
}

fn x(p: &Params, k: &str) -> f64 {
    p.get::<f64>(k).expect("sampled float")
}

pub fn branin_space() -> SearchSpace {
    SearchSpace::new()
        .add("x1", uniform(-5.0, 10.0).expect("valid"))
        .add("x2", uniform(0.0, 15.0).expect("valid"))
}

pub fn branin(p: &Params) -> f64 {
    use std::f64::consts::PI;
    let (x1, x2) = (x(p, "x1"), x(p, "x2"));
    let b = 5.1 / (4.0 * PI * PI);
    let c = 5.0 / PI;
    let t = 1.0 / (8.0 * PI);
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}

pub const H_ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
pub const H_A: [[f64; 6]; 4] = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
];
pub const H_P: [[f64; 6]; 4] = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
];

pub fn hartmann6_space() -> SearchSpace {
    (0..6)
        .fold(SearchSpace::new(), |s, i| s.add(format!("x{i}"), uniform(0.0, 1.0).expect("valid")))
}

pub fn hartmann6(p: &Params) -> f64 {
    let xs: Vec<f64> = (0..6).map(|i| x(p, &format!("x{i}"))).collect();
    -(0..4)
        .map(|i| {
            let inner: f64 = (0..6).map(|j| H_A[i][j] * (xs[j] - H_P[i][j]).powi(2)).sum();
            H_ALPHA[i] * (-inner).exp()
        })
        .sum::<f64>()
}

/// A 10-parameter problem in the shape of a training sweep: minimum 0 at
/// `a=1, b=-2, c=0.5, d=3, lr=1e-3, wd=1e-4, n=20, hidden=128, opt=adam, act=gelu`.
pub fn mixed10_space() -> SearchSpace {
    SearchSpace::new()
        .add("a", uniform(-5.0, 5.0).expect("valid"))
        .add("b", uniform(-5.0, 5.0).expect("valid"))
        .add("c", uniform(-5.0, 5.0).expect("valid"))
        .add("d", uniform(-5.0, 5.0).expect("valid"))
        .add("lr", loguniform(1e-5, 1.0).expect("valid"))
        .add("wd", loguniform(1e-6, 1e-1).expect("valid"))
        .add("n", randint(1, 33).expect("valid"))
        .add("hidden", lograndint(1, 1025).expect("valid"))
        .add("opt", choice(["sgd", "adam", "rmsprop", "adagrad"]))
        .add("act", choice(["relu", "tanh", "gelu"]))
}

pub fn mixed10(p: &Params) -> f64 {
    let (a, b, c, d) = (x(p, "a"), x(p, "b"), x(p, "c"), x(p, "d"));
    let lr = x(p, "lr");
    let wd = x(p, "wd");
    let n = p.get::<i64>("n").expect("int") as f64;
    let hidden = p.get::<i64>("hidden").expect("int") as f64;
    let opt = match p.get::<String>("opt").expect("str").as_str() {
        "adam" => 0.0,
        "rmsprop" => 1.0,
        "adagrad" => 2.0,
        _ => 4.0,
    };
    let act = match p.get::<String>("act").expect("str").as_str() {
        "gelu" => 0.0,
        "relu" => 0.5,
        _ => 1.5,
    };
    (a - 1.0).powi(2)
        + (b + 2.0).powi(2)
        + (c - 0.5).powi(2)
        + (d - 3.0).powi(2)
        + 0.1 * (a - 1.0) * (b + 2.0)
        + (lr.log10() + 3.0).powi(2)
        + 0.5 * (wd.log10() + 4.0).powi(2)
        + ((n - 20.0) / 4.0).powi(2)
        + 0.5 * (hidden.log2() - 7.0).powi(2)
        + opt
        + act
}

pub fn problems() -> [Problem; 3] {
    [
        Problem { name: "branin", space: branin_space, f: branin, optimum: 0.397_887 },
        Problem { name: "hartmann6", space: hartmann6_space, f: hartmann6, optimum: -3.322_37 },
        Problem { name: "mixed10", space: mixed10_space, f: mixed10, optimum: 0.0 },
    ]
}

/// Best value found by `searcher` in `budget` sequential trials on `problem`.
pub fn best_of(searcher: &mut dyn Searcher, problem: &Problem, budget: u64) -> f64 {
    searcher.set_metric("loss", Mode::Min).expect("metric");
    let mut best = f64::INFINITY;
    for i in 0..budget {
        let id = TrialId(i);
        let params = match searcher.suggest(id).expect("suggest") {
            Suggestion::Params(p) => p,
            Suggestion::NotNow | Suggestion::Finished => break,
        };
        let loss = (problem.f)(&params);
        best = best.min(loss);
        let r = Metrics::from([("loss".to_string(), loss)]);
        searcher.on_trial_complete(id, Some(&r), false).expect("complete");
    }
    best
}

/// Best value found by `searcher` in `budget` trials on `problem` with `concurrency` trials in
/// flight: it is asked for trials until that many run, then the oldest completes (1 is
/// [`best_of`]).
pub fn best_of_concurrent(
    searcher: &mut dyn Searcher,
    problem: &Problem,
    budget: u64,
    concurrency: usize,
) -> f64 {
    searcher.set_metric("loss", Mode::Min).expect("metric");
    let mut best = f64::INFINITY;
    let mut live: std::collections::VecDeque<(TrialId, f64)> = Default::default();
    let mut next = 0;
    loop {
        while live.len() < concurrency.max(1) && next < budget {
            let id = TrialId(next);
            match searcher.suggest(id).expect("suggest") {
                Suggestion::Params(p) => live.push_back((id, (problem.f)(&p))),
                Suggestion::NotNow | Suggestion::Finished => break,
            }
            next += 1;
        }
        let Some((id, loss)) = live.pop_front() else { break };
        best = best.min(loss);
        let r = Metrics::from([("loss".to_string(), loss)]);
        searcher.on_trial_complete(id, Some(&r), false).expect("complete");
    }
    best
}

/// [`tpe_best`] with `concurrency` trials in flight and the constant liar on or off.
pub fn tpe_best_with(
    problem: &Problem,
    budget: u64,
    seed: u64,
    concurrency: usize,
    liar: bool,
) -> f64 {
    let mut s = Tpe::with_space((problem.space)()).expect("space").seed(seed).constant_liar(liar);
    best_of_concurrent(&mut s, problem, budget, concurrency)
}

pub fn random_best(problem: &Problem, budget: u64, seed: u64) -> f64 {
    let mut s = BasicVariant::new((problem.space)()).expect("space").num_samples(budget).seed(seed);
    best_of(&mut s, problem, budget)
}

pub fn tpe_best(problem: &Problem, budget: u64, seed: u64) -> f64 {
    let mut s = Tpe::with_space((problem.space)()).expect("space").seed(seed);
    best_of(&mut s, problem, budget)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}
