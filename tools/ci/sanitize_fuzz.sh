#!/usr/bin/env bash
# Stage sanitize_fuzz of tools/test.sh: the unit tests under AddressSanitizer + UBSan, and every
# parser of outside bytes fuzzed for a bounded time. Exit status non-zero on any report, failed
# test or fuzz finding.
#
# One clang build, build-sanitize, serves both (the sources compile once more, not twice):
# every object with -fsanitize=address,undefined -fno-sanitize-recover=all (any UBSan report
# stops the process) and -fsanitize=fuzzer-no-link (libFuzzer's coverage); CUDA and MPI off.
# Any build can take the same sanitizers: -DDITBATCH_SANITIZE=address,undefined.
#
# What it proves:
#  1. The CPU unit and golden tests (the ditbatch_tests binary, and the ditbatch binary that its
#     command tests run) give 0 sanitizer reports: each report is written to
#     build-sanitize/sanitizer-reports/ (log_path), and any file there fails the stage, even a
#     report in a child process whose exit status a test does not look at.
#     Which part runs, and why: every test of ditbatch_tests (every parser, io, the tokenizer on
#     the real vocabulary, every CPU op against float64, every golden model and the whole
#     pipeline, the generate command's runs, resume, kill and signal tests) but those in
#     SANITIZE_EXCLUDE below: Generate.ASecondSignalAbandonsTheImageBeingFinished (its signal
#     must land within an image's steps, which the much slower sanitized run makes it miss);
#     two HostileInputs cases that measure the CPU or ask for vast sizes on purpose; the kill -9
#     tests of the sharded and WebDataset layouts (a minute each of a 1000-step image under
#     ASan, run alone: the kill and resume path is Generate.KilledRunLeavesNoPartialPngAndResumes's,
#     run here, and staging and packing are the other layout tests'); the Edit pipelines' command
#     test that repeats the sanitized AllCases/PipelineEditGolden cases at a megapixel. Plus the other CTest cases
#     of the build. Not here: the MPI and Slurm tests (process orchestration around the same
#     code; Open MPI itself is not sanitizer-clean), which the
#     main suite runs, and the CUDA backend (its emulated tests are a stage of their own).
#  2. Every fuzz target (tests/fuzz, one per parser) runs its committed corpus once (ctest
#     fuzz_corpus.*: the seeds and every input that once crashed it), then is fuzzed for
#     DITBATCH_FUZZ_SECONDS (25) seconds, 2 at a time, with -timeout (10 s: a hang),
#     -rss_limit_mb / -malloc_limit_mb (2048: an OOM) and leak detection (tools/fuzz.sh). A
#     finding fails the stage; the input is saved under build-sanitize/fuzz/artifacts/ and
#     printed (path and hex dump) so the log alone reproduces it.
# Cost on the 2-core CI machine from a fresh clone: printed per part at the end (see the
# README of tests/fuzz for the figures measured).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${DITBATCH_SANITIZE_BUILD:-build-sanitize}
fuzz_seconds=${DITBATCH_FUZZ_SECONDS:-25}
jobs=$(nproc)
# A signal test whose signal must land inside an image's steps: the sanitized run's steps are
# several times slower and its start-up checks longer, and the test gives up after 3 attempts. It
# proves the signal path, which the other signal tests also run, not memory safety.
# Two tests run ditbatch under `ulimit -v` (a memory limit the run must name): ASan's shadow
# memory reserves terabytes of address space, so a sanitized process cannot start under one.
# GenerateEdit.MakesDiffusersImagesFromTheConvertedFolders runs the Edit pipelines of
# AllCases/PipelineEditGolden (sanitized) again through the command, with a megapixel output per
# family: eight minutes sanitized, for no code the other Edit tests do not run.
SANITIZE_EXCLUDE=${DITBATCH_SANITIZE_EXCLUDE:-Generate.ASecondSignalAbandonsTheImageBeingFinished:HostileInputs.ConfigsThatDoNotDescribeTheTensorsAreRefused:HostileInputs.ImageSizesTheCpuCannotHoldOrTakeHoursAreSaidBeforeAnyWork:Layout.AKilledShardedRunResumesToTheSameBytes:WebDataset.AKilledRunResumesPerTar:GenerateEdit.MakesDiffusersImagesFromTheConvertedFolders}
SANITIZE_ALONE='*Signal*:*Killed*:*ASecondRun*'

source tools/ci/timed.sh
part() {  # part NAME COMMAND...: one timed part of the stage
  echo "---- sanitize_fuzz: $1"
  run_timed "$@"
}

configure_and_build() {
  # A cache made with another compiler would be reset by CMake, -D options of this call included.
  if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-14$' "$build/CMakeCache.txt"; then
    rm -f "$build/CMakeCache.txt"
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DDITBATCH_CUDA=OFF -DDITBATCH_MPI=OFF \
    -DDITBATCH_SANITIZE=address,undefined -DDITBATCH_FUZZ=ON >/dev/null &&
    cmake --build "$build" -j "$jobs"
}

reports=$(realpath -m "$build/sanitizer-reports")
sanitized_tests() {
  rm -rf "$reports" && mkdir -p "$reports"
  # log_path: every report of every process lands in a file, whatever its parent does with its
  # stderr. Leaks count as reports too (LeakSanitizer runs at each process's exit).
  export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1"
  export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
  export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
  # The gtest binary in $jobs shards, one process each, not one process per test as ctest runs
  # them: its start (the op cases' random inputs, drawn unoptimised) costs ~2.5 s of CPU here.
  # Tests of process-wide signal handling run in a process of their own each, as under ctest: a
  # handler an earlier test installed changes what a forked child does with a signal.
  local pids=() rc=0 i
  for ((i = 0; i < jobs; i++)); do
    GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i "$build/tests/ditbatch_tests" \
      --gtest_filter="-$SANITIZE_EXCLUDE:$SANITIZE_ALONE" >"$build/sanitized-tests.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { rc=1; echo "shard $i failed: its log ($build/sanitized-tests.$i.log) ends"; grep -E '^\[  (FAILED|   OK) |Failure|error' "$build/sanitized-tests.$i.log" | grep -v ' OK ' | tail -40; }
    grep -E '^\[  (PASSED|FAILED) +\]|tests? from .* ran' "$build/sanitized-tests.$i.log"
  done
  # After the shards, $jobs at a time as under ctest -j: each waits for the states it needs, never
  # for a time, and most of its time is a child process's steps.
  local alone done_pid
  declare -A alone_of=()
  for alone in $("$build/tests/ditbatch_tests" --gtest_list_tests --gtest_filter="$SANITIZE_ALONE:-$SANITIZE_EXCLUDE" |
                 awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}') ''; do
    while ((${#alone_of[@]} >= jobs)) || { [ -z "$alone" ] && ((${#alone_of[@]} > 0)); }; do
      wait -n -p done_pid "${!alone_of[@]}" ||
        { rc=1; echo "${alone_of[$done_pid]} failed:"; tail -30 "$build/sanitized-tests.${alone_of[$done_pid]}.log"; }
      unset "alone_of[$done_pid]"
    done
    [ -n "$alone" ] || break
    "$build/tests/ditbatch_tests" --gtest_filter="$alone" >"$build/sanitized-tests.$alone.log" 2>&1 &
    alone_of[$!]=$alone
  done
  # The other CTest cases of the build (make-tiny, the build info, the PNG comparison, the job scripts' lint).
  ctest --test-dir "$build" -j "$jobs" --output-on-failure -R '^(make_tiny_model|build_info|compare_pngs|slurm_lint)$' || rc=1
  if compgen -G "$reports/*" >/dev/null; then
    echo "sanitizer reports ($(ls "$reports" | wc -l) files in $reports):"
    for f in "$reports"/*; do echo "== $f"; head -60 "$f"; done
    return 1
  fi
  echo "0 sanitizer reports"
  return $rc
}

fuzz_corpora() {  # the committed corpora once through each target
  ctest --test-dir "$build" -j "$jobs" --output-on-failure --no-tests=error -R '^fuzz_corpus\.'
}

part "build (clang 14, ASan+UBSan)" configure_and_build || { printf '%s\n' "${TIMED_REPORT[@]}"; exit $TIMED_STATUS; }
part "unit tests under ASan+UBSan" sanitized_tests
part "fuzz corpora, once each" fuzz_corpora
part "fuzzing, ${fuzz_seconds} s per target" bash tools/fuzz.sh --seconds "$fuzz_seconds" --parallel 2 --build "$build"
echo "---- sanitize_fuzz: times"
printf '%s\n' "${TIMED_REPORT[@]}"
exit $TIMED_STATUS
