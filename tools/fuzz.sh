#!/usr/bin/env bash
# Fuzzes ditbatch's parsers with libFuzzer (tests/fuzz/README.md): every target of tests/fuzz
# (one per folder of tests/fuzz/corpus), or those given with --target, each for a bounded time.
#
#   tools/fuzz.sh --minutes N [--target T]... [--parallel P] [--build DIR]   a campaign
#   tools/fuzz.sh --seconds N ...                                            (CI: 25 s each)
#
# Needs a build made with -DDITBATCH_FUZZ=ON (tools/ci/sanitize_fuzz.sh makes build-sanitize;
# this script builds the targets it runs there if they are missing or stale). Each target
# starts from its committed seeds (tests/fuzz/corpus/T, read only) plus what earlier runs in
# this build found (DIR/fuzz/corpus/T, where new inputs go), under AddressSanitizer and
# UBSan, with its dictionary (tests/fuzz/T.dict) when there is one, and with limits: an input
# taking more than 10 s is a hang, more than 2 GiB of memory is an OOM. Inputs may grow to
# 256 KiB (-max_len; libFuzzer's default is the largest seed's size, or 4 KiB), so that the
# mutations of the deep-nesting seeds (tests/fuzz/make_corpus.py, 30,000 levels) stay that deep.
#
# Prints per target: executions, executions per second, coverage (libFuzzer's cov: edges and
# ft: features), corpus size, peak RSS, and the result. A crash, leak, hang or OOM is saved as
# DIR/fuzz/artifacts/T/<kind>-<sha1>; its path, the report and a hex dump of its first bytes
# are printed, so that the CI log alone reproduces it (then: DIR/tests/fuzz/fuzz_T FILE).
# Exit status: 0 when no target found anything, 1 otherwise, 2 for bad arguments.
#
# Keeping what a campaign found: minimise it into the committed seeds (keep them < 2 MB in all):
#   DIR/tests/fuzz/fuzz_T -merge=1 tests/fuzz/corpus/T DIR/fuzz/corpus/T
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=""
build=build-sanitize
parallel=2
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$seconds" ] || { echo "fuzz.sh: give --minutes N or --seconds N" >&2; exit 2; }
if [ ${#targets[@]} -eq 0 ]; then
  for dir in tests/fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
for t in "${targets[@]}"; do
  [ -d "tests/fuzz/corpus/$t" ] || { echo "fuzz.sh: no target '$t' (no tests/fuzz/corpus/$t)" >&2; exit 2; }
done
[ -f "$build/CMakeCache.txt" ] && grep -q '^DITBATCH_FUZZ:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "fuzz.sh: $build is not a -DDITBATCH_FUZZ=ON build (run tools/ci/sanitize_fuzz.sh once)" >&2; exit 2; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null ||
  { echo "fuzz.sh: building the fuzz targets failed" >&2; exit 1; }

work=$(realpath "$build")/fuzz
mkdir -p "$work/tmp"
# Reports on stderr (libFuzzer's log); a leak is a finding; the symbolizer names the lines.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TMPDIR=$work/tmp  # the targets' scratch files
export OMP_NUM_THREADS=1

run_target() {  # run_target T: one bounded run, its log in $work/T.log
  local t=$1 exe="$build/tests/fuzz/fuzz_$1" dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  # The hard limit only catches a run that libFuzzer's own limits failed to end.
  timeout --signal=KILL $((seconds + 300)) "$exe" -max_total_time="$seconds" -timeout=10 -max_len=262144 -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/$t/" "${dict[@]}" \
    "$work/corpus/$t" "tests/fuzz/corpus/$t" >"$work/$t.log" 2>&1
  echo $? >"$work/$t.rc"
}

echo "fuzz.sh: ${#targets[@]} targets, $seconds s each, $parallel at a time, build $build"
t0=$SECONDS
running=0
for t in "${targets[@]}"; do
  rm -f "$work/$t.rc" "$work/artifacts/$t"/*
  run_target "$t" &
  running=$((running + 1))
  if [ $running -ge "$parallel" ]; then wait -n; running=$((running - 1)); fi
done
wait

status=0
printf '%-28s %12s %8s %7s %7s %7s %8s  %s\n' target executions exec/s cov ft corpus rss_mb result
for t in "${targets[@]}"; do
  log="$work/$t.log"
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corpus=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  artifacts=("$work/artifacts/$t"/*)
  result=ok
  if [ "$rc" != 0 ] || [ -e "${artifacts[0]}" ]; then
    result="FINDING (exit $rc)"
    status=1
  fi
  printf '%-28s %12s %8s %7s %7s %7s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
    "${corpus:-?}" "${rss:-?}" "$result"
done
for t in "${targets[@]}"; do
  artifacts=("$work/artifacts/$t"/*)
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo "?")
  [ "$rc" = 0 ] && [ ! -e "${artifacts[0]}" ] && continue
  echo
  echo "==== fuzz_$t: finding (exit $rc); the end of its log ($work/$t.log):"
  grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse|INITED)' "$work/$t.log" | tail -60
  for a in "${artifacts[@]}"; do
    [ -e "$a" ] || continue
    echo "---- input saved as $a ($(stat -c %s "$a") bytes); reproduce: $build/tests/fuzz/fuzz_$t $a"
    od -A x -t x1z -N 512 "$a"
  done
done
echo "fuzz.sh: done in $((SECONDS - t0)) s: $([ $status = 0 ] && echo "no findings" || echo "FINDINGS above")"
exit $status
