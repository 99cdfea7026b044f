"""Baseline for bench/programs/ddp.rs on a GPU (`--workers 1 --gpus 1`): PyTorch's own training
loop in one process on one GPU, the same MLP (64-H-..-H-10), batch, SGD, warm-up and timed
steps, the batch and the model on the device, the timed steps ended by a synchronisation.
Prints a line in bench_ddp's format (fit_s and overhead_s: nan; one process has no start-up
to compare). Run with the Python that has torch: python bench/gpu_torch.py [--hidden 256]
[--layers 2] [--steps 300] [--warmup 20] [--batch 128]
"""
import argparse
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    for name, default in [("hidden", 256), ("layers", 2), ("steps", 300), ("warmup", 20),
                          ("batch", 128)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, args.hidden)]
    for _ in range(args.layers - 1):
        layers += [torch.nn.ReLU(), torch.nn.Linear(args.hidden, args.hidden)]
    layers += [torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10)]
    net = torch.nn.Sequential(*layers).to(device)
    parameters = sum(p.numel() for p in net.parameters())
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(args.batch, 64, device=device)
    y = torch.randint(10, (args.batch,), device=device)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    loop_s = time.perf_counter() - t0
    per_step_ms = loop_s * 1e3 / args.steps
    print(f"torch  parameters {parameters}  per_step_ms {per_step_ms:.3f}  fit_s nan  "
          f"train_loop_s {loop_s:.3f}  overhead_s nan")


if __name__ == "__main__":
    main()
