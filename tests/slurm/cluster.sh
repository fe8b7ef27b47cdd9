#!/usr/bin/env bash
# cluster.sh - a throwaway Slurm cluster for the tests: munged + slurmctld + one slurmd per
# node, everything under one directory, loopback addresses only, stopped by PID.
# Adapted from the verified recipe in ../shared/notes/slurm-local.sh (Debian 12, slurm-wlm
# 22.05.8, munge 0.5.15, Open MPI 4.1.4 with PMIx; root, no systemd, no cgroups).
#
# Usage:
#   cluster.sh start  DIR   start a fresh cluster under DIR (keep DIR short: unix sockets
#                           live under it); writes DIR/slurm.conf and DIR/env.sh
#   cluster.sh status DIR   daemons, sinfo, squeue
#   cluster.sh wait   DIR JOBID [TIMEOUT_S]
#                           poll until the job (every task of an array) has ended; prints
#                           "JOBID STATE EXIT" per job; exit 0 if all COMPLETED, else the first
#                           non-zero job exit code (1 without one), 124 on timeout
#   cluster.sh stop   DIR   cancel jobs, stop slurmd(s), slurmctld, munged by PID, then the
#                           leftover slurmstepd/job processes of THIS cluster (found by
#                           SLURM_CONF=DIR/slurm.conf in their environment)
#
# Knobs read by start:
#   DITBATCH_SLURM_NODES  nodes (default 1): n1..nN, one slurmd each, all on this host
#                         (`slurmd -N nK`, own port, spool, TmpFS and log per node)
#   DITBATCH_SLURM_CPUS   CPUs declared per node (default 8; SlurmdParameters=config_overrides
#                         lets it exceed the real cores, so 4-8 rank jobs fit on 2 cores)
#   DITBATCH_SLURM_GPUS   fake GPUs per node (default 4), see "GPUs" below
#   DITBATCH_SLURM_TIMEOUT seconds for the nodes to come up (default 60)
#
# GPUs: the scripts in jobs/ ask for --gres=gpu:N, so the nodes declare Gres=gpu:N. Slurm
# 22.05 drops file-less GPUs ("Removing file-less GPU gpu:(null) from final GRES list", also
# with Flags=CountOnly) and rejects regular files ("not a valid character or block device"), so
# gres.conf names DIR/dev/gpu0..N-1: symlinks to /dev/null. Nothing is bound (no cgroups);
# Slurm only counts the GPUs and sets CUDA_VISIBLE_DEVICES. ditbatch sees no real GPU and
# uses its CPU backend.
#
# Other choices: MpiDefault=pmix (Open MPI has no PMI2); TmpFS=DIR/tmp/%n, which PMIx uses for
# its per-step directory (one per node, or two nodes on one host collide); AuthInfo
# cred_expire=5 (the minimum), which also sets how long a requeued job waits before it may
# start again (120 s by default); sched_interval=1 and bf_interval=1 so such a job starts as
# soon as it may; JobRequeue=1; MinJobAge=600 so finished jobs stay visible to scontrol.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*" >&2; }

cmd=${1:-}; dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then sed -n '2,24p' "$0"; exit 2; fi
mkdir -p "$dir"
DIR=$(cd "$dir" && pwd -P)
CONF=$DIR/slurm.conf
SOCK=$DIR/munge/sock/munge.socket.2

# alive = exists and is not a zombie
pid_alive() {
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
  local st; st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}
read_pid() { if [ -s "$1" ]; then tr -dc '0-9' <"$1" || true; fi; }
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
node_names() { local n; for ((n = 1; n <= $1; n++)); do echo "n$n"; done; }
# the nodes of the written config (after start)
conf_nodes() { sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF" 2>/dev/null; }

wait_nodes_up() {
  local t=${DITBATCH_SLURM_TIMEOUT:-60} want=$1 i states
  for ((i = 0; i < t * 4; i++)); do
    states=$(sinfo -h -N -o '%T' 2>/dev/null || true)
    if [ "$(grep -cE '^(idle|mixed|allocated)$' <<<"$states")" = "$want" ]; then return 0; fi
    sleep 0.25
  done
  say "nodes not up within ${t}s (states: $(tr '\n' ' ' <<<"$states"))"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  return 1
}

do_start() {
  local b
  for b in munged mungekey munge unmunge slurmctld slurmd sinfo scontrol; do
    command -v "$b" >/dev/null || die "'$b' not found (tools/install-deps.sh installs slurm-wlm and munge)"
  done
  local nodes=${DITBATCH_SLURM_NODES:-1} cpus=${DITBATCH_SLURM_CPUS:-8} gpus=${DITBATCH_SLURM_GPUS:-4}
  [ ${#SOCK} -lt 100 ] || die "DIR too long for a unix socket path ($SOCK)"
  if pid_alive "$(read_pid "$DIR/run/slurmctld.pid")"; then die "a cluster already runs under $DIR"; fi
  do_stop quiet || true
  mkdir -p "$DIR"/{munge/key,munge/sock,state,log,run,dev}
  # munged wants every folder above its socket searchable by all (mktemp -d makes 0700)
  chmod go+x "$DIR"
  local up=$DIR
  while [ "$up" != / ]; do
    up=$(dirname "$up")
    [ "$(( 0$(stat -c %a "$up") & 1 ))" = 1 ] || die "$up is not searchable by others (chmod o+x): munged refuses such a socket path"
  done
  chmod 700 "$DIR/munge/key"
  chmod 755 "$DIR/munge/sock"   # munged wants the socket folder world-executable

  # -- munge ----------------------------------------------------------------------------------
  [ -s "$DIR/munge/key/munge.key" ] || mungekey -c -k "$DIR/munge/key/munge.key"
  chmod 600 "$DIR/munge/key/munge.key"
  rm -f "$SOCK" "$SOCK.lock"
  munged --socket="$SOCK" --key-file="$DIR/munge/key/munge.key" --log-file="$DIR/log/munged.log" \
         --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/key/munged.seed" \
    || die "munged failed; see $DIR/log/munged.log"
  local i
  for ((i = 0; i < 40; i++)); do [ -S "$SOCK" ] && break; sleep 0.1; done
  munge -S "$SOCK" -n </dev/null | unmunge -S "$SOCK" >/dev/null || die "munge self-test failed"

  # -- ports: slurmctld, then one per slurmd; a free block picked at random --------------------
  # Below the kernel's ephemeral range: a port free now must stay free until the daemons bind
  # it, and any process that connects (an MPI singleton of a test running beside this one) is
  # handed ephemeral ports, which would otherwise take one of ours in between.
  local base p ok low blocks
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  blocks=$(((low - 10000) / 10 - 1))
  ((blocks >= 100)) || die "the ephemeral port range starts at $low: no room below it for the cluster's ports"
  for ((i = 0; i < 50; i++)); do
    base=$((10000 + (RANDOM % blocks) * 10))
    ok=1
    for ((p = base; p <= base + nodes; p++)); do port_in_use "$p" && { ok=''; break; }; done
    [ -n "$ok" ] && break
  done
  [ -n "$ok" ] || die "no free port block found"

  # -- fake GPUs (see the header) ---------------------------------------------------------------
  local g
  for ((g = 0; g < gpus; g++)); do ln -sfn /dev/null "$DIR/dev/gpu$g"; done

  # -- config -----------------------------------------------------------------------------------
  local host me n k=0
  host=$(hostname -s 2>/dev/null || hostname)
  me=$(id -un)
  {
    cat <<EOF
# generated by tests/slurm/cluster.sh: a throwaway cluster on loopback
ClusterName=ditbatch-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmUser=$me
SlurmdUser=$me
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK,cred_expire=5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$DIR/tmp/%n
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=300
InactiveLimit=0
# Slurm's default: on SIGTERM the ranks finish the image they are making, which on a loaded
# machine can take seconds; a shorter wait would SIGKILL them (and the batch shell) first.
KillWait=30
MinJobAge=600
JobRequeue=1
GresTypes=gpu
EOF
    for n in $(node_names "$nodes"); do
      k=$((k + 1))
      echo "NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$host Port=$((base + k)) CPUs=$cpus Gres=gpu:$gpus State=UNKNOWN"
      mkdir -p "$DIR/spool/$n" "$DIR/tmp/$n"
    done
    echo "PartitionName=debug Nodes=$(node_names "$nodes" | paste -sd,) Default=YES MaxTime=INFINITE State=UP"
  } >"$CONF"
  if [ "$gpus" -gt 0 ]; then
    echo "Name=gpu File=$DIR/dev/gpu[0-$((gpus - 1))]" >"$DIR/gres.conf"
  else
    : >"$DIR/gres.conf"
    sed -i 's/ Gres=gpu:0//' "$CONF"
  fi
  echo "export SLURM_CONF=$CONF" >"$DIR/env.sh"

  # -- daemons ----------------------------------------------------------------------------------
  export SLURM_CONF=$CONF
  slurmctld || die "slurmctld failed; see $DIR/log/slurmctld.log"
  for ((i = 0; i < 80; i++)); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
  for n in $(node_names "$nodes"); do
    slurmd -N "$n" || die "slurmd -N $n failed; see $DIR/log/slurmd-$n.log"
  done
  wait_nodes_up "$nodes" || die "the cluster did not come up"
  say "up under $DIR: munged $(read_pid "$DIR/run/munged.pid"), slurmctld $(read_pid "$DIR/run/slurmctld.pid") (port $base), slurmd $(for n in $(node_names "$nodes"); do printf '%s=%s ' "$n" "$(read_pid "$DIR/run/slurmd-$n.pid")"; done); $nodes node(s) x $cpus CPUs x $gpus GPUs"
}

# kill PID, wait up to ~5 s, then SIGKILL
stop_pid() {
  local pid=$1 i
  pid_alive "$pid" || return 0
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do pid_alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  say "killed $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?')) with SIGKILL"
}

has_our_conf() { { tr '\0' '\n' <"/proc/$1/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CONF"; }

# slurmstepds of this cluster (they inherit SLURM_CONF=$CONF from slurmd), and job processes
# whose stepd is gone (SLURM_CONF=$CONF and SLURMD_NODENAME, set only for job processes).
leftover_stepds() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ] && has_our_conf "$p" && echo "$p"
  done
  return 0
}
leftover_job_processes() {
  local p self=$$ anc=" "
  # never this script or its ancestors (a test exports SLURM_CONF too)
  while [ -n "$self" ] && [ "$self" != 0 ]; do
    anc+="$self "
    self=$(awk '{print $4}' "/proc/$self/stat" 2>/dev/null || true)
  done
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $anc == *" $p "* ]] && continue
    has_our_conf "$p" || continue
    { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -q '^SLURMD_NODENAME=' && echo "$p"
  done
  return 0
}
descendants() {  # all descendants of PID $1
  local root=$1 f st pid ppid
  declare -A kids=()
  for f in /proc/[0-9]*/stat; do
    st=$(cat "$f" 2>/dev/null) || continue
    pid=${st%% *}; st=${st##*) }; read -r _ ppid _ <<<"$st"
    kids[$ppid]+=" $pid"
  done
  local queue=("$root") cur
  while [ ${#queue[@]} -gt 0 ]; do
    cur=${queue[0]}; queue=("${queue[@]:1}")
    for pid in ${kids[$cur]:-}; do echo "$pid"; queue+=("$pid"); done
  done
}

do_stop() {
  local quiet=${1:-} i
  [ -f "$CONF" ] || { [ -n "$quiet" ] || say "no cluster config at $CONF"; return 0; }
  export SLURM_CONF=$CONF
  if pid_alive "$(read_pid "$DIR/run/slurmctld.pid")" && pid_alive "$(read_pid "$DIR/run/munged.pid")"; then
    local jobs
    jobs=$(squeue -h -o '%i' 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # again every second: a job caught while being requeued comes back as PENDING
      for ((i = 0; i < 50; i++)); do
        if ((i % 5 == 0)); then
          # shellcheck disable=SC2086  # one word per job id
          scancel --quiet $jobs 2>/dev/null || true
        fi
        sleep 0.2
        jobs=$(squeue -h -o '%i' 2>/dev/null || true)
        [ -n "$jobs" ] || break
      done
    fi
  fi
  # slurmd(s) and slurmctld together (each takes 1.5-2 s to exit on SIGTERM)
  local f pid pids=()
  for f in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid"; do
    [ -f "$f" ] || continue
    pid=$(read_pid "$f")
    if pid_alive "$pid"; then kill "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  # what the daemons left behind: stepds ignore SIGTERM; their job processes first
  local p d
  for p in $(leftover_stepds); do
    for d in $(descendants "$p"); do stop_pid "$d"; done
    if pid_alive "$p"; then kill -9 "$p" 2>/dev/null || true; say "killed orphaned slurmstepd $p"; fi
  done
  for p in $(leftover_job_processes); do
    say "stopping orphaned job process $p ($(cat "/proc/$p/comm" 2>/dev/null || echo '?'))"
    stop_pid "$p"
  done
  stop_pid "$(read_pid "$DIR/run/munged.pid")"
  rm -f "$DIR"/run/*.pid
  [ -n "$quiet" ] || say "stopped the cluster under $DIR"
}

do_status() {
  local f
  for f in "$DIR"/run/*.pid; do
    [ -f "$f" ] || continue
    if pid_alive "$(read_pid "$f")"; then echo "$(basename "$f" .pid): running ($(read_pid "$f"))"
    else echo "$(basename "$f" .pid): not running"; fi
  done
  if pid_alive "$(read_pid "$DIR/run/slurmctld.pid")"; then
    SLURM_CONF=$CONF sinfo -N -o '%N %T %c %G' || true
    SLURM_CONF=$CONF squeue || true
  fi
}

# The jobs of JOBID: one for a plain job, every task of an array job.
job_lines() { scontrol -o show job "$1" 2>/dev/null || true; }
field() { sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p" <<<" $2"; }

do_wait() {
  local jid=${1:?job id} t=${2:-300} i lines line st ec done_all rc missing=0
  export SLURM_CONF=$CONF
  for ((i = 0; i < t * 5; i++)); do
    lines=$(job_lines "$jid")
    if [ -z "$lines" ]; then
      missing=$((missing + 1)); [ $missing -lt 25 ] || { echo "$jid UNKNOWN ?"; return 1; }
      sleep 0.2; continue
    fi
    done_all=1
    while IFS= read -r line; do
      case $(field JobState "$line") in
        COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) ;;
        *) done_all='' ;;
      esac
    done <<<"$lines"
    if [ -n "$done_all" ]; then
      rc=0
      while IFS= read -r line; do
        st=$(field JobState "$line"); ec=$(field ExitCode "$line"); ec=${ec%%:*}
        echo "$(field JobId "$line") $st ${ec:-?}"
        if [ "$rc" = 0 ] && [ "$st" != COMPLETED ]; then
          if [ -n "$ec" ] && [ "$ec" != 0 ]; then rc=$ec; else rc=1; fi
        fi
      done <<<"$lines"
      return "$rc"
    fi
    sleep 0.2
  done
  echo "$jid timeout"
  return 124
}

case "$cmd" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  wait) shift 2; do_wait "$@" ;;
  *) die "unknown command '$cmd' (start|status|wait|stop)" ;;
esac
