//! Trackers reading what a sweep wrote, with their own code: Optuna's `load_study` on the
//! journal of a sweep (`[run] optuna`), after a driver SIGKILLed and resumed, and
//! `optuna-dashboard` serving it (both installed into .venv by `make test`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use rtune::ResultGrid;
use rtune::search::TrialStatus;
use serde_json::Value as Json;

use crate::cli::rtune;
use crate::common::{text, wait_for};

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// Ten synthetic-curve trials one at a time under ASHA (so its decisions follow from the seeds):
/// some complete, some are stopped early, and those drawn with `fail_at = 5` that get that far
/// fail. Every kind of Optuna distribution is among the params.
const SWEEP: &str = r#"
name = "study"
storage_path = "{storage}"

[trainable]
builtin = "synthetic-curve"

[param_space]
rate = { loguniform = [0.02, 1.0] }
plateau = { uniform = [0.5, 1.0] }
iterations = { randint = [6, 9] }
fail_at = { choice = [0, 5] }
noise = 0.01
seed = 3
sleep_s = {sleep}

[tune]
metric = "score"
mode = "max"
num_samples = 10
max_concurrent_trials = 1
scheduler = { type = "asha", grace_period = 2, max_t = 8, reduction_factor = 2 }
seed = 7

[run]
optuna = "{journal}"
"#;

fn sweep_file(dir: &Path, sleep: f64) -> Result<(PathBuf, PathBuf)> {
    let journal = dir.join("optuna.log");
    let text = SWEEP
        .replace("{storage}", &dir.join("results").display().to_string())
        .replace("{sleep}", &format!("{sleep:?}"))
        .replace("{journal}", &journal.display().to_string());
    let path = dir.join("sweep.toml");
    std::fs::write(&path, text)?;
    Ok((path, journal))
}

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

/// The study as Optuna's own reader loads it from `journal`.
fn load_study(journal: &Path, name: &str) -> Result<Json> {
    let script = r#"
import json, sys, optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
optuna.logging.set_verbosity(optuna.logging.ERROR)
storage = JournalStorage(JournalFileBackend(sys.argv[1]))
study = optuna.load_study(study_name=sys.argv[2], storage=storage)
trials = [{
    "number": t.number, "state": t.state.name, "params": t.params, "value": t.value,
    "intermediate": {str(k): v for k, v in t.intermediate_values.items()},
    "rtune_trial_id": t.user_attrs.get("rtune_trial_id"),
    "distributions": {k: type(d).__name__ for k, d in t.distributions.items()},
    "started": t.datetime_start is not None, "ended": t.datetime_complete is not None,
} for t in study.trials]
try:
    best = study.best_trial.user_attrs.get("rtune_trial_id")
except ValueError:
    best = None
print(json.dumps({"direction": study.direction.name, "user_attrs": study.user_attrs,
                  "trials": trials, "best": best,
                  "studies": [s.study_name for s in optuna.get_all_study_summaries(storage)]}))
"#;
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(journal)
        .arg(name)
        .output()
        .context("python from .venv (make test installs it, with optuna)")?;
    ensure!(
        out.status.success(),
        "Optuna could not load the study (make test installs optuna into .venv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// What Optuna read equals what rtune recorded: one Optuna trial per rtune trial, made in
/// order, with its params, every reported score at its iteration, its end, and the same best.
fn check_study(study: &Json, grid: &ResultGrid) -> Result<()> {
    ensure!(study["direction"] == "MAXIMIZE", "{}", study["direction"]);
    ensure!(study["user_attrs"]["rtune_metric"] == "score", "{}", study["user_attrs"]);
    let trials = study["trials"].as_array().context("trials")?;
    ensure!(
        trials.len() == grid.trials.len(),
        "{} Optuna trials, {}",
        trials.len(),
        grid.trials.len()
    );
    let mut by_id = BTreeMap::new();
    for t in trials {
        let id = t["rtune_trial_id"].as_str().context("a trial without its rtune id")?;
        ensure!(by_id.insert(id.to_owned(), t).is_none(), "{id} twice in the study");
    }
    let mut complete = Vec::new();
    for t in &grid.trials {
        let o = by_id
            .get(t.trial_id())
            .with_context(|| format!("{} not in the study", t.trial_id()))?;
        let p = t.params();
        ensure!(o["params"]["rate"].as_f64() == Some(p.get::<f64>("rate")?), "{o}");
        ensure!(o["params"]["plateau"].as_f64() == Some(p.get::<f64>("plateau")?), "{o}");
        ensure!(o["params"]["iterations"].as_i64() == Some(p.get::<i64>("iterations")?), "{o}");
        ensure!(o["params"]["fail_at"].as_i64() == Some(p.get::<i64>("fail_at")?), "{o}");
        let kinds = &o["distributions"];
        ensure!(
            kinds["rate"] == "FloatDistribution"
                && kinds["iterations"] == "IntDistribution"
                && kinds["fail_at"] == "CategoricalDistribution",
            "{kinds}"
        );
        ensure!(kinds.get("noise").is_none(), "a constant is no searched param: {kinds}");
        let reported: BTreeMap<String, f64> = t
            .history()
            .iter()
            .map(|m| ((m["training_iteration"] as i64).to_string(), m["score"]))
            .collect();
        let read: BTreeMap<String, f64> =
            serde_json::from_value(o["intermediate"].clone()).context("intermediate values")?;
        ensure!(
            read == reported,
            "{}: Optuna read {read:?}, rtune reported {reported:?}",
            t.trial_id()
        );
        let last = t.history().last().map(|m| m["score"]);
        let ran = t.history().len() as i64;
        let wanted = match t.status() {
            TrialStatus::Error => "FAIL",
            TrialStatus::Terminated if ran < p.get::<i64>("iterations")? => "PRUNED",
            TrialStatus::Terminated => "COMPLETE",
            other => bail!("{} ended {other:?}", t.trial_id()),
        };
        ensure!(
            o["state"] == wanted,
            "{}: {} in Optuna, {wanted} wanted",
            t.trial_id(),
            o["state"]
        );
        ensure!(o["started"] == true && o["ended"] == true, "{o}");
        if wanted != "FAIL" {
            ensure!(
                o["value"].as_f64() == last,
                "{}: value {} != {last:?}",
                t.trial_id(),
                o["value"]
            );
        }
        if wanted == "COMPLETE" {
            complete.push(t);
        }
    }
    ensure!(!complete.is_empty() && complete.len() < grid.trials.len(), "states: {trials:?}");
    // Optuna's best is among its complete trials; so is rtune's here (ASHA stops the worse).
    let best = grid.best_result()?;
    ensure!(
        study["best"].as_str() == Some(best.trial_id()),
        "Optuna's best {} != rtune's {}",
        study["best"],
        best.trial_id()
    );
    Ok(())
}

/// A sweep written to an Optuna journal that already holds another study: Optuna's own reader
/// loads both, and the sweep's study is what rtune recorded. A second sweep of the same name
/// into that journal is refused before anything runs.
pub fn optuna_reads_the_sweep_as_a_study() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (file, journal) = sweep_file(dir.path(), 0.0)?;
    // Someone else's study first: ids in the journal are positions, so rtune's must follow it.
    let other = r#"
import optuna, sys
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
optuna.logging.set_verbosity(optuna.logging.ERROR)
s = optuna.create_study(study_name="other", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
s.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=3)
"#;
    let out = Command::new(python()).arg("-c").arg(other).arg(&journal).output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--allow-failures"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/study"))?;
    let study = load_study(&journal, "study")?;
    ensure!(study["studies"] == serde_json::json!(["other", "study"]), "{}", study["studies"]);
    check_study(&study, &grid)?;
    let theirs = load_study(&journal, "other")?;
    ensure!(theirs["trials"].as_array().map(Vec::len) == Some(3), "{theirs}");

    // The same study name again (another storage path): exit 2, nothing run, journal unchanged.
    let before = std::fs::read(&journal)?;
    let storage = format!("storage_path={:?}", dir.path().join("elsewhere").display().to_string());
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--set", &storage])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(text(&out).contains("already holds a study named \"study\""), "{}", text(&out));
    ensure!(std::fs::read(&journal)? == before, "the refused sweep wrote to the journal");
    Ok(())
}

/// The driver SIGKILLed mid-sweep and resumed: the study goes on, each trial once, each
/// iteration's value once, and ends as the sweep did.
pub fn a_resumed_sweep_goes_on_with_its_study() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (file, journal) = sweep_file(dir.path(), 0.05)?;
    let mut child = start_run(&file, Stdio::null())?;
    // Killed once three trials have ended in the journal (and the fourth may be running).
    wait_for(Duration::from_secs(120), || {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        let ended = text.lines().filter(|l| l.contains("\"datetime_complete\"")).count();
        Ok(ended >= 3)
    })?;
    child.kill()?;
    child.wait()?;
    let experiment = dir.path().join("results/study");
    let out = rtune(&["resume", experiment.to_str().unwrap(), "--no-tui", "--allow-failures"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(grid.trials.len() == 10, "{} trials", grid.trials.len());
    check_study(&load_study(&journal, "study")?, &grid)
}

/// Bad journal paths are refused before anything runs, naming the key and the fix; a sweep
/// without a metric cannot be a study.
pub fn bad_optuna_journals_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (file, _) = sweep_file(dir.path(), 0.0)?;
    let not_a_journal = dir.path().join("notes.txt");
    std::fs::write(&not_a_journal, "hello\n")?;
    let cases = [
        (format!("run.optuna={:?}", dir.path().join("missing/optuna.log")), "does not exist"),
        (format!("run.optuna={:?}", dir.path()), "it is a folder"),
        (format!("run.optuna={:?}", not_a_journal), "is it an Optuna journal?"),
    ];
    for (set, wanted) in cases {
        let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--set", &set])?;
        ensure!(out.status.code() == Some(2), "{set}: {}", text(&out));
        ensure!(
            text(&out).contains("run.optuna") && text(&out).contains(wanted),
            "{set}: {}",
            text(&out)
        );
    }
    let no_metric = std::fs::read_to_string(&file)?.replace("metric = \"score\"\n", "").replace(
        "scheduler = { type = \"asha\", grace_period = 2, max_t = 8, reduction_factor = 2 }\n",
        "",
    );
    std::fs::write(&file, no_metric)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(
        text(&out).contains("run.optuna") && text(&out).contains("tune.metric"),
        "{}",
        text(&out)
    );
    ensure!(!dir.path().join("results").exists(), "a refused sweep left its folder");
    Ok(())
}

/// The body of `GET http://127.0.0.1:{port}{path}`, which must answer 200.
fn http_get(port: u16, path: &str) -> Result<String> {
    let (status, body) = crate::common::http_get(port, path, None)?;
    ensure!(status.starts_with("HTTP/1.0 200") || status.starts_with("HTTP/1.1 200"), "{status}");
    Ok(body)
}

/// `optuna-dashboard` serves the sweep's journal: its API lists the study with every trial in
/// the state rtune ended it in, and a headless Chromium renders the trials page with them (its
/// screenshot of the study page is kept in target/test-artifacts/).
pub fn optuna_dashboard_shows_the_sweep() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (file, journal) = sweep_file(dir.path(), 0.0)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--allow-failures"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/study"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dashboard = python().with_file_name("optuna-dashboard");
    let _server = crate::common::Killed(
        Command::new(&dashboard)
            .arg(&journal)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("{} (make test installs it)", dashboard.display()))?,
    );
    let mut studies = String::new();
    wait_for(Duration::from_secs(60), || {
        studies = http_get(port, "/api/studies").unwrap_or_default();
        Ok(!studies.is_empty())
    })?;
    let studies: Json = serde_json::from_str(&studies)?;
    let summary = &studies["study_summaries"][0];
    ensure!(summary["study_name"] == "study", "{studies}");
    let id = summary["study_id"].as_u64().context("a study id")?;
    let study: Json =
        serde_json::from_str(&http_get(port, &format!("/api/studies/{id}?after=0"))?)?;
    let shown: Vec<&str> = study["trials"]
        .as_array()
        .context("trials")?
        .iter()
        .filter_map(|t| t["state"].as_str())
        .collect();
    let mut wanted = Vec::new();
    for t in &grid.trials {
        let short = t.history().len() < t.params().get::<i64>("iterations")? as usize;
        wanted.push(match t.status() {
            TrialStatus::Error => "Fail",
            _ if short => "Pruned",
            _ => "Complete",
        });
    }
    ensure!(shown == wanted, "the dashboard shows {shown:?}, rtune ended {wanted:?}");

    // What a person sees: the trials page rendered by a browser, and the study page kept.
    let page = format!("http://127.0.0.1:{port}/dashboard/studies/{id}");
    let chromium = |args: &[&str], url: &str| -> Result<Output> {
        let out = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"])
            .arg("--virtual-time-budget=10000")
            .args(args)
            .arg(url)
            .output()
            .context("chromium (make test installs it from Debian)")?;
        ensure!(out.status.success(), "chromium: {}", text(&out));
        Ok(out)
    };
    let dom = chromium(&["--dump-dom"], &format!("{page}/trials"))?;
    let dom = String::from_utf8_lossy(&dom.stdout);
    let first = grid.trials.first().context("no trial")?.trial_id();
    ensure!(
        dom.contains("Trial 0 (trial_id=") && dom.contains(first) && dom.contains("Pruned"),
        "the rendered trials page does not show the trials ({} bytes)",
        dom.len()
    );
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts)?;
    let shot = artifacts.join("optuna-dashboard.png");
    chromium(&[&format!("--screenshot={}", shot.display())], &page)?;
    let png = std::fs::read(&shot)?;
    ensure!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "{} bytes", png.len());
    Ok(())
}

/// The files of a folder (not in subfolders) by name, with their bytes.
fn rtune_files(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            let name = path.file_name().context("a name")?.to_string_lossy().into_owned();
            files.insert(name, std::fs::read(&path)?);
        }
    }
    Ok(files)
}

/// An `mlflow server` on 127.0.0.1 with its SQLite store and artifacts in `dir`, in a process
/// group of its own (it starts workers), stopped when dropped.
struct MlflowServer {
    child: Option<std::process::Child>,
    dir: PathBuf,
    port: u16,
}

impl MlflowServer {
    /// Starts one on a free port (or `port`), answering once `/health` does.
    fn start(dir: &Path, port: Option<u16>) -> Result<MlflowServer> {
        use std::os::unix::process::CommandExt;
        let port = match port {
            Some(port) => port,
            None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
        };
        let mlflow = python().with_file_name("mlflow");
        let child = Command::new(&mlflow)
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string(), "--workers", "1"])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
            .arg("--artifacts-destination")
            .arg(dir.join("artifacts"))
            .current_dir(dir)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("{} (make test installs mlflow)", mlflow.display()))?;
        let server = MlflowServer { child: Some(child), dir: dir.to_path_buf(), port };
        wait_for(Duration::from_secs(120), || Ok(http_get(port, "/health").is_ok()))?;
        Ok(server)
    }

    fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group of a child we started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// Every run of `experiment` as MLflow's own Python client reads it: name, status, tags,
    /// params, and each metric's whole history.
    fn runs(&self, experiment: &str) -> Result<Vec<Json>> {
        let script = r#"
import json, sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
e = c.get_experiment_by_name(sys.argv[2])
out = []
for r in c.search_runs([e.experiment_id], max_results=1000):
    history = {k: [[m.step, m.value] for m in c.get_metric_history(r.info.run_id, k)]
               for k in r.data.metrics}
    artifacts = {}
    if "mlflow.parentRunId" not in r.data.tags:
        for a in c.list_artifacts(r.info.run_id, "best_checkpoint"):
            with open(c.download_artifacts(r.info.run_id, a.path, sys.argv[3]), "rb") as f:
                artifacts[a.path] = f.read().hex()
    out.append({"id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
                "tags": r.data.tags, "params": r.data.params, "metrics": r.data.metrics,
                "history": history, "artifacts": artifacts})
print(json.dumps(out))
"#;
        let out = Command::new(python())
            .arg("-c")
            .arg(script)
            .arg(self.uri())
            .arg(experiment)
            .arg(tempfile::tempdir_in(&self.dir)?.keep())
            .env_remove("MLFLOW_TRACKING_URI")
            .current_dir(&self.dir)
            .output()?;
        ensure!(out.status.success(), "MLflow's client: {}", String::from_utf8_lossy(&out.stderr));
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `rtune run FILE` in the background, in a process group of its own (for a SIGINT to it all).
fn start_run(file: &Path, stderr: Stdio) -> Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    Ok(Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--allow-failures"])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()?)
}

/// Waits until `n` trials of the experiment in `dir` have ended.
fn wait_for_ended(dir: &Path, n: usize) -> Result<()> {
    wait_for(Duration::from_secs(120), || {
        let grid = ResultGrid::from_path(dir);
        Ok(grid.is_ok_and(|g| g.trials.iter().filter(|t| t.status().is_finished()).count() >= n))
    })
}

/// The sweep file of the Optuna tests, logging to `uri` instead.
fn mlflow_sweep(dir: &Path, uri: &str, sleep: f64) -> Result<PathBuf> {
    let (file, _) = sweep_file(dir, sleep)?;
    let text = std::fs::read_to_string(&file)?;
    let text = text.replace(
        &format!("optuna = \"{}\"", dir.join("optuna.log").display()),
        &format!("mlflow = {{ tracking_uri = \"{uri}\", log_artifacts = true }}"),
    );
    std::fs::write(&file, text)?;
    Ok(file)
}

/// What MLflow's client read equals what rtune recorded: a parent run with the sweep's
/// settings and the best trial's metrics, and one nested run per trial with its params, its
/// end, and every reported score at its iteration, each once.
fn check_runs(runs: &[Json], grid: &ResultGrid) -> Result<()> {
    let (parents, nested): (Vec<&Json>, Vec<&Json>) =
        runs.iter().partition(|r| r["tags"].get("mlflow.parentRunId").is_none());
    ensure!(parents.len() == 1, "{} parent runs", parents.len());
    let parent = parents[0];
    ensure!(parent["name"] == "study" && parent["status"] == "FINISHED", "{parent}");
    ensure!(parent["params"]["metric"] == "score" && parent["params"]["mode"] == "max", "{parent}");
    ensure!(
        parent["params"]["param_space.rate.loguniform"] == "[0.02,1.0]",
        "{}",
        parent["params"]
    );
    let best = grid.best_result()?;
    ensure!(parent["tags"]["rtune.best_trial"] == best.trial_id(), "{}", parent["tags"]);
    ensure!(parent["metrics"]["score"].as_f64() == best.last("score"), "{}", parent["metrics"]);
    // The best trial's latest checkpoint, as MLflow's client downloads it.
    let checkpoint = best.checkpoint()?;
    let logged = parent["artifacts"].as_object().context("artifacts")?;
    let files = rtune_files(checkpoint.path())?;
    ensure!(
        !files.is_empty() && logged.len() == files.len(),
        "logged {logged:?}, on disk {files:?}"
    );
    for (name, bytes) in files {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        ensure!(logged.get(&format!("best_checkpoint/{name}")) == Some(&Json::from(hex)), "{name}");
    }
    ensure!(
        nested.len() == grid.trials.len(),
        "{} runs, {} trials",
        nested.len(),
        grid.trials.len()
    );
    for t in &grid.trials {
        let id = t.trial_id();
        let mine: Vec<&&Json> =
            nested.iter().filter(|r| r["tags"]["rtune.trial_id"] == id).collect();
        ensure!(mine.len() == 1, "{id}: {} runs", mine.len());
        let run = mine[0];
        ensure!(run["tags"]["mlflow.parentRunId"] == parent["id"] && run["name"] == id, "{run}");
        let p = t.params();
        let rate: f64 =
            run["params"]["rate"].as_str().with_context(|| format!("rate: {run}"))?.parse()?;
        ensure!(rate == p.get::<f64>("rate")?, "{id}: rate {rate}");
        let iterations = p.get::<i64>("iterations")?.to_string();
        ensure!(run["params"]["iterations"].as_str() == Some(iterations.as_str()), "{run}");
        let (status, rtune_status) = match t.status() {
            TrialStatus::Error => ("FAILED", "ERROR"),
            _ => ("FINISHED", "TERMINATED"),
        };
        ensure!(run["status"] == status && run["tags"]["rtune.status"] == rtune_status, "{run}");
        let history: Vec<(i64, f64)> = serde_json::from_value(run["history"]["score"].clone())
            .with_context(|| format!("{id}'s score history: {run}"))?;
        let reported: Vec<(i64, f64)> =
            t.history().iter().map(|m| (m["training_iteration"] as i64, m["score"])).collect();
        ensure!(history == reported, "{id}: MLflow holds {history:?}, rtune {reported:?}");
    }
    Ok(())
}

/// A sweep with failing trials, its driver SIGKILLed and resumed, logged to a real MLflow
/// server: MLflow's client reads the parent run, every nested run and every metric history
/// exactly, each step once.
pub fn mlflow_reads_the_sweep_as_runs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = MlflowServer::start(dir.path(), None)?;
    let file = mlflow_sweep(dir.path(), &server.uri(), 0.05)?;
    let mut child = start_run(&file, Stdio::null())?;
    let experiment = dir.path().join("results/study");
    // Killed once three trials have ended (their runs are in MLflow by then, or not yet).
    wait_for_ended(&experiment, 3)?;
    child.kill()?;
    child.wait()?;
    let out = rtune(&["resume", experiment.to_str().unwrap(), "--no-tui", "--allow-failures"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let grid = ResultGrid::from_path(&experiment)?;
    ensure!(grid.trials.len() == 10, "{} trials", grid.trials.len());
    check_runs(&server.runs("study")?, &grid).with_context(|| {
        let log = std::fs::read_to_string(experiment.join("driver.log")).unwrap_or_default();
        let said: Vec<&str> = log.lines().filter(|l| l.contains("MLflow")).collect();
        let noted = std::fs::read_to_string(experiment.join("mlflow.json")).unwrap_or_default();
        format!("the drivers said of MLflow:\n{}\nmlflow.json: {noted}", said.join("\n"))
    })
}

/// A sweep interrupted (SIGINT, as Ctrl-C) is KILLED in MLflow, with the runs of its running
/// trials; resumed, it goes on with the same runs and ends FINISHED with every step once.
pub fn an_interrupted_sweep_is_killed_then_goes_on() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = MlflowServer::start(dir.path(), None)?;
    let file = mlflow_sweep(dir.path(), &server.uri(), 0.1)?;
    let child = start_run(&file, Stdio::null())?;
    let experiment = dir.path().join("results/study");
    wait_for_ended(&experiment, 2)?;
    // SAFETY: kill(2) on the process group of a child we started.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(3), "{}", text(&out));
    let runs = server.runs("study")?;
    let parent = runs.iter().find(|r| r["tags"].get("mlflow.parentRunId").is_none());
    ensure!(parent.is_some_and(|p| p["status"] == "KILLED"), "{parent:?}");
    ensure!(!runs.iter().any(|r| r["status"] == "RUNNING"), "a run left RUNNING: {runs:?}");
    let out = rtune(&["resume", experiment.to_str().unwrap(), "--no-tui", "--allow-failures"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    check_runs(&server.runs("study")?, &ResultGrid::from_path(&experiment)?)
}

/// The tracking server killed for part of the sweep, the end included (with a flush timeout
/// of 1 s), and started again on the same store: the sweep goes on and ends meanwhile, says
/// what it could not send is kept, and `rtune sync` sends it once the server is back (refused,
/// losing nothing, while it is not), each row once however often it runs. (Timed by the
/// server's own start: under load it may come back after any timeout the sweep's end has.)
pub fn a_tracking_server_down_for_a_while_loses_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut server = MlflowServer::start(dir.path(), None)?;
    let (uri, port) = (server.uri(), server.port);
    let file = mlflow_sweep(dir.path(), &uri, 0.1)?;
    let text_of = std::fs::read_to_string(&file)?;
    std::fs::write(
        &file,
        text_of.replace("log_artifacts = true }", "log_artifacts = true, flush_timeout_s = 1 }"),
    )?;
    let child = start_run(&file, Stdio::piped())?;
    let experiment = dir.path().join("results/study");
    let exp = experiment.to_str().unwrap();
    wait_for_ended(&experiment, 1)?;
    server.stop();
    // The sweep goes on without the server: two more trials end meanwhile, and what MLflow
    // has yet to get shows on the sweep's metrics endpoint.
    wait_for_ended(&experiment, 3)?;
    let record: Json = serde_json::from_slice(&std::fs::read(experiment.join("driver.json"))?)?;
    let metrics = record["metrics"].as_str().context("no metrics endpoint in driver.json")?;
    let metrics_port: u16 = metrics.rsplit(':').next().context("port")?.parse()?;
    let (_, body) = crate::common::http_get(metrics_port, "/metrics", None)?;
    let backlog = body
        .lines()
        .find_map(|l| l.strip_prefix("rtune_callback_backlog{callback=\"MlflowLogger\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    ensure!(backlog.is_some_and(|b| b > 0.0), "MLflow's backlog {backlog:?} in\n{body}");
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let log = std::fs::read_to_string(experiment.join("driver.log"))?;
    ensure!(log.contains("retrying while the sweep goes on"), "no outage in the log");
    let kept = format!("they are kept, and `rtune sync {exp}` (or the next `rtune resume`)");
    ensure!(log.contains(&kept), "no word of what was kept in the log:\n{log}");
    // The server still down: refused, naming it.
    let out = rtune(&["sync", exp])?;
    ensure!(!out.status.success() && text(&out).contains(&uri), "{}", text(&out));
    let again = MlflowServer::start(dir.path(), Some(port))?;
    for _ in 0..2 {
        let out = rtune(&["sync", exp])?;
        ensure!(out.status.success(), "{}", text(&out));
        let said = format!("{exp}: its MLflow runs have all it recorded");
        ensure!(String::from_utf8_lossy(&out.stdout).contains(&said), "{}", text(&out));
        check_runs(&again.runs("study")?, &ResultGrid::from_path(&experiment)?)?;
    }
    // Nothing is left for a resume to send either.
    let out = rtune(&["resume", exp, "--no-tui"])?;
    ensure!(text(&out).contains("finished; nothing to resume"), "{}", text(&out));
    Ok(())
}

/// Tracking mistakes are refused before anything runs, naming `run.mlflow` and the fix: no
/// server named, a URL that is no server's, a server that does not answer, a request it
/// refuses (an experiment that was deleted).
pub fn bad_mlflow_settings_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = MlflowServer::start(dir.path(), None)?;
    let delete = r#"
import sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
c.delete_experiment(c.create_experiment("gone"))
"#;
    let out = Command::new(python()).arg("-c").arg(delete).arg(server.uri()).output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let dead = format!(
        "http://127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()
    );
    let file = mlflow_sweep(dir.path(), &server.uri(), 0.0)?;
    let sweep = std::fs::read_to_string(&file)?;
    let line = format!("mlflow = {{ tracking_uri = \"{}\", log_artifacts = true }}", server.uri());
    let cases = [
        ("mlflow = {}".to_owned(), "MLFLOW_TRACKING_URI"),
        ("mlflow = { tracking_uri = \"127.0.0.1:5000\" }".to_owned(), "http://"),
        (format!("mlflow = {{ tracking_uri = \"{dead}\" }}"), dead.as_str()),
        (
            format!("mlflow = {{ tracking_uri = \"{}\", experiment = \"gone\" }}", server.uri()),
            "active",
        ),
    ];
    for (i, (set, wanted)) in cases.iter().enumerate() {
        std::fs::write(&file, sweep.replace(&line, set))?;
        let name = format!("name=\"bad{i}\"");
        let out = Command::new(RTUNE)
            .args(["run", file.to_str().unwrap(), "--no-tui", "--set", &name])
            .env_remove("MLFLOW_TRACKING_URI")
            .output()?;
        ensure!(out.status.code() == Some(2), "{set}: {}", text(&out));
        ensure!(
            text(&out).contains("run.mlflow") && text(&out).contains(wanted),
            "{set}: {}",
            text(&out)
        );
        let trials = dir.path().join(format!("results/bad{i}"));
        let ran = std::fs::read_dir(&trials).map_or(0, |d| {
            d.filter(|e| e.as_ref().is_ok_and(|e| e.path().join("result.json").exists())).count()
        });
        ensure!(ran == 0, "{set}: {ran} trial(s) ran");
    }
    Ok(())
}
