"""CMA-ES against its references, side by side: rtune's CmaEs (`searchers/examples/cmaes_vs.rs`),
the `cmaes` library's CMA (the same start: the centre of [-5, 5]^d, a step of a sixth of the
range, its default population, candidates outside the box drawn again), and Optuna's
CmaEsSampler (which runs that library), one trial at a time, on sphere, ellipsoid, Rosenbrock
and Rastrigin in 5 and 10 dimensions, the same seeds and budgets. Prints, per function, the
median and quartiles over the seeds of the best value found after 100 and 500 trials
(lower is better; every minimum is 0), and the time per suggestion.

Usage (the Python of `.venv`, with Optuna 5.0 and cmaes; e.g. `make bench-cmaes`):
    python bench/cmaes_peers.py [--seeds 30] [--trials 500] [--dims 5,10]
        [--functions sphere,ellipsoid,rosenbrock,rastrigin] [--restart none|ipop|bipop]
"""
import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUNCTIONS = ["sphere", "ellipsoid", "rosenbrock", "rastrigin"]


def value(name, x):
    d = len(x)
    if name == "sphere":
        return float(sum(v * v for v in x))
    if name == "ellipsoid":
        return float(sum(1e6 ** (i / max(d - 1, 1)) * v * v for i, v in enumerate(x)))
    if name == "rosenbrock":
        return float(sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(d - 1)))
    if name == "rastrigin":
        return float(10 * d + sum(v * v - 10 * math.cos(2 * math.pi * v) for v in x))
    raise ValueError(name)


def curve_of(values):
    best, out = math.inf, []
    for v in values:
        best = min(best, v)
        out.append(best)
    return out


def run_cmaes(function, dims, seed, trials, restart):
    """The cmaes library's CMA, told a generation at a time (Optuna tells it so too)."""
    import cmaes
    bounds = np.array([[-5.0, 5.0]] * dims)
    popsize, values, started = None, [], time.perf_counter()
    inc = 0
    while len(values) < trials:
        mean = (np.zeros(dims) if inc == 0 else
                np.random.default_rng(seed + 1000 * inc).uniform(-5, 5, dims))
        opt = cmaes.CMA(mean=mean, sigma=10 / 6, bounds=bounds, seed=seed + inc, population_size=popsize)
        while len(values) < trials:
            told = []
            for _ in range(opt.population_size):
                x = opt.ask()
                f = value(function, x)
                values.append(f)
                told.append((x, f))
            opt.tell(told)
            if restart != "none" and opt.should_stop():
                popsize = opt.population_size * 2
                inc += 1
                break
        else:
            break
    return curve_of(values[:trials]), time.perf_counter() - started


def run_optuna(function, dims, seed, trials, restart):
    import optuna
    optuna.logging.set_verbosity(logging.WARNING)
    # Its first trial is a random one whatever it is told (the space is not known yet).
    kwargs = {"seed": seed, "n_startup_trials": 0, "warn_independent_sampling": False}
    if restart != "none":
        kwargs["restart_strategy"] = restart
    sampler = optuna.samplers.CmaEsSampler(**kwargs)
    study = optuna.create_study(sampler=sampler)
    started = time.perf_counter()

    def objective(trial):
        x = [trial.suggest_float(f"x{i:02d}", -5.0, 5.0) for i in range(dims)]
        return value(function, x)

    study.optimize(objective, n_trials=trials)
    seconds = time.perf_counter() - started
    return curve_of([t.value for t in study.trials]), seconds


def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--dims", default="5,10")
    parser.add_argument("--functions", default=",".join(FUNCTIONS))
    parser.add_argument("--restart", default="none", choices=["none", "ipop", "bipop"])
    parser.add_argument("--rtune", default=os.path.join(ROOT, "target/release/examples/cmaes_vs"))
    args = parser.parse_args()
    dims = [int(d) for d in args.dims.split(",")]
    functions = args.functions.split(",")
    out = subprocess.run(
        [args.rtune, "--seeds", str(args.seeds), "--trials", str(args.trials), "--dims", args.dims,
         "--functions", args.functions, "--restart", args.restart],
        check=True, capture_output=True, text=True).stdout
    curves = {}  # (searcher, function, dims) -> [curve], seconds
    for line in out.splitlines():
        run = json.loads(line)
        key = ("rtune CmaEs", run["function"], run["dims"])
        curves.setdefault(key, ([], []))
        curves[key][0].append(run["best"])
        curves[key][1].append(run["seconds"])
    for function in functions:
        for d in dims:
            for name, runner in [("cmaes library", run_cmaes), ("Optuna CmaEsSampler", run_optuna)]:
                key = (name, function, d)
                curves[key] = ([], [])
                for seed in range(args.seeds):
                    curve, seconds = runner(function, d, seed, args.trials, args.restart)
                    curves[key][0].append(curve)
                    curves[key][1].append(seconds)
    budgets = [b for b in (100, args.trials) if b <= args.trials]
    print(f"CMA-ES (restart {args.restart}), {args.seeds} seeds: best value found, median "
          f"[quartiles] (lower is better; every minimum is 0)\n")
    header = "| function | d | " + " | ".join(
        f"{s} @{b}" for s in ("rtune CmaEs", "cmaes library", "Optuna CmaEsSampler") for b in budgets)
    print(header + " |")
    print("|---|--:|" + "--:|" * (3 * len(budgets)))
    for function in functions:
        for d in dims:
            cells = []
            for s in ("rtune CmaEs", "cmaes library", "Optuna CmaEsSampler"):
                for b in budgets:
                    lo, mid, hi = quartiles([c[b - 1] for c in curves[(s, function, d)][0]])
                    cells.append(f"{mid:.3g} [{lo:.3g}, {hi:.3g}]")
            print(f"| {function} | {d} | " + " | ".join(cells) + " |")
    print("\nseconds per suggestion (median over runs, all functions):")
    for s in ("rtune CmaEs", "cmaes library", "Optuna CmaEsSampler"):
        per = [sec / args.trials for (n, _, _), (_, secs) in curves.items() if n == s for sec in secs]
        print(f"  {s}: {statistics.median(per) * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
