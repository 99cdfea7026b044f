"""The GP searcher against Optuna's, side by side: rtune's Gp, TPE and random search
(`searchers/examples/hpo_vs.rs`) and Optuna's GPSampler and TPESampler, one trial at a time, on
Branin (2-D), Hartmann-6 and Rosenbrock-5, the same seeds and budget. Prints, per function,
the median and quartiles over the seeds of the best value found after 25, 50 and 100 trials
(lower is better; the minima: Branin 0.397887, Hartmann-6 -3.32237, Rosenbrock 0), and each
searcher's seconds per suggestion.

Usage (the Python of `.venv`, which has Optuna 5.0 and PyTorch; e.g. `make bench-gp`):
    python bench/gp_peers.py [--seeds 20] [--trials 100]
"""
import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUNCTIONS = {
    "branin": [(-5.0, 10.0), (0.0, 15.0)],
    "hartmann6": [(0.0, 1.0)] * 6,
    "rosenbrock5": [(-5.0, 5.0)] * 5,
}
# More functions for `bench/hpo.py` (the same as hpo_vs.rs's).
MORE_FUNCTIONS = {
    "rosenbrock10": [(-5.0, 10.0)] * 10,
    "levy10": [(-10.0, 10.0)] * 10,
}
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8],
     [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
     [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
     [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
ALPHA = [1.0, 1.2, 3.0, 3.2]


def value(name, x):
    if name == "branin":
        b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
        return (x[1] - b * x[0] ** 2 + c * x[0] - 6) ** 2 + 10 * (1 - t) * math.cos(x[0]) + 10
    if name == "hartmann6":
        return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6)))
                    for i in range(4))
    if name.startswith("rosenbrock"):
        return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))
    if name == "levy10":
        w = [1 + (v - 1) / 4 for v in x]
        middle = sum((wi - 1) ** 2 * (1 + 10 * math.sin(math.pi * wi + 1) ** 2) for wi in w[:-1])
        return (math.sin(math.pi * w[0]) ** 2 + middle
                + (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2))
    raise ValueError(name)


def run_optuna(sampler_name, function, seed, trials):
    import optuna
    optuna.logging.set_verbosity(logging.WARNING)
    sampler = {"Optuna GPSampler": optuna.samplers.GPSampler,
               "Optuna TPESampler": optuna.samplers.TPESampler}[sampler_name](seed=seed)
    study = optuna.create_study(sampler=sampler)
    bounds = {**FUNCTIONS, **MORE_FUNCTIONS}[function]

    def objective(trial):
        return value(function, [trial.suggest_float(f"x{i}", lo, hi)
                                for i, (lo, hi) in enumerate(bounds)])

    return best_curve(study, objective, trials)


def best_curve(study, objective, trials):
    """Runs `trials` trials of the study: its best value after each, and the seconds taken."""
    started = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    seconds = time.perf_counter() - started
    best, curve = math.inf, []
    for t in study.trials:
        best = min(best, t.value)
        curve.append(best)
    return curve, seconds


def optuna_time_at(function, at, asks=5):
    """Optuna's GPSampler: seconds for each of `asks` suggestions after `at` completed random
    trials (the same protocol as `hpo_vs --time-at`)."""
    import random
    import optuna
    optuna.logging.set_verbosity(logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.GPSampler(seed=0))
    bounds = FUNCTIONS[function]
    names = [f"x{i}" for i in range(len(bounds))]
    dists = {n: optuna.distributions.FloatDistribution(lo, hi) for n, (lo, hi) in zip(names, bounds)}
    rng = random.Random(0)
    for _ in range(at):
        x = [rng.uniform(lo, hi) for lo, hi in bounds]
        study.add_trial(optuna.trial.create_trial(params=dict(zip(names, x)), distributions=dists,
                                                  value=value(function, x)))
    seconds = []
    for _ in range(asks):
        started = time.perf_counter()
        trial = study.ask()
        x = [trial.suggest_float(n, lo, hi) for n, (lo, hi) in zip(names, bounds)]
        seconds.append(time.perf_counter() - started)
        study.tell(trial, value(function, x))
    return seconds


def time_at(args):
    """`--time-at N`: each GP's seconds a suggestion after N trials, the median of the last 4 of
    5 (the first fits from scratch), side by side."""
    for function in FUNCTIONS:
        out = subprocess.run([args.rtune, "--time-at", str(args.time_at), "--functions", function],
                             check=True, capture_output=True, text=True).stdout
        ours = json.loads(out)["seconds"]
        theirs = optuna_time_at(function, args.time_at)
        print(f"| {function} | {args.time_at} | {statistics.median(ours[1:]) * 1e3:.1f} ms "
              f"(first {ours[0] * 1e3:.0f} ms) | {statistics.median(theirs[1:]) * 1e3:.1f} ms "
              f"(first {theirs[0] * 1e3:.0f} ms) |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--time-at", type=int, help="only the seconds a suggestion after N trials")
    parser.add_argument("--rtune", default=os.path.join(ROOT, "target/release/examples/hpo_vs"))
    args = parser.parse_args()
    if args.time_at:
        print("| function | trials | rtune Gp | Optuna GPSampler |\n|---|--:|--:|--:|")
        return time_at(args)
    out = subprocess.run([args.rtune, "--seeds", str(args.seeds), "--trials", str(args.trials)],
                         check=True, capture_output=True, text=True).stdout
    names = {"gp": "rtune Gp", "tpe": "rtune Tpe", "random": "rtune random"}
    curves = {}
    for line in out.splitlines():
        run = json.loads(line)
        entry = curves.setdefault((names[run["searcher"]], run["function"]), ([], []))
        entry[0].append(run["best"])
        entry[1].append(run["seconds"])
    peers = ["Optuna GPSampler", "Optuna TPESampler"]
    for function in FUNCTIONS:
        for peer in peers:
            entry = curves.setdefault((peer, function), ([], []))
            for seed in range(args.seeds):
                curve, seconds = run_optuna(peer, function, seed, args.trials)
                entry[0].append(curve)
                entry[1].append(seconds)
    searchers = ["rtune Gp", "Optuna GPSampler", "rtune Tpe", "Optuna TPESampler", "rtune random"]
    budgets = [b for b in (25, 50, args.trials) if b <= args.trials]
    print(f"{args.seeds} seeds: best value found, median [quartiles] (lower is better)\n")
    for function in FUNCTIONS:
        print(f"{function}:\n")
        print("| searcher | " + " | ".join(f"@{b}" for b in budgets) + " | s per suggestion |")
        print("|---|" + "--:|" * (len(budgets) + 1))
        for s in searchers:
            runs, secs = curves[(s, function)]
            cells = []
            for b in budgets:
                q = statistics.quantiles([c[b - 1] for c in runs], n=4, method="inclusive")
                cells.append(f"{statistics.median([c[b - 1] for c in runs]):.4g} "
                             f"[{q[0]:.4g}, {q[2]:.4g}]")
            per = statistics.median(secs) / args.trials
            print(f"| {s} | " + " | ".join(cells) + f" | {per * 1e3:.2f} ms |")
        print()


if __name__ == "__main__":
    main()
