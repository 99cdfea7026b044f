//! Benchmark (not a test): recovery from a lost rank. A 3-rank data-parallel MLP on the digits
//! (global batches of 64, Adam, a checkpoint each epoch) loses rank 2 to SIGKILL mid-epoch
//! (its own, at optimizer step `--lose-at`), once as an elastic group of 2 to 3 that goes on in
//! place, once as a rigid group of 3 that `FailureConfig` restarts from its latest checkpoint.
//! For each: the seconds from the kill to the next completed step and to the first step beyond
//! where the run was, and the completed steps lost (taken again). Half a CPU per rank. Then the
//! elastic group grows back to 3 at its next checkpoint (the CPU is free again): in place (a
//! new rank joins the running group), and, in a third run whose train function meets the
//! others in a barrier at each epoch's start (so ranks cannot join in place), by a restart from
//! that checkpoint. For those two: the seconds from the report that grew the group to its first
//! step at 3 ranks. Prints `BENCH {json}` lines.
//! `cargo run --release --example bench_recovery -- [--lose-at N] [--hidden H]`.

use std::io::Write;

use anyhow::{Context, Result};
use rtune::worker::{BatchSpec, OptimizerSettings};
use rtune::{FailureConfig, LoadVarStore, SaveVarStore};
use rtune::{Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext};
use tch::nn::{self, Module};

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Rank 0 appends `STEP TIME WORLD` to `steps.txt` after each step and `R TIME` as it reports;
/// rank 2 of the first attempt writes `killed.txt` and SIGKILLs itself when the optimizer is
/// about to take step `lose_at`. With `barrier`, each epoch starts with a barrier.
fn train(ctx: &mut TrainContext) -> Result<()> {
    let (lose_at, hidden) =
        (ctx.params().get::<u64>("lose_at")?, ctx.params().get::<i64>("hidden")?);
    let barrier = ctx.params().get::<bool>("barrier")?;
    let mut data = ctx.dataset_shard("train")?;
    tch::manual_seed(0);
    let mut vs = nn::VarStore::new(tch::Device::Cpu);
    let net = rtune::builtins::digits_mlp(&vs.root(), hidden);
    if let Some(checkpoint) = ctx.checkpoint() {
        checkpoint.load_var_store(&mut vs)?;
    }
    let mut adam = OptimizerSettings::adam(1e-3).for_model(&vs)?;
    if let Some(checkpoint) = ctx.checkpoint() {
        adam.load(checkpoint)?;
    }
    let first = ctx.checkpoint().is_none();
    let ddp = ctx.prepare_model(&vs)?;
    let spec = BatchSpec::global(64).shuffle(1).drop_last(true);
    let steps = ctx.run_dir().join("steps.txt");
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&steps)?;
    for _ in ctx.iteration()..4 {
        if barrier {
            ctx.barrier()?;
        }
        for (x, y) in data.iter_batches(&spec)? {
            if first && ctx.world_rank() == 2 && adam.steps() + 1 == lose_at {
                std::fs::write(ctx.run_dir().join("killed.txt"), format!("{}", now()))?;
                // SAFETY: raise(2) on this process: a rank lost mid-epoch.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            let loss = net.forward(&x).cross_entropy_for_logits(&y);
            let before = adam.steps();
            ddp.backward_step(&mut adam, &loss)?;
            // A step dropped by a regroup took none.
            if ctx.world_rank() == 0 && adam.steps() > before {
                writeln!(log, "{} {} {}", adam.steps(), now(), ctx.world_size())?;
            }
        }
        let mut checkpoint = ctx.new_checkpoint()?;
        checkpoint.save_var_store(&vs)?;
        adam.save(&mut checkpoint)?;
        if ctx.world_rank() == 0 {
            writeln!(log, "R {}", now())?;
        }
        ctx.report_with_checkpoint([("steps", adam.steps() as f64)], checkpoint)?;
    }
    Ok(())
}

/// Seconds from the kill to the first step completed after it, to the first step beyond
/// where the run was (its progress back), and the steps lost (taken again). Rank 2 was killed
/// as step `lose_at` began: every rank had completed the steps before it (each all-reduce
/// needed rank 2), so the run goes on after rank 0's first record of step `lose_at - 1`
/// (rank 0 may write it after the kill: the log's order, not its times, says what came after).
fn recovery(run: &std::path::Path, lose_at: u64) -> Result<(f64, f64, u64)> {
    let killed: f64 = std::fs::read_to_string(run.join("killed.txt"))?.trim().parse()?;
    let steps: Vec<(u64, f64)> =
        logged(run)?.into_iter().filter(|(s, ..)| *s > 0).map(|(s, at, _)| (s, at)).collect();
    let before = steps.iter().position(|(s, _)| *s + 1 == lose_at).context("no step before")?;
    let after = &steps[before + 1..];
    let (first, at) = *after.first().context("no step after the kill")?;
    let (_, back) =
        *after.iter().find(|(s, _)| *s >= lose_at).context("no progress after the kill")?;
    Ok((at - killed, back - killed, lose_at.saturating_sub(first)))
}

/// What rank 0 logged: `(step, time, world size)` per step, a step of 0 for a report.
fn logged(run: &std::path::Path) -> Result<Vec<(u64, f64, u64)>> {
    Ok(std::fs::read_to_string(run.join("steps.txt"))?
        .lines()
        .filter_map(|l| {
            let mut words = l.split(' ');
            match (words.next()?, words.next()?.parse().ok()?, words.next()) {
                ("R", at, None) => Some((0, at, 0)),
                (step, at, Some(world)) => Some((step.parse().ok()?, at, world.parse().ok()?)),
                _ => None,
            }
        })
        .collect())
}

/// Seconds from the report that grew the group back to 3 ranks, once it had gone on at 2, to
/// its first step at 3.
fn growth(run: &std::path::Path) -> Result<f64> {
    let log = logged(run)?;
    let shrunk = log.iter().position(|(s, _, w)| *s > 0 && *w == 2).context("never at 2")?;
    let grown = shrunk
        + log[shrunk..].iter().position(|(s, _, w)| *s > 0 && *w == 3).context("never grew")?;
    let report = log[..grown].iter().rev().find(|(s, ..)| *s == 0).context("no report")?;
    Ok(log[grown].1 - report.1)
}

fn main() -> Result<()> {
    rtune::init();
    let mut args = std::env::args().skip(1);
    let (mut lose_at, mut hidden) = (30u64, 256i64);
    while let Some(flag) = args.next() {
        let value = args.next().context("a flag's value")?;
        match flag.as_str() {
            "--lose-at" => lose_at = value.parse()?,
            "--hidden" => hidden = value.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    let storage = tempfile::tempdir()?;
    let half = std::collections::BTreeMap::from([("CPU".to_owned(), 0.5)]);
    let runs = [
        ("in_place", ScalingConfig::elastic(2, 3), 0, false),
        ("restart", ScalingConfig::workers(3), 1, false),
        ("grow_restart", ScalingConfig::elastic(2, 3), 0, true),
    ];
    for (name, scaling, failures, barrier) in runs {
        let run = RunConfig::new(name)
            .storage_path(storage.path())
            .failure_config(FailureConfig::max_failures(failures));
        let trainer = rtune::builtins::digits_data(
            TorchTrainer::new(train)
                .train_loop_config(
                    Params::new()
                        .with("lose_at", lose_at)
                        .with("hidden", hidden)
                        .with("barrier", barrier),
                )
                .scaling(scaling.resources_per_worker(half.clone()))
                .run_config(run),
        )?;
        let result = trainer.fit()?;
        let (seconds, back, lost) = recovery(&result.path, lose_at)?;
        let line = |figure: &str, value: f64, unit: &str| {
            let json = serde_json::json!({"name": format!("recovery_{name}_{figure}"), "value": value, "unit": unit});
            println!("BENCH {json}");
        };
        line("s", seconds, "s");
        line("back_s", back, "s");
        line("steps_lost", lost as f64, "steps");
        if name != "restart" {
            line("grow_s", growth(&result.path)?, "s");
        }
    }
    Ok(())
}
