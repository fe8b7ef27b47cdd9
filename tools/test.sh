#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs every test (what CI runs: .ci/run calls this).
# Exits non-zero on any failure. Arguments go to the main ctest run (e.g. -R Generate).
#
# Stages, each timed: the build and the CTest suite, then the checks in tools/ci/ that need a
# build of their own (each script says what it proves and what it costs). TEST_STAGES="ctest"
# runs a subset. A failing stage does not hide the next: every stage runs, the exit status is
# that of the first failure.
set -uo pipefail
cd "$(dirname "$0")/.."
stages=${TEST_STAGES:-"ctest emulate"}
want() { [[ " $stages " == *" $1 "* ]]; }

bash tools/install-deps.sh || exit 1
jobs=$(nproc)
status=0 report=()
stage() {  # stage NAME COMMAND...
  local name=$1 t0=$SECONDS rc
  shift
  echo "==== stage $name ===="
  "$@"
  rc=$?
  report+=("$(printf '%-14s %s in %4d s' "$name" "$([ $rc = 0 ] && echo pass || echo "FAIL ($rc)")" $((SECONDS - t0)))")
  [ $rc = 0 ] || [ $status != 0 ] || status=$rc
}
main_suite() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    cmake --build build -j "$jobs" &&
    ctest --test-dir build --output-on-failure -j "$jobs" "$@"
}

want ctest && stage ctest main_suite "$@"
want emulate && stage emulate bash tools/ci/emulate.sh build

echo "==== stages ===="
printf '%s\n' "${report[@]}"
exit $status
