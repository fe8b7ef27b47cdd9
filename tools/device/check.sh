#!/usr/bin/env bash
# The GPU check in one call, for a machine with an NVIDIA GPU and no network (the `run` tool's
# H200). Run from the repository root with the bundle made here by tools/device/build_bundle.sh:
#
#   run(command="bash tools/device/check.sh", carry=["build-device/carry"], timeout_s=480)
#
# A thin wrapper around the product's own commands (each stage bounded by its own timeout; a
# failing stage does not stop the next):
#   0. unpack the bundle, find cudart / cuBLAS / cuDNN / NVRTC on the machine (the newest cuDNN
#      found), print versions
#   1. the CUDA op tests (ditbatch_cuda_tests: every op case, each attention path incl. the
#      several-chunk GEMM cases and the 16,384-token VAE attention, the convolution paths,
#      cuBLASLt against the reference kernel) with DITBATCH_CUDA_SYNC=1: every launch is
#      checked where it happens, so a first fault names its op, not a later one
#   2. `ditbatch selftest` (full): every op case in bf16 and f32 against the CPU, each attention
#      and convolution path, the tiny pipeline against the CPU and against diffusers' goldens,
#      GEMM / copy / attention throughput; its JSON comes back
#   3. `ditbatch generate --backend cuda` on each family's tiny model against the same command on
#      the CPU backend (PNG PSNR)
#   4. `ditbatch bench dit` at 1024^2 with true CFG, against diffusers' forward in the same run
#      when build_bundle.sh could carry the diffusers wheel (tools/bench/compare_dit.sh); then
#      Qwen-Image-2.1's cached step at 1024^2 and Edit-2511's forward with one 1024^2 condition
#      image (ditbatch alone)
#   5. (only when asked for: CHECK_STAGES="0 1 2 3 4 5") ditbatch_cuda_bench: ceilings, GEMM
#      shapes, attention paths, full-size models, peak memory, the 50-step image
# A summary comes last. Logs and metrics go to $OUT (they come back with the run).
# Environment: CHECK_STAGES="0 1 2 3 4" to choose stages; BENCH_ARGS for stage 5.
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
# cuDNN: the newest found (the torch wheel's may be older than the 9.13.1 that cuDNN SDPA needs).
cudnn_version() { readlink -f "$1/libcudnn.so.9" | sed -n 's/.*libcudnn\.so\.\([0-9.]*\)$/\1/p'; }
cudnn_dir='' cudnn_best=''
for d in "${search_dirs[@]}"; do
  [[ -e $d/libcudnn.so.9 ]] || continue
  v=$(cudnn_version "$d")
  echo "found libcudnn.so.9 ${v:-(version unknown)} in $d"
  if [[ -z $cudnn_dir ]] || [[ -n $v && $(printf '%s\n%s\n' "$cudnn_best" "$v" | sort -V | tail -n 1) == "$v" && $v != "$cudnn_best" ]]; then
    cudnn_dir=$d cudnn_best=$v
  fi
done
lib_path="$work/lib"
[[ -n $cudnn_dir ]] && lib_path="$lib_path:$cudnn_dir" && echo "using cuDNN ${cudnn_best:-?} from $cudnn_dir"
[[ -n $cudnn_dir ]] || echo "NOT FOUND: libcudnn.so.9 (searched ${search_dirs[*]})"
for so in libcublasLt.so.13 libcublas.so.13 libcudart.so.13 libnvrtc.so.13; do
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
ldd "$work/bin/ditbatch" | grep -E "cudnn|cublas|cudart|stdc\+\+|gomp" | sed 's/^/  /'

if want 0; then
  echo "== stage 0: the machine =="
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
  [[ -n $py ]] && timeout 60 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1
  timeout 60 "$work/bin/ditbatch_cuda_bench" --info 2>&1 | tee "$out/info.txt"
  # what the binary was built with and finds here (toolkit, cuDNN paths, driver check)
  [[ -x $work/bin/ditbatch ]] && timeout 60 "$work/bin/ditbatch" --version 2>&1 | tee "$out/version.txt"
  note "stage 0: $(grep -m1 -o 'cudart [0-9]*, driver [0-9]*, cuBLASLt [0-9]* (for CUDA [0-9]*), cuDNN [0-9]* (for CUDA [0-9]*)' "$out/info.txt" || echo 'versions unknown'); $(grep -m1 '^cuDNN SDPA' "$out/info.txt" || echo 'SDPA status unknown')"
fi

if want 1; then
  echo "== stage 1: the CUDA op tests, each launch synchronised (DITBATCH_CUDA_SYNC=1) =="
  t0=$(date +%s)
  DITBATCH_CUDA_SYNC=1 CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn_warnings_tests.log" timeout 120 \
    "$work/bin/ditbatch_cuda_tests" --gtest_color=no \
    --gtest_filter='*CudaOps*:*CudaKernels*:*CudaShapeMistakes*:*CudaDtypes*:*CudaMemory*:*CudaAttention*:*CudaConv*:*CudaGemm*' \
    > "$out/cuda_tests.log" 2>&1
  rc=$?
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error' "$out/cuda_tests.log" | head -40
  grep -h '^\[cuda-metric\]' "$out/cuda_tests.log" > "$out/metrics.txt" 2>/dev/null
  note "op tests (synchronous): rc $rc in $(($(date +%s) - t0)) s$([[ $rc == 124 ]] && echo ' (TIMED OUT)'): $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/cuda_tests.log" | tr '\n' ' ')"
fi

if want 2; then
  echo "== stage 2: ditbatch selftest (every op in bf16 and f32, each path, the pipelines, the machine) =="
  # cuDNN's own warnings name what a refused engine lacked (e.g. NVRTC not loadable).
  t0=$(date +%s)
  CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn_warnings.log" timeout 240 \
    "$work/bin/ditbatch" selftest --backend cuda --json "$out/selftest.json" > "$out/selftest.log" 2>&1
  rc=$?
  cat "$out/selftest.log"
  note "selftest: rc $rc in $(($(date +%s) - t0)) s$([[ $rc == 124 ]] && echo ' (TIMED OUT)'): $(tail -n 1 "$out/selftest.log")"
  grep -E '^  +(attention|convolution) paths' "$out/selftest.log" | while IFS= read -r l; do note "  $l"; done
  if grep -q '^ *cuDNN SDPA  *disabled' "$out/selftest.log"; then
    note "!!! cuDNN SDPA is DISABLED on this machine (cuDNN ${cudnn_best:-?} from ${cudnn_dir:-nowhere}): attention runs on the GEMM path"
  fi
  [[ -s $out/cudnn_warnings.log ]] && { echo "cuDNN warnings (first lines; all in cudnn_warnings.log):"; head -c 3000 "$out/cudnn_warnings.log"; echo; }
fi
if want 3 && [[ -x $work/bin/ditbatch ]]; then
  # The product's command on the GPU (device choice, the GPU check before the weights, the memory
  # check against the real free memory, the conditioning at load, PNG writing): each family's tiny
  # images from --backend cuda against the same command on the CPU backend.
  echo "== stage 3: ditbatch generate on the GPU against the CPU backend =="
  gen_dir="$out/generate"
  rm -rf "$gen_dir" && mkdir -p "$gen_dir"
  # true CFG, no CFG, another size (a second schedule for the conditioning at load)
  printf '{"prompt": "a red fox in the snow"}\n{"prompt": "a lighthouse at dusk", "cfg": 1}\n{"prompt": "a bowl of ramen", "width": 96}\n' \
    > "$gen_dir/prompts.jsonl"
  # Each family's tiny file (not in $OUT: ~50 MB each): Qwen-Image, Qwen-Image-2.1 (RGBA PNGs,
  # the text K/V cache, sides of 32) and Edit-2511 (an input image, condition tokens at t = 0).
  # Edit-2511 edits a small PNG (written with the standard library), the lines' sizes as above.
  python3 - "$gen_dir" <<'PY'
import json, struct, sys, zlib
from pathlib import Path
out = Path(sys.argv[1])
w, h = 40, 30
rows = b"".join(b"\0" + bytes((x * 5 + y * 3 + c * 60) % 256 for x in range(w) for c in range(3)) for y in range(h))
chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
(out / "input.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
lines = [json.loads(l) for l in (out / "prompts.jsonl").read_text().splitlines()]
(out / "prompts-edit.jsonl").write_text("".join(json.dumps(dict(l, image="input.png")) + "\n" for l in lines))
PY
  for model in qwen-image qwen-image-2.1 qwen-image-edit-2511; do
    "$work/bin/ditbatch" make-tiny --model "$model" --out "$work/$model.h5" > "$gen_dir/make-tiny-$model.log" 2>&1
    prompts=$gen_dir/prompts.jsonl
    [[ $model == *edit* ]] && prompts=$gen_dir/prompts-edit.jsonl
    rcs=""
    for backend in cuda cpu; do
      timeout 120 "$work/bin/ditbatch" generate --weights "$work/$model.h5" --prompts "$prompts" \
        --out "$gen_dir/$model-$backend" --width 128 --height 96 --steps 8 --backend "$backend" \
        > "$gen_dir/$model-$backend.log" 2>&1
      rcs+=" $backend rc $?"
    done
    grep -E 'quick op cases|GPU memory|conditioning|summary|error|warn' "$gen_dir/$model-cuda.log" | head -10
    note "generate $model on the GPU:$rcs; $(python3 tools/device/compare_pngs.py "$gen_dir/$model-cpu" "$gen_dir/$model-cuda" 2>&1 | tail -1)"
  done
fi
if want 4 && [[ -x $work/bin/ditbatch ]]; then
  wheels=build-device/carry/wheels
  if [[ -n $py ]] && ls "$wheels"/diffusers-*.whl > /dev/null 2>&1 &&
     "$py" -m pip install --quiet --no-index --no-deps --target "$work/py" "$wheels"/*.whl > "$out/pip.log" 2>&1; then
    # The same transformer forward through diffusers (bf16, torch's SDPA) in the same run.
    # Random weights on both sides, made on the GPU.
    echo "== stage 4: ditbatch bench against diffusers, 1024^2, true CFG =="
    PYTHONPATH="$work/py${PYTHONPATH:+:$PYTHONPATH}" PYTHON="$py" BACKEND=cuda CONFIG=real SIZE=1024x1024 STEPS=3 \
      WARMUP=1 ROUNDS=1 timeout 240 bash tools/bench/compare_dit.sh "$work/bin/ditbatch" -- --cfg \
      > "$out/compare-dit.log" 2>&1
    rc=$?
    tail -25 "$out/compare-dit.log"
    note "ditbatch vs diffusers: rc $rc; $(grep -m1 '^ratio ditbatch/diffusers' "$out/compare-dit.log" || echo 'no ratio')"
  else
    echo "== stage 4: ditbatch bench at 1024^2, true CFG (no diffusers wheel carried or pip failed: see pip.log) =="
    timeout 180 "$work/bin/ditbatch" bench dit --config real --size 1024x1024 --steps 4 --cfg --backend cuda > "$out/ditbatch-bench.log" 2>&1
    rc=$?
    tail -30 "$out/ditbatch-bench.log"
    note "ditbatch bench: rc $rc (diffusers comparison skipped)"
  fi
fi
if want 4 && [[ -x $work/bin/ditbatch ]]; then
  # Qwen-Image-2.1's transformer at 1024^2, its cached step (PERF.md predicts ~107 ms).
  echo "== stage 4b: ditbatch bench dit, Qwen-Image-2.1, 1024^2, cached steps =="
  timeout 120 "$work/bin/ditbatch" bench dit --model qwen-image-2.1 --config real --size 1024x1024 --steps 4 \
    --text-tokens 60 --backend cuda > "$out/bench-dit-21.log" 2>&1
  rc=$?
  tail -14 "$out/bench-dit-21.log"
  note "bench dit 2.1 (cached step, 1024^2): rc $rc; $(grep -m1 'ms/forward' "$out/bench-dit-21.log" || echo 'no figure')"
  # Edit-2511's forward at 1024^2: one 1024^2 condition image, ~228 text tokens, true CFG
  # (PERF.md predicts ~278 ms a forward).
  echo "== stage 4c: ditbatch bench dit, Qwen-Image-Edit-2511, 1024^2 + one condition image, true CFG =="
  timeout 150 "$work/bin/ditbatch" bench dit --model qwen-image-edit-2511 --config real --size 1024x1024 --steps 2 \
    --text-tokens 228 --cfg --backend cuda > "$out/bench-dit-edit.log" 2>&1
  rc=$?
  tail -14 "$out/bench-dit-edit.log"
  note "bench dit Edit-2511 (1024^2 + 1 condition image, CFG): rc $rc; $(grep -m1 'ms/forward' "$out/bench-dit-edit.log" || echo 'no figure')"
fi
if want 5; then
  echo "== stage 5: ditbatch_cuda_bench =="
  timeout 300 "$work/bin/ditbatch_cuda_bench" ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
  rc=$?
  grep -vE '^\|' "$out/bench.log" | tail -60
  note "cuda_bench: rc $rc$([[ $rc == 124 ]] && echo ' (TIMED OUT)')"
fi

echo
echo "== summary ($(elapsed) s in all; logs in $out) =="
for line in "${summary[@]}"; do echo "$line"; done
[[ -f $out/selftest.log ]] && { echo "-- selftest --"; sed -n '/^  ops /,$p' "$out/selftest.log" | head -60; }
[[ -f $out/bench.log ]] && sed -n '/^== summary/,$p' "$out/bench.log"
