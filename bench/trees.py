#!/usr/bin/env python3
"""Tree trials against their libraries called from Python (#64), side by side in each round.

    .venv/bin/python bench/trees.py [--rows N] [--rounds R] [--runs K] [--sweep-rows N]

* per round: one XGBoost and one LightGBM trial of rtune (1 rank, 2 CPUs) against
  `xgboost.train` / `lightgbm.train` on the same data, params, threads and rounds (evaluating
  train and valid every round, as rtune's rows do): seconds a round (the median round), and the
  whole run from reading the files to the last round;
* scaling: the same model on 1 and 2 ranks (1 CPU each, data-parallel through the library's own
  collective): seconds a round;
* a sweep: 32 trials x 200 rounds with ASHA against Optuna 5.0 with the same pruning
  (successive halving from round 25, halving; the library's round as the step; both evaluate
  train and valid every round, as Ray's rows do) on a smaller set, 2 trials at a time of one
  thread each, Optuna given the configurations rtune's random search drew (so that the two
  sweeps differ only in how they run and prune them): wall time, the best validation log loss and the rounds boosted, rtune with a
  checkpoint every round (its default) and with only each trial's last.

The data: a generated binary classification set (rows x 50 features, float32, a seeded linear
and interaction signal with noise), `valid` a tenth the size, as parquet. Prints one JSON line per
figure (`BENCH {..}`); bench/suite.py's group `trees` runs it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

XGB = {"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist",
       "max_depth": 6, "eta": 0.1}
LGB = {"objective": "binary", "metric": "binary_logloss", "num_leaves": 63,
       "learning_rate": 0.1, "verbosity": -1}
METRIC = {"xgboost": "valid-logloss", "lightgbm": "valid-binary_logloss"}


def figure(name, value, unit, about=""):
    print("BENCH " + json.dumps({"name": name, "value": value, "unit": unit, "about": about}),
          flush=True)


DATA = os.path.join(ROOT, "target", "bench-trees")


def make_data(_runs, rows, features=50, seed=0):
    """train.parquet (rows) and valid.parquet (rows / 10) in target/bench-trees, once per size."""
    os.makedirs(DATA, exist_ok=True)
    train, valid = (os.path.join(DATA, f"{n}-{rows}.parquet") for n in ("train", "valid"))
    if os.path.exists(valid):
        return train, valid
    rng = np.random.default_rng(seed)
    n = rows + rows // 10
    x = rng.standard_normal((n, features), dtype=np.float32)
    w = rng.standard_normal(10)
    signal = x[:, :10] @ w + 1.5 * np.sin(3 * x[:, 10]) * x[:, 11] + x[:, 12] * x[:, 13]
    y = (signal + rng.standard_normal(n) > 0).astype(np.int64)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
    frame["label"] = y
    frame[:rows].to_parquet(train)
    frame[rows:].to_parquet(valid)
    return train, valid


def rtune_binary():
    builds = [os.path.join(ROOT, "target", b, "rtune") for b in ("release", "debug")]
    return max((b for b in builds if os.path.exists(b)), key=os.path.getmtime)


def toml_value(v):
    return json.dumps(v) if not isinstance(v, bool) else str(v).lower()


def sweep_file(folder, name, library, params, train, valid, workers, cpus, samples=1,
               scheduler=None, space=""):
    lines = [f'name = "{name}"', f'storage_path = "{folder}"', "[trainable]",
             f'builtin = "{library}"', "[datasets]", f'train = "{train}"', f'valid = "{valid}"',
             'label = "label"', "[scaling]", f"num_workers = {workers}",
             f"resources_per_worker = {{ CPU = {cpus} }}", "[param_space]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in params.items()]
    lines += [space, "[tune]", f'metric = "{METRIC[library]}"', 'mode = "min"',
              f"num_samples = {samples}", 'search = "random"', "seed = 0"]
    if scheduler:
        lines.append(f"scheduler = {scheduler}")
    lines += ["[run]", "checkpoint = { num_to_keep = 1 }"]
    path = os.path.join(folder, f"{name}.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def rows_of(experiment):
    out = []
    for trial in sorted(os.listdir(experiment)):
        result = os.path.join(experiment, trial, "result.json")
        if os.path.exists(result):
            with open(result) as f:
                out.append([json.loads(line) for line in f])
    return out


def params_of(experiment, keys):
    """Each trial's drawn values of `keys`, in trial order."""
    out = []
    for trial in sorted(os.listdir(experiment)):
        path = os.path.join(experiment, trial, "params.json")
        if os.path.exists(path):
            with open(path) as f:
                params = json.load(f)
            out.append({k: params[k] for k in keys if k in params})
    return out


def run_rtune(folder, name, library, params, train, valid, workers, cpus, **sweep):
    path = sweep_file(folder, name, library, params, train, valid, workers, cpus, **sweep)
    started = time.perf_counter()
    subprocess.run([rtune_binary(), "run", path, "--no-tui"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    return wall, rows_of(os.path.join(folder, name))


# The libraries from Python, as a user calls them: every round's time after its evaluation.
PYTHON = r'''
import json, sys, time
import numpy as np, pandas as pd
library, params, rounds, train, valid = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
started = time.perf_counter()
def frame(path):
    t = pd.read_parquet(path)
    return t.drop(columns=["label"]).to_numpy(np.float32), t["label"].to_numpy(np.float32)
(x, y), (xv, yv) = frame(train), frame(valid)
marks = []
if library == "xgboost":
    import xgboost as xgb
    class Mark(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            marks.append(time.perf_counter()); return False
    dtrain, dvalid = xgb.DMatrix(x, label=y), xgb.DMatrix(xv, label=yv)
    marks.append(time.perf_counter())
    xgb.train(params, dtrain, rounds, evals=[(dtrain, "train"), (dvalid, "valid")],
              verbose_eval=False, callbacks=[Mark()])
else:
    import lightgbm as lgb
    dtrain = lgb.Dataset(x, label=y)
    dvalid = lgb.Dataset(xv, label=yv, reference=dtrain)
    dtrain.construct(); dvalid.construct()
    marks.append(time.perf_counter())
    lgb.train(params, dtrain, rounds, valid_sets=[dtrain, dvalid], valid_names=["train", "valid"],
              callbacks=[lambda env: marks.append(time.perf_counter())])
rounds_s = [b - a for a, b in zip(marks, marks[1:])]
print(json.dumps({"wall": time.perf_counter() - started, "rounds": rounds_s}))
'''


def run_python(library, params, rounds, train, valid):
    out = subprocess.run([sys.executable, "-c", PYTHON, library, json.dumps(params), str(rounds),
                          train, valid], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def threads_key(library):
    return "nthread" if library == "xgboost" else "num_threads"


def per_round(folder, rows, rounds):
    train, valid = make_data(folder, rows)
    for library, params in (("xgboost", XGB), ("lightgbm", LGB)):
        given = dict(params, **{threads_key(library): 2})
        wall, trials = run_rtune(folder, f"{library}-{time.time_ns()}", library,
                                 dict(given, num_boost_round=rounds), train, valid, 1, 2)
        ours = statistics.median(r["time_this_iter_s"] for r in trials[0][1:])
        _, at_end = run_rtune(folder, f"{library}-end-{time.time_ns()}", library,
                              dict(given, num_boost_round=rounds, checkpoint_frequency=0), train,
                              valid, 1, 2)
        ours_at_end = statistics.median(r["time_this_iter_s"] for r in at_end[0][1:-1])
        theirs = run_python(library, given, rounds, train, valid)
        python_round = statistics.median(theirs["rounds"][1:])
        about = f"{rows:,} rows x 50, {rounds} rounds, 2 threads"
        figure(f"{library}: s a round, rtune", ours, "s", about)
        figure(f"{library}: s a round, Python", python_round, "s", about)
        figure(f"{library}: a round, rtune / Python", ours / python_round, "x", about)
        figure(f"{library}: s a round, rtune, checkpoint at the end only", ours_at_end, "s",
               about + ", checkpoint_frequency = 0")
        figure(f"{library}: a round, rtune checkpoint at the end / Python",
               ours_at_end / python_round, "x", about)
        figure(f"{library}: whole run, rtune", wall, "s", about + ", files to last round")
        figure(f"{library}: whole run, Python", theirs["wall"], "s",
               about + ", files to last round (interpreter start aside)")


def scaling(folder, rows, rounds):
    train, valid = make_data(folder, rows)
    for library, params in (("xgboost", XGB), ("lightgbm", LGB)):
        for workers in (1, 2):
            _, trials = run_rtune(folder, f"{library}-{workers}-{time.time_ns()}", library,
                                  dict(params, num_boost_round=rounds), train, valid, workers, 1)
            per = statistics.median(r["time_this_iter_s"] for r in trials[0][1:])
            figure(f"{library}: s a round on {workers} rank(s)", per, "s",
                   f"{rows:,} rows x 50, 1 CPU a rank")


OPTUNA = r'''
import json, sys, time
import numpy as np, pandas as pd, optuna
library, rounds, trials, train, valid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
drawn = json.loads(sys.argv[6])
def frame(path):
    t = pd.read_parquet(path)
    return t.drop(columns=["label"]).to_numpy(np.float32), t["label"].to_numpy(np.float32)
started = time.perf_counter()
(x, y), (xv, yv) = frame(train), frame(valid)
def objective(trial):
    last = {}
    if library == "xgboost":
        import xgboost as xgb
        params = {"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist",
                  "nthread": 1, "eta": trial.suggest_float("eta", 0.02, 0.5, log=True),
                  "max_depth": trial.suggest_int("max_depth", 2, 10),
                  "subsample": trial.suggest_float("subsample", 0.5, 1.0)}
        class Prune(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                value = evals_log["valid"]["logloss"][-1]; last["v"] = value
                last["rounds"] = epoch + 1
                trial.report(value, epoch + 1)
                return trial.should_prune()
        d, dv = xgb.DMatrix(x, label=y), xgb.DMatrix(xv, label=yv)
        xgb.train(params, d, rounds, evals=[(d, "train"), (dv, "valid")], verbose_eval=False,
                  callbacks=[Prune()])
    else:
        import lightgbm as lgb
        params = {"objective": "binary", "metric": "binary_logloss", "verbosity": -1,
                  "num_threads": 1,
                  "learning_rate": trial.suggest_float("learning_rate", 0.02, 0.5, log=True),
                  "num_leaves": trial.suggest_int("num_leaves", 4, 128),
                  "feature_fraction": trial.suggest_float("feature_fraction", 0.5, 1.0)}
        class Pruned(Exception): pass
        def prune(env):
            value = env.evaluation_result_list[-1][2]; last["v"] = value
            last["rounds"] = env.iteration + 1
            trial.report(value, env.iteration + 1)
            if trial.should_prune(): raise Pruned()
        d = lgb.Dataset(x, label=y); dv = lgb.Dataset(xv, label=yv, reference=d)
        try:
            lgb.train(params, d, rounds, valid_sets=[d, dv], valid_names=["train", "valid"],
                      callbacks=[prune])
        except Pruned:
            pass
    done.append(last["rounds"])
    return last["v"]
done = []
optuna.logging.set_verbosity(optuna.logging.WARNING)
pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=25, reduction_factor=2)
study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler(seed=0),
                            pruner=pruner)
# The configurations rtune's sweep drew, in its order: the same trials, pruned each its way.
for params in drawn:
    study.enqueue_trial(params)
study.optimize(objective, n_trials=trials, n_jobs=2)
print(json.dumps({"wall": time.perf_counter() - started, "best": study.best_value,
                  "rounds": sum(done)}))
'''


def sweep(folder, rows, rounds, trials):
    """rtune's ASHA (grace 25 rounds, halving) against Optuna's successive halving on the same
    domains, both 2 trials at a time of 1 thread each."""
    train, valid = make_data(folder, rows)
    spaces = {
        "xgboost": ('eta = { loguniform = [0.02, 0.5] }\nmax_depth = { randint = [2, 11] }\n'
                    'subsample = { uniform = [0.5, 1.0] }', {k: v for k, v in XGB.items()
                                                              if k not in ("eta", "max_depth")}),
        "lightgbm": ('learning_rate = { loguniform = [0.02, 0.5] }\n'
                     'num_leaves = { randint = [4, 129] }\n'
                     'feature_fraction = { uniform = [0.5, 1.0] }',
                     {k: v for k, v in LGB.items() if k not in ("learning_rate", "num_leaves")}),
    }
    for library, (space, params) in spaces.items():
        scheduler = (f'{{ type = "asha", grace_period = 25, max_t = {rounds}, '
                     'reduction_factor = 2 }')
        about = f"{trials} trials x {rounds} rounds, {rows:,} rows x 50, 2 at a time"
        # rtune as it comes (a checkpoint every round), and keeping only each trial's last.
        for every, said in ((1, ""), (0, ", checkpoint_frequency = 0")):
            name = f"{library}-sweep-{every}-{time.time_ns()}"
            wall, results = run_rtune(
                folder, name, library,
                dict(params, num_boost_round=rounds, checkpoint_frequency=every,
                     **{threads_key(library): 1}),
                train, valid, 1, 1, samples=trials, scheduler=scheduler, space=space)
            best = min(row[METRIC[library]] for rows in results for row in rows)
            figure(f"{library} sweep: wall, rtune ASHA{said}", wall, "s", about)
            figure(f"{library} sweep: best valid logloss, rtune{said}", best, "", about)
            figure(f"{library} sweep: rounds boosted, rtune{said}",
                   sum(len(rows) for rows in results), "rounds", about)
        keys = [line.split(" = ")[0] for line in space.splitlines()]
        drawn = json.dumps(params_of(os.path.join(folder, name), keys))
        out = subprocess.run([sys.executable, "-c", OPTUNA, library, str(rounds), str(trials),
                              train, valid, drawn], check=True, capture_output=True, text=True)
        theirs = json.loads(out.stdout.strip().splitlines()[-1])
        figure(f"{library} sweep: wall, Optuna pruning", theirs["wall"], "s", about)
        figure(f"{library} sweep: best valid logloss, Optuna", theirs["best"], "", about)
        figure(f"{library} sweep: rounds boosted, Optuna", theirs["rounds"], "rounds", about)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sweep-rows", type=int, default=50_000)
    parser.add_argument("--sweep-trials", type=int, default=32)
    parser.add_argument("--sweep-rounds", type=int, default=200)
    parser.add_argument("--only", default="per_round,scaling,sweep")
    args = parser.parse_args()
    os.makedirs(DATA, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=DATA) as runs:
        if "per_round" in args.only:
            per_round(runs, args.rows, args.rounds)
        if "scaling" in args.only:
            scaling(runs, args.rows, args.rounds)
        if "sweep" in args.only:
            sweep(runs, args.sweep_rows, args.sweep_rounds, args.sweep_trials)


if __name__ == "__main__":
    main()
