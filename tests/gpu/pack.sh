#!/usr/bin/env bash
# Builds the GPU test group's one binary here and packs it, stripped and xz-compressed, into
# gpu-pack/ (git-ignored) for a GPU machine that has PyTorch 2.11.0 but no Rust, where
# tests/gpu/device.sh runs it. With --bench it also packs the release `rtune`, `rtune-torch` and
# `bench_ddp` that bench/suite.py's GPU group runs (`tests/gpu/device.sh --bench` there). All of
# it is about 40 MB: gzip would make it 63 MB, too close to a device call's 64 MiB.
# Usage: tests/gpu/pack.sh [--bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
make --no-print-directory libtorch >/dev/null
bin=$(cargo test --test gpu --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu" and m.get("executable"):
        print(m["executable"])' | tail -n 1)
[ -x "$bin" ] || { echo "pack.sh: the gpu test binary was not built" >&2; exit 1; }
rm -rf gpu-pack
mkdir -p gpu-pack
pack() { strip -o "gpu-pack/$2" "$1" && xz -9 -T2 "gpu-pack/$2"; }
pack "$bin" rtune-gpu-tests
if [ "${1:-}" = --bench ]; then
    cargo build --release --bin rtune --bin rtune-torch --example bench_ddp
    pack target/release/rtune rtune
    pack target/release/rtune-torch rtune-torch
    pack target/release/examples/bench_ddp bench_ddp
fi
ls -l gpu-pack
