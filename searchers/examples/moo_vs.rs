//! NSGA-II and TPE against random search on ZDT1 and ZDT2 (30 variables in [0, 1], two objectives to
//! minimise), one trial at a time, many seeds: prints the hypervolume each run has found after
//! every 50 trials as JSON lines (`bench/moo_peers.py` adds Optuna's NSGA-II and TPE on the
//! same problems and prints the table). Reference point (1.1, 11).
//!
//! `cargo run --release -p rtune-searchers --example moo_vs -- [--seeds N] [--trials N]
//! [--population N]` (default 20 seeds, 500 trials, population 50).

use rtune_searchers::{
    BasicVariant, Metrics, Mode, Nsga2, Objective, Params, SearchSpace, Searcher, Suggestion, Tpe,
    TrialId, hypervolume_2d, uniform,
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

fn run(searcher: &mut dyn Searcher, convex: bool, trials: u64) -> Vec<(u64, f64)> {
    let objective = |metric: &str| Objective { metric: metric.into(), mode: Mode::Min };
    searcher.set_objectives(&[objective("f1"), objective("f2")]).expect("two objectives");
    let mut points = Vec::new();
    let mut curve = Vec::new();
    for t in 0..trials {
        let Suggestion::Params(p) = searcher.suggest(TrialId(t)).expect("suggest") else {
            panic!("the searcher stopped at trial {t}")
        };
        let f = zdt(&p, convex);
        points.push(f);
        let r = Metrics::from([("f1".to_string(), f[0]), ("f2".to_string(), f[1])]);
        searcher.on_trial_complete(TrialId(t), Some(&r), false).expect("complete");
        if (t + 1) % 50 == 0 {
            curve.push((t + 1, hypervolume_2d(&points, REFERENCE)));
        }
    }
    curve
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
    for (problem, convex) in [("zdt1", true), ("zdt2", false)] {
        for seed in 0..seeds {
            let nsga2 = Nsga2::new(space()).expect("space").seed(seed);
            let mut nsga2 = nsga2.population_size(population as usize);
            let random = BasicVariant::new(space()).expect("space");
            let mut random = random.seed(seed).num_samples(trials);
            let mut tpe = Tpe::new(space()).expect("space").seed(seed);
            for (system, searcher) in [
                ("rtune NSGA-II", &mut nsga2 as &mut dyn Searcher),
                ("rtune TPE", &mut tpe as &mut dyn Searcher),
                ("rtune random", &mut random as &mut dyn Searcher),
            ] {
                let curve = run(searcher, convex, trials);
                let curve: Vec<String> =
                    curve.iter().map(|(t, hv)| format!("[{t},{hv}]")).collect();
                println!(
                    r#"{{"system":"{system}","problem":"{problem}","seed":{seed},"hypervolume":[{}]}}"#,
                    curve.join(",")
                );
            }
        }
    }
}
