#!/usr/bin/env bash
# Data-parallel scaling of the CPU backend on this machine: images/hour of the tiny model with
# 1 and 2 ranks (one thread per rank), measured in one run, printed as a ratio (target >= 1.9x
# on 2 cores). A benchmark, not a test.  usage: tools/bench/scaling.sh [BUILD_DIR] [IMAGES]
set -euo pipefail
build=${1:-build}
images=${2:-12}
exe=$build/ditbatch
work=$(mktemp -d /tmp/ditbatch-scaling-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$exe" make-tiny --out "$work/tiny.h5" > /dev/null
for i in $(seq 1 "$images"); do echo "scaling benchmark prompt $i"; done > "$work/prompts.txt"
run() {  # run N -> seconds of wall time for the whole job
  local start end
  start=$(date +%s.%N)
  if ! mpiexec -n "$1" "$exe" generate --weights "$work/tiny.h5" --prompts "$work/prompts.txt" --out "$work/out$1" \
    --width 256 --height 256 --steps 12 > "$work/log$1" 2>&1; then
    echo "scaling: the $1-rank run failed:" >&2
    cat "$work/log$1" >&2
    return 1
  fi
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
# (set -e does not reach into $(...): check each run's status here)
t1=$(run 1) || exit 1
t2=$(run 2) || exit 1
python3 - "$images" "$t1" "$t2" "$work/log1" "$work/log2" <<'PY'
import re, sys
n, t1, t2 = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
def steady(log):  # the sum of the ranks' own rates: the generate loop, without start-up
    return sum(float(m) for m in re.findall(r"rank \d+ on .*?\(([0-9.]+) images/hour\)", open(log).read()))
s1, s2 = steady(sys.argv[4]), steady(sys.argv[5])
print(f"{'ranks':>5} {'job wall s':>10} {'images/hour (job)':>18} {'images/hour (loop)':>19}")
print(f"{1:>5} {t1:10.2f} {3600*n/t1:18.0f} {s1:19.0f}")
print(f"{2:>5} {t2:10.2f} {3600*n/t2:18.0f} {s2:19.0f}")
print(f"scaling 2 ranks / 1 rank: {t1/t2:.2f}x for the whole job (start-up included), "
      f"{s2/s1:.2f}x in the generate loop (target >= 1.9x)")
PY
