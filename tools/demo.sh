#!/usr/bin/env bash
# The demo for a newcomer, from a fresh clone: installs what building and running ditbatch need
# (not the test tools: tools/test.sh adds those), builds the ditbatch program only, makes the
# tiny random Qwen-Image pipeline and generates jobs/examples/prompts.txt into out/. The tiny
# model is random: it draws noise-like pictures. Each stage is timed.
#
# A second run reuses everything: build/ as it is configured (by this script or by
# tools/test.sh), weights/tiny.h5, and out/ (its images are complete: generate skips them). A
# fresh build/ is configured without tests and, on a machine without a GPU, without the CUDA
# backend (tools/test.sh turns both back on).
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$SECONDS
declare -a times=()
stage() {  # stage NAME COMMAND...: run it, time it, stop the demo if it fails
  local name=$1 t0=$SECONDS
  shift
  echo "==== demo: $name"
  "$@" || { echo "demo: $name failed (exit $?)" >&2; exit 1; }
  times+=("$(printf '%-10s %4d s' "$name" $((SECONDS - t0)))")
}

configure() {
  local options=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF)
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "demo: no GPU here: the CPU backend only (-DDITBATCH_CUDA=OFF)"
    options+=(-DDITBATCH_CUDA=OFF)
  fi
  cmake -S . -B build "${options[@]}"
}

stage deps bash tools/install-deps.sh build
if [ -f build/CMakeCache.txt ]; then
  echo "demo: reusing build/ as configured"
else
  stage configure configure
fi
stage build cmake --build build -j "$(nproc)" --target ditbatch
if [ -f weights/tiny.h5 ]; then
  echo "demo: reusing weights/tiny.h5"
else
  stage model build/ditbatch make-tiny --out weights/tiny.h5
fi
build/ditbatch inspect weights/tiny.h5 | head -8
stage generate build/ditbatch generate --weights weights/tiny.h5 --prompts jobs/examples/prompts.txt --out out \
  --width 256 --height 256 --steps 20
ls -l out
echo "==== demo: done in $((SECONDS - t_start)) s: the images and out/report.html are in out/"
printf '  %s\n' "${times[@]}"
