//! The Tuner end to end: sweeps of real TorchTrainer trials (2 worker processes each, libtorch,
//! the ring all-reduce) on the process's shared local pool, with a real scheduler.

use anyhow::{Context, Result, ensure};
use rtune::data::Digits;
use rtune::{
    Mode, Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext, TuneConfig, Tuner,
};
use rtune_searchers::{Asha, HyperBand, SearchSpace, TrialStatus, choice};
use tch::nn::{self, Module};
use tch::{Device, Kind};

use crate::trainer::{mlp, train_digits_mlp};

/// Digits MLP with `lr` and `hidden` from the params, `epochs` epochs, `val_acc` reported with
/// a checkpoint every epoch.
fn train_sweep(ctx: &mut TrainContext) -> Result<()> {
    let lr = ctx.params().get::<f64>("lr")?;
    let hidden = ctx.params().get::<i64>("hidden")?;
    let epochs = ctx.params().get::<u64>("epochs")?;
    let names =
        [ctx.trial_id(), ctx.trial_name(), ctx.experiment_name()].map(Option::unwrap_or_default);
    std::fs::write(ctx.run_dir().join("names.txt"), names.join("\n"))?;
    tch::manual_seed(0);
    train_digits_mlp(ctx, lr, hidden, epochs)
}

fn sweep_trainer() -> TorchTrainer {
    TorchTrainer::new(train_sweep)
        .train_loop_config(Params::new().with("epochs", 6))
        .scaling(ScalingConfig::workers(2))
}

fn space() -> SearchSpace {
    // One learning rate that learns nothing in an epoch, one that learns fast: ASHA has
    // something to stop.
    SearchSpace::new().add("lr", choice([1e-6, 3e-3])).add("hidden", choice([16, 64]))
}

/// ASHA stops the poor trials early, every trial ends TERMINATED in its own Ray-named directory,
/// and the best trial's checkpoint loads and predicts the held-out test set.
pub fn asha_stops_poor_trials_and_the_best_checkpoint_loads() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let grid = Tuner::new(sweep_trainer(), space())
        .tune_config(
            TuneConfig::new()
                .metric("val_acc")
                .mode(Mode::Max)
                .num_samples(6)
                .scheduler(Asha::new().max_t(6).grace_period(1).reduction_factor(3))
                .seed(4),
        )
        .run_config(RunConfig::new("sweep").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.trials.len() == 6, "6 trials, got {}", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status == TrialStatus::Terminated), "{:?}", grid.errors());
    let lengths: Vec<usize> = grid
        .trials
        .iter()
        .map(|t| t.result.as_ref().map_or(0, |r| r.metrics_history.len()))
        .collect();
    ensure!(lengths.iter().any(|&n| n < 6), "ASHA stopped no trial early: {lengths:?}");
    ensure!(lengths.contains(&6), "no trial reached max_t: {lengths:?}");
    for t in &grid.trials {
        let name = t.path.file_name().context("trial dir")?.to_string_lossy().into_owned();
        ensure!(name.starts_with(&format!("TorchTrainer_{}_", t.trial_id)), "{name}");
        ensure!(t.path.join("result.json").is_file() && t.path.join("params.json").is_file());
    }

    // Every result row carries Ray's fields: the trial, its config (sampled params merged into
    // the trainer's), where it ran.
    for t in &grid.trials {
        let text = std::fs::read_to_string(t.path.join("result.json"))?;
        let first: serde_json::Value = serde_json::from_str(text.lines().next().context("a row")?)?;
        ensure!(first["trial_id"] == t.trial_id.as_str(), "{first}");
        ensure!(first["config"]["lr"].as_f64() == Some(t.params.get::<f64>("lr")?), "{first}");
        ensure!(first["config"]["epochs"] == 6, "{first}");
        ensure!(first["iterations_since_restore"] == 1 && first["training_iteration"] == 1);
        ensure!(first["pid"] == std::process::id() && first["node_ip"] == "127.0.0.1");
        ensure!(first["date"].as_str().is_some_and(|d| d.len() == 19), "{first}");
        // The train function saw the trial's names (Ray's get_context()).
        let names = std::fs::read_to_string(t.path.join("names.txt"))?;
        let dir_name = t.path.file_name().context("dir")?.to_string_lossy().into_owned();
        ensure!(names == format!("{}\n{dir_name}\nsweep", t.trial_id), "{names:?}");
        let csv = std::fs::read_to_string(t.path.join("progress.csv"))?;
        ensure!(csv.lines().next().is_some_and(|h| h.contains("config/lr")), "{csv}");
    }

    // The experiment state snapshot lists every trial as it ended.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(grid.path.join(rtune::tune::STATE_FILE))?)?;
    let trials = state["trials"].as_array().context("trials in the state")?;
    ensure!(trials.len() == 6 && state["metric"] == "val_acc", "{state}");
    for (row, t) in trials.iter().zip(&grid.trials) {
        ensure!(row["trial_id"] == t.trial_id.as_str() && row["status"] == "Terminated", "{row}");
        ensure!(row["last_result"]["val_acc"].as_f64() == t.last("val_acc"), "{row}");
        ensure!(row["path"] == t.path.display().to_string(), "{row}");
    }

    let best = grid.best_result(None, None)?;
    ensure!(best.params.get::<f64>("lr")? == 3e-3, "best: {:?}", best.params);
    let result = best.result.as_ref().context("the best trial's result")?;
    let checkpoint = result.best_checkpoint().context("the best trial's checkpoint")?;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root(), best.params.get::<i64>("hidden")?);
    checkpoint.load_var_store(&mut vs)?;
    let (x, y) = Digits::split(0)?.test.tensors();
    let acc = tch::no_grad(|| {
        net.forward(&x).argmax(-1, false).eq_tensor(&y).to_kind(Kind::Float).mean(Kind::Float)
    })
    .double_value(&[]);
    ensure!(acc > 0.85, "the best checkpoint predicts the test set at {acc}");
    Ok(())
}

/// Settings mistakes fail before any trial starts (no experiment directory is made), and a
/// metric the trials never report is named with what they do report.
pub fn tuner_mistakes_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fit = |tune: TuneConfig| {
        Tuner::new(sweep_trainer(), space())
            .tune_config(tune)
            .run_config(RunConfig::new("bad").storage_path(dir.path()))
            .fit()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    for (tune, named) in [
        (TuneConfig::new().metric("val_acc"), "TuneConfig.mode"),
        (TuneConfig::new().num_samples(0), "TuneConfig.num_samples"),
        (TuneConfig::new().max_concurrent_trials(0), "max_concurrent_trials"),
        (
            TuneConfig::new().metric("val_acc").mode(Mode::Max).scheduler(HyperBand::new()),
            "HyperBand",
        ),
        (TuneConfig::new().time_budget_s(f64::NAN), "time_budget_s"),
    ] {
        let err = fit(tune);
        ensure!(err.contains(named), "expected an error naming {named}, got {err:?}");
        ensure!(!dir.path().join("bad").exists(), "{named}: an experiment was made anyway");
    }
    let err = fit(TuneConfig::new().metric("accuracy").mode(Mode::Max).num_samples(1));
    ensure!(err.contains("`accuracy`") && err.contains("val_acc"), "{err}");
    Ok(())
}

/// Appends `start` and `end` (with the trial's index) to the file named by `events`, and
/// reports once.
fn cheap_trial(ctx: &mut TrainContext) -> Result<()> {
    let events = ctx.params().get::<String>("events")?;
    let index = ctx.params().get::<i64>("index")?;
    crate::common::between_events(&events, &index.to_string(), || {
        std::thread::sleep(std::time::Duration::from_millis(20))
    })?;
    ctx.report([("score", index as f64)], None).map_err(Into::into)
}

/// 50 cheap trials, 4 started at a time, each asking for half of the machine's CPUs: never
/// more than 2 run at once (the pool's limit, from the recorded start and end events), and
/// every trial ends TERMINATED.
pub fn trials_never_run_beyond_the_pool() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let events = dir.path().join("events");
    let half = rtune::cluster::local_node()?.resources.cpu / 2.0;
    let trainer = TorchTrainer::new(cheap_trial)
        .train_loop_config(Params::new().with("events", events.display().to_string()))
        .scaling(
            ScalingConfig::workers(1).resources_per_worker([("CPU".to_string(), half)].into()),
        );
    let space = SearchSpace::new().add("index", rtune_searchers::grid_search(0..50i64));
    let grid = Tuner::new(trainer, space)
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max).max_concurrent_trials(4))
        .run_config(RunConfig::new("cheap").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.trials.len() == 50, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status == TrialStatus::Terminated), "{:?}", grid.errors());
    let (mut now, mut most, mut started) = (0i32, 0i32, 0);
    for line in std::fs::read_to_string(&events)?.lines() {
        if line.starts_with("start") {
            now += 1;
            started += 1;
        } else {
            now -= 1;
        }
        most = most.max(now);
    }
    ensure!(started == 50, "{started} trials started");
    ensure!(most <= 2, "{most} trials ran at once on a pool that holds 2");
    ensure!(grid.best_result(None, None)?.params.get::<i64>("index")? == 49);
    Ok(())
}
