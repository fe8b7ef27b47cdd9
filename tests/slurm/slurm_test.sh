#!/usr/bin/env bash
# End-to-end tests of the job scripts in jobs/ on a real, throwaway Slurm cluster
# (tests/slurm/cluster.sh: munged + slurmctld + slurmd on loopback, in a temp dir).
# usage: slurm_test.sh CASE BUILD_DIR TINY_MODEL
#   CASE: lint | generate | generate-21 | installed | multinode | array | preempt | kill | badprompt | selftest
# Exit 0 pass, 1 fail, 77 skip (slurmctld not installed).
# Every case starts its own cluster and stops it (by PID) on any exit. DITBATCH_KEEP_TMP=1
# keeps the work folder.
set -euo pipefail
case_name=${1:?case} build=${2:?build dir} model=${3:?tiny model}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
jobs=$repo/jobs
exe=$(cd "$build" && pwd)/ditbatch
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
check_py=$repo/tests/mpi/check_outputs.py
cluster_sh=$here/cluster.sh
t_start=$SECONDS

note() { echo "[$((SECONDS - t_start))s] $*"; }
fail() { echo "FAIL ($case_name): $*"; exit 1; }

if [ "$case_name" = lint ]; then
  if command -v shellcheck >/dev/null; then
    shellcheck -x "$jobs"/*.sbatch "$jobs"/generate-job.sh "$here"/*.sh || fail "shellcheck"
  else
    echo "NOTE: shellcheck is not installed (tools/install-deps.sh): checking the scripts' behaviour only"
  fi
  # Each generate script runs the shared body (the Slurm cases run it under sbatch, where the body
  # is found through scontrol): a copy of the script alone fails before any work, naming what it
  # lacks; given DITBATCH_JOBS it runs the body, whose first check is the binary.
  lone=$(mktemp -d)
  trap 'rm -rf "$lone"' EXIT
  for s in generate generate-multinode generate-array; do
    cp "$jobs/$s.sbatch" "$lone/"
    rc=0
    out=$(cd "$lone" && env -u DITBATCH_JOBS -u SLURM_JOB_ID bash "./$s.sbatch" 2>&1) || rc=$?
    { [ "$rc" -eq 2 ] && grep -q "generate-job.sh (the body of this job) is neither beside" <<<"$out"; } ||
      fail "$s.sbatch alone: exit $rc, expected 2 and the missing body named: $out"
    rc=0
    out=$(cd "$lone" && env -u SLURM_JOB_ID DITBATCH_JOBS="$jobs" DITBATCH_BIN="$lone/no-such-ditbatch" \
      bash "./$s.sbatch" 2>&1) || rc=$?
    { [ "$rc" -eq 2 ] && grep -q "DITBATCH_BIN=$lone/no-such-ditbatch: not found" <<<"$out"; } ||
      fail "$s.sbatch with DITBATCH_JOBS: exit $rc, expected the body's check of DITBATCH_BIN: $out"
    rc=0
    out=$(cd "$lone" && env -u SLURM_JOB_ID DITBATCH_JOBS="$lone/nowhere" bash "./$s.sbatch" 2>&1) || rc=$?
    { [ "$rc" -eq 2 ] && grep -q "DITBATCH_JOBS=$lone/nowhere holds no generate-job.sh" <<<"$out"; } ||
      fail "$s.sbatch with a DITBATCH_JOBS that holds no body: exit $rc, expected 2 and DITBATCH_JOBS named: $out"
  done
  for s in "$jobs"/generate*.sbatch; do
    grep -q '^#SBATCH --signal=B:USR1@' "$s" || fail "$s: no --signal=B:USR1@"
    grep -q '^#SBATCH --requeue' "$s" || fail "$s: no --requeue"
    grep -q '^#SBATCH --open-mode=append' "$s" || fail "$s: no --open-mode=append"
  done
  echo "PASS: lint"
  exit 0
fi

command -v slurmctld >/dev/null || { echo "SKIP: slurmctld is not installed (tools/install-deps.sh)"; exit 77; }
[ -x "$exe" ] || fail "no ditbatch binary at $exe"
[ -f "$model" ] || fail "no tiny model at $model"

# A clean environment: nothing from an outer Slurm job or the caller's DITBATCH_* settings.
keep_tmp=${DITBATCH_KEEP_TMP:-0} limit=${DITBATCH_SLURM_TEST_LIMIT:-240}
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|DITBATCH_)' || true)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive  # the same arithmetic on every rank, any rank count
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

work=$(mktemp -d /tmp/dbslurm.XXXXXX)   # short: munge's socket lives under it
chmod 755 "$work"                        # ... and munged wants its folders searchable
# Open MPI's shared-memory transport (vader) names its segments in /dev/shm by host, job and
# local rank, and every test cluster's first job is job 1: two test clusters at once (ctest -j2)
# or the segments a killed run left behind made ranks of another cluster's job 1 open the same
# segments (a segfault in MPI_Init or MPI_Comm_split_type). Each cluster's jobs keep theirs here.
mkdir -p "$work/shm"
export OMPI_MCA_btl_vader_backing_directory=$work/shm
cl=$work/c
watchdog='' waiter=''
cleanup() {
  local rc=$? f
  set +e   # whatever fails here, the cluster must still be stopped
  trap - EXIT INT TERM
  [ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null
  [ -z "$waiter" ] || kill "$waiter" 2>/dev/null
  if [ "$rc" != 0 ]; then
    echo "---- diagnostics ($case_name, exit $rc) ----"
    for f in "$work"/*.out; do [ -f "$f" ] && echo "== $f" && tail -n 40 "$f"; done
    [ -f "$cl/slurm.conf" ] && SLURM_CONF=$cl/slurm.conf squeue 2>/dev/null
    for f in "$cl"/log/slurmctld.log "$cl"/log/slurmd-*.log; do
      [ -f "$f" ] && echo "== $f" && grep -E 'error|fatal' "$f" | grep -v 'state file\|backup state' | tail -n 15
    done
  fi
  "$cluster_sh" stop "$cl"
  if [ "$keep_tmp" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
  note "cleaned up"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'echo "FAIL ($case_name): internal time limit reached"; exit 124' TERM
# Our own deadline, below CTest's TIMEOUT, so that the cluster is stopped even then.
# (Its sleep is ended with it, and it holds no output pipe open.)
( trap 'kill "$sp" 2>/dev/null; exit 0' TERM; sleep "$limit" & sp=$!; wait "$sp"; kill -TERM $$ ) >/dev/null 2>&1 &
watchdog=$!

start_cluster() {  # start_cluster [NODES]
  DITBATCH_SLURM_NODES=${1:-1} "$cluster_sh" start "$cl" || fail "the cluster did not start"
  export SLURM_CONF=$cl/slurm.conf
  note "cluster up"
}

# prompts FILE N WORDS...: N numbered prompts
prompts() { local f=$1 n=$2 i; shift 2; for ((i = 0; i < n; i++)); do echo "$* $i"; done >"$f"; }
# env_file PROMPTS OUT ARGS... -> $work/ditbatch.env (found by the scripts as ./ditbatch.env)
env_file() {
  local p=$1 o=$2; shift 2
  {
    echo "# written by tests/slurm/slurm_test.sh"
    echo "DITBATCH_BIN=$exe"
    echo "DITBATCH_WEIGHTS=$model"
    echo "DITBATCH_PROMPTS=$p"
    echo "DITBATCH_OUT=$o"
    printf 'DITBATCH_ARGS=(%s)\n' "$*"
  } >"$work/ditbatch.env"
}
# reference OUT PROMPTS ARGS...: one plain process, outside Slurm
reference() {
  local o=$1 p=$2; shift 2
  (cd "$work" && env -u SLURM_CONF "$exe" generate --weights "$model" --prompts "$p" --out "$o" "$@") \
    >"$work/$o.log" 2>&1 || { cat "$work/$o.log"; fail "reference run"; }
  note "reference run: $(grep -o 'summary: [^;]*' "$work/$o.log")"
}
# slow_prompts FILE N F P WORDS...: N numbered prompts in a .jsonl, where image i takes 300
# steps (a quarter second or more) when i % P >= F
slow_prompts() {
  local f=$1 n=$2 fast=$3 period=$4 i; shift 4
  for ((i = 0; i < n; i++)); do
    if ((i % period >= fast)); then printf '{"prompt": "%s %d", "steps": 300}\n' "$*" "$i"
    else printf '{"prompt": "%s %d"}\n' "$*" "$i"; fi
  done >"$f"
}
# job_inputs N SIZE WORDS...: N numbered prompts in prompts.txt, their images made outside
# Slurm in ref/ (SIZE x SIZE, 3 steps), and the env file that sends a job's images to out/.
# With slow=F/P (`slow=8/40 job_inputs ...`) the prompts are slow_prompts' in prompts.jsonl:
# a signal or kill sent once the first fast images exist then always finds seconds of work
# left, however loaded the machine, instead of a job that may already have ended.
job_inputs() {
  local n=$1 px=$2 file=prompts.txt
  shift 2
  if [ -n "${slow:-}" ]; then
    file=prompts.jsonl
    slow_prompts "$work/$file" "$n" "${slow%/*}" "${slow#*/}" "$@"
  else
    prompts "$work/$file" "$n" "$@"
  fi
  local size=(--width "$px" --height "$px" --steps 3)
  reference ref "$file" "${size[@]}"
  env_file "$file" out "${size[@]}"
}
submit() { (cd "$work" && sbatch --parsable "$@") || fail "sbatch $*"; }
wait_job() {  # wait_job JOBID TIMEOUT -> "id state exit" lines in $job_result; never fails
  # in the background: the `wait` builtin, unlike a foreground command, lets the TERM trap run
  "$cluster_sh" wait "$cl" "$1" "$2" >"$work/.wait" &
  waiter=$!
  wait "$waiter" || true
  waiter=''
  job_result=$(cat "$work/.wait")
  note "job $1 ended: $(tr '\n' ' ' <<<"$job_result")"
}
job_field() { scontrol -o show job "$1" | sed -n "s/.* $2=\\([^ ]*\\).*/\\1/p" | head -n 1; }
expect_state() {  # expect_state JOBID STATE EXIT
  local st ec
  st=$(job_field "$1" JobState); ec=$(job_field "$1" ExitCode)
  if [ "$st" != "$2" ] || [ "${ec%%:*}" != "$3" ]; then fail "job $1: $st exit $ec, expected $2 exit $3"; fi
}
check_outputs() { python3 "$check_py" "$@" || fail "check_outputs $*"; }
no_temp_files() {
  local left
  left=$(find "$1" -name '.*.tmp.*' | wc -l)
  [ "$left" = 0 ] || fail "$left temporary file(s) left in $1: $(find "$1" -name '.*.tmp.*' | head -n 3)"
}
# task_logs NAME JOBID NTASKS: logs/NAME_JOBID_t.log for every task t, each with its rank prefix
task_logs() {
  local t
  for ((t = 0; t < $3; t++)); do
    local f=$work/logs/$1_$2_$t.log
    [ -f "$f" ] || fail "no per-task log $f"
    grep -q "\\[rank $t/$3\\]" "$f" || fail "$f has no '[rank $t/$3]' lines"
  done
  [ "$(find "$work/logs" -name "$1_$2_*.log" | wc -l)" = "$3" ] || fail "expected $3 logs $1_$2_*.log"
}
# count_pngs DIR
count_pngs() { find "$1" -maxdepth 1 -name '*.png' 2>/dev/null | wc -l; }
# count_recorded_pngs DIR: the PNGs whose manifest line (manifest.jsonl or a rank's part in
# .manifest/) says ok: what a resume skips. A rank killed between a PNG's rename and its line's
# fsync leaves a PNG without one, which is made again.
count_recorded_pngs() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
ok = set()
for path in [os.path.join(out, "manifest.jsonl")] + glob.glob(os.path.join(out, ".manifest", "*.jsonl")):
    if not os.path.isfile(path):
        continue
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(record, dict) and record.get("status") == "ok" and record.get("file"):
            ok.add(record["file"])
print(sum(1 for f in ok if os.path.isfile(os.path.join(out, f))))
PY
}
# wait_pngs DIR N JOBID: until DIR holds N PNGs (fails if the job ends first)
wait_pngs() {
  local i
  for ((i = 0; i < 1200; i++)); do
    [ "$(count_pngs "$1")" -ge "$2" ] && return 0
    case $(job_field "$3" JobState) in COMPLETED|FAILED|CANCELLED|TIMEOUT) fail "job $3 ended before $2 PNGs" ;; esac
    sleep 0.1
  done
  fail "no $2 PNGs in $1 after 120 s"
}
# summaries FILE: the summary lines ditbatch printed in FILE
summaries() { grep -o 'summary: [0-9]* done, [0-9]* skipped, [0-9]* failed in [0-9.]* s on [0-9]* rank(s)' "$1" || true; }

case $case_name in
  generate)
    # jobs/generate.sbatch as it is (1 node, 4 tasks, --gres=gpu:4): srun, then mpirun
    # (settings from the environment over the env file), then a resume of the first.
    job_inputs 12 64 "a small house by a lake, number"
    start_cluster
    jid=$(submit "$jobs/generate.sbatch")
    wait_job "$jid" 90
    expect_state "$jid" COMPLETED 0
    [ "$(job_field "$jid" TresPerNode)" = gres:gpu:4 ] || fail "job $jid did not get gres:gpu:4: $(job_field "$jid" TresPerNode)"
    check_outputs "$work/out" 12 "$work/ref"
    no_temp_files "$work/out"
    task_logs ditbatch "$jid" 4
    summaries "$work/logs/ditbatch_${jid}_0.log" | grep -q 'summary: 12 done, 0 skipped, 0 failed in .* on 4 rank(s)' ||
      fail "rank 0's log has no summary '12 done ... on 4 rank(s)'"
    grep -q "done: every image is made" "$work/ditbatch_$jid.out" || fail "batch log ditbatch_$jid.out"
    # the job log ends by naming the run report, which is there
    grep -q "report: $work/out/report.html (open it in a browser)" "$work/ditbatch_$jid.out" ||
      fail "the batch log does not name the report $work/out/report.html"
    [ -s "$work/out/report.html" ] || fail "no report.html in $work/out"
    note "srun: ok"

    # settings from the environment win over the env file; EXTRA_ARGS are appended to its ARGS
    jid2=$(DITBATCH_LAUNCHER=mpirun DITBATCH_OUT=out-mpirun DITBATCH_EXTRA_ARGS="--shard strided" \
             submit "$jobs/generate.sbatch")
    wait_job "$jid2" 90
    expect_state "$jid2" COMPLETED 0
    check_outputs "$work/out-mpirun" 12 "$work/ref"
    for t in 0 1 2 3; do
      grep -q "\\[rank $t/4\\]" "$work/logs/ditbatch_$jid2/rank-0000$t.log" || fail "mpirun: rank $t's log"
    done
    grep -q "running: mpirun" "$work/ditbatch_$jid2.out" || fail "the job did not use mpirun"
    grep -q "shard strided" "$work/logs/ditbatch_$jid2/rank-00000.log" || fail "DITBATCH_EXTRA_ARGS was not used"
    summaries "$work/logs/ditbatch_$jid2/rank-00000.log" | grep -q '12 done, 0 skipped, 0 failed in .* on 4 rank(s)' ||
      fail "mpirun: no summary line"
    note "mpirun: ok"

    jid3=$(submit "$jobs/generate.sbatch")   # the same output folder: everything is skipped
    wait_job "$jid3" 90
    expect_state "$jid3" COMPLETED 0
    summaries "$work/logs/ditbatch_${jid3}_0.log" | grep -q '0 done, 12 skipped, 0 failed' || fail "resume: not all skipped"
    grep -q "report: $work/out/report.html" "$work/ditbatch_$jid3.out" || fail "resume: the batch log does not name the report"
    check_outputs "$work/out" 12 "$work/ref"
    note "resume: ok"
    ;;

  generate-21)
    # A Qwen-Image-2.1 file through jobs/generate.sbatch (4 tasks): the RGBA images of one plain
    # process, then a resume that skips them all.
    model="$work/tiny21.h5"
    "$exe" make-tiny --model qwen-image-2.1 --seed 2 --out "$model" >/dev/null || fail "make-tiny --model qwen-image-2.1"
    job_inputs 8 64 "a red barn in a field, number"
    start_cluster
    jid=$(submit "$jobs/generate.sbatch")
    wait_job "$jid" 90
    expect_state "$jid" COMPLETED 0
    check_outputs "$work/out" 8 "$work/ref"
    no_temp_files "$work/out"
    python3 - "$work/out" <<'PY' || fail "the 2.1 images are not RGBA"
import struct, sys
from pathlib import Path
for png in Path(sys.argv[1]).glob("*.png"):
    assert png.read_bytes()[24:26] == bytes([8, 6]), f"{png.name}: not an 8-bit RGBA PNG"
PY
    summaries "$work/logs/ditbatch_${jid}_0.log" | grep -q 'summary: 8 done, 0 skipped, 0 failed in .* on 4 rank(s)' ||
      fail "rank 0's log has no summary '8 done ... on 4 rank(s)'"
    jid2=$(submit "$jobs/generate.sbatch")
    wait_job "$jid2" 90
    expect_state "$jid2" COMPLETED 0
    summaries "$work/logs/ditbatch_${jid2}_0.log" | grep -q '0 done, 8 skipped, 0 failed' || fail "resume: not all skipped"
    note "2.1: ok"
    ;;

  installed)
    # `cmake --install` into a prefix: its generate.sbatch, submitted by its installed path with no
    # DITBATCH_BIN set, runs the prefix's binary and makes the images of a plain process.
    prefix="$work/prefix"
    cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
    job_inputs 6 32 "an installed lighthouse, number"
    # ditbatch.env as a user makes it: the installed example, then the test's own settings but
    # DITBATCH_BIN (the example sets none).
    { cat "$prefix/share/ditbatch/jobs/ditbatch.env.example"; grep -v '^DITBATCH_BIN=' "$work/ditbatch.env"; } >"$work/env.tmp"
    mv "$work/env.tmp" "$work/ditbatch.env"
    start_cluster
    jid=$(PATH=/usr/bin:/bin submit "$prefix/share/ditbatch/jobs/generate.sbatch")
    wait_job "$jid" 90
    expect_state "$jid" COMPLETED 0
    check_outputs "$work/out" 6 "$work/ref"
    grep -q "running: .*$prefix/bin/ditbatch generate" "$work/ditbatch_$jid.out" ||
      fail "the installed job did not run the prefix's binary: $(grep 'running:' "$work/ditbatch_$jid.out")"
    # The installed selftest.sbatch, nothing set either: the prefix's binary checks each task.
    echo "DITBATCH_SELFTEST_ARGS=(--quick --goldens none)" >>"$work/ditbatch.env"
    jid=$(PATH=/usr/bin:/bin submit --ntasks-per-node=2 "$prefix/share/ditbatch/jobs/selftest.sbatch")
    wait_job "$jid" 180
    expect_state "$jid" COMPLETED 0
    blog=$work/ditbatch-selftest_$jid.out
    grep -q "$prefix/bin/ditbatch selftest" "$blog" || fail "the installed selftest job did not run the prefix's binary: $(head -n 3 "$blog")"
    grep -q "^PASS: all 2 rank(s) in " "$blog" || fail "installed selftest batch log: no verdict for 2 ranks"
    # A DITBATCH_JOBS that holds no job body stops the job at once, naming it.
    jid=$(DITBATCH_JOBS=$work/nowhere submit "$prefix/share/ditbatch/jobs/generate.sbatch")
    wait_job "$jid" 60
    expect_state "$jid" FAILED 2
    grep -q "DITBATCH_JOBS=$work/nowhere holds no generate-job.sh" "$work/ditbatch_$jid.out" ||
      fail "DITBATCH_JOBS pointing nowhere: $(cat "$work/ditbatch_$jid.out")"
    note "installed: ok"
    ;;

  multinode)
    # jobs/generate-multinode.sbatch as it is (2 nodes x 4 tasks, --gres=gpu:4) on two slurmd
    # "nodes" of this one host. Their ranks share the vader backing folder (above), where
    # segments are named by host, job and local rank: two fake nodes on one host collide (a
    # segfault in MPI_Comm_split_type), so this test uses TCP only.
    export OMPI_MCA_btl=self,tcp
    job_inputs 16 64 "a mountain village in autumn, number"
    start_cluster 2
    jid=$(submit "$jobs/generate-multinode.sbatch")
    wait_job "$jid" 120
    expect_state "$jid" COMPLETED 0
    [ "$(job_field "$jid" NodeList)" = "n[1-2]" ] || fail "job $jid ran on $(job_field "$jid" NodeList)"
    check_outputs "$work/out" 16 "$work/ref"
    no_temp_files "$work/out"
    task_logs ditbatch-multinode "$jid" 8
    log0=$work/logs/ditbatch-multinode_${jid}_0.log
    grep -q '16 image(s), 8 rank(s) on 2 node(s)' "$log0" || fail "ditbatch did not see 8 ranks on 2 nodes"
    summaries "$log0" | grep -q '16 done, 0 skipped, 0 failed in .* on 8 rank(s)' || fail "no summary line"
    ;;

  array)
    # jobs/generate-array.sbatch with --array=0-2: three slices of 20 prompts (7, 7, 6), one
    # output folder, one merged manifest with every image exactly once.
    job_inputs 20 64 "a bowl of ramen on a table, number"
    start_cluster
    jid=$(submit --array=0-2 "$jobs/generate-array.sbatch")
    wait_job "$jid" 120
    [ "$(wc -l <<<"$job_result")" = 3 ] || fail "expected 3 array tasks: $job_result"
    grep -qv ' COMPLETED 0$' <<<"$job_result" && fail "not every array task COMPLETED: $job_result"
    check_outputs "$work/out" 20 "$work/ref"
    no_temp_files "$work/out"
    [ ! -d "$work/out/.manifest" ] || fail "manifest parts left in out/.manifest: $(ls "$work/out/.manifest")"
    total=0
    for k in 0 1 2; do
      blog=$work/ditbatch-array_${jid}_$k.out
      [ -f "$blog" ] || fail "no batch log $blog"
      grep -q "ditbatch takes slice $k of 3" "$blog" || fail "$blog: no 'slice $k of 3'"
      tid=$(sed -n 's/.*\[batch \([0-9]*\)\].*/\1/p' "$blog" | head -n 1)
      # per-rank logs named like the task's batch log: %x_%A_%a_%t, not by the task's own job id
      task_logs ditbatch-array "${jid}_$k" 1
      tlog=$work/logs/ditbatch-array_${jid}_${k}_0.log
      grep -q "array slice $k of 3" "$tlog" || fail "task $k: ditbatch did not take slice $k"
      done_k=$(summaries "$tlog" | sed -n 's/summary: \([0-9]*\) done, 0 skipped, 0 failed.*/\1/p')
      [ -n "$done_k" ] || fail "task $k: no summary"
      note "array task $k (job $tid): $done_k images"
      total=$((total + done_k))
    done
    [ "$total" = 20 ] || fail "the array tasks made $total images in all, expected 20"
    ;;

  preempt)
    # One job, preempted twice, ending with exactly the images of an uninterrupted run:
    #  1. `scancel --signal=USR1 --batch`: what --signal=B:USR1@120 does before the time limit.
    #     The batch shell traps it, sends SIGUSR1 to srun, which forwards it to the ranks; they
    #     finish their current image and exit 75; the script runs `scontrol requeue`.
    #  2. after the restart, `scancel --signal=TERM` (the job steps, not the batch shell): what
    #     preemption does. The ranks get SIGTERM themselves, exit 75, srun exits 75, the
    #     script requeues again.
    n=40
    slow=8/40 job_inputs $n 96 "a lighthouse on a rocky coast, number"
    start_cluster
    jid=$(submit "$jobs/generate.sbatch")
    wait_pngs "$work/out" 4 "$jid"
    scancel --signal=USR1 --batch "$jid"
    note "sent USR1 to the batch shell of job $jid at $(count_pngs "$work/out") PNGs"
    for ((i = 0; i < 1200; i++)); do [ "$(job_field "$jid" Restarts)" = 1 ] && break; sleep 0.1; done
    [ "$(job_field "$jid" Restarts)" = 1 ] || fail "job $jid was not requeued after USR1"
    first=$(count_pngs "$work/out")
    note "requeued with $first PNGs made"
    [ "$first" -lt $n ] || fail "the first run made every image: the signal came too late"
    for ((i = 0; i < 1200; i++)); do [ "$(job_field "$jid" JobState)" = RUNNING ] && break; sleep 0.1; done
    wait_pngs "$work/out" $((first + 4)) "$jid"
    scancel --signal=TERM "$jid"
    note "sent TERM to the steps of job $jid at $(count_pngs "$work/out") PNGs"
    for ((i = 0; i < 1200; i++)); do [ "$(job_field "$jid" Restarts)" = 2 ] && break; sleep 0.1; done
    [ "$(job_field "$jid" Restarts)" = 2 ] || fail "job $jid was not requeued after TERM"
    second=$(count_pngs "$work/out")
    [ "$second" -lt $n ] || fail "the second run made every image: the signal came too late"
    note "requeued again with $second PNGs made"
    wait_job "$jid" 120
    expect_state "$jid" COMPLETED 0
    check_outputs "$work/out" $n "$work/ref"
    no_temp_files "$work/out"
    blog=$work/ditbatch_$jid.out
    for pat in "got SIGUSR1" "ditbatch exited with status 75" "requeued job $jid (was RUNNING; restart 1)" \
               "requeued job $jid (was RUNNING; restart 2)" "restart 2, settings" "done: every image is made"; do
      grep -qF "$pat" "$blog" || fail "batch log: no '$pat'"
    done
    [ "$(grep -c 'ditbatch exited with status 75' "$blog")" = 2 ] || fail "expected two stops with status 75"
    task_logs ditbatch "$jid" 4
    log0=$work/logs/ditbatch_${jid}_0.log
    grep -q 'signal 10 received' "$log0" || fail "rank 0 did not see SIGUSR1"
    grep -q 'signal 15 received' "$log0" || fail "rank 0 did not see SIGTERM"
    summaries "$log0"
    # three runs: d1 done; d2 done + d1 skipped; d3 done + (d1 + d2) skipped; d1 + d2 + d3 = n
    python3 - "$log0" "$n" <<'PY' || fail "the three runs' summaries do not add up"
import re, sys
runs = [tuple(map(int, m)) for m in re.findall(r"summary: (\d+) done, (\d+) skipped, (\d+) failed", open(sys.argv[1]).read())]
n = int(sys.argv[2])
assert len(runs) == 3, runs
made = 0
for done, skipped, failed in runs:
    assert failed == 0 and skipped == made, (runs, made)
    made += done
assert made == n and 0 < runs[0][0] < n and 0 < runs[1][0], runs
print(f"runs (done, skipped, failed): {runs}")
PY
    ;;

  cancel)
    # A plain `scancel JOBID` stops the job for good: the ranks get SIGTERM (and the batch
    # shell's SIGUSR1), finish their image and exit 75, and the script, seeing the job
    # CANCELLED, does not requeue it (Slurm would accept the requeue of a cancelled job).
    n=40
    slow=8/40 job_inputs $n 96 "a quiet harbour at dawn, number"
    start_cluster
    jid=$(submit "$jobs/generate.sbatch")
    wait_pngs "$work/out" 4 "$jid"
    scancel "$jid"
    note "scancel $jid at $(count_pngs "$work/out") PNGs"
    wait_job "$jid" 60
    sleep 2  # a wrongly requeued job would be PENDING or RUNNING again by now
    [ "$(job_field "$jid" JobState)" = CANCELLED ] || fail "job $jid: $(job_field "$jid" JobState), expected CANCELLED"
    [ "$(job_field "$jid" Restarts)" = 0 ] || fail "job $jid was requeued after scancel"
    grep -q "the job was cancelled (COMPLETING, reason None), so it is not requeued" "$work/ditbatch_$jid.out" ||
      fail "batch log: $(tail -n 3 "$work/ditbatch_$jid.out")"
    [ "$(count_pngs "$work/out")" -lt $n ] || fail "the job made every image before scancel: the test proves nothing"
    no_temp_files "$work/out"
    ;;

  array-requeue)
    # One array task stopped by its time-limit warning requeues itself only: by ARRAYID_TASK,
    # since `scontrol requeue` of the task whose job id is the array's id requeues every task.
    slow=2/15 job_inputs 45 96 "a mountain village in autumn, number"
    start_cluster
    jid=$(submit --array=0-2 "$jobs/generate-array.sbatch")
    wait_pngs "$work/out" 3 "${jid}_0"
    scancel --signal=USR1 --batch "${jid}_2"
    note "USR1 to the batch shell of task ${jid}_2 (job id $(job_field "${jid}_2" JobId)) at $(count_pngs "$work/out") PNGs"
    for ((i = 0; i < 1200; i++)); do [ "$(job_field "${jid}_2" Restarts)" = 1 ] && break; sleep 0.1; done
    [ "$(job_field "${jid}_2" Restarts)" = 1 ] || fail "task 2 was not requeued after USR1"
    wait_job "$jid" 180
    for k in 0 1 2; do expect_state "${jid}_$k" COMPLETED 0; done
    for k in 0 1; do
      [ "$(job_field "${jid}_$k" Restarts)" = 0 ] || fail "task $k was requeued with task 2: $(job_field "${jid}_$k" Restarts)"
    done
    grep -qF "requeued job ${jid}_2 (was RUNNING; restart 1)" "$work/ditbatch-array_${jid}_2.out" || fail "task 2's batch log"
    check_outputs "$work/out" 45 "$work/ref"
    ;;

  kill)
    # kill -9 of one rank mid-run: srun --kill-on-bad-exit ends the step, the job fails
    # (no requeue: that is not a stop by a signal ditbatch saw); a resubmission completes.
    n=32
    slow=8/32 job_inputs $n 96 "a red fox in fresh snow, number"
    start_cluster
    jid=$(submit "$jobs/generate.sbatch")
    wait_pngs "$work/out" 4 "$jid"
    # a ditbatch process of this job: SLURM_JOB_ID=$jid and SLURM_CONF of this cluster in its
    # environment, and a slurmstepd among its ancestors; rank 1 (SLURM_PROCID=1)
    victim=''
    for p in $(pgrep -x ditbatch || true); do
      env_of=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
      grep -qxF "SLURM_JOB_ID=$jid" <<<"$env_of" || continue
      grep -qxF "SLURM_CONF=$SLURM_CONF" <<<"$env_of" || continue
      grep -qxF "SLURM_PROCID=1" <<<"$env_of" || continue
      a=$p
      while [ "$a" -gt 1 ]; do
        a=$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null) || break
        if [ "$(cat "/proc/$a/comm" 2>/dev/null)" = slurmstepd ]; then victim=$p; break; fi
      done
      [ -n "$victim" ] && break
    done
    [ -n "$victim" ] || fail "no ditbatch rank 1 of job $jid found"
    kill -9 "$victim"
    note "kill -9 $victim (rank 1 of job $jid) at $(count_pngs "$work/out") PNGs"
    wait_job "$jid" 60
    [ "$(job_field "$jid" JobState)" = FAILED ] || fail "job $jid: $(job_field "$jid" JobState), expected FAILED"
    [ "$(job_field "$jid" Restarts)" = 0 ] || fail "job $jid was requeued after a kill -9"
    grep -q "the step failed" "$work/ditbatch_$jid.out" || fail "batch log: no 'the step failed'"
    # (job ids start at 1 on every test cluster: another cluster on this machine has a job $jid too)
    for p in $(pgrep -x ditbatch || true); do
      env_of=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
      grep -qxF "SLURM_JOB_ID=$jid" <<<"$env_of" && grep -qxF "SLURM_CONF=$SLURM_CONF" <<<"$env_of" &&
        fail "ditbatch $p of job $jid still runs"
    done
    pngs=$(count_pngs "$work/out")
    first=$(count_recorded_pngs "$work/out")
    [ "$pngs" -lt $n ] || fail "the job made every image before the kill: the test proves nothing"
    note "left: $pngs PNGs ($first with their manifest line), $(find "$work/out" -name '.*.tmp.*' | wc -l) temporary file(s) of killed writers"
    jid2=$(submit "$jobs/generate.sbatch")
    wait_job "$jid2" 120
    expect_state "$jid2" COMPLETED 0
    check_outputs "$work/out" $n "$work/ref"
    summaries "$work/logs/ditbatch_${jid2}_0.log"
    summaries "$work/logs/ditbatch_${jid2}_0.log" | grep -q "summary: $((n - first)) done, $first skipped, 0 failed" ||
      fail "the resubmission did not skip exactly the $first complete images"
    ;;

  badprompt)
    # A bad prompt file: the job fails at once (rank 0 checks the file before any weight is
    # read), FAILED with exit 2, the error (file:line) in rank 0's log and the batch log.
    printf '{"prompt": "a fine prompt"}\n{"prompt": "x", "colour": "red"}\n{"prompt": "another"}\n' >"$work/bad.jsonl"
    env_file bad.jsonl out --width 64 --height 64 --steps 3
    start_cluster
    t0=$SECONDS
    jid=$(submit "$jobs/generate.sbatch")
    wait_job "$jid" 60
    took=$((SECONDS - t0))
    expect_state "$jid" FAILED 2
    [ "$(job_field "$jid" Restarts)" = 0 ] || fail "a bad input was requeued"
    err='bad.jsonl:2: unknown field "colour"'
    grep -qF "$err" "$work/logs/ditbatch_${jid}_0.log" || fail "rank 0's log lacks '$err'"
    grep -qF "$err" "$work/ditbatch_$jid.out" || fail "the batch log lacks '$err'"
    [ "$(cat "$work"/logs/ditbatch_"${jid}"_*.log | grep -cF "$err")" = 1 ] || fail "the error is not reported exactly once"
    [ "$(count_pngs "$work/out")" = 0 ] || fail "images were made"
    # before any work: no rank loaded a model (the time it took is noted, not asserted: it
    # depends on the machine's load)
    ! grep -h "loaded" "$work"/logs/ditbatch_"${jid}"_*.log || fail "a rank loaded a model before the error"
    note "failed in ${took}s from submission: $(grep -F "$err" "$work/logs/ditbatch_${jid}_0.log")"
    ;;

  selftest)
    # jobs/selftest.sbatch on 2 tasks: a row per rank and the verdict of all in the batch log,
    # every rank's report in selftest_JOBID.json. Then DITBATCH_SELFTEST=quick in front of a
    # generate job: it passes and the job makes its images; with a selftest that fails (here
    # diffusers' outputs held against a model whose proj_out was scaled by 3) the job stops
    # with exit 1 before any weight is read.
    env_file prompts.txt out --width 64 --height 64 --steps 3
    echo "DITBATCH_SELFTEST_ARGS=(--quick)" >>"$work/ditbatch.env"
    start_cluster
    jid=$(submit --ntasks-per-node=2 "$jobs/selftest.sbatch")
    wait_job "$jid" 180
    expect_state "$jid" COMPLETED 0
    blog=$work/ditbatch-selftest_$jid.out
    grep -q "^PASS: all 2 rank(s) in " "$blog" || fail "selftest batch log: no verdict for 2 ranks"
    for r in 0 1; do grep -qE "^  $r +[^ ]+ +$r +cpu +PASS" "$blog" || fail "selftest batch log: no PASS row for rank $r"; done
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['ranks']; assert len(r)==2 and all(x['passed'] for x in r)" \
      "$work/selftest_$jid.json" || fail "selftest_$jid.json"
    note "selftest job: $(grep '^PASS' "$blog")"

    job_inputs 6 64 "a small boat on a lake, number"
    {
      echo "DITBATCH_SELFTEST=quick"
      echo "DITBATCH_SELFTEST_ARGS=(--goldens none)"
    } >>"$work/ditbatch.env"
    jid2=$(submit "$jobs/generate.sbatch")
    wait_job "$jid2" 180
    expect_state "$jid2" COMPLETED 0
    grep -q "selftest: PASS: all 4 rank(s)" "$work/ditbatch_$jid2.out" || fail "the generate job's batch log has no selftest verdict"
    check_outputs "$work/out" 6 "$work/ref"
    note "generate with DITBATCH_SELFTEST=quick: ok"

    cp -r "$repo/tests/data/golden" "$work/badgold"
    python3 - "$work/badgold/tiny-pipeline/transformer/diffusion_pytorch_model.safetensors" <<'PY'
import array, json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
begin, end = json.loads(data[8:8 + n])["proj_out.weight"]["data_offsets"]
values = array.array("f", data[8 + n + begin:8 + n + end])
data[8 + n + begin:8 + n + end] = array.array("f", (3 * v for v in values)).tobytes()
open(path, "wb").write(data)
PY
    env_file prompts.txt out-bad --width 64 --height 64 --steps 3
    {
      echo "DITBATCH_SELFTEST=quick"
      echo "DITBATCH_SELFTEST_ARGS=(--goldens $work/badgold)"
    } >>"$work/ditbatch.env"
    jid3=$(submit "$jobs/generate.sbatch")
    wait_job "$jid3" 180
    expect_state "$jid3" FAILED 1
    blog=$work/ditbatch_$jid3.out
    grep -q "the selftest failed (status 1): no weight was read" "$blog" || fail "batch log: no selftest failure"
    grep -q "FAIL" "$blog" || fail "batch log: the failing checks are not named"
    [ ! -e "$work/logs/ditbatch_${jid3}_0.log" ] || fail "generate started after a failing selftest"
    [ "$(count_pngs "$work/out-bad")" = 0 ] || fail "images were made after a failing selftest"
    note "a failing selftest stops the job: $(grep -m1 -A1 'What failed' "$blog" | tail -n 1)"
    ;;

  *) fail "unknown case" ;;
esac
echo "PASS: $case_name ($((SECONDS - t_start)) s)"
