#!/usr/bin/env bash
# Rows per second from a parquet file (1M rows x 64 float columns by default) into tensors:
# rtune's dataset shard iterator (bench/programs/ingest.rs) against a PyTorch DataLoader over the
# same file read with pyarrow (bench/ingest_torch.py), alternately ROUNDS times so both see the
# same machine load. Usage: bench/ingest.sh [ROUNDS] [extra args for both, e.g. --rows 100000]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-1}; shift || true
PY=${PYTHON:-.venv/bin/python}
"$PY" -c "import pyarrow" 2>/dev/null || "$PY" -m pip install -q pyarrow
cargo build -q --release --example bench_ingest
for r in $(seq 1 "$ROUNDS"); do
  echo "--- round $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
  ./target/release/examples/bench_ingest "$@"
  "$PY" bench/ingest_torch.py "$@"
done
