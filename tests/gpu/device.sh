#!/usr/bin/env bash
# Runs the GPU test group on a machine with an NVIDIA GPU and PyTorch 2.11.0 (the same CUDA
# wheel as .venv) but no Rust toolchain, from the repository root, with the binary that
# tests/gpu/pack.sh built elsewhere (gpu-pack/rtune-gpu-tests.gz). libtorch and its CUDA
# libraries are that machine's PyTorch: its torch/lib and nvidia/*/lib folders go on
# LD_LIBRARY_PATH. Extra arguments go to the test binary (a test name filter, say).
# Usage: tests/gpu/device.sh [FILTER]    (RTUNE_PYTHON: the Python with torch; default python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${RTUNE_PYTHON:-python3}
torch=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
libs="$torch/lib"
for d in "$torch"/../nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RTUNE_PYTHON="$py" RTUNE_REPO="$PWD"
bin=${TMPDIR:-/tmp}/rtune-gpu-tests
gunzip -c gpu-pack/rtune-gpu-tests.gz >"$bin"
chmod +x "$bin"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# One test at a time: they share the one GPU, and one counts trials running at once.
exec "$bin" --test-threads 1 "$@"
