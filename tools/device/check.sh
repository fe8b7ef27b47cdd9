#!/usr/bin/env bash
# The GPU check of issue #9 in one call, for a machine with an NVIDIA GPU and no network
# (the `run` tool's H200). Run from the repository root with the bundle made here by
# tools/device/build_bundle.sh:
#
#   run(command="bash tools/device/check.sh", carry=["build-device/carry"], timeout_s=480)
#
# Stages (each bounded by its own timeout; a failing stage does not stop the next):
#   0. unpack the bundle, find cudart / cuBLAS / cuDNN / NVRTC on the machine, print versions
#   1. the CUDA op tests against the CPU backend (poisoned allocations, FlashAttention's rule);
#      cuDNN's attention and convolution in a process of their own
#   2. the tiny golden models and pipeline on the GPU: latents NMSE and image PSNR vs diffusers;
#      `ditbatch generate --backend cuda` on a tiny model against the CPU backend (PSNR)
#   3. ditbatch_cuda_bench: ceilings, GEMM shapes, attention paths, full-size models with
#      random weights (forward, CFG step, text encoder, VAE, peak memory, 50-step image);
#      if it fails, the models again without cuDNN
#   4. `ditbatch bench dit` at 1024^2 with true CFG, against diffusers' forward in the same run
#      when build_bundle.sh could carry the diffusers wheel (tools/bench/compare_dit.sh)
# A summary comes last. Logs and metrics go to $OUT (they come back with the run).
# Environment: CHECK_STAGES="0 1 2 3 4" to choose stages; BENCH_ARGS for the bench.
set -uo pipefail

t_start=$(date +%s)
root=$(pwd)
out=${OUT:-/tmp/ditbatch-check}
mkdir -p "$out"
stages=${CHECK_STAGES:-"0 1 2 3 4"}
summary=()
note() { summary+=("$1"); echo "$1"; }
elapsed() { echo $(($(date +%s) - t_start)); }
want() { [[ " $stages " == *" $1 "* ]]; }

echo "== ditbatch GPU check: $(date -u +%FT%TZ), $(hostname), in $root =="

# ---- 0. the bundle and the machine's CUDA libraries --------------------------------------------
bundle_tar=build-device/carry/bundle.tar.xz
work=/tmp/ditbatch-bundle
if [[ ! -f $bundle_tar ]]; then
  echo "FATAL: $bundle_tar is missing: run tools/device/build_bundle.sh on the build machine and carry build-device/carry"
  exit 2
fi
rm -rf "$work" && mkdir -p "$work" && tar -C "$work" -xJf "$bundle_tar" || { echo "FATAL: cannot unpack $bundle_tar"; exit 2; }
echo "bundle: commit $(cat "$work/COMMIT"), built $(cat "$work/BUILT"); uncommitted changes at build time:"
sed 's/^/  /' "$work/DIRTY"

# The test binary reads goldens from the absolute paths of the build machine (/work/main/...).
if [[ ! -e /work/main/tests/data/golden ]]; then
  if [[ -e /work/main ]]; then
    echo "WARNING: /work/main exists but has no tests/data/golden: golden tests will fail"
  else
    mkdir -p /work && ln -s "$root" /work/main && echo "linked /work/main -> $root (paths baked into the tests)"
  fi
fi

# Where the CUDA libraries are: the torch venv's nvidia/* wheels first (what torch loads there),
# then the toolkit. One consistent directory per library family.
py=$(command -v python3 || true)
site_dirs=""
if [[ -n $py ]]; then
  site_dirs=$("$py" -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
fi
search_dirs=()
for s in $site_dirs; do
  [[ -d $s/nvidia ]] && while IFS= read -r d; do search_dirs+=("$d"); done < <(find "$s/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | sort)
done
search_dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
find_lib() {  # find_lib SONAME -> the first directory holding it
  local d
  for d in "${search_dirs[@]}"; do [[ -e $d/$1 ]] && { echo "$d"; return 0; }; done
  return 1
}
lib_path="$work/lib"
for so in libcudnn.so.9 libcublasLt.so.13 libcublas.so.13 libcudart.so.13 libnvrtc.so.13; do
  if d=$(find_lib "$so"); then
    echo "found $so in $d"
    [[ ":$lib_path:" == *":$d:"* ]] || lib_path="$lib_path:$d"
  else
    echo "NOT FOUND: $so (searched ${search_dirs[*]})"
  fi
done
export LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for exe in ditbatch_cuda_tests ditbatch_cuda_bench ditbatch; do
  [[ -x $work/bin/$exe ]] || continue
  if ldd "$work/bin/$exe" | grep -q "not found"; then
    echo "FATAL: $exe has unresolved libraries:"
    ldd "$work/bin/$exe" | grep "not found"
    exit 2
  fi
done
ldd "$work/bin/ditbatch_cuda_tests" | grep -E "cudnn|cublas|cudart|stdc\+\+|gomp" | sed 's/^/  /'

if want 0; then
  echo "== stage 0: the machine =="
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
  [[ -n $py ]] && timeout 60 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1
  timeout 60 "$work/bin/ditbatch_cuda_bench" --info 2>&1 | tee "$out/info.txt"
  note "stage 0: $(grep -m1 -o 'cudart [0-9]*, driver [0-9]*, cuBLASLt [0-9]* (for CUDA [0-9]*), cuDNN [0-9]* (for CUDA [0-9]*)' "$out/info.txt" || echo 'versions unknown'); $(grep -m1 '^cuDNN SDPA' "$out/info.txt" || echo 'SDPA status unknown')"
fi

gtest_stage() {  # gtest_stage NAME FILTER TIMEOUT [ENV...]
  local name=$1 filter=$2 limit=$3
  shift 3
  local log="$out/$name.log"
  local t0=$(date +%s)
  env "$@" timeout "$limit" "$work/bin/ditbatch_cuda_tests" --gtest_filter="$filter" --gtest_brief=0 > "$log" 2>&1
  local rc=$?
  local passed failed skipped
  passed=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -c '^\[  FAILED  \].*ms)$' "$log")
  skipped=$(grep -c '^\[  SKIPPED \].*ms)$' "$log")
  grep -E '^\[  FAILED  \]|Failure|error:|WARNING|warn\]' "$log" | head -40
  note "$name: rc $rc, $passed passed, $failed failed, $skipped skipped, $(($(date +%s) - t0)) s$([[ $rc == 124 ]] && echo ' (TIMED OUT)')"
  while IFS= read -r l; do note "    $l"; done < <(grep -h '^\[  FAILED  \].*ms)$' "$log" | head -20)
  sed -n "s/^\[cuda-metric\] /[cuda-metric] $name./p" "$log" >> "$out/metrics.txt"
  grep -h '^\[cuda-info\]' "$log" | sort -u | head -10
}

# cuDNN runs in processes of its own: a fault inside it (a sticky CUDA error) cannot take the
# other tests or the benchmark down with it.
if want 1; then
  echo "== stage 1a: CUDA op tests without cuDNN (allocations poisoned, launches synchronous) =="
  gtest_stage op_tests '*CudaOps*:*CudaGemm*:*CudaDtypes*:*CudaMemory*:*CudaAttention.*_gemm:*CudaAttention.*_flash:*CudaAttentionLarge*:*CudaConv.*_im2col' \
    240 DITBATCH_CUDA_POISON=1 DITBATCH_CUDA_ATTENTION=gemm DITBATCH_CUDA_CONV=im2col
  echo "== stage 1b: cuDNN fused attention and convolution =="
  # cuDNN's own warnings name what a refused engine lacked (e.g. NVRTC not loadable).
  gtest_stage cudnn_tests '*CudaAttention.*_cudnn:*CudaOps*bf16_attention*:*CudaConv.*_cudnn:*CudaOps*bf16_conv*' 120 \
    DITBATCH_CUDA_POISON=1 \
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn_warnings.log"
  [[ -s $out/cudnn_warnings.log ]] && { echo "cuDNN warnings (first lines; all in cudnn_warnings.log):"; head -c 3000 "$out/cudnn_warnings.log"; echo; }
fi
if want 2; then
  echo "== stage 2: tiny golden models and pipeline on the GPU =="
  gtest_stage golden_tests '*CudaGolden*' 180 DITBATCH_CUDA_POISON=1 DITBATCH_CUDA_ATTENTION=gemm DITBATCH_CUDA_CONV=im2col
  gtest_stage golden_cudnn_tests '*CudaGolden*bf16' 120 DITBATCH_CUDA_POISON=1 \
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn_warnings_golden.log"
  grep -h 'golden' "$out/metrics.txt" 2>/dev/null | sed 's/^\[cuda-metric\] /  /'
  # The product's command on the GPU (device choice, the memory check against the real free
  # memory, the conditioning at load, the latents-to-PNG ops, PNG writing): the tiny model's
  # images from --backend cuda against the same command on the CPU backend.
  if [[ -x $work/bin/ditbatch ]]; then
    echo "== stage 2c: ditbatch generate on the GPU against the CPU backend =="
    gen_dir="$out/generate"
    rm -rf "$gen_dir" && mkdir -p "$gen_dir"
    # true CFG, no CFG, another size (a second schedule for the conditioning at load)
    printf '{"prompt": "a red fox in the snow"}\n{"prompt": "a lighthouse at dusk", "cfg": 1}\n{"prompt": "a bowl of ramen", "width": 96}\n' \
      > "$gen_dir/prompts.jsonl"
    "$work/bin/ditbatch" make-tiny --out "$work/tiny.h5" > "$gen_dir/make-tiny.log" 2>&1  # 53 MB: not in $OUT
    rcs=""
    for backend in cuda cpu; do
      timeout 120 "$work/bin/ditbatch" generate --weights "$work/tiny.h5" --prompts "$gen_dir/prompts.jsonl" \
        --out "$gen_dir/$backend" --width 128 --height 96 --steps 8 --backend "$backend" > "$gen_dir/$backend.log" 2>&1
      rcs+=" $backend rc $?"
    done
    grep -E 'GPU memory|conditioning|summary|error|warn' "$gen_dir/cuda.log" | head -10
    note "generate on the GPU:$rcs; $(python3 tools/device/compare_pngs.py "$gen_dir/cpu" "$gen_dir/cuda" 2>&1 | tail -1)"
  fi
fi
if want 3; then
  echo "== stage 3: ditbatch_cuda_bench =="
  timeout 300 "$work/bin/ditbatch_cuda_bench" ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
  rc=$?
  grep -vE '^\|' "$out/bench.log" | tail -60
  note "bench: rc $rc$([[ $rc == 124 ]] && echo ' (TIMED OUT)')"
  if [[ $rc != 0 && $(elapsed) -lt 330 ]]; then
    echo "== stage 3, again: the models without cuDNN =="
    DITBATCH_CUDA_ATTENTION=gemm DITBATCH_CUDA_CONV=im2col timeout 200 "$work/bin/ditbatch_cuda_bench" --models-only ${BENCH_ARGS:-} > "$out/bench-gemm.log" 2>&1
    rc=$?
    tail -30 "$out/bench-gemm.log"
    note "bench without cuDNN: rc $rc"
  fi
fi
if want 4; then
  if [[ -x $work/bin/ditbatch ]] && "$work/bin/ditbatch" bench --help > /dev/null 2>&1; then
    wheels=build-device/carry/wheels
    if [[ -n $py ]] && ls "$wheels"/diffusers-*.whl > /dev/null 2>&1 &&
       "$py" -m pip install --quiet --no-index --no-deps --target "$work/py" "$wheels"/*.whl > "$out/pip.log" 2>&1; then
      # The same transformer forward through diffusers (bf16, torch's SDPA) in the same run:
      # the ratio of issue #9. Random weights on both sides, made on the GPU.
      echo "== stage 4: ditbatch bench against diffusers, 1024^2, true CFG =="
      PYTHONPATH="$work/py${PYTHONPATH:+:$PYTHONPATH}" PYTHON="$py" BACKEND=cuda CONFIG=real SIZE=1024x1024 STEPS=3 \
        WARMUP=1 ROUNDS=1 timeout 240 bash tools/bench/compare_dit.sh "$work/bin/ditbatch" -- --cfg \
        > "$out/compare-dit.log" 2>&1
      rc=$?
      tail -25 "$out/compare-dit.log"
      note "ditbatch vs diffusers: rc $rc; $(grep -m1 '^ratio ditbatch/diffusers' "$out/compare-dit.log" || echo 'no ratio')"
    else
      echo "== stage 4: ditbatch bench (no diffusers wheel carried or pip failed: see pip.log) =="
      timeout 180 "$work/bin/ditbatch" bench dit --config real --size 1024x1024 --steps 4 --cfg --backend cuda > "$out/ditbatch-bench.log" 2>&1
      rc=$?
      tail -30 "$out/ditbatch-bench.log"
      note "ditbatch bench: rc $rc (diffusers comparison skipped)"
    fi
  else
    note "ditbatch bench: not in this build (skipped)"
  fi
fi

echo
echo "== summary ($(elapsed) s in all; logs in $out) =="
for line in "${summary[@]}"; do echo "$line"; done
if [[ -f $out/metrics.txt ]]; then
  echo "-- key figures --"
  grep -hE 'golden|gemm\.cublaslt\.M256|attention\.(dit_like|vae_1024)|device_mallocs' "$out/metrics.txt" | sed 's/^\[cuda-metric\] /  /' | head -40
fi
for f in "$out/bench.log" "$out/bench-gemm.log"; do
  [[ -f $f ]] && sed -n '/^== summary/,$p' "$f"
done
