"""The figures the search benchmarks report over seeds (bench/hpo.py, bench/hpo_mf.py): the
interquartile mean and its bootstrap interval; and the cache files of the peers' runs."""
import json
import os

import numpy as np


def cached_runs(path):
    """The runs a cache file holds, one JSON object a line (none without the file)."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def iqm(values):
    """The mean of the middle half (all of them under 4 values)."""
    v = np.sort(np.asarray(values))
    n = len(v)
    return float(v[n // 4: n - n // 4].mean()) if n >= 4 else float(v.mean())


def bootstrap(values, rounds=2000):
    """The 95% interval of the IQM over `rounds` resamples of the values (seeded: the same
    values give the same interval)."""
    rng = np.random.default_rng(0)
    v = np.asarray(values)
    means = [iqm(rng.choice(v, size=len(v), replace=True)) for _ in range(rounds)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))
