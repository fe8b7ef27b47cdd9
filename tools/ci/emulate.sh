#!/usr/bin/env bash
# The CUDA backend proven without a GPU, at every commit: kernels/*.cu compiled as C++ against
# a CPU emulation of the CUDA execution model (tools/device/emulate.py: fibers for threads,
# real barriers and warp shuffles, cuBLASLt replaced by our reference GEMM kernel, no cuDNN)
# and run through the real CudaBackend:
#   - every op case in bf16 and f32 mode against the CPU backend, the shape contract, the NaN
#     count, the dtype combinations, the allocator, single kernels (CudaOps, CudaShapeMistakes,
#     CudaDtypes, CudaMemory, CudaKernels), the attention paths (gemm, flash) and the im2col
#     convolution;
#   - the tiny golden models against diffusers: the whole pipeline in f32 mode (where an
#     indexing bug shows far above rounding), each model and the CFG batch in bf16 mode, and
#     Qwen-Image-2.1's text encoder, transformer (both cache modes) and VAE, and the Edit vision
#     tower, in both modes;
#   - `ditbatch selftest --backend cuda --quick` through the emulated backend: the command's
#     CUDA half runs here before any GPU sees it (the text-to-image families' tiny pipelines: an
#     edit's VAE encodes its input at ~1024x1024 and runs 4096 condition tokens a step, ~6 min
#     an image emulated; its parts are the CudaGolden cases above, a GPU runs the whole);
#   - `ditbatch generate --backend cuda` (its GPU check before the weights, the memory check,
#     the conditioning at load, the latents-to-PNG ops) against the same command on the CPU
#     backend, with make-tiny's Qwen-Image and Qwen-Image-2.1 (RGBA) files: PNG PSNR by
#     tools/device/compare_pngs.py, as tools/device/check.sh does on a GPU.
# It proves indexing, reductions, barriers, masks and dispatch; not speed, cuBLASLt or cuDNN
# (the cudnn_graphs.* tests check the cuDNN graphs against cuDNN's own heuristics).
# usage: tools/ci/emulate.sh [CORE_BUILD]   (a CMake build with CUDA; default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
core=${1:-build}
if ! grep -q '^DITBATCH_CUDA:BOOL=ON' "$core/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: $core is not a CUDA build (no nvcc?): the emulated CUDA tests need its flags"
  exit 0
fi
filter='*CudaOps*:*CudaKernels*:*CudaShapeMistakes*:*CudaDtypes*:*CudaMemory*:*CudaAttention.*_gemm:*CudaAttention.*_flash'
filter+=':*CudaConv.*_im2col:*CudaGolden.WholePipeline/f32:*CudaGolden.*21/f32:*CudaGolden.VisionTower/f32'
filter+=':*CudaGolden.*/bf16:-*CudaGolden.WholePipeline/bf16'
python3 tools/device/emulate.py --core-build "$core" --build build-emu \
  --selftest "--backend cuda --quick --no-measure --models qwen-image,qwen-image-2.1" -- --gtest_filter="$filter"

work=$(mktemp -d /tmp/ditbatch-emulate-XXXXXX)
trap 'rm -rf "$work"' EXIT
printf '{"prompt": "a red fox in the snow", "cfg": 4}\n{"prompt": "a lighthouse at dusk", "cfg": 1}\n{"prompt": "a bowl of ramen", "width": 32}\n' \
  > "$work/prompts.jsonl"
"$core/ditbatch" make-tiny --out "$work/tiny.h5" > /dev/null
"$core/ditbatch" make-tiny --model qwen-image-2.1 --out "$work/tiny21.h5" > /dev/null
# Each family: generate on the emulated GPU and on the CPU, the PNGs (RGBA for 2.1) compared.
for model in tiny tiny21; do
  for backend in cuda cpu; do
    exe=$core/ditbatch
    [ "$backend" = cuda ] && exe=build-emu/ditbatch
    "$exe" generate --weights "$work/$model.h5" --prompts "$work/prompts.jsonl" --out "$work/$model-$backend" --width 64 \
      --height 64 --steps 4 --backend "$backend" > "$work/$model-$backend.log" 2>&1 ||
      { cat "$work/$model-$backend.log"; exit 1; }
  done
  grep -q "the quick op cases agree with the CPU" "$work/$model-cuda.log" ||
    { cat "$work/$model-cuda.log"; echo "FAIL: no GPU check"; exit 1; }
  grep -E "quick op cases|summary" "$work/$model-cuda.log"
  python3 tools/device/compare_pngs.py "$work/$model-cpu" "$work/$model-cuda"
done
