#!/usr/bin/env bash
# What the ranks' step timers cost (#49): rtune's 2-worker data-parallel MLP (bench_ddp) with the
# timers on (the default) and off (RTUNE_RANK_TIMES=0), alternating, N rounds, each round in the
# other order; prints each run's per-step time and the median of the on/off ratios.
# Usage: bench/ddp_timers.sh [rounds] [bench_ddp args..]   (builds the example in release)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s libtorch >/dev/null
cargo build -q --release --example bench_ddp
rounds="${1:-6}"
shift || true
step() { grep -o 'per_step_ms [0-9.]*' | cut -d' ' -f2; }
ratios=()
for i in $(seq "$rounds"); do
  if (( i % 2 )); then
    on=$(target/release/examples/bench_ddp "$@" | step)
    off=$(RTUNE_RANK_TIMES=0 target/release/examples/bench_ddp "$@" | step)
  else
    off=$(RTUNE_RANK_TIMES=0 target/release/examples/bench_ddp "$@" | step)
    on=$(target/release/examples/bench_ddp "$@" | step)
  fi
  echo "round $i: timers on ${on} ms/step, off ${off} ms/step"
  ratios+=("$(python3 -c "print($on / $off)")")
done
python3 -c "
import statistics, sys
r = sorted(float(x) for x in sys.argv[1:])
print(f'on/off per-step time: median {statistics.median(r):.4f} (min {r[0]:.4f}, max {r[-1]:.4f}) over {len(r)} rounds')
" "${ratios[@]}"
