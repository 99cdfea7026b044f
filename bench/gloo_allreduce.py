"""All-reduce bandwidth of torch.distributed's gloo backend between 2 processes on loopback,
for 1, 10 and 100 MB of float32 (MB = 10^6 bytes): the baseline for
`cargo run --release --example bench_allreduce` (same definitions).

Each timed run is: barrier, start clock, one all_reduce (SUM), stop clock, on rank 0.
Printed: algorithm bandwidth = buffer bytes / median time, in GB/s (10^9 B/s), and rank 0's
CPU time per call (all threads of the process, user + system; time.process_time), median.

With `--op reduce_scatter`: one reduce_scatter_tensor of the buffer into half-size pieces
instead (bandwidth: the whole buffer's bytes / median time, as for the all-reduce). With
`--op all_gather`: one all_gather_into_tensor of the ranks' half-size pieces into the buffer
(the same definition).

Usage: python bench/gloo_allreduce.py [--runs 20] [--warmup 3] [--sizes 1,10,100]
                                      [--threads 1]   # torch.set_num_threads in each rank
                                      [--op all_reduce|reduce_scatter|all_gather]
"""

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, args):
    torch.set_num_threads(args.threads)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    if rank == 0:
        print(
            f"torch {torch.__version__} gloo, {world} processes, loopback; "
            f"intra-op threads={torch.get_num_threads()} "
            f"interop threads={torch.get_num_interop_threads()}; "
            f"median of {args.runs} runs (+{args.warmup} warm-up)",
            flush=True,
        )
    for mb in args.sizes:
        n = int(mb * 1e6) // 4
        t = torch.ones(n, dtype=torch.float32)
        piece = torch.empty(n // world, dtype=torch.float32)
        times, cpu = [], []
        for i in range(args.warmup + args.runs):
            t.fill_(1.0)
            piece.fill_(rank + 1.0)
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            if args.op == "reduce_scatter":
                dist.reduce_scatter_tensor(piece, t[: piece.numel() * world], op=dist.ReduceOp.SUM)
                took, cpu_took = time.perf_counter() - t0, time.process_time() - c0
                assert piece[0].item() == 2.0 and piece[-1].item() == 2.0
            elif args.op == "all_gather":
                dist.all_gather_into_tensor(t[: piece.numel() * world], piece)
                took, cpu_took = time.perf_counter() - t0, time.process_time() - c0
                assert t[0].item() == 1.0 and t[piece.numel() * world - 1].item() == 2.0
            else:
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                took, cpu_took = time.perf_counter() - t0, time.process_time() - c0
                assert t[0].item() == 2.0 and t[-1].item() == 2.0
            if i >= args.warmup:
                times.append(took)
                cpu.append(cpu_took)
        med = statistics.median_high(times)  # same pick as the Rust side: sorted[len // 2]
        if rank == 0:
            gbps = lambda d: n * 4 / d / 1e9  # noqa: E731
            print(
                f"{mb:>6g} MB  median {med * 1e3:>8.3f} ms  algbw {gbps(med):>6.3f} GB/s  "
                f"(min {gbps(max(times)):.3f}, max {gbps(min(times)):.3f} GB/s)  "
                f"cpu/call {statistics.median_high(cpu) * 1e3:>7.3f} ms",
                flush=True,
            )
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sizes", type=lambda s: [float(x) for x in s.split(",")],
                   default=[1.0, 10.0, 100.0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--op", choices=["all_reduce", "reduce_scatter", "all_gather"],
                   default="all_reduce")
    args = p.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(2, free_port(), args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
