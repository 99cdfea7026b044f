//! The `rtune` binary as a user runs it: `run` from a sweep file, `show`, `ls`, `resume` after
//! Ctrl-C (once: graceful; twice: at once), exit codes, and each class of sweep-file mistake.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::builtins::synthetic_score;
use rtune::search::TrialStatus;
use rtune::{ResultGrid, Tuner};

use crate::common::{python, text, wait_for};

pub(crate) const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// A synthetic-curve sweep with ASHA; `{storage}` is replaced by the storage path.
const SWEEP: &str = r#"
name = "curves"
storage_path = "{storage}"

[trainable]
builtin = "synthetic-curve"

[param_space]
rate = { loguniform = [0.02, 1.0] }
plateau = { uniform = [0.5, 1.0] }
noise = 0.01
iterations = 8
sleep_s = {sleep}
seed = 3

[tune]
metric = "score"
mode = "max"
num_samples = 6
# One at a time: ASHA's decisions then follow from the seed alone.
max_concurrent_trials = 1
scheduler = { type = "asha", grace_period = 2, max_t = 8, reduction_factor = 2 }
seed = 5
"#;

pub(crate) fn sweep_file(dir: &Path, sleep: f64) -> Result<PathBuf> {
    let storage = dir.join("results");
    let text = SWEEP
        .replace("{storage}", &storage.display().to_string())
        .replace("{sleep}", &format!("{sleep:?}"));
    let path = dir.join("sweep.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

pub(crate) fn rtune(args: &[&str]) -> Result<Output> {
    Ok(Command::new(RTUNE).args(args).env_remove("RUST_LOG").output()?)
}

/// Every trial's rows are iterations 1, 2, .. with no gap or repeat, and each score is the
/// simulator's value for its params and iteration: nothing lost, nothing redone twice.
pub(crate) fn check_histories(grid: &ResultGrid) -> Result<()> {
    for t in &grid.trials {
        let p = &t.params();
        let (rate, plateau) = (p.get::<f64>("rate")?, p.get::<f64>("plateau")?);
        for (i, row) in t.history().iter().enumerate() {
            let iteration = row["training_iteration"];
            ensure!(
                iteration == (i + 1) as f64,
                "{}: row {i} is iteration {iteration}",
                t.trial_id()
            );
            let want = synthetic_score(rate, plateau, 0.01, 3, i as u64 + 1);
            ensure!(
                row["score"] == want,
                "{}: iteration {iteration}: score {} != {want}",
                t.trial_id(),
                row["score"]
            );
        }
        ensure!(!t.history().is_empty(), "{} has no results", t.trial_id());
    }
    Ok(())
}

pub fn run_show_ls_and_json() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.0)?;
    let summary = dir.path().join("summary.json");
    let out =
        rtune(&["run", file.to_str().unwrap(), "--json", summary.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let experiment = dir.path().join("results/curves");
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(grid.trials.len() == 6, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    check_histories(&grid)?;
    // ASHA stopped some trials at a rung before max_t.
    ensure!(grid.trials.iter().any(|t| t.history().len() < 8), "ASHA stopped nothing");

    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary)?)?;
    let best = grid.best_result()?;
    ensure!(json["name"] == "curves" && json["metric"] == "score" && json["mode"] == "max");
    ensure!(json["trials"]["TERMINATED"] == 6, "{json}");
    ensure!(json["best"]["trial_id"] == best.trial_id(), "{json}");
    ensure!(json["best"]["metrics"]["score"].as_f64() == best.last("score"), "{json}");
    let checkpoint = json["best"]["checkpoint"].as_str().context("no best checkpoint")?;
    ensure!(Path::new(checkpoint).join("metadata.json").exists(), "{checkpoint}");
    ensure!(json["time_s"].as_f64().is_some_and(|t| t > 0.0));
    // The printed table ranks the best trial first.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first_row =
        stdout.lines().skip_while(|l| !l.starts_with("trial ")).nth(1).unwrap_or_default();
    ensure!(first_row.starts_with(best.trial_id()), "{stdout}");

    let exp = experiment.to_str().unwrap();
    let out = rtune(&["show", exp, "--format", "json"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let trials: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(trials.as_array().map(Vec::len) == Some(6), "{trials}");
    // The Pareto front of score (max) against training iterations (min): the trials it
    // prints are the grid's front, the best-scoring one among them.
    let objective = |metric: &str, mode| rtune::search::Objective { metric: metric.into(), mode };
    let objectives =
        [objective("score", rtune::Mode::Max), objective("training_iteration", rtune::Mode::Min)];
    let front: Vec<&str> =
        grid.pareto_front_by(&objectives)?.iter().map(|t| t.trial_id()).collect();
    ensure!(front.contains(&best.trial_id()), "{front:?}");
    let args = ["show", exp, "--pareto", "score:max", "--pareto", "training_iteration:min"];
    let out = rtune(&[&args[..], &["--format", "json"]].concat())?;
    ensure!(out.status.success(), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let ids: Vec<&str> =
        shown.as_array().context("trials")?.iter().filter_map(|t| t["trial_id"].as_str()).collect();
    ensure!(ids == front, "{ids:?} against the grid's {front:?}");
    let out = rtune(&args)?;
    let said =
        format!("Pareto front of score (max), training_iteration (min): {} of 6", front.len());
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&said), "{}", text(&out));
    let out = rtune(&["show", exp, "--pareto", "score", "--pareto", "x:min"])?;
    ensure!(
        out.status.code() == Some(2) && text(&out).contains("write METRIC:min or METRIC:max"),
        "{}",
        text(&out)
    );
    let out = rtune(&["show", exp, "--format", "csv"])?;
    let csv = String::from_utf8(out.stdout)?;
    ensure!(csv.starts_with("trial_id,status,") && csv.lines().count() == 7, "{csv}");
    // Statuses as the table and the JSON write them (Ray's names).
    ensure!(csv.lines().skip(1).all(|l| l.split(',').nth(1) == Some("TERMINATED")), "{csv}");
    // Iterations as the table and the JSON write them: `8`, not `8.0`.
    let column = csv.lines().next().unwrap().split(',').position(|c| c == "training_iteration");
    let column = column.context("no training_iteration column")?;
    for line in csv.lines().skip(1) {
        let iteration = line.split(',').nth(column).unwrap_or_default();
        ensure!(iteration.parse::<u64>().is_ok(), "training_iteration {iteration:?} in {line}");
    }
    let out = rtune(&["show", exp, "0"])?;
    let shown = String::from_utf8(out.stdout)?;
    ensure!(shown.contains("training_iteration") && shown.contains("score"), "{shown}");
    let out = rtune(&["show", exp, "99"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("no trial \"99\""), "{}", text(&out));
    let out = rtune(&["ls", dir.path().join("results").to_str().unwrap()])?;
    let listed = String::from_utf8(out.stdout)?;
    ensure!(listed.contains("curves") && listed.contains("6 TERMINATED"), "{listed}");

    // `rtune export`: the best trial's kept checkpoint with the best score, with its params,
    // metrics and a model card; an existing folder is refused.
    let to = dir.path().join("best-model");
    let out = rtune(&["export", exp, "--best", "--to", to.to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    let kept = &best.result().context("no result")?.best_checkpoints;
    let (want, want_metrics) = kept
        .iter()
        .max_by(|a, b| a.1["score"].total_cmp(&b.1["score"]))
        .context("the best trial kept no checkpoint")?;
    let exported: serde_json::Value =
        serde_json::from_slice(&std::fs::read(to.join("metadata.json"))?)?;
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(want.path().join("metadata.json"))?)?;
    ensure!(exported == original, "exported {exported}, wanted the checkpoint {original}");
    let params: serde_json::Value =
        serde_json::from_slice(&std::fs::read(to.join("params.json"))?)?;
    // What the model trained with: the trainable's defaults and the trial's sampled params.
    let sampled = serde_json::to_value(best.params())?;
    let sampled = sampled.as_object().context("params are an object")?;
    ensure!(sampled.iter().all(|(k, v)| params[k] == *v), "{params} lacks {sampled:?}");
    ensure!(params["fail_at"] == 0, "no defaults in {params}");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(to.join("metrics.json"))?)?;
    ensure!(metrics["score"].as_f64() == Some(want_metrics["score"]), "{metrics}");
    let card = std::fs::read_to_string(to.join("README.md"))?;
    ensure!(card.contains(best.trial_id()) && card.contains("**score = "), "{card}");
    let out = rtune(&["export", exp, "--best", "--to", to.to_str().unwrap()])?;
    ensure!(!out.status.success(), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("already exists"), "{}", text(&out));
    let nowhere = dir.path().join("nowhere");
    let nowhere_arg = nowhere.to_str().unwrap();
    let out = rtune(&["export", exp, "--metric", "nope", "--mode", "min", "--to", nowhere_arg])?;
    ensure!(String::from_utf8_lossy(&out.stderr).contains("metric `nope`"), "{}", text(&out));
    ensure!(!nowhere.exists(), "a failed export left {}", nowhere.display());
    // Another metric than the sweep's needs its mode: the sweep's (max) would pick the highest
    // loss.
    let out = rtune(&["export", exp, "--metric", "loss", "--to", nowhere_arg])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("--mode min or --mode max"),
        "{}",
        text(&out)
    );
    ensure!(!nowhere.exists(), "a refused export left {}", nowhere.display());
    let out = rtune(&["export", exp, "--metric", "loss", "--mode", "min", "--to", nowhere_arg])?;
    ensure!(out.status.success(), "{}", text(&out));
    let exported: serde_json::Value =
        serde_json::from_slice(&std::fs::read(nowhere.join("metadata.json"))?)?;
    ensure!(
        exported["metrics"]["loss"].as_f64() == Some(1.0 - want_metrics["score"]),
        "{exported}"
    );

    // `rtune watch` without a directory picks the newest experiment (here the only one).
    let watch = |storage: &Path| {
        Command::new(RTUNE)
            .arg("watch")
            .current_dir(dir.path())
            .env("RTUNE_STORAGE_PATH", storage)
            .stdin(Stdio::null())
            .output()
    };
    let out = watch(&dir.path().join("results"))?;
    let shown = format!("rtune show {}", experiment.display());
    ensure!(String::from_utf8_lossy(&out.stderr).contains(&shown), "{}", text(&out));
    let out = watch(&dir.path().join("nothing-here"))?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("no experiment in"), "{}", text(&out));

    // The same name again runs beside it (the first keeps its results), saying what it holds.
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let wanted = format!("{} holds a finished sweep: this run is curves-2", experiment.display());
    ensure!(said.contains(&wanted), "{said}");
    ensure!(ResultGrid::from_path(&experiment)?.trials.len() == 6);
    Ok(())
}

/// Starts `rtune run`, waits until trials have reported, sends SIGINT `times` times, and
/// checks the exit code and the state left behind; then `rtune resume` finishes the sweep.
/// `times` Ctrl-C's (0: `rtune stop DIR` from another process), then `rtune resume`.
fn interrupt_then_resume(times: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.15)?;
    let child: Child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.max_concurrent_trials=2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, signalled whole below, as a terminal's Ctrl-C does.
        .process_group(0)
        .spawn()?;
    let experiment = dir.path().join("results/curves");
    let state = experiment.join(rtune_driver::tune::STATE_FILE);
    wait_for(Duration::from_secs(120), || {
        let rows = std::fs::read_dir(&experiment).ok().into_iter().flatten().flatten().any(|e| {
            let progress = e.path().join("progress.csv");
            std::fs::read_to_string(progress).is_ok_and(|t| t.lines().count() >= 3)
        });
        Ok(rows && state.exists())
    })?;
    for _ in 0..times {
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(50));
    }
    if times == 0 {
        let exp = experiment.to_str().unwrap();
        wait_for(Duration::from_secs(30), || Ok(experiment.join("driver.json").exists()))?;
        let out = rtune(&["stop", exp])?;
        ensure!(out.status.code() == Some(0), "{}", text(&out));
        ensure!(String::from_utf8_lossy(&out.stdout).contains("stopped: `rtune resume"));
        // Nothing runs there now: a second stop says so.
        let out = rtune(&["stop", exp])?;
        ensure!(out.status.code() == Some(2), "{}", text(&out));
        ensure!(String::from_utf8_lossy(&out.stderr).contains("no sweep is running in"));
    }
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(3), "{}", text(&out));
    ensure!(Tuner::can_restore(&experiment), "{}", text(&out));
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state)?)?;
    let unfinished = saved["trials"]
        .as_array()
        .context("trials")?
        .iter()
        .filter(|t| t["status"] != "Terminated")
        .count();
    ensure!(unfinished > 0, "the sweep had ended before the interrupt: {saved}");

    let summary = dir.path().join("summary.json");
    let out =
        rtune(&["resume", experiment.to_str().unwrap(), "--json", summary.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(grid.trials.len() == 6, "{} trials", grid.trials.len());
    ensure!(
        grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated),
        "{:?}",
        grid.trials.iter().map(|t| t.status()).collect::<Vec<_>>()
    );
    check_histories(&grid)?;
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary)?)?;
    ensure!(json["trials"]["TERMINATED"] == 6, "{json}");
    Ok(())
}

pub fn ctrl_c_leaves_a_resumable_sweep() -> Result<()> {
    interrupt_then_resume(1)
}

pub fn second_ctrl_c_stops_at_once_and_loses_nothing() -> Result<()> {
    interrupt_then_resume(2)
}

pub fn rtune_stop_leaves_a_resumable_sweep() -> Result<()> {
    interrupt_then_resume(0)
}

pub fn failed_trials_exit_1_unless_allowed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.0)?;
    let f = file.to_str().unwrap();
    let summary = dir.path().join("summary.json");
    let sets = ["--set", "param_space.fail_at=1", "--set", "tune.num_samples=2"];
    let out = rtune(&[&["run", f, "--json", summary.to_str().unwrap()], &sets[..]].concat())?;
    ensure!(out.status.code() == Some(1), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("2 trial(s) failed"), "{}", text(&out));
    // The same failure everywhere is said as such: at the second trial, and at the end.
    let same = "every trial so far failed the same way (2 of 2): training failed after 1 attempt";
    ensure!(String::from_utf8_lossy(&out.stdout).contains(same), "{}", text(&out));
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("all 2 trials failed the same way"),
        "{}",
        text(&out)
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary)?)?;
    ensure!(json["trials"]["ERROR"] == 2, "{json}");
    let out = rtune(&[&["run", f, "--allow-failures", "--set", "name=again"], &sets[..]].concat())?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    Ok(())
}

/// Each class of mistake: exit 2, the key path and place named, nothing started.
pub fn sweep_file_mistakes_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let base = format!(
        "storage_path = \"{}\"\n[trainable]\nbuiltin = \"synthetic-curve\"\n",
        storage.display()
    );
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "a param the trainable does not read",
            "[param_space]\nRate = { loguniform = [0.02, 1.0] }\n",
            &[
                "sweep.toml:5:1",
                "`param_space.Rate` is not a param of `synthetic-curve`",
                "did you mean `rate`?",
            ],
        ),
        (
            "a float for an integer param",
            "[param_space]\niterations = { uniform = [4, 8] }\n",
            &["`param_space.iterations` gives 4.0 (float)", "is an integer"],
        ),
        (
            "a value outside the trainable's range",
            "[param_space]\nsleep_s = 1e30\n",
            &["`param_space.sleep_s` gives 1e30", "must lie in [0, 86400]"],
        ),
        (
            "a domain bound outside the trainable's range",
            "[param_space]\nnoise = { choice = [0.1, -1] }\n",
            &["`param_space.noise` gives -1", "must lie in [0, 1000000000]"],
        ),
        (
            "a metric the trainable does not report",
            "[tune]\nmetric = \"scroe\"\nmode = \"max\"\n",
            &["`tune.metric` names `scroe`", "did you mean `score`?"],
        ),
        (
            "several objectives with a searcher that ranks by one",
            "[tune]\nmetric = [\"score\", \"loss\"]\nmode = [\"max\", \"min\"]\n\
             search = \"bohb\"\n",
            &[
                "sweep.toml:7:1",
                "`tune.search` is `bohb`, which ranks trials by one metric, and tune.metric names \
                 2 objectives; several objectives take `random` or `tpe` or `nsga2`",
            ],
        ),
        (
            "several objectives with a scheduler that ranks by one",
            "[tune]\nmetric = [\"score\", \"loss\"]\nmode = [\"max\", \"min\"]\n\
             scheduler = { type = \"asha\", max_t = 4 }\n",
            &["`tune.scheduler` is `asha`", "several objectives take `fifo`"],
        ),
        (
            "fewer modes than metrics",
            "[tune]\nmetric = [\"score\", \"loss\"]\nmode = \"max\"\nsearch = \"nsga2\"\n",
            &["sweep.toml:6:", "`tune.mode` gives 1 mode(s) for 2 metric(s)"],
        ),
        (
            "an objective twice",
            "[tune]\nmetric = [\"score\", \"score\"]\nmode = [\"max\", \"max\"]\n",
            &["`tune.metric` names `score` twice"],
        ),
        (
            "an objective the trainable does not report",
            "[tune]\nmetric = [\"score\", \"los\"]\nmode = [\"max\", \"min\"]\n",
            &["`tune.metric` names `los`", "did you mean `loss`?"],
        ),
        (
            "a constraint the trainable does not report",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nconstraints = [\"mem_over\"]\n",
            &[
                "sweep.toml:",
                "`tune.constraints` names `mem_over`, which `synthetic-curve` does not report",
            ],
        ),
        (
            "a mode that is neither",
            "[tune]\nmetric = [\"score\", \"loss\"]\nmode = [\"max\", \"lowest\"]\n",
            &["`tune.mode` is [\"max\", \"lowest\"]; each mode is \"max\" or \"min\""],
        ),
        (
            "an NSGA-II setting out of range",
            "[tune]\nmetric = [\"score\", \"loss\"]\nmode = [\"max\", \"min\"]\n\
             search = { type = \"nsga2\", crossover_prob = 1.5 }\n",
            &["`tune.search.crossover_prob`", "expected a probability in [0, 1]"],
        ),
        (
            "a time_attr the trainable does not report",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nscheduler = { type = \"asha\", \
             time_attr = \"training_iter\" }\n",
            &["`tune.scheduler.time_attr` names `training_iter`", "`training_iteration`?"],
        ),
        (
            "a stop criterion on a metric the trainable does not report",
            "[run]\nstop = { scroe = 0.5 }\n",
            &["`run.stop.scroe` names `scroe`", "did you mean `score`?"],
        ),
        (
            "typo key",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nnum_smaples = 4\n",
            &[
                "sweep.toml:7:1",
                "`tune.num_smaples` is not a key here",
                "did you mean `num_samples`?",
            ],
        ),
        (
            "wrong type",
            "[scaling]\nnum_workers = \"two\"\n",
            &[
                "sweep.toml:5:15",
                "`scaling.num_workers` must be an integer >= 0, or { min = N, max = M }, not the string \"two\"",
            ],
        ),
        (
            "bad bounds",
            "[param_space]\nrate = { loguniform = [0.0, 1.0] }\n",
            &["sweep.toml:5:1", "`param_space.rate`", "loguniform"],
        ),
        (
            "unknown scheduler option",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nscheduler = { type = \"asha\", grace_perod = 2 }\n",
            &[
                "sweep.toml:7:30",
                "`tune.scheduler.grace_perod` is not an option of scheduler `asha`",
                "did you mean `grace_period`?",
            ],
        ),
        (
            "unknown scheduler",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nscheduler = \"ashaa\"\n",
            &["sweep.toml:7:13", "`tune.scheduler` is \"ashaa\"", "did you mean `asha`?"],
        ),
        (
            "scheduler setting out of range",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nscheduler = { type = \"asha\", max_t = -1 }\n",
            &["sweep.toml:7:30", "`tune.scheduler.max_t`", "a finite number > 0"],
        ),
        (
            "scheduler without a metric",
            "[tune]\nscheduler = \"asha\"\n",
            &["`tune` needs tune.metric and tune.mode"],
        ),
        (
            "unbounded sweep",
            "[tune]\nnum_samples = -1\n",
            &["sweep.toml:5:15", "`tune.num_samples` is -1 (unbounded): set tune.time_budget_s"],
        ),
        ("not TOML", "[tune\nmetric = 1\n", &["sweep.toml:4:", "is not valid TOML"]),
        (
            "a known point outside the space",
            "[param_space]\nrate = { uniform = [0.1, 0.5] }\n[tune]\nmetric = \"score\"\n\
             mode = \"max\"\nsearch = { type = \"tpe\", points_to_evaluate = [{ rate = 0.9 }] }\n",
            &["`tune.search.points_to_evaluate`", "`rate` = float 0.9", "uniform(0.1, 0.5)"],
        ),
        (
            "a constant that is not a number",
            "[param_space]\nnoise = nan\nrate = { uniform = [0.1, inf] }\n",
            &[
                "sweep.toml:5:9: `param_space.noise` is NaN: params need finite numbers",
                "sweep.toml:6:",
                "`param_space.rate.uniform` is inf",
            ],
        ),
        (
            "two domains for one param",
            "[param_space]\nrate = { uniform = [0.1, 0.5], choice = [1, 2] }\n",
            &["sweep.toml:5:1", "`param_space.rate` holds the domains `uniform`, `choice`"],
        ),
        (
            "too many workers",
            "[scaling]\nnum_workers = 9223372036854775807\n",
            &["sweep.toml:5:15", "`scaling.num_workers` is 9223372036854775807; use 1 to 100000"],
        ),
        (
            "a time budget no clock holds",
            "[tune]\nnum_samples = -1\ntime_budget_s = 1e300\n",
            &["`tune.time_budget_s` is 1e300; use a number of seconds from 0 to 1e9"],
        ),
        (
            "a negative count",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nsearch = { type = \"tpe\", \
             n_startup_trials = -1 }\n",
            &["`tune.search.n_startup_trials` must be a count (an integer >= 0), not"],
        ),
        (
            "BOHB's budgets not the scheduler's",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\nsearch = { type = \"bohb\" }\n\
             scheduler = { type = \"hyperband\", time_attr = \"time_total_s\", max_t = 9 }\n",
            &[
                "sweep.toml:7:1",
                "`tune.search.time_attr`",
                "BOHB's budgets are `training_iteration` but the scheduler's time_attr is \
                 `time_total_s`",
            ],
        ),
        (
            "a BOHB setting out of range",
            "[tune]\nmetric = \"score\"\nmode = \"max\"\n\
             search = { type = \"bohb\", top_n_percent = 100 }\n",
            &["`tune.search.top_n_percent`", "in (0, 100)"],
        ),
        (
            "values the library refuses, each at its line",
            "[tune]\nmax_concurrent_trials = 0\n[run]\nsync_period_s = 0\n\
             checkpoint = { num_to_keep = 0 }\nfailure = { max_failures = -5 }\n",
            &[
                "sweep.toml:5:25: `tune.max_concurrent_trials` is 0",
                "sweep.toml:7:17: `run.sync_period_s` is 0",
                "sweep.toml:8:30: `run.checkpoint.num_to_keep` is 0",
                "sweep.toml:9:28: `run.failure.max_failures` is -5",
            ],
        ),
        (
            "rewards that are not numbers",
            "[tune]\nsearch = { type = \"random\", points_to_evaluate = [{ rate = 0.2 }], \
             evaluated_rewards = \"high\" }\n",
            &["`tune.search.evaluated_rewards` must be a list of numbers"],
        ),
    ];
    for (what, tail, wanted) in cases {
        let file = dir.path().join("sweep.toml");
        std::fs::write(&file, format!("{base}{tail}"))?;
        let out = rtune(&["run", file.to_str().unwrap()])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.code() == Some(2), "{what}: {}", text(&out));
        for w in *wanted {
            ensure!(stderr.contains(w), "{what}: wanted {w:?} in:\n{}", text(&out));
        }
        ensure!(!storage.exists(), "{what}: something was created in {}", storage.display());
    }
    // A missing trainable names the registered ones.
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, "[trainable]\nbuiltin = \"digits-mpl\"\n")?;
    let out = rtune(&["run", file.to_str().unwrap()])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(stderr.contains("`trainable.builtin` is \"digits-mpl\""), "{}", text(&out));
    ensure!(stderr.contains("did you mean `digits-mlp`?"), "{}", text(&out));
    // `--set` mistakes name the argument.
    std::fs::write(&file, &base)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--set", "tune.num_samples=zero"])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(
        stderr.contains("--set tune.num_samples=zero: `tune.num_samples` must be an integer"),
        "{}",
        text(&out)
    );
    // A summary that could not be written is refused before the sweep runs, not after.
    std::fs::write(&file, &base)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--json", "/nonexistent/summary.json"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent is not a folder"),
        "{}",
        text(&out)
    );
    ensure!(!storage.exists(), "the sweep ran anyway");
    // A missing file.
    let out = rtune(&["run", dir.path().join("nope.toml").to_str().unwrap()])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(!storage.exists(), "something was created in {}", storage.display());
    // A command's grace that no clock holds.
    std::fs::write(
        &file,
        format!(
            "storage_path = \"{}\"\n[trainable]\ncommand = [\"true\"]\nstop_grace_s = inf\n",
            storage.display()
        ),
    )?;
    let out = rtune(&["run", file.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(stderr.contains("`trainable.stop_grace_s` is inf"), "{}", text(&out));
    ensure!(!stderr.contains("panicked"), "{}", text(&out));
    // Names that are no folder names.
    for name in ["-x", "a\\nb", "  ", "a/b"] {
        std::fs::write(&file, format!("name = \"{name}\"\n{base}"))?;
        let out = rtune(&["run", file.to_str().unwrap()])?;
        ensure!(out.status.code() == Some(2), "name {name:?}: {}", text(&out));
        ensure!(String::from_utf8_lossy(&out.stderr).contains("`name` "), "{}", text(&out));
        ensure!(!storage.exists(), "name {name:?}: something was created");
    }
    // `~` in storage_path is the home directory, as in a shell (not a folder named `~`).
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home)?;
    std::fs::write(
        &file,
        "name = \"tilde\"\nstorage_path = \"~/results\"\n[trainable]\nbuiltin = \
         \"synthetic-curve\"\n[param_space]\niterations = 1\n",
    )?;
    let out = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap()])
        .current_dir(dir.path())
        .env("HOME", &home)
        .env_remove("RUST_LOG")
        .output()?;
    ensure!(out.status.success(), "{}", text(&out));
    ensure!(home.join("results/tilde/tuner.json").is_file(), "not under $HOME: {}", text(&out));
    ensure!(!dir.path().join("~").exists(), "a folder named `~` was made");
    Ok(())
}

/// A tmux server of the test's own, killed when dropped.
struct Tmux(String);

impl Tmux {
    fn new() -> Result<Tmux> {
        // A server per test: tests run in parallel in one process.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tmux = Tmux(format!("rtune-test-{}-{n}", std::process::id()));
        // Fail, not skip, without tmux: `make test` installs it.
        tmux.run(&["-V"]).context("tmux is needed for this test (make test installs it)")?;
        Ok(tmux)
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("tmux").arg("-L").arg(&self.0).args(args).output()?;
        ensure!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `command` (a shell line) in a new 150x40 session.
    fn start(&self, session: &str, command: &str) -> Result<()> {
        self.start_sized(session, (150, 40), command)
    }

    /// Runs `command` in a new session of `(columns, rows)`.
    fn start_sized(&self, session: &str, (x, y): (u16, u16), command: &str) -> Result<()> {
        let (x, y) = (x.to_string(), y.to_string());
        self.run(&["new-session", "-d", "-s", session, "-x", &x, "-y", &y, command])?;
        Ok(())
    }

    /// Runs `rtune watch EXPERIMENT` in the session `watch`; returns the file its exit code
    /// goes to (in `dir`) when it ends.
    fn watch(&self, experiment: &Path, dir: &Path) -> Result<PathBuf> {
        let exit = dir.join("watch.exit");
        let command = format!(
            "{RTUNE} watch {}; echo $? > {}; sleep 600",
            experiment.display(),
            exit.display()
        );
        self.start("watch", &command)?;
        Ok(exit)
    }

    /// Waits until the session's screen shows every one of `wanted`; returns the screen.
    fn wait_for_screen(&self, session: &str, wanted: &[&str]) -> Result<String> {
        let mut screen = String::new();
        let found = wait_for(Duration::from_secs(120), || {
            screen = self.run(&["capture-pane", "-p", "-t", session]).unwrap_or_default();
            Ok(wanted.iter().all(|w| screen.contains(w)))
        });
        found
            .with_context(|| format!("wanted {wanted:?} on the screen of {session}:\n{screen}"))?;
        Ok(screen)
    }
}

/// The exit code a session's command wrote to `path` (`echo $? > path`), once it is there
/// whole: the shell creates the file empty before it writes the number, and a test that read
/// it as soon as it existed once read nothing.
fn exit_code(path: &Path, limit: Duration) -> Result<String> {
    let mut code = String::new();
    wait_for(limit, || {
        code = std::fs::read_to_string(path).unwrap_or_default();
        Ok(code.ends_with('\n'))
    })
    .with_context(|| format!("no exit code in {} (read {code:?})", path.display()))?;
    Ok(code.trim().to_owned())
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-L").arg(&self.0).arg("kill-server").output();
    }
}

/// A driver outside its terminal's foreground process group (`timeout` puts it in a group of
/// its own, as `&` does in an interactive shell) prints progress lines and runs to its end:
/// setting the terminal UI up there would stop it (SIGTTOU) before anything ran.
pub fn a_driver_in_the_background_prints_progress_lines() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.0)?;
    let tmux = Tmux::new()?;
    let exit = dir.path().join("run.exit");
    let command = format!(
        "timeout 300 {RTUNE} run {} --set tune.num_samples=2; echo $? > {}; sleep 600",
        file.display(),
        exit.display()
    );
    tmux.start("background", &command)?;
    let code = exit_code(&exit, Duration::from_secs(240))?;
    let screen = tmux.run(&["capture-pane", "-p", "-t", "background"])?;
    ensure!(code == "0", "rtune run exited {code}:\n{screen}");
    ensure!(screen.contains("== 2 trials"), "no progress lines:\n{screen}");
    Ok(())
}

/// `rtune run` on a terminal shows the live UI; `rtune watch` shows the same sweep from its
/// files; `q` leaves watch; `x` in the run's UI stops the sweep, resumable (exit 3).
/// Known points run first (random search), and ASHA's bracket of every trial is in the results.
pub fn known_points_run_first_and_brackets_are_shown() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("sweep.toml");
    let sweep = format!(
        "name = \"points\"\nstorage_path = \"{}\"\n[trainable]\nbuiltin = \"synthetic-curve\"\n\
         [param_space]\nrate = {{ uniform = [0.1, 0.5] }}\niterations = 4\n[tune]\n\
         metric = \"score\"\nmode = \"max\"\nnum_samples = 4\nseed = 3\n\
         search = {{ type = \"random\", points_to_evaluate = [{{ rate = 0.123 }}, {{ rate = 0.456 }}] }}\n\
         scheduler = {{ type = \"asha\", max_t = 4, grace_period = 1, brackets = 2 }}\n",
        dir.path().display()
    );
    std::fs::write(&file, sweep)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("points"))?;
    let rates: Vec<f64> =
        grid.trials.iter().map(|t| t.params().get::<f64>("rate")).collect::<Result<_, _>>()?;
    ensure!(rates.len() == 4 && rates[..2] == [0.123, 0.456], "{rates:?}");
    ensure!(rates[2..].iter().all(|r| (0.1..0.5).contains(r) && ![0.123, 0.456].contains(r)));
    let brackets: Vec<Option<usize>> = grid.trials.iter().map(|t| t.bracket()).collect();
    ensure!(brackets.iter().all(|b| matches!(b, Some(0 | 1))), "{brackets:?}");
    let frame = grid.dataframe()?;
    let column: Vec<Option<u32>> = frame.column("bracket")?.u32()?.iter().collect();
    ensure!(column == brackets.iter().map(|b| b.map(|b| b as u32)).collect::<Vec<_>>());
    Ok(())
}

/// In a real terminal, the selected trial's slow rank (`synthetic-curve`'s `slow_rank`) shows
/// over its log, marked a straggler.
pub fn tui_marks_a_straggler_in_a_real_terminal() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = crate::monitoring::slow_rank_sweep(dir.path(), 100)?;
    let tmux = Tmux::new()?;
    let run_exit = dir.path().join("run.exit");
    let command =
        format!("{RTUNE} run {}; echo $? > {}; sleep 600", file.display(), run_exit.display());
    tmux.start("slow", &command)?;
    let screen = tmux.wait_for_screen("slow", &["rank 1: step", "straggler"])?;
    let line = |needle: &str| screen.lines().find(|l| l.contains(needle)).unwrap_or_default();
    ensure!(line("rank 1: step").contains("straggler"), "{screen}");
    ensure!(!line("rank 0: step").contains("straggler"), "{screen}");
    tmux.run(&["send-keys", "-t", "slow", "x"])?;
    let code = exit_code(&run_exit, Duration::from_secs(60))?;
    ensure!(code == "3", "rtune run exited {code}");
    Ok(())
}

pub fn tui_in_a_real_terminal() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.15)?;
    let experiment = dir.path().join("results/curves");
    let tmux = Tmux::new()?;
    let run_exit = dir.path().join("run.exit");
    // Trials enough that the sweep is still running when `x` comes, however slow the steps
    // before it (the watch, the scheduler panel) are on a busy machine: 30 trials (about 8 s)
    // were not always enough when the whole suite ran at once; 200 take about a minute, and `x`
    // ends them early anyway.
    tmux.start(
        "run",
        &format!(
            "{RTUNE} run {} --set tune.max_concurrent_trials=2 --set tune.num_samples=200; \
             echo $? > {}; sleep 600",
            file.display(),
            run_exit.display()
        ),
    )?;
    let screen = tmux.wait_for_screen("run", &["rtune · curves", "RUNNING", "x stop sweep"])?;
    ensure!(screen.contains("score by iteration"), "{screen}");
    // What the sweep's begin event says: trials not made yet are pending, the pool's bar.
    ensure!(screen.contains(" PENDING") && screen.contains("CPU "), "{screen}");
    // The scheduler's view: ASHA's first rung (grace_period 2) once a trial has reached it.
    tmux.wait_for_screen("run", &["ASHA rungs", "t≥     2"])?;
    // The state file names the trials watch will show.
    let state = experiment.join(rtune_driver::tune::STATE_FILE);
    wait_for(Duration::from_secs(60), || Ok(state.exists()))?;
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state)?)?;
    let first =
        saved["trials"][0]["trial_id"].as_str().context("no trial in the state")?.to_owned();
    let watch_exit = tmux.watch(&experiment, dir.path())?;
    tmux.wait_for_screen("watch", &["rtune · curves", &first, "q quit", "ASHA rungs"])?;
    tmux.run(&["send-keys", "-t", "watch", "q"])?;
    ensure!(exit_code(&watch_exit, Duration::from_secs(30))? == "0");
    tmux.run(&["send-keys", "-t", "run", "x"])?;
    let code = exit_code(&run_exit, Duration::from_secs(60))?;
    ensure!(code == "3", "rtune run exited {code}");
    // The terminal is given back: the run prints its table after the UI, where the trials
    // `x` stopped are INTERRUPTED (none RUNNING), and says how to go on.
    let after = tmux.wait_for_screen("run", &["interrupted: `rtune resume", "INTERRUPTED"])?;
    ensure!(!after.contains("RUNNING"), "{after}");
    ensure!(Tuner::can_restore(&experiment));

    // `q` leaves the view; the sweep goes on with progress lines and ends on its own.
    let quit_exit = dir.path().join("quit.exit");
    tmux.start(
        "quit",
        &format!(
            "{RTUNE} run {} --set name=quit --set tune.max_concurrent_trials=2; echo $? > {}; \
             sleep 600",
            file.display(),
            quit_exit.display()
        ),
    )?;
    tmux.wait_for_screen("quit", &["rtune · quit", "q quit view"])?;
    tmux.run(&["send-keys", "-t", "quit", "q"])?;
    tmux.wait_for_screen("quit", &["left the view; the sweep goes on"])?;
    let code = exit_code(&quit_exit, Duration::from_secs(120))?;
    ensure!(code == "0", "rtune run exited {code} after q");
    let grid = ResultGrid::from_path(dir.path().join("results/quit"))?;
    ensure!(grid.trials.len() == 6 && grid.trials.iter().all(|t| t.status().is_finished()));
    Ok(())
}

/// The terminal UI at 80x24: the learning curves (with their legend) under the table, and
/// ASHA's cutoffs read whole; early stops only in its count.
pub fn tui_at_80x24_keeps_the_chart_and_the_cutoffs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.15)?;
    let tmux = Tmux::new()?;
    let exit = dir.path().join("run.exit");
    tmux.start_sized(
        "small",
        (80, 24),
        &format!(
            "{RTUNE} run {} --set tune.max_concurrent_trials=2 --set tune.num_samples=40; echo \
             $? > {}; sleep 600",
            file.display(),
            exit.display()
        ),
    )?;
    // A rung with a cutoff: its line whole, ending in a number.
    let screen = tmux.wait_for_screen("small", &["score by iteration ━ _0", "rec cut 0."])?;
    ensure!(screen.contains("stopped early"), "{screen}");
    ensure!(screen.lines().any(|l| l.contains("rec cut 0.") && l.trim_end().ends_with('│')));
    tmux.run(&["send-keys", "-t", "small", "x"])?;
    ensure!(exit_code(&exit, Duration::from_secs(60))? == "3");
    Ok(())
}

/// `rtune watch` attaches to a running sweep through its driver's live stream (the driver's
/// address in `driver.json`): `t` stops the selected trial and `x` interrupts the sweep, both in
/// the driver; when the driver is gone the view goes on from the files.
pub fn watch_follows_a_live_sweep_and_steers_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.1)?;
    let experiment = dir.path().join("results/curves");
    let run = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.scheduler=\"fifo\""])
        .args(["--set", "param_space.iterations=40"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let driver_file = experiment.join(rtune_driver::tune::DRIVER_FILE);
    wait_for(Duration::from_secs(60), || Ok(driver_file.exists()))?;
    let mode = std::fs::metadata(&driver_file)?.permissions().mode() & 0o777;
    ensure!(mode == 0o600, "driver.json is readable by others: {mode:o}");
    let tmux = Tmux::new()?;
    let watch_exit = tmux.watch(&experiment, dir.path())?;
    // Live: the driver's keys, and the one running trial (one at a time) selected.
    tmux.wait_for_screen("watch", &["rtune · curves", "RUNNING", "t stop trial"])?;
    tmux.run(&["send-keys", "-t", "watch", "t"])?;
    // The stopped trial ends and the next one starts; then the whole sweep is interrupted.
    tmux.wait_for_screen("watch", &["TERMINATED", "_00001"])?;
    tmux.run(&["send-keys", "-t", "watch", "x"])?;
    let out = run.wait_with_output()?;
    ensure!(out.status.code() == Some(3), "{}", text(&out));
    ensure!(!driver_file.exists(), "driver.json outlived its driver");
    // The driver is gone: the view reads the files (no keys that need the driver), where the
    // trial `x` stopped is INTERRUPTED.
    let screen =
        tmux.wait_for_screen("watch", &["q quit  ? help", "INTERRUPTED", "interrupted"])?;
    ensure!(!screen.contains("t stop trial") && !screen.contains("RUNNING"), "{screen}");
    tmux.run(&["send-keys", "-t", "watch", "q"])?;
    ensure!(exit_code(&watch_exit, Duration::from_secs(30))? == "0");
    let grid = ResultGrid::from_path(&experiment)?;
    let first =
        grid.trials.iter().find(|t| t.trial_id().ends_with("_00000")).context("no 00000")?;
    ensure!(first.status() == TrialStatus::Terminated, "{:?}", first.status());
    let n = first.history().len();
    ensure!((1..40).contains(&n), "the stopped trial ran {n} of 40 iterations");
    Ok(())
}

/// `make demo`'s pipeline: the digits sweep (16 trials of 2 workers, TPE, ASHA), `rtune export`
/// of its best checkpoint, and the export predicting the held-out test set through
/// `TorchPredictor` with the params it carries.
pub fn demo_sweep_exports_a_model_that_predicts_the_test_set() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/digits_tpe_asha.toml");
    let storage = format!("storage_path={:?}", dir.path().display().to_string());
    let out = rtune(&["run", sweep, "--no-tui", "--set", &storage])?;
    ensure!(out.status.success(), "{}", text(&out));
    let experiment = dir.path().join("digits-tpe-asha");
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(
        grid.trials.len() == 16
            && grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated)
    );
    ensure!(grid.trials.iter().any(|t| t.history().len() < 12), "ASHA stopped no trial");
    let to = dir.path().join("best-model");
    let out =
        rtune(&["export", experiment.to_str().unwrap(), "--best", "--to", to.to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    // The export holds what prediction needs: the weights, not the Adam state its checkpoint
    // keeps for resuming (twice the weights' size); and it is the checkpoint the one rule
    // names (the best trial's best report by the sweep's metric).
    let best = grid.best_result()?.checkpoint()?;
    ensure!(best.path().join("optimizer.safetensors").is_file(), "{}", best.path().display());
    let exported: Vec<String> = std::fs::read_dir(&to)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    ensure!(
        exported.iter().all(|f| !f.starts_with("optimizer") && !f.starts_with('.')),
        "the export holds training state: {exported:?}"
    );
    let metadata = |dir: &Path| -> Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(dir.join("metadata.json"))?)?)
    };
    ensure!(metadata(&to)? == metadata(best.path())?, "the export is not TrialResult::checkpoint");
    let params: rtune::Params = serde_json::from_slice(&std::fs::read(to.join("params.json"))?)?;
    let hidden = params.get::<i64>("hidden")?;
    let predictor =
        rtune::model::TorchPredictor::from_export(&to, |p| rtune::builtins::digits_mlp(p, hidden))?;
    let test = rtune::digits::Digits::split(rtune::builtins::DIGITS_SPLIT_SEED)?.test;
    let accuracy = rtune::builtins::predictor_accuracy(&predictor, &test)?;
    ensure!(accuracy >= 0.95, "the exported best model is {accuracy:.4} right on the test set");
    batch_prediction_matches(&to, &test, accuracy, dir.path())?;
    // `rtune predict --best` predicts with that same checkpoint, exported on the way.
    let (input, by_export) = (dir.path().join("test.csv"), dir.path().join("predicted.parquet"));
    let by_best = dir.path().join("predicted_best.parquet");
    let (i, o) = (input.to_str().unwrap(), by_best.to_str().unwrap());
    let out =
        rtune(&["predict", "--best", experiment.to_str().unwrap(), "--input", i, "--output", o])?;
    ensure!(out.status.success(), "{}", text(&out));
    ensure!(text(&out).contains("rtune predict --best: exported trial"), "{}", text(&out));
    let predictions = |file: &Path| -> Result<Vec<i64>> {
        use rtune::polars::prelude::{ParquetReader, SerReader};
        let frame = ParquetReader::new(std::fs::File::open(file)?).finish()?;
        Ok(frame.column("prediction")?.i64()?.into_no_null_iter().collect())
    };
    ensure!(predictions(&by_best)? == predictions(&by_export)?, "predict --best differs");
    // PyTorch alone gets the same outputs from the export's TorchScript module and from its
    // safetensors weights.
    let x =
        tch::Tensor::arange(5 * 64, (tch::Kind::Float, tch::Device::Cpu)).reshape([5, 64]) / 320.0;
    let ours: Vec<Vec<f32>> = Vec::try_from(predictor.predict(&x)?)?;
    let (torchscript, safetensors) = pytorch_outputs(&to)?;
    for (name, theirs) in [("TorchScript", torchscript), ("safetensors", safetensors)] {
        let close =
            ours.iter().flatten().zip(theirs.iter().flatten()).all(|(a, b)| (a - b).abs() < 1e-5);
        ensure!(close && theirs.len() == 5, "{name} in PyTorch: {theirs:?}, rtune: {ours:?}");
    }
    Ok(())
}

/// `rtune predict` over the test set as a CSV file, in batches of 100 rows: the same accuracy
/// as the predictor's, probabilities that sum to 1, and named errors for wrong columns.
fn batch_prediction_matches(
    export: &Path,
    test: &rtune::digits::Digits,
    accuracy: f64,
    dir: &Path,
) -> Result<()> {
    use rtune::polars::prelude::{CsvWriter, DataType, ParquetReader, SerReader, SerWriter};
    let input = dir.join("test.csv");
    CsvWriter::new(std::fs::File::create(&input)?).finish(&mut test.frame()?)?;
    let output = dir.join("predicted.parquet");
    let predict = |input: &Path, output: &Path, more: &[&str]| {
        let (input, output) = (input.to_str().unwrap(), output.to_str().unwrap());
        let model = export.to_str().unwrap();
        rtune(
            &[&["predict", "--model", model, "--input", input, "--output", output], more].concat(),
        )
    };
    let out = predict(&input, &output, &["--batch-rows", "100"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let frame = ParquetReader::new(std::fs::File::open(&output)?).finish()?;
    ensure!(frame.height() == test.len(), "{} rows predicted of {}", frame.height(), test.len());
    let predicted: Vec<i64> = frame.column("prediction")?.i64()?.into_no_null_iter().collect();
    let by_pytorch = pytorch_predictions(export, &input)?;
    ensure!(
        by_pytorch == predicted,
        "PyTorch, applying preprocessor.json and model.pt to the raw CSV rows, predicts \
         otherwise than rtune predict: {by_pytorch:?} against {predicted:?}"
    );
    let right = predicted.iter().zip(&test.labels).filter(|(p, l)| p == l).count();
    let batch_accuracy = right as f64 / test.len() as f64;
    ensure!(
        (batch_accuracy - accuracy).abs() < 1e-6,
        "rtune predict: {batch_accuracy}, the predictor: {accuracy}"
    );
    let mut sums = vec![0f64; test.len()];
    for class in 0..10 {
        let probs = frame.column(&format!("prob_{class}"))?.f32()?;
        for (sum, p) in sums.iter_mut().zip(probs.into_no_null_iter()) {
            *sum += f64::from(p);
        }
    }
    ensure!(sums.iter().all(|s| (s - 1.0).abs() < 1e-4), "probabilities do not sum to 1");
    // A file without an input column, or with one the model does not take, is refused.
    let csv = std::fs::read_to_string(&input)?;
    let without: String =
        csv.lines().map(|l| l.split_once(',').unwrap().1.to_owned() + "\n").collect();
    let bad = dir.join("without_pixel_0.csv");
    std::fs::write(&bad, without)?;
    let out = predict(&bad, &dir.join("x.csv"), &[])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(text(&out).contains("lacks the model's input column(s) `pixel_0`"), "{}", text(&out));
    let extra: String = csv
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{},{l}\n", if i == 0 { "id".into() } else { i.to_string() }))
        .collect();
    let bad = dir.join("with_id.csv");
    std::fs::write(&bad, extra)?;
    let to = dir.join("x.csv");
    let out = predict(&bad, &to, &[])?;
    ensure!(
        text(&out).contains("column(s) the model does not take: `id`; pass --allow-extra"),
        "{}",
        text(&out)
    );
    ensure!(!to.exists() && !dir.join(".x.csv.partial").exists(), "a refused file left output");
    let out = predict(&bad, &to, &["--allow-extra"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let written = std::fs::read_to_string(&to)?;
    ensure!(
        written.lines().count() == test.len() + 1 && written.starts_with("id,pixel_0"),
        "{}",
        &written[..200.min(written.len())]
    );
    // The shipped data as it is: gzipped, no header, the label last (as the README shows).
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv.gz");
    let out = predict(&shipped, &dir.join("all.csv"), &[])?;
    ensure!(out.status.code() == Some(2), "a headerless file read as headed: {}", text(&out));
    let all = dir.join("all.parquet");
    let out = predict(&shipped, &all, &["--no-header", "--batch-rows", "500"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let frame = ParquetReader::new(std::fs::File::open(&all)?).finish()?;
    let labels: Vec<i64> =
        frame.column("digit")?.cast(&DataType::Int64)?.i64()?.into_no_null_iter().collect();
    let predicted: Vec<i64> = frame.column("prediction")?.i64()?.into_no_null_iter().collect();
    let right = predicted.iter().zip(&labels).filter(|(p, l)| p == l).count();
    ensure!(labels.len() == 1797, "{} rows of the 1797 digits", labels.len());
    // Most of the rows are the model's training data: it is right on nearly all of them.
    ensure!(right as f64 / labels.len() as f64 > 0.95, "{right} of {} right", labels.len());
    let narrow = dir.join("narrow.csv");
    std::fs::write(&narrow, "1,2,3\n")?;
    let out = predict(&narrow, &dir.join("n.csv"), &["--no-header"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(
        text(&out).contains("reads the model's 64 input columns in order (then `digit`), but the first row has 3 values"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// A batch of model outputs, row by row.
type Rows = Vec<Vec<f32>>;

/// The digits MLP's outputs on the same inputs as the test's, computed by PyTorch from the
/// export's `model.pt` (torch.jit.load) and from its `model.safetensors` (by hand).
fn pytorch_outputs(export: &Path) -> Result<(Rows, Rows)> {
    let script = "import json, sys, torch\n\
        from safetensors.torch import load_file\n\
        d = sys.argv[1]\n\
        x = torch.arange(5 * 64, dtype=torch.float32).reshape(5, 64) / 320.0\n\
        ts = torch.jit.load(d + '/model.pt')(x)\n\
        w = load_file(d + '/model.safetensors')\n\
        h = torch.relu(x @ w['fc1.weight'].T + w['fc1.bias'])\n\
        h = torch.relu(h @ w['fc2.weight'].T + w['fc2.bias'])\n\
        st = h @ w['fc3.weight'].T + w['fc3.bias']\n\
        print(json.dumps([ts.tolist(), st.tolist()]))";
    Ok(serde_json::from_slice(&python(script, &[export])?)?)
}

/// The classes PyTorch alone predicts for the rows of a CSV file with an export: the fitted
/// steps of its `preprocessor.json` applied to the raw columns (as its model card says), then its
/// TorchScript `model.pt`.
fn pytorch_predictions(export: &Path, csv: &Path) -> Result<Vec<i64>> {
    let script = "import csv, json, sys, torch\n\
        d, path = sys.argv[1], sys.argv[2]\n\
        schema = json.load(open(d + '/preprocessor.json'))\n\
        rows = list(csv.DictReader(open(path)))\n\
        cols = {c: [float(r[c]) for r in rows] for c in schema['features']}\n\
        def apply(step):\n\
        \x20   if step['kind'] == 'chain':\n\
        \x20       for s in step['steps']: apply(s)\n\
        \x20   elif step['kind'] in ('standard_scaler', 'min_max_scaler'):\n\
        \x20       f = step['fitted']\n\
        \x20       for c, o, s in zip(f['columns'], f['offset'], f['scale']):\n\
        \x20           cols[c] = [(x - o) / s for x in cols[c]]\n\
        \x20   else: sys.exit('no Python for ' + step['kind'] + ' in this test')\n\
        if schema.get('preprocessor'): apply(schema['preprocessor'])\n\
        x = torch.tensor([cols[c] for c in schema['model_inputs']], dtype=torch.float32).T\n\
        out = torch.jit.load(d + '/model.pt')(x)\n\
        print(json.dumps(out.argmax(dim=1).tolist()))";
    let out = python(script, &[export, csv])?;
    Ok(serde_json::from_slice(&out)?)
}

/// The shipped multi-objective sweep (validation loss against model size, NSGA-II), with an
/// Optuna journal: its result is the Pareto front, checked against every pair of trials; the
/// results table, `rtune show` and Optuna's own reader (`best_trials`) give that front; export
/// takes a trial of it or the best by one objective, and refuses to guess.
pub fn a_multi_objective_sweep_gives_its_pareto_front() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/digits_nsga2.toml");
    let storage = format!("storage_path={:?}", dir.path().display().to_string());
    let journal = dir.path().join("optuna.log");
    let optuna = format!("run.optuna={:?}", journal.display().to_string());
    let summary = dir.path().join("summary.json");
    let out = rtune(&[
        "run",
        sweep,
        "--no-tui",
        "--set",
        &storage,
        "--set",
        &optuna,
        "--json",
        summary.to_str().unwrap(),
    ])?;
    ensure!(out.status.success(), "{}", text(&out));
    // A metric of whole numbers (a model's size) prints as whole numbers.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let sizes: Vec<&str> =
        stdout.split("params=").skip(1).filter_map(|s| s.split(' ').next()).collect();
    ensure!(!sizes.is_empty() && sizes.iter().all(|s| s.parse::<u64>().is_ok()), "{sizes:?}");
    let experiment = dir.path().join("digits-nsga2");
    let grid = ResultGrid::from_path(&experiment)?;
    let named: Vec<(&str, rtune::Mode)> =
        grid.objectives.iter().map(|o| (o.metric.as_str(), o.mode)).collect();
    let objectives = [("val_loss", rtune::Mode::Min), ("params", rtune::Mode::Min)];
    ensure!(grid.objectives.metric().is_none() && named == objectives, "{:?}", grid.objectives);
    ensure!(
        grid.trials.len() == 24
            && grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated)
    );
    // The front, from first principles: a trial is on it when no other is at least as good in
    // both objectives and better in one.
    let point = |t: &rtune::TrialResult| -> Result<(f64, f64)> {
        Ok((t.last("val_loss").context("val_loss")?, t.last("params").context("params")?))
    };
    let points: Vec<(f64, f64)> = grid.trials.iter().map(point).collect::<Result<_>>()?;
    let beats = |a: (f64, f64), b: (f64, f64)| a.0 <= b.0 && a.1 <= b.1 && (a.0 < b.0 || a.1 < b.1);
    let mut front: Vec<&str> = grid
        .trials
        .iter()
        .zip(&points)
        .filter(|(_, p)| !points.iter().any(|q| beats(*q, **p)))
        .map(|(t, _)| t.trial_id())
        .collect();
    front.sort_unstable();
    let mut ours: Vec<&str> = grid.pareto_front()?.iter().map(|t| t.trial_id()).collect();
    ours.sort_unstable();
    ensure!(ours == front, "pareto_front {ours:?} != {front:?}");
    ensure!(front.len() >= 3, "a front of {} trials: {front:?}", front.len());
    // NSGA-II bred later generations from the first: the smallest and the most accurate
    // models are on the front, and differ.
    let widths: Vec<i64> =
        grid.trials.iter().map(|t| t.params().get::<i64>("hidden")).collect::<Result<_, _>>()?;
    ensure!(widths.iter().min() != widths.iter().max(), "{widths:?}");

    // The results table written at the end marks the front.
    let file = std::fs::File::open(experiment.join("results.parquet"))?;
    use polars::prelude::SerReader;
    let table = polars::prelude::ParquetReader::new(file).finish()?;
    let ids = table.column("trial_id")?.str()?.clone();
    let marks = table.column("pareto")?.bool()?.clone();
    let mut marked: Vec<String> = (0..table.height())
        .filter(|&i| marks.get(i) == Some(true))
        .filter_map(|i| ids.get(i).map(str::to_owned))
        .collect();
    marked.sort_unstable();
    ensure!(marked == front, "results.parquet marks {marked:?}, not {front:?}");

    // `rtune show` lists the front first, each row marked.
    let exp = experiment.to_str().unwrap();
    let out = rtune(&["show", exp])?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header = stdout.lines().find(|l| l.starts_with("trial ")).context("no table")?;
    ensure!(header.contains("pareto") && header.contains("val_loss"), "{stdout}");
    let mut starred: Vec<&str> = stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some("*"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let first: Vec<&str> = stdout.lines().skip(1).take(front.len()).collect();
    ensure!(first.iter().all(|l| l.contains(" * ")), "the front is not first:\n{stdout}");
    starred.sort_unstable();
    ensure!(starred == front, "rtune show stars {starred:?}, not {front:?}");
    // `run --json` lists the front instead of a best; `rtune ls` counts it.
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary)?)?;
    let mut listed: Vec<&str> = json["pareto_front"]
        .as_array()
        .context("no pareto_front")?
        .iter()
        .filter_map(|t| t["trial_id"].as_str())
        .collect();
    listed.sort_unstable();
    ensure!(listed == front && json["best"].is_null(), "{json}");
    ensure!(json["objectives"][1] == serde_json::json!({"metric": "params", "mode": "min"}));
    let out = rtune(&["ls", dir.path().to_str().unwrap()])?;
    let said = format!("Pareto front of {}", front.len());
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&said), "{}", text(&out));

    // Optuna's reader: a study of two directions whose best trials are the front.
    let script = r#"
import json, sys, optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
optuna.logging.set_verbosity(optuna.logging.ERROR)
s = optuna.load_study(study_name="digits-nsga2", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
print(json.dumps({"directions": [d.name for d in s.directions],
                  "complete": sum(t.state.name == "COMPLETE" for t in s.trials),
                  "front": sorted(t.user_attrs["rtune_trial_id"] for t in s.best_trials)}))
"#;
    let study: serde_json::Value = serde_json::from_slice(&python(script, &[&journal])?)?;
    ensure!(study["directions"] == serde_json::json!(["MINIMIZE", "MINIMIZE"]), "{study}");
    ensure!(study["complete"] == 24 && study["front"] == serde_json::json!(front), "{study}");

    // Export: no single best to guess; a trial of the front, or the best by one objective.
    let to = dir.path().join("model");
    let to_arg = to.to_str().unwrap();
    let out = rtune(&["export", exp, "--to", to_arg])?;
    let said = "a sweep with 2 objectives (val_loss, params), and no trial is best in all";
    ensure!(out.status.code() == Some(2) && text(&out).contains(said), "{}", text(&out));
    ensure!(!to.exists());
    let out = rtune(&["export", exp, "--metric", "params", "--to", to_arg])?;
    ensure!(out.status.success(), "{}", text(&out));
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(to.join("metrics.json"))?)?;
    let smallest = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    ensure!(metrics["params"].as_f64() == Some(smallest), "{metrics}");
    let from_front = dir.path().join("from-front");
    let out = rtune(&["export", exp, "--trial", front[0], "--to", from_front.to_str().unwrap()])?;
    ensure!(out.status.success() && text(&out).contains(front[0]), "{}", text(&out));
    Ok(())
}

/// `examples/quickstart.rs` in its short mode (`RTUNE_QUICK=1`): it sweeps, picks the best
/// trial and predicts the test set, as its first comment says. `cargo test` builds the examples
/// next to this binary.
pub fn quickstart_example_runs() -> Result<()> {
    let exe = std::env::current_exe()?;
    let examples = exe.parent().and_then(Path::parent).context("no target dir")?.join("examples");
    let quickstart = examples.join("quickstart");
    ensure!(quickstart.exists(), "{} is not built (cargo test builds it)", quickstart.display());
    let tmp = tempfile::tempdir()?;
    let out =
        Command::new(&quickstart).env("RTUNE_QUICK", "1").env("TMPDIR", tmp.path()).output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.lines().filter(|l| l.contains(" epochs  val_loss ")).count() == 4, "{stdout}");
    let percent: f64 = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("best trial ")?.split(": ").nth(1)?.split('%').next()?.parse().ok()
        })
        .with_context(|| format!("no accuracy in:\n{stdout}"))?;
    ensure!(percent >= 80.0, "quickstart's best model: {percent}% of the test set");
    ensure!(tmp.path().join("rtune-quickstart").is_dir(), "the sweep went elsewhere");
    Ok(())
}

/// Every exit code of the table in `--help` (and the guide's sweep-file page), each from a command that ends
/// with it; 1 (trials failed) and 3 (interrupted) have tests of their own
/// (`failed_trials_exit_1_unless_allowed`, `ctrl_c_leaves_a_resumable_sweep`).
pub fn exit_codes_follow_the_table() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let help = rtune(&["--help"])?;
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for line in [
        "0  success",
        "1  the sweep ran and some trials failed",
        "2  invalid input",
        "3  interrupted",
        "4  anything else failed",
    ] {
        ensure!(help.contains(line), "--help lacks {line:?}:\n{help}");
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sweep-files.md"))?;
    ensure!(
        readme.contains(rtune::cli::EXIT_CODES),
        "docs/sweep-files.md's table differs from --help's"
    );
    let d = dir.path().to_str().unwrap();
    let missing = dir.path().join("missing");
    let m = missing.to_str().unwrap();
    // 0: an empty storage folder lists nothing, in both formats.
    let out = rtune(&["ls", d])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let out = rtune(&["ls", d, "--format", "json"])?;
    ensure!(out.status.code() == Some(0) && out.stdout.starts_with(b"[]"), "{}", text(&out));
    // 0: a shipped sweep file is valid, and checking it runs nothing and makes nothing.
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/synthetic_asha.toml");
    let out = Command::new(RTUNE).args(["validate", shipped]).current_dir(d).output()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    ensure!(
        said.contains("valid; it runs 12 trials of `synthetic-curve` (1 worker each, 1 at a time)"),
        "{said}"
    );
    ensure!(std::fs::read_dir(d)?.next().is_none(), "validate made something in {d}");
    // 2: user mistakes in every command that reads what it is given.
    let mistakes: &[(&[&str], &str)] = &[
        (&["ls", m], "is not a folder"),
        (&["show", m], "is not an experiment directory"),
        (&["show", d, "3"], "is not an experiment directory"),
        (&["export", m, "--to", &format!("{d}/out")], ""),
        (&["predict", m, &format!("{d}/in.csv"), &format!("{d}/out.csv")], ""),
        (&["run", &format!("{d}/nope.toml")], "cannot read the sweep file"),
        (&["validate", shipped, "--set", "scaling.num_workers=-1"], "`scaling.num_workers` is -1"),
        (
            &[
                "validate",
                shipped,
                "--set",
                "scaling.num_workers=0",
                "--set",
                "run.cluster=\"h:1\"",
            ],
            "`scaling.num_workers` is 0 (local mode: the train function runs in this process), \
             but the run goes to the cluster at h:1",
        ),
        (&["resume", m], ""),
        (&["watch", m], ""),
    ];
    for (args, wanted) in mistakes {
        let out = rtune(args)?;
        ensure!(out.status.code() == Some(2), "{args:?}: {}", text(&out));
        ensure!(String::from_utf8_lossy(&out.stderr).contains(wanted), "{args:?}: {}", text(&out));
        ensure!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{}", text(&out));
    }
    // 4: the system failed it (no cluster head listens there).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let out = rtune(&["status", "--address", &format!("127.0.0.1:{port}")])?;
    ensure!(out.status.code() == Some(4), "{}", text(&out));
    Ok(())
}

/// A sweep that recorded no result (every trial failed at once) is replaced by the rerun of its
/// fixed file under the same name; one that recorded results is kept, and the next run goes to
/// `NAME-2`.
pub fn a_sweep_that_recorded_nothing_is_replaced() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.0)?;
    let f = file.to_str().unwrap();
    let out = rtune(&["run", f, "--no-tui", "--set", "param_space.fail_at=1"])?;
    ensure!(out.status.code() == Some(1), "{}", text(&out));
    let out = rtune(&["run", f, "--no-tui", "--set", "tune.num_samples=2"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stdout).contains("replacing "), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/curves"))?;
    ensure!(grid.trials.len() == 2, "{} trials: the old ones were kept", grid.trials.len());
    check_histories(&grid)?;
    // One with results is kept: the next run of the file gets a fresh folder beside it.
    let out = rtune(&["run", f, "--no-tui", "--set", "tune.num_samples=1"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(
        String::from_utf8_lossy(&out.stdout).contains("this run is curves-2"),
        "{}",
        text(&out)
    );
    ensure!(ResultGrid::from_path(dir.path().join("results/curves"))?.trials.len() == 2);
    ensure!(ResultGrid::from_path(dir.path().join("results/curves-2"))?.trials.len() == 1);
    Ok(())
}

/// `rtune completions bash` is a script a real bash completes rtune's commands and flags with;
/// zsh's and fish's are written too.
pub fn shell_completions_complete_commands() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = rtune(&["completions", "bash"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let script = dir.path().join("rtune.bash");
    std::fs::write(&script, &out.stdout)?;
    let complete = |words: &str, cword: usize| -> Result<String> {
        let line = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; \
             _rtune rtune \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"; \
             echo \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = Command::new("bash").args(["-c", &line]).output()?;
        ensure!(out.status.success(), "{}", text(&out));
        Ok(String::from_utf8(out.stdout)?.trim().to_owned())
    };
    ensure!(complete("rtune va", 1)? == "validate", "{}", complete("rtune va", 1)?);
    ensure!(complete("rtune show --for", 2)? == "--format");
    ensure!(complete("rtune ls --format ''", 3)?.split(' ').any(|w| w == "json"));
    for shell in ["zsh", "fish"] {
        let out = rtune(&["completions", shell])?;
        ensure!(out.status.success() && out.stdout.len() > 1000, "{shell}: {}", text(&out));
    }
    let out = rtune(&["completions", "tcsh"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    Ok(())
}

/// The shipped ASHA example does what its comment says: 12 trials, the slow curves stopped at
/// iterations 2, 4 or 8, the best at score 0.773 after 16.
pub fn the_synthetic_example_keeps_its_promise() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/synthetic_asha.toml");
    let comment = std::fs::read_to_string(shipped)?;
    ensure!(comment.contains("reaches score 0.773 at iteration 16"), "the comment changed");
    let storage = format!("storage_path={:?}", dir.path().display().to_string());
    let out = rtune(&["run", shipped, "--no-tui", "--set", &storage])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("synthetic-asha"))?;
    ensure!(grid.trials.len() == 12, "{} trials", grid.trials.len());
    let best = grid.best_result()?;
    let score = best.last("score").context("no score")?;
    ensure!((score - 0.773).abs() < 5e-4 && best.history().len() == 16, "best {score}");
    let stopped: Vec<usize> = grid.trials.iter().map(|t| t.history().len()).collect();
    ensure!(stopped.iter().all(|n| [2, 4, 8, 16].contains(n)), "{stopped:?}");
    ensure!(stopped.iter().filter(|&&n| n < 16).count() >= 6, "ASHA stopped few: {stopped:?}");
    Ok(())
}

/// `rtune resume DIR --sweep FIXED.toml`: a corrected file goes on with the sweep (and is kept
/// for the next resume) when it changes only what did not decide the recorded results; one
/// that changes those is refused, exit 2, and the kept file stays as it was.
pub fn resume_takes_a_corrected_sweep_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.1)?;
    let f = file.to_str().unwrap();
    // Killed once it has recorded a result: an interrupted sweep to go on with.
    let mut run = Command::new(RTUNE)
        .args(["run", f, "--no-tui", "--set", "tune.num_samples=2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let experiment = dir.path().join("results/curves");
    wait_for(Duration::from_secs(120), || {
        let rows = std::fs::read_dir(&experiment).ok().into_iter().flatten().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("progress.csv"))
                .is_ok_and(|t| t.lines().count() >= 2)
        });
        Ok(rows && experiment.join(rtune_driver::tune::STATE_FILE).exists())
    })?;
    run.kill()?;
    run.wait()?;
    let exp = experiment.to_str().unwrap();
    let kept = || -> Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(
            experiment.join(rtune_driver::tune::SWEEP_FILE),
        )?)?)
    };
    let before = kept()?;
    // Another param space: what was recorded was sampled from the old one.
    let changed = dir.path().join("changed.toml");
    let original = std::fs::read_to_string(&file)?;
    std::fs::write(&changed, original.replace("noise = 0.01", "noise = 0.02"))?;
    let out = rtune(&[
        "resume",
        exp,
        "--sweep",
        changed.to_str().unwrap(),
        "--set",
        "tune.num_samples=2",
    ])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let wanted = "`param_space.noise`: 0.01 in the experiment, 0.02 in the file";
    ensure!(String::from_utf8_lossy(&out.stderr).contains(wanted), "{}", text(&out));
    ensure!(kept()? == before, "a refused file replaced the kept one");
    // A stop criterion and the checkpoints kept: nothing recorded came from them.
    let fixed = dir.path().join("fixed.toml");
    std::fs::write(
        &fixed,
        format!(
            "{original}\n[run]\nstop = {{ score = 0.99 }}\ncheckpoint = {{ num_to_keep = 3 }}\n"
        ),
    )?;
    let out =
        rtune(&["resume", exp, "--sweep", fixed.to_str().unwrap(), "--set", "tune.num_samples=2"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stdout).contains("going on with"), "{}", text(&out));
    let now = kept()?;
    ensure!(now["text"].as_str().is_some_and(|t| t.contains("score = 0.99")), "{now}");
    ensure!(now["set"] == serde_json::json!(["tune.num_samples=2"]), "{now}");
    ensure!(ResultGrid::from_path(&experiment)?.trials.len() == 2);
    // --set belongs to --sweep.
    let out = rtune(&["resume", exp, "--set", "tune.num_samples=3"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    Ok(())
}

/// A `digits-mlp` sweep with `[scaling] sharding = "zero2"` (2 ranks a trial) under PBT: every
/// checkpoint holds both ranks' shards of Adam's state, a trial that takes over another's
/// checkpoint goes on with that trial's optimizer state (its step count carries on from the
/// source's), `tuner.json` records the sharding, and the best checkpoint exports and predicts.
pub fn a_sharded_sweep_under_pbt_carries_the_optimizer_state() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let sweep = format!(
        r#"
name = "zero-pbt"
storage_path = "{}"

[trainable]
builtin = "digits-mlp"

[scaling]
num_workers = 2
resources_per_worker = {{ CPU = 0.25 }}
sharding = "zero2"

# Two trials that learn, then two that barely move: PBT's bottom takes over its top.
[param_space]
lr = {{ grid_search = [0.02, 0.02, 0.00001, 0.00001] }}
hidden = 16
batch_size = 64
epochs = 6

[tune]
metric = "val_acc"
mode = "max"
max_concurrent_trials = 2
seed = 0
scheduler = {{ type = "pbt", time_attr = "training_iteration", perturbation_interval = 2, quantile_fraction = 0.5, hyperparam_mutations = {{ lr = {{ loguniform = [0.00001, 0.02] }} }} }}
"#,
        storage.display()
    );
    let file = dir.path().join("zero.toml");
    std::fs::write(&file, sweep)?;
    let out = rtune(&["run", file.to_str().context("path")?, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let experiment = storage.join("zero-pbt");
    let settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(experiment.join("tuner.json"))?)?;
    ensure!(settings["scaling"]["sharding"] == "zero2", "tuner.json: {settings}");
    let log = std::fs::read_to_string(experiment.join("driver.log"))?;
    ensure!(log.contains(" takes over trial "), "PBT exploited nothing:\n{log}");
    // Every checkpoint holds both shards, and the optimizer's steps are its iteration's:
    // the same number of steps each epoch, counted on across a takeover (an optimizer
    // started afresh there would count from 0).
    let mut per_epoch = None;
    let mut checkpoints = 0;
    for trial in std::fs::read_dir(&experiment)?.filter_map(|e| e.ok()).map(|e| e.path()) {
        for ck in std::fs::read_dir(&trial).into_iter().flatten().filter_map(|e| e.ok()) {
            let name = ck.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("checkpoint_") || name == "exploited_checkpoint") {
                continue;
            }
            let ck = rtune::Checkpoint::from_directory(ck.path())?;
            let zero = ck.path().join("zero");
            for file in ["index.json", "shard_0_of_2.safetensors", "shard_1_of_2.safetensors"] {
                ensure!(zero.join(file).is_file(), "{} lacks {file}", ck.path().display());
            }
            let index: serde_json::Value =
                serde_json::from_slice(&std::fs::read(zero.join("index.json"))?)?;
            let (step, iteration) = (index["step"].as_u64().context("step")?, ck.iteration()?);
            let per = *per_epoch.get_or_insert(step / iteration);
            ensure!(
                step == per * iteration && per > 0,
                "{}: {step} optimizer steps at iteration {iteration} ({per} an epoch)",
                ck.path().display()
            );
            checkpoints += 1;
        }
    }
    ensure!(checkpoints >= 4, "{checkpoints} checkpoints");
    // The best one exports as any model does (every rank held the whole model), and predicts.
    let to = dir.path().join("best");
    let out = rtune(&[
        "export",
        experiment.to_str().context("path")?,
        "--best",
        "--to",
        to.to_str().context("path")?,
    ])?;
    ensure!(out.status.success(), "{}", text(&out));
    let predictor =
        rtune::model::TorchPredictor::from_export(&to, |p| rtune::builtins::digits_mlp(p, 16))?;
    let test = rtune::digits::Digits::split(rtune::builtins::DIGITS_SPLIT_SEED)?.test;
    let accuracy = rtune::builtins::predictor_accuracy(&predictor, &test)?;
    ensure!(accuracy > 0.5, "the exported best model is {accuracy:.4} right on the test set");
    Ok(())
}
