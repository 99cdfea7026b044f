"""BOHB against its peers on the BOHB paper's problems with budgets (no data to download):
rtune's BOHB, random search with HyperBand and TPE with ASHA (`searchers/examples/bohb_vs.rs`),
hpbandster's BOHB (the paper's reference implementation) and DEHB, one evaluation at a time,
the same seeds. Prints the median regret of each over the seeds at budgets of 1, 2, 4, .. whole
evaluations (729 samples each), as a markdown table.

The problems (as in bohb_vs.rs): `counting_ones` (8 binary choices and 8 floats; at budget b,
each float counts as the mean of b Bernoulli draws of it; optimum -16) and `hartmann6` with
Gaussian noise of sd 0.1 * sqrt(729 / b) (optimum -3.32237). Budgets 9 to 729, eta 3. The
incumbent of every system is the best observed result at the largest budget reached so far
(hpbandster's rule); its regret is its true value minus the optimum.

Cost: rtune's HyperBand and ASHA go on with a promoted trial from where it stopped (Ray's
semantics: a paused trial resumes from its checkpoint), so a promotion costs only the added
budget. hpbandster and DEHB evaluate a promoted configuration afresh at its new budget and
count that budget whole, as their APIs define cost.

Usage (a Python with hpbandster and DEHB, e.g. `make bench-bohb`):
    python bench/bohb_peers.py [--seeds 20] [--budget 64] [--rtune PATH/TO/bohb_vs]
"""
import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_B, MAX_B, ETA = 9, 729, 3

H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
H_P = np.array([[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
                [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
                [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
                [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]])


def counting_ones_truth(cfg):
    return -(sum(int(cfg[f"c{i}"]) for i in range(8)) + sum(cfg[f"x{i}"] for i in range(8)))


def counting_ones(cfg, budget, rng):
    b = int(round(budget))
    c = sum(int(cfg[f"c{i}"]) for i in range(8))
    x = sum(rng.binomial(b, cfg[f"x{i}"]) / b for i in range(8))
    return -(c + x)


def hartmann6_truth(cfg):
    x = np.array([cfg[f"x{i}"] for i in range(6)])
    return -float(np.sum(H_ALPHA * np.exp(-np.sum(H_A * (x - H_P) ** 2, axis=1))))


def hartmann6(cfg, budget, rng):
    return hartmann6_truth(cfg) + 0.1 * np.sqrt(MAX_B / budget) * rng.standard_normal()


PROBLEMS = {
    "counting_ones": (counting_ones, counting_ones_truth, -16.0),
    "hartmann6": (hartmann6, hartmann6_truth, -3.32237),
}


def config_space(problem, seed):
    import ConfigSpace as CS
    cs = CS.ConfigurationSpace(seed=seed)
    if problem == "counting_ones":
        for i in range(8):
            cs.add(CS.CategoricalHyperparameter(f"c{i}", ["0", "1"]))
    for i in range(8 if problem == "counting_ones" else 6):
        cs.add(CS.UniformFloatHyperparameter(f"x{i}", 0.0, 1.0))
    return cs


class Trajectory:
    """The incumbent's regret after each evaluation: best at the largest budget so far."""

    def __init__(self, problem):
        _, self.truth, self.optimum = PROBLEMS[problem]
        self.spent = 0.0
        self.best = None  # (budget, loss, truth)
        self.points = []

    def add(self, cfg, budget, loss):
        self.spent += budget / MAX_B
        if self.best is None or budget > self.best[0] or (budget == self.best[0]
                                                          and loss < self.best[1]):
            truth = self.truth(cfg)
            if self.best is None or self.best[2] != truth:
                self.points.append([self.spent, truth - self.optimum])
            self.best = (budget, loss, truth)


def serpent_numpy():
    """hpbandster sends configurations through Pyro4 (serpent), which knows no numpy scalars;
    ConfigSpace 1.x gives them."""
    import serpent
    for kind, plain in ((np.str_, str), (np.int64, int), (np.float64, float), (np.bool_, bool)):
        serpent.register_class(
            kind, lambda obj, ser, out, level, plain=plain: ser._serialize(plain(obj), out, level))


def run_hpbandster(problem, seed, budget_units):
    serpent_numpy()
    import hpbandster.core.nameserver as hpns
    from hpbandster.core.worker import Worker
    from hpbandster.optimizers import BOHB
    observe, _, _ = PROBLEMS[problem]
    rng = np.random.default_rng(seed)
    np.random.seed(seed)
    trajectory = Trajectory(problem)

    class Objective(Worker):
        def compute(self, config, budget, **kwargs):
            loss = observe(config, budget, rng)
            trajectory.add(config, budget, loss)
            return {"loss": float(loss), "info": {}}

    run_id = f"bohb-{problem}-{seed}"
    ns = hpns.NameServer(run_id=run_id, host="127.0.0.1", port=None)
    host, port = ns.start()
    worker = Objective(nameserver=host, nameserver_port=port, run_id=run_id)
    worker.run(background=True)
    bohb = BOHB(configspace=config_space(problem, seed), run_id=run_id, nameserver=host,
                nameserver_port=port, min_budget=MIN_B, max_budget=MAX_B, eta=ETA)
    # Brackets until the budget is spent (each iteration of HyperBand's 5 brackets is about 25
    # whole evaluations here).
    iterations = 1
    while True:
        bohb.run(n_iterations=iterations)
        if trajectory.spent >= budget_units:
            break
        iterations += 1
    bohb.shutdown(shutdown_workers=True)
    ns.shutdown()
    return [p for p in trajectory.points if p[0] <= budget_units]


def run_dehb(problem, seed, budget_units):
    from dehb import DEHB
    observe, _, _ = PROBLEMS[problem]
    rng = np.random.default_rng(seed)
    cs = config_space(problem, seed)
    trajectory = Trajectory(problem)
    with tempfile.TemporaryDirectory() as out:
        opt = DEHB(cs=cs, dimensions=len(list(cs.values())), min_fidelity=MIN_B,
                   max_fidelity=MAX_B, eta=ETA, n_workers=1, seed=seed, output_path=out,
                   log_level="ERROR")
        while trajectory.spent < budget_units:
            job = opt.ask()
            cfg = job["config"]  # a Configuration, with a configuration space given
            if isinstance(cfg, np.ndarray):
                cfg = opt.vector_to_configspace(cfg)
            loss = observe(cfg, job["fidelity"], rng)
            trajectory.add(cfg, job["fidelity"], loss)
            opt.tell(job, {"fitness": float(loss), "cost": float(job["fidelity"])})
    return [p for p in trajectory.points if p[0] <= budget_units]


def regret_at(points, spent):
    """The regret of the incumbent after `spent` budget (None before the first result)."""
    value = None
    for at, regret in points:
        if at > spent:
            break
        value = regret
    return value


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--budget", type=int, default=64, help="whole evaluations per run")
    p.add_argument("--rtune", default=os.path.join(ROOT, "target/release/examples/bohb_vs"))
    p.add_argument("--json", help="also write every run's trajectory here")
    a = p.parse_args()
    logging.disable(logging.WARNING)
    runs = []
    out = subprocess.run([a.rtune, "--seeds", str(a.seeds), "--budget", str(a.budget)],
                         check=True, capture_output=True, text=True).stdout
    runs += [json.loads(line) for line in out.splitlines() if line.strip()]
    for problem in PROBLEMS:
        for seed in range(a.seeds):
            for system, f in (("hpbandster BOHB", run_hpbandster), ("DEHB", run_dehb)):
                runs.append({"system": system, "problem": problem, "seed": seed,
                             "trajectory": f(problem, seed, a.budget)})
            print(f"{problem} seed {seed} done", file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            for r in runs:
                f.write(json.dumps(r) + "\n")
    budgets = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= a.budget]
    systems = []
    for r in runs:
        if r["system"] not in systems:
            systems.append(r["system"])
    for problem in PROBLEMS:
        print(f"\n### {problem}: median regret over {a.seeds} seeds (quartiles)\n")
        print("| budget (whole evaluations) | " + " | ".join(systems) + " |")
        print("|--:|" + "--:|" * len(systems))
        for b in budgets:
            cells = []
            for s in systems:
                values = [regret_at(r["trajectory"], b) for r in runs
                          if r["system"] == s and r["problem"] == problem]
                values = [v for v in values if v is not None]
                if len(values) < a.seeds:
                    cells.append("–")
                    continue
                cell = f"{statistics.median(values):.3f}"
                if len(values) > 1:
                    q = statistics.quantiles(values, n=4)
                    cell += f" ({q[0]:.3f}–{q[2]:.3f})"
                cells.append(cell)
            print(f"| {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
