#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the demo: builds ditbatch, makes the tiny
# random Qwen-Image pipeline and generates a handful of images from jobs/examples/prompts.txt
# into out/. The tiny model is random: it draws noise-like pictures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
[ -f weights/tiny.h5 ] || build/ditbatch make-tiny --out weights/tiny.h5
build/ditbatch inspect weights/tiny.h5 | head -8
build/ditbatch generate --weights weights/tiny.h5 --prompts jobs/examples/prompts.txt --out out \
  --width 256 --height 256 --steps 20
ls -l out
