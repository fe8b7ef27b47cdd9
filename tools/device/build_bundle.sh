#!/usr/bin/env bash
# Builds ditbatch for the GPU machine and packs what it needs to run there into ONE file,
# build-device/carry/bundle.tar.xz (carried by the `run` tool: carry ["build-device/carry"]).
#
# The GPU machine has its own image (Ubuntu-like, torch 2.11+cu130, CUDA 13.0 toolkit, no
# network, none of our Debian packages), so the bundle holds:
#   bin/  ditbatch (check.sh runs its selftest, generate and bench), ditbatch_cuda_tests (the
#         CUDA tests alone, for digging deeper), ditbatch_cuda_bench (stripped; MPI off,
#         Release, sm_90)
#   lib/  every shared library they load except glibc's and CUDA's: HDF5, OpenBLAS, Boost,
#         spdlog/fmt, libpng, OpenSSL's crypto, Oniguruma, utf8proc, SLEEF, libgomp,
#         libstdc++, ... (ldd closure). cudart, cuBLAS(Lt), cuDNN and NVRTC come from that
#         machine (the torch venv's nvidia/* wheels or /usr/local/cuda): tools/device/check.sh
#         finds them and prints what it found.
# xz keeps the carried file far under the 64 MiB limit (OpenBLAS alone is 36 MB unpacked).
#
# Usage: bash tools/device/build_bundle.sh [--no-build]     (JOBS=N for ninja, default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-device
if [[ "${1:-}" != "--no-build" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDITBATCH_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  ninja -C "$build" -j"${JOBS:-2}" ditbatch ditbatch_cuda_tests ditbatch_cuda_bench
fi

stage="$build/bundle"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/ditbatch" "$build/ditbatch_cuda_tests" "$build/ditbatch_cuda_bench" "$stage/bin/"
strip --strip-unneeded "$stage"/bin/*

missing=0
while read -r name path; do
  case "$name" in
    linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libresolv.so* | libutil.so*)
      continue ;;  # glibc: the machine's own
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libcudnn*.so* | libnvrtc*.so*)
      continue ;;  # CUDA: the machine's own (matching its driver)
  esac
  if [[ "$path" == "not" || ! -e "$path" ]]; then
    echo "build_bundle: $name not found here" >&2
    missing=1
    continue
  fi
  cp -L "$path" "$stage/lib/$name"
done < <(ldd "$stage"/bin/* | awk '/=>/ {print $1, $3}' | sort -u)
[[ $missing == 0 ]] || exit 1
chmod u+w "$stage"/lib/*
strip --strip-unneeded "$stage"/lib/* 2>/dev/null || true

git rev-parse --short=12 HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"
git status --short --untracked-files=no | head -50 > "$stage/DIRTY" || true
date -u +%FT%TZ > "$stage/BUILT"

mkdir -p "$build/carry"
tar -C "$stage" -cf - . | xz -T"${JOBS:-2}" -6 > "$build/carry/bundle.tar.xz"

# diffusers for check.sh's side-by-side transformer forward (the GPU image has torch and every
# other dependency but no diffusers and no network): the goldens' pinned version, pure-Python
# wheels only, ~4 MB. Without network the check runs ditbatch's bench alone.
diffusers_pin=$(grep -o 'diffusers==[0-9.]*' tools/golden/setup.sh | head -1)
rm -rf "$build/carry/wheels"
if python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$build/carry/wheels" \
     "${diffusers_pin:-diffusers}" importlib_metadata; then
  echo "wheels for the diffusers comparison: $(ls "$build/carry/wheels" | tr '\n' ' ')"
else
  echo "build_bundle: could not download the diffusers wheel; check.sh will skip the comparison" >&2
  rm -rf "$build/carry/wheels"
fi
echo "bundle: $(du -sh "$stage" | cut -f1) unpacked, $(du -h "$build/carry/bundle.tar.xz" | cut -f1) packed in $build/carry/bundle.tar.xz"
ls -la "$stage/lib" | awk 'NR > 1 {printf "  %8d %s\n", $5, $9}'
