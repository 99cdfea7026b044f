#!/usr/bin/env python3
"""Ray Tune's scalability table, replayed with rtune on one machine.

Ray publishes the runtimes of five workloads (docs, "Scalability and Overhead Benchmarks for Ray
Tune"; its release tests `tune_tests/scalability_tests`), each against the minimum time the
trials' own lengths allow. This runs each at Ray's sizes (trials, results per second, nodes x
CPUs, trial length) on a simulated cluster: the real control plane, on this machine. What is
real: `rtune head`, one `rtune node` agent per node (each on a loopback address of its own,
127.0.x.y, offering the node's CPUs), their gRPC sessions, the driver (`rtune run`, through
$RTUNE_ADDRESS), its worker hub, the workers (one process per trial, forked by each agent's fork
server from the driver's binary) and every row and checkpoint written. What is simulated: the
nodes (their CPUs are declared, not there: 2 cores run them all), and the trials' work (the
`synthetic-curve` builtin sleeps between reports). The durable workload's checkpoints go to a
real S3 server (SeaweedFS) through bench/throttle's capped link.

    python3 bench/scale.py              # quick: a tenth of each trial length (and of the
                                        # bookkeeping workload's trials), about 5 minutes
    python3 bench/scale.py --full       # Ray's sizes: about 30 minutes
    python3 bench/scale.py --only bookkeeping,many_results --json scale.json

Each workload prints the observed time (from `rtune run` starting to its exit), the minimum
(ceil(trials / CPUs) x trial length), the overhead (observed / minimum - 1) beside Ray's, the
driver's peak memory, and the CPU seconds of the driver, the head and the agents.
"""

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

# Ray's table: trials, results per second per trial, nodes, CPUs per node, trial length (s),
# Ray's observed time and the minimum (s).
WORKLOADS = {
    "bookkeeping": dict(trials=10_000, rate=1.0, nodes=1, cpus=16, length=1.0,
                        ray=715.27, ray_min=625.0, about="10,000 trials of 1 s, 1 result each"),
    "many_trials": dict(trials=1_000, rate=0.1, nodes=16, cpus=64, length=100.0,
                        ray=168.18, ray_min=100.0,
                        about="result throughput, many trials: 1,000 at once"),
    "many_results": dict(trials=96, rate=10.0, nodes=1, cpus=96, length=100.0,
                         ray=168.94, ray_min=100.0,
                         about="result throughput, many results: 96 trials x 10 results/s"),
    "network": dict(trials=200, rate=1.0, nodes=200, cpus=2, length=300.0,
                    ray=2280.82, ray_min=300.0,
                    about="network overhead: 200 trials on 200 nodes"),
    "durable": dict(trials=16, rate=10 / 60, nodes=16, cpus=2, length=300.0,
                    ray=392.42, ray_min=300.0, checkpoint_mb=10, checkpoint_every=2,
                    about="durable trainable: a 10 MB checkpoint every 2nd result (12 s) "
                    "to S3 through a capped link, 2 kept"),
}


def log(text):
    print(text, file=sys.stderr, flush=True)


def rtune_binary(given):
    if given:
        path = os.path.abspath(given)
        return path, next((b for b in ("release", "debug") if f"/{b}/" in path), "given")
    for build in ("release", "debug"):
        path = os.path.join(ROOT, "target", build, "rtune")
        if os.path.exists(path):
            return path, build
    sys.exit("no rtune binary: `cargo build --release --bin rtune` (or give --rtune PATH)")


def proc_stat(pid):
    """(CPU seconds, resident bytes) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[21]) * os.sysconf("SC_PAGE_SIZE")


def children_of(pid):
    """The processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def node_ip(n):
    """The loopback address of simulated node n (1-based): 127.0.1.1, ... 127.0.1.250, 127.0.2.1."""
    return f"127.0.{1 + (n - 1) // 250}.{1 + (n - 1) % 250}"


class Cluster:
    """An `rtune head` and `nodes` agents of `cpus` CPUs each, killed on close."""

    def __init__(self, rtune, nodes, cpus, logs, env):
        self.rtune, self.procs = rtune, []
        head = subprocess.Popen([rtune, "head", "--port", "0"], stdout=subprocess.PIPE,
                                stderr=open(os.path.join(logs, "head.log"), "w"), text=True)
        self.head = head
        self.procs.append(head)
        line = head.stdout.readline().strip()
        prefix = "rtune head listening on "
        if not line.startswith(prefix):
            self.close()
            raise RuntimeError(f"the head said {line!r}")
        self.address = line[len(prefix):]
        agents_log = open(os.path.join(logs, "agents.log"), "w")
        self.agents = []
        for n in range(1, nodes + 1):
            agent = subprocess.Popen(
                [rtune, "node", "--address", self.address, "--num-cpus", str(cpus),
                 "--num-gpus", "0", "--node-ip", node_ip(n)],
                stdout=subprocess.DEVNULL, stderr=agents_log, env=env)
            self.agents.append(agent)
            self.procs.append(agent)
        deadline = time.time() + 60 + nodes
        while self.alive() < nodes:
            if time.time() > deadline:
                self.close()
                raise RuntimeError(f"only {self.alive()} of {nodes} agents joined the head")
            time.sleep(0.5)

    def status(self):
        out = subprocess.run([self.rtune, "status", "--address", self.address, "--format",
                              "json"], capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    def alive(self):
        return sum(1 for n in self.status()["nodes"] if n["alive"])

    def cpu_seconds(self):
        """CPU seconds so far of the head, and of the agents with their fork servers (not the
        workers: their sleeps are the trials')."""
        head = (proc_stat(self.head.pid) or (0, 0))[0]
        agents = 0.0
        for agent in self.agents:
            agents += (proc_stat(agent.pid) or (0, 0))[0]
            # Its direct children: its fork servers (workers are theirs).
            for child in children_of(agent.pid):
                agents += (proc_stat(child) or (0, 0))[0]
        return head, agents

    def close(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def sweep_file(folder, name, w, trials, length, storage):
    iterations = max(1, round(length * w["rate"]))
    sleep_s = length / iterations
    every = w.get("checkpoint_every", 0)
    lines = [
        f'name = "{name}"', f'storage_path = "{storage}"',
        "[trainable]", 'builtin = "synthetic-curve"',
        "[scaling]", "num_workers = 1",
        "[param_space]", "rate = 0.5", "plateau = 1.0", "noise = 0.01",
        f"iterations = {iterations}", f"sleep_s = {sleep_s}",
        f"checkpoint_every = {every}",
        f"checkpoint_kb = {w.get('checkpoint_mb', 0) * 1024}",
        "seed = { randint = [0, 1000000000] }",
        "[tune]", 'metric = "score"', 'mode = "max"', 'search = "random"',
        f"num_samples = {trials}", f"max_concurrent_trials = {w['nodes'] * w['cpus']}",
        "[run]",
    ]
    if every:
        lines.append('checkpoint = { num_to_keep = 2, score_attribute = "score", '
                     'score_order = "max" }')
    path = os.path.join(folder, f"{name}.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def run_workload(rtune, name, w, quick, keep):
    scale = 0.1 if quick else 1.0
    length = w["length"] * scale
    # Quick mode: a tenth of the trial lengths; the bookkeeping workload, whose trials are one
    # result long already, keeps its 1 s and runs a tenth of the trials instead.
    trials = w["trials"]
    if quick and name == "bookkeeping":
        length, trials = w["length"], trials // 10
    slots = w["nodes"] * w["cpus"]
    minimum = math.ceil(trials / slots) * length
    folder = tempfile.mkdtemp(prefix=f"rtune-scale-{name}-")
    env = dict(os.environ)
    storage = os.path.join(folder, "results")
    if name == "durable":
        import suite
        link = suite.store_link()
        env.update(suite.store_env(link))
        storage = f"s3://bench/scale-{int(time.time())}"
    log(f"{name}: {trials} trials of {length:g} s on {w['nodes']} x {w['cpus']} CPUs "
        f"(minimum {minimum:g} s)")
    # The agents' environment is their workers': the store's credentials (a real node has its
    # own).
    cluster = Cluster(rtune, w["nodes"], w["cpus"], folder, env)
    try:
        # The driver's staging of a store's experiment (and anything else it caches) stays in
        # the workload's folder.
        env = dict(env, RTUNE_ADDRESS=cluster.address, RTUNE_CACHE=os.path.join(folder, "cache"))
        file = sweep_file(folder, name, w, trials, length, storage)
        head0, agents0 = cluster.cpu_seconds()
        started = time.time()
        out = open(os.path.join(folder, "run.log"), "w")
        driver = subprocess.Popen([rtune, "run", file, "--no-tui"], stdout=out,
                                  stderr=subprocess.STDOUT, env=env, cwd=folder)
        peak, cpu, samples = 0, 0.0, []

        def watch():
            nonlocal peak, cpu
            while driver.poll() is None:
                stat = proc_stat(driver.pid)
                if stat:
                    cpu, rss = stat
                    peak = max(peak, rss)
                    samples.append((time.time() - started, rss))
                time.sleep(1.0)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        code = driver.wait()
        observed = time.time() - started
        watcher.join()
        head1, agents1 = cluster.cpu_seconds()
        status = cluster.status()
        if code != 0:
            tail = open(os.path.join(folder, "run.log")).read()[-3000:]
            raise RuntimeError(f"{name}: rtune run exited {code}:\n{tail}")
        left = status["placement_groups"]
        busy = [n["id"] for n in status["nodes"] if n["free"] != n["total"] or not n["alive"]]
        if left or busy:
            raise RuntimeError(f"{name}: after the sweep the head holds {len(left)} placement "
                               f"group(s), and node(s) {busy} are not free or not alive")
        rows = count_rows(storage) if not storage.startswith("s3://") else None
    finally:
        cluster.close()
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    # The driver's memory through the run (flat, or growing with trials?): at a quarter, half,
    # three quarters and 95% of it (the end reads the whole experiment back for its table).
    def rss_at(share):
        at = [rss for t, rss in samples if t >= observed * share][:1]
        return round(at[0] / 2**20, 1) if at else None
    return dict(
        workload=name, about=w["about"], trials=trials, nodes=w["nodes"], cpus=w["cpus"],
        trial_length_s=length, results_per_s=w["rate"], observed_s=round(observed, 2),
        minimum_s=minimum, overhead=round(observed / minimum - 1, 4),
        ray_observed_s=w["ray"], ray_minimum_s=w["ray_min"],
        ray_overhead=round(w["ray"] / w["ray_min"] - 1, 4),
        driver_peak_mb=round(peak / 2**20, 1),
        driver_mb_at={f"{int(100 * q)}%": rss_at(q) for q in (0.25, 0.5, 0.75, 0.95)},
        driver_cpu_s=round(cpu, 1), head_cpu_s=round(head1 - head0, 1),
        agents_cpu_s=round(agents1 - agents0, 1), rows=rows,
        folder=folder if keep else None,
    )


def count_rows(storage):
    """Rows in every trial's result.json under the experiment folder."""
    total = 0
    for experiment in os.listdir(storage):
        base = os.path.join(storage, experiment)
        for trial in os.listdir(base):
            path = os.path.join(base, trial, "result.json")
            if os.path.exists(path):
                with open(path) as f:
                    total += sum(1 for _ in f)
    return total


def table(results, build, quick):
    lines = [
        f"rtune {build} build, {'quick (a tenth of each trial length)' if quick else 'full'} "
        f"mode, {platform.node()}: {os.cpu_count()} cores",
        "",
        "| workload | trials | nodes x CPUs | trial length | minimum | rtune | overhead "
        "| Ray's overhead | driver peak |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        lines.append(
            f"| {r['workload']} | {r['trials']:,} | {r['nodes']} x {r['cpus']} "
            f"| {r['trial_length_s']:g} s | {r['minimum_s']:g} s | {r['observed_s']:.1f} s "
            f"| {100 * r['overhead']:.1f}% | {100 * r['ray_overhead']:.0f}% "
            f"| {r['driver_peak_mb']:.0f} MB |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="Ray's sizes (default: quick)")
    parser.add_argument("--only", default="", help=f"some of {', '.join(WORKLOADS)}")
    parser.add_argument("--rtune", default="", help="the rtune binary (default: target/...)")
    parser.add_argument("--json", default="", help="write the figures here too")
    parser.add_argument("--keep", action="store_true", help="keep each workload's folder")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"--only: unknown workload(s) {unknown}; the workloads are "
                     f"{', '.join(WORKLOADS)}")
    rtune, build = rtune_binary(args.rtune)
    quick = not args.full
    results = []
    for name in names:
        r = run_workload(rtune, name, WORKLOADS[name], quick, args.keep)
        log(json.dumps(r))
        results.append(r)
    print(table(results, build, quick))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"build": build, "quick": quick, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
