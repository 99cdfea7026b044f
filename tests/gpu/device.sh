#!/usr/bin/env bash
# Runs the GPU test group on a machine with an NVIDIA GPU and PyTorch 2.11.0 (the same CUDA
# wheel as .venv) but no Rust toolchain, from the repository root, with what tests/gpu/pack.sh
# packed elsewhere into gpu-pack/. libtorch and its CUDA libraries are that machine's PyTorch:
# its torch/lib and nvidia/*/lib folders go on LD_LIBRARY_PATH. With --bench (and a pack made
# with --bench), bench/suite.py's GPU group runs after the tests, its report in $OUT (or
# bench-gpu/). Other arguments go to the test binary (a test name filter, say).
# Usage: tests/gpu/device.sh [--bench] [FILTER]    (RTUNE_PYTHON: the Python with torch;
# default python3)
set -uo pipefail
cd "$(dirname "$0")/../.."
bench=0
[ "${1:-}" = --bench ] && { bench=1; shift; }
py=${RTUNE_PYTHON:-python3}
torch=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))') || exit 1
libs="$torch/lib"
for d in "$torch"/../nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RTUNE_PYTHON="$py" RTUNE_REPO="$PWD" PYTHONUNBUFFERED=1
# Python's lzma: the machine may have no xz.
unpack() {
    "$py" -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[2], "wb") as o: shutil.copyfileobj(i, o)' "$1" "$2" &&
        chmod +x "$2"
}
bin=${TMPDIR:-/tmp}/rtune-gpu-tests
unpack gpu-pack/rtune-gpu-tests.xz "$bin" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# One test at a time: they share the one GPU, and one counts trials running at once.
"$bin" --test-threads 1 "$@"
tests=$?
[ $bench = 1 ] || exit $tests
[ -f gpu-pack/bench_ddp.xz ] || { echo "device.sh: --bench needs a pack made by tests/gpu/pack.sh --bench" >&2; exit 1; }
mkdir -p target/release/examples
for b in rtune rtune-torch; do unpack gpu-pack/$b.xz target/release/$b || exit 1; done
unpack gpu-pack/bench_ddp.xz target/release/examples/bench_ddp || exit 1
"$py" bench/suite.py --only gpu --runs 5 --out "${OUT:-bench-gpu}"
suite=$?
[ $tests = 0 ] && exit $suite
exit $tests
