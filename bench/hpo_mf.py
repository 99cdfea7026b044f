"""rtune's multi-fidelity schedulers against Syne Tune's and DEHB's on mfhpo-benchmark-api's
synthetic MF-Hartmann-6 and MF-Branin, in simulated time (`make bench-hpo`, its multi-fidelity
half): rtune's ASHA, HyperBand, BOHB and TPE + ASHA (`target/release/examples/mf_vs`) beside
Syne Tune 0.16's ASHA and BOHB and the `dehb` package (DEHB 0.1.2), 1 and 4 workers, 30 seeds.

Its Python is a venv of its own, `.venv-hpo` (DEHB 0.1.2 needs numpy<2), which `make bench-hpo`
makes with the Makefile's HPO_PEERS (syne-tune==0.16.0 DEHB==0.1.2 mfhpo-benchmark-api==2.2.2
ConfigSpace==1.2.2 numpy==1.26.4 huggingface_hub==0.36.0, and SMAC3's for bench/smac_peers.py).
huggingface_hub: Syne Tune's blackbox_repository package imports it, needed only for
--syne-tune-backend below; Syne Tune 0.16 pulls xgboost, statsmodels, scikit-learn and pandas.

Tasks. `mf-hartmann6`: MFHartmann(dim=6, fidel_dim=1, min_fidel=11, max_fidel=99,
runtime_factor=3600, seed=<run seed>) (bias 0.1, noise sd sqrt(0.05)); `mf-branin`:
MFBranin(fidel_dim=1, min_fidel=11, max_fidel=99, runtime_factor=3600, seed=<run seed>) (noise
sd sqrt(0.05)). Search space x0..x{d-1} uniform in [0, 1]. The package evaluates everything:
`bench(config, fidels={"z0": f})` gives a noisy loss (a fresh draw from the instance's
RandomState, seeded with the run seed, at every call) and runtime(f), the seconds to train to
epoch f from scratch (3600 at f = 99; runtime(11) is 551 s on Hartmann-6, 307 s on Branin).

Fidelities and cost. A trial reports at epochs 11, 22, ..., 99 in order; every scheduler's rungs
are 11, 33, 99 (reduction factor 3). Going on from epoch f1 to f2 costs runtime(f2) -
runtime(f1); a fresh evaluation at f (the `dehb` package's kind) costs runtime(f) whole.
W workers (1 or 4), simulated budget T = 100 * 3600 s for both W; regret reported at T/10, T/4,
T/2 and T. Results after T are dropped; a job still running at T counts for nothing.

Incumbent (one rule for every system, from its stream of results in simulated-time order): the
best noisy loss among the results at the largest epoch any trial has reached so far; its regret
is the noiseless loss of that configuration at f = 99 (the package's `deterministic=True`
instance) minus the optimum (Hartmann-6 -3.32237, Branin 0.397887). A trajectory has a point
[t, regret] each time that regret changes; at a budget before a run's first result (only
T/10 = 36,000 s could be, and no run is that slow) the run counts with its first point's
regret. "Full-fidelity equivalents": the epochs a run trained by T over 99 (a continued trial
adds 11 per report, a `dehb` job its whole fidelity, retraining included); the median over the
seeds.

The peers, what each one really is (Syne Tune 0.16.0 read at its source):
- "Syne Tune ASHA": `baselines.ASHA(metric="loss", time_attr="epoch", max_t=99,
  grace_period=11, reduction_factor=3, random_seed=seed)`: asynchronous successive halving, the
  STOPPING variant (Ray Tune's): a trial reaching a rung goes on if its loss is in the top 1/3
  of those recorded there so far (the first at a rung always goes on), else stops; it never
  pauses and so never resumes (0.16 has no promotion type and no synchronous HyperBand).
  Random configurations, drawn with numpy's global RNG (seeded here per run: `random_seed`
  alone does not fix them).
- "Syne Tune BOHB": `baselines.BOHB(...)` with the same arguments: the same stopping ASHA with a
  "kde" searcher behind `LastValueMultiFidelitySearcher`: after 5 trials have reported, every
  suggestion refits one TPE-like pair of KDEs (15% good, statsmodels, 1/3 of suggestions random)
  on the LAST reported loss of every trial, whatever epoch that was, not on one budget's
  results as the BOHB paper's does. Asynchronous, stopping.
- "Syne Tune DEHB": there is none in 0.16.0. `syne_tune.optimizer.baselines.DEHB` (a SYNCHRONOUS
  geometric HyperBand with a DE searcher) was last in 0.13.0; 0.14.0 dropped the baseline and
  0.15.0 the module. None is run here.
- "DEHB": the `dehb` package 0.1.2, `DEHB(cs, min_fidelity=11, max_fidelity=99, eta=3,
  n_workers=1, seed=seed)` (defaults otherwise: mutation 0.5, crossover 0.5, rand1_bin,
  "immediate" async strategy), driven by ask/tell: a free worker asks for a job, the job runs
  runtime(f) simulated seconds and is told its loss (cost runtime(f)) when it ends. Its rungs are
  11, 33, 99; its brackets are synchronous successive halving, but it starts a new bracket
  whenever the open ones wait on running jobs, so W workers stay busy. n_workers=1 only keeps
  the package from starting a Dask cluster; up to W jobs are outstanding at once all the same.

Simulator. By default an exact event-driven one written here around Syne Tune's scheduler
objects, as its Tuner drives them (suggest, on_trial_add, on_trial_result; on STOP or PAUSE
on_trial_remove; on_trial_complete after a last result it let CONTINUE; a paused trial resumes
from its epoch paying only the increment): no time passes while a scheduler thinks, a freed
worker starts its next trial at once. `--syne-tune-backend` runs Syne Tune's two systems
through Syne Tune's own simulator instead (Tuner + UserBlackboxBackend + SimulatorCallback, the
blackbox giving cumulative elapsed time for epochs 11..99): on resuming a paused trial that
backend drops the results up to the paused epoch and subtracts the paused epoch's elapsed time,
so it too pays only the increment (moot in 0.16: nothing pauses). It draws a trial's noisy
losses for all nine epochs when the trial starts. It is not exact: the Tuner
polls every 5 simulated seconds and the backend adds 0.05 s delays, so a stop or a start
waits up to about 5 s (1-3% of a rung on these tasks), and the real seconds a scheduler takes
pass in simulated time too (not reproducible to the digit). Runs from it are cached apart.

Output: per task and W, IQM [bootstrap 95%] of the regret over the seeds (2,000 resamples) at
each budget, the median full-fidelity equivalents and the median CPU seconds a peer's run took
(for comparing only); then each system's mean rank by IQM at T over the task x W pairs (1 is
best; ties share). rtune's runs come from `mf_vs --seeds N --workers W --tasks ...` (JSON lines
{"system", "task", "workers", "seed", "trajectory"}, and "epochs", the epochs trained by T, if
it gives them); the peers' cached lines have the same shape plus "epochs", "seconds" (CPU) and
"simulator". Before anything runs, `mf_vs --check` points (task, x, epoch, loss, runtime) are
checked against the package's deterministic values (relative tolerance 1e-9).

Usage (`nice -n 19` for long runs: the CPU is shared):
    .venv-hpo/bin/python bench/hpo_mf.py [--seeds 30] [--workers 1,4]
        [--only mf-hartmann6,mf-branin] [--jobs 2] [--cache FILE] [--rtune PATH | --no-rtune]
        [--syne-tune-backend]
"""
import argparse
import contextlib
import datetime
import heapq
import io
import json
import logging
import math
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import bootstrap, cached_runs, iqm  # noqa: E402

# benchmark_apis warns at import that its table benchmarks' extras are missing (unused here).
warnings.filterwarnings("ignore", message=".*requirements not found")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCHS = [11 * i for i in range(1, 10)]  # the reports: 11, 22, ..., 99
MIN_F, MAX_F, ETA = 11, 99, 3
HORIZON = 100 * 3600.0  # T, simulated seconds, for every W
BUDGETS = [("T/10", HORIZON / 10), ("T/4", HORIZON / 4), ("T/2", HORIZON / 2), ("T", HORIZON)]
TASKS = ["mf-hartmann6", "mf-branin"]
DIM = {"mf-hartmann6": 6, "mf-branin": 2}
OPTIMUM = {"mf-hartmann6": -3.32237, "mf-branin": 0.397887}
RTUNE = ["rtune ASHA", "rtune HyperBand", "rtune BOHB", "rtune TPE + ASHA"]
PEERS = ["Syne Tune ASHA", "Syne Tune BOHB", "DEHB"]
SYNE_TUNE = {"Syne Tune ASHA", "Syne Tune BOHB"}
SYSTEMS = RTUNE + PEERS


def make_bench(task, seed, deterministic=False):
    if task == "mf-hartmann6":
        from benchmark_apis.synthetic.hartmann import MFHartmann
        return MFHartmann(dim=6, fidel_dim=1, min_fidel=MIN_F, max_fidel=MAX_F,
                          runtime_factor=3600.0, seed=seed, deterministic=deterministic)
    if task == "mf-branin":
        from benchmark_apis.synthetic.branin import MFBranin
        return MFBranin(fidel_dim=1, min_fidel=MIN_F, max_fidel=MAX_F, runtime_factor=3600.0,
                        seed=seed, deterministic=deterministic)
    raise ValueError(f"unknown task {task}")


class Task:
    """One run's benchmark: noisy losses in call order, runtimes, true regrets."""

    def __init__(self, task, seed):
        self.name, self.dim = task, DIM[task]
        self.noisy = make_bench(task, seed)
        self.exact = make_bench(task, seed, deterministic=True)
        self._regret = {}

    def config(self, x):
        return {f"x{i}": float(v) for i, v in enumerate(x)}

    def loss(self, x, epoch):
        return float(self.noisy(self.config(x), fidels={"z0": int(epoch)})["loss"])

    def runtime(self, x, epoch):
        """Seconds to train to `epoch` from scratch (0 at epoch 0)."""
        if epoch == 0:
            return 0.0
        return float(self.exact(self.config(x), fidels={"z0": int(epoch)})["runtime"])

    def regret(self, x):
        key = tuple(x)
        if key not in self._regret:
            truth = self.exact(self.config(x), fidels={"z0": MAX_F})["loss"]
            self._regret[key] = float(truth) - OPTIMUM[self.name]
        return self._regret[key]


def summarise_stream(task, results):
    """The incumbent's trajectory and the epochs trained by T, from (t, order, epoch, loss, x,
    epochs trained) tuples."""
    points, top, best, epochs = [], 0, None, 0
    for t, _, epoch, loss, x, trained in sorted(results, key=lambda r: (r[0], r[1])):
        if t > HORIZON:
            break
        epochs += trained
        if epoch > top or (epoch == top and loss < best[0]):
            top, best = epoch, (loss, x)
            regret = task.regret(x)
            if points and points[-1][0] == t:  # several results at one instant: the last
                points.pop()
            if not points or points[-1][1] != regret:
                points.append([t, regret])
    return points, epochs


def x_of(config, dim):
    return [float(config[f"x{i}"]) for i in range(dim)]


def simulate(workers, start, finish):
    """Event-driven simulation with `workers` workers until T. `start(now)` gives a free worker
    its next job as (event time, payload) or None; `finish(t, payload)` handles an event and
    returns the next (time, payload) of the same job, or None when the worker is free."""
    heap, order = [], 0
    for _ in range(workers):
        job = start(0.0)
        if job is not None:
            heapq.heappush(heap, (job[0], order, job[1]))
            order += 1
    while heap:
        t, _, payload = heapq.heappop(heap)
        if t > HORIZON:
            break
        job = finish(t, payload)
        if job is None:
            job = start(t)
        if job is not None:
            heapq.heappush(heap, (job[0], order, job[1]))
            order += 1


def syne_tune_scheduler(system, task, seed):
    from syne_tune.config_space import uniform
    from syne_tune.optimizer.baselines import ASHA, BOHB
    space = {f"x{i}": uniform(0.0, 1.0) for i in range(task.dim)}
    kind = {"Syne Tune ASHA": ASHA, "Syne Tune BOHB": BOHB}[system]
    return space, kind(space, metric="loss", time_attr="epoch", max_t=MAX_F,
                       grace_period=MIN_F, reduction_factor=ETA, do_minimize=True,
                       random_seed=seed)


def run_syne_tune(system, task, seed, workers):
    """Syne Tune's scheduler in the exact event-driven simulator."""
    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer.scheduler import SchedulerDecision
    _, scheduler = syne_tune_scheduler(system, task, seed)
    trials = {}  # trial_id -> [Trial, x, last epoch reported]
    results = []

    def start(now):
        suggestion = scheduler.suggest()
        if suggestion is None:
            return None
        if suggestion.spawn_new_trial_id:
            trial_id = len(trials)
            trial = Trial(trial_id=trial_id, config=dict(suggestion.config),
                          creation_time=datetime.datetime.now())
            trials[trial_id] = [trial, x_of(trial.config, task.dim), 0]
            scheduler.on_trial_add(trial=trial)
        else:  # resume a paused trial from its last epoch
            trial_id = suggestion.checkpoint_trial_id
            if suggestion.config is not None:
                trials[trial_id][0].config = dict(suggestion.config)
                trials[trial_id][1] = x_of(suggestion.config, task.dim)
        _, x, done = trials[trial_id]
        nxt = done + 11
        return now + task.runtime(x, nxt) - task.runtime(x, done), (trial_id, nxt)

    def finish(t, payload):
        trial_id, epoch = payload
        entry = trials[trial_id]
        trial, x, done = entry
        loss = task.loss(x, epoch)
        results.append((t, len(results), epoch, loss, x, epoch - done))
        entry[2] = epoch
        result = {"loss": loss, "epoch": epoch}
        decision = scheduler.on_trial_result(trial=trial, result=result)
        if decision in (SchedulerDecision.STOP, SchedulerDecision.PAUSE):
            scheduler.on_trial_remove(trial=trial)
            return None
        if epoch >= MAX_F:
            scheduler.on_trial_complete(trial=trial, result=result)
            return None
        nxt = epoch + 11
        return t + task.runtime(x, nxt) - task.runtime(x, epoch), (trial_id, nxt)

    simulate(workers, start, finish)
    return results


def run_syne_tune_backend(system, task, seed, workers):
    """Syne Tune's scheduler in Syne Tune's own simulator (Tuner + UserBlackboxBackend)."""
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.blackbox import Blackbox
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.constants import ST_TUNER_TIME
    from syne_tune.tuner_callback import TunerCallback
    space, scheduler = syne_tune_scheduler(system, task, seed)

    class Curves(Blackbox):
        """Every epoch's noisy loss and cumulative runtime, drawn when a trial starts."""

        def __init__(self):
            super().__init__(configuration_space=space, fidelity_space={"epoch": None},
                             objectives_names=["loss", "elapsed"])

        @property
        def fidelity_values(self):
            return np.array(EPOCHS)

        def _objective_function(self, configuration, fidelity=None, seed=None):
            x = x_of(configuration, task.dim)
            if fidelity is not None:
                f = int(fidelity["epoch"])
                return {"loss": task.loss(x, f), "elapsed": task.runtime(x, f)}
            return np.array([[task.loss(x, f), task.runtime(x, f)] for f in EPOCHS])

    results, seen = [], {}

    class Record(TunerCallback):
        def on_trial_result(self, trial, status, result, decision):
            x = x_of(trial.config, task.dim)
            epoch = int(result["epoch"])
            done = seen.get(trial.trial_id, 0)
            seen[trial.trial_id] = epoch
            results.append((float(result[ST_TUNER_TIME]), len(results), epoch,
                            float(result["loss"]), x, epoch - done))

    folder = tempfile.mkdtemp(prefix="hpo-mf-st-")
    os.environ["SYNETUNE_FOLDER"] = folder
    try:
        tuner = Tuner(trial_backend=UserBlackboxBackend(blackbox=Curves(),
                                                        elapsed_time_attr="elapsed"),
                      scheduler=scheduler, n_workers=workers, sleep_time=0,
                      stop_criterion=StoppingCriterion(max_wallclock_time=HORIZON),
                      callbacks=[SimulatorCallback(), Record()], save_tuner=False,
                      results_update_interval=1e9, print_update_interval=1e9,
                      tuner_name=f"hpo-mf-{task.name}-{seed}-{workers}")
        tuner.run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def run_dehb(task, seed, workers):
    """The `dehb` package by ask/tell: each job a fresh evaluation at its fidelity."""
    import ConfigSpace as CS
    from dehb import DEHB
    cs = CS.ConfigurationSpace(seed=seed)
    cs.add([CS.UniformFloatHyperparameter(f"x{i}", 0.0, 1.0) for i in range(task.dim)])
    results = []
    folder = tempfile.mkdtemp(prefix="hpo-mf-dehb-")
    try:
        opt = DEHB(cs=cs, dimensions=task.dim, min_fidelity=MIN_F, max_fidelity=MAX_F, eta=ETA,
                   n_workers=1, seed=seed, output_path=folder, log_level="ERROR",
                   save_freq="end")

        def start(now):
            job = opt.ask()
            f = int(round(float(job["fidelity"])))
            assert f in (11, 33, 99), job["fidelity"]
            x = x_of(job["config"], task.dim)
            return now + task.runtime(x, f), (job, x, f)

        def finish(t, payload):
            job, x, f = payload
            loss = task.loss(x, f)
            results.append((t, len(results), f, loss, x, f))
            opt.tell(job, {"fitness": loss, "cost": task.runtime(x, f)})
            return None

        simulate(workers, start, finish)
    finally:
        from loguru import logger
        logger.remove()  # DEHB's file sink (and its queue thread)
        shutil.rmtree(folder, ignore_errors=True)
    return results


def peer_run(job):
    """One peer run (a pool job): its JSON line."""
    system, task_name, workers, seed, simulator = job
    logging.disable(logging.WARNING)
    # statsmodels 0.15's KDEMultivariate (Syne Tune's BOHB) warns of a future default RNG that
    # its "normal_reference" bandwidths never draw from.
    warnings.filterwarnings("ignore", category=FutureWarning)
    np.random.seed(seed)  # Syne Tune's random draws use numpy's global RNG
    random.seed(seed)
    task = Task(task_name, seed)
    began = time.process_time()  # CPU seconds: the machine may be shared
    with contextlib.redirect_stdout(io.StringIO()):  # Syne Tune's and DEHB's chatter
        if system == "DEHB":
            results = run_dehb(task, seed, workers)
        elif simulator == "syne-tune":
            results = run_syne_tune_backend(system, task, seed, workers)
        else:
            results = run_syne_tune(system, task, seed, workers)
    seconds = time.process_time() - began
    trajectory, epochs = summarise_stream(task, results)
    return {"system": system, "task": task_name, "workers": workers, "seed": seed,
            "trajectory": trajectory, "epochs": epochs, "seconds": seconds,
            "simulator": simulator if system in SYNE_TUNE else "events"}


def check_rtune(binary):
    """rtune's benchmark against the package's: loss and runtime at its fixed points."""
    out = subprocess.run([binary, "--check"], check=True, capture_output=True, text=True).stdout
    points = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not points:
        sys.exit(f"{binary} --check printed no points")
    exact = {}
    for p in points:
        if p["task"] not in exact:
            exact[p["task"]] = make_bench(p["task"], 0, deterministic=True)
        r = exact[p["task"]]({f"x{i}": float(v) for i, v in enumerate(p["x"])},
                             fidels={"z0": int(p["epoch"])})
        for key in ("loss", "runtime"):
            if not math.isclose(p[key], r[key], rel_tol=1e-9, abs_tol=1e-12):
                sys.exit(f"rtune's {p['task']} differs from mfhpo-benchmark-api's at x={p['x']}, "
                         f"epoch {p['epoch']}: {key} {p[key]!r} (rtune) vs {r[key]!r} (package)")
    print(f"rtune --check: {len(points)} points agree with the package", file=sys.stderr)


def regret_at(trajectory, t):
    """The incumbent's regret at simulated time t (before the first point: the first's)."""
    if not trajectory:
        return None
    value = trajectory[0][1]
    for at, regret in trajectory:
        if at > t:
            break
        value = regret
    return value


def fmt(v):
    return f"{v:.4f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def report(runs, tasks, workers, seeds, notes):
    """The markdown report from JSON-line runs (rtune's and the peers' alike)."""
    by = {}
    for r in runs:
        by.setdefault((r["task"], r["workers"], r["system"]), {})[r["seed"]] = r
    print(f"{seeds} seeds, simulated budget T = {HORIZON:.0f} s (100 full-fidelity "
          f"evaluations' time) for every W. Regret of the incumbent (the best noisy loss at "
          f"the largest epoch reached; its noiseless loss at epoch 99 minus the optimum), "
          f"IQM [bootstrap 95%] over the seeds; lower is better. Full-fid. eq.: epochs "
          f"trained by T / 99, median.{notes}\n")
    ranks = {}
    for task in tasks:
        for w in workers:
            print(f"### {task}, {w} worker{'s' if w > 1 else ''}\n")
            print("| system | " + " | ".join(f"@{name}" for name, _ in BUDGETS)
                  + " | full-fid. eq. | CPU s per run |")
            print("|---|" + "--:|" * (len(BUDGETS) + 2))
            finals = {}
            for system in SYSTEMS:
                got = by.get((task, w, system), {})
                mine = [got[s] for s in range(seeds) if s in got]
                if not mine:
                    continue
                cells = []
                for name, t in BUDGETS:
                    regrets = [regret_at(r["trajectory"], t) for r in mine]
                    regrets = [v for v in regrets if v is not None]
                    if not regrets:
                        cells.append("–")
                        continue
                    lo, hi = bootstrap(regrets)
                    cells.append(f"{fmt(iqm(regrets))} [{fmt(lo)}, {fmt(hi)}]")
                    if t == HORIZON and len(regrets) == seeds:
                        finals[system] = iqm(regrets)
                epochs = [r["epochs"] / MAX_F for r in mine if "epochs" in r]
                secs = [r["seconds"] for r in mine if "seconds" in r]
                name = system if len(mine) == seeds else f"{system} ({len(mine)} seeds)"
                extra = [f"{statistics.median(v):.1f}" if v else "–" for v in (epochs, secs)]
                print(f"| {name} | " + " | ".join(cells + extra) + " |")
            for system, mine in finals.items():
                better = sum(v < mine for v in finals.values())
                equal = sum(v == mine for v in finals.values())
                ranks.setdefault(system, []).append(1 + better + (equal - 1) / 2)
            print()
    print("### Mean rank by IQM at T over the task x W pairs (1 is best)\n")
    print("| system | mean rank | pairs |")
    print("|---|--:|--:|")
    for system in sorted(ranks, key=lambda s: statistics.mean(ranks[s])):
        print(f"| {system} | {statistics.mean(ranks[system]):.2f} | {len(ranks[system])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--workers", default="1,4")
    ap.add_argument("--only", default="", help="tasks, comma-separated")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", help="a file of the peers' runs, appended as they end: a rerun "
                    "with the same file runs only those missing")
    ap.add_argument("--rtune", default=os.path.join(ROOT, "target/release/examples/mf_vs"))
    ap.add_argument("--no-rtune", action="store_true", help="the peers only")
    ap.add_argument("--syne-tune-backend", action="store_true",
                    help="Syne Tune's systems through Syne Tune's own simulator")
    ap.add_argument("--cached-only", action="store_true",
                    help="report from the cache without running the peers' missing runs")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    tasks = [t for t in TASKS if not args.only or t in args.only.split(",")]
    if not tasks:
        sys.exit(f"--only names none of {TASKS}")
    simulator = "syne-tune" if args.syne_tune_backend else "events"
    began = time.perf_counter()
    runs = []
    if not args.no_rtune:
        if not os.path.exists(args.rtune):
            sys.exit(f"{args.rtune} is missing: build it (cargo build --release -p "
                     f"rtune-searchers --example mf_vs) or pass --no-rtune")
        check_rtune(args.rtune)
        for w in workers:
            out = subprocess.run([args.rtune, "--seeds", str(args.seeds), "--workers", str(w),
                                  "--tasks", ",".join(tasks)], check=True, capture_output=True,
                                 text=True).stdout
            for line in out.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    if r["workers"] == w and r["task"] in tasks and r["seed"] < args.seeds:
                        runs.append(r)
        print(f"rtune: {time.perf_counter() - began:.0f} s", file=sys.stderr)
    cached = set()
    for r in cached_runs(args.cache):
        sim = r.get("simulator", "events")
        key = (r["system"], r["task"], r["workers"], r["seed"])
        if (r["task"] in tasks and r["workers"] in workers and r["seed"] < args.seeds
                and r["system"] in PEERS and key not in cached
                and sim == (simulator if r["system"] in SYNE_TUNE else "events")):
            runs.append(r)
            cached.add(key)
    # Seed by seed (a run cut short leaves whole seeds), the slowest first within a seed (BOHB
    # refits its KDEs at every suggestion), for an even pool.
    jobs = [(system, task, w, seed, simulator) for seed in range(args.seeds)
            for system in ["Syne Tune BOHB", "DEHB", "Syne Tune ASHA"]
            for w in sorted(workers, reverse=True) for task in tasks
            if (system, task, w, seed) not in cached and not args.cached_only]
    if jobs:
        cache = open(args.cache, "a") if args.cache else None
        with multiprocessing.Pool(args.jobs, maxtasksperchild=20) as pool:
            for done, r in enumerate(pool.imap_unordered(peer_run, jobs), 1):
                runs.append(r)
                if cache:
                    cache.write(json.dumps(r) + "\n")
                    cache.flush()
                if done % 20 == 0 or done == len(jobs):
                    print(f"peers: {done}/{len(jobs)} runs, {time.perf_counter() - began:.0f} s",
                          file=sys.stderr)
        if cache:
            cache.close()
    notes = ""
    if args.no_rtune:
        notes += " rtune not run (--no-rtune)."
    if args.syne_tune_backend:
        notes += " Syne Tune's systems ran in Syne Tune's own simulator (5 s polling)."
    notes += (" Syne Tune 0.16 has no DEHB (its baseline was last in 0.13.0): \"DEHB\" is the "
              "dehb package, fresh evaluations at each fidelity.")
    report(runs, tasks, workers, args.seeds, notes)
    print(f"\n(whole run: {time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
