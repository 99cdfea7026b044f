"""Multi-objective search against Optuna, side by side: rtune's NSGA-II, TPE and random search
(`searchers/examples/moo_vs.rs`) and Optuna's NSGAIISampler and TPESampler (its multi-objective
TPE) on ZDT1 and ZDT2 (30 variables in [0, 1], both objectives minimised), one trial at a time,
the same seeds and budgets. Prints the median hypervolume over the seeds (reference point
(1.1, 11), higher is better) after 100 and 500 trials as a markdown table, then the time of one
NSGA-II suggestion after 1,000 trials on the 10-parameter space of rtune's `suggest` bench
(compare `cargo bench -p rtune-searchers --bench suggest -- nsga2`).

Usage (the Python of `.venv`, which has Optuna 5.0; e.g. `make bench-moo`):
    python bench/moo_peers.py [--seeds 20] [--tpe-seeds 20] [--trials 500] [--rtune PATH]
"""
import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor

import optuna

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIABLES = 30
REFERENCE = (1.1, 11.0)
POPULATION = 50


def zdt(x, convex):
    g = 1.0 + 9.0 * sum(x[1:]) / (len(x) - 1)
    r = x[0] / g
    return x[0], g * (1.0 - (math.sqrt(r) if convex else r * r))


def hypervolume(points):
    """The area the points dominate under REFERENCE (as rtune's hypervolume_2d)."""
    inside = sorted(p for p in points if p[0] < REFERENCE[0] and p[1] < REFERENCE[1])
    area, floor = 0.0, REFERENCE[1]
    for x, y in inside:
        if y < floor:
            area += (REFERENCE[0] - x) * (floor - y)
            floor = y
    return area


def optuna_run(job):
    system, problem, seed, trials = job
    optuna.logging.set_verbosity(logging.WARNING)
    if system == "Optuna NSGA-II":
        sampler = optuna.samplers.NSGAIISampler(population_size=POPULATION, seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    convex = problem == "zdt1"
    points, curve = [], []
    for t in range(trials):
        trial = study.ask()
        x = [trial.suggest_float(f"x{i:02}", 0.0, 1.0) for i in range(VARIABLES)]
        f = zdt(x, convex)
        study.tell(trial, list(f))
        points.append(f)
        if (t + 1) % 50 == 0:
            curve.append([t + 1, hypervolume(points)])
    return {"system": system, "problem": problem, "seed": seed, "hypervolume": curve}


def suggest_seconds(trials=1000, timed=20):
    """Optuna NSGA-II: seconds of one ask with its 10 suggestions after `trials` told trials."""
    optuna.logging.set_verbosity(logging.WARNING)
    sampler = optuna.samplers.NSGAIISampler(population_size=POPULATION, seed=1)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)

    def ask():
        t = study.ask()
        p = {
            "a": t.suggest_float("a", -5, 5), "b": t.suggest_float("b", -5, 5),
            "c": t.suggest_float("c", 0, 1), "lr": t.suggest_float("lr", 1e-5, 1, log=True),
            "wd": t.suggest_float("wd", 1e-6, 1e-1, log=True), "n": t.suggest_int("n", 1, 32),
            "hidden": t.suggest_int("hidden", 1, 1024, log=True),
            "batch": t.suggest_int("batch", 16, 496, step=16),
            "opt": t.suggest_categorical("opt", ["sgd", "adam", "rmsprop", "adagrad"]),
            "act": t.suggest_categorical("act", ["relu", "tanh", "gelu"]),
        }
        return t, p

    def tell(t, p):
        loss = (p["a"] - 1) ** 2 + (p["b"] + 2) ** 2 + (math.log10(p["lr"]) + 3) ** 2 + p["c"]
        study.tell(t, [loss, p["hidden"]])

    for _ in range(trials):
        tell(*ask())
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        t, p = ask()
        times.append(time.perf_counter() - start)
        study.tell(t, state=optuna.trial.TrialState.FAIL)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--tpe-seeds", type=int, default=None, help="seeds for Optuna's TPE")
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--rtune", default=os.path.join(ROOT, "target/release/examples/moo_vs"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    tpe_seeds = args.seeds if args.tpe_seeds is None else args.tpe_seeds

    out = subprocess.run(
        [args.rtune, "--seeds", str(args.seeds), "--trials", str(args.trials),
         "--population", str(POPULATION)],
        check=True, capture_output=True, text=True).stdout
    runs = [json.loads(line) for line in out.splitlines() if line.strip()]
    jobs = [(s, p, seed, args.trials)
            for p in ("zdt1", "zdt2")
            for s, n in (("Optuna NSGA-II", args.seeds), ("Optuna TPE", tpe_seeds))
            for seed in range(n)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        runs += list(pool.map(optuna_run, jobs))
    print(f"(Optuna's runs took {time.perf_counter() - started:.0f} s on {args.jobs} processes)")

    systems = ["rtune NSGA-II", "Optuna NSGA-II", "rtune TPE", "Optuna TPE", "rtune random"]
    budgets = [b for b in (100, 500) if b <= args.trials]
    print(f"\nMedian hypervolume (reference {REFERENCE}), population {POPULATION}, "
          f"{args.seeds} seeds ({tpe_seeds} for Optuna's TPE); higher is better\n")
    print("| problem | trials | " + " | ".join(systems) + " |")
    print("|---|--:|" + "--:|" * len(systems))
    for problem in ("zdt1", "zdt2"):
        for b in budgets:
            cells = []
            for s in systems:
                hv = [dict(r["hypervolume"])[b] for r in runs
                      if r["system"] == s and r["problem"] == problem]
                cells.append(f"{statistics.median(hv):.3f}" if hv else "-")
            print(f"| {problem} | {b} | " + " | ".join(cells) + " |")
    print(f"\nOptuna NSGA-II, one ask with 10 suggestions after 1,000 trials: "
          f"{suggest_seconds() * 1e3:.2f} ms (median of 20)")


if __name__ == "__main__":
    main()
