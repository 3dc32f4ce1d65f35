#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for running a compare plan's job array for real
# (issue 35; `vtensor compare ... --plan DIR --emit slurm`) and for its test. Debian's packages
# (slurmctld, slurmd, slurm-client, munge: tools/install-deps.sh --fuzz) with a configuration of
# its own in one folder, so that nothing of the system's (/etc/slurm, /etc/munge, a running
# munged) is read or touched:
#   - munged runs as the munge user with its own key and socket in STATE/munge;
#   - slurmctld and slurmd run as root (this script must be run as root, as CI runs it), on ports
#     of their own and on 127.0.0.1 (the host's name need not resolve), with one node of this
#     machine's cores and memory, proctrack/linuxproc and
#     task/none (no cgroups or systemd needed), select/cons_tres with memory as a resource;
#   - each daemon runs in the foreground of a background job whose pid goes to STATE/pids/, and
#     `stop` stops exactly those pids (and waits for them), never a daemon by name.
# Usage:
#   tools/slurm-local.sh start [STATE]   bring the cluster up (default STATE: build/slurm-local);
#                                        prints the line to export: SLURM_CONF=STATE/slurm.conf
#   tools/slurm-local.sh stop [STATE]    stop the daemons it started
# Exit 0 on success; 1 when a daemon does not come up (its log is printed); 2 on bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 start|stop [STATE_DIR]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
action=$1
state=$(realpath -m "${2:-build/slurm-local}")
pids=$state/pids

stop_daemons() {
  [ -d "$pids" ] || return 0
  local f pid
  for f in slurmd slurmctld munged; do  # the reverse of the start order
    [ -f "$pids/$f" ] || continue
    pid=$(cat "$pids/$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pids/$f"
  done
}

# A free TCP port on this host, at or above $1.
free_port() {
  local p=$1
  while (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

# Waits up to 30 s for a command to succeed; on failure prints the log named and returns 1.
wait_for() {
  local what=$1 log=$2
  shift 2
  for _ in $(seq 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "slurm-local: $what did not come up in 30 s; its log ($log):" >&2
  tail -n 30 "$log" >&2 || true
  return 1
}

case "$action" in
stop)
  stop_daemons
  echo "slurm-local: stopped (state kept in $state)"
  exit 0
  ;;
start) ;;
*) usage ;;
esac

[ "$(id -u)" -eq 0 ] || { echo "slurm-local: run as root (slurmd must be root to start tasks as their user)" >&2; exit 2; }
for b in munged slurmctld slurmd sbatch sinfo; do
  command -v "$b" >/dev/null || { echo "slurm-local: $b not found: tools/install-deps.sh --fuzz installs Slurm and munge" >&2; exit 2; }
done
stop_daemons # a cluster this folder started before
rm -rf "$state"
mkdir -p "$state"/{munge,ctld,spool,log,pids}
chmod 755 "$state"

# munge: its own key (1 KiB of random bytes) and socket, owned by the munge user.
head -c 1024 /dev/urandom >"$state/munge/munge.key"
chown -R munge:munge "$state/munge"
chmod 711 "$state/munge" # clients reach the socket; the key stays 0400
chmod 400 "$state/munge/munge.key"
socket=$state/munge/munge.socket
runuser -u munge -- munged --foreground --socket="$socket" --key-file="$state/munge/munge.key" \
  --pid-file="$state/munge/munged.pid" --log-file="$state/munge/munged.log" \
  --seed-file="$state/munge/munged.seed" >/dev/null 2>&1 &
echo $! >"$pids/munged"
wait_for munged "$state/munge/munged.log" munge --socket="$socket" -n || { stop_daemons; exit 1; }

host=$(hostname -s)
cpus=$(nproc)
memory_mib=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo) # 90%: the rest for the OS
ctld_port=$(free_port 16817)
slurmd_port=$(free_port $((ctld_port + 1)))
cat >"$state/slurm.conf" <<EOF
# Written by tools/slurm-local.sh: a single-node cluster of this machine.
ClusterName=vtensor-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/ctld/slurmctld.pid
SlurmdPidFile=$state/spool/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
MaxArraySize=100001
MaxJobCount=200000
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mib State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$state/slurm.conf

slurmctld -D -i -f "$SLURM_CONF" >>"$state/log/slurmctld.out" 2>&1 &
echo $! >"$pids/slurmctld"
wait_for slurmctld "$state/log/slurmctld.log" scontrol ping || { stop_daemons; exit 1; }
slurmd -D -N "$host" -f "$SLURM_CONF" >>"$state/log/slurmd.out" 2>&1 &
echo $! >"$pids/slurmd"
idle() { sinfo -h -N -o '%t' | grep -qx 'idle'; }
if ! wait_for "slurmd (node $host idle)" "$state/log/slurmd.log" idle; then
  stop_daemons
  exit 1
fi
echo "slurm-local: up: node $host, $cpus CPUs, $memory_mib MiB; state in $state"
echo "export SLURM_CONF=$SLURM_CONF"
