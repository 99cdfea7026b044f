#!/usr/bin/env bash
# Side by side, alternating, N rounds: rtune's 2-worker data-parallel MLP against PyTorch DDP
# (gloo) from the same .venv. Usage: bench/ddp.sh [rounds]   (builds the example in release)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s libtorch >/dev/null
cargo build -q --release --example bench_ddp
for _ in $(seq "${1:-3}"); do
  target/release/examples/bench_ddp
  .venv/bin/python bench/ddp_torch.py 2>/dev/null
done
