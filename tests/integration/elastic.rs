//! Elastic worker groups (`num_workers = { min, max }`): a rank killed from outside shrinks the
//! group instead of failing it, the group grows back when the pool has room, and neither counts
//! against `max_failures`; losing ranks below `min` fails the trial as a rigid group's loss does.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::cli::{RTUNE, rtune};
use crate::common::{Killed, kill_rank, resizes_said, synthetic_sweep, text, wait_for};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

/// `rtune run` of the sweep `name` of `synthetic-curve` (`tables` after its trainable) on a
/// machine of 3 CPUs, in the background, once its first trial has `rows` rows: the run and its
/// experiment's folder.
fn run_until_rows(
    dir: &std::path::Path,
    name: &str,
    tables: &str,
    rows: usize,
) -> Result<(Killed, std::path::PathBuf)> {
    let file = synthetic_sweep(dir, name, tables)?;
    let run = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .env("RTUNE_NUM_CPUS", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let run = Killed(run);
    let experiment = dir.join(name);
    let made = || -> usize {
        let Ok(grid) = ResultGrid::from_path(&experiment) else { return 0 };
        grid.trials.first().map_or(0, |t| t.history().len())
    };
    wait_for(Duration::from_secs(90), || Ok(made() >= rows))
        .with_context(|| format!("no {rows} rows"))?;
    Ok((run, experiment))
}

/// Runs the sweep `name` of `synthetic-curve` (20 iterations, a checkpoint each) with
/// `num_workers`, on a machine of 3 CPUs; once it has 3 rows, SIGKILLs its rank 2 (found with
/// `rtune stack`); returns the sweep's exit and its experiment's folder.
fn kill_rank_2(
    dir: &std::path::Path,
    name: &str,
    num_workers: &str,
) -> Result<(std::process::ExitStatus, std::path::PathBuf)> {
    let tables = format!(
        "[scaling]\nnum_workers = {num_workers}\n[param_space]\niterations = 20\n\
         sleep_s = 0.25\n"
    );
    let (mut run, experiment) = run_until_rows(dir, name, &tables, 3)?;
    kill_rank(&experiment, 2)?;
    let status = run.0.wait()?;
    Ok((status, experiment))
}

/// One of 3 ranks SIGKILLed mid-run: the trial goes on with 2 (a resize, not a failure: the
/// sweep allows none), grows back to 3 at its next checkpoint (the CPU is free again), ends
/// TERMINATED with every iteration once; its rows say their world size, the resizes are counted
/// and said, and `rtune show` lists them.
pub fn a_lost_rank_shrinks_the_group_and_it_grows_back() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (status, experiment) = kill_rank_2(dir.path(), "shrink", "{ min = 2, max = 3 }")?;
    ensure!(status.success(), "the sweep: {status}");
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = &grid.trials[0];
    ensure!(trial.status() == TrialStatus::Terminated, "{:?}: {:?}", trial.status(), trial.error());
    let iterations: Vec<f64> = trial.history().iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == (1..=20).map(f64::from).collect::<Vec<_>>(), "{iterations:?}");
    let worlds: Vec<f64> = trial.history().iter().map(|m| m["world_size"]).collect();
    ensure!(worlds[0] == 3.0, "it started with every rank it may have: {worlds:?}");
    let shrunk = worlds.iter().position(|&w| w == 2.0).context(format!("never 2: {worlds:?}"))?;
    ensure!(worlds[shrunk..].contains(&3.0), "it never grew back: {worlds:?}");
    ensure!(trial.last("group_resizes") == Some(2.0), "{:?}", trial.last("group_resizes"));
    let frame = grid.dataframe()?;
    let resizes = frame.column("group_resizes")?.f64()?.get(0);
    ensure!(resizes == Some(2.0), "the dataframe's resize count: {resizes:?}");
    let said = resizes_said(trial.path())?;
    ensure!(said.len() == 2, "{said:?}");
    // synthetic-curve meets the others in its own all_reduce, which does not go on in place.
    ensure!(said[0].starts_with("3 -> 2: rank 2 lost: killed by signal 9 (SIGKILL)"), "{said:?}");
    ensure!(said[0].contains("(from the latest checkpoint; not in place: rank "), "{said:?}");
    ensure!(said[1].starts_with("2 -> 3: room appeared"), "{said:?}");
    let out = rtune(&["show", experiment.to_str().unwrap(), "0"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let shrank = "(attempt 0): 3 -> 2: rank 2 lost: killed by signal 9";
    ensure!(stdout.contains("resized after iteration ") && stdout.contains(shrank), "{stdout}");
    ensure!(stdout.contains("its group of 2 ranks started"), "{stdout}");
    Ok(())
}

/// A resumed elastic trial takes all the room it may have when it is free, as a fresh one does
/// (it started again at `min`, its last report's world size being its old group's, and grew at
/// its next checkpoint by another restart).
pub fn a_resumed_elastic_trial_starts_as_large_as_a_fresh_one() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let tables = "[scaling]\nnum_workers = { min = 1, max = 3 }\n[param_space]\niterations = 40\n\
                  sleep_s = 0.2\n";
    let (mut run, experiment) = run_until_rows(dir.path(), "resumed", tables, 5)?;
    run.0.kill()?;
    run.0.wait()?;
    let out = Command::new(RTUNE)
        .args(["resume", experiment.to_str().unwrap(), "--no-tui"])
        .env("RTUNE_NUM_CPUS", "3")
        .output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = &grid.trials[0];
    let starts: Vec<(f64, f64)> = trial
        .history()
        .iter()
        .filter(|m| m.contains_key("group_attempt"))
        .map(|m| (m["group_attempt"], m["world_size"]))
        .collect();
    ensure!(starts.len() == 2 && starts.iter().all(|&(_, w)| w == 3.0), "starts {starts:?}");
    ensure!(resizes_said(trial.path())?.is_empty(), "{:?}", resizes_said(trial.path()));
    Ok(())
}

/// An elastic group at its `min` that loses a rank fails as a rigid group would, and that
/// failure counts: with no failures allowed, the trial ends in ERROR naming the signal.
pub fn losing_a_rank_below_min_fails_the_trial() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (status, experiment) = kill_rank_2(dir.path(), "below", "{ min = 3, max = 3 }")?;
    ensure!(status.code() == Some(1), "a failed trial exits 1: {status}");
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = &grid.trials[0];
    ensure!(trial.status() == TrialStatus::Error, "{:?}", trial.status());
    let error = trial.error().unwrap_or_default();
    ensure!(error.contains("lost") || error.contains("signal 9"), "{error}");
    ensure!(trial.last("group_resizes").is_none(), "no resize: {:?}", trial.last("group_resizes"));
    Ok(())
}

/// The variable that makes this test binary run `elastic_digits` in an elastic group of 2 to 3
/// ranks and exit (`STORAGE_DIR NAME LOSE_AT SHARDING LOSE_RANK`, the sharding `none` or
/// `zero1`), on a machine of 3 CPUs of its own.
const FIT_ENV: &str = "RTUNE_TEST_ELASTIC_FIT";

/// In a child started by `a_rank_lost_mid_step_is_survived_in_place`: runs the fit its
/// variable names, prints its result's failures and exits. Elsewhere: returns at once.
pub fn run_fit_if_asked() {
    let Ok(spec) = std::env::var(FIT_ENV) else { return };
    let mut words = spec.split(' ');
    let (storage, name, lose_at) = (words.next(), words.next(), words.next());
    let (Some(storage), Some(name), Some(lose_at)) = (storage, name, lose_at) else {
        eprintln!("{FIT_ENV}: STORAGE_DIR NAME LOSE_AT SHARDING LOSE_RANK");
        std::process::exit(2)
    };
    let mut scaling = rtune::ScalingConfig::elastic(2, 3);
    if let Some(sharding) = words.next().and_then(rtune::config::Sharding::from_name) {
        scaling = scaling.sharding(sharding);
    }
    let lose_rank = words.next().map_or(2, |r| r.parse::<i64>().unwrap());
    let trainer = rtune::builtins::digits_data(
        rtune::TorchTrainer::new(elastic_digits)
            .train_loop_config(
                rtune::Params::new()
                    .with("lose_at", lose_at.parse::<i64>().unwrap())
                    .with("lose_rank", lose_rank),
            )
            .scaling(scaling)
            .run_config(rtune::RunConfig::new(name).storage_path(storage)),
    );
    match trainer.and_then(|t| t.fit()) {
        Ok(result) => {
            println!("failures: {}", result.failures.len());
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("fit failed: {e}");
            std::process::exit(1)
        }
    }
}

/// How `elastic_digits` steps: plain data parallelism, or its optimizer state sharded (ZeRO).
enum Parallel {
    Whole(rtune::worker::DistributedModel, rtune::worker::ModelOptimizer),
    Sharded(rtune::worker::ShardedModel),
}

/// A data-parallel MLP on the digits with global batches of 64 rows (Adam, its state whole or
/// sharded as `ScalingConfig::sharding` says; 3 epochs, a checkpoint with Adam's state each);
/// on its first attempt, rank `lose_rank` SIGKILLs itself at step `lose_at` (0: never),
/// mid-epoch. Each rank saves its weights at each epoch's end
/// (`weights_RANK_EPOCH.safetensors`). With its state whole the group never restarts: it reads
/// no checkpoint's weights or moments (a rank that joins in place takes them from rank 0), only
/// where its epochs begin.
fn elastic_digits(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
    use rtune::worker::{BatchSpec, OptimizerSettings};
    use rtune::{LoadVarStore, SaveVarStore};
    use tch::nn::Module;
    let lose_at = ctx.params().get::<i64>("lose_at")?;
    let lose_rank = ctx.params().get::<i64>("lose_rank")? as usize;
    let mut train = ctx.dataset_shard("train")?;
    tch::manual_seed(0);
    let mut vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let net = crate::trainer::mlp(&vs.root(), 32);
    if let Some(checkpoint) = ctx.checkpoint().filter(|_| ctx.sharding().is_some()) {
        checkpoint.load_var_store(&mut vs)?;
    }
    let adam = OptimizerSettings::adam(1e-2);
    let mut model = match ctx.sharding() {
        None => {
            let whole = adam.for_model(&vs)?;
            Parallel::Whole(ctx.prepare_model(&vs)?, whole)
        }
        Some(sharding) => {
            let mut sharded = ctx.prepare_model_sharded(&vs, sharding, adam)?;
            if let Some(checkpoint) = ctx.checkpoint() {
                sharded.load_optimizer(checkpoint)?;
            }
            Parallel::Sharded(sharded)
        }
    };
    let first = ctx.checkpoint().is_none();
    let spec = BatchSpec::global(64).shuffle(3).drop_last(true);
    let mut step = 0;
    for epoch in ctx.iteration()..3 {
        for (x, y) in train.iter_batches(&spec)? {
            step += 1;
            if first && step == lose_at && ctx.world_rank() == lose_rank {
                // SAFETY: raise(2) on this process: a rank lost mid-step.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            let loss = net.forward(&x).cross_entropy_for_logits(&y);
            match &mut model {
                Parallel::Whole(ddp, adam) => ddp.backward_step(adam, &loss)?,
                Parallel::Sharded(sharded) => sharded.backward_step(&loss)?,
            }
        }
        vs.save(ctx.run_dir().join(format!("weights_{}_{epoch}.safetensors", ctx.world_rank())))?;
        let mut checkpoint = ctx.new_checkpoint()?;
        checkpoint.save_var_store(&vs)?;
        match &model {
            Parallel::Whole(_, adam) => adam.save(&mut checkpoint)?,
            Parallel::Sharded(sharded) => sharded.save_optimizer(&mut checkpoint)?,
        }
        ctx.report_with_checkpoint([("ranks", ctx.world_size() as f64)], checkpoint)?;
    }
    Ok(())
}

/// Runs `elastic_digits` in a child of its own (3 CPUs) with `sharding` (`none`, `zero1`),
/// rank 2 lost at step `lose_at`; the run's folder.
fn fit_in_child(
    dir: &std::path::Path,
    name: &str,
    lose_at: u32,
    sharding: &str,
) -> Result<std::path::PathBuf> {
    fit_losing(dir, name, lose_at, sharding, 2)
}

/// `fit_in_child`, losing rank `rank`.
fn fit_losing(
    dir: &std::path::Path,
    name: &str,
    lose_at: u32,
    sharding: &str,
    rank: usize,
) -> Result<std::path::PathBuf> {
    let out = Command::new(std::env::current_exe()?)
        .env(FIT_ENV, format!("{} {name} {lose_at} {sharding} {rank}", dir.display()))
        .env("RTUNE_NUM_CPUS", "3")
        .output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.contains("failures: 0"), "{}", text(&out));
    Ok(dir.join(name))
}

/// A run's result rows.
fn rows(run: &std::path::Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(run.join("result.json"))?;
    Ok(text.lines().map(serde_json::from_str).collect::<std::result::Result<_, _>>()?)
}

/// The final weights of a run: its last checkpoint's, by name.
fn final_weights(run: &std::path::Path) -> Result<Vec<(String, Vec<f32>)>> {
    let mut checkpoints: Vec<std::path::PathBuf> = std::fs::read_dir(run)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("checkpoint_")))
        .collect();
    checkpoints.sort();
    let last = checkpoints.last().context("no checkpoint")?;
    // The model's weights (`fc1.weight`, ...), not the optimizer's moments beside them.
    let mut named: Vec<(String, Vec<f32>)> = Vec::new();
    for file in std::fs::read_dir(last)?.filter_map(|e| e.ok().map(|e| e.path())) {
        if file.extension().is_none_or(|x| x != "safetensors") {
            continue;
        }
        for (name, t) in tch::Tensor::read_safetensors(&file)? {
            if name.starts_with("fc") && !name.contains('/') {
                named.push((name, Vec::<f32>::try_from(t.reshape([-1]))?));
            }
        }
    }
    named.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(named)
}

/// Rank 2 of 3 SIGKILLed mid-step: the other two re-form their group in place and go on, in
/// the same attempt (no restart, no checkpoint read), from the step they were in; at the next
/// checkpoint a new rank joins in place, handed rank 0's state. The run ends with no failure
/// and the same weights as a run that lost no rank, within float summation order (each step's
/// samples and mean gradient do not depend on the group's size).
pub fn a_rank_lost_mid_step_is_survived_in_place() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let calm = fit_in_child(dir.path(), "calm", 0, "none")?;
    let lost = fit_in_child(dir.path(), "lost", 10, "none")?;
    let (calm_rows, lost_rows) = (rows(&calm)?, rows(&lost)?);
    ensure!(calm_rows.iter().all(|r| r["world_size"] == 3), "{calm_rows:?}");
    // The epoch the rank was lost in ends with 2 ranks, in the attempt it began in.
    let first = &lost_rows[0];
    ensure!(first["world_size"] == 2 && first["ranks"] == 2.0, "{first}");
    ensure!(first["group_attempt"] == 0, "the first epoch ends in attempt 0: {first}");
    let said = first["group_resize"].as_str().unwrap_or_default();
    ensure!(
        said.starts_with("3 -> 2: rank 2 lost: killed by signal 9") && said.ends_with("(in place)"),
        "{said}"
    );
    // Then it grows back at its first checkpoint (this machine has the room again), in place:
    // the new rank joins the running group, which never starts again.
    let grew = lost_rows[1]["group_resize"].as_str().unwrap_or_default();
    ensure!(grew == "2 -> 3: room appeared in the pool (in place)", "{grew}");
    ensure!(lost_rows.len() == 3 && lost_rows[2]["world_size"] == 3, "{lost_rows:?}");
    ensure!(lost_rows[1..].iter().all(|r| r["group_attempt"].is_null()), "{lost_rows:?}");
    // The rank that joined took rank 0's weights and Adam's moments and steps, bit for bit: it
    // read no checkpoint, and after an epoch of the same mean gradients its weights are rank
    // 0's exactly (anything else in its state would show).
    let weights = |rank: usize| -> Result<Vec<(String, tch::Tensor)>> {
        let file = lost.join(format!("weights_{rank}_2.safetensors"));
        let mut named = tch::Tensor::read_safetensors(&file)?;
        named.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(named)
    };
    let (rank0, joiner) = (weights(0)?, weights(2)?);
    ensure!(
        rank0.len() == 4 && rank0.len() == joiner.len(),
        "{} and {}",
        rank0.len(),
        joiner.len()
    );
    for ((name, a), (_, b)) in rank0.iter().zip(&joiner) {
        ensure!(a.equal(b), "`{name}` of the rank that joined differs from rank 0's");
    }
    same_final_weights(&calm, &lost)
}

/// The last checkpoints of runs `a` and `b` hold the same weights, within float summation
/// order (1e-5 of each tensor's largest value).
fn same_final_weights(a: &std::path::Path, b: &std::path::Path) -> Result<()> {
    let (a, b) = (final_weights(a)?, final_weights(b)?);
    let names = |w: &[(String, Vec<f32>)]| w.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    ensure!(a.len() == 4 && names(&a) == names(&b), "{:?} against {:?}", names(&a), names(&b));
    let mut worst = 0f64;
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let scale = x.iter().map(|v| f64::from(v.abs())).fold(0.0, f64::max).max(1e-12);
        for (u, v) in x.iter().zip(y) {
            worst = worst.max(f64::from((u - v).abs()) / scale);
        }
        ensure!(x.len() == y.len(), "{name}");
    }
    ensure!(worst <= 1e-5, "the final weights differ by {worst:e} (relative to each tensor's max)");
    Ok(())
}

/// Rank 0 (the one that writes checkpoints) SIGKILLed mid-step: the other two go on in place
/// as before, and the new rank 0 names its checkpoints by a fresh attempt number
/// (`checkpoint_000001_a1`), one no attempt of the run has: had the old rank 0 been cut off
/// rather than killed, and finished the step the others took again, its checkpoint of that
/// iteration (`checkpoint_000001`) could never land on the one the run recorded. The rows
/// still say attempt 0 (no restart), and the run ends with a run's weights that lost no rank.
pub fn a_lost_rank_0_goes_on_under_checkpoint_names_of_its_own() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let calm = fit_in_child(dir.path(), "calm", 0, "none")?;
    let lost = fit_losing(dir.path(), "lost", 10, "none", 0)?;
    let rows = rows(&lost)?;
    let first = &rows[0];
    ensure!(first["world_size"] == 2 && first["group_attempt"] == 0, "{first}");
    let said = first["group_resize"].as_str().unwrap_or_default();
    ensure!(said.starts_with("3 -> 2: rank 0 lost: killed by signal 9"), "{said}");
    let mut names: Vec<String> = std::fs::read_dir(&lost)?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("checkpoint_"))
        .collect();
    names.sort();
    let want = ["checkpoint_000001_a1", "checkpoint_000002_a1", "checkpoint_000003_a1"];
    ensure!(names == want, "checkpoints {names:?}, not {want:?}");
    let recorded: Vec<&str> =
        rows.iter().filter_map(|r| r["checkpoint_dir_name"].as_str()).collect();
    ensure!(recorded == want, "rows name {recorded:?}");
    same_final_weights(&calm, &lost)
}

/// A sharded (ZeRO-1) elastic group that loses a rank mid-step cannot go on in place (the
/// lost rank held optimizer state nobody else has): it starts again from its latest
/// checkpoint's shards with 2 ranks, says so, counts no failure, and ends its 3 epochs.
pub fn a_sharded_group_goes_back_to_its_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Step 25 is in the second epoch (19 steps of 64 of the 1,257 training rows each).
    let run = fit_in_child(dir.path(), "zero", 25, "zero1")?;
    let rows = rows(&run)?;
    let iterations: Vec<f64> =
        rows.iter().filter_map(|r| r["training_iteration"].as_f64()).collect();
    ensure!(iterations == [1.0, 2.0, 3.0], "{iterations:?}");
    let second = &rows[1];
    let said = second["group_resize"].as_str().unwrap_or_default();
    ensure!(
        said.starts_with("3 -> 2: rank 2 lost: killed by signal 9")
            && said.contains("(from the latest checkpoint's optimizer shards (ZeRO)"),
        "{said}"
    );
    ensure!(second["group_attempt"] == 1 && second["world_size"] == 2, "{second}");
    Ok(())
}

/// The variable that makes this test binary run `give_way_runs` in `STORAGE_DIR` and exit.
const GIVE_WAY_ENV: &str = "RTUNE_TEST_ELASTIC_GIVE_WAY";

/// In a child started by `a_grown_group_gives_way_to_a_waiting_run` (a machine of 4 CPUs of
/// its own): an elastic `synthetic-curve` run of 1 to 4 ranks that shrinks for waiting runs;
/// once it holds 4, a rigid run of 2 in the same process, which must wait for room. Prints
/// each run's failures and exits. Elsewhere: returns at once.
pub fn run_give_way_if_asked() {
    let Ok(storage) = std::env::var(GIVE_WAY_ENV) else { return };
    let storage: &'static std::path::Path = Box::leak(std::path::PathBuf::from(storage).into());
    let fit = move |name: &str, scaling: rtune::ScalingConfig, iterations: i64| {
        let builtin = rtune::cli::Registry::builtin();
        let defaults = &builtin.trainables().get("synthetic-curve").expect("a builtin").defaults;
        let config = defaults.clone().with("iterations", iterations).with("sleep_s", 0.1);
        rtune::TorchTrainer::new(rtune::builtins::train_synthetic_curve)
            .train_loop_config(config)
            .scaling(scaling)
            .run_config(rtune::RunConfig::new(name).storage_path(storage))
            .fit()
    };
    let elastic = rtune::ScalingConfig::elastic(1, 4).shrink_for_waiting(true);
    let grown = std::thread::spawn(move || fit("elastic", elastic, 40));
    let rows = storage.join("elastic").join("result.json");
    let holds_4 = || std::fs::read_to_string(&rows).is_ok_and(|t| t.contains("\"world_size\":4"));
    if wait_for(Duration::from_secs(60), || Ok(holds_4())).is_err() {
        eprintln!("the elastic run never held 4 ranks");
        std::process::exit(1)
    }
    let waiting = fit("rigid", rtune::ScalingConfig::workers(2), 3);
    let grown = grown.join().expect("the elastic run's thread");
    for (name, result) in [("rigid", waiting), ("elastic", grown)] {
        match result {
            Ok(result) => println!("{name}: {} failures", result.failures.len()),
            Err(e) => println!("{name}: failed: {e}"),
        }
    }
    std::process::exit(0)
}

/// An elastic run that grew to 4 of 4 CPUs gives its room back, down to its `min`, at its next
/// checkpoint when a rigid run of 2 waits for room (`shrink_for_waiting`); the rigid run then
/// runs, and the elastic one grows again once nobody waits. Neither counts a failure.
pub fn a_grown_group_gives_way_to_a_waiting_run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(std::env::current_exe()?)
        .env(GIVE_WAY_ENV, dir.path())
        .env("RTUNE_NUM_CPUS", "4")
        .output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        stdout.contains("rigid: 0 failures") && stdout.contains("elastic: 0 failures"),
        "{stdout}"
    );
    let said = resizes_said(&dir.path().join("elastic"))?;
    let gave = said.iter().position(|s| s == "4 -> 1: another run waits for room in the pool");
    let gave = gave.with_context(|| format!("it never gave way: {said:?}"))?;
    ensure!(
        said[gave + 1..].iter().any(|s| s.ends_with("room appeared in the pool")),
        "it never grew again: {said:?}"
    );
    Ok(())
}
