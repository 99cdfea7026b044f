//! The tree trainers against the libraries' own Python packages (the same wheels, data, params,
//! rounds and threads): XGBoost trained by rtune on one rank and on two (through XGBoost's
//! collective) gives the trees `xgboost.train` gives, alone and in two processes joined by
//! XGBoost's own tracker; a sweep's scheduler stops trials at rounds; a killed rank's retry goes
//! on boosting from the latest checkpoint; exports load and predict in Python as in rtune; and
//! the sweep file's mistakes about them are refused before anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::data::{Columns, Dataset};
use rtune::trees::{Library, TreeTrainer};
use rtune::{Params, RunConfig, ScalingConfig, XGBoostTrainer};

use crate::cli::{RTUNE, rtune};
use crate::common::{Killed, kill_rank, python, text, wait_for};

/// The shipped digits' fixed split, as parquet.
pub(crate) fn digits(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("data/digits_{name}.parquet"))
}

/// XGBoost params both sides train with (one thread: the same trees whatever the machine).
const PARAMS: &str = r#"{"objective": "multi:softprob", "num_class": 10, "eta": 0.3,
    "max_depth": 4, "eval_metric": "mlogloss", "tree_method": "hist", "nthread": 1}"#;

fn xgboost_params() -> Params {
    params_of(PARAMS)
}

/// A JSON object of params (strings, booleans and numbers) as Params.
pub(crate) fn params_of(json: &str) -> Params {
    let json: serde_json::Value = serde_json::from_str(json).expect("params are JSON");
    let mut params = Params::new();
    for (key, value) in json.as_object().expect("an object") {
        params = match value {
            serde_json::Value::String(s) => params.with(key.as_str(), s.as_str()),
            serde_json::Value::Bool(b) => params.with(key.as_str(), *b),
            serde_json::Value::Number(n) if n.is_i64() => {
                params.with(key.as_str(), n.as_i64().unwrap())
            }
            serde_json::Value::Number(n) => params.with(key.as_str(), n.as_f64().unwrap()),
            _ => params,
        };
    }
    params
}

/// A tree trainer of `params` on the digits' train and valid splits, on `workers` ranks for
/// `rounds`, its run `name` in `dir`.
pub(crate) fn on_digits<L: Library>(
    params: Params,
    workers: usize,
    rounds: u64,
    dir: &Path,
    name: &str,
) -> TreeTrainer<L> {
    with_digits(TreeTrainer::<L>::new(params).num_boost_round(rounds), workers, dir, name)
}

/// `trainer` on the digits' train and valid splits, on `workers` ranks, its run `name` in
/// `dir`.
pub(crate) fn with_digits<L: Library>(
    trainer: TreeTrainer<L>,
    workers: usize,
    dir: &Path,
    name: &str,
) -> TreeTrainer<L> {
    trainer
        .datasets([
            ("train", Dataset::parquet(digits("train"))),
            ("valid", Dataset::parquet(digits("valid"))),
        ])
        .columns(Columns::new().label("digit"))
        .scaling(ScalingConfig::workers(workers))
        .run_config(RunConfig::new(name).storage_path(dir))
}

/// Trains with rtune on `workers` ranks for `rounds`.
fn train(dir: &Path, workers: usize, rounds: u64) -> Result<rtune::TrainResult> {
    let trainer: XGBoostTrainer = on_digits(xgboost_params(), workers, rounds, dir, "xgb");
    Ok(trainer.fit()?)
}

/// Python training the same model: `xgboost.train` on `train` (in `world` processes joined
/// by XGBoost's RabitTracker, each on its shard, rank r taking rows r*n/W..(r+1)*n/W as rtune
/// shards them), printing rank 0's tree dump and last valid-mlogloss as JSON.
const PYTHON_TRAIN: &str = r#"
import json, sys, multiprocessing as mp
import numpy as np, pandas as pd, xgboost as xgb
from xgboost import collective, tracker
params = json.loads(sys.argv[1]); rounds = int(sys.argv[2]); world = int(sys.argv[3])
def frame(name):
    t = pd.read_parquet(sys.argv[4] if name == "train" else sys.argv[5])
    return t.drop(columns=["digit"]).to_numpy(np.float32), t["digit"].to_numpy(np.float32)
def fit(rank, out):
    X, y = frame("train"); Xv, yv = frame("valid")
    lo, hi = rank * len(X) // world, (rank + 1) * len(X) // world
    vlo, vhi = rank * len(Xv) // world, (rank + 1) * len(Xv) // world
    dtrain = xgb.DMatrix(X[lo:hi], label=y[lo:hi])
    dvalid = xgb.DMatrix(Xv[vlo:vhi], label=yv[vlo:vhi])
    log = {}
    booster = xgb.train(params, dtrain, rounds, evals=[(dtrain, "train"), (dvalid, "valid")],
                        evals_result=log, verbose_eval=False)
    if rank == 0:
        out.put({"dump": booster.get_dump(), "valid": log["valid"]["mlogloss"][-1]})
def run(rank, args, out):
    with collective.CommunicatorContext(**args, dmlc_task_id=f"{rank:06}"):
        fit(rank, out)
out = mp.Queue()
if world == 1:
    fit(0, out)
else:
    t = tracker.RabitTracker(n_workers=world, host_ip="127.0.0.1", sortby="task")
    t.start()
    args = t.worker_args()
    ps = [mp.Process(target=run, args=(r, args, out)) for r in range(world)]
    for p in ps: p.start()
    got = out.get(timeout=120)
    for p in ps: p.join()
    t.wait_for()
    out.put(got)
print(json.dumps(out.get(timeout=120)))
"#;

/// rtune's model (the run's last checkpoint) as Python's xgboost dumps it.
const PYTHON_DUMP: &str = r#"
import json, sys, xgboost as xgb
print(json.dumps(xgb.Booster(model_file=sys.argv[1]).get_dump()))
"#;

/// rtune's model on `workers` ranks equals xgboost's own run on the same shards: every tree,
/// and the last round's validation log loss.
fn same_as_python(workers: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let rounds = 12;
    let result = train(dir.path(), workers, rounds)?;
    let rows = &result.metrics_history;
    ensure!(rows.len() == rounds as usize, "{} rows", rows.len());
    let last = rows.last().context("rows")?;
    let checkpoint = result.checkpoint.as_ref().context("a checkpoint")?;
    let model = checkpoint.path().join("model.ubj");
    let ours: Vec<String> = serde_json::from_slice(&python(PYTHON_DUMP, &[&model])?)?;
    let (rounds_text, workers_text) = (rounds.to_string(), workers.to_string());
    let args = [
        Path::new(PARAMS),
        Path::new(&rounds_text),
        Path::new(&workers_text),
        &digits("train"),
        &digits("valid"),
    ];
    // The last line: XGBoost's tracker and workers say things on stdout too.
    let printed = String::from_utf8(python(PYTHON_TRAIN, &args)?)?;
    let last_line = printed.lines().last().unwrap_or_default();
    let theirs: serde_json::Value =
        serde_json::from_str(last_line).with_context(|| format!("Python printed {printed}"))?;
    let trees: Vec<String> = serde_json::from_value(theirs["dump"].clone())?;
    ensure!(ours.len() == trees.len(), "{} trees where xgboost has {}", ours.len(), trees.len());
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != trees[i]) {
        anyhow::bail!("tree {i} differs:\nrtune:\n{}\nxgboost:\n{}", ours[i], trees[i]);
    }
    let valid = theirs["valid"].as_f64().context("valid")?;
    let reported = last["valid-mlogloss"];
    ensure!(
        (reported - valid).abs() < 1e-6,
        "valid-mlogloss {reported} where xgboost says {valid}"
    );
    ensure!(last.contains_key("train-mlogloss"), "no train-mlogloss in {:?}", last.keys());
    Ok(())
}

/// One rank: the same trees as `xgboost.train` in Python.
pub fn one_rank_trains_what_xgboost_trains() -> Result<()> {
    same_as_python(1)
}

/// Two ranks through XGBoost's collective: the trees of two Python processes joined by
/// XGBoost's own tracker, each on the same shard as rtune's rank.
pub fn two_ranks_train_what_xgboosts_own_distributed_run_trains() -> Result<()> {
    same_as_python(2)
}

/// The shipped XGBoost sweep (16 trials, ASHA on valid-mlogloss, 40 rounds): see
/// [`asha_sweep_and_its_export`].
pub fn asha_stops_xgboost_trials_at_rounds_and_the_export_predicts_in_python() -> Result<()> {
    let predict = r#"
import xgboost as xgb
booster = xgb.Booster(model_file=sys.argv[1] + "/model.ubj")
theirs = booster.predict(xgb.DMatrix(test.drop(columns=["digit"]).to_numpy(np.float32)))
"#;
    asha_sweep_and_its_export("digits_xgboost_asha.toml", "digits-xgboost-asha", predict)
}

/// A shipped sweep of 16 tree trials (`examples/sweeps/FILE`, ASHA, 40 rounds; its experiment
/// `experiment`): at least half the trials are stopped before their last round, every trial's
/// rows are rounds 1..k once, and the best export predicts the held-out digits in the library's
/// Python package exactly as `rtune predict` does, in one process and across 2 workers.
/// `predict` is the Python that sets `theirs` from the export (`sys.argv[1]`) and the test
/// frame (`test`).
pub(crate) fn asha_sweep_and_its_export(file: &str, experiment: &str, predict: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sweep = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sweeps").join(file);
    let storage = format!("storage_path={:?}", dir.path().display().to_string());
    let out = rtune(&["run", sweep.to_str().unwrap(), "--no-tui", "--set", &storage])?;
    ensure!(out.status.success(), "{}", text(&out));
    let experiment = dir.path().join(experiment);
    let grid = rtune::ResultGrid::from_path(&experiment)?;
    ensure!(grid.trials.len() == 16, "{} trials", grid.trials.len());
    let mut stopped = 0;
    for t in &grid.trials {
        let rounds: Vec<f64> = t.history().iter().map(|r| r["training_iteration"]).collect();
        let want: Vec<f64> = (1..=rounds.len()).map(|i| i as f64).collect();
        ensure!(rounds == want, "{}: rounds {rounds:?}", t.trial_id());
        stopped += usize::from(rounds.len() < 40);
    }
    ensure!(stopped >= 8, "ASHA stopped {stopped} of 16 trials early");
    let export = dir.path().join("best");
    let out = rtune(&[
        "export",
        experiment.to_str().unwrap(),
        "--best",
        "--to",
        export.to_str().unwrap(),
    ])?;
    ensure!(out.status.success(), "{}", text(&out));
    let predictions = dir.path().join("predictions.csv");
    let test = digits("test");
    let args = ["predict", "--model", export.to_str().unwrap(), "--input", test.to_str().unwrap()];
    let out = rtune(&[&args[..], &["--output", predictions.to_str().unwrap()]].concat())?;
    ensure!(out.status.success(), "{}", text(&out));
    // Across 2 workers of the pool, in parts of 100 rows: what one process predicts.
    let across = dir.path().join("across.csv");
    let more = ["--output", across.to_str().unwrap(), "--workers", "2", "--part-rows", "100"];
    let out = rtune(&[&args[..], &more].concat())?;
    ensure!(out.status.success(), "{}", text(&out));
    crate::predict::same_predictions(&across, &predictions)?;
    let script = format!(
        r#"
import sys, numpy as np, pandas as pd
test = pd.read_parquet(sys.argv[2])
{predict}
theirs = theirs.astype(np.float32)
ours = pd.read_csv(sys.argv[3])
probs = ours[[f"prob_{{c}}" for c in range(10)]].to_numpy(np.float32)
assert (probs == theirs).all(), np.abs(probs - theirs).max()
assert (ours["prediction"].to_numpy() == theirs.argmax(1)).all()
print((theirs.argmax(1) == test["digit"].to_numpy()).mean())
"#
    );
    let accuracy: f64 =
        String::from_utf8(python(&script, &[&export, &test, &predictions])?)?.trim().parse()?;
    ensure!(accuracy > 0.9, "the best model's test accuracy is {accuracy}");
    Ok(())
}

/// A rank SIGKILLed mid-trial: the attempt fails, the retry goes on boosting from the latest
/// checkpoint's round (every 7th round keeps one: its first row is round 7k + 1, past the 10
/// rounds seen before the kill), and the trial ends TERMINATED with every round once and a
/// model of every round. XGBoost's two ranks.
pub fn a_killed_rank_goes_on_from_the_latest_checkpoint() -> Result<()> {
    let params = "objective = \"multi:softprob\"\nnum_class = 10\nmax_depth = 6\neta = 0.02";
    killed_and_retried("xgboost", params, "valid-mlogloss", &digits("train"))
}

/// The same for LightGBM's two ranks: the survivor's network fails with the lost rank's, and
/// the retry's ranks join a network of their own, their datasets scored by the checkpoint's
/// model. (On 20 copies of the digits' train split: LightGBM's rounds on the split alone are
/// over before the kill lands.)
pub fn a_killed_lightgbm_rank_goes_on_from_the_latest_checkpoint() -> Result<()> {
    use rtune::polars::prelude::{ParquetReader, ParquetWriter, SerReader};
    let dir = tempfile::tempdir()?;
    let split = ParquetReader::new(std::fs::File::open(digits("train"))?).finish()?;
    let mut copies = split.clone();
    for _ in 1..20 {
        copies.vstack_mut(&split)?;
    }
    let train = dir.path().join("train20.parquet");
    ParquetWriter::new(std::fs::File::create(&train)?).finish(&mut copies)?;
    let params = "objective = \"multiclass\"\nnum_class = 10\nlearning_rate = 0.02\n\
                  verbosity = -1";
    killed_and_retried("lightgbm", params, "valid-multi_logloss", &train)
}

/// A 300-round trial of `builtin` with `params` on 2 ranks boosting on `train`, rank 1
/// SIGKILLed after 10 rows and the attempt retried: its rows checked, and its last model's
/// trees (300 rounds of 10).
fn killed_and_retried(builtin: &str, params: &str, metric: &str, train: &Path) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("kill.toml");
    let sweep = format!(
        "name = \"kill\"\nstorage_path = {:?}\n[trainable]\nbuiltin = {builtin:?}\n\
         [datasets]\ntrain = {:?}\nvalid = {:?}\nlabel = \"digit\"\n[scaling]\nnum_workers = 2\n\
         [param_space]\n{params}\nnum_boost_round = 300\ncheckpoint_frequency = 7\n[tune]\n\
         metric = {metric:?}\nmode = \"min\"\n[run]\nfailure = {{ max_failures = 1 }}\n",
        dir.path().display().to_string(),
        train,
        digits("valid")
    );
    std::fs::write(&file, sweep)?;
    let run = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut run = Killed(run);
    let experiment = dir.path().join("kill");
    let rows = || -> usize {
        let Ok(grid) = rtune::ResultGrid::from_path(&experiment) else { return 0 };
        grid.trials.first().map_or(0, |t| t.history().len())
    };
    wait_for(Duration::from_secs(120), || Ok(rows() >= 10)).context("no 10 rows")?;
    kill_rank(&experiment, 1)?;
    let status = run.0.wait()?;
    ensure!(status.success(), "rtune run ended {status:?}");
    let grid = rtune::ResultGrid::from_path(&experiment)?;
    let trial = grid.trials.first().context("a trial")?;
    ensure!(trial.status() == rtune::search::TrialStatus::Terminated, "{:?}", trial.status());
    let history = trial.history();
    let rounds: Vec<f64> = history.iter().map(|r| r["training_iteration"]).collect();
    ensure!(rounds == (1..=300).map(f64::from).collect::<Vec<_>>(), "rounds {rounds:?}");
    let attempt = |r: &rtune_driver::metrics::Metrics| r.get("group_attempt").copied();
    let retried = history.iter().find(|r| attempt(r) == Some(1.0)).with_context(|| {
        format!("no row of a retry: {:?}", history.iter().map(attempt).collect::<Vec<_>>())
    })?;
    let first = retried["training_iteration"];
    ensure!(
        first >= 8.0 && (first as u64 - 1).is_multiple_of(7),
        "the retry began at round {first}, not after a kept checkpoint (every 7th round) past \
         the 10 rounds seen before the kill"
    );
    // The latest, not the best by the sweep's metric (LightGBM's valid loss turns before 300).
    let last = trial.checkpoint_by(&rtune_driver::outcome::CheckpointRanking::Latest)?;
    let trees = rtune::model::TreeModel::load(last.path())?.dump()?.len();
    ensure!(trees == 300 * 10, "the model has {trees} trees, not 300 rounds of 10 classes");
    Ok(())
}

/// Mistakes about a tree trial, each refused before anything runs with its key named (exit 2,
/// no experiment made): a name XGBoost does not use, a value it refuses, `[datasets]` naming a
/// file that is not there, a preprocessor rtune does not have; the library missing.
pub fn tree_mistakes_are_refused_before_anything_runs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("bad.toml");
    let write = |datasets: &str, params: &str| -> Result<()> {
        let sweep = format!(
            "name = \"bad\"\nstorage_path = {:?}\n[trainable]\nbuiltin = \"xgboost\"\n\
             [datasets]\n{datasets}\n[param_space]\nobjective = \"multi:softprob\"\n\
             num_class = 10\n{params}\n[tune]\nmetric = \"valid-mlogloss\"\nmode = \"min\"\n",
            dir.path().display().to_string()
        );
        Ok(std::fs::write(&file, sweep)?)
    };
    let good = format!("train = {:?}\nlabel = \"digit\"", digits("train"));
    let refused = |wants: &[&str]| -> Result<()> {
        let out = rtune(&["validate", file.to_str().unwrap()])?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.code() == Some(2), "{}", text(&out));
        for want in wants {
            ensure!(said.contains(want), "no {want:?} in:\n{said}");
        }
        Ok(())
    };
    write(&good, "max_dept = 3\neta = { uniform = [-1.0, 0.3] }")?;
    refused(&[
        "`param_space.max_dept` is not a parameter XGBoost uses",
        "`param_space.eta`",
        "learning_rate",
    ])?;
    write(
        "train = \"nowhere.parquet\"\nlabel = \"digit\"\npreprocessor = \"standard_scalar\"",
        "",
    )?;
    refused(&[
        "`datasets.train`",
        "nowhere.parquet",
        "`datasets.preprocessor`",
        "standard_scaler",
    ])?;
    write(&good, "")?;
    let out = Command::new(RTUNE)
        .args(["validate", file.to_str().unwrap()])
        .env("RTUNE_XGBOOST_LIB", dir.path().join("libxgboost.so"))
        .output()?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(
        said.contains("`trainable.builtin`")
            && said.contains("xgboost==3.2.0")
            && said.contains("make trees"),
        "{said}"
    );
    ensure!(!dir.path().join("bad").exists(), "an experiment was made");
    Ok(())
}

/// Early stopping (`early_stopping_rounds`, watching the last dataset's last metric as
/// `xgboost.train` watches its last eval set's) ends the trial at the round `xgboost.train`
/// stops at on the same data and params.
pub fn xgboost_early_stopping_ends_where_xgboost_does() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let params = xgboost_params().with("eta", 0.5).with("early_stopping_rounds", 3);
    let trainer: XGBoostTrainer = on_digits(params, 1, 300, dir.path(), "early");
    let result = trainer.fit()?;
    let ours = result.metrics_history.len();
    let script = r#"
import json, sys, numpy as np, pandas as pd, xgboost as xgb
params = json.loads(sys.argv[1]); params.update(eta=0.5)
def frame(path):
    t = pd.read_parquet(path)
    return t.drop(columns=["digit"]).to_numpy(np.float32), t["digit"].to_numpy(np.float32)
(x, y), (xv, yv) = frame(sys.argv[2]), frame(sys.argv[3])
d, dv = xgb.DMatrix(x, label=y), xgb.DMatrix(xv, label=yv)
b = xgb.train(params, d, 300, evals=[(d, "train"), (dv, "valid")], early_stopping_rounds=3,
              verbose_eval=False)
print(b.num_boosted_rounds())
"#;
    let args = [Path::new(PARAMS), &digits("train"), &digits("valid")];
    let theirs: usize = String::from_utf8(python(script, &args)?)?.trim().parse()?;
    ensure!(theirs < 300, "xgboost did not stop early ({theirs} rounds): the test shows nothing");
    ensure!(ours == theirs, "rtune stopped after {ours} rounds, xgboost after {theirs}");
    Ok(())
}

/// Squared error as a train function's own objective, on XGBoost's `Boosting` handle: each
/// round's gradients (margin - label) and hessians (1) of this rank's rows.
fn squared_error_by_hand(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
    use rtune::trees::xgboost::Boosting;
    let mut boosting = Boosting::start(ctx)?;
    let labels = boosting.labels("train")?.to_vec();
    for _ in boosting.rounds() {
        let margins = boosting.margins("train")?;
        let grad: Vec<f32> = margins.iter().zip(&labels).map(|(m, y)| m - y).collect();
        boosting.boost(&grad, &vec![1.0; grad.len()])?;
        let metrics = boosting.eval()?;
        if !boosting.report(ctx, metrics)? {
            break;
        }
    }
    Ok(())
}

/// A train function of the user's own (Ray's newer `XGBoostTrainer(train_fn)`), boosting with
/// its own squared error on two ranks through XGBoost's collective, trains the trees rtune's
/// own rounds train with XGBoost's `reg:squarederror`; its rows are rounds 1..k once, each
/// with the datasets' metrics, and its checkpoint holds the model Python's xgboost loads.
pub fn a_train_function_of_its_own_boosts_with_its_own_objective() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let params = params_of(
        r#"{"base_score": 0.5, "eta": 0.3, "max_depth": 4, "tree_method": "hist",
            "eval_metric": "rmse", "nthread": 1}"#,
    );
    let rounds = 8;
    let builtin = params.clone().with("objective", "reg:squarederror");
    let theirs: XGBoostTrainer = on_digits(builtin, 2, rounds, dir.path(), "builtin");
    let theirs = theirs.fit()?;
    let own = XGBoostTrainer::with_train_fn(squared_error_by_hand, params).num_boost_round(rounds);
    let ours = with_digits(own, 2, dir.path(), "own").fit()?;
    let iterations: Vec<f64> =
        ours.metrics_history.iter().map(|row| row["training_iteration"]).collect();
    let expected: Vec<f64> = (1..=rounds).map(|r| r as f64).collect();
    ensure!(iterations == expected, "the train function's rows are rounds {iterations:?}");
    let dump = |result: &rtune::TrainResult| -> Result<Vec<String>> {
        let checkpoint = result.checkpoint.as_ref().context("a checkpoint")?;
        Ok(serde_json::from_slice(&python(PYTHON_DUMP, &[&checkpoint.path().join("model.ubj")])?)?)
    };
    let (mine, builtin) = (dump(&ours)?, dump(&theirs)?);
    ensure!(mine.len() == rounds as usize, "{} trees", mine.len());
    if let Some(i) = (0..mine.len()).find(|&i| mine[i] != builtin[i]) {
        anyhow::bail!("tree {i} differs:\nown:\n{}\nbuiltin:\n{}", mine[i], builtin[i]);
    }
    let (a, b) = (&ours.metrics_history[7], &theirs.metrics_history[7]);
    ensure!(
        (a["valid-rmse"] - b["valid-rmse"]).abs() < 1e-9,
        "valid-rmse {} where the builtin's is {}",
        a["valid-rmse"],
        b["valid-rmse"]
    );
    Ok(())
}

/// Every tree of a checkpoint's model, as the library's own Python package dumps it.
const PYTHON_TREES: &str = r#"
import json, os, sys
path = sys.argv[1]
if os.path.exists(os.path.join(path, "model.ubj")):
    import xgboost as xgb
    trees = xgb.Booster(model_file=os.path.join(path, "model.ubj")).get_dump()
else:
    import lightgbm as lgb
    info = lgb.Booster(model_file=os.path.join(path, "model.txt")).dump_model()["tree_info"]
    trees = [json.dumps(t["tree_structure"], sort_keys=True) for t in info]
print(json.dumps(trees))
"#;

/// PBT on tree trials is honest: a trial that takes over another's checkpoint boosts on from
/// that checkpoint's model with its own perturbed params, as Ray's PBT does with a tree trial
/// (its model's first trees are the taken checkpoint's, the rounds after are its own), and
/// every trial's rows go from round 1 to 13, one round more each row but at a takeover (which
/// goes on from the taken checkpoint's round). Both libraries.
pub fn pbt_tree_trials_boost_on_from_the_checkpoint_they_take_over() -> Result<()> {
    let libraries = [
        (
            "xgboost",
            r#"objective = "multi:softprob"
eval_metric = "mlogloss"
tree_method = "hist"
eta = { loguniform = [0.001, 0.5] }
max_depth = 4"#,
            "valid-mlogloss",
            "eta",
        ),
        (
            "lightgbm",
            r#"objective = "multiclass"
metric = "multi_logloss"
learning_rate = { loguniform = [0.001, 0.5] }
num_leaves = 7
verbosity = -1"#,
            "valid-multi_logloss",
            "learning_rate",
        ),
    ];
    for (builtin, params, metric, rate) in libraries {
        let dir = tempfile::tempdir()?;
        let sweep = format!(
            r#"
name = "pbt"
storage_path = "{storage}"

[trainable]
builtin = "{builtin}"

[datasets]
train = "{train}"
valid = "{valid}"
label = "digit"

[param_space]
num_class = 10
num_boost_round = 13
{params}

[tune]
metric = "{metric}"
mode = "min"
num_samples = 4
seed = 0
scheduler = {{ type = "pbt", time_attr = "training_iteration", perturbation_interval = 3, quantile_fraction = 0.5, hyperparam_mutations = {{ {rate} = {{ loguniform = [0.001, 0.5] }} }} }}
"#,
            storage = dir.path().display(),
            train = digits("train").display(),
            valid = digits("valid").display(),
        );
        let file = dir.path().join("pbt.toml");
        std::fs::write(&file, sweep)?;
        let out = rtune(&["run", file.to_str().context("path")?, "--no-tui"])?;
        ensure!(out.status.success(), "{builtin}: {}", text(&out));
        let experiment = dir.path().join("pbt");
        let log = std::fs::read_to_string(experiment.join("driver.log"))?;
        ensure!(log.contains(" takes over trial "), "{builtin}: PBT exploited nothing:\n{log}");
        let grid = rtune::ResultGrid::from_path(&experiment)?;
        let mut took_over = 0;
        for trial in &grid.trials {
            // From round 1 to the last, one more each row but where it took a checkpoint
            // over: it goes on from that one's round (as Ray's PBT: 1..3, then the taken 6's
            // 7..; a source behind it, back).
            let rounds: Vec<f64> =
                trial.history().iter().map(|r| r["training_iteration"]).collect();
            let jumps = rounds.windows(2).filter(|w| w[1] != w[0] + 1.0).count();
            let index: u64 = trial.trial_id().rsplit('_').next().unwrap_or("").parse()?;
            let taken = log.matches(&format!("trial {index} takes over")).count();
            ensure!(
                rounds.first() == Some(&1.0) && rounds.last() == Some(&13.0) && jumps <= taken,
                "{builtin} {}: rounds {rounds:?}",
                trial.trial_id()
            );
            let dir = trial.path();
            // The last checkpoint it took over (at round 12 at the latest: 13 boosts on).
            let taken = dir.join("exploited_checkpoint");
            if !taken.is_dir() {
                continue;
            }
            let trees_of = |path: &Path| -> Result<Vec<String>> {
                Ok(serde_json::from_slice(&python(PYTHON_TREES, &[path])?)?)
            };
            let last = trial.checkpoint_by(&rtune_driver::outcome::CheckpointRanking::Latest)?;
            let (before, after) = (trees_of(&taken)?, trees_of(last.path())?);
            ensure!(
                after.len() > before.len() && after[..before.len()] == before[..],
                "{builtin} {}: its model of {} trees does not start with the {} it took over",
                trial.trial_id(),
                after.len(),
                before.len()
            );
            took_over += 1;
        }
        ensure!(took_over > 0, "{builtin}: no trial's directory holds a checkpoint taken over");
    }
    Ok(())
}

/// A custom objective that gives one gradient where the rank has many rows.
fn too_few_gradients_xgboost(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
    let mut boosting = rtune::trees::xgboost::Boosting::start(ctx)?;
    boosting.boost(&[0.5], &[1.0])
}

fn too_few_gradients_lightgbm(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
    let mut boosting = rtune::trees::lightgbm::Boosting::start(ctx)?;
    boosting.boost(&[0.5], &[1.0])
}

/// A train function's custom objective of the wrong length fails the run with the library's
/// name and what it needs (one gradient and hessian per row and output), not a crash.
pub fn a_custom_objective_of_the_wrong_length_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let xgb = XGBoostTrainer::with_train_fn(too_few_gradients_xgboost, Params::new());
    let lgb = rtune::LightGBMTrainer::with_train_fn(
        too_few_gradients_lightgbm,
        Params::new().with("objective", "none").with("verbosity", -1),
    );
    let errors = [
        ("XGBoost", with_digits(xgb, 1, dir.path(), "xgb").fit().err()),
        ("LightGBM", with_digits(lgb, 1, dir.path(), "lgb").fit().err()),
    ];
    for (library, error) in errors {
        let said = format!("{:#}", error.with_context(|| format!("{library} trained"))?);
        let named = said.contains(&format!("{library}: 1 gradients and 1 hessians"));
        ensure!(named && said.contains(" per row and "), "{library}: {said}");
    }
    Ok(())
}
