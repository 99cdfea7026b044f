"""Alternates benchmark configurations ROUNDS times and prints, per configuration and size,
the median over rounds of each round's median bandwidth and CPU per call. Alternating makes
every configuration see the same (noisy, shared) machine.

Usage: python3 bench/ab.py ROUNDS 'label=command' ['label=command' ...]
e.g.   python3 bench/ab.py 5 'ring=target/release/examples/bench_allreduce --runs 15' \
         'gloo=.venv/bin/python bench/gloo_allreduce.py --runs 15'
"""

import re
import shlex
import statistics
import subprocess
import sys

LINE = re.compile(r"^\s*([\d.]+) MB .*algbw\s+([\d.]+) GB/s.*cpu/call\s+([\d.]+) ms")


def main():
    rounds = int(sys.argv[1])
    configs = [a.split("=", 1) for a in sys.argv[2:]]
    results = {}  # (label, size) -> [(gbps, cpu_ms)]
    for r in range(rounds):
        for label, cmd in configs:
            out = subprocess.run(shlex.split(cmd), capture_output=True, text=True, check=True)
            for line in out.stdout.splitlines():
                m = LINE.match(line)
                if m:
                    results.setdefault((label, float(m[1])), []).append(
                        (float(m[2]), float(m[3])))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    sizes = sorted({s for _, s in results})
    print(f"{'config':<16}" + "".join(f"{f'{s:g} MB':>26}" for s in sizes))
    for label, _ in configs:
        cells = []
        for s in sizes:
            v = results.get((label, s), [])
            gb = statistics.median(x[0] for x in v)
            cpu = statistics.median(x[1] for x in v)
            cells.append(f"{gb:>7.3f} GB/s {cpu:>7.2f} ms cpu")
        print(f"{label:<16}" + "".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
