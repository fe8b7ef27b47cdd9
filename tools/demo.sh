#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the demo: builds ditbatch, makes the tiny
# random Qwen-Image pipeline and shows what it holds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
build/ditbatch make-tiny --out weights/tiny.h5
build/ditbatch inspect weights/tiny.h5
