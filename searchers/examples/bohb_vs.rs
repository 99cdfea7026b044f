//! BOHB against rtune's random search with HyperBand and TPE with ASHA, on two problems of the
//! BOHB paper with budgets and no data to download, one trial at a time, many seeds: prints
//! each run's regret against the budget spent as JSON lines (`bench/bohb_peers.py` adds
//! hpbandster's BOHB and DEHB on the same problems and prints the table).
//!
//! * `counting_ones`: 8 binary choices and 8 floats in [0, 1]; at budget b samples, the value is
//!   −(the choices' sum + for each float, the mean of b Bernoulli draws of it). The true value
//!   is −(the choices' sum + the floats' sum); the optimum −16.
//! * `hartmann6`: Hartmann-6 plus Gaussian noise of sd 0.1·√(729 / b); optimum −3.32237.
//!
//! Budgets run from 9 to 729 (samples) in a trial of 81 iterations of 9 each; HyperBand and
//! ASHA cut at 1, 3, 9, 27 and 81 iterations (reduction factor 3). HyperBand fills its
//! brackets in the papers' order (the most aggressive first, `aggressive_first`), and for
//! random search also in Ray's. A trial a scheduler pauses
//! goes on from where it was (its budget so far is not spent again). The incumbent is the best
//! result at the largest budget reached so far; its regret is its true value minus the optimum.
//!
//! `cargo run --release -p rtune-searchers --example bohb_vs -- [--seeds N] [--budget UNITS]`
//! (`UNITS`: whole-budget evaluations, 81 iterations each; default 20 seeds, 64 units).

#[path = "../tests/it/problems.rs"]
mod problems;

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rtune_searchers::{
    Asha, BasicVariant, Bohb, Decision, HyperBand, Metrics, Mode, Params, SearchSpace, Searcher,
    Suggestion, Tpe, TrialId, TrialScheduler, TrialStatus, TrialTable, choice, uniform,
};

const MAX_T: u64 = 81;
const SAMPLES_PER_ITERATION: u64 = 9;

struct Problem {
    name: &'static str,
    space: fn() -> SearchSpace,
    /// The observed value after `t` iterations (noise seeded by `seed`).
    observe: fn(&Params, u64, u64) -> f64,
    /// The value without noise.
    truth: fn(&Params) -> f64,
    optimum: f64,
}

fn counting_ones_space() -> SearchSpace {
    let s = (0..8).fold(SearchSpace::new(), |s, i| s.add(format!("c{i}"), choice([0, 1])));
    (0..8).fold(s, |s, i| s.add(format!("x{i}"), uniform(0.0, 1.0).expect("valid")))
}

fn counting_ones_truth(p: &Params) -> f64 {
    let c: i64 = (0..8).map(|i| p.get::<i64>(&format!("c{i}")).expect("c")).sum();
    let x: f64 = (0..8).map(|i| p.get::<f64>(&format!("x{i}")).expect("x")).sum();
    -(c as f64 + x)
}

fn counting_ones(p: &Params, t: u64, seed: u64) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ t.wrapping_mul(0x9e37_79b9));
    let b = t * SAMPLES_PER_ITERATION;
    let c: i64 = (0..8).map(|i| p.get::<i64>(&format!("c{i}")).expect("c")).sum();
    let mut x = 0.0;
    for i in 0..8 {
        let q = p.get::<f64>(&format!("x{i}")).expect("x");
        let ones = (0..b).filter(|_| rng.random::<f64>() < q).count();
        x += ones as f64 / b as f64;
    }
    -(c as f64 + x)
}

fn hartmann6(p: &Params, t: u64, seed: u64) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ t.wrapping_mul(0x9e37_79b9));
    let b = (t * SAMPLES_PER_ITERATION) as f64;
    let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
    let gauss = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    problems::hartmann6(p) + 0.1 * (729.0 / b).sqrt() * gauss
}

/// A system compared: its name, searcher and scheduler.
type System = (&'static str, Box<dyn Searcher>, Box<dyn TrialScheduler>);

/// One run: `searcher` and `scheduler`, one trial at a time, until `budget` iterations are
/// spent; the incumbent's regret after each result, as (iterations spent, regret) where it
/// changed.
fn run(
    problem: &Problem,
    searcher: &mut dyn Searcher,
    scheduler: &mut dyn TrialScheduler,
    budget: u64,
    seed: u64,
) -> Vec<(u64, f64)> {
    searcher.set_metric("loss", Mode::Min).expect("metric");
    scheduler.set_metric("loss", Mode::Min).expect("metric");
    let mut table = TrialTable::new();
    let mut iteration: BTreeMap<TrialId, u64> = BTreeMap::new();
    let mut spent = 0;
    let mut next = 0;
    // (largest budget, best observed there, its truth)
    let mut incumbent: Option<(u64, f64, f64)> = None;
    let mut trajectory = Vec::new();
    while spent < budget {
        // As the Tuner does: a new trial only when the scheduler has nothing to run (a
        // HyperBand bracket being filled waits for its next trial, which the searcher suggests
        // from every result so far, as hpbandster's do).
        let id = match scheduler.choose_trial_to_run(&table) {
            Some(id) => id,
            None => {
                let id = TrialId(next);
                next += 1;
                let Suggestion::Params(p) = searcher.suggest(id).expect("suggest") else { break };
                table.add(id, p);
                scheduler.on_trial_add(&table, id).expect("add");
                continue;
            }
        };
        table.set_status(id, TrialStatus::Running);
        let params = table.record(id).expect("added").params.clone();
        // Runs until the scheduler pauses or stops it, or its last iteration.
        loop {
            let t = iteration.entry(id).or_default();
            *t += 1;
            let t = *t;
            spent += 1;
            let loss = (problem.observe)(&params, t, seed.wrapping_mul(1_000_003) ^ id.0);
            let result = Metrics::from([
                ("loss".to_string(), loss),
                ("training_iteration".to_string(), t as f64),
            ]);
            table.set_result(id, result.clone());
            searcher.on_trial_result(id, &result).expect("result");
            let better = match incumbent {
                None => true,
                Some((b, best, _)) => t > b || (t == b && loss < best),
            };
            if better {
                let truth = (problem.truth)(&params);
                if incumbent.is_none_or(|(_, _, old)| old != truth) {
                    trajectory.push((spent, truth - problem.optimum));
                }
                incumbent = Some((t, loss, truth));
            }
            let decision = scheduler.on_trial_result(&table, id, &result).expect("decide");
            let end = t >= MAX_T || spent >= budget;
            match decision {
                Decision::Continue if !end => continue,
                Decision::Pause if t < MAX_T => {
                    table.set_status(id, TrialStatus::Paused);
                }
                _ => {
                    table.set_status(id, TrialStatus::Terminated);
                    scheduler.on_trial_complete(&table, id, Some(&result), false).expect("end");
                    searcher.on_trial_complete(id, Some(&result), false).expect("end");
                }
            }
            break;
        }
        for stopped in scheduler.take_stop_requests() {
            table.set_status(stopped, TrialStatus::Terminated);
            scheduler.on_trial_complete(&table, stopped, None, false).expect("end");
            searcher.on_trial_complete(stopped, None, false).expect("end");
        }
    }
    trajectory
}

fn main() {
    let mut seeds = 20u64;
    let mut units = 64u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok());
        match (arg.as_str(), value) {
            ("--seeds", Some(n)) => seeds = n,
            ("--budget", Some(n)) => units = n,
            _ => {
                eprintln!("usage: bohb_vs [--seeds N] [--budget UNITS]");
                std::process::exit(2);
            }
        }
    }
    let problems = [
        Problem {
            name: "counting_ones",
            space: counting_ones_space,
            observe: counting_ones,
            truth: counting_ones_truth,
            optimum: -16.0,
        },
        Problem {
            name: "hartmann6",
            space: problems::hartmann6_space,
            observe: hartmann6,
            truth: problems::hartmann6,
            optimum: -3.322_37,
        },
    ];
    // The papers' bracket order (hpbandster's), and Ray's for random search as rtune's
    // default.
    let hyperband = |aggressive_first: bool| {
        HyperBand::new()
            .max_t(MAX_T as f64)
            .reduction_factor(3.0)
            .aggressive_first(aggressive_first)
    };
    for problem in &problems {
        for seed in 0..seeds {
            let space = (problem.space)();
            let budget = units * MAX_T;
            let random = || {
                BasicVariant::new(space.clone()).expect("space").num_samples(u64::MAX).seed(seed)
            };
            let bohb = Bohb::with_space(space.clone()).expect("space").seed(seed);
            let asha = Asha::new().max_t(MAX_T as f64).grace_period(1.0).reduction_factor(3.0);
            let systems: [System; 4] = [
                (
                    "rtune random + HyperBand, Ray's order",
                    Box::new(random()),
                    Box::new(hyperband(false)),
                ),
                ("rtune random + HyperBand", Box::new(random()), Box::new(hyperband(true))),
                ("rtune BOHB + HyperBand", Box::new(bohb), Box::new(hyperband(true))),
                (
                    "rtune TPE + ASHA",
                    Box::new(Tpe::with_space(space.clone()).expect("space").seed(seed)),
                    Box::new(asha.seed(seed)),
                ),
            ];
            for (system, mut searcher, mut scheduler) in systems {
                let trajectory = run(problem, searcher.as_mut(), scheduler.as_mut(), budget, seed);
                let points: Vec<String> = trajectory
                    .iter()
                    .map(|(spent, regret)| {
                        format!("[{:.4}, {regret:.6}]", *spent as f64 / MAX_T as f64)
                    })
                    .collect();
                println!(
                    "{{\"system\": \"{system}\", \"problem\": \"{}\", \"seed\": {seed}, \
                     \"trajectory\": [{}]}}",
                    problem.name,
                    points.join(", ")
                );
            }
        }
    }
}
