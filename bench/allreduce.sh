#!/usr/bin/env bash
# Runs the rtune ring and torch gloo all-reduce benchmarks alternately, ROUNDS times each,
# so both see the same machine load. Usage: bench/allreduce.sh [ROUNDS] [extra args for both]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; shift || true
PY=${PYTHON:-.venv/bin/python}
cargo build -q --release --example bench_allreduce 2>/dev/null
for r in $(seq 1 "$ROUNDS"); do
  echo "--- round $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
  ./target/release/examples/bench_allreduce "$@"
  "$PY" bench/gloo_allreduce.py "$@" 2>/dev/null
done
