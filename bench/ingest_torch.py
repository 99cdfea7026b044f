"""Ingest throughput of PyTorch over the same parquet file as bench/programs/ingest.rs: the file
read with pyarrow into a float32 [rows, cols] tensor, then one shuffled epoch through a
DataLoader (batch 256, one process, one torch thread), `--runs` times. Two loaders: the default
one over a TensorDataset (one __getitem__ per row, collated), and one with a BatchSampler
(a whole batch indexed at once), the fastest plain DataLoader setup.

Usage: python bench/ingest_torch.py [--rows 1000000] [--cols 64] [--batch 256] [--runs 5]
       [--file /tmp/rtune-ingest-1000000x64.parquet]   (run the bench_ingest example first: it
       writes the file)
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--rows", type=int, default=1_000_000)
p.add_argument("--cols", type=int, default=64)
p.add_argument("--batch", type=int, default=256)
p.add_argument("--runs", type=int, default=5)
p.add_argument("--file")
a = p.parse_args()
path = a.file or os.path.join(tempfile.gettempdir(), f"rtune-ingest-{a.rows}x{a.cols}.parquet")
torch.set_num_threads(1)


def read():
    table = pq.read_table(path)
    names = [n for n in table.column_names if n != "label"]
    x = np.stack([table.column(n).to_numpy() for n in names], axis=1).astype(np.float32, copy=False)
    y = table.column("label").to_numpy().astype(np.int64, copy=False)
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def per_row(x, y, seed):
    g = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(x, y), batch_size=a.batch, shuffle=True, generator=g)


def batched(x, y, seed):
    g = torch.Generator().manual_seed(seed)
    sampler = BatchSampler(RandomSampler(range(len(x)), generator=g), a.batch, drop_last=False)
    return DataLoader(TensorDataset(x, y), sampler=sampler, batch_size=None,
                      collate_fn=lambda b: b)


def report(name, seconds):
    rates = sorted(a.rows / s for s in seconds)
    print(f"  {name:<11} {statistics.median(rates):>12.0f} rows/s  (min {rates[0]:.0f}, max {rates[-1]:.0f})")


print(f"pytorch ({a.rows} rows x {a.cols} cols, batch {a.batch}, {a.runs} runs)")
for loader_name, make in [("DataLoader per row", per_row), ("DataLoader batch sampler", batched)]:
    reads, epochs = [], []
    for run in range(a.runs):
        t = time.perf_counter()
        x, y = read()
        reads.append(time.perf_counter() - t)
        t = time.perf_counter()
        rows = 0
        for xb, yb in make(x, y, run):
            rows += xb.shape[0]
        epochs.append(time.perf_counter() - t)
        assert rows == a.rows, rows
    print(f" {loader_name}:")
    report("read", reads)
    report("epoch", epochs)
    report("read+epoch", [r + e for r, e in zip(reads, epochs)])
