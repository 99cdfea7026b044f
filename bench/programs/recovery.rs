//! Benchmark (not a test): recovery from a lost rank. A 3-rank data-parallel MLP on the digits
//! (global batches of 64, Adam, a checkpoint each epoch) loses rank 2 to SIGKILL mid-epoch
//! (its own, at optimizer step `--lose-at`), once as an elastic group of 2 to 3 that goes on in
//! place, once as a rigid group of 3 that `FailureConfig` restarts from its latest checkpoint.
//! For each: the seconds from the kill to the next completed step and to the first step beyond
//! where the run was, and the completed steps lost (taken again). Half a CPU per rank. Prints `BENCH {json}` lines.
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

/// Rank 0 appends `STEP TIME` to `steps.txt` after each step; rank 2 of the first attempt
/// writes `killed.txt` and SIGKILLs itself when the optimizer is about to take step `lose_at`.
fn train(ctx: &mut TrainContext) -> Result<()> {
    let (lose_at, hidden) =
        (ctx.params().get::<u64>("lose_at")?, ctx.params().get::<i64>("hidden")?);
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
                writeln!(log, "{} {}", adam.steps(), now())?;
            }
        }
        let mut checkpoint = ctx.new_checkpoint()?;
        checkpoint.save_var_store(&vs)?;
        adam.save(&mut checkpoint)?;
        ctx.report_with_checkpoint([("steps", adam.steps() as f64)], checkpoint)?;
    }
    Ok(())
}

/// Seconds from the kill to the first step completed after it, to the first step beyond
/// where the run was (its progress back), and the steps lost (taken again).
fn recovery(run: &std::path::Path) -> Result<(f64, f64, u64)> {
    let killed: f64 = std::fs::read_to_string(run.join("killed.txt"))?.trim().parse()?;
    let steps: Vec<(u64, f64)> = std::fs::read_to_string(run.join("steps.txt"))?
        .lines()
        .filter_map(|l| {
            let (step, at) = l.split_once(' ')?;
            Some((step.parse().ok()?, at.parse().ok()?))
        })
        .collect();
    let last_before = steps.iter().filter(|(_, at)| *at < killed).map(|(s, _)| *s).max();
    let (first_after, at) =
        *steps.iter().find(|(_, at)| *at >= killed).context("no step after the kill")?;
    let lost = last_before.map_or(0, |b| (b + 1).saturating_sub(first_after));
    let beyond = last_before.unwrap_or(0);
    let (_, back) = *steps
        .iter()
        .find(|(step, at)| *at >= killed && *step > beyond)
        .context("no progress after the kill")?;
    Ok((at - killed, back - killed, lost))
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
    for (name, scaling, failures) in
        [("in_place", ScalingConfig::elastic(2, 3), 0), ("restart", ScalingConfig::workers(3), 1)]
    {
        let run = RunConfig::new(name)
            .storage_path(storage.path())
            .failure_config(FailureConfig::max_failures(failures));
        let trainer = rtune::builtins::digits_data(
            TorchTrainer::new(train)
                .train_loop_config(Params::new().with("lose_at", lose_at).with("hidden", hidden))
                .scaling(scaling.resources_per_worker(half.clone()))
                .run_config(run),
        )?;
        let result = trainer.fit()?;
        let (seconds, back, lost) = recovery(&result.path)?;
        let line = |figure: &str, value: f64, unit: &str| {
            let json = serde_json::json!({"name": format!("recovery_{name}_{figure}"), "value": value, "unit": unit});
            println!("BENCH {json}");
        };
        line("s", seconds, "s");
        line("back_s", back, "s");
        line("steps_lost", lost as f64, "steps");
    }
    Ok(())
}
