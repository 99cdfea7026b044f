//! The train functions built into the `rtune` binary (the CLI registers them by name:
//! `cli::Registry::builtin()`), for sweeps, examples and tests alike.
//!
//! * `digits-mlp`: the demo model, a data-parallel MLP (64-hidden-hidden-10) on the 8x8 digits
//!   shipped in `data/`, read as datasets `train` and `valid` (the fixed split) with a
//!   `StandardScaler` fitted on `train` (saved with every checkpoint). Params: `lr` (1e-3),
//!   `hidden` (256), `batch_size` (32, global), `epochs` (20). Reports `loss` (training),
//!   `val_loss` and `val_acc` (over the whole validation set, summed across ranks) and
//!   `params` (the model's number of weights: a size to trade accuracy against) with a
//!   checkpoint every epoch, which holds Adam's state too: a resumed trial goes on with its
//!   optimizer's moments. It follows `ScalingConfig::sharding` (sweep files:
//!   `[scaling] sharding = "zero2"`): Adam's state split across the ranks.
//! * `synthetic-curve`: a cheap learning-curve simulator for exercising schedulers without ML
//!   compute. Params: `rate` (0.3), `plateau` (1.0), `noise` (0.02), `iterations` (20),
//!   `seed` (0), `sleep_s` (0), `fail_at` (0: never; an error at that iteration), `panic_at`
//!   (0: never; a panic at that iteration), `slow_rank` (-1: none; that rank sleeps
//!   twice `sleep_s`, a straggler), `work_s` (0: none; an iteration's work on one rank, split
//!   between the ranks: each sleeps `work_s * (work_serial + (1 - work_serial) / world_size)` a
//!   step, so a bigger group steps faster, as data parallelism does, without using the CPUs),
//!   `work_serial` (0: the work splits evenly; Amdahl's serial share, in [0, 1]),
//!   `checkpoint_kb` (0: none; a file of that many KiB in each checkpoint, as a model's
//!   weights would be). The ranks meet
//!   in an all-reduce once a step. Reports
//!   `score` (rising to `plateau`)
//!   and `loss` = 1 - score, one result and one checkpoint per iteration; the curve is a
//!   function of the params and the iteration, so a resumed trial continues it exactly.
//!
//! Place in the pipeline: beside `tune`, above `train` (trainers, predictors), `data` and
//! `worker`: these are train functions like a user's, written on the public API.

use anyhow::{Context as _, Result};
use rand::RngExt;
use rtune_searchers::{Params, SearchRng};
use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use crate::digits::{DIGIT_CLASSES, DIGIT_FEATURES, DIGIT_LABEL, Digits};
use crate::model::TorchPredictor;
use crate::var_store::{LoadVarStore, SaveVarStore};
use crate::worker::{
    Balance, BatchSpec, DistributedModel, ModelOptimizer, OptimizerSettings, ShardedModel,
    TrainContext,
};
use rtune_collective::ReduceOp;
use rtune_driver::data::{Columns, Dataset, StandardScaler};
use rtune_driver::train::TorchTrainer;

/// Fixes the train/validation/test split of the digits.
pub const DIGITS_SPLIT_SEED: u64 = 0;

/// The demo's MLP: 64 → hidden → hidden → 10.
pub fn digits_mlp(vs: &nn::Path, hidden: i64) -> impl Module + use<> {
    nn::seq()
        .add(nn::linear(vs / "fc1", DIGIT_FEATURES as i64, hidden, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs / "fc2", hidden, hidden, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs / "fc3", hidden, DIGIT_CLASSES as i64, Default::default()))
}

/// `digits-mlp`'s model for a trial's params (its `hidden`).
pub fn digits_model(
    vs: &nn::Path,
    params: &Params,
) -> rtune_driver::error::Result<Box<dyn nn::ModuleT>> {
    Ok(Box::new(digits_mlp(vs, params.get::<i64>("hidden")?)))
}

/// `digits-mlp`'s data: the fixed split's `train` and `valid` as datasets, label `digit`, every
/// pixel standardized by a `StandardScaler` fitted on `train`.
pub fn digits_data(trainer: TorchTrainer) -> rtune_driver::error::Result<TorchTrainer> {
    let split = Digits::split(DIGITS_SPLIT_SEED)?;
    Ok(trainer
        .datasets([
            ("train", Dataset::frame(split.train.frame()?)),
            ("valid", Dataset::frame(split.validation.frame()?)),
        ])
        .columns(Columns::new().label(DIGIT_LABEL))
        .preprocessor(StandardScaler::new()))
}

/// Fraction of `data` that a trained model, loaded as a predictor, classifies right: the rows
/// go through the preprocessor saved with it, as in training.
pub fn predictor_accuracy(predictor: &TorchPredictor, data: &Digits) -> Result<f64> {
    let inputs = predictor.inputs(&data.frame()?)?;
    Ok(share_right(&predictor.predict_classes(&inputs)?, &Tensor::from_slice(&data.labels)))
}

/// The share of `predicted` classes equal to `labels` (compared where the labels are: a
/// predictor on a GPU is checked against labels on the host).
fn share_right(predicted: &tch::Tensor, labels: &tch::Tensor) -> f64 {
    let predicted = predicted.to_device(labels.device());
    predicted.eq_tensor(labels).to_kind(Kind::Float).mean(Kind::Float).double_value(&[])
}

/// How `digits-mlp` averages its gradients and steps: plain data parallelism, or sharded
/// (`ScalingConfig::sharding`); either way with rtune's Adam, whose state its checkpoints hold.
enum Parallel {
    Whole(DistributedModel, ModelOptimizer),
    Sharded(ShardedModel),
}

/// `digits-mlp`: each rank trains on batches of its shard (`batch_size / world` rows each);
/// gradients are averaged across ranks; the validation loss and accuracy are summed over every
/// rank's part of the validation set; rank 0's checkpoint is reported every epoch, with Adam's
/// state, which a resumed run restores. With a sharding (`ScalingConfig::sharding`), that state
/// is split across the ranks (ZeRO), and every checkpoint holds each rank's shard of it.
pub fn train_digits_mlp(ctx: &mut TrainContext) -> Result<()> {
    let p = ctx.params();
    let (lr, hidden, epochs, batch) = (
        p.get::<f64>("lr")?,
        p.get::<i64>("hidden")?,
        p.get::<u64>("epochs")?,
        p.get::<usize>("batch_size")?,
    );
    anyhow::ensure!(lr > 0.0 && lr.is_finite(), "param `lr` = {lr}: use a positive rate");
    anyhow::ensure!(hidden >= 1, "param `hidden` = {hidden}: use at least 1 unit");
    let mut train = ctx.dataset_shard("train")?;
    let mut valid = ctx.dataset_shard("valid")?;
    // Rank 0's initial weights are broadcast to every rank; seeding makes runs repeatable.
    // They are drawn on the CPU, then moved: a run starts from the same weights on any device
    // (CUDA's generator draws other numbers from the same seed).
    tch::manual_seed(0);
    let mut vs = nn::VarStore::new(tch::Device::Cpu);
    let net = digits_mlp(&vs.root(), hidden);
    vs.set_device(ctx.device());
    if let Some(checkpoint) = ctx.checkpoint() {
        checkpoint.load_var_store(&mut vs)?;
    }
    let mut model = match ctx.sharding() {
        None => {
            let mut adam = OptimizerSettings::adam(lr).for_model(&vs)?;
            if let Some(checkpoint) = ctx.checkpoint().filter(|c| c.holds_optimizer()) {
                adam.load(checkpoint)?;
            }
            Parallel::Whole(ctx.prepare_model(&vs)?, adam)
        }
        Some(sharding) => {
            let mut model =
                ctx.prepare_model_sharded(&vs, sharding, OptimizerSettings::adam(lr))?;
            if let Some(checkpoint) = ctx.checkpoint().filter(|c| c.holds_optimizer_shards()) {
                model.load_optimizer(checkpoint)?;
            }
            Parallel::Sharded(model)
        }
    };
    let weights: i64 = vs.trainable_variables().iter().map(Tensor::numel).map(|n| n as i64).sum();
    // Each rank's batches are its share of a global batch (in an elastic group, of each
    // step's, whatever the group's size then); a shard smaller than that is one batch. Padding
    // (the default) gives every rank the same number of steps.
    let per_rank = if ctx.is_elastic() { batch } else { (batch / ctx.world_size()).max(1) };
    let spec = BatchSpec::global(batch).shuffle(1).drop_last(train.len() >= per_rank);
    // Evaluation has no per-batch collective: every rank takes its rows once.
    let whole = BatchSpec::new(4096).balance(Balance::Uneven);
    for _ in ctx.iteration()..epochs {
        let (mut loss_sum, mut steps) = (0.0, 0);
        for (x, y) in train.iter_batches(&spec)? {
            let loss = net.forward(&x).cross_entropy_for_logits(&y);
            match &mut model {
                Parallel::Whole(ddp, opt) => ddp.backward_step(opt, &loss)?,
                Parallel::Sharded(sharded) => sharded.backward_step(&loss)?,
            }
            loss_sum += loss.double_value(&[]);
            steps += 1;
        }
        // [summed loss, right answers, rows] over every rank's part of the validation set.
        let mut totals = [0f32; 3];
        {
            let _no_grad = tch::no_grad_guard();
            for (x, y) in valid.iter_batches(&whole)? {
                let logits = net.forward(&x);
                let rows = y.size()[0] as f64;
                totals[0] += (logits.cross_entropy_for_logits(&y).double_value(&[]) * rows) as f32;
                totals[1] += (share_right(&logits.argmax(-1, false), &y) * rows) as f32;
                totals[2] += rows as f32;
            }
        }
        ctx.all_reduce(&mut totals, ReduceOp::Sum)?;
        let (val_loss, val_acc) = (totals[0] / totals[2], totals[1] / totals[2]);
        let mut checkpoint = ctx.new_checkpoint()?;
        checkpoint.save_var_store(&vs)?;
        match &model {
            Parallel::Whole(_, adam) => adam.save(&mut checkpoint)?,
            Parallel::Sharded(sharded) => sharded.save_optimizer(&mut checkpoint)?,
        }
        let metrics = [
            ("loss", loss_sum / steps.max(1) as f64),
            ("val_loss", f64::from(val_loss)),
            ("val_acc", f64::from(val_acc)),
            ("params", weights as f64),
        ];
        ctx.report_with_checkpoint(metrics, checkpoint)?;
    }
    Ok(())
}

/// The simulated score after `t` iterations (see the module docs).
pub fn synthetic_score(rate: f64, plateau: f64, noise: f64, seed: u64, t: u64) -> f64 {
    let mut rng = SearchRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ t);
    // Box-Muller: one standard normal draw from two uniforms.
    let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
    let gauss = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    plateau * (1.0 - (-rate * t as f64).exp()) + noise * gauss
}

/// `synthetic-curve`: one result per iteration of the simulated curve, with a checkpoint at
/// every `checkpoint_every`-th (1 when not given: every one; 0: none).
pub fn train_synthetic_curve(ctx: &mut TrainContext) -> Result<()> {
    let p = ctx.params();
    let rate = p.get::<f64>("rate")?;
    let plateau = p.get::<f64>("plateau")?;
    let noise = p.get::<f64>("noise")?;
    let iterations = p.get::<u64>("iterations").context("param `iterations`")?;
    let seed = p.get::<u64>("seed")?;
    let sleep = p.get::<f64>("sleep_s")?;
    let fail_at = p.get::<u64>("fail_at")?;
    let panic_at = if p.contains("panic_at") { p.get::<u64>("panic_at")? } else { 0 };
    // Read where given (train_loop_configs written before it have none).
    let slow = p.contains("slow_rank") && p.get::<i64>("slow_rank")? == ctx.world_rank() as i64;
    let given = |name: &str| -> Result<f64> {
        Ok(if p.contains(name) { p.get::<f64>(name)? } else { 0.0 })
    };
    let (work, serial) = (given("work_s")?, given("work_serial")?);
    // Each checkpoint can carry a file of that many KiB (`state.bin`), as a model would.
    let state_kib = given("checkpoint_kb")?;
    let every = if p.contains("checkpoint_every") { p.get::<u64>("checkpoint_every")? } else { 1 };
    anyhow::ensure!(
        sleep.is_finite() && sleep >= 0.0,
        "param `sleep_s` = {sleep}: use a number of seconds >= 0"
    );
    anyhow::ensure!(
        work.is_finite() && work >= 0.0,
        "param `work_s` = {work}: use a number of seconds >= 0"
    );
    anyhow::ensure!((0.0..=1.0).contains(&serial), "param `work_serial` = {serial}: use 0 to 1");
    let share = serial + (1.0 - serial) / ctx.world_size() as f64;
    let sleep_s = if slow { 2.0 * sleep } else { sleep } + work * share;
    for t in ctx.iteration() + 1..=iterations {
        if sleep_s > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(sleep_s));
        }
        anyhow::ensure!(t != fail_at, "synthetic failure at iteration {t} (param `fail_at`)");
        assert!(t != panic_at, "synthetic panic at iteration {t} (param `panic_at`)");
        let score = synthetic_score(rate, plateau, noise, seed, t);
        if ctx.world_size() > 1 {
            // The ranks meet once a step, as data parallelism's gradient all-reduce has them:
            // a straggler's peers wait for it there.
            let mut step = [t as f32];
            ctx.all_reduce(&mut step, ReduceOp::Sum)?;
        }
        let metrics = [("score", score), ("loss", 1.0 - score)];
        if every == 0 || t % every != 0 {
            ctx.report(metrics)?;
            continue;
        }
        let checkpoint = ctx.new_checkpoint()?.metadata(serde_json::json!({ "score": score }));
        if state_kib > 0.0 && checkpoint.is_kept() {
            let state = checkpoint.path().join("state.bin");
            std::fs::write(&state, vec![t as u8; (state_kib * 1024.0) as usize])?;
        }
        ctx.report_with_checkpoint(metrics, checkpoint)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_curve_is_a_function_of_its_params() {
        let a = synthetic_score(0.3, 1.0, 0.02, 7, 5);
        assert_eq!(a, synthetic_score(0.3, 1.0, 0.02, 7, 5));
        assert_ne!(a, synthetic_score(0.3, 1.0, 0.02, 8, 5));
        assert!((synthetic_score(0.3, 1.0, 0.0, 0, 50) - 1.0).abs() < 1e-6);
        assert!(synthetic_score(0.9, 1.0, 0.0, 0, 3) > synthetic_score(0.1, 1.0, 0.0, 0, 3));
    }
}
