"""Baseline for bench/programs/ddp.rs: PyTorch DDP with gloo, 2 processes, MLP 64-256-256-10,
batch 128 per worker, 1 intra-op thread per worker, 300 timed steps after 20 warm-up steps.

Prints the per-step time and the overhead (wall time from start to all processes joined, minus
rank 0's time inside the training loop), the same definitions rtune's benchmark uses.
Run with the project's venv: .venv/bin/python bench/ddp_torch.py
[--hidden 256] [--layers 2] [--steps 300] [--warmup 20]: as bench/programs/ddp.rs.
--then H,L,W,S times a second model (hidden, layers, warm-up and timed steps) in the same
processes afterwards, printed as a second line (its fit_s and overhead_s are not measured: nan);
bench/suite.py uses it to pay PyTorch's start-up once for both models.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def worker(rank, world, port, queue, args):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    configs = [(args.hidden, args.layers, args.warmup, args.steps)]
    if args.then:
        configs.append(tuple(int(v) for v in args.then.split(",")))
    for hidden, layers, warmup, steps in configs:
        result = train(rank, hidden, layers, warmup, steps)
        if rank == 0:
            queue.put(result)
    dist.destroy_process_group()


def train(rank, hidden, depth, warmup, steps):
    torch.manual_seed(rank)
    layers = [torch.nn.Linear(64, hidden)]
    for _ in range(depth - 1):
        layers += [torch.nn.ReLU(), torch.nn.Linear(hidden, hidden)]
    layers += [torch.nn.ReLU(), torch.nn.Linear(hidden, 10)]
    net = torch.nn.Sequential(*layers)
    parameters = sum(p.numel() for p in net.parameters())
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(128, 64)
    y = torch.randint(10, (128,))
    loop_start = time.perf_counter()
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    per_step_ms = (time.perf_counter() - t0) * 1e3 / steps
    loop_s = time.perf_counter() - loop_start
    return per_step_ms, loop_s, parameters


def main():
    parser = argparse.ArgumentParser()
    for name, default in [("hidden", 256), ("layers", 2), ("steps", 300), ("warmup", 20)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--then", default="", help="H,L,W,S: a second model afterwards")
    args = parser.parse_args()
    world = 2
    port = 29500 + os.getpid() % 1000
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, world, port, queue, args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    results = [queue.get() for _ in range(2 if args.then else 1)]
    per_step_ms, loop_s, parameters = results[0]
    # The first model's overhead: everything but the time inside the training loops.
    loops = sum(r[1] for r in results)
    print(f"torch  parameters {parameters}  per_step_ms {per_step_ms:.3f}  fit_s {wall:.3f}  "
          f"train_loop_s {loop_s:.3f}  overhead_s {wall - loops:.3f}")
    for per_step_ms, loop_s, parameters in results[1:]:
        print(f"torch  parameters {parameters}  per_step_ms {per_step_ms:.3f}  fit_s nan  "
              f"train_loop_s {loop_s:.3f}  overhead_s nan")
    sys.exit(0 if all(p.exitcode == 0 for p in procs) else 1)


if __name__ == "__main__":
    main()
