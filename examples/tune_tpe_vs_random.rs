//! TPE against random search through the Tuner, at the same budget: every trial is a worker
//! process (forked warm, 1 worker, one report) evaluating the 6-D Hartmann function (minimum
//! -3.3224) at its params. Each searcher runs a few seeds, one trial at a time, so every sweep
//! is repeatable (and finds what the searcher alone finds: the searchers without processes are
//! compared at length by `cargo run --release -p rtune-searchers --example tpe_vs_random`).
//! The table prints, every 10 trials, the median over seeds of the best value found so far.
//! Expected (`cargo run --example tune_tpe_vs_random`): 5 seeds x 100 trials per searcher, 10
//! sweeps in about 50 s on 2 CPU cores shared with a build (each trial takes 20 ms of CPU);
//! after 100 trials random search is at -2.1119 and TPE at -2.6440 (after 30: -1.0550 and
//! -1.7682). With `RTUNE_QUICK=1` (as the tests run it) 2 seeds x 30 trials in about 4 s:
//! random -1.4307, TPE -2.1662.

#[path = "../searchers/tests/it/problems.rs"]
mod problems;

use anyhow::{Result, ensure};
use problems::{hartmann6, hartmann6_space, median};
use rtune::search::{BasicVariant, Searcher, Tpe};
use rtune::{Mode, RunConfig, TorchTrainer, TrainContext, TuneConfig, Tuner};

/// One trial: the function's value at the trial's params, reported once.
fn hartmann(ctx: &mut TrainContext) -> Result<()> {
    let value = hartmann6(ctx.params());
    ctx.report([("value", value)])?;
    Ok(())
}

/// The best value found after each trial of one sweep.
fn best_so_far(searcher: impl Searcher + 'static, trials: usize, name: &str) -> Result<Vec<f64>> {
    let storage = tempfile::tempdir()?;
    let grid = Tuner::new(TorchTrainer::new(hartmann), hartmann6_space())
        .tune_config(
            TuneConfig::new()
                .metric("value")
                .mode(Mode::Min)
                .num_samples(trials as u64)
                .search_alg(searcher)
                .max_concurrent_trials(1),
        )
        .run_config(RunConfig::new(name).storage_path(storage.path()))
        .fit()?;
    ensure!(grid.trials.len() == trials, "{name}: {:?}", grid.errors());
    let values = grid.trials.iter().map(|t| t.last("value").unwrap_or(f64::NAN));
    Ok(values
        .scan(f64::INFINITY, |best, v| {
            *best = best.min(v);
            Some(*best)
        })
        .collect())
}

fn main() -> Result<()> {
    rtune::init(); // first: worker processes are this binary started again
    rtune::log::quiet_stderr(); // a log line per trial start and end would bury the table
    let quick = std::env::var_os("RTUNE_QUICK").is_some();
    let (trials, seeds) = if quick { (30, 2) } else { (100, 5) };
    let started = std::time::Instant::now();
    let (mut random, mut tpe) = (Vec::new(), Vec::new());
    for seed in 0..seeds {
        let basic = BasicVariant::new(hartmann6_space())?.num_samples(trials as u64).seed(seed);
        random.push(best_so_far(basic, trials, &format!("random-{seed}"))?);
        let guided = Tpe::with_space(hartmann6_space())?.seed(seed);
        tpe.push(best_so_far(guided, trials, &format!("tpe-{seed}"))?);
    }
    println!("{trials} trials of 6-D Hartmann (minimum -3.3224) per sweep, {seeds} seeds");
    println!("trials | random best | TPE best   (median over seeds)");
    for done in (10..=trials).step_by(10) {
        let at = |curves: &[Vec<f64>]| median(curves.iter().map(|c| c[done - 1]).collect());
        println!("{done:>6} | {:>11.4} | {:>8.4}", at(&random), at(&tpe));
    }
    println!("{} sweeps in {:.1} s", 2 * seeds, started.elapsed().as_secs_f64());
    Ok(())
}
