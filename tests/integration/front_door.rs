//! What a new user meets first, from the command line: one driver per experiment (a second
//! one refused, a dead one's lease taken over), what a stopped sweep shows, and the counts and
//! messages a user reads.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::ResultGrid;
use rtune::search::TrialStatus;

use crate::cli::{RTUNE, check_histories, rtune, sweep_file};
use crate::common::{text, wait_for};

/// `rtune run` of the synthetic sweep in `dir` (0.3 s an iteration, two trials at a time),
/// started in the background; its experiment directory.
fn start_run(dir: &Path) -> Result<(Child, std::path::PathBuf)> {
    let file = sweep_file(dir, 0.3)?;
    let child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.max_concurrent_trials=2"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    Ok((child, dir.join("results/curves")))
}

/// Waits until the sweep in `experiment` has recorded rows of a trial.
fn wait_for_rows(experiment: &Path) -> Result<()> {
    wait_for(Duration::from_secs(120), || {
        let rows = std::fs::read_dir(experiment).ok().into_iter().flatten().flatten().any(|e| {
            let progress = e.path().join("progress.csv");
            std::fs::read_to_string(progress).is_ok_and(|t| t.lines().count() >= 3)
        });
        Ok(rows && experiment.join(rtune_driver::tune::STATE_FILE).exists())
    })
}

/// The experiment of a `start_run` whose driver was SIGKILLed once it had recorded rows.
fn killed_run(dir: &Path) -> Result<std::path::PathBuf> {
    let (mut child, experiment) = start_run(dir)?;
    wait_for_rows(&experiment)?;
    child.kill()?;
    child.wait()?;
    Ok(experiment)
}

/// Every trial of the experiment TERMINATED, each iteration recorded once.
fn all_terminated_once(experiment: &Path) -> Result<()> {
    let grid = ResultGrid::from_path(experiment)?;
    ensure!(grid.trials.len() == 6, "{} trials", grid.trials.len());
    let statuses: Vec<TrialStatus> = grid.trials.iter().map(|t| t.status()).collect();
    ensure!(statuses.iter().all(|s| *s == TrialStatus::Terminated), "{statuses:?}");
    check_histories(&grid)?;
    // One directory a trial.
    let dirs = std::fs::read_dir(experiment)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("TorchTrainer_"))
        .count();
    ensure!(dirs == 6, "{dirs} trial directories");
    Ok(())
}

/// #46's reproduction: `rtune resume` of an experiment another `rtune run` is running is
/// refused (exit 2) before it touches anything, naming the holder and `rtune stop`; the first
/// driver ends with every trial TERMINATED and every row once, and `rtune watch` could follow
/// it all along (the refused command left its `driver.json` be).
pub fn a_second_driver_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (child, experiment) = start_run(dir.path())?;
    wait_for_rows(&experiment)?;
    let exp = experiment.to_str().unwrap();
    let driver_json = std::fs::read(experiment.join("driver.json")).context("driver.json")?;
    let out = rtune(&["resume", exp, "--no-tui"])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let wanted = format!("{exp} is being run by another driver (host ");
    ensure!(stderr.contains(&wanted), "{}", text(&out));
    ensure!(stderr.contains(&format!("pid {}", child.id())), "{}", text(&out));
    ensure!(stderr.contains(&format!("`rtune stop {exp}` ends it")), "{}", text(&out));
    ensure!(!String::from_utf8_lossy(&out.stdout).contains("TERMINATED"), "{}", text(&out));
    ensure!(std::fs::read(experiment.join("driver.json"))? == driver_json, "driver.json changed");
    // `rtune resume --sweep` would write the sweep file's copy: refused before that too.
    let sweep_json = std::fs::read(experiment.join(rtune_driver::tune::SWEEP_FILE))?;
    let file = dir.path().join("sweep.toml");
    let out = rtune(&["resume", exp, "--sweep", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(std::fs::read(experiment.join(rtune_driver::tune::SWEEP_FILE))? == sweep_json);
    // And from Rust: Tuner::restore takes the lease first.
    fn nothing(_: &mut rtune::TrainContext) -> anyhow::Result<()> {
        Ok(())
    }
    match rtune::Tuner::restore(&experiment, rtune::TorchTrainer::new(nothing)) {
        Err(rtune::Error::Held { holder, .. }) => {
            ensure!(holder.contains(&format!("pid {}", child.id())), "{holder}")
        }
        other => anyhow::bail!("Tuner::restore of a running experiment: {other:?}"),
    }
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(0), "the first driver: {}", text(&out));
    all_terminated_once(&experiment)?;
    ensure!(
        !experiment.join(rtune_driver::tune::lease::LEASE_FILE).exists(),
        "the lease outlived it"
    );
    Ok(())
}

/// A driver SIGKILLed mid-sweep leaves its lease; its trials show as INTERRUPTED (not RUNNING)
/// in `ls`, `show` and its JSON, with the line that says how to go on; `rtune resume` takes
/// the lease over at once (its holder's pid is gone) and finishes the sweep; a second resume
/// says there is nothing to resume, and `run` of the same file says what the name holds.
pub fn a_dead_drivers_lease_is_taken_over() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let experiment = killed_run(dir.path())?;
    let lease = experiment.join(rtune_driver::tune::lease::LEASE_FILE);
    ensure!(lease.exists(), "a SIGKILLed driver leaves its lease");
    let exp = experiment.to_str().unwrap();
    let hint = format!("interrupted: `rtune resume {exp}` goes on with it");
    shows_interrupted(dir.path(), &experiment, &hint)?;
    let out = rtune(&["resume", exp, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    all_terminated_once(&experiment)?;
    ensure!(!lease.exists(), "the lease outlived the resumed sweep");
    // Finished: nothing to resume, and no table printed again.
    let out = rtune(&["resume", exp, "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.contains(&format!("{exp} finished; nothing to resume")), "{}", text(&out));
    ensure!(!stdout.contains("TERMINATED"), "{}", text(&out));
    let out = rtune(&["ls", dir.path().join("results").to_str().unwrap()])?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains(" finished "), "{}", text(&out));
    Ok(())
}

/// After Ctrl-C, the run's own table and the files show the stopped trials as INTERRUPTED;
/// `run` of the same file then names the interrupted sweep and `rtune resume`.
pub fn ctrl_c_shows_interrupted_trials() -> Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.3)?;
    let child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.max_concurrent_trials=2"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let experiment = dir.path().join("results/curves");
    wait_for_rows(&experiment)?;
    // SAFETY: signalling our own child's process group, as a terminal's Ctrl-C does.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(3), "{}", text(&out));
    let exp = experiment.to_str().unwrap();
    let hint = format!("interrupted: `rtune resume {exp}` goes on with it");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let table = stdout.split_once("trial ").map_or("", |(_, t)| t);
    ensure!(table.contains("INTERRUPTED") && !table.contains("RUNNING"), "{}", text(&out));
    ensure!(stderr.contains(&hint), "{}", text(&out));
    shows_interrupted(dir.path(), &experiment, &hint)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--set", "tune.num_samples=1"])?;
    let wanted = format!("{exp} holds an interrupted sweep (`rtune resume {exp}` goes on with it)");
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&wanted), "{}", text(&out));
    Ok(())
}

/// `rtune ls`, `rtune show` (table and JSON) of the stopped sweep in `experiment`: no trial
/// RUNNING, some INTERRUPTED, and `hint` said.
fn shows_interrupted(dir: &Path, experiment: &Path, hint: &str) -> Result<()> {
    let exp = experiment.to_str().unwrap();
    let out = rtune(&["ls", dir.join("results").to_str().unwrap()])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success() && stdout.contains(" interrupted "), "{}", text(&out));
    ensure!(stdout.contains("INTERRUPTED") && !stdout.contains("RUNNING"), "{}", text(&out));
    ensure!(stdout.contains(hint), "{}", text(&out));
    // The sweep's 6 trials, as `rtune watch` and the progress lines count them: those not
    // made yet are PENDING.
    let out = rtune(&["ls", dir.join("results").to_str().unwrap(), "--format", "json"])?;
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let counts = listed[0]["status"].as_object().context("status counts")?;
    let counted: u64 = counts.values().filter_map(|n| n.as_u64()).sum();
    ensure!(listed[0]["trials"] == 6 && counted == 6, "{listed}");
    let made = ResultGrid::from_path(experiment)?.trials.len();
    ensure!(made == 6 || counts.contains_key("PENDING"), "{listed}");
    let out = rtune(&["show", exp])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.lines().next() == Some(hint), "{}", text(&out));
    ensure!(stdout.contains("INTERRUPTED") && !stdout.contains("RUNNING"), "{}", text(&out));
    let out = rtune(&["show", exp, "--format", "json"])?;
    let trials: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let statuses: Vec<&str> =
        trials.as_array().context("trials")?.iter().filter_map(|t| t["status"].as_str()).collect();
    ensure!(statuses.contains(&"INTERRUPTED") && !statuses.contains(&"RUNNING"), "{statuses:?}");
    Ok(())
}

/// Writes `text` as `name` in `dir`; its path as a string.
fn write(dir: &Path, name: &str, text: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path.to_str().context("a UTF-8 path")?.to_owned())
}

/// Ray Tune's, W&B's and Optuna's spellings of a domain in a command trainable's param_space
/// (which would reach the script as strings and tables, searching nothing) are refused with
/// rtune's spelling, all in one report; a builtin's param given a table shows the table.
pub fn other_tools_domains_are_refused_with_rtunes_spelling() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = write(
        dir.path(),
        "ray.toml",
        r#"
[trainable]
command = ["python3", "-c", "print(1)"]
[param_space]
lr = "tune.loguniform(1e-4, 1e-1)"
wd = { type = "loguniform", lower = 1e-5, upper = 1e-2 }
bs = { sample_from = "lambda _: 32" }
opt = { values = ["adam", "sgd"] }
kept = { constant = { type = "loguniform", lower = 1 } }
[tune]
metric = "val_loss"
mode = "min"
"#,
    )?;
    let out = rtune(&["validate", &file])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(stderr.contains("the sweep file has 4 mistakes"), "{}", text(&out));
    for wanted in [
        "ray.toml:5:1: `param_space.lr` is the string \"tune.loguniform(1e-4, 1e-1)\"",
        "write `lr = { loguniform = [1e-4, 1e-1] }`",
        "ray.toml:6:1: `param_space.wd` is a table whose keys (type, lower, upper)",
        "write `wd = { loguniform = [1e-5, 0.01] }`",
        "ray.toml:7:1: `param_space.bs`",
        "there is no sample_from",
        "write `opt = { choice = [\"adam\", \"sgd\"] }`",
        "`wd = { constant = { .. } }`",
    ] {
        ensure!(stderr.contains(wanted), "no {wanted:?} in {}", text(&out));
    }
    let file = write(
        dir.path(),
        "builtin.toml",
        "[trainable]\nbuiltin = \"digits-mlp\"\n[param_space]\nhidden = { width = 64 }\n",
    )?;
    let out = rtune(&["validate", &file])?;
    let wanted = "`param_space.hidden` gives { width = 64 } (map)";
    ensure!(String::from_utf8_lossy(&out.stderr).contains(wanted), "{}", text(&out));
    Ok(())
}

/// `rtune validate` prints the plan: every param searched (its domain) or constant (its
/// value), the trainable's params the file leaves at their defaults, the metrics it reports
/// and the number of trials; `rtune builtins` lists the trainables the same way, and
/// `rtune validate --keys` the keys of a sweep file.
pub fn validate_prints_the_plan_and_builtins_list_the_trainables() -> Result<()> {
    let sweep = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/digits_tpe_asha.toml");
    let set = ["--set", "param_space.hidden=64", "--set", "tune.max_concurrent_trials=3"];
    let out = rtune(&[&["validate", sweep][..], &set].concat())?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for wanted in [
        "valid; it runs 16 trials of `digits-mlp` (2 workers each, 3 at a time)",
        "  lr          searched  { loguniform = [0.0001, 0.03] }",
        "  hidden      constant  64",
        "  batch_size  searched  { choice = [16, 32, 64, 128] }",
        "  epochs      constant  12",
        "metrics `digits-mlp` reports: loss, val_loss, val_acc, params",
    ] {
        ensure!(stdout.contains(wanted), "no {wanted:?} in {}", text(&out));
    }
    let out = rtune(&["validate", sweep, "--set", "param_space={ lr = 0.01 }"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.contains("  epochs      default   20"), "{}", text(&out));
    let out = rtune(&["builtins"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "{}", text(&out));
    for wanted in [
        "digits-mlp: data-parallel MLP",
        "  hidden      default  256  (1 to 65536)",
        "synthetic-curve: learning-curve simulator",
        "  reports: score, loss (and rtune's training_iteration",
    ] {
        ensure!(stdout.contains(wanted), "no {wanted:?} in {}", text(&out));
    }
    // `--keys`: every key a sweep file takes, each with what it takes and its default.
    let out = rtune(&["validate", "--keys"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "{}", text(&out));
    for wanted in [
        "[tune]: how the sweep searches",
        "tune.num_samples: an integer >= 1, or -1; default 1\n",
        "run.checkpoint.upload: \"sync\" or \"async\"; default \"sync\"\n",
    ] {
        ensure!(stdout.contains(wanted), "no {wanted:?} in {}", text(&out));
    }
    ensure!(!stdout.contains("secret_access_key"), "a refused key is listed: {}", text(&out));
    Ok(())
}

/// A 4-value grid with num_samples = 2 runs 8 trials, as in Ray, and every count says 8: the
/// plan, the start line, the progress lines and the table; a point to evaluate first counts as
/// one of the samples (1 + 1 x 4 = 5).
pub fn grid_sweeps_are_counted_as_ray_counts_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let file = write(
        dir.path(),
        "grid.toml",
        &format!(
            "name = \"grid\"\nstorage_path = {:?}\n[trainable]\nbuiltin = \"synthetic-curve\"\n\
             [param_space]\nrate = {{ grid_search = [0.1, 0.2, 0.3, 0.4] }}\niterations = 2\n\
             [tune]\nmetric = \"score\"\nmode = \"max\"\nnum_samples = 2\n",
            storage.display().to_string()
        ),
    )?;
    let out = rtune(&["validate", &file])?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains("it runs 8 trials"), "{}", text(&out));
    let out = rtune(&["run", &file, "--no-tui"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = "(8 trials, search random (search = \"auto\": the space has a grid_search";
    ensure!(stdout.contains(said), "{}", text(&out));
    ensure!(stdout.contains("== 8 trials (100%): 8 TERMINATED"), "{}", text(&out));
    ensure!(ResultGrid::from_path(storage.join("grid"))?.trials.len() == 8);
    let points = "tune.search={ type = \"random\", points_to_evaluate = [{ rate = 0.2 }] }";
    let out = rtune(&["run", &file, "--no-tui", "--set", "name=\"points\"", "--set", points])?;
    ensure!(out.status.success(), "{}", text(&out));
    let said = "(5 trials, search random) in ";
    ensure!(String::from_utf8_lossy(&out.stdout).contains(said), "{}", text(&out));
    ensure!(ResultGrid::from_path(storage.join("points"))?.trials.len() == 5);
    Ok(())
}

/// A sweep file that names no searcher runs `auto`'s pick, and the start line and `rtune
/// validate` say which and why: the GP for a numeric space and 12 trials (recorded as the
/// experiment's searcher), TPE once a param is categorical.
pub fn auto_picks_the_searcher_and_says_why() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let file = write(
        dir.path(),
        "auto.toml",
        &format!(
            "name = \"auto\"\nstorage_path = {:?}\n[trainable]\nbuiltin = \"synthetic-curve\"\n\
             [param_space]\nrate = {{ loguniform = [0.02, 1.0] }}\n\
             plateau = {{ uniform = [0.5, 1.0] }}\niterations = 2\n\
             [tune]\nmetric = \"score\"\nmode = \"max\"\nnum_samples = 12\n",
            storage.display().to_string()
        ),
    )?;
    let why = "search gp (search = \"auto\": 2 numeric params and 12 trials)";
    let out = rtune(&["validate", &file])?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains(why), "{}", text(&out));
    let out = rtune(&["run", &file, "--no-tui"])?;
    ensure!(out.status.success(), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stdout).contains(why), "{}", text(&out));
    let tuner: serde_json::Value =
        serde_json::from_slice(&std::fs::read(storage.join("auto/tuner.json"))?)?;
    ensure!(tuner["search_alg"] == "gp", "{tuner}");
    ensure!(ResultGrid::from_path(storage.join("auto"))?.trials.len() == 12);
    let categorical = "param_space.plateau={ choice = [0.6, 0.9] }";
    let out = rtune(&["validate", &file, "--set", categorical])?;
    let why = "search gp (search = \"auto\": 2 params (1 categorical) and 12 trials)";
    ensure!(String::from_utf8_lossy(&out.stdout).contains(why), "{}", text(&out));
    Ok(())
}

/// Key mistakes and value mistakes come in one report: a domain that cannot be, a table where
/// a number belongs, a param the trainable does not read, a value out of its range, a metric it
/// does not report, a key that does not exist, a scheduler option, and a worker bigger than
/// the machine.
pub fn all_mistakes_come_in_one_report() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = write(
        dir.path(),
        "many.toml",
        r#"[trainable]
builtin = "digits-mlp"
[scaling]
num_workers = 2
resources_per_worker = { CPU = 4096 }
[param_space]
lr = { loguniform = [0, 1e-1] }
hidden = { a = 1 }
epocs = 3
batch_size = { choice = [0, 32] }
[tune]
metric = "val_los"
mode = "min"
max_concurent_trials = 2
scheduler = { type = "asha", grace_period = 0 }
"#,
    )?;
    let out = rtune(&["validate", &file])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(stderr.contains("the sweep file has 8 mistakes"), "{}", text(&out));
    for key in [
        "many.toml:3:2: `scaling` does not fit this machine",
        "many.toml:7:8: `param_space.lr`",
        "many.toml:8:12: `param_space.hidden` gives { a = 1 }",
        "many.toml:9:1: `param_space.epocs`",
        "`param_space.batch_size` gives 0",
        "many.toml:12:1: `tune.metric` names `val_los`",
        "`tune.max_concurent_trials` is not a key here",
        "`tune.scheduler.grace_period`",
    ] {
        ensure!(stderr.contains(key), "no {key:?} in {}", text(&out));
    }
    // Each key allowed is listed once.
    ensure!(!stderr.contains("`mode`, `mode`"), "{}", text(&out));
    Ok(())
}

/// A mistake that could hide others does not (#63, item 9): a misspelt builtin (the file is
/// checked against the one it is nearest to), a Ray call's string beside a reversed bound, and
/// a fractional `max_t` where the scheduler counts iterations.
pub fn mistakes_behind_others_come_too() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = write(
        dir.path(),
        "hidden.toml",
        r#"[trainable]
builtin = "digits-mpl"
[param_space]
lr = { loguniform = [0.1, 1e-4] }
hidden = 64.5
epocs = 3
wd = "tune.uniform(0, 1)"
[tune]
metric = "val_los"
mode = "min"
scheduler = { type = "asha", max_t = 16.5 }
"#,
    )?;
    let out = rtune(&["validate", &file])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for key in [
        "hidden.toml:2:11: `trainable.builtin` is \"digits-mpl\"",
        "did you mean `digits-mlp`?",
        "hidden.toml:4:8: `param_space.lr` loguniform(0.1, 0.0001): lower bound 0.1 is not < upper",
        "hidden.toml:5:1: `param_space.hidden` gives 64.5 (float)",
        "hidden.toml:6:1: `param_space.epocs` is not a param of `digits-mlp`",
        "hidden.toml:7:1: `param_space.wd` is the string \"tune.uniform(0, 1)\", which reads as a Ray",
        "hidden.toml:9:1: `tune.metric` names `val_los`, which `digits-mlp` does not report",
        "`tune.scheduler.max_t` ASHA: invalid `max_t` = 16.5; expected a whole number of iterations",
    ] {
        ensure!(stderr.contains(key), "no {key:?} in {}", text(&out));
    }
    Ok(())
}

/// A refusal is all a refused command prints (#63, item 8): a metrics address off loopback
/// without a token, local mode with a cluster (the name already taken, which a run would
/// otherwise say first), and the `rtune resume` that loses the experiment to another one
/// started at the same moment.
pub fn a_refusal_is_all_that_is_printed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let file = write(
        dir.path(),
        "one.toml",
        &format!(
            "name = \"one\"\nstorage_path = {:?}\n[trainable]\nbuiltin = \"synthetic-curve\"\n\
             [param_space]\nrate = {{ uniform = [0.1, 0.5] }}\n[tune]\nnum_samples = 1\n",
            storage.display().to_string()
        ),
    )?;
    let out = rtune(&["run", &file, "--no-tui"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let refused = |args: &[&str], why: &str| -> Result<()> {
        let out = Command::new(RTUNE)
            .args(args)
            .env("RTUNE_ADDRESS", "127.0.0.1:9")
            .env_remove("RTUNE_TOKEN")
            .output()?;
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        ensure!(out.status.code() == Some(2), "{args:?}: {}", text(&out));
        ensure!(stdout.is_empty() && stderr.contains(why), "{args:?}: {}", text(&out));
        Ok(())
    };
    let metrics = ["run", &file, "--no-tui", "--metrics", "0.0.0.0:0"];
    refused(&metrics, "invalid `--metrics`: is \"0.0.0.0:0\", which is not loopback")?;
    let local = ["run", &file, "--no-tui", "--local"];
    refused(
        &local,
        "(local mode: the train function runs in this process), but the run goes to \
                     the cluster at 127.0.0.1:9",
    )?;
    ensure!(!storage.join("one-2").exists(), "a refused run made an experiment");
    // Two resumes of one interrupted sweep at once: one goes on, the other is refused,
    // printing nothing, wherever it lost.
    let experiment = killed_run(dir.path())?;
    let exp = experiment.to_str().unwrap();
    let resume = || {
        Command::new(RTUNE)
            .args(["resume", exp, "--no-tui"])
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    let (first, second) = (resume()?, resume()?);
    let outs = [first.wait_with_output()?, second.wait_with_output()?];
    let lost: Vec<_> = outs.iter().filter(|o| o.status.code() == Some(2)).collect();
    ensure!(lost.len() == 1, "{}\n{}", text(&outs[0]), text(&outs[1]));
    ensure!(lost[0].stdout.is_empty(), "the refused resume printed: {}", text(lost[0]));
    ensure!(
        String::from_utf8_lossy(&lost[0].stderr).contains("is being run by another driver"),
        "{}",
        text(lost[0])
    );
    all_terminated_once(&experiment)
}

/// `rtune resume --sweep FILE` that changes what decided what was recorded names each key
/// that differs in the sweep file's words, with both values; no Rust type in the message.
pub fn resume_with_a_differing_file_names_the_keys() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let experiment = killed_run(dir.path())?;
    let changed = std::fs::read_to_string(dir.path().join("sweep.toml"))?
        .replace("sleep_s = 0.3", "sleep_s = 1.0")
        .replace("mode = \"max\"", "mode = \"min\"");
    let file = write(dir.path(), "changed.toml", &changed)?;
    let out = rtune(&["resume", experiment.to_str().unwrap(), "--sweep", &file])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for wanted in [
        "`param_space.sleep_s`: 0.3 in the experiment, 1.0 in the file",
        "`tune.mode`: \"max\" in the experiment, \"min\" in the file",
    ] {
        ensure!(stderr.contains(wanted), "no {wanted:?} in {}", text(&out));
    }
    for rust in ["SearchSpace", "Sample(", "Some(", "Max", "LogUniform"] {
        ensure!(!stderr.contains(rust), "{rust} in {}", text(&out));
    }
    Ok(())
}

/// A sweep of 2 trials of the shell command `script` (a command trainable), with `tune.metric`
/// val_loss; its file.
fn command_sweep(dir: &Path, script: &str) -> Result<String> {
    let storage = dir.join("results");
    write(
        dir,
        "command.toml",
        &format!(
            "name = \"cmd\"\nstorage_path = {:?}\n[trainable]\ncommand = [\"sh\", \"-c\", {:?}]\n\
             [param_space]\nx = {{ uniform = [0, 1] }}\n[tune]\nmetric = \"val_loss\"\n\
             mode = \"min\"\nnum_samples = 2\n",
            storage.display().to_string(),
            script
        ),
    )
}

/// A trial that ends without reporting is said to be one in its progress line and at the end,
/// and counts as failed for the exit code (1) unless --allow-failures.
pub fn a_trial_that_never_reports_counts_as_failed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = command_sweep(dir.path(), "exit 0")?;
    let out = rtune(&["run", &file, "--no-tui"])?;
    ensure!(out.status.code() == Some(1), "{}", text(&out));
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let said = stdout.matches("TERMINATED without a result: it never reported").count();
    ensure!(said == 2, "{}", text(&out));
    ensure!(stderr.contains("2 trial(s) ended without reporting a result"), "{}", text(&out));
    let out = rtune(&["run", &file, "--no-tui", "--allow-failures"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    Ok(())
}

/// A command reporting `val_los` where the sweep ranks by `val_loss`: the sweep's mistake,
/// named by its key with the nearest reported metric, ending the sweep with exit 2.
pub fn a_metric_no_trial_reports_is_the_sweeps_mistake() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let script =
        "for i in 1 2 3; do echo '@rtune {\"metrics\": {\"val_los\": 0.5}}'; read answer; done";
    let file = command_sweep(dir.path(), script)?;
    let out = rtune(&["run", &file, "--no-tui"])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let wanted = "rtune: invalid `tune.metric`: names `val_loss`, which is not among the metrics \
                  a trial reported (val_los, ";
    ensure!(stderr.contains(wanted), "{}", text(&out));
    ensure!(stderr.contains("did you mean `val_los`?"), "{}", text(&out));
    ensure!(!stderr.contains("TuneConfig"), "{}", text(&out));
    Ok(())
}

/// A failing trial is said once, in one line (its progress line); its whole error, the
/// command's stderr included, is in its error.txt and the driver's log.
pub fn a_failing_trial_is_said_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let script = "echo 'Traceback (most recent call last):' >&2; echo 'RuntimeError: boom' >&2; \
                  exit 3";
    write(dir.path(), "fail.sh", script)?;
    let file = command_sweep(dir.path(), "sh fail.sh")?;
    let out = rtune(&["run", &file, "--no-tui", "--set", "tune.num_samples=1"])?;
    ensure!(out.status.code() == Some(1), "{}", text(&out));
    let all = text(&out);
    ensure!(all.matches("exited with status 3").count() == 1, "{all}");
    ensure!(!all.contains("Traceback") && !all.contains("WARN"), "{all}");
    let experiment = dir.path().join("results/cmd");
    let grid = ResultGrid::from_path(&experiment)?;
    let trial = grid.trials.first().context("a trial")?;
    let error = std::fs::read_to_string(trial.path().join("error.txt"))?;
    ensure!(error.contains("Traceback") && error.contains("RuntimeError: boom"), "{error}");
    let log = std::fs::read_to_string(experiment.join("driver.log"))?;
    ensure!(log.contains("RuntimeError: boom"), "{log}");
    // No best trial among failed ones: --best is refused, a failed trial is named with
    // --trial.
    let exp = experiment.to_str().unwrap();
    let to = dir.path().join("best");
    let out = rtune(&["export", exp, "--best", "--to", to.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let wanted = format!("every trial of {exp} failed (1 ERROR): there is no best one to export");
    ensure!(String::from_utf8_lossy(&out.stderr).contains(&wanted), "{}", text(&out));
    ensure!(!to.exists(), "a refused export wrote {}", to.display());
    Ok(())
}

/// `rtune export --best` of a sweep whose trials reported nothing says so.
pub fn export_of_a_sweep_without_results_says_so() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = command_sweep(dir.path(), "exit 0")?;
    rtune(&["run", &file, "--no-tui"])?;
    let exp = dir.path().join("results/cmd");
    let to = dir.path().join("best");
    let out = rtune(&["export", exp.to_str().unwrap(), "--best", "--to", to.to_str().unwrap()])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let wanted = "metric `val_loss` has no value in any trial of this sweep: no trial reported";
    ensure!(String::from_utf8_lossy(&out.stderr).contains(wanted), "{}", text(&out));
    Ok(())
}

/// `rtune show DIR | head -1`, `rtune ls | head -1`: a reader that goes away ends the
/// command quietly (no panic, no "Broken pipe"), and a sweep goes on to its end.
pub fn a_closed_pipe_ends_quietly() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.0)?;
    let experiment = dir.path().join("results/curves");
    // The reader is gone before the command writes anything.
    let closed = |args: &[&str]| -> Result<std::process::Output> {
        let (reader, writer) = std::io::pipe()?;
        drop(reader);
        Ok(Command::new(RTUNE).args(args).stdout(writer).stderr(Stdio::piped()).output()?)
    };
    let out = closed(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    all_terminated_once(&experiment)?;
    for args in [
        vec!["show", experiment.to_str().unwrap()],
        vec!["ls", dir.path().join("results").to_str().unwrap()],
        vec!["builtins"],
    ] {
        let out = closed(&args)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {}",
            text(&out)
        );
        ensure!(out.status.code() != Some(101), "{args:?}: {}", text(&out));
    }
    Ok(())
}

/// Every shipped sweep file writes its experiment under `./rtune_results`, where `rtune ls`
/// and `rtune watch` look first: one place for all the examples.
pub fn every_example_sweep_writes_to_rtune_results() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sweeps");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path)?;
        let storage = text.lines().find(|l| l.starts_with("storage_path"));
        ensure!(
            storage.is_some_and(|l| l.contains("\"rtune_results\"")),
            "{} writes elsewhere: {storage:?}",
            path.display()
        );
    }
    ensure!(files >= 4, "{files} sweep files");
    Ok(())
}

/// `[run] tensorboard = true` in a sweep file: each trial's results as TensorBoard event
/// files in its folder, which TensorBoard itself reads.
pub fn a_sweep_file_switches_tensorboard_on() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), 0.0)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui", "--set", "run.tensorboard=true"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let grid = ResultGrid::from_path(dir.path().join("results/curves"))?;
    for t in &grid.trials {
        let scalars = crate::tune::tensorboard_scalars(t.path())?;
        let scores = scalars["score"].as_array().context("no score scalars")?;
        ensure!(scores.len() == t.history().len(), "{}: {scalars}", t.trial_id());
    }
    let out = rtune(&["validate", file.to_str().unwrap(), "--set", "run.tensorboard=\"yes\""])?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("`run.tensorboard`"), "{}", text(&out));
    Ok(())
}
