#!/usr/bin/env bash
# Start a single-node Slurm cluster on this host (Debian slurm-wlm + munge).
#
# Idempotent, needs root, reads no stdin. Installs the packages if missing, starts munged,
# writes /etc/slurm/slurm.conf for ONE node (this host, its real CPUs and memory) and one
# default partition, starts slurmctld and slurmd, and waits until a job runs.
# No accounting database: the executor plugin polls squeue, which keeps finished jobs for
# MinJobAge seconds; a job completion log (jobcomp/filetxt) keeps the history.
# Prints one line and exits 0 when Slurm is up; one line with the reason and exits 1 if not.
#
# Environment (all optional; not SLURM_* names, which srun/sbatch read themselves):
#   SANDBATCH_SLURM_PARTITION   partition name                       [main]
#   SANDBATCH_SLURM_MIN_JOB_AGE seconds squeue still lists a job      [3600]
#   SANDBATCH_SLURM_WAIT        seconds to wait for the node and srun [60]
set -euo pipefail
exec </dev/null

PARTITION="${SANDBATCH_SLURM_PARTITION:-main}"
MIN_JOB_AGE="${SANDBATCH_SLURM_MIN_JOB_AGE:-3600}"
WAIT="${SANDBATCH_SLURM_WAIT:-60}"
CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
JOBCOMP="$LOGDIR/jobcomp.log"
START=$SECONDS

die() { echo "slurm: cannot run: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (run as root or via sudo)"

# -- packages ---------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v sinfo >/dev/null || ! command -v munged >/dev/null; then
    # shellcheck source=../lib/apt.sh
    source "$(dirname "$0")/../lib/apt.sh"
    apt_install slurm-wlm munge >/tmp/slurm-apt.log 2>&1 \
        || die "apt-get install slurm-wlm munge failed (see /tmp/slurm-apt.log)"
fi

# -- munge ------------------------------------------------------------------
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- munged --force >/dev/null 2>&1 || die "munged did not start (see /var/log/munge/munged.log)"
    for _ in $(seq 1 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n | unmunge >/dev/null 2>&1 || die "munge credentials do not round-trip (see /var/log/munge/munged.log)"
fi

# -- slurm.conf -------------------------------------------------------------
NODE="$(hostname -s)"
# `slurmd -C` reports what slurmd will detect; the node line must not claim more.
HW="$(slurmd -C 2>/dev/null | head -1)" || die "slurmd -C failed"
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$HW"; }
CPUS="$(field CPUs)"; SOCKETS="$(field SocketsPerBoard)"
CORES="$(field CoresPerSocket)"; THREADS="$(field ThreadsPerCore)"; MEM="$(field RealMemory)"
[ -n "$CPUS" ] && [ -n "$MEM" ] || die "cannot read CPUs/memory from 'slurmd -C': $HW"
# Leave room for the OS and the head-node Snakemake process.
RESERVE=$(( MEM / 20 > 512 ? MEM / 20 : 512 ))
REALMEM=$(( MEM - RESERVE ))

NEW_CONF="$(cat <<EOF
# Written by scripts/services/slurm.sh: single-node cluster on $NODE.
ClusterName=sandbatch
SlurmctldHost=$NODE
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
# No cgroups in containers: track job processes through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: sacct has no data; squeue shows finished jobs for MinJobAge seconds,
# the executor plugin polls it (status_command: squeue); history goes to the jobcomp log.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
MinJobAge=$MIN_JOB_AGE
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Jobs that ask for no memory get 1 GB per CPU, not the whole node.
DefMemPerCPU=1024
ReturnToService=2
SlurmdTimeout=120
NodeName=$NODE CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$REALMEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
)"

CHANGED=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
    install -d -m 0755 /etc/slurm
    printf '%s\n' "$NEW_CONF" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
    CHANGED=1
fi
install -d -o slurm -g slurm -m 0755 /var/spool/slurmctld "$LOGDIR"
install -d -m 0755 /var/spool/slurmd
[ -e "$JOBCOMP" ] || install -o slurm -g slurm -m 0644 /dev/null "$JOBCOMP"

# -- daemons ----------------------------------------------------------------
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop() {  # stop the daemon whose pid file this script's config names
    alive "$1" || return 0
    local pid; pid="$(cat "$1")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}
node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1; }
node_ready() { case "$(node_state)" in idle|mixed|allocated|completing) return 0;; *) return 1;; esac; }

if [ "$CHANGED" = 0 ] && alive /run/slurmctld.pid && alive /run/slurmd.pid && node_ready; then
    echo "slurm: already up (node $NODE $(node_state), partition $PARTITION)"
    exit 0
fi

if [ "$CHANGED" = 1 ]; then
    stop /run/slurmd.pid
    stop /run/slurmctld.pid
fi
if ! alive /run/slurmctld.pid; then
    slurmctld >/dev/null 2>&1 || die "slurmctld did not start (see $LOGDIR/slurmctld.log)"
fi
if ! alive /run/slurmd.pid; then
    slurmd >/dev/null 2>&1 || die "slurmd did not start (see $LOGDIR/slurmd.log)"
fi

deadline=$(( SECONDS + WAIT ))
until node_ready; do
    case "$(node_state)" in
        down*|drain*|drained*|fail*)
            scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
    esac
    [ $SECONDS -lt $deadline ] || die "node $NODE is '$(node_state)' after ${WAIT}s (see $LOGDIR/slurmctld.log, $LOGDIR/slurmd.log)"
    sleep 0.5
done

out="$(timeout "$WAIT" srun -N1 -n1 -t 1 --mem=16 hostname 2>&1)" \
    || die "srun hostname failed: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
[ "$out" = "$NODE" ] || [ "$(hostname)" = "$out" ] || die "srun hostname printed '$out', expected '$NODE'"

echo "slurm: up in $(( SECONDS - START ))s (node $NODE: ${CPUS} CPUs, ${REALMEM} MB; partition $PARTITION)"
