#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs every test (what CI runs: .ci/run calls this).
# Exits non-zero on any failure. Arguments go to the main ctest run (e.g. -R Generate).
#
# Stages, each timed: the build and the CTest suite, then the checks in tools/ci/ that need a
# build of their own (each script says what it proves and what it costs). TEST_STAGES="ctest"
# runs a subset. The stages, in order:
#   ctest          the release build and the whole CTest suite
#   emulate        tools/ci/emulate.sh: the CUDA backend's tests under emulation
#   sanitize_fuzz  tools/ci/sanitize_fuzz.sh: a clang ASan + UBSan build, the unit tests under it,
#                  every parser fuzzed for a bounded time (tests/fuzz)
#   cuda_portability  tools/ci/cuda_portability.sh: kernels/ against the CUDA 12.4 / cuDNN 9.1
#                  headers and libraries (PyPI wheels), the kernels for every default architecture
#   easybuild      tools/ci/easybuild.sh: the real EasyBuild builds and installs the easyconfig
#                  of packaging/easybuild, the real Lmod loads, runs and unloads its module
# A failing stage does not hide the next: every stage runs, the exit status is that of the
# first failure.
set -uo pipefail
cd "$(dirname "$0")/.."
stages=${TEST_STAGES:-"ctest emulate sanitize_fuzz cuda_portability easybuild"}
want() { [[ " $stages " == *" $1 "* ]]; }

bash tools/install-deps.sh || exit 1
jobs=$(nproc)
source tools/ci/timed.sh
stage() {  # stage NAME COMMAND...
  echo "==== stage $1 ===="
  run_timed "$@"
}
# The tests, and the CUDA backend wherever nvcc is: turned back on in a build/ that
# tools/demo.sh configured without them.
main_suite() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -UDITBATCH_CUDA &&
    cmake --build build -j "$jobs" &&
    ctest --test-dir build --output-on-failure -j "$jobs" "$@"
}

want ctest && stage ctest main_suite "$@"
want emulate && stage emulate bash tools/ci/emulate.sh build
want sanitize_fuzz && stage sanitize_fuzz bash tools/ci/sanitize_fuzz.sh
want cuda_portability && stage cuda_portability bash tools/ci/cuda_portability.sh
want easybuild && stage easybuild bash tools/ci/easybuild.sh build

echo "==== stages ===="
printf '%s\n' "${TIMED_REPORT[@]}"
exit $TIMED_STATUS
