#!/usr/bin/env bash
# A two-node Slurm cluster on this one host, for rtune's Slurm test: munged, slurmctld and two
# slurmd (nodes n1 and n2, 2 CPUs each), all as this user's own processes under DIR.
#   cluster.sh up DIR     writes DIR/slurm.conf, starts the daemons, waits for `srun -N2`
#   cluster.sh down DIR   stops them
# Clients find the cluster through SLURM_CONF=DIR/slurm.conf.
set -euo pipefail

cmd=${1:?usage: cluster.sh up|down DIR}
dir=$(realpath -m "${2:?usage: cluster.sh up|down DIR}")

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_pidfile() {
    local file=$1 pid
    [ -f "$file" ] || return 0
    pid=$(cat "$file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}

down() {
    for node in n1 n2; do stop_pidfile "$dir/slurmd-$node.pid"; done
    stop_pidfile "$dir/slurmctld.pid"
    stop_pidfile "$dir/munge/munged.pid"
}

up() {
    mkdir -p "$dir"/{state,spool,munge}
    chmod 700 "$dir/munge"
    local host user
    host=$(hostname)
    user=$(id -un)
    [ -f "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key"
    chmod 600 "$dir/munge/munge.key"
    munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed"
    cat > "$dir/slurm.conf" <<CONF
ClusterName=rtune-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=15
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=2 RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -f "$SLURM_CONF" -i
    for node in n1 n2; do slurmd -f "$SLURM_CONF" -N "$node"; done
    for _ in $(seq 100); do
        if timeout 5 srun -N2 -n2 true 2>/dev/null; then
            echo "slurm: nodes n1, n2 up (SLURM_CONF=$SLURM_CONF)"
            return 0
        fi
        sleep 0.3
    done
    echo "slurm: the cluster did not come up; logs in $dir" >&2
    tail -n 20 "$dir"/*.log >&2 || true
    return 1
}

case $cmd in
    up) up ;;
    down) down ;;
    *) echo "usage: cluster.sh up|down DIR" >&2; exit 2 ;;
esac
