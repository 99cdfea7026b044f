#!/usr/bin/env bash
# rtune on a real two-node Slurm cluster (munged, slurmctld and two slurmd on this host, see
# cluster.sh), through examples/slurm/sweep.sbatch as a user submits it:
#   1. a sweep job runs to the end: both node agents join, every trial's two workers ran one on
#      each node, the agents offer what the job was given (CPUs, memory), the results are
#      complete, and no process of rtune outlives the job;
#   2. a second sweep is cancelled with scancel while it runs: the driver records it as
#      resumable, and nothing of the job is left running;
#   3. a new job resumes it: exactly num_samples trials end TERMINATED, the trials that had
#      finished keep their result files byte for byte, and no result row is lost or duplicated.
# Usage: tests/slurm/test.sh PATH/TO/rtune   (`make test-slurm` builds it and runs this)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rtune=$(realpath "${1:?usage: test.sh PATH/TO/rtune}")
work=$(mktemp -d /tmp/rtune-slurm-XXXXXX)
results=$work/results
export SLURM_CONF=$work/slurm/slurm.conf RTUNE=$rtune

fail() {
    echo "FAIL: $*" >&2
    for f in "$work"/job-*.out; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
    done
    exit 1
}

cleanup() {
    local rc=$?
    "$here/cluster.sh" down "$work/slurm" || true
    if [ "$rc" = 0 ]; then rm -rf "$work"; else echo "kept for a look: $work" >&2; fi
}
trap cleanup EXIT

# What `rtune show` says of an experiment, as "status count" lines.
statuses() {
    "$rtune" show "$1" --format json | python3 -c '
import collections, json, sys
counts = collections.Counter(t["status"] for t in json.load(sys.stdin))
for status, n in sorted(counts.items()):
    print(status, n)'
}

# No process of rtune left (zombies are already dead; the sandbox's init may reap them late).
no_rtune_left() {
    local left
    left=$(ps -eo pid=,stat=,comm=,args= \
        | awk -v exe="$rtune" '$3 == "rtune" && $2 !~ /^Z/ && index($0, exe) > 0' || true)
    [ -z "$left" ] || fail "$1: processes of rtune outlived the job: $left"
}

wait_until_gone() {
    local job=$1
    for _ in $(seq 300); do
        squeue -h -j "$job" 2>/dev/null | grep -q . || return 0
        sleep 0.2
    done
    fail "job $job still in the queue after 60 s"
}

"$here/cluster.sh" up "$work/slurm"
cd "$repo"

# 1. A whole sweep: 1 CPU and 1500 MB on each node, so each agent must offer exactly that.
echo "== 1. a sweep job to the end"
out=$work/job-1.out
NAME=whole timeout 300 sbatch --wait --cpus-per-task=1 --mem=1500 -o "$out" \
    examples/slurm/sweep.sbatch --set "storage_path=\"$results\"" --set tune.num_samples=6 \
    || fail "the sweep job failed"
grep -q "2 node agent(s) joined" "$out" || fail "the agents did not both join"
for node in n1 n2; do
    grep -q "node{name=$node}: offering 1 CPUs, GPUs \[\], 1500 MB of memory" "$out" \
        || fail "$node's agent did not offer exactly the job's 1 CPU and 1500 MB"
done
[ "$(statuses "$results/whole")" = "TERMINATED 6" ] \
    || fail "expected 6 TERMINATED trials, got: $(statuses "$results/whole")"
# Every trial's 2 workers (STRICT_SPREAD) were started by the agents of both nodes.
python3 - "$out" "$results/whole" <<'PY' || fail "trials were not placed on both nodes"
import collections, os, re, sys
out, experiment = sys.argv[1], sys.argv[2]
placed = collections.defaultdict(set)
for line in open(out):
    m = re.search(r"node\{name=(\w+)\}: started worker (.+)/\d+/(\d+) of placement group", line)
    if m:
        trial = re.sub(r"-[0-9a-f]{16}$", "", m.group(2))
        placed[trial].add(m.group(1))
trials = [d for d in os.listdir(experiment) if d.startswith("TorchTrainer_")]
assert len(trials) == 6, trials
for trial in trials:
    assert placed[trial] == {"n1", "n2"}, (trial, placed[trial], dict(placed))
print("placement: each of the 6 trials ran one worker on n1 and one on n2")
PY
no_rtune_left "after the sweep job"

# 2. A sweep cancelled while it runs.
echo "== 2. scancel a running sweep"
out=$work/job-2.out
job=$(NAME=cancelled sbatch --parsable -o "$out" examples/slurm/sweep.sbatch \
    --set "storage_path=\"$results\"" --set tune.num_samples=16)
for _ in $(seq 600); do
    grep -q "TERMINATED: " "$out" 2>/dev/null && break
    squeue -h -j "$job" | grep -q . || fail "job $job ended before a trial finished"
    sleep 0.1
done
grep -q "TERMINATED: " "$out" || fail "no trial of job $job finished within 60 s"
scancel "$job"
wait_until_gone "$job"
grep -q "stopping the sweep, resumable" "$out" || fail "the driver did not stop the sweep on SIGTERM"
grep -q "interrupted; the experiment in" "$out" || fail "the driver did not record the interruption"
no_rtune_left "after scancel"
before=$(statuses "$results/cancelled")
echo "after scancel: $(echo "$before" | tr '\n' ' ')"
finished=$(echo "$before" | awk '$1 == "TERMINATED" { print $2 }')
[ -n "$finished" ] || fail "no trial recorded as finished before the cancel"
[ "$finished" -lt 16 ] || fail "the sweep finished before it was cancelled; nothing to resume"
# The finished trials' files, to compare after the resume.
"$rtune" show "$results/cancelled" --format json | python3 -c '
import hashlib, json, os, sys
for t in json.load(sys.stdin):
    if t["status"] == "TERMINATED":
        for f in ("result.json", "progress.csv"):
            data = open(os.path.join(t["path"], f), "rb").read()
            print(t["trial_id"], f, hashlib.sha256(data).hexdigest())' > "$work/finished.sums"

# 3. A new job resumes it to the end.
echo "== 3. resume it in a new job"
out=$work/job-3.out
RTUNE_RESUME=$results/cancelled timeout 300 sbatch --wait -o "$out" examples/slurm/sweep.sbatch \
    || fail "the resume job failed"
[ "$(statuses "$results/cancelled")" = "TERMINATED 16" ] \
    || fail "expected 16 TERMINATED trials after the resume, got: $(statuses "$results/cancelled")"
"$rtune" show "$results/cancelled" --format json | python3 -c '
import hashlib, json, os, sys
sums = {}
for line in open(sys.argv[1]):
    trial, f, digest = line.split()
    sums[(trial, f)] = digest
trials = json.load(sys.stdin)
assert len(trials) == 16, len(trials)
for t in trials:
    rows = [json.loads(l) for l in open(os.path.join(t["path"], "result.json"))]
    iterations = [r["training_iteration"] for r in rows]
    assert iterations == list(range(1, len(rows) + 1)), (t["trial_id"], iterations)
    assert iterations[-1] == t["metrics"]["training_iteration"], t["trial_id"]
    csv_rows = open(os.path.join(t["path"], "progress.csv")).read().splitlines()[1:]
    assert len(csv_rows) == len(rows), (t["trial_id"], len(csv_rows), len(rows))
    for f in ("result.json", "progress.csv"):
        if (t["trial_id"], f) in sums:
            data = open(os.path.join(t["path"], f), "rb").read()
            assert hashlib.sha256(data).hexdigest() == sums[(t["trial_id"], f)], (t["trial_id"], f)
print(f"resumed: 16 trials, rows 1..n in each, {len(sums) // 2} finished trials unchanged")' \
    "$work/finished.sums" || fail "the resumed experiment's results are not exact"
no_rtune_left "after the resume job"
echo "slurm: all checks passed"
