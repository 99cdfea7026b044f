//! rtune's multi-fidelity schedulers on mfhpo-benchmark-api's synthetic MF-Hartmann-6 and
//! MF-Branin, with 1 or more workers in simulated time, many seeds: prints each run's regret
//! over simulated seconds as JSON lines. `bench/hpo_mf.py` (`make bench-hpo`) runs the peers
//! (Syne Tune's ASHA, BOHB and DEHB, the `dehb` package) on the same protocol and prints the
//! tables.
//!
//! The protocol (the script's docstring says it whole):
//! * Tasks: the package's `MFHartmann(dim=6)` and `MFBranin()` with one fidelity, epochs 11 to
//!   99 (`min_fidel=11, max_fidel=99`, so z = epoch / 99), `runtime_factor=3600`: the loss at
//!   epoch f plus Gaussian noise of sd √0.05 drawn afresh at every report, and the seconds to
//!   train to epoch f from scratch. `--check` prints the noiseless values at a few points for
//!   the script to compare with the package's.
//! * A trial reports at epochs 11, 22, .., 99 (iterations 1 to 9 to the schedulers); every
//!   scheduler cuts at epochs 11, 33 and 99 (reduction factor 3). Going on from epoch f1 to f2
//!   costs runtime(f2) − runtime(f1): a paused trial resumes from where it stopped, as from a
//!   checkpoint.
//! * `--workers W` run at once; the budget is 100 full-fidelity evaluations' time (360,000
//!   simulated seconds), whatever W.
//! * The incumbent is the best observed loss at the largest epoch reached so far; its regret is
//!   its configuration's noiseless loss at epoch 99 minus the optimum.
//!
//! Systems: random search with ASHA (Ray's default pairing), random search with HyperBand
//! (Ray's bracket order, its default), BOHB with HyperBand (the papers' order, as the sweep
//! file's `search = "bohb"` sets it) and TPE with ASHA.
//!
//! `cargo run --release -p rtune-searchers --example mf_vs -- [--seeds N] [--workers W]
//! [--tasks mf-hartmann6,mf-branin] [--check]` (default 30 seeds, 1 worker, both tasks).

#[path = "../tests/it/problems.rs"]
mod problems;

use std::collections::BTreeMap;
use std::f64::consts::PI;

use rand::{RngExt, SeedableRng};
use rtune_searchers::{
    Asha, BasicVariant, Bohb, Decision, HyperBand, Metrics, Mode, Params, SearchSpace, Searcher,
    Suggestion, Tpe, TrialId, TrialScheduler, TrialStatus, TrialTable, uniform,
};

/// Iterations 1..=9 are epochs 11, 22, .., 99.
const ITERATIONS: u64 = 9;
const EPOCHS_PER_ITERATION: f64 = 11.0;
const MAX_EPOCH: f64 = 99.0;
/// The package's `runtime_factor`: seconds to train to the last epoch, give or take.
const RUNTIME_FACTOR: f64 = 3600.0;
/// The simulated time a run gets: 100 full-fidelity evaluations.
const BUDGET_S: f64 = 100.0 * RUNTIME_FACTOR;
const NOISE_SD: f64 = 0.223_606_797_749_979; // √0.05, both tasks

struct Task {
    name: &'static str,
    dim: usize,
    /// The noiseless loss of x at fidelity z = epoch / 99.
    loss: fn(&[f64], f64) -> f64,
    /// The seconds to train x to fidelity z from scratch.
    runtime: fn(&[f64], f64) -> f64,
    optimum: f64,
}

/// Hartmann-6 whose weights shrink by 0.1·(1 − z) at lower fidelities (the Dragonfly paper's
/// bias, the package's default).
fn mf_hartmann6(x: &[f64], z: f64) -> f64 {
    use problems::{H_A, H_ALPHA, H_P};
    -(0..4)
        .map(|k| {
            let r: f64 = (0..6).map(|j| H_A[k][j] * (x[j] - H_P[k][j]).powi(2)).sum();
            (H_ALPHA[k] - 0.1 * (1.0 - z)) * (-r).exp()
        })
        .sum::<f64>()
}

fn mf_hartmann6_runtime(_: &[f64], z: f64) -> f64 {
    // The package's mean of (z1, z3, z2², z4³), one fidelity standing for all four.
    (0.1 + 0.9 * (z + z + z * z + z * z * z) / 4.0) * RUNTIME_FACTOR
}

/// Branin on [-5, 10] × [0, 15] (x in [0, 1]²) whose b, c and t drift at lower fidelities.
fn mf_branin(x: &[f64], z: f64) -> f64 {
    let (x1, x2) = (15.0 * x[0] - 5.0, 15.0 * x[1]);
    let b = 5.1 / (4.0 * PI * PI) - 1e-2 * (1.0 - z);
    let c = 5.0 / PI - 0.1 * (1.0 - z);
    let t = 1.0 / (8.0 * PI) + 5e-3 * (1.0 - z);
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}

fn mf_branin_runtime(_: &[f64], z: f64) -> f64 {
    (0.05 + 0.95 * z.powf(1.5)) * RUNTIME_FACTOR
}

const TASKS: [Task; 2] = [
    Task {
        name: "mf-hartmann6",
        dim: 6,
        loss: mf_hartmann6,
        runtime: mf_hartmann6_runtime,
        optimum: -3.322_37,
    },
    Task {
        name: "mf-branin",
        dim: 2,
        loss: mf_branin,
        runtime: mf_branin_runtime,
        optimum: 0.397_887,
    },
];

fn fidelity(iteration: u64) -> f64 {
    iteration as f64 * EPOCHS_PER_ITERATION / MAX_EPOCH
}

fn space(dim: usize) -> SearchSpace {
    (0..dim).fold(SearchSpace::new(), |s, i| s.add(format!("x{i}"), uniform(0.0, 1.0).expect("ok")))
}

fn xs(p: &Params, dim: usize) -> Vec<f64> {
    (0..dim).map(|i| p.get::<f64>(&format!("x{i}")).expect("x")).collect()
}

fn gaussian(rng: &mut rand::rngs::StdRng) -> f64 {
    let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A trial on a worker: its next report's iteration and simulated time.
struct Busy {
    trial: TrialId,
    iteration: u64,
    at: f64,
}

/// The incumbent: the best observed loss at the largest iteration reached so far.
#[derive(Default)]
struct Incumbent {
    best: Option<(u64, f64)>,
    regret: Option<f64>,
    trajectory: Vec<(f64, f64)>,
}

impl Incumbent {
    fn observe(&mut self, now: f64, iteration: u64, loss: f64, regret: impl FnOnce() -> f64) {
        let better = match self.best {
            None => true,
            Some((at, best)) => iteration > at || (iteration == at && loss < best),
        };
        if !better {
            return;
        }
        self.best = Some((iteration, loss));
        let regret = regret();
        if self.regret != Some(regret) {
            self.trajectory.push((now, regret));
            self.regret = Some(regret);
        }
    }
}

/// One run of `searcher` and `scheduler` on `task` with `workers` slots, as the Tuner runs
/// them: a free slot takes the trial the scheduler chooses, else a new one from the searcher.
/// The incumbent's regret over simulated seconds, where it changed, and the epochs trained by
/// the budget's end.
fn run(
    task: &Task,
    searcher: &mut dyn Searcher,
    scheduler: &mut dyn TrialScheduler,
    workers: usize,
    seed: u64,
) -> (Vec<(f64, f64)>, f64) {
    searcher.set_metric("loss", Mode::Min).expect("metric");
    scheduler.set_metric("loss", Mode::Min).expect("metric");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 7);
    let mut table = TrialTable::new();
    let mut done: BTreeMap<TrialId, u64> = BTreeMap::new();
    let mut configs: BTreeMap<TrialId, Vec<f64>> = BTreeMap::new();
    let mut slots: Vec<Option<Busy>> = (0..workers).map(|_| None).collect();
    let mut incumbent = Incumbent::default();
    let mut next = 0;
    let mut epochs = 0.0;
    let mut now = 0.0;
    let mut finished = false;
    loop {
        // Fill the free slots at `now`.
        for slot in slots.iter_mut() {
            while slot.is_none() && !finished {
                let id = match scheduler.choose_trial_to_run(&table) {
                    Some(id) => id,
                    None => {
                        let id = TrialId(next);
                        match searcher.suggest(id).expect("suggest") {
                            Suggestion::Params(p) => {
                                next += 1;
                                configs.insert(id, xs(&p, task.dim));
                                table.add(id, p);
                                scheduler.on_trial_add(&table, id).expect("add");
                                continue;
                            }
                            Suggestion::NotNow => break,
                            Suggestion::Finished => {
                                finished = true;
                                break;
                            }
                        }
                    }
                };
                table.set_status(id, TrialStatus::Running);
                let from = *done.get(&id).unwrap_or(&0);
                let x = &configs[&id];
                let cost = (task.runtime)(x, fidelity(from + 1))
                    - if from == 0 { 0.0 } else { (task.runtime)(x, fidelity(from)) };
                *slot = Some(Busy { trial: id, iteration: from + 1, at: now + cost });
            }
        }
        // The next report.
        let Some(slot) = (0..workers).filter(|&s| slots[s].is_some()).min_by(|&a, &b| {
            slots[a].as_ref().unwrap().at.total_cmp(&slots[b].as_ref().unwrap().at)
        }) else {
            break;
        };
        let Busy { trial: id, iteration: t, at } = slots[slot].take().expect("busy");
        if at > BUDGET_S {
            break;
        }
        now = at;
        done.insert(id, t);
        epochs += EPOCHS_PER_ITERATION;
        let x = configs[&id].clone();
        let loss = (task.loss)(&x, fidelity(t)) + NOISE_SD * gaussian(&mut rng);
        incumbent.observe(now, t, loss, || (task.loss)(&x, 1.0) - task.optimum);
        let result = Metrics::from([
            ("loss".to_string(), loss),
            ("training_iteration".to_string(), t as f64),
        ]);
        table.set_result(id, result.clone());
        searcher.on_trial_result(id, &result).expect("result");
        match scheduler.on_trial_result(&table, id, &result).expect("decide") {
            Decision::Continue if t < ITERATIONS => {
                let cost = (task.runtime)(&x, fidelity(t + 1)) - (task.runtime)(&x, fidelity(t));
                slots[slot] = Some(Busy { trial: id, iteration: t + 1, at: now + cost });
            }
            Decision::Pause if t < ITERATIONS => table.set_status(id, TrialStatus::Paused),
            _ => {
                table.set_status(id, TrialStatus::Terminated);
                scheduler.on_trial_complete(&table, id, Some(&result), false).expect("end");
                searcher.on_trial_complete(id, Some(&result), false).expect("end");
            }
        }
        for stopped in scheduler.take_stop_requests() {
            // A running trial stopped by another's result gives its slot back now.
            if let Some(s) =
                slots.iter().position(|b| b.as_ref().is_some_and(|b| b.trial == stopped))
            {
                slots[s] = None;
            }
            table.set_status(stopped, TrialStatus::Terminated);
            scheduler.on_trial_complete(&table, stopped, None, false).expect("end");
            searcher.on_trial_complete(stopped, None, false).expect("end");
        }
    }
    (incumbent.trajectory, epochs)
}

/// The noiseless loss and runtime at a few fixed points, for the script to check against
/// the package.
fn check() {
    let points = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.2017, 0.15, 0.477, 0.2753, 0.3117, 0.6573]];
    for task in &TASKS {
        for x in &points {
            let x = &x[..task.dim];
            for t in [1, 4, 9] {
                println!(
                    "{{\"task\": \"{}\", \"x\": {x:?}, \"epoch\": {}, \"loss\": {:.17e}, \
                     \"runtime\": {:.17e}}}",
                    task.name,
                    t * 11,
                    (task.loss)(x, fidelity(t)),
                    (task.runtime)(x, fidelity(t))
                );
            }
        }
    }
}

type System = (&'static str, Box<dyn Searcher>, Box<dyn TrialScheduler>);

fn main() {
    let mut seeds = 30u64;
    let mut workers = 1usize;
    let mut tasks: Vec<String> = TASKS.iter().map(|t| t.name.to_string()).collect();
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!(
            "usage: mf_vs [--seeds N] [--workers W] [--tasks mf-hartmann6,mf-branin] [--check]"
        );
        std::process::exit(2)
    };
    while let Some(flag) = args.next() {
        if flag == "--check" {
            check();
            return;
        }
        let Some(value) = args.next() else { usage() };
        match flag.as_str() {
            "--seeds" => seeds = value.parse().unwrap_or_else(|_| usage()),
            "--workers" => workers = value.parse().unwrap_or_else(|_| usage()),
            "--tasks" => tasks = value.split(',').map(str::to_string).collect(),
            _ => usage(),
        }
    }
    if workers == 0 || tasks.iter().any(|t| !TASKS.iter().any(|k| k.name == t)) {
        usage();
    }
    let asha = |seed| {
        Asha::new().max_t(ITERATIONS as f64).grace_period(1.0).reduction_factor(3.0).seed(seed)
    };
    let hyperband = || HyperBand::new().max_t(ITERATIONS as f64).reduction_factor(3.0);
    for task in TASKS.iter().filter(|t| tasks.iter().any(|n| n == t.name)) {
        for seed in 0..seeds {
            let space = space(task.dim);
            let random = || {
                BasicVariant::new(space.clone()).expect("space").num_samples(u64::MAX).seed(seed)
            };
            let systems: [System; 4] = [
                ("rtune ASHA", Box::new(random()), Box::new(asha(seed))),
                ("rtune HyperBand", Box::new(random()), Box::new(hyperband())),
                (
                    "rtune BOHB",
                    Box::new(Bohb::with_space(space.clone()).expect("space").seed(seed)),
                    Box::new(hyperband().aggressive_first(true)),
                ),
                (
                    "rtune TPE + ASHA",
                    Box::new(Tpe::with_space(space.clone()).expect("space").seed(seed)),
                    Box::new(asha(seed)),
                ),
            ];
            for (system, mut searcher, mut scheduler) in systems {
                let (trajectory, epochs) =
                    run(task, searcher.as_mut(), scheduler.as_mut(), workers, seed);
                let points: Vec<String> =
                    trajectory.iter().map(|(t, r)| format!("[{t:.1}, {r:.6}]")).collect();
                println!(
                    "{{\"system\": \"{system}\", \"task\": \"{}\", \"workers\": {workers}, \
                     \"seed\": {seed}, \"epochs\": {epochs}, \"trajectory\": [{}]}}",
                    task.name,
                    points.join(", ")
                );
            }
        }
    }
}
