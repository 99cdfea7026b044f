#!/usr/bin/env bash
# rtune on a real two-node Slurm cluster (munged, slurmctld and two slurmd on this host, see
# cluster.sh), through examples/slurm/sweep.sbatch as a user submits it:
#   1. a sweep job runs to the end: both node agents join, every trial's two workers ran one on
#      each node, the agents offer what the job was given (CPUs, memory), the results are
#      complete, and no process of rtune outlives the job;
#   2. a second sweep is cancelled with scancel while it runs: the driver records it as
#      resumable, nothing of the job is left running, and the job's cluster token (read from
#      an agent's environment) was written neither to its output nor to the experiment;
#   3. a new job resumes it: exactly num_samples trials end TERMINATED, the trials that had
#      finished keep their result files byte for byte, and no result row is lost or duplicated;
#   4. a job submitted with --requeue is requeued while it runs, and its second run resumes the
#      experiment by itself;
#   5. a sweep whose storage path is on an object store (moto's S3 server) ends complete there,
#      read back from its URL;
#   1b. (after 1) `rtune slurm predict` in a job predicts a file on workers on both nodes, with
#      the answers of one process;
# and, first, the mistakes: outside a job, and nodes whose agents never join.
# Usage: tests/slurm/test.sh PATH/TO/rtune   (`make test-slurm` builds it and runs this)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rtune=$(realpath "${1:?usage: test.sh PATH/TO/rtune}")
work=$(mktemp -d /tmp/rtune-slurm-XXXXXX)
results=$work/results
# Heads and agents cache the binary here, not in ~/.cache (it goes with the folder).
export SLURM_CONF=$work/slurm/slurm.conf RTUNE=$rtune RTUNE_CACHE=$work/cache

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

# No process of rtune left (zombies are already dead; the sandbox's init may reap them late):
# `rtune` itself, or `rtune-torch`, which rtune becomes for the commands that run anything.
no_rtune_left() {
    local left
    left=$(ps -eo pid=,stat=,comm=,args= \
        | awk -v exe="$rtune" '($3 == "rtune" || $3 == "rtune-torch") && $2 !~ /^Z/ && index($0, exe) > 0' || true)
    [ -z "$left" ] || fail "$1: processes of rtune outlived the job: $left"
}

wait_until_gone() {
    local job=$1 seconds=${2:-60}
    for _ in $(seq $((seconds * 5))); do
        squeue -h -j "$job" 2>/dev/null | grep -q . || return 0
        sleep 0.2
    done
    fail "job $job still in the queue after $seconds s"
}

"$here/cluster.sh" up "$work/slurm"
cd "$repo"

# Results are exact: exactly $2 trials, all TERMINATED, each trial's rows 1..n in result.json
# and progress.csv alike, and the finished trials listed in file $3 (if given) unchanged.
check_results() {
    local experiment=$1 expected=$2 sums=${3:-/dev/null}
    [ "$(statuses "$experiment")" = "TERMINATED $expected" ] \
        || fail "expected $expected TERMINATED trials, got: $(statuses "$experiment")"
    "$rtune" show "$experiment" --format json | python3 -c '
import hashlib, json, os, sys
sums = {}
for line in open(sys.argv[1]):
    trial, f, digest = line.split()
    sums[(trial, f)] = digest
trials = json.load(sys.stdin)
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
print(f"{len(trials)} trials, rows 1..n in each, {len(sums) // 2} finished earlier unchanged")' \
        "$sums" || fail "the results in $experiment are not exact"
}

# Submits a job and waits for it (polling faster than `sbatch --wait`); prints its final state.
run_job() {
    local out=$1 job
    shift
    job=$(sbatch --parsable -o "$out" "$@")
    wait_until_gone "$job" 300
    scontrol show job "$job" | grep -o "JobState=[A-Z_]*" | cut -d= -f2
}

# Submits a sweep that runs on; prints its job id once a trial of it has finished.
submit_running() {
    local out=$1 job
    shift
    job=$(sbatch --parsable -o "$out" "$@")
    for _ in $(seq 600); do
        grep -q "TERMINATED: " "$out" 2>/dev/null && { echo "$job"; return 0; }
        squeue -h -j "$job" | grep -q . || fail "job $job ended before a trial finished"
        sleep 0.1
    done
    fail "no trial of job $job finished within 60 s"
}

# 0. Mistakes get clear errors: not in a job; agents that never join (a head address no node
# reaches: a loopback port nothing listens on, so that no test traffic leaves this machine) end
# the job after --join-timeout, naming the nodes.
echo "[${SECONDS}s] == 0. errors"
set +e
message=$(env -u SLURM_JOB_ID "$rtune" slurm run examples/slurm/sweep.toml 2>&1)
code=$?
set -e
[ "$code" = 2 ] && [[ $message == *"SLURM_JOB_ID is not set"*"sbatch"* ]] \
    || fail "outside a job: exit $code, $message"
out=$work/job-0.out
nobody=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
state=$(NAME=never run_job "$out" examples/slurm/sweep.sbatch \
    --set "storage_path=\"$results\"" --head-ip "127.0.0.1:$nobody" --join-timeout 3)
[ "$state" = FAILED ] || fail "a sweep whose agents cannot reach the head ended $state"
grep -q "2 of 2 allocated node(s) never joined within 3s: n1, n2" "$out" \
    || fail "no error naming the nodes that never joined"
[ ! -e "$results/never" ] || fail "a sweep that never started left an experiment directory"
no_rtune_left "after the failed join"

# 1. A whole sweep: 1 CPU and 1500 MB on each node, so each agent must offer exactly that.
echo "[${SECONDS}s] == 1. a sweep job to the end"
out=$work/job-1.out
state=$(NAME=whole run_job "$out" --cpus-per-task=1 --mem=1500 \
    examples/slurm/sweep.sbatch --set "storage_path=\"$results\"" --set tune.num_samples=6)
[ "$state" = COMPLETED ] || fail "the sweep job ended $state"
grep -q "2 node agent(s) joined" "$out" || fail "the agents did not both join"
for node in n1 n2; do
    grep -q "node{name=$node}: offering 1 CPUs, GPUs \[\], 1500 MB of memory" "$out" \
        || fail "$node's agent did not offer exactly the job's 1 CPU and 1500 MB"
done
check_results "$results/whole" 6
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

# 1b. Batch prediction in a job: the best model of that sweep over the shipped digits, on 2
# workers of 1 CPU (one on each node), gives what one process gives.
echo "[${SECONDS}s] == 1b. batch prediction in a job"
"$rtune" export "$results/whole" --to "$work/best-model" > /dev/null
"$rtune" predict --model "$work/best-model" --input data/digits.csv.gz --no-header \
    --output "$work/one.csv" > /dev/null
out=$work/job-1b.out
state=$(MODEL=$work/best-model INPUT=data/digits.csv.gz OUTPUT=$work/across.csv \
    run_job "$out" --cpus-per-task=1 --mem=1500 examples/slurm/predict.sbatch --workers 2 \
    --no-header --part-rows 300 --batch-rows 100)
[ "$state" = COMPLETED ] || fail "the prediction job ended $state"
grep -q "predicted 1797 rows of data/digits.csv.gz into $work/across.csv on 2 workers" "$out" \
    || fail "the prediction job did not say it predicted every row on 2 workers"
for node in n1 n2; do
    grep -q "node{name=$node}: started worker" "$out" || fail "no worker of the job ran on $node"
done
python3 - "$work/one.csv" "$work/across.csv" <<'PY' || fail "the job's predictions differ"
import csv, sys
one, across = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
assert len(one) == len(across) == 1797, (len(one), len(across))
for a, b in zip(one, across):
    assert a.keys() == b.keys()
    for k in a:
        if k.startswith("prob_"):
            assert abs(float(a[k]) - float(b[k])) <= 1e-6, (k, a[k], b[k])
        else:
            assert a[k] == b[k], (k, a[k], b[k])
print("prediction: 1797 rows on 2 workers, as one process predicts them")
PY
no_rtune_left "after the prediction job"

# 2. A sweep cancelled while it runs.
echo "[${SECONDS}s] == 2. scancel a running sweep"
out=$work/job-2.out
job=$(NAME=cancelled submit_running "$out" examples/slurm/sweep.sbatch \
    --set "storage_path=\"$results\"" --set tune.num_samples=16)
# The job's cluster token, from an agent's environment: it must be written nowhere.
agent=$(pgrep -f "$rtune(-torch)? slurm node" | head -n 1) || fail "no node agent running in job $job"
token=$(tr '\0' '\n' < "/proc/$agent/environ" | sed -n 's/^RTUNE_TOKEN=//p')
[ "${#token}" -ge 16 ] || fail "the agent has no cluster token of its own"
scancel "$job"
wait_until_gone "$job"
grep -q "stopping the sweep, resumable" "$out" || fail "the driver did not stop the sweep on SIGTERM"
grep -q "interrupted: \`rtune resume $results/cancelled\` goes on with it" "$out" \
    || fail "the driver did not record the interruption"
grep -q "INTERRUPTED" "$out" || fail "the stopped trials are not shown as INTERRUPTED"
no_rtune_left "after scancel"
if grep -rqF "$token" "$out" "$results/cancelled"; then
    fail "the cluster token was written to the job's output or the experiment"
fi
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
echo "[${SECONDS}s] == 3. resume it in a new job"
out=$work/job-3.out
state=$(RTUNE_RESUME=$results/cancelled run_job "$out" examples/slurm/sweep.sbatch)
[ "$state" = COMPLETED ] || fail "the resume job ended $state"
check_results "$results/cancelled" 16 "$work/finished.sums"
no_rtune_left "after the resume job"

# 4. --requeue: the job is requeued while it runs and its second run resumes the experiment.
echo "[${SECONDS}s] == 4. a requeued job resumes its sweep"
out=$work/job-4.out
job=$(NAME=requeued submit_running "$out" --requeue --open-mode=append \
    examples/slurm/sweep.sbatch --set "storage_path=\"$results\"" --set tune.num_samples=8)
scontrol requeue "$job"
# Slurm holds a requeued job back a while (BeginTime) once its first run has ended; let it
# start sooner. (Until then it is COMPLETING, and the update would be refused.) Not at once:
# the nodes revoked the first run's credential when it ended, and they refuse a credential of
# the job made within that same second ("Job credential revoked", and the job ends for good).
released=
for _ in $(seq 300); do
    if [ "$(squeue -h -j "$job" -o %T)" = PENDING ] \
        && scontrol update "jobid=$job" StartTime=now+2 2>/dev/null; then
        released=1
        break
    fi
    sleep 0.2
done
[ -n "$released" ] || fail "the requeued job $job never became pending: $(squeue -h -j "$job")"
wait_until_gone "$job" 300
grep -q "already holds this experiment (a requeued job): resuming it" "$out" \
    || fail "the requeued job did not resume its experiment"
check_results "$results/requeued" 8
no_rtune_left "after the requeued job"
# 5. The store as the storage path: the experiment goes to an S3 server (moto's, from the
# repository's .venv) and is read back from its URL with a staging folder of its own.
echo "[${SECONDS}s] == 5. a sweep on an object store"
python=$repo/.venv/bin/python
"$python" -m moto.server -H 127.0.0.1 -p 0 > /dev/null 2> "$work/moto.log" &
moto=$!
trap 'rc=$?; kill $moto 2>/dev/null; (exit $rc); cleanup' EXIT
endpoint=
for _ in $(seq 300); do
    endpoint=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/moto.log" | head -n 1 || true)
    [ -n "$endpoint" ] && break
    sleep 0.2
done
[ -n "$endpoint" ] || fail "moto's S3 server did not start (make test-slurm installs it)"
export AWS_ENDPOINT_URL=$endpoint AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
    AWS_REGION=us-east-1
"$python" -c "import boto3; boto3.client('s3').create_bucket(Bucket='exp')"
out=$work/job-5.out
state=$(NAME=stored RTUNE_STAGING=$work/staging run_job "$out" --cpus-per-task=1 --mem=1500 \
    examples/slurm/sweep.sbatch --set 'storage_path="s3://exp/slurm"' --set tune.num_samples=4)
[ "$state" = COMPLETED ] || fail "the sweep job on the store ended $state"
RTUNE_STAGING=$work/elsewhere check_results "s3://exp/slurm/stored" 4
"$python" -c "
import boto3
keys = [o['Key'] for o in boto3.client('s3').list_objects_v2(Bucket='exp', Prefix='slurm/stored/')['Contents']]
assert any(k.endswith('/metadata.json') for k in keys), keys
assert 'slurm/stored/experiment_state.json' in keys, keys
print(len(keys), 'objects in the store')" || fail "the store does not hold the experiment"
no_rtune_left "after the sweep on the store"
echo "slurm: all checks passed"
