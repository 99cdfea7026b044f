//! Command trainables through `rtune run`: an executable per worker with torchrun's
//! environment, the report protocol on stdin/stdout (examples/command/rtune_report.py), a clean
//! stop when the scheduler ends a trial, resume from the command's own checkpoint after a
//! failure, and the DDP example sweeping a real PyTorch script.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

use crate::common::text;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The `.venv` that `make test` installs (Python with PyTorch).
fn venv_bin() -> Result<PathBuf> {
    let bin = Path::new(ROOT).join(".venv/bin");
    ensure!(
        bin.join("python3").exists(),
        "{} has no python3: `make test` installs the .venv these tests need",
        bin.display()
    );
    Ok(bin)
}

/// `rtune ARGS` with the .venv first on PATH.
fn rtune(args: &[&str]) -> Result<Output> {
    let path = format!("{}:{}", venv_bin()?.display(), std::env::var("PATH").unwrap_or_default());
    Ok(Command::new(RTUNE).args(args).env("PATH", path).env_remove("RUST_LOG").output()?)
}

/// A probe that speaks the protocol through the example helper: it records its environment
/// (`env_RANK_START.json`), checks that a resumed start finds its state in the checkpoint,
/// reports `score = rate * i` with a checkpoint holding `i`, fails on purpose once at `fail_at`,
/// SIGKILLs its rank 2 once at `lose_at` (when given), and writes `stopped_RANK.txt` when told
/// to stop.
const PROBE: &str = r#"
import json, os, sys, tempfile
sys.path.insert(0, {helper!r})
from rtune_report import checkpoint, iteration, params, report

p = params()
rank, run = os.environ["RANK"], os.environ["RTUNE_RUN_DIR"]
names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
         "MASTER_PORT", "RTUNE_PARAMS", "RTUNE_PARAMS_FILE", "RTUNE_CHECKPOINT", "RTUNE_ITERATION",
         "RTUNE_TRIAL_ID", "RTUNE_TRIAL_NAME", "RTUNE_EXPERIMENT_NAME", "RTUNE_WORKER"]
start = iteration()
seen = {n: os.environ.get(n) for n in names}
seen["cwd"] = os.getcwd()
with open(os.path.join(run, f"env_{rank}_{start}.json"), "w") as f:
    json.dump(seen, f)
state = 0
if checkpoint():
    with open(os.path.join(checkpoint(), "state.json")) as f:
        state = json.load(f)["i"]
assert state == start, f"checkpoint holds {state}, rtune says {start}"
for i in range(start + 1, p["iterations"] + 1):
    if i == p["fail_at"] and checkpoint() is None:
        sys.exit(f"failing on purpose at {i}")
    lost = os.path.join(run, "lost")
    if i == p.get("lose_at") and rank == "2" and not os.path.exists(lost):
        open(lost, "w").close()
        os.kill(os.getpid(), 9)
    print(f"plain output {i}")
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        go_on = report({"score": p["rate"] * i}, checkpoint_dir=folder)
    if not go_on:
        with open(os.path.join(run, f"stopped_{rank}.txt"), "w") as f:
            f.write(str(i))
        break
"#;

/// A sweep of the probe, 2 workers a trial; `{extra}` adds keys.
const SWEEP: &str = r#"
name = "probe"
storage_path = {storage}

[trainable]
command = ["python3", "probe.py"]

[scaling]
num_workers = 2

[param_space]
rate = { grid_search = [4.0, 1.0] }
iterations = 6
fail_at = {fail_at}

[tune]
metric = "score"
mode = "max"
max_concurrent_trials = 1
{extra}
"#;

/// Writes the probe and its sweep file into `dir`; returns the sweep file.
fn probe_sweep(dir: &Path, fail_at: i64, extra: &str) -> Result<PathBuf> {
    let helper = Path::new(ROOT).join("examples/command");
    let probe = PROBE.replace("{helper!r}", &format!("{:?}", helper.display().to_string()));
    std::fs::write(dir.join("probe.py"), probe)?;
    let storage = format!("{:?}", dir.join("results").display().to_string());
    let sweep = SWEEP
        .replace("{storage}", &storage)
        .replace("{fail_at}", &fail_at.to_string())
        .replace("{extra}", extra);
    let file = dir.join("sweep.toml");
    std::fs::write(&file, sweep)?;
    Ok(file)
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Both ranks got torchrun's variables for one group (the same master port), the trial's
/// params, no rtune-internal variables, and the sweep file's folder as working directory.
fn check_env(trial: &rtune::TrialResult, start: u64, dir: &Path) -> Result<()> {
    let params = std::fs::read_to_string(trial.path().join("params.json"))?;
    let mut ports = Vec::new();
    for rank in 0..2 {
        let env = read_json(&trial.path().join(format!("env_{rank}_{start}.json")))?;
        let want = [
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", rank.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("LOCAL_WORLD_SIZE", "2".into()),
            ("GROUP_RANK", "0".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("RTUNE_ITERATION", start.to_string()),
            ("RTUNE_TRIAL_ID", trial.trial_id().to_owned()),
            ("RTUNE_EXPERIMENT_NAME", "probe".into()),
        ];
        for (name, value) in want {
            ensure!(env[name] == value.as_str(), "{name}: {env}");
        }
        let got: serde_json::Value = serde_json::from_str(env["RTUNE_PARAMS"].as_str().unwrap())?;
        ensure!(got == serde_json::from_str::<serde_json::Value>(&params)?, "{env}");
        let file = env["RTUNE_PARAMS_FILE"].as_str().unwrap_or_default();
        ensure!(std::fs::read_to_string(file)? == params, "{env}");
        ensure!(env["RTUNE_WORKER"].is_null(), "the worker's own spec leaked: {env}");
        ensure!(Path::new(env["cwd"].as_str().unwrap()) == dir.canonicalize()?, "{env}");
        ports.push(env["MASTER_PORT"].as_str().unwrap_or_default().parse::<u16>()?);
    }
    ensure!(ports[0] == ports[1] && ports[0] != 0, "master ports {ports:?}");
    Ok(())
}

/// ASHA stops the worse trial at its first rung: both of its processes read `stop` and end
/// cleanly; the better trial runs its 6 iterations, its checkpoint the command's own files.
pub fn command_trainable_speaks_the_protocol_and_stops_cleanly() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let asha = "scheduler = { type = \"asha\", grace_period = 1, max_t = 6, reduction_factor = 2 }";
    let file = probe_sweep(dir.path(), 0, asha)?;
    // The test runs in the package root: the command runs in the sweep file's folder anyway.
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/probe"))?;
    ensure!(grid.trials.len() == 2, "{} trials", grid.trials.len());
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    let by_rate = |rate: f64| {
        grid.trials.iter().find(|t| t.params().get::<f64>("rate").ok() == Some(rate)).context(rate)
    };
    let (good, poor) = (by_rate(4.0)?, by_rate(1.0)?);
    let scores =
        |t: &rtune::TrialResult| -> Vec<f64> { t.history().iter().map(|m| m["score"]).collect() };
    ensure!(scores(good) == [4.0, 8.0, 12.0, 16.0, 20.0, 24.0], "{:?}", scores(good));
    ensure!(scores(poor) == [1.0], "ASHA did not stop the poor trial: {:?}", scores(poor));
    for rank in 0..2 {
        let stopped = std::fs::read_to_string(poor.path().join(format!("stopped_{rank}.txt")))
            .with_context(|| format!("rank {rank} of the stopped trial never read `stop`"))?;
        ensure!(stopped == "1", "rank {rank} stopped at {stopped}");
    }
    check_env(good, 0, dir.path())?;
    check_env(poor, 0, dir.path())?;
    // The kept checkpoint is a copy of the folder rank 0 reported with its last result.
    let last = good.path().join("checkpoint_000006/state.json");
    ensure!(read_json(&last)?["i"] == 6, "{}", last.display());
    // Lines that are not reports reach the worker's log.
    let log = std::fs::read_to_string(good.path().join("logs/rank_0.stdout"))?;
    ensure!(log.contains("plain output 6"), "{log}");
    Ok(())
}

/// A sweep that stops because its metric is never reported (the probe reports `score`, the
/// sweep ranks by `acc`) exits 2 with its trials cut short INTERRUPTED, not TERMINATED; `ls`
/// says it stopped on a mistake, and a plain `resume` refuses to meet it again (exit 2, its
/// trials as they were), naming what goes on: the fixed file as a new sweep, which runs.
pub fn a_sweep_stopped_on_a_mistake_cuts_its_trials_short() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = probe_sweep(dir.path(), 0, "")?;
    let f = file.to_str().unwrap();
    let experiment = dir.path().join("results/probe");
    let e = experiment.to_str().unwrap();
    let out = rtune(&["run", f, "--no-tui", "--set", "tune.metric=\"acc\""])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(text(&out).contains("invalid `tune.metric`: names `acc`"), "{}", text(&out));
    let statuses = || -> Result<Vec<TrialStatus>> {
        Ok(ResultGrid::from_path(&experiment)?.trials.iter().map(|t| t.status()).collect())
    };
    let cut = statuses()?;
    ensure!(!cut.is_empty() && cut.iter().all(|s| *s == TrialStatus::Interrupted), "{cut:?}");
    let out = rtune(&["ls", dir.path().join("results").to_str().unwrap()])?;
    let said = String::from_utf8_lossy(&out.stdout);
    ensure!(said.contains("stopped on a mistake") && said.contains("`rtune run FIXED.toml`"));
    ensure!(said.contains("invalid `tune.metric`"), "{said}");
    let out = rtune(&["resume", e, "--no-tui"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(text(&out).contains("resuming it unchanged meets it again"), "{}", text(&out));
    ensure!(statuses()? == cut, "the refused resume changed the trials");
    let out = rtune(&["run", f, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/probe-2"))?;
    ensure!(grid.trials.iter().all(|t| t.status() == TrialStatus::Terminated));
    Ok(())
}

/// A command that fails once is restarted from its latest checkpoint: it is told where the
/// checkpoint is and how many reports came before, finds its own state there (the probe asserts
/// it), and the history holds every iteration exactly once.
pub fn failed_command_resumes_from_its_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = probe_sweep(dir.path(), 4, "")?;
    let out = rtune(&[
        "run",
        file.to_str().unwrap(),
        "--no-tui",
        "--set",
        "param_space.rate=3.0",
        "--set",
        "run.failure={ max_failures = 1 }",
    ])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/probe"))?;
    let trial = grid.trials.first().context("no trial")?;
    let scores: Vec<f64> = trial.history().iter().map(|m| m["score"]).collect();
    ensure!(scores == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0], "{scores:?}");
    check_env(trial, 0, dir.path())?;
    check_env(trial, 3, dir.path())?;
    let resumed = read_json(&trial.path().join("env_0_3.json"))?;
    let from = resumed["RTUNE_CHECKPOINT"].as_str().unwrap_or_default();
    ensure!(from.ends_with("checkpoint_000003"), "resumed from {from:?}");
    // The first attempt's failure names the command and the last line of its stderr.
    let log = std::fs::read_to_string(dir.path().join("results/probe/driver.log"))?;
    ensure!(log.contains("exited with status 1: failing on purpose at 4"), "{log}");
    Ok(())
}

/// An elastic command trainable (2 to 3 ranks) whose rank 2 is SIGKILLed does not go on in
/// place (torchrun's environment has no way to): its ranks start again from the latest
/// checkpoint with WORLD_SIZE 2, then with 3 at the next checkpoint (the CPU is free again).
/// Neither restart is a failure (none are allowed), and every iteration is there once.
pub fn elastic_command_restarts_with_the_new_world_size() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = probe_sweep(dir.path(), 0, "")?;
    let path = format!("{}:{}", venv_bin()?.display(), std::env::var("PATH").unwrap_or_default());
    let sets = [
        "scaling.num_workers={ min = 2, max = 3 }",
        "param_space.rate=3.0",
        "param_space.lose_at=3",
    ];
    let mut command = Command::new(RTUNE);
    command.args(["run", file.to_str().unwrap(), "--no-tui"]);
    for set in sets {
        command.args(["--set", set]);
    }
    let out = command.env("PATH", path).env("RTUNE_NUM_CPUS", "3").output()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/probe"))?;
    let trial = grid.trials.first().context("no trial")?;
    let scores: Vec<f64> = trial.history().iter().map(|m| m["score"]).collect();
    ensure!(scores == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0], "{scores:?}");
    let worlds: Vec<f64> = trial.history().iter().map(|m| m["world_size"]).collect();
    ensure!(worlds == [3.0, 3.0, 2.0, 3.0, 3.0, 3.0], "{worlds:?}");
    // Each start's ranks were told their group: 3, then 2 from checkpoint 2, then 3 from 3.
    for (start, world) in [(0, 3), (2, 2), (3, 3)] {
        for rank in 0..world {
            let env = read_json(&trial.path().join(format!("env_{rank}_{start}.json")))?;
            ensure!(env["WORLD_SIZE"] == world.to_string().as_str(), "start {start}: {env}");
        }
    }
    ensure!(!trial.path().join("env_2_2.json").exists(), "rank 2 started with 2 ranks");
    let said = crate::common::resizes_said(trial.path())?;
    ensure!(said.len() == 2, "{said:?}");
    ensure!(said[0].starts_with("3 -> 2: rank 2 lost: `"), "{said:?}");
    ensure!(said[0].contains("probe.py` was killed by signal 9"), "{said:?}");
    let why_not = "(from the latest checkpoint; not in place: its ranks cannot re-form a group";
    ensure!(said[0].contains(why_not), "{said:?}");
    ensure!(said[1].starts_with("2 -> 3: room appeared"), "{said:?}");
    Ok(())
}

/// Mistakes in a command trainable are named before anything starts.
pub fn command_mistakes_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("sweep.toml");
    let storage = dir.path().join("results").display().to_string();
    let cases: &[(&str, &[&str])] = &[
        (
            "[trainable]\ncommand = [\"no-such-program-rtune\", \"train.py\"]\n",
            &[
                "sweep.toml:3:11",
                "`trainable.command`",
                "\"no-such-program-rtune\" is not found on PATH",
            ],
        ),
        (
            "[trainable]\ncommand = [\"./train.sh\"]\n",
            &["`trainable.command`", "train.sh is not an executable file"],
        ),
        (
            "[trainable]\ncommand = \"python3 train.py\"\n",
            &["`trainable.command` must be an array of strings, not the string"],
        ),
        (
            "[trainable]\ncommand = [\"python3\"]\nworking_dir = \"nowhere\"\n",
            &["sweep.toml:4:15", "`trainable.working_dir`", "nowhere is not a folder"],
        ),
        (
            "[trainable]\nbuiltin = \"synthetic-curve\"\ncommand = [\"python3\"]\n",
            &["`trainable.command` and `trainable.builtin` are both set"],
        ),
        (
            "[trainable]\nbuiltin = \"synthetic-curve\"\nstop_grace_s = 3\n",
            &["`trainable.stop_grace_s` is for command trainables"],
        ),
    ];
    for (sweep, wanted) in cases {
        std::fs::write(&file, format!("storage_path = {storage:?}\n{sweep}"))?;
        let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
        ensure!(out.status.code() == Some(2), "{sweep}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        for w in *wanted {
            ensure!(stderr.contains(w), "{sweep}: wanted {w:?} in:\n{}", text(&out));
        }
    }
    ensure!(!dir.path().join("results").exists(), "something was created");
    Ok(())
}

/// The example sweep: a PyTorch DDP script (gloo, 2 processes a trial) under ASHA. The poor
/// learning rate is stopped at the first rung and its processes see a clean stop; the good one
/// learns the digits.
pub fn ddp_script_sweeps_with_asha() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let example = Path::new(ROOT).join("examples/sweeps/ddp_digits_asha.toml");
    let storage = dir.path().join("results");
    let out = rtune(&[
        "run",
        example.to_str().unwrap(),
        "--no-tui",
        "--set",
        &format!("storage_path={:?}", storage.display().to_string()),
        "--set",
        "param_space.lr={ grid_search = [0.1, 0.0005] }",
        "--set",
        "param_space.hidden=64",
        "--set",
        "param_space.batch_size=32",
        "--set",
        "param_space.epochs=4",
        "--set",
        "tune.num_samples=1",
        "--set",
        "tune.max_concurrent_trials=1",
        "--set",
        "tune.scheduler={ type = \"asha\", grace_period = 2, max_t = 4, reduction_factor = 2 }",
    ])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(storage.join("ddp-digits-asha"))?;
    let by_lr = |lr: f64| {
        grid.trials.iter().find(|t| t.params().get::<f64>("lr").ok() == Some(lr)).context(lr)
    };
    let (good, poor) = (by_lr(0.1)?, by_lr(0.0005)?);
    ensure!(good.history().len() == 4, "{} epochs", good.history().len());
    let acc = good.last("val_acc").unwrap_or_default();
    ensure!(acc > 0.9, "the DDP script learned nothing: val_acc {acc}");
    ensure!(poor.history().len() == 2, "ASHA did not stop lr 0.0005: {:?}", poor.history());
    for rank in 0..2 {
        let log = std::fs::read_to_string(poor.path().join(format!("logs/rank_{rank}.stdout")))?;
        let wanted = format!("rank {rank}: stopped by the scheduler after epoch 2");
        ensure!(log.contains(&wanted), "rank {rank} did not see a clean stop:\n{log}");
    }
    let state = good.path().join("checkpoint_000004/state.pt");
    ensure!(state.exists(), "no PyTorch checkpoint at {}", state.display());
    Ok(())
}

/// A script with an objective and a constraint: `loss` is the distance² to (0.8, 0.8),
/// `excess = x + y - slack` must be <= 0. Each trial reports once, with a checkpoint holding
/// its point.
const CONSTRAINED: &str = r#"
import json, os, sys, tempfile
sys.path.insert(0, {helper!r})
from rtune_report import params, report

p = params()
x, y = p["x"], p["y"]
with tempfile.TemporaryDirectory() as folder:
    with open(os.path.join(folder, "point.json"), "w") as f:
        json.dump([x, y], f)
    report({"loss": (x - 0.8) ** 2 + (y - 0.8) ** 2, "excess": x + y - p["slack"]},
           checkpoint_dir=folder)
"#;

const CONSTRAINED_SWEEP: &str = r#"
name = "constrained"
storage_path = {storage}

[trainable]
command = ["python3", "constrained.py"]

[param_space]
x = { uniform = [0.0, 1.0] }
y = { uniform = [0.0, 1.0] }
slack = 1.0

[tune]
metric = "loss"
mode = "min"
constraints = ["excess"]
num_samples = 16
max_concurrent_trials = 2
search = { type = "tpe", n_startup_trials = 6 }
seed = 3
"#;

/// Constraints through a sweep file: TPE steers by them, the best trial (run's summary,
/// `rtune show`, `export --best`) is the best feasible one and each says so, the table marks
/// the infeasible ones; a sweep where none is feasible says so and `export --best` refuses.
/// Mistakes, each one line and exit 2: a constraint no trial reports (at its first report),
/// and CMA-ES, which takes none (before any trial).
pub fn constraints_choose_among_feasible_trials() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let helper = Path::new(ROOT).join("examples/command");
    let script = CONSTRAINED.replace("{helper!r}", &format!("{:?}", helper.display().to_string()));
    std::fs::write(dir.path().join("constrained.py"), script)?;
    let storage = format!("{:?}", dir.path().join("results").display().to_string());
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, CONSTRAINED_SWEEP.replace("{storage}", &storage))?;
    let file = file.to_str().unwrap();
    let summary = dir.path().join("summary.json");
    let out = rtune(&["run", file, "--no-tui", "--json", summary.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let experiment = dir.path().join("results/constrained");
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(grid.constraints == ["excess"] && grid.trials.len() == 16);
    let value = |t: &rtune::TrialResult, m: &str| t.last(m).context("reported");
    let mut feasible = Vec::new();
    for t in &grid.trials {
        if value(t, "excess")? <= 0.0 {
            feasible.push((value(t, "loss")?, t.trial_id()));
        }
    }
    feasible.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (best_loss, best) = *feasible.first().context("no feasible trial")?;
    // The unconstrained optimum is infeasible: the best loss of all is some infeasible trial's.
    let lowest = grid.trials.iter().map(|t| value(t, "loss")).collect::<Result<Vec<_>>>()?;
    ensure!(lowest.iter().any(|l| *l < best_loss), "no infeasible trial beat the best feasible");
    ensure!(grid.best_result()?.trial_id() == best);
    // TPE preferred feasible trials after its random start.
    let late = grid.trials[6..].iter().filter(|t| grid.feasible(t)).count();
    ensure!(late >= 6, "only {late} of the 10 model-based trials were feasible");
    let json = read_json(&summary)?;
    ensure!(json["best"]["trial_id"] == best && json["feasible"] == feasible.len(), "{json}");
    ensure!(json["constraints"] == serde_json::json!(["excess"]), "{json}");

    let exp = experiment.to_str().unwrap();
    let out = rtune(&["show", exp])?;
    let shown = String::from_utf8_lossy(&out.stdout);
    let said = format!(
        "{} of 16 trials met the constraints (excess <= 0); the best is chosen among them",
        feasible.len()
    );
    ensure!(shown.lines().next() == Some(said.as_str()), "{shown}");
    // Feasible trials first, the best on top; each row says whether it met them.
    let rows: Vec<Vec<&str>> =
        shown.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
    ensure!(rows[0][0] == best && rows[0][3] == "yes", "{shown}");
    let marks: Vec<&str> = rows.iter().map(|r| r[3]).collect();
    let yes = marks.iter().take_while(|m| **m == "yes").count();
    ensure!(yes == feasible.len() && marks[yes..].iter().all(|m| *m == "no"), "{shown}");

    let to = dir.path().join("best");
    let out = rtune(&["export", exp, "--best", "--to", to.to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    ensure!(text(&out).contains("the best feasible one (excess <= 0)"), "{}", text(&out));
    let point: Vec<f64> = serde_json::from_slice(&std::fs::read(to.join("point.json"))?)?;
    let chosen = grid.best_result()?.params();
    ensure!(point == [chosen.get::<f64>("x")?, chosen.get::<f64>("y")?], "{point:?}");

    // No slack: no trial is feasible.
    let named = |name: &str| format!("name={name:?}");
    let out = rtune(&[
        "run",
        file,
        "--no-tui",
        "--set",
        &named("none"),
        "--set",
        "param_space.slack=-5",
    ])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let said = "no trial met the constraints (excess <= 0): the sweep has no best trial";
    ensure!(text(&out).contains(said), "{}", text(&out));
    let none = dir.path().join("results/none");
    let out = rtune(&["show", none.to_str().unwrap()])?;
    let said = "no trial met the constraints (excess <= 0) of the 16 that reported";
    ensure!(String::from_utf8_lossy(&out.stdout).starts_with(said), "{}", text(&out));
    let to = dir.path().join("nothing");
    let out = rtune(&["export", none.to_str().unwrap(), "--best", "--to", to.to_str().unwrap()])?;
    let said = "none of the 16 trials that reported it met the sweep's constraints (excess <= 0)";
    ensure!(out.status.code() == Some(2) && text(&out).contains(said), "{}", text(&out));
    ensure!(!to.exists());

    // A constraint no trial reports: at the first report.
    let out = rtune(&[
        "run",
        file,
        "--no-tui",
        "--set",
        &named("unreported"),
        "--set",
        "tune.constraints=[\"mem_gb\"]",
    ])?;
    let said = "rtune: invalid `tune.constraints`: names `mem_gb`, which is not among the \
                metrics a trial reported (excess, loss, ";
    ensure!(out.status.code() == Some(2) && text(&out).contains(said), "{}", text(&out));
    // The sweep ended there: the two trials running then, and no more.
    let started = std::fs::read_dir(dir.path().join("results/unreported"))?
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_dir()))
        .count();
    ensure!(started <= 2, "{started} trials started after the mistake was found");
    // CMA-ES takes no constraints: before any trial.
    let out = rtune(&[
        "run",
        file,
        "--no-tui",
        "--set",
        &named("cma"),
        "--set",
        "tune.search=\"cmaes\"",
    ])?;
    let said = "CMA-ES does not take constraints";
    ensure!(out.status.code() == Some(2) && text(&out).contains(said), "{}", text(&out));
    ensure!(!dir.path().join("results/cma").exists(), "a trial ran");
    Ok(())
}
