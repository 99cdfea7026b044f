"""Two builds of rtune side by side: the command line's start-up and the trial bookkeeping.

    python3 bench/ab_builds.py BEFORE AFTER [--rounds N]

BEFORE and AFTER are folders that each hold a release `rtune` and the `sweep` bench binary
(`cargo bench -p rtune --bench sweep --no-run` prints its path), e.g. copied out of two
checkouts' target/release. Rounds alternate the builds (A B, then B A, ..); each figure is the
median over rounds with its min and max, and each ratio is taken within a round.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

from suite import bench_lines


def startup(exe, args, runs=30):
    env = dict(os.environ, RTUNE_STORAGE_PATH="/nonexistent")
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([exe] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def bookkeeping(exe, cwd):
    env = dict(os.environ, RTUNE_BENCH_NOREUSE_TRIALS="10")
    out = subprocess.run([exe, "--bench", "fit_loop", "tuner_200"], capture_output=True,
                         text=True, env=env, cwd=cwd, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{exe} failed:\n{out.stderr[-3000:]}")
    return {name: value for name, (value, _unit) in bench_lines(out.stdout).items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    builds = {"before": args.before, "after": args.after}
    figs = {name: {} for name in builds}
    empty = tempfile.mkdtemp()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rnd in range(args.rounds):
        order = list(builds.items())
        if rnd % 2:
            order.reverse()
        for name, folder in order:
            rtune = os.path.join(folder, "rtune")
            got = figs[name]
            got.setdefault("--help (ms)", []).append(startup(rtune, ["--help"]))
            got.setdefault("ls EMPTY (ms)", []).append(startup(rtune, ["ls", empty]))
            for key, value in bookkeeping(os.path.join(folder, "sweep"), repo).items():
                got.setdefault(key, []).append(value)
    for fig in figs["before"]:
        for name in builds:
            v = figs[name][fig]
            print(f"{fig:20} {name:6} median {statistics.median(v):8.2f} "
                  f"(min {min(v):.2f}, max {max(v):.2f})")
        ratios = [a / b for a, b in zip(figs["after"][fig], figs["before"][fig])]
        print(f"{fig:20} after/before per round: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
