//! The Tuner end to end: sweeps of real TorchTrainer trials (2 worker processes each, libtorch,
//! the ring all-reduce) on the process's shared local pool, with a real scheduler.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use rtune::digits::Digits;
use rtune::polars::prelude::{DataType, ParquetReader, SerReader};
use rtune::{
    FailureConfig, Mode, Params, ResultGrid, RunConfig, ScalingConfig, TorchTrainer, TrainContext,
    TuneConfig, Tuner,
};
use rtune::{LoadVarStore, SaveVarStore};
use rtune_searchers::{
    Asha, HyperBand, Metrics, Pbt, SearchSpace, TrialStatus, choice, grid_search,
};
use tch::nn::{self, Module};
use tch::{Device, Kind};

use crate::common::{alive, wait_for};
use crate::trainer::{mlp, report_a_burst_then_wait, train_digits_mlp, triangle};

/// Digits MLP with `lr` and `hidden` from the params, `epochs` epochs, `val_acc` reported with
/// a checkpoint every epoch.
fn train_sweep(ctx: &mut TrainContext) -> Result<()> {
    let lr = ctx.params().get::<f64>("lr")?;
    let hidden = ctx.params().get::<i64>("hidden")?;
    let epochs = ctx.params().get::<u64>("epochs")?;
    let names =
        [ctx.trial_id(), ctx.trial_name(), ctx.experiment_name()].map(Option::unwrap_or_default);
    std::fs::write(ctx.run_dir().join("names.txt"), names.join("\n"))?;
    if ctx.world_rank() == 0 {
        std::fs::write(ctx.run_dir().join("pid.txt"), std::process::id().to_string())?;
    }
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
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.errors()
    );
    let lengths: Vec<usize> =
        grid.trials.iter().map(|t| t.result().map_or(0, |r| r.metrics_history.len())).collect();
    ensure!(lengths.iter().any(|&n| n < 6), "ASHA stopped no trial early: {lengths:?}");
    ensure!(lengths.contains(&6), "no trial reached max_t: {lengths:?}");
    for t in &grid.trials {
        let name = t.path().file_name().context("trial dir")?.to_string_lossy().into_owned();
        ensure!(name.starts_with(&format!("TorchTrainer_{}_", t.trial_id())), "{name}");
        ensure!(t.path().join("result.json").is_file() && t.path().join("params.json").is_file());
    }

    // Every result row carries Ray's fields: the trial, its config (sampled params merged into
    // the trainer's), where it ran.
    for t in &grid.trials {
        let text = std::fs::read_to_string(t.path().join("result.json"))?;
        let first: serde_json::Value = serde_json::from_str(text.lines().next().context("a row")?)?;
        ensure!(first["trial_id"] == t.trial_id(), "{first}");
        ensure!(first["config"]["lr"].as_f64() == Some(t.params().get::<f64>("lr")?), "{first}");
        ensure!(first["config"]["epochs"] == 6, "{first}");
        ensure!(first["iterations_since_restore"] == 1 && first["training_iteration"] == 1);
        // Its pid is rank 0's worker process, as in Ray (the trainable's process).
        let rank0: u32 = std::fs::read_to_string(t.path().join("pid.txt"))?.parse()?;
        ensure!(first["pid"] == rank0 && rank0 != std::process::id(), "{first}, rank 0: {rank0}");
        ensure!(first["node_ip"] == "127.0.0.1", "{first}");
        ensure!(first["date"].as_str().is_some_and(|d| d.len() == 19), "{first}");
        // The train function saw the trial's names (Ray's get_context()).
        let names = std::fs::read_to_string(t.path().join("names.txt"))?;
        let dir_name = t.path().file_name().context("dir")?.to_string_lossy().into_owned();
        ensure!(names == format!("{}\n{dir_name}\nsweep", t.trial_id()), "{names:?}");
        let csv = std::fs::read_to_string(t.path().join("progress.csv"))?;
        ensure!(csv.lines().next().is_some_and(|h| h.contains("config/lr")), "{csv}");
    }

    // The experiment state snapshot lists every trial as it ended.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(grid.path.join(rtune_driver::tune::STATE_FILE))?)?;
    let trials = state["trials"].as_array().context("trials in the state")?;
    ensure!(trials.len() == 6 && state["metric"] == "val_acc", "{state}");
    for (row, t) in trials.iter().zip(&grid.trials) {
        ensure!(row["trial_id"] == t.trial_id() && row["status"] == "Terminated", "{row}");
        ensure!(row["last_result"]["val_acc"].as_f64() == t.last("val_acc"), "{row}");
        ensure!(t.path().ends_with(row["dir"].as_str().context("dir")?), "{row}");
    }

    check_tables(&grid, &lengths)?;

    let best = grid.best_result()?;
    ensure!(best.params().get::<f64>("lr")? == 3e-3, "best: {:?}", best.params());
    let result = best.result().context("the best trial's result")?;
    let checkpoint = result.best_checkpoint().context("the best trial's checkpoint")?;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root(), best.params().get::<i64>("hidden")?);
    checkpoint.load_var_store(&mut vs)?;
    let (x, y) = Digits::split(0)?.test.tensors();
    let acc = tch::no_grad(|| {
        net.forward(&x).argmax(-1, false).eq_tensor(&y).to_kind(Kind::Float).mean(Kind::Float)
    })
    .double_value(&[]);
    ensure!(acc > 0.85, "the best checkpoint predicts the test set at {acc}");
    Ok(())
}

/// The ResultGrid's tables hold what the trials reported: one row per trial (typed params,
/// last metrics, the best value), one per report, the same when read back from disk, in
/// `results.parquet` and in a CSV export.
fn check_tables(grid: &ResultGrid, lengths: &[usize]) -> Result<()> {
    let df = grid.dataframe()?;
    ensure!(df.height() == 6, "{df}");
    for name in ["trial_id", "status", "config/lr", "config/hidden", "val_acc"] {
        ensure!(df.column(name).is_ok(), "no column {name} in {df}");
    }
    ensure!(df.column("config/hidden")?.dtype() == &DataType::Int64, "{df}");
    let last = df.column("val_acc")?.f64()?;
    let best = df.column("best/val_acc")?.f64()?;
    let iterations = df.column("training_iteration")?.i64()?;
    for (i, t) in grid.trials.iter().enumerate() {
        ensure!(last.get(i) == t.last("val_acc"), "row {i}: {df}");
        ensure!(best.get(i) == t.best("val_acc", Mode::Max), "row {i}: {df}");
        ensure!(iterations.get(i) == Some(lengths[i] as i64), "row {i}: {df}");
    }
    // Filtered by the best val_acc, each trial's row shows its best report.
    let by_best = grid.get_dataframe(Some("val_acc"), Some(Mode::Max))?;
    ensure!(by_best.column("val_acc")?.equals_missing(df.column("best/val_acc")?), "{by_best}");
    let history = grid.results_history()?;
    ensure!(history.height() == lengths.iter().sum::<usize>(), "{history}");
    ensure!(history.column("config/lr").is_ok() && history.column("val_acc").is_ok());

    let from_disk = ResultGrid::from_path(&grid.path)?;
    ensure!(
        from_disk.dataframe()?.equals_missing(&df),
        "read back:\n{}\n{df}",
        from_disk.dataframe()?
    );
    let parquet = std::fs::File::open(grid.path.join(rtune_driver::tune::RESULTS_PARQUET))?;
    let saved = ParquetReader::new(parquet).finish()?;
    ensure!(saved.equals_missing(&df), "results.parquet:\n{saved}\n{df}");
    let csv_path = grid.path.join("export.csv");
    grid.write_csv(&csv_path)?;
    let csv = std::fs::read_to_string(&csv_path)?;
    ensure!(csv.lines().count() == 7 && csv.starts_with("trial_id,status,"), "{csv}");
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
        (TuneConfig::new().time_budget_s(f64::NAN), "time_budget_s"),
        (
            TuneConfig::new().metric("val_acc").mode(Mode::Max).objectives([("x", Mode::Min)]),
            "TuneConfig.objectives: are given with metric and mode",
        ),
        (
            TuneConfig::new().objectives([("val_acc", Mode::Max), ("val_acc", Mode::Min)]),
            "names `val_acc` twice",
        ),
        (
            TuneConfig::new()
                .objectives([("val_acc", Mode::Max), ("loss", Mode::Min)])
                .search_alg(rtune_searchers::Bohb::new()),
            "TuneConfig.search_alg: `bohb`: this searcher ranks trials by one metric, and the \
             sweep has 2 objectives; several objectives need NSGA-II (`Nsga2`), TPE or random",
        ),
        (
            TuneConfig::new()
                .objectives([("val_acc", Mode::Max), ("loss", Mode::Min)])
                .scheduler(rtune_searchers::Asha::new()),
            "TuneConfig.scheduler: `asha`: this scheduler ranks trials by one metric",
        ),
    ] {
        let err = fit(tune);
        ensure!(err.contains(named), "expected an error naming {named}, got {err:?}");
        ensure!(!dir.path().join("bad").exists(), "{named}: an experiment was made anyway");
    }
    // A trial bigger than the machine.
    let huge = Tuner::new(sweep_trainer().scaling(ScalingConfig::workers(10_000)), space())
        .run_config(RunConfig::new("huge").storage_path(dir.path()))
        .fit();
    let err = huge.err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(err.contains("ScalingConfig") && err.contains("num_workers"), "{err}");
    ensure!(!dir.path().join("huge").exists(), "an experiment was made for a trial too big");
    let err = fit(TuneConfig::new().metric("accuracy").mode(Mode::Max).num_samples(1));
    ensure!(err.contains("`accuracy`") && err.contains("val_acc"), "{err}");
    // A file of its own in the experiment may not be one of rtune's.
    let own = Tuner::new(sweep_trainer(), space())
        .run_config(RunConfig::new("own").storage_path(dir.path()))
        .experiment_file(rtune_driver::tune::SETTINGS_FILE, "{}")
        .fit();
    let err = own.err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(err.contains("Tuner::experiment_file") && err.contains("tuner.json"), "{err}");
    ensure!(!dir.path().join("own").exists(), "an experiment was made with a file of rtune's");
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
    ctx.report([("score", index as f64)]).map_err(Into::into)
}

/// 50 cheap trials, 4 started at a time, each asking for half of the machine's CPUs: never
/// more than 2 run at once (the pool's limit, from the recorded start and end events), and
/// every trial ends TERMINATED.
pub fn trials_never_run_beyond_the_pool() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let events = dir.path().join("events");
    let half = rtune_driver::cluster::local_node()?.resources.cpu / 2.0;
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
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.errors()
    );
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
    ensure!(grid.best_result()?.params().get::<i64>("index")? == 49);
    Ok(())
}

/// Carries `total` (iteration i adds i) in its checkpointed model and reports it with
/// `score` = the trial's index, a checkpoint every iteration, 6 iterations. A resumed trial
/// must find exactly its checkpoint's state (it fails otherwise). Each worker leaves its pid in
/// `<dir>/pids`; the trial whose index is `hold` waits after iteration 3 until `<dir>/go`
/// exists (`<dir>/held` says it waits), and so does, before its first iteration, every trial
/// whose index is `gate_from` or more (when that param is given).
fn count_with_checkpoints(ctx: &mut TrainContext) -> Result<()> {
    let dir = std::path::PathBuf::from(ctx.params().get::<String>("dir")?);
    let index = ctx.params().get::<i64>("index")?;
    let hold = ctx.params().get::<i64>("hold")?;
    let gate_from = ctx.params().get::<i64>("gate_from").unwrap_or(i64::MAX);
    std::fs::write(dir.join("pids").join(std::process::id().to_string()), b"")?;
    while index >= gate_from && !dir.join("go").exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut vs = nn::VarStore::new(Device::Cpu);
    let total = vs.root().zeros_no_train("total", &[1]);
    if let Some(ck) = ctx.checkpoint() {
        ck.load_var_store(&mut vs)?;
        let (restored, expected) = (total.double_value(&[0]), triangle(ctx.iteration()));
        ensure!(restored == expected, "restored total {restored}, expected {expected}");
    }
    for i in ctx.iteration() + 1..=6 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let _ = tch::no_grad(|| total.shallow_clone().f_add_scalar_(i as f64))?;
        let mut ck = ctx.new_checkpoint()?;
        ck.save_var_store(&vs)?;
        ctx.report_with_checkpoint(
            [("score", index as f64), ("total", total.double_value(&[0]))],
            ck,
        )?;
        if index == hold && i == 3 {
            std::fs::write(dir.join("held"), b"")?;
            while !dir.join("go").exists() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
    Ok(())
}

/// Trial 1 is held after iteration 3, and trials 5 and up wait at their start: with 2 trials
/// at a time, the sweep stops with trials 0, 2, 3 and 4 finished, 1 and 5 running and 6 and 7
/// not created, until `<dir>/go` exists.
fn counting_trainer(dir: &Path) -> TorchTrainer {
    TorchTrainer::new(count_with_checkpoints).train_loop_config(
        Params::new().with("dir", dir.display().to_string()).with("hold", 1).with("gate_from", 5),
    )
}

const SWEEP_DRIVER_ENV: &str = "RTUNE_TEST_SWEEP_DRIVER";

/// In a child process started by `killed_driver_is_restored_exactly`: run its sweep.
pub fn run_sweep_driver_if_asked() {
    let Ok(dir) = std::env::var(SWEEP_DRIVER_ENV) else { return };
    let dir = Path::new(&dir);
    let grid =
        Tuner::new(counting_trainer(dir), SearchSpace::new().add("index", grid_search(0..8i64)))
            .tune_config(TuneConfig::new().metric("score").mode(Mode::Max).max_concurrent_trials(2))
            .run_config(RunConfig::new("sweep").storage_path(dir))
            .fit();
    eprintln!("the sweep driver ended: {grid:?}");
    std::process::exit(1);
}

/// The result rows of a trial directory.
fn rows(trial_dir: &Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(trial_dir.join("result.json"))?;
    text.lines().map(|l| Ok(serde_json::from_str(l)?)).collect()
}

/// SIGKILL the driver of a sweep mid-way (4 trials done, one held after its third checkpoint,
/// one waiting at its start, 2 not created: see `counting_trainer`), then
/// `Tuner::restore(..).fit()`: no worker outlives the killed driver; the sweep ends with exactly
/// its 8 trials, each with iterations 1..=6 once in result.json, progress.csv and the
/// ResultGrid, the held one going on from its checkpoint's state.
pub fn killed_driver_is_restored_exactly() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("pids"))?;
    let experiment = dir.path().join("sweep");
    let log = std::fs::File::create(dir.path().join("driver.log"))?;
    let mut driver = Command::new(std::env::current_exe()?)
        .env(SWEEP_DRIVER_ENV, dir.path())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    // (trials, of which terminated) in the saved state.
    let saved = || -> Result<(usize, usize)> {
        let Ok(text) = std::fs::read(experiment.join(rtune_driver::tune::STATE_FILE)) else {
            return Ok((0, 0));
        };
        let state: serde_json::Value = serde_json::from_slice(&text)?;
        let trials = state["trials"].as_array().context("trials")?;
        Ok((trials.len(), trials.iter().filter(|t| t["status"] == "Terminated").count()))
    };
    // The sweep can get no further than this until `go` (see `counting_trainer`).
    let waited = wait_for(Duration::from_secs(120), || {
        Ok(dir.path().join("held").exists() && saved()? == (6, 4))
    });
    driver.kill()?;
    driver.wait()?;
    if let Err(e) = waited {
        let log = std::fs::read_to_string(dir.path().join("driver.log")).unwrap_or_default();
        bail!("{e}; the driver said:\n{log}");
    }
    let pids: Vec<i32> = std::fs::read_dir(dir.path().join("pids"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().parse()?))
        .collect::<Result<_>>()?;
    ensure!(pids.len() >= 4, "{} workers started", pids.len());
    wait_for(Duration::from_secs(10), || Ok(pids.iter().all(|&p| !alive(p))))
        .context("a worker outlived its killed driver")?;

    // The interrupted experiment reads back as it was: the finished trials and the held one.
    let interrupted = ResultGrid::from_path(&experiment)?;
    let done = interrupted.trials.iter().filter(|t| t.status() == TrialStatus::Terminated).count();
    ensure!(done == 4 && interrupted.trials.len() == 6, "{:?}", interrupted.dataframe()?);
    ensure!(ResultGrid::from_path(dir.path()).is_err(), "not an experiment, read anyway");

    ensure!(Tuner::can_restore(&experiment) && !Tuner::can_restore(dir.path()));
    let not_one =
        Tuner::restore(dir.path(), counting_trainer(dir.path())).err().context("restored")?;
    ensure!(not_one.to_string().contains("tuner.json"), "{not_one}");
    // An experiment written by another version of the files is named as such.
    let future = dir.path().join("future");
    std::fs::create_dir(&future)?;
    std::fs::write(future.join("tuner.json"), r#"{"format": 7, "rtune_version": "3.0.0"}"#)?;
    let newer = Tuner::restore(&future, counting_trainer(dir.path())).err().context("restored")?;
    let newer = newer.to_string();
    ensure!(newer.contains("rtune 3.0.0 in format 7") && newer.contains("format 1"), "{newer}");
    let other = TuneConfig::new().metric("total").mode(Mode::Max);
    let mismatch =
        Tuner::restore(&experiment, counting_trainer(dir.path()))?.tune_config(other).fit();
    let mismatch = mismatch.err().context("a different metric was accepted")?.to_string();
    ensure!(mismatch.contains("TuneConfig.metric") && mismatch.contains("score"), "{mismatch}");

    std::fs::write(dir.path().join("go"), b"")?;
    let grid = Tuner::restore(&experiment, counting_trainer(dir.path()))?.fit()?;
    ensure!(grid.trials.len() == 8, "{} trials", grid.trials.len());
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.errors()
    );
    let mut indices: Vec<i64> =
        grid.trials.iter().map(|t| t.params().get::<i64>("index")).collect::<Result<_, _>>()?;
    indices.sort();
    ensure!(indices == (0..8).collect::<Vec<_>>(), "indices {indices:?}");
    let dirs = std::fs::read_dir(&experiment)?
        .filter(|e| {
            e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with("TorchTrainer_"))
        })
        .count();
    ensure!(dirs == 8, "{dirs} trial directories");
    for t in &grid.trials {
        let rows = rows(t.path())?;
        let iterations: Vec<u64> =
            rows.iter().map(|r| r["training_iteration"].as_u64().unwrap_or(0)).collect();
        ensure!(iterations == [1, 2, 3, 4, 5, 6], "{}: iterations {iterations:?}", t.trial_id());
        // Ray's `done`: the last row only, also for the trials that went on after the kill.
        let done: Vec<bool> = rows.iter().map(|r| r["done"] == true).collect();
        ensure!(done == [false, false, false, false, false, true], "{}: {done:?}", t.trial_id());
        for r in &rows {
            let it = r["training_iteration"].as_u64().unwrap_or(0);
            ensure!(r["total"].as_f64() == Some(triangle(it)), "{}: {r}", t.trial_id());
        }
        let csv = std::fs::read_to_string(t.path().join("progress.csv"))?;
        ensure!(csv.lines().count() == 7, "{}: progress.csv\n{csv}", t.trial_id());
        let history = &t.result().context("a result")?.metrics_history;
        let seen: Vec<f64> = history.iter().map(|m| m["training_iteration"]).collect();
        ensure!(seen == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{}: history {seen:?}", t.trial_id());
    }
    let held = grid.trials.iter().find(|t| t.params().get::<i64>("index").ok() == Some(1));
    let since: Vec<u64> = rows(held.context("trial 1")?.path())?
        .iter()
        .map(|r| r["iterations_since_restore"].as_u64().unwrap_or(0))
        .collect();
    ensure!(since == [1, 2, 3, 1, 2, 3], "the held trial went on from iteration 3: {since:?}");
    ensure!(grid.best_result()?.params().get::<i64>("index")? == 7);
    Ok(())
}

/// HyperBand pauses trials at its milestones and the Tuner carries it out: a paused trial
/// releases its workers and later goes on in its own directory from its checkpoint, with the
/// state it had (the train function checks it), each iteration once in its rows; callbacks
/// hear each trial end once.
pub fn hyperband_pauses_and_resumes_trials_from_their_checkpoints() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let recorder = std::sync::Arc::new(Recorder::default());
    std::fs::create_dir(dir.path().join("pids"))?;
    let trainer = counting_trainer(dir.path()).train_loop_config(
        Params::new().with("dir", dir.path().display().to_string()).with("hold", -1),
    );
    let grid = Tuner::new(trainer, SearchSpace::new().add("index", grid_search(0..6i64)))
        .tune_config(
            TuneConfig::new()
                .metric("score")
                .mode(Mode::Max)
                // All 6 are created at once (so HyperBand's brackets are full); the pool runs
                // 2 at a time.
                .max_concurrent_trials(6)
                .scheduler(HyperBand::new().max_t(4).reduction_factor(2)),
        )
        .run_config(RunConfig::new("hb").storage_path(dir.path()).callback(recorder.clone()))
        .fit()?;
    ensure!(grid.trials.len() == 6, "{} trials", grid.trials.len());
    // Callbacks hear every trial end once, the one HyperBand stopped while paused included.
    let heard = recorder.0.lock().unwrap().clone();
    for t in &grid.trials {
        let ends = heard.iter().filter(|l| *l == &format!("complete {}", t.trial_id())).count();
        ensure!(ends == 1, "{}: {ends} ends heard: {heard:?}", t.trial_id());
    }
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.errors()
    );
    let mut resumed = 0;
    let mut longest = 0;
    for t in &grid.trials {
        let rows = rows(t.path())?;
        let iterations: Vec<u64> =
            rows.iter().map(|r| r["training_iteration"].as_u64().unwrap_or(0)).collect();
        ensure!(
            iterations == (1..=iterations.len() as u64).collect::<Vec<_>>(),
            "{}: iterations {iterations:?}",
            t.trial_id()
        );
        for (i, r) in rows.iter().enumerate() {
            let it = r["training_iteration"].as_u64().unwrap_or(0);
            ensure!(r["total"].as_f64() == Some(triangle(it)), "{}: {r}", t.trial_id());
            resumed += usize::from(r["iterations_since_restore"].as_u64() != Some(it));
            // A paused trial's row stops being its last when it goes on.
            ensure!((r["done"] == true) == (i + 1 == rows.len()), "{}: {r}", t.trial_id());
        }
        longest = longest.max(iterations.len());
    }
    let lengths: Vec<usize> =
        grid.trials.iter().map(|t| rows(t.path()).map_or(0, |r| r.len())).collect();
    ensure!(resumed > 0, "no trial went on after a pause: {lengths:?}");
    ensure!(longest == 4, "no trial reached max_t: {lengths:?}");
    // The second bracket (3 trials, first milestone 2) stops its worst trial there.
    ensure!(lengths.iter().filter(|&&n| n == 2).count() == 1, "{lengths:?}");
    Ok(())
}

/// Grows `w` by `rate` each of 8 iterations, checkpointing it (with the writer's trial index in
/// the checkpoint's metadata) and appending `report <trial> <iteration> <w>` to `<dir>/events`;
/// a trial started from a checkpoint appends `restored <trial> <writer> <iteration> <w>` with
/// the weight it loaded.
fn grow(ctx: &mut TrainContext) -> Result<()> {
    let rate = ctx.params().get::<f64>("rate")?;
    let events = std::path::PathBuf::from(ctx.params().get::<String>("dir")?).join("events");
    let me: u64 =
        ctx.trial_id().and_then(|id| id.rsplit('_').next()?.parse().ok()).context("id")?;
    let mut vs = nn::VarStore::new(Device::Cpu);
    let w = vs.root().zeros_no_train("w", &[1]);
    let append = |line: String| -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&events)?;
        Ok(f.write_all(format!("{line}\n").as_bytes())?)
    };
    if let Some(ck) = ctx.checkpoint() {
        ck.load_var_store(&mut vs)?;
        let writer = ck.metadata()?.user["trial"].as_u64().context("writer")?;
        append(format!("restored {me} {writer} {} {}", ctx.iteration(), w.double_value(&[0])))?;
    }
    for i in ctx.iteration() + 1..=8 {
        std::thread::sleep(std::time::Duration::from_millis(30));
        let _ = tch::no_grad(|| w.shallow_clone().f_add_scalar_(rate))?;
        let mut ck = ctx.new_checkpoint()?.metadata(serde_json::json!({ "trial": me }));
        ck.save_var_store(&vs)?;
        append(format!("report {me} {i} {}", w.double_value(&[0])))?;
        ctx.report_with_checkpoint([("w", w.double_value(&[0]))], ck)?;
    }
    Ok(())
}

/// A PBT sweep of `grow` over `rates` (perturbation every 2 iterations, rate resampled in
/// 0.1..3.0), `slots` trials at once of half a CPU each; every trial must end TERMINATED. The
/// grid and the trials' events file.
fn pbt_of_grow(dir: &Path, rates: &[f64], slots: usize) -> Result<(rtune::ResultGrid, String)> {
    let trainer = TorchTrainer::new(grow)
        .train_loop_config(Params::new().with("dir", dir.display().to_string()))
        .scaling(ScalingConfig::workers(1).resources_per_worker([("CPU".to_string(), 0.5)].into()));
    let pbt = Pbt::new()
        .time_attr("training_iteration")
        .perturbation_interval(2)
        .hyperparam_mutations(SearchSpace::new().add("rate", rtune_searchers::uniform(0.1, 3.0)?))
        .seed(7);
    let config = TuneConfig::new().metric("w").mode(Mode::Max).max_concurrent_trials(slots);
    let grid = Tuner::new(trainer, SearchSpace::new().add("rate", grid_search(rates.to_vec())))
        .tune_config(config.scheduler(pbt))
        .run_config(RunConfig::new(format!("pbt{slots}")).storage_path(dir))
        .fit()?;
    ensure!(grid.trials.len() == rates.len(), "{} trials", grid.trials.len());
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.errors()
    );
    let events = std::fs::read_to_string(dir.join("events"))?;
    Ok((grid, events))
}

/// PBT's exploit is carried out: a bottom trial takes over a top trial's checkpoint and goes
/// on from exactly the weight that trial had at that iteration (checked on the weight the
/// exploiting trial loaded, against what its source reported), with new params.
pub fn pbt_exploits_continue_from_the_source_weights() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // 4 slots: the 4 trials run side by side, so PBT ranks them together.
    let (grid, events) = pbt_of_grow(dir.path(), &[0.1, 0.5, 1.0, 2.0], 4)?;
    let mut exploits = 0;
    for line in events.lines().filter(|l| l.starts_with("restored")) {
        let f: Vec<&str> = line.split(' ').collect();
        let (me, writer, at, w) = (f[1], f[2], f[3], f[4]);
        let reported = format!("report {writer} {at} {w}");
        ensure!(
            events.lines().any(|l| l == reported),
            "{line}: trial {writer} never reported w = {w} at iteration {at}\n{events}"
        );
        exploits += usize::from(me != writer);
    }
    ensure!(exploits > 0, "no trial exploited another:\n{events}");
    // Every trial's rows hold each iteration once (a trial that took over another's
    // checkpoint goes on after that checkpoint's iteration; it may have none left to run).
    for t in &grid.trials {
        let iterations: Vec<u64> =
            rows(t.path())?.iter().map(|r| r["training_iteration"].as_u64().unwrap_or(0)).collect();
        ensure!(iterations.windows(2).all(|p| p[0] < p[1]), "{}: {iterations:?}", t.trial_id());
        ensure!(iterations.last() <= Some(&8), "{}: {iterations:?}", t.trial_id());
    }
    Ok(())
}

/// PBT with a population of 8 and 2 slots (Ray's time-sharing): the population waits as
/// PENDING, trials pause at perturbations and give their slot up, and a trial takes over the
/// checkpoint of one it never ran beside; every trial ends with each iteration once.
pub fn pbt_time_shares_two_slots_among_eight_trials() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (grid, events) = pbt_of_grow(dir.path(), &[0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0], 2)?;
    let lines: Vec<Vec<&str>> = events.lines().map(|l| l.split(' ').collect()).collect();
    // Each trial's stints (line ranges of the events file): a new one at each restore.
    let mut stints: BTreeMap<&str, Vec<(usize, usize)>> = BTreeMap::new();
    for (i, f) in lines.iter().enumerate() {
        let runs = stints.entry(f[1]).or_default();
        match runs.last_mut() {
            Some(last) if f[0] != "restored" => last.1 = i,
            _ => runs.push((i, i)),
        }
    }
    // Two trials ran at once when stints of theirs that trained (reported) overlap; a trial
    // restored at its last iteration only to end trains nothing.
    let trained = |trial: &str| -> Vec<(usize, usize)> {
        let reported = |i: usize| lines[i][0] == "report" && lines[i][1] == trial;
        stints[trial].iter().copied().filter(|r| (r.0..=r.1).any(reported)).collect()
    };
    let together = |a: &str, b: &str| {
        let (a, b) = (trained(a), trained(b));
        a.iter().any(|x| b.iter().any(|y| x.0 <= y.1 && y.0 <= x.1))
    };
    let most = (0..lines.len())
        .map(|i| stints.values().filter(|s| s.iter().any(|r| r.0 <= i && i <= r.1)).count())
        .max()
        .unwrap_or(0);
    ensure!(most <= 2, "{most} trials ran at once:\n{events}");
    let resumed = lines.iter().filter(|f| f[0] == "restored" && f[1] == f[2]).count();
    ensure!(resumed > 0, "no trial paused and went on:\n{events}");
    let apart = lines
        .iter()
        .filter(|f| f[0] == "restored" && f[1] != f[2] && !together(f[1], f[2]))
        .count();
    ensure!(apart > 0, "no exploit between trials that never ran at once:\n{events}");
    for t in &grid.trials {
        let iterations: Vec<u64> =
            rows(t.path())?.iter().map(|r| r["training_iteration"].as_u64().unwrap_or(0)).collect();
        ensure!(iterations.windows(2).all(|p| p[0] < p[1]), "{}: {iterations:?}", t.trial_id());
    }
    Ok(())
}

/// Reports `loss` = 1/i for i in 1..=4; the trial whose `index` is 2 fails at iteration 3.
fn report_losses(ctx: &mut TrainContext) -> Result<()> {
    let index = ctx.params().get::<i64>("index")?;
    for i in ctx.iteration() + 1..=4 {
        ensure!(!(index == 2 && i == 3), "trial 2 breaks at iteration 3");
        ctx.report([("loss", 1.0 / i as f64), ("index", index as f64)])?;
    }
    Ok(())
}

/// Pauses every trial once, at its second report; otherwise FIFO (which resumes a paused trial
/// as soon as a slot is free: with one trial, in the step that pauses it).
#[derive(Default)]
struct PauseOnce(std::collections::BTreeSet<rtune_searchers::TrialId>, rtune_searchers::Fifo);

impl rtune_searchers::TrialScheduler for PauseOnce {
    fn set_metric(&mut self, metric: &str, mode: Mode) -> rtune_searchers::Result<()> {
        self.1.set_metric(metric, mode)
    }
    fn on_trial_add(
        &mut self,
        trials: &dyn rtune_searchers::TrialsView,
        trial: rtune_searchers::TrialId,
    ) -> rtune_searchers::Result<()> {
        self.1.on_trial_add(trials, trial)
    }
    fn on_trial_result(
        &mut self,
        _: &dyn rtune_searchers::TrialsView,
        trial: rtune_searchers::TrialId,
        result: &Metrics,
    ) -> rtune_searchers::Result<rtune_searchers::Decision> {
        Ok(match result["training_iteration"] == 2.0 && self.0.insert(trial) {
            true => rtune_searchers::Decision::Pause,
            false => rtune_searchers::Decision::Continue,
        })
    }
    fn on_trial_complete(
        &mut self,
        trials: &dyn rtune_searchers::TrialsView,
        trial: rtune_searchers::TrialId,
        result: Option<&Metrics>,
        failed: bool,
    ) -> rtune_searchers::Result<()> {
        self.1.on_trial_complete(trials, trial, result, failed)
    }
    fn choose_trial_to_run(
        &mut self,
        trials: &dyn rtune_searchers::TrialsView,
    ) -> Option<rtune_searchers::TrialId> {
        self.1.choose_trial_to_run(trials)
    }
    fn save_state(&self) -> rtune_searchers::SchedulerState {
        self.1.save_state()
    }
    fn restore_state(
        &mut self,
        state: rtune_searchers::SchedulerState,
    ) -> rtune_searchers::Result<()> {
        self.1.restore_state(state)
    }
}

/// A trial paused and resumed at once (its scheduler goes on with it in the step that pauses
/// it) is a pause to the callbacks, not an end: they hear one pause and one end, and the trial
/// runs its 6 iterations once, going on from its checkpoint.
pub fn a_trial_paused_and_resumed_at_once_ends_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("pids"))?;
    let recorder = std::sync::Arc::new(Recorder::default());
    let trainer = counting_trainer(dir.path()).train_loop_config(
        Params::new().with("dir", dir.path().display().to_string()).with("hold", -1),
    );
    let grid = Tuner::new(trainer, SearchSpace::new().add("index", grid_search(0..1i64)))
        .tune_config(
            TuneConfig::new().metric("score").mode(Mode::Max).scheduler(PauseOnce::default()),
        )
        .run_config(RunConfig::new("paused").storage_path(dir.path()).callback(recorder.clone()))
        .fit()?;
    let heard = recorder.0.lock().unwrap().clone();
    let trial = &grid.trials[0];
    let id = trial.trial_id();
    let count = |what: &str| heard.iter().filter(|l| **l == format!("{what} {id}")).count();
    ensure!((count("pause"), count("complete")) == (1, 1), "{heard:?}");
    ensure!(trial.status() == TrialStatus::Terminated, "{:?}", trial.status());
    let iterations: Vec<f64> = trial.history().iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{iterations:?}");
    Ok(())
}

/// Writes down what it hears, as `<event> <trial_id> [<iteration>]` lines.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl rtune::callback::Callback for Recorder {
    fn name(&self) -> String {
        "Recorder".into()
    }
    fn on_trial_start(&self, t: &rtune::callback::TrialInfo) -> rtune::Result<()> {
        self.0.lock().unwrap().push(format!("start {}", t.trial_id));
        Ok(())
    }
    fn on_trial_result(&self, t: &rtune::callback::TrialInfo, m: &Metrics) -> rtune::Result<()> {
        let line = format!("result {} {}", t.trial_id, m["training_iteration"]);
        self.0.lock().unwrap().push(line);
        Ok(())
    }
    fn on_trial_complete(&self, t: &rtune::callback::TrialInfo) -> rtune::Result<()> {
        self.0.lock().unwrap().push(format!("complete {}", t.trial_id));
        Ok(())
    }
    fn on_trial_pause(&self, t: &rtune::callback::TrialInfo) -> rtune::Result<()> {
        self.0.lock().unwrap().push(format!("pause {}", t.trial_id));
        Ok(())
    }
    fn on_trial_error(&self, t: &rtune::callback::TrialInfo, e: &str) -> rtune::Result<()> {
        ensure_text(e.contains("breaks at iteration 3"), e)?;
        self.0.lock().unwrap().push(format!("error {}", t.trial_id));
        Ok(())
    }
    fn on_experiment_end(&self, trials: &[rtune::callback::TrialInfo]) -> rtune::Result<()> {
        self.0.lock().unwrap().push(format!("end {}", trials.len()));
        Ok(())
    }
}

fn ensure_text(ok: bool, text: &str) -> rtune::Result<()> {
    if ok { Ok(()) } else { Err(rtune::Error::Protocol(format!("unexpected: {text}"))) }
}

/// A callback that fails at the first result.
struct Failing;

impl rtune::callback::Callback for Failing {
    fn name(&self) -> String {
        "Failing".into()
    }
    fn on_trial_result(&self, _: &rtune::callback::TrialInfo, _: &Metrics) -> rtune::Result<()> {
        Err(rtune::Error::Protocol("the disk is full".into()))
    }
}

/// The scalars TensorBoard itself reads from `dir` (with the `tensorboard` package that
/// `make test` installs into .venv): tag → [(step, value)].
pub(crate) fn tensorboard_scalars(dir: &Path) -> Result<serde_json::Value> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = "import json, sys\n\
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n\
        ea = EventAccumulator(sys.argv[1]); ea.Reload()\n\
        print(json.dumps({t: [[e.step, e.value] for e in ea.Scalars(t)] \
        for t in ea.Tags()['scalars']}))";
    let out = Command::new(&python).arg("-c").arg(script).arg(dir).output().with_context(|| {
        format!("{} (make test installs Python and tensorboard into .venv)", python.display())
    })?;
    ensure!(
        out.status.success(),
        "TensorBoard could not read {} (make test installs tensorboard into .venv): {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Callbacks hear each trial start, report its results in order, and end (completed or
/// failed), then the experiment's end; the TensorBoard logger's files are read by TensorBoard
/// itself with the reported values; a failing callback ends the sweep with its name.
pub fn callbacks_hear_every_trial_and_tensorboard_reads_the_logs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let recorder = std::sync::Arc::new(Recorder::default());
    let space = SearchSpace::new().add("index", grid_search(0..3i64));
    let grid = Tuner::new(TorchTrainer::new(report_losses), space.clone())
        .tune_config(TuneConfig::new().metric("loss").mode(Mode::Min))
        .run_config(
            RunConfig::new("callbacks")
                .storage_path(dir.path())
                .callback(recorder.clone())
                .callback(rtune::callback::TensorBoardLogger::new()),
        )
        .fit()?;
    let heard = recorder.0.lock().unwrap().clone();
    for t in &grid.trials {
        let mine: Vec<&str> = heard
            .iter()
            .filter(|l| l.split(' ').nth(1) == Some(t.trial_id()))
            .map(String::as_str)
            .collect();
        let id = &t.trial_id();
        let expected: Vec<String> = if t.params().get::<i64>("index")? == 2 {
            vec![format!("start {id}"), format!("result {id} 1"), format!("result {id} 2")]
                .into_iter()
                .chain([format!("error {id}")])
                .collect()
        } else {
            std::iter::once(format!("start {id}"))
                .chain((1..=4).map(|i| format!("result {id} {i}")))
                .chain([format!("complete {id}")])
                .collect()
        };
        ensure!(mine == expected, "{id} heard {mine:?}");
    }
    ensure!(heard.last().map(String::as_str) == Some("end 3"), "{heard:?}");
    // The grid is read back from the experiment's files: the failed trial keeps its attempt's
    // failure, and every trial the times of its run.
    for t in &grid.trials {
        let result = t.result().context("a trial without its result")?;
        let broke = t.params().get::<i64>("index")? == 2;
        ensure!(
            result.failures.len() == usize::from(broke),
            "{}: {:?}",
            t.trial_id(),
            result.failures
        );
        ensure!(result.fit_seconds > 0.0, "{}: fit took {} s", t.trial_id(), result.fit_seconds);
    }
    // The driver's log in the experiment directory tells each trial's end, in its span.
    let log = std::fs::read_to_string(grid.path.join(rtune_driver::tune::DRIVER_LOG))?;
    for t in &grid.trials {
        let end = if t.params().get::<i64>("index")? == 2 { "failed" } else { "completed" };
        let line = log
            .lines()
            .find(|l| l.contains(&format!("trial{{id={}}}", t.trial_id())) && l.contains(end));
        ensure!(line.is_some(), "no `{end}` line for {} in driver.log:\n{log}", t.trial_id());
    }

    for t in &grid.trials {
        let scalars = tensorboard_scalars(t.path())?;
        let loss: Vec<(u64, f64)> = scalars["loss"]
            .as_array()
            .context("a loss scalar")?
            .iter()
            .map(|p| (p[0].as_u64().unwrap_or(0), p[1].as_f64().unwrap_or(f64::NAN)))
            .collect();
        let expected: Vec<(u64, f64)> = t
            .history()
            .iter()
            .map(|m| (m["training_iteration"] as u64, m["loss"] as f32 as f64))
            .collect();
        ensure!(
            loss == expected,
            "{}: TensorBoard read {loss:?}, reported {expected:?}",
            t.trial_id()
        );
        ensure!(scalars["index"][0][1].as_f64().is_some(), "{scalars}");
    }

    let failed = Tuner::new(TorchTrainer::new(report_losses), space)
        .run_config(RunConfig::new("failing").storage_path(dir.path()).callback(Failing))
        .fit();
    let e = failed.err().context("a failing callback did not end the sweep")?.to_string();
    ensure!(e.contains("Failing") && e.contains("the disk is full"), "{e}");
    Ok(())
}

/// Writes what a fresh worker should see (`RTUNE_LEAK` unset, the driver's working directory,
/// libtorch's default seed, its parent) to `<dir>/seen_<index>`, then changes all of it.
fn mutate_global_state(ctx: &mut TrainContext) -> Result<()> {
    let dir = std::path::PathBuf::from(ctx.params().get::<String>("dir")?);
    let index = ctx.params().get::<i64>("index")?;
    let draw = tch::Tensor::randn([1], (Kind::Float, Device::Cpu)).double_value(&[0]);
    let seen = serde_json::json!({
        "leak": std::env::var("RTUNE_LEAK").ok(),
        "cwd": std::env::current_dir()?.display().to_string(),
        "draw": draw,
        "threads": tch::get_num_threads(),
        // SAFETY: getppid has no preconditions.
        "parent": unsafe { libc::getppid() },
    });
    std::fs::write(dir.join(format!("seen_{index}")), seen.to_string())?;
    // SAFETY: the train function runs on the worker's only training thread; nothing else here
    // reads the environment concurrently.
    unsafe { std::env::set_var("RTUNE_LEAK", index.to_string()) };
    std::env::set_current_dir(&dir)?;
    tch::manual_seed(1234 + index);
    tch::set_num_threads(3);
    ctx.report([("index", index as f64)])?;
    Ok(())
}

/// Workers start warm (forked by the driver's fork server, not exec'd) yet each trial's are
/// new processes: an environment variable, the working directory, libtorch's seed and thread
/// settings changed by one trial never reach the next. With `reuse_actors(false)` they are
/// the driver's own children.
pub fn warm_workers_share_nothing_between_trials() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let seen = |reuse: bool, name: &str| -> Result<Vec<serde_json::Value>> {
        let trainer = TorchTrainer::new(mutate_global_state)
            .train_loop_config(Params::new().with("dir", dir.path().display().to_string()));
        let grid = Tuner::new(trainer, SearchSpace::new().add("index", grid_search(0..3i64)))
            .tune_config(TuneConfig::new().max_concurrent_trials(1).reuse_actors(reuse))
            .run_config(RunConfig::new(name).storage_path(dir.path()))
            .fit()?;
        ensure!(grid.errors().is_empty(), "{:?}", grid.errors());
        (0..3)
            .map(|i| {
                Ok(serde_json::from_slice(&std::fs::read(dir.path().join(format!("seen_{i}")))?)?)
            })
            .collect()
    };
    // The first draw after the seed an earlier trial set: what a leaked seed would give.
    let leaked_draw = |index: i64| {
        tch::manual_seed(1234 + index);
        tch::Tensor::randn([1], (Kind::Float, Device::Cpu)).double_value(&[0])
    };
    let warm = seen(true, "warm")?;
    let driver = std::process::id() as i64;
    let cwd = std::env::current_dir()?.display().to_string();
    for (i, s) in warm.iter().enumerate() {
        ensure!(s["leak"].is_null() && s["cwd"] == cwd.as_str() && s["threads"] == 1, "{s}");
        if i > 0 {
            ensure!(s["draw"].as_f64() != Some(leaked_draw(i as i64 - 1)), "seed leaked: {s}");
        }
        ensure!(
            s["parent"] != driver && s["parent"] == warm[0]["parent"],
            "forked by one server: {s}"
        );
    }
    let cold = seen(false, "cold")?;
    for s in &cold {
        ensure!(s["parent"] == driver, "started by the driver itself: {s}");
        ensure!(s["leak"].is_null() && s["cwd"] == cwd.as_str(), "{s}");
    }
    Ok(())
}

/// Reports `iteration` as `score`, a checkpoint each time, for `iterations` iterations.
fn count_up(ctx: &mut TrainContext) -> Result<()> {
    let iterations = ctx.params().get::<u64>("iterations")?;
    for i in ctx.iteration() + 1..=iterations {
        std::thread::sleep(Duration::from_millis(20));
        let checkpoint = ctx.new_checkpoint()?;
        ctx.report_with_checkpoint([("score", i as f64)], checkpoint)?;
    }
    Ok(())
}

/// Asks the sweep to stop the first trial that reports its third result (what `t` in the
/// terminal UI does).
struct StopAtThird(rtune::tune::Control, std::sync::Mutex<Option<String>>);

impl rtune::callback::Callback for StopAtThird {
    fn name(&self) -> String {
        "StopAtThird".into()
    }
    fn on_trial_result(&self, t: &rtune::callback::TrialInfo, m: &Metrics) -> rtune::Result<()> {
        let mut stopped = self.1.lock().unwrap();
        if m["score"] == 3.0 && stopped.is_none() {
            *stopped = Some(t.trial_id.clone());
            self.0.stop_trial(&t.trial_id);
            self.0.stop_trial("no-such-trial"); // ignored, with a warning
        }
        Ok(())
    }
}

/// `Control::stop_trial` ends one trial as a scheduler would (TERMINATED, its results and last
/// checkpoint kept) while the rest of the sweep runs to its end.
pub fn a_trial_stopped_by_the_user_ends_and_the_sweep_goes_on() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let control = rtune::tune::Control::new();
    let stopper = std::sync::Arc::new(StopAtThird(control.clone(), Default::default()));
    let trainer =
        TorchTrainer::new(count_up).train_loop_config(Params::new().with("iterations", 40));
    let grid = Tuner::new(trainer, SearchSpace::new().add("index", grid_search([0, 1, 2])))
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max).max_concurrent_trials(3))
        .run_config(RunConfig::new("user-stop").storage_path(dir.path()).callback(stopper.clone()))
        .control(control)
        .fit()?;
    let stopped = stopper.1.lock().unwrap().clone().context("no trial reached 3")?;
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    for t in &grid.trials {
        let n = t.history().len();
        if t.trial_id() == stopped {
            // The stop is answered at the report after it was asked for.
            ensure!((3..40).contains(&n), "the stopped trial ran {n} iterations");
            let last = t.result().and_then(|r| r.checkpoint.clone()).context("no ckpt")?;
            ensure!(last.iteration()? == n as u64, "its last checkpoint is not its last report");
        } else {
            ensure!(n == 40, "trial {} ran {n} iterations, not 40", t.trial_id());
        }
    }
    Ok(())
}

/// Holds the first trial at its third result and lets it go a while after the second trial
/// has finished; writes down what it hears (`<event> <index> [<score>]`) and when it resumes.
struct HoldThenRelease(rtune::tune::Control, std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rtune::callback::Callback for HoldThenRelease {
    fn name(&self) -> String {
        "HoldThenRelease".into()
    }
    fn on_trial_result(&self, t: &rtune::callback::TrialInfo, m: &Metrics) -> rtune::Result<()> {
        let index = t.params.get::<i64>("index").unwrap_or(-1);
        self.1.lock().unwrap().push(format!("result {index} {}", m["score"]));
        match (index, m["score"]) {
            (0, 3.0) => self.0.pause_trial(&t.trial_id),
            (1, 12.0) => {
                // Later, from elsewhere (a person at the UI): nothing of trial 0 may run before.
                let (control, heard) = (self.0.clone(), self.1.clone());
                let held = t.trial_id.replace("_00001", "_00000");
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(300));
                    heard.lock().unwrap().push("resume 0".into());
                    control.resume_trial(&held);
                });
            }
            _ => {}
        }
        Ok(())
    }
    fn on_trial_pause(&self, t: &rtune::callback::TrialInfo) -> rtune::Result<()> {
        let index = t.params.get::<i64>("index").unwrap_or(-1);
        self.1.lock().unwrap().push(format!("pause {index}"));
        Ok(())
    }
}

/// `Control::pause_trial` holds a trial (paused from its checkpoint, its place taken by the
/// next) until `resume_trial`; it then goes on from where it was, every iteration once.
pub fn a_held_trial_waits_and_goes_on_from_its_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let control = rtune::tune::Control::new();
    let holder = std::sync::Arc::new(HoldThenRelease(control.clone(), Default::default()));
    let trainer =
        TorchTrainer::new(count_up).train_loop_config(Params::new().with("iterations", 12));
    let grid = Tuner::new(trainer, SearchSpace::new().add("index", grid_search([0, 1])))
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max).max_concurrent_trials(1))
        .run_config(RunConfig::new("hold").storage_path(dir.path()).callback(holder.clone()))
        .control(control)
        .fit()?;
    let heard = holder.1.lock().unwrap().clone();
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated), "{heard:?}");
    for t in &grid.trials {
        let scores: Vec<f64> = t.history().iter().map(|m| m["score"]).collect();
        let want: Vec<f64> = (1..=12).map(f64::from).collect();
        ensure!(scores == want, "trial {}: {scores:?}", t.trial_id());
    }
    // Held after its third result (answered at a later report), it let trial 1 run whole
    // before it went on.
    let at = |line: &str| {
        heard.iter().position(|h| h == line).with_context(|| format!("{line}: {heard:?}"))
    };
    let paused = at("pause 0")?;
    ensure!(at("result 0 3")? < paused && paused < at("result 1 1")?, "{heard:?}");
    let resumed_first = heard
        .iter()
        .skip(paused)
        .position(|h| h.starts_with("result 0 "))
        .context("0 never went on")?;
    ensure!(at("result 1 12")? < paused + resumed_first, "trial 0 ran while held: {heard:?}");
    // While only the held trial was left, the log said what the sweep waited for (once).
    let log =
        std::fs::read_to_string(dir.path().join("hold").join(rtune_driver::tune::DRIVER_LOG))?;
    let held = &grid.trials[0];
    ensure!(
        log.matches("only held trials are left").count() == 1
            && log.contains(&format!("left ({}): the sweep waits", held.trial_id()))
            && log.contains("rtune stop"),
        "{log}"
    );
    Ok(())
}

/// The sweep's saved state keeps up with reports while trials run, not only when one starts or
/// ends (reports do not wake the sweep's loop; it looks for them on a timer): the scheduler's
/// state in the snapshot holds a running trial's 5 reports while the trial waits.
pub fn the_saved_state_keeps_up_with_reports() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let go = dir.path().join("go");
    let trainer = TorchTrainer::new(report_a_burst_then_wait)
        .train_loop_config(Params::new().with("go", go.display().to_string()));
    // A median rule that stops nobody here: its state is every trial's reported scores.
    let median = rtune_searchers::MedianStopping::new().grace_period(1e9);
    let tuner = Tuner::new(trainer, SearchSpace::new().add("index", grid_search([0])))
        .tune_config(TuneConfig::new().metric("step").mode(Mode::Max).scheduler(median))
        .run_config(RunConfig::new("keeps_up").storage_path(dir.path()));
    let sweep = std::thread::spawn(move || tuner.fit());
    let state = dir.path().join("keeps_up").join(rtune_driver::tune::STATE_FILE);
    let mut scores = 0;
    let seen = wait_for(Duration::from_secs(60), || {
        ensure!(!sweep.is_finished(), "the sweep ended before it was told to go");
        let Ok(text) = std::fs::read(&state) else { return Ok(false) };
        let saved: serde_json::Value = serde_json::from_slice(&text)?;
        scores = saved["controller"]["scheduler"].to_string().matches("\"score\"").count();
        Ok(scores == 5)
    });
    std::fs::write(&go, "")?;
    let grid = sweep.join().map_err(|_| anyhow::anyhow!("fit panicked"))??;
    seen.with_context(|| format!("the saved state held {scores} of the trial's 5 reports"))?;
    ensure!(grid.trials.len() == 1 && grid.errors().is_empty(), "{:?}", grid.errors());
    Ok(())
}

/// Reads `lr` only, and reports it: a sweep over anything else changes nothing.
fn reads_lr_only(ctx: &mut TrainContext) -> Result<()> {
    let lr = ctx.params().get::<f64>("lr")?;
    ctx.report([("score", lr)]).map_err(Into::into)
}

/// A param the train function never reads (`LR` for `lr`) is named: in each trial's result,
/// in the grid (kept in the experiment's files, so a restored grid says it too), and with
/// `strict_params` as each trial's error.
pub fn a_param_never_read_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let trainer = || {
        TorchTrainer::new(reads_lr_only)
            .train_loop_config(Params::new().with("lr", 0.1))
            .scaling(ScalingConfig::workers(1))
    };
    let space = || SearchSpace::new().add("LR", grid_search([0.01, 0.02]));
    // A stop criterion on a metric no report has (`scroe`) stops nothing: said at the first.
    let lenient = RunConfig::new("lenient").storage_path(dir.path()).stop("scroe", 0.5);
    let grid = Tuner::new(trainer(), space())
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max))
        .run_config(lenient)
        .fit()?;
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.errors()
    );
    ensure!(grid.unread_params() == [("LR".to_string(), 2)], "{:?}", grid.unread_params());
    // Every trial trained with the default: the search changed nothing.
    ensure!(grid.trials.iter().all(|t| t.last("score") == Some(0.1)));
    let again = ResultGrid::from_path(dir.path().join("lenient"))?;
    ensure!(again.unread_params() == grid.unread_params(), "{:?}", again.unread_params());
    let log =
        std::fs::read_to_string(dir.path().join("lenient").join(rtune_driver::tune::DRIVER_LOG))?;
    ensure!(
        log.matches("param `LR` never read by the train function").count() == 1
            && log.contains("did you mean `lr`?"),
        "{log}"
    );
    ensure!(
        log.matches("stop criterion `scroe` names a metric the first report does not have").count()
            == 1
            && log.contains("did you mean `score`?"),
        "{log}"
    );

    let strict =
        RunConfig { strict_params: true, ..RunConfig::new("strict").storage_path(dir.path()) };
    let grid = Tuner::new(trainer(), space())
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max))
        .run_config(strict)
        .fit()?;
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Error));
    for t in &grid.trials {
        let error = t.error().unwrap_or_default();
        ensure!(error.contains("`LR` never read") && error.contains("strict_params"), "{error}");
    }
    // Read through a dotted path or whole (a train function handing them on) counts as read.
    let mut p = Params::new().with("model", Params::new().with("lr", 1.0).into_value());
    p.track_reads();
    ensure!(p.get::<f64>("model.lr")? == 1.0 && p.unread().is_empty());
    Ok(())
}

/// Reports iterations 1..=3, each with a checkpoint; a run started afresh waits after its first
/// report until file `go` exists, then fails (its worker dies, as an interrupted sweep's may).
/// Each start writes the iteration it starts after as a line of `go.starts`.
fn report_then_die_on_go(ctx: &mut TrainContext) -> Result<()> {
    use std::io::Write;
    let go = std::path::PathBuf::from(ctx.params().get::<String>("go")?);
    let mut starts =
        std::fs::OpenOptions::new().create(true).append(true).open(go.with_extension("starts"))?;
    writeln!(starts, "{}", ctx.iteration())?;
    let afresh = ctx.iteration() == 0;
    for i in ctx.iteration() + 1..=3 {
        let checkpoint = ctx.new_checkpoint()?;
        ctx.report_with_checkpoint([("score", i as f64)], checkpoint)?;
        if afresh && i == 1 {
            let waited = std::time::Instant::now();
            while !go.exists() {
                ensure!(waited.elapsed().as_secs() < 60, "nobody said go");
                std::thread::sleep(Duration::from_millis(10));
            }
            bail!("told to die");
        }
    }
    Ok(())
}

/// An attempt that fails after its sweep was interrupted (its workers killed with the sweep,
/// its node drained, before an answer told them to stop) is no failure of the trial: it is not
/// retried (no worker starts after the interrupt) and not counted, and the restored sweep goes
/// on with the trial from its checkpoint, every iteration once.
pub fn an_attempt_failing_while_the_sweep_stops_is_no_failure() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let go = dir.path().join("go");
    let starts = go.with_extension("starts");
    let trainer = || {
        TorchTrainer::new(report_then_die_on_go)
            .train_loop_config(Params::new().with("go", go.display().to_string()))
    };
    let control = rtune::tune::Control::new();
    let experiment = dir.path().join("dies");
    let tuner = Tuner::new(trainer(), SearchSpace::new().add("index", grid_search([0])))
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max))
        .run_config(
            RunConfig::new("dies")
                .storage_path(dir.path())
                .failure_config(FailureConfig::max_failures(3)),
        )
        .control(control.clone());
    let sweep = std::thread::spawn(move || tuner.fit());
    // The trial reported its first result, and waits.
    wait_for(Duration::from_secs(120), || {
        ensure!(!sweep.is_finished(), "the sweep ended before it was interrupted");
        let reported =
            std::fs::read_dir(&experiment).ok().into_iter().flatten().flatten().any(|e| {
                std::fs::read_to_string(e.path().join("result.json")).is_ok_and(|t| !t.is_empty())
            });
        Ok(reported)
    })?;
    control.interrupt();
    let log = experiment.join(rtune_driver::tune::DRIVER_LOG);
    wait_for(Duration::from_secs(60), || {
        Ok(std::fs::read_to_string(&log).is_ok_and(|t| t.contains("interrupted: stopping")))
    })?;
    std::fs::write(&go, "")?;
    let interrupted = sweep.join().map_err(|_| anyhow::anyhow!("fit panicked"))?;
    ensure!(
        matches!(interrupted, Err(rtune::Error::Interrupted { .. })),
        "the sweep ended {interrupted:?}"
    );
    ensure!(std::fs::read_to_string(&starts)? == "0\n", "an attempt started after the interrupt");
    let text = std::fs::read_to_string(&log)?;
    ensure!(
        text.contains("not counted as a failure: ") && !text.contains("attempt 0 failed"),
        "{text}"
    );

    let grid = Tuner::restore(&experiment, trainer())?.fit()?;
    ensure!(grid.errors().is_empty(), "{:?}", grid.errors());
    let trial = &grid.trials[0];
    ensure!(trial.status() == TrialStatus::Terminated);
    let scores: Vec<f64> = trial.history().iter().map(|m| m["score"]).collect();
    ensure!(scores == [1.0, 2.0, 3.0], "{scores:?}");
    ensure!(std::fs::read_to_string(&starts)? == "0\n1\n", "it did not go on from its checkpoint");
    Ok(())
}

/// BOHB (its searcher with HyperBand) through the Tuner: every trial ends, HyperBand stopped
/// some early, and the experiment's saved state holds the searcher's observations at several
/// budgets (what a restored sweep's model goes on from), restored into a BOHB whose model is
/// then in use.
pub fn bohb_with_hyperband_sweeps_and_saves_its_model() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let space = SearchSpace::new()
        .add("rate", rtune_searchers::loguniform(0.02, 1.0)?)
        .add("plateau", rtune_searchers::uniform(0.5, 1.0)?);
    let trainer = TorchTrainer::new(rtune::builtins::train_synthetic_curve).train_loop_config(
        Params::new()
            .with("iterations", 9)
            .with("noise", 0.01)
            .with("seed", 3)
            .with("sleep_s", 0.0)
            .with("fail_at", 0),
    );
    let bohb = rtune_searchers::Bohb::with_space(space.clone())?.seed(1);
    let grid = Tuner::new(trainer, space.clone())
        .tune_config(
            TuneConfig::new()
                .metric("score")
                .mode(Mode::Max)
                .num_samples(24)
                .max_concurrent_trials(4)
                .search_alg(bohb)
                .scheduler(HyperBand::new().max_t(9).reduction_factor(3)),
        )
        .run_config(RunConfig::new("bohb").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.trials.len() == 24, "{} trials", grid.trials.len());
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.trials.iter().map(|t| t.status()).collect::<Vec<_>>()
    );
    ensure!(grid.trials.iter().any(|t| t.history().len() < 9), "HyperBand stopped none early");
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(
        dir.path().join("bohb").join(rtune_driver::tune::STATE_FILE),
    )?)?;
    let saved = state["controller"]["searcher"].to_string();
    let searcher: rtune_searchers::SearcherState = serde_json::from_str(&saved)
        .or_else(|_| serde_json::from_value(state["controller"]["searcher"]["inner"].clone()))
        .with_context(|| format!("the saved searcher: {saved}"))?;
    let mut restored = rtune_searchers::Bohb::with_space(space)?;
    rtune_searchers::Searcher::restore_state(&mut restored, searcher)?;
    let budgets = restored.observations();
    ensure!(budgets.len() >= 3 && budgets[0].1 == 24, "observations per budget: {budgets:?}");
    ensure!(restored.model_budget().is_some(), "no budget has a model: {budgets:?}");
    Ok(())
}

/// The searcher's state the experiment in `experiment` saved (the searcher's own, or inside the
/// concurrency limiter around it).
fn saved_searcher(experiment: &Path) -> Result<rtune_searchers::SearcherState> {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(experiment.join(rtune_driver::tune::STATE_FILE))?)?;
    let saved = state["controller"]["searcher"].clone();
    serde_json::from_value(saved.clone())
        .or_else(|_| serde_json::from_value(saved["inner"].clone()))
        .with_context(|| format!("the saved searcher: {saved}"))
}

/// ZDT1 over `x0` and `x1`: `f1` and `f2`, both to minimise, reported once.
fn zdt1_trial(ctx: &mut TrainContext) -> Result<()> {
    let (x0, x1) = (ctx.params().get::<f64>("x0")?, ctx.params().get::<f64>("x1")?);
    let g = 1.0 + 9.0 * x1;
    ctx.report([("f1", x0), ("f2", g * (1.0 - (x0 / g).sqrt()))]).map_err(Into::into)
}

/// NSGA-II through the Tuner with two objectives: every trial ends, the grid's front is the
/// trials none dominates, and the experiment's saved state holds the searcher's generations
/// (what a restored sweep goes on from), restored into an NSGA-II that breeds from them.
pub fn nsga2_sweeps_two_objectives_and_saves_its_generations() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let space = SearchSpace::new()
        .add("x0", rtune_searchers::uniform(0.0, 1.0)?)
        .add("x1", rtune_searchers::uniform(0.0, 1.0)?);
    let nsga2 = rtune_searchers::Nsga2::with_space(space.clone())?.seed(2).population_size(4);
    let grid = Tuner::new(TorchTrainer::new(zdt1_trial), space.clone())
        .tune_config(
            TuneConfig::new()
                .objectives([("f1", Mode::Min), ("f2", Mode::Min)])
                .num_samples(16)
                .max_concurrent_trials(2)
                .search_alg(nsga2),
        )
        .run_config(RunConfig::new("nsga2").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.trials.len() == 16, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    let point = |t: &rtune::TrialResult| {
        (t.last("f1").unwrap_or(f64::NAN), t.last("f2").unwrap_or(f64::NAN))
    };
    let dominated = |p: (f64, f64)| {
        grid.trials.iter().map(point).any(|q| q.0 <= p.0 && q.1 <= p.1 && (q.0 < p.0 || q.1 < p.1))
    };
    let front: Vec<&str> = grid.pareto_front()?.iter().map(|t| t.trial_id()).collect();
    let expected: Vec<&str> =
        grid.trials.iter().filter(|t| !dominated(point(t))).map(|t| t.trial_id()).collect();
    ensure!(front == expected && !front.is_empty(), "{front:?} against {expected:?}");
    // Read back from its files, the grid knows its objectives.
    let read = ResultGrid::from_path(dir.path().join("nsga2"))?;
    let named: Vec<(&str, Mode)> =
        read.objectives.iter().map(|o| (o.metric.as_str(), o.mode)).collect();
    ensure!(named == [("f1", Mode::Min), ("f2", Mode::Min)] && read.objectives.metric().is_none());
    let searcher = saved_searcher(&dir.path().join("nsga2"))?;
    let mut restored = rtune_searchers::Nsga2::with_space(space)?.population_size(4);
    rtune_searchers::Searcher::restore_state(&mut restored, searcher)?;
    ensure!(restored.generation() >= 2, "generation {} after 16 trials", restored.generation());
    Ok(())
}

/// A sphere over `x` and `y` centred at (0.3, -0.2), reported once as `loss`.
fn sphere_trial(ctx: &mut TrainContext) -> Result<()> {
    let (x, y) = (ctx.params().get::<f64>("x")?, ctx.params().get::<f64>("y")?);
    ctx.report([("loss", (x - 0.3).powi(2) + (y + 0.2).powi(2))]).map_err(Into::into)
}

/// CMA-ES through the Tuner, two trials at a time (a trial still running when its generation
/// filled teaches nothing): every trial ends, the searcher learns (the last 8 trials are 8
/// times better than the first 8 on average), and the experiment's saved state restores.
pub fn cmaes_sweeps_and_saves_its_search() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let space = SearchSpace::new()
        .add("x", rtune_searchers::uniform(-2.0, 2.0)?)
        .add("y", rtune_searchers::uniform(-2.0, 2.0)?);
    let cmaes = rtune_searchers::CmaEs::with_space(space.clone())?.seed(3).popsize(4);
    let grid = Tuner::new(TorchTrainer::new(sphere_trial), space.clone())
        .tune_config(
            TuneConfig::new()
                .metric("loss")
                .mode(Mode::Min)
                .num_samples(64)
                .max_concurrent_trials(2)
                .search_alg(cmaes),
        )
        .run_config(RunConfig::new("cmaes").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.trials.len() == 64, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    let losses: Vec<f64> = grid.trials.iter().map(|t| t.last("loss").unwrap_or(f64::NAN)).collect();
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (first, last) = (mean(&losses[..8]), mean(&losses[56..]));
    ensure!(last < first / 8.0, "it did not learn: {first} then {last}: {losses:?}");
    let searcher = saved_searcher(&dir.path().join("cmaes"))?;
    ensure!(searcher.kind() == "cma_es", "{}", searcher.kind());
    let mut restored = rtune_searchers::CmaEs::with_space(space)?.popsize(4);
    rtune_searchers::Searcher::restore_state(&mut restored, searcher)?;
    ensure!(restored.current_popsize() == Some(4), "{:?}", restored.current_popsize());
    Ok(())
}

/// The GP through the Tuner, two trials at a time: every trial ends, its model's trials find a
/// better value than the random start-up's, and the experiment's saved state restores.
pub fn gp_sweeps_and_saves_its_search() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let space = SearchSpace::new()
        .add("x", rtune_searchers::uniform(-2.0, 2.0)?)
        .add("y", rtune_searchers::uniform(-2.0, 2.0)?);
    let gp = rtune_searchers::Gp::with_space(space.clone())?.seed(3).n_startup_trials(6);
    let grid = Tuner::new(TorchTrainer::new(sphere_trial), space.clone())
        .tune_config(
            TuneConfig::new()
                .metric("loss")
                .mode(Mode::Min)
                .num_samples(20)
                .max_concurrent_trials(2)
                .search_alg(gp),
        )
        .run_config(RunConfig::new("gp").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.trials.len() == 20, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    let losses: Vec<f64> = grid.trials.iter().map(|t| t.last("loss").unwrap_or(f64::NAN)).collect();
    let best = |xs: &[f64]| xs.iter().copied().fold(f64::INFINITY, f64::min);
    let (start, model) = (best(&losses[..6]), best(&losses[6..]));
    ensure!(model < start / 10.0 && model < 0.01, "{start} then {model}: {losses:?}");
    let searcher = saved_searcher(&dir.path().join("gp"))?;
    ensure!(searcher.kind() == "gp", "{}", searcher.kind());
    let mut restored = rtune_searchers::Gp::with_space(space)?;
    rtune_searchers::Searcher::restore_state(&mut restored, searcher)?;
    Ok(())
}
