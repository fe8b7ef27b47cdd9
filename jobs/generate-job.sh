# shellcheck shell=bash
# The body of jobs/generate*.sbatch, which source it after their #SBATCH headers: one copy of
# what a generate job does, whatever its shape (one node, many, an array task). Not a job script
# of its own; submit one of those.
# Settings: ${DITBATCH_ENV:-./ditbatch.env} is sourced (bash syntax); a DITBATCH_* variable set
# in the environment sbatch passes on wins over the file. What the script does:
#   1. checks the settings and starts one ditbatch rank per task (srun, or mpirun);
#   2. on SIGUSR1 (the --signal warning, or scancel --signal=USR1 --batch) or SIGTERM it sends
#      SIGUSR1 to the step, which passes it to the ranks: they finish (--on-signal abandon:
#      drop) their current image, flush the manifest and exit 75. (Preemption signals the
#      ranks themselves with SIGTERM: the same. A SIGTERM that also reaches srun, as at the
#      time limit, makes srun kill its tasks at once: the early USR1 avoids that.)
#   3. on exit status 75 it requeues the job (scontrol requeue), which resumes where it
#      stopped: complete images are skipped, so the end result is what one uninterrupted run
#      would have made.
set -uo pipefail

log() { printf '[%(%F %T)T] [batch %s] %s\n' -1 "${SLURM_JOB_ID:-?}" "$*"; }
die() { log "error: $*"; exit 2; }

# -- settings -----------------------------------------------------------------------------------
settings=(DITBATCH_BIN DITBATCH_WEIGHTS DITBATCH_PROMPTS DITBATCH_OUT DITBATCH_ARGS DITBATCH_EXTRA_ARGS
          DITBATCH_LOGS DITBATCH_LAUNCHER DITBATCH_SRUN_ARGS DITBATCH_MPIRUN_ARGS DITBATCH_MAX_REQUEUES
          DITBATCH_SELFTEST DITBATCH_SELFTEST_ARGS)
declare -A preset=()
for v in "${settings[@]}"; do [ -n "${!v+x}" ] && preset[$v]=${!v}; done
env_file=${DITBATCH_ENV:-./ditbatch.env}
env_note=$env_file  # where the error messages below send the user
if [ -f "$env_file" ]; then
  # shellcheck source=/dev/null
  . "$env_file" || die "$env_file: sourcing failed"
elif [ -n "${DITBATCH_ENV:-}" ]; then
  die "DITBATCH_ENV=$DITBATCH_ENV: no such file (working folder $PWD)"
else
  env_note="$env_file, which is not in $PWD: copy jobs/ditbatch.env.example there, or set DITBATCH_ENV"
fi
for v in "${!preset[@]}"; do unset "$v"; printf -v "$v" '%s' "${preset[$v]}"; done

# words of a setting: a bash array (in the env file) or a string split at blanks
words() {  # words NAME -> the array "w"
  if [[ "$(declare -p "$1" 2>/dev/null)" == "declare -a"* ]]; then
    local -n ref=$1
    w=("${ref[@]}")
  else
    read -r -a w <<<"${!1:-}"
  fi
}

# The binary: DITBATCH_BIN, else the installed one beside these scripts (PREFIX/share/ditbatch/jobs
# -> PREFIX/bin/ditbatch, wherever the prefix is), else ditbatch on PATH (`module load ditbatch`).
installed_jobs=$(cd "${jobs_dir:-.}" 2>/dev/null && pwd)
if [ -n "${DITBATCH_BIN:-}" ]; then bin=$DITBATCH_BIN
elif [[ $installed_jobs == */share/ditbatch/jobs && -x ${installed_jobs%/share/ditbatch/jobs}/bin/ditbatch ]]; then
  bin=${installed_jobs%/share/ditbatch/jobs}/bin/ditbatch
else bin=ditbatch; fi
command -v "$bin" >/dev/null 2>&1 || die "DITBATCH_BIN=$bin: not found (set it in $env_note)"
[ -n "${DITBATCH_WEIGHTS:-}" ] || die "DITBATCH_WEIGHTS is not set (the .h5 weights; see $env_note)"
[ -n "${DITBATCH_PROMPTS:-}" ] || die "DITBATCH_PROMPTS is not set (a .txt or .jsonl prompt file; see $env_note)"
[ -n "${DITBATCH_OUT:-}" ] || die "DITBATCH_OUT is not set (the output folder; see $env_note)"
logs=${DITBATCH_LOGS:-logs}
mkdir -p "$logs" || die "cannot create the log folder $logs"
launcher=${DITBATCH_LAUNCHER:-srun}
max_requeues=${DITBATCH_MAX_REQUEUES:-20}
selftest=${DITBATCH_SELFTEST:-off}
case $selftest in off | quick | full) ;; *) die "DITBATCH_SELFTEST=$selftest (expected off, quick or full)" ;; esac
words DITBATCH_ARGS; gen_args=("${w[@]}")
words DITBATCH_EXTRA_ARGS; gen_args+=("${w[@]}")
words DITBATCH_SRUN_ARGS; srun_args=("${w[@]}")
words DITBATCH_MPIRUN_ARGS; mpirun_args=("${w[@]}")
words DITBATCH_SELFTEST_ARGS; selftest_args=("${w[@]}")
# srun no longer inherits --cpus-per-task from sbatch (Slurm >= 22.05): pass it on.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
fi

# This job in Slurm's commands: an array task by array id and task id (its own job id is the
# array's id for one of the tasks, and `scontrol requeue ARRAY_ID` requeues every task).
if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
  job_ref="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
else
  job_ref=${SLURM_JOB_ID:-}
fi
# log names: %x_%j, or %x_%A_%a for an array task, as its batch log (#SBATCH --output)
tag="${SLURM_JOB_NAME:-ditbatch}_${job_ref:-0}"
cmd=("$bin" generate --weights "$DITBATCH_WEIGHTS" --prompts "$DITBATCH_PROMPTS" --out "$DITBATCH_OUT"
     "${gen_args[@]}")
case $launcher in
  srun)    # one log per task: logs/%x_%j_%t.log (job name, job id, task = rank; arrays: %x_%A_%a_%t)
    step=(srun --mpi=pmix --kill-on-bad-exit=1 --output="$logs/${tag}_%t.log" --open-mode=append
          "${srun_args[@]}" "${cmd[@]}")
    rank0_log="$logs/${tag}_0.log" ;;
  mpirun)  # mpirun takes the allocation from Slurm; ditbatch writes logs/%x_%j/rank-NNNNN.log
    step=(mpirun --bind-to none "${mpirun_args[@]}" "${cmd[@]}" --log-dir "$logs/$tag")
    rank0_log="$logs/$tag/rank-00000.log" ;;
  *) die "DITBATCH_LAUNCHER=$launcher (expected srun or mpirun)" ;;
esac

# -- signals: ask the ranks to stop cleanly -----------------------------------------------------
step_pid='' signalled=''
# shellcheck disable=SC2317  # called by the traps below
on_signal() {
  signalled=$1
  log "got SIG$1: asking ditbatch to finish its current image and stop (SIGUSR1 to the $launcher step)"
  if [ -n "$step_pid" ]; then kill -USR1 "$step_pid" 2>/dev/null || true; fi
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
  log "array task ${SLURM_ARRAY_JOB_ID:-?}_${SLURM_ARRAY_TASK_ID} (task ids ${SLURM_ARRAY_TASK_MIN:-?}-${SLURM_ARRAY_TASK_MAX:-?}, ${SLURM_ARRAY_TASK_COUNT:-?} in all): ditbatch takes slice $(((SLURM_ARRAY_TASK_ID - ${SLURM_ARRAY_TASK_MIN:-0}) / ${SLURM_ARRAY_TASK_STEP:-1})) of ${SLURM_ARRAY_TASK_COUNT:-?}"
fi
log "node(s) ${SLURM_JOB_NODELIST:-?}, ${SLURM_NTASKS:-?} task(s), restart ${SLURM_RESTART_COUNT:-0}, settings from $env_file"
log "$("$bin" --version 2>&1 | head -n 1)"
# Optionally every GPU of the allocation is checked first (ditbatch selftest, one rank per GPU):
# a failing node stops the job before any weight is read.
if [ "$selftest" != off ] && [ -z "$signalled" ]; then
  st_cmd=("$bin" selftest "${selftest_args[@]}")
  [ "$selftest" = quick ] && st_cmd+=(--quick)
  case $launcher in
    srun) st_step=(srun --mpi=pmix --kill-on-bad-exit=1 "${srun_args[@]}" "${st_cmd[@]}") ;;
    *) st_step=(mpirun --bind-to none "${mpirun_args[@]}" "${st_cmd[@]}") ;;
  esac
  st_log="$logs/${tag}_selftest.log"
  log "selftest of every GPU first (DITBATCH_SELFTEST=$selftest): ${st_step[*]} > $st_log"
  "${st_step[@]}" >"$st_log" 2>&1
  st_rc=$?
  if [ "$st_rc" != 0 ]; then
    log "the selftest failed (status $st_rc): no weight was read, no image made. What failed:"
    grep -E "FAIL|SLOW" "$st_log" | head -n 20 | sed 's/^/    /'
    log "resubmit without the failing node(s) (sbatch --exclude=HOST); the whole table is in $st_log"
    exit 1
  fi
  log "selftest: $(tail -n 1 "$st_log")"
fi
log "running: ${step[*]}"
rc=75
if [ -z "$signalled" ]; then
  "${step[@]}" &
  step_pid=$!
  while :; do
    wait "$step_pid"; rc=$?
    [ "$rc" -gt 128 ] || break
    if kill -0 "$step_pid" 2>/dev/null; then continue; fi  # a trapped signal interrupted wait
    wait "$step_pid"; r=$?; [ "$r" = 127 ] || rc=$r        # the step's own exit status
    break
  done
  step_pid=''
fi
log "ditbatch exited with status $rc"
# The run report (gallery, failed images, a timeline per rank), which rank 0 rewrites at the
# end of every run: `ditbatch report DIR` writes it at any time.
if [ -f "$DITBATCH_OUT/report.html" ]; then
  log "report: $(cd "$DITBATCH_OUT" && pwd)/report.html (open it in a browser)"
fi

case $rc in
  0) log "done: every image is made (logs: $rank0_log)" ;;
  75)
    restarts=${SLURM_RESTART_COUNT:-0}
    # Who stopped it decides. Still RUNNING: the time-limit warning (USR1), or a signal sent
    # to the steps. PENDING again: Slurm requeued it itself (preemption, `scontrol requeue`).
    # Ending (COMPLETING, CANCELLED) without a preemption or the time limit as the reason:
    # scancel, a stop the user asked for, so no requeue (Slurm would accept one).
    job_info=''
    [ -n "$job_ref" ] && job_info=$(scontrol -o show job "$job_ref" 2>/dev/null | head -n 1)
    state=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$job_info")
    reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<<"$job_info")
    preempted=$(sed -n 's/.* PreemptTime=\([^ ]*\).*/\1/p' <<<"$job_info")
    if [ -z "${SLURM_JOB_ID:-}" ]; then
      log "stopped with images left; not in a Slurm job: run again to resume"
    elif [[ ("$state" == COMPLETING || "$state" == CANCELLED) && "$reason" != TimeLimit &&
            ( -z "$preempted" || "$preempted" == None ) ]]; then
      log "stopped with images left: the job was cancelled ($state, reason ${reason:-none}), so it is not requeued; resubmit to resume"
    elif [[ "$state" == PENDING || "$state" == REQUEUE* ]]; then
      log "stopped with images left: Slurm has requeued job $job_ref already ($state); it resumes where it stopped"
      exit 0
    elif [ "$restarts" -ge "$max_requeues" ]; then
      log "stopped with images left, but the job was requeued $restarts times already (DITBATCH_MAX_REQUEUES=$max_requeues): resubmit to resume"
    else
      # The requeue ends this run with SIGTERM: ignore it (here and in scontrol) until the
      # bookkeeping is done; Slurm sends SIGKILL KillWait seconds later anyway.
      trap '' USR1 TERM INT
      if scontrol requeue "$job_ref"; then
        log "stopped with images left: requeued job $job_ref (was ${state:-unknown}; restart $((restarts + 1))); it resumes where it stopped"
        exit 0
      fi
      log "stopped with images left; 'scontrol requeue $job_ref' failed (state ${state:-unknown}; requeue not allowed?): resubmit to resume"
    fi ;;
  1) log "some images failed (status \"failed\" in $DITBATCH_OUT/manifest.jsonl); a rerun retries them" ;;
  2) log "bad input, nothing was made:"; tail -n 5 "$rank0_log" 2>/dev/null | sed 's/^/    /' ;;
  *) log "the step failed (a rank was killed or crashed?); resubmit to resume: complete images are kept"
     tail -n 5 "$rank0_log" 2>/dev/null | sed 's/^/    /' ;;
esac
exit "$rc"
