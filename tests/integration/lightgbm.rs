//! LightGBM trials against LightGBM's own Python package (the same wheel, data, params, rounds
//! and threads, `deterministic = true`): one rank and two ranks (data-parallel over LightGBM's
//! network) give the trees `lightgbm.train` gives, alone and in two processes given the machine
//! list; a trial resumed from a checkpoint boosts on to the trees of one that was not stopped; a
//! sweep's scheduler stops trials at rounds and the export predicts in Python as in rtune; the
//! sweep file's mistakes about LightGBM's params are refused before anything runs.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use rtune::{LightGBMTrainer, Params};

use crate::cli::rtune;
use crate::common::{python, text};
use crate::trees::{asha_sweep_and_its_export, digits, on_digits, params_of, with_digits};

/// LightGBM params both sides train with (one thread and `deterministic`: the same trees
/// whatever the machine).
const PARAMS: &str = r#"{"objective": "multiclass", "num_class": 10, "learning_rate": 0.3,
    "num_leaves": 15, "min_data_in_leaf": 5, "metric": "multi_logloss", "num_threads": 1,
    "deterministic": true, "force_col_wise": true, "verbosity": -1}"#;

fn lightgbm_params() -> Params {
    params_of(PARAMS)
}

fn trainer(workers: usize, rounds: u64, dir: &Path, name: &str) -> LightGBMTrainer {
    on_digits(lightgbm_params(), workers, rounds, dir, name)
}

/// A model text's trees (its `Tree=` sections), which say the model whatever its parameters
/// section says of how it was trained.
fn trees(model: &str) -> Vec<String> {
    let body = model.split("end of trees").next().unwrap_or("");
    body.split("\nTree=").skip(1).map(|t| t.trim().to_owned()).collect()
}

/// The latest checkpoint's model of a run.
fn model_of(result: &rtune::TrainResult) -> Result<String> {
    let checkpoint = result.checkpoint.as_ref().context("a checkpoint")?;
    Ok(std::fs::read_to_string(checkpoint.path().join("model.txt"))?)
}

/// Python training the same model: `lightgbm.train` on `train` (in `world` processes given
/// the machine list, each on its shard, rank r taking rows r*n/W..(r+1)*n/W as rtune shards
/// them), printing rank 0's model text and last valid multi_logloss as JSON.
const PYTHON_TRAIN: &str = r#"
import json, socket, sys, multiprocessing as mp
import numpy as np, pandas as pd, lightgbm as lgb
params = json.loads(sys.argv[1]); rounds = int(sys.argv[2]); world = int(sys.argv[3])
def frame(path):
    t = pd.read_parquet(path)
    return t.drop(columns=["digit"]).to_numpy(np.float32), t["digit"].to_numpy(np.float32)
def fit(rank, machines, port, out):
    X, y = frame(sys.argv[4]); Xv, yv = frame(sys.argv[5])
    lo, hi = rank * len(X) // world, (rank + 1) * len(X) // world
    vlo, vhi = rank * len(Xv) // world, (rank + 1) * len(Xv) // world
    p = dict(params)
    if world > 1:
        p.update(machines=machines, local_listen_port=port, num_machines=world,
                 tree_learner="data", pre_partition=True, time_out=2)
    train = lgb.Dataset(X[lo:hi], label=y[lo:hi])
    valid = lgb.Dataset(Xv[vlo:vhi], label=yv[vlo:vhi], reference=train)
    log = {}
    booster = lgb.train(p, train, rounds, valid_sets=[train, valid], valid_names=["train", "valid"],
                        callbacks=[lgb.record_evaluation(log)])
    if rank == 0:
        out.put({"model": booster.model_to_string(), "valid": log["valid"]["multi_logloss"][-1]})
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
out = mp.Queue()
if world == 1:
    fit(0, None, None, out)
else:
    ports = [free_port() for _ in range(world)]
    machines = ",".join(f"127.0.0.1:{p}" for p in ports)
    ps = [mp.Process(target=fit, args=(r, machines, ports[r], out)) for r in range(world)]
    for p in ps: p.start()
    got = out.get(timeout=120)
    for p in ps: p.join()
    out.put(got)
print(json.dumps(out.get(timeout=120)))
"#;

/// rtune's model on `workers` ranks equals LightGBM's own run on the same shards: every tree,
/// and the last round's validation log loss (over both shards: rtune pools the ranks').
fn same_as_python(workers: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let rounds = 12;
    let result = trainer(workers, rounds, dir.path(), &format!("lgb{workers}")).fit()?;
    let rows = &result.metrics_history;
    ensure!(rows.len() == rounds as usize, "{} rows", rows.len());
    let ours = trees(&model_of(&result)?);
    let (rounds_text, workers_text) = (rounds.to_string(), workers.to_string());
    let args = [
        Path::new(PARAMS),
        Path::new(&rounds_text),
        Path::new(&workers_text),
        &digits("train"),
        &digits("valid"),
    ];
    let printed = String::from_utf8(python(PYTHON_TRAIN, &args)?)?;
    let last_line = printed.lines().last().unwrap_or_default();
    let theirs: serde_json::Value =
        serde_json::from_str(last_line).with_context(|| format!("Python printed {printed}"))?;
    let model = theirs["model"].as_str().context("model")?;
    let expected = trees(model);
    ensure!(
        ours.len() == expected.len(),
        "{} trees where lightgbm has {}",
        ours.len(),
        expected.len()
    );
    ensure!(ours.len() == rounds as usize * 10, "{} trees", ours.len());
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != expected[i]) {
        anyhow::bail!("tree {i} differs:\nrtune:\n{}\nlightgbm:\n{}", ours[i], expected[i]);
    }
    let last = rows.last().context("rows")?;
    ensure!(
        last.contains_key("train-multi_logloss"),
        "no train-multi_logloss in {:?}",
        last.keys()
    );
    let reported = last["valid-multi_logloss"];
    if workers == 1 {
        let valid = theirs["valid"].as_f64().context("valid")?;
        ensure!(
            (reported - valid).abs() < 1e-9,
            "valid-multi_logloss {reported} where lightgbm says {valid}"
        );
    } else {
        // LightGBM's own value is rank 0's shard's; rtune's is the whole valid set's, which
        // the model predicts in Python.
        let whole = whole_valid_logloss(&model_of(&result)?, dir.path())?;
        ensure!(
            (reported - whole).abs() < 1e-6,
            "valid-multi_logloss {reported} where the model's log loss on all of valid is {whole}"
        );
    }
    Ok(())
}

/// The multiclass log loss of `model` on every row of the valid set, by LightGBM in Python
/// (as its metric computes it: a probability below 1e-15 counts as 1e-15).
fn whole_valid_logloss(model: &str, dir: &Path) -> Result<f64> {
    let file = dir.join("whole.txt");
    std::fs::write(&file, model)?;
    let script = r#"
import sys, numpy as np, pandas as pd, lightgbm as lgb
t = pd.read_parquet(sys.argv[2])
p = lgb.Booster(model_file=sys.argv[1]).predict(t.drop(columns=["digit"]).to_numpy(np.float32))
y = t["digit"].to_numpy(int)
print(np.mean(-np.log(np.maximum(p[np.arange(len(y)), y], 1e-15))))
"#;
    Ok(String::from_utf8(python(script, &[&file, &digits("valid")])?)?.trim().parse()?)
}

/// One rank: the same trees as `lightgbm.train` in Python.
pub fn one_rank_trains_what_lightgbm_trains() -> Result<()> {
    same_as_python(1)
}

/// Two ranks over LightGBM's network: the trees of two Python processes given the machine
/// list, each on the same shard as rtune's rank.
pub fn two_ranks_train_what_lightgbms_own_distributed_run_trains() -> Result<()> {
    same_as_python(2)
}

/// A trial resumed from its 6th round's checkpoint and boosted to 12 (the checkpoint's model
/// scoring every dataset, as `lightgbm.train(init_model=..)` does) ends with the trees of a
/// 12-round trial that was never stopped, its rows rounds 7..12.
pub fn a_resumed_lightgbm_trial_boosts_on_to_the_uninterrupted_trees() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let straight = trainer(1, 12, dir.path(), "straight").fit()?;
    let first = trainer(1, 6, dir.path(), "first").fit()?;
    let checkpoint = first.checkpoint.clone().context("a checkpoint")?;
    let resumed = trainer(1, 12, dir.path(), "resumed").resume_from_checkpoint(checkpoint).fit()?;
    let rounds: Vec<f64> =
        resumed.metrics_history.iter().map(|r| r["training_iteration"]).collect();
    ensure!(rounds == (7..=12).map(f64::from).collect::<Vec<_>>(), "rounds {rounds:?}");
    let (ours, want) = (trees(&model_of(&resumed)?), trees(&model_of(&straight)?));
    ensure!(
        ours.len() == want.len(),
        "{} trees where the straight run has {}",
        ours.len(),
        want.len()
    );
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != want[i]) {
        anyhow::bail!("tree {i} differs:\nresumed:\n{}\nstraight:\n{}", ours[i], want[i]);
    }
    let (a, b) = (
        resumed.metrics_history.last().context("rows")?["valid-multi_logloss"],
        straight.metrics_history.last().context("rows")?["valid-multi_logloss"],
    );
    ensure!((a - b).abs() < 1e-12, "valid-multi_logloss {a} resumed, {b} straight");
    Ok(())
}

/// The shipped LightGBM sweep (16 trials of 2 ranks, ASHA on valid-multi_logloss, 40 rounds):
/// see `trees::asha_sweep_and_its_export`.
pub fn asha_stops_lightgbm_trials_and_the_export_predicts_in_python() -> Result<()> {
    let predict = r#"
import lightgbm as lgb
booster = lgb.Booster(model_file=sys.argv[1] + "/model.txt")
theirs = booster.predict(test.drop(columns=["digit"]).to_numpy(np.float32))
"#;
    asha_sweep_and_its_export("digits_lightgbm_asha.toml", "digits-lightgbm-asha", predict)
}

/// Mistakes about LightGBM's params, each refused before anything runs at its key (exit 2, no
/// experiment made): a name LightGBM does not know, a value it refuses, its own name for the
/// rounds, a metric no dataset reports.
pub fn lightgbm_mistakes_are_refused_before_anything_runs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("bad.toml");
    let write = |params: &str, metric: &str| -> Result<()> {
        let sweep = format!(
            "name = \"bad\"\nstorage_path = {:?}\n[trainable]\nbuiltin = \"lightgbm\"\n\
             [datasets]\ntrain = {:?}\nlabel = \"digit\"\n[param_space]\n\
             objective = \"multiclass\"\nnum_class = 10\n{params}\n[tune]\nmetric = {metric:?}\n\
             mode = \"min\"\n",
            dir.path().display().to_string(),
            digits("train")
        );
        Ok(std::fs::write(&file, sweep)?)
    };
    let refused = |wants: &[&str]| -> Result<()> {
        let out = rtune(&["validate", file.to_str().unwrap()])?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.code() == Some(2), "{}", text(&out));
        for want in wants {
            ensure!(said.contains(want), "no {want:?} in:\n{said}");
        }
        Ok(())
    };
    write("num_leafs = 8\nnum_leaves = { randint = [-3, 1] }", "train-multi_logloss")?;
    refused(&[
        "`param_space.num_leafs` is not a parameter LightGBM knows",
        "`param_space.num_leaves`",
    ])?;
    write("n_estimators = 50", "train-multi_logloss")?;
    refused(&["`param_space.n_estimators`", "num_boost_round"])?;
    write("", "valid-multi_logloss")?;
    refused(&["valid-multi_logloss", "train-multi_logloss"])?;
    write("", "train-multi_logloss")?;
    let out = rtune(&["validate", file.to_str().unwrap()])?;
    ensure!(out.status.success(), "a good sweep file was refused: {}", text(&out));
    ensure!(!dir.path().join("bad").exists(), "an experiment was made");
    Ok(())
}

/// Early stopping (`early_stopping_round`) ends the trial at the round LightGBM's own
/// `lightgbm.train` stops at on the same data and params (its best round, which the model it
/// returns ends at, and the 3 rounds without improvement after it); the last checkpoint holds
/// every round trained.
pub fn lightgbm_early_stopping_ends_where_lightgbm_does() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let params = lightgbm_params().with("learning_rate", 0.5).with("early_stopping_round", 3);
    let trainer: LightGBMTrainer = on_digits(params, 1, 300, dir.path(), "early");
    let result = trainer.fit()?;
    let ours = result.metrics_history.len();
    let script = r#"
import json, sys, numpy as np, pandas as pd, lightgbm as lgb
params = json.loads(sys.argv[1]); params.update(learning_rate=0.5, early_stopping_round=3)
def frame(path):
    t = pd.read_parquet(path)
    return t.drop(columns=["digit"]).to_numpy(np.float32), t["digit"].to_numpy(np.float32)
(x, y), (xv, yv) = frame(sys.argv[2]), frame(sys.argv[3])
train = lgb.Dataset(x, label=y); valid = lgb.Dataset(xv, label=yv, reference=train)
b = lgb.train(params, train, 300, valid_sets=[train, valid], valid_names=["train", "valid"])
print(b.best_iteration + 3)
"#;
    let args = [Path::new(PARAMS), &digits("train"), &digits("valid")];
    let theirs: usize = String::from_utf8(python(script, &args)?)?.trim().parse()?;
    ensure!(theirs < 300, "lightgbm did not stop early ({theirs} rounds): the test shows nothing");
    ensure!(ours == theirs, "rtune stopped after {ours} rounds, lightgbm after {theirs}");
    let model = trees(&model_of(&result)?);
    ensure!(model.len() == ours * 10, "the last checkpoint has {} trees", model.len());
    Ok(())
}

/// Squared error as a train function's own objective, on LightGBM's `Boosting` handle: each
/// round's gradients (score - label) and hessians (1) of this rank's rows.
fn squared_error_by_hand(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
    use rtune::trees::lightgbm::Boosting;
    let mut boosting = Boosting::start(ctx)?;
    let labels = boosting.labels("train")?.to_vec();
    for _ in boosting.rounds() {
        let scores = boosting.scores("train")?;
        let grad: Vec<f32> = scores.iter().zip(&labels).map(|(s, y)| *s as f32 - y).collect();
        boosting.boost(&grad, &vec![1.0; grad.len()])?;
        let metrics = boosting.eval(ctx)?;
        if !boosting.report(ctx, metrics)? {
            break;
        }
    }
    Ok(())
}

/// A train function of the user's own (Ray's newer `LightGBMTrainer(train_fn)`), boosting with
/// its own squared error (`objective = "none"`) on two ranks over LightGBM's network, trains
/// the trees rtune's own rounds train with LightGBM's `regression`, and reports the same
/// pooled metrics, a row per round. The same splits; the leaves' values agree to float
/// rounding only, since LightGBM's `regression` knows its hessians are 1 and sums counts where
/// given hessians are summed as floats.
pub fn a_train_function_of_its_own_boosts_with_its_own_objective() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let params = params_of(
        r#"{"learning_rate": 0.3, "num_leaves": 15, "min_data_in_leaf": 5, "metric": "l2",
            "boost_from_average": false, "num_threads": 1, "deterministic": true,
            "force_col_wise": true, "verbosity": -1}"#,
    );
    let rounds = 8;
    let builtin: LightGBMTrainer =
        on_digits(params.clone().with("objective", "regression"), 2, rounds, dir.path(), "builtin");
    let theirs = builtin.fit()?;
    let own =
        LightGBMTrainer::with_train_fn(squared_error_by_hand, params.with("objective", "none"))
            .num_boost_round(rounds);
    let ours = with_digits(own, 2, dir.path(), "own").fit()?;
    ensure!(ours.metrics_history.len() == rounds as usize, "{} rows", ours.metrics_history.len());
    for (round, (a, b)) in ours.metrics_history.iter().zip(&theirs.metrics_history).enumerate() {
        ensure!(
            (a["valid-l2"] - b["valid-l2"]).abs() < 1e-6 * b["valid-l2"],
            "round {}: valid-l2 {} where the builtin's is {}",
            round + 1,
            a["valid-l2"],
            b["valid-l2"]
        );
    }
    // Each tree's splits: the features and thresholds it splits on.
    let splits = |result: &rtune::TrainResult| -> Result<Vec<String>> {
        Ok(trees(&model_of(result)?)
            .iter()
            .map(|tree| {
                let lines = tree.lines();
                let split =
                    |l: &&str| l.starts_with("split_feature=") || l.starts_with("threshold=");
                lines.filter(split).collect::<Vec<_>>().join("\n")
            })
            .collect())
    };
    let (mine, builtin) = (splits(&ours)?, splits(&theirs)?);
    ensure!(mine.len() == rounds as usize, "{} trees", mine.len());
    ensure!(mine.iter().all(|s| s.contains("threshold=")), "a tree without splits: {mine:?}");
    if let Some(i) = (0..mine.len()).find(|&i| mine[i] != builtin[i]) {
        anyhow::bail!("tree {i} splits differently:\nown:\n{}\nbuiltin:\n{}", mine[i], builtin[i]);
    }
    Ok(())
}
