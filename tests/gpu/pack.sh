#!/usr/bin/env bash
# Builds the GPU test group's one binary here and packs it for a GPU machine that has PyTorch
# 2.11.0 but no Rust: gpu-pack/rtune-gpu-tests.gz (stripped and gzipped, about 20 MB; the
# folder is git-ignored). tests/gpu/device.sh runs it there. Usage: tests/gpu/pack.sh
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
mkdir -p gpu-pack
strip -o gpu-pack/rtune-gpu-tests "$bin"
gzip -f gpu-pack/rtune-gpu-tests
ls -l gpu-pack/rtune-gpu-tests.gz
