#!/usr/bin/env bash
# CUDA portability, proven without a GPU: the CUDA backend builds for what clusters run (CUDA
# 12.4+, any cuDNN 9, A100 to B200), not only for the toolkit of this machine.
#
# (a) Every host .cpp of kernels/ (and every header it includes) compiles with g++ against the
#     CUDA 12.4 runtime, cuBLAS 12.4 and cuDNN 9.1 headers of NVIDIA's PyPI wheels and against
#     nothing under the local toolkit: the flags and definitions are CMake's own (the
#     compile_commands.json of a configure), with the CUDA / cuDNN include folders swapped for
#     the wheels' (the dependency files are checked for any header from elsewhere).
# (b) tests/cudnn built from those objects, linked against the wheels' libcudart 12.4 and libcudnn
#     9.1 and run here: with headers older than 9.13 the SDPA path is compiled out and off with
#     its reason (the attention takes the GEMM path), the convolution path on, the deviceless
#     tests skipped (they need 9.8); and what a configure against those headers says.
# (c) kernels/*.cu compiled by the local nvcc for the default CMAKE_CUDA_ARCHITECTURES, and
#     cuobjdump finds in every object the SASS of each default architecture (sm_80, sm_90,
#     sm_100 where this nvcc makes them) and the PTX of the newest. The main build (build/, what
#     tools/test.sh's ctest stage makes) compiles them so already: when build/ is a CUDA build
#     with the default architectures, its objects are brought up to date and checked; otherwise
#     (no build/, or one configured with other architectures) build-portability/build, a
#     configure of its own, compiles them.
# Not proven here: nvcc 12 compiling the kernels. nvcc 12 is not on PyPI (nvidia-cuda-nvcc-cu12
# 12.4.131 and 12.9.86 hold ptxas, libnvvm and libdevice only: no nvcc, cicc, cudafe++ or
# fatbinary), so the .cu files are compiled by the local nvcc only; and nothing here runs on a GPU.
#
# Cost: ~1 GB of wheels (pinned; a venv inside build-portability/, pip keeps no cache), every
# step timed and the total printed (target: under 6 minutes on 2 cores).
# Usage: bash tools/ci/cuda_portability.sh       (JOBS=N, default nproc)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/build-portability
jobs=${JOBS:-$(nproc)}
t_start=$SECONDS
step_start=$SECONDS
declare -a times=()
say() { echo "cuda_portability: $*"; }
fail() { echo "cuda_portability: FAIL: $*" >&2; exit 1; }
step_done() { times+=("$(printf '%-44s %4d s' "$1" $((SECONDS - step_start)))"); step_start=$SECONDS; }

if ! command -v nvcc >/dev/null; then
  say "SKIPPED: no nvcc on PATH (this stage needs the CUDA toolkit; the build here is CPU-only)"
  exit 0
fi
# The CUDA 12.4 headers are spread over wheels: cuda_runtime.h includes crt/ (in nvcc-cu12, which
# has no nvcc) and cuda_bf16.h includes nv/target (in cccl-cu12; 12.4.127 itself was yanked as
# broken). cuobjdump: the local toolkit has none.
pins=(nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-cccl-cu12==12.4.127.post1
      nvidia-cublas-cu12==12.4.5.8 nvidia-cudnn-cu12==9.1.0.70 nvidia-cuda-cuobjdump==13.2.51)
mkdir -p "$out"

# ---- a CUDA build with the default architectures, and its compile commands ----------------------
# (a cached CMAKE_CUDA_ARCHITECTURES means one given with -D or CUDAARCHS: the default is not cached)
main=$root/build
if [[ -f $main/CMakeCache.txt ]] && grep -q '^DITBATCH_CUDA:BOOL=ON' "$main/CMakeCache.txt" &&
   ! grep -q '^CMAKE_CUDA_ARCHITECTURES:' "$main/CMakeCache.txt"; then
  build=$main
  ninja -C "$build" build.ninja >/dev/null || fail "build/ does not regenerate"
  say "using the main build's kernels and compile commands (build/: CUDA, default architectures)"
else
  unset CUDAARCHS  # CMake's environment override of the architectures: the defaults are the point
  build=$out/build
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >"$out/configure.log" ||
    { cat "$out/configure.log"; fail "configure"; }
  grep 'ditbatch: CUDA backend' "$out/configure.log" || fail "the configure did not enable the CUDA backend"
fi
[[ -f $build/compile_commands.json ]] || fail "$build has no compile_commands.json"
step_done "configure (or reuse build/)"

# (c) starts now, on the cores, while the wheels download (nothing to do when build/ is current)
mapfile -t cu_objects < <(ninja -C "$build" -t targets all | grep -o '^CMakeFiles/ditbatch_cuda\.dir/kernels/[A-Za-z0-9_]*\.cu\.o' | sort -u)
[[ ${#cu_objects[@]} -ge 1 ]] || fail "no kernels/*.cu objects in the build"
( t0=$(date +%s)
  CCACHE_DISABLE=1 ninja -C "$build" -j"$jobs" "${cu_objects[@]}" >"$out/kernels.log" 2>&1 &
  ninja_pid=$!
  trap 'kill "$ninja_pid" 2>/dev/null' TERM  # ninja stops its compilers
  rc=0
  wait "$ninja_pid" || rc=$?
  echo $(($(date +%s) - t0)) >"$out/kernels.seconds"
  exit $rc ) &
kernels_pid=$!
trap 'kill "$kernels_pid" 2>/dev/null || true' EXIT  # a failed step leaves no compile behind

# ---- the wheels -----------------------------------------------------------------------------------
venv=$out/venv
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install --quiet --no-deps --only-binary=:all: \
  "${pins[@]}" || fail "pip install ${pins[*]}"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nv=$site/nvidia
for h in cuda_runtime/include/cuda_runtime.h cuda_nvcc/include/crt/host_config.h cuda_cccl/include/nv/target cublas/include/cublasLt.h cudnn/include/cudnn.h cudnn/include/cudnn_version.h; do
  [[ -f $nv/$h ]] || fail "the wheels carry no $h"
done
grep -q '#define CUDART_VERSION  *12040' "$nv/cuda_runtime/include/cuda_runtime_api.h" || fail "not the CUDA 12.4 runtime headers"
cudnn_text=$(cmake -DCUDNN_INCLUDE_DIR="$nv/cudnn/include" -P tools/cmake/cudnn_features.cmake 2>&1)
[[ $cudnn_text == "cuDNN 9.1.0 headers:"* ]] || fail "not the cuDNN 9.1.0 headers: $cudnn_text"
wheels=("$site"/nvidia_*.dist-info)
say "wheels: $(basename -a "${wheels[@]}" | sed 's/\.dist-info//' | tr '\n' ' ')($(du -sm "$nv" | cut -f1) MB installed)"
say "a configure against these headers says: $cudnn_text"
step_done "wheels (download, install)"

# ---- (a) the host files against the CUDA 12.4 / cuDNN 9.1 headers ---------------------------------
objs=$out/cu124
rm -rf "$objs" && mkdir -p "$objs"
"$venv/bin/python" - "$build/compile_commands.json" "$root" "$objs" "$nv" <<'PY'
import json, os, shlex, sys
db, root, objs, nv = sys.argv[1:5]
wheel_includes = [f"{nv}/cuda_runtime/include", f"{nv}/cuda_nvcc/include", f"{nv}/cuda_cccl/include",
                  f"{nv}/cublas/include", f"{nv}/cudnn/include"]
cuda_headers = ("cuda_runtime.h", "cublasLt.h", "cudnn.h")
def is_cuda_dir(d):  # a folder with CUDA / cuDNN headers: the local toolkit's, to be replaced
    return any(os.path.exists(os.path.join(d, h)) for h in cuda_headers)
commands = []
for e in json.load(open(db)):
    src = os.path.relpath(e["file"], root)
    if not (src.startswith("kernels/") and src.endswith(".cpp")) and src != "src/core/dtype.cpp":
        continue
    args = shlex.split(e["command"])
    keep, i = [args[0]], 1
    while i < len(args):
        a = args[i]
        if a in ("-o", "-c", "-MF", "-MT"):
            i += 2
        elif a in ("-MD", "-MMD"):
            i += 1
        elif a in ("-isystem", "-I") and is_cuda_dir(args[i + 1]):
            i += 2
        elif a.startswith("-I") and len(a) > 2 and is_cuda_dir(a[2:]):
            i += 1
        else:
            keep.append(a)
            i += 1
    for d in wheel_includes:
        keep += ["-isystem", d]
    commands.append((src, keep))
def write(name, flags, src):
    with open(f"{objs}/compile-{name}.sh", "w") as f:
        f.write(shlex.join(flags + ["-MD", "-MF", f"{objs}/{name}.d", "-c", src, "-o", f"{objs}/{name}.o"]) + "\n")
for src, flags in commands:
    write(os.path.basename(src)[:-4], flags, os.path.join(root, src))
# the cuDNN graph test, with the flags of the kernels' cudnn_graph.cpp
flags = next(f for s, f in commands if s == "kernels/cudnn_graph.cpp")
write("test_cudnn_graphs", flags + [f"-DDITBATCH_TEST_DATA=\"{root}/tests/data\""],
      os.path.join(root, "tests/cudnn/test_cudnn_graphs.cpp"))
PY
host_sources=(kernels/*.cpp)
host_files=${#host_sources[@]}
say "compiling $host_files host files of kernels/ (+ tests/cudnn, src/core/dtype.cpp) against the wheels' headers"
printf '%s\0' "$objs"/compile-*.sh | xargs -0 -P "$jobs" -n 1 bash >"$objs/compile.log" 2>&1 || {
  cat "$objs/compile.log"; fail "a host file of kernels/ does not compile against CUDA 12.4 / cuDNN 9.1"; }
[[ -s $objs/compile.log ]] && { echo "compiler output:"; cat "$objs/compile.log"; }
for f in kernels/*.cpp; do [[ -f $objs/$(basename "$f" .cpp).o ]] || fail "$f: no object"; done
# every header they read: from the wheels, the source tree or Debian's /usr/include and g++'s
# own, nothing else (this machine's /usr/local/include links to the local toolkit's headers)
read_headers=$(sed 's/\\$//' "$objs"/*.d | tr ' ' '\n' | grep -v ':$' | grep -v '\.cpp$' | grep . | sort -u |
               xargs -r realpath | sort -u)
allowed="^($(realpath "$nv")|$root|/usr/include|/usr/lib/gcc)/"
if grep -Ev "$allowed" <<<"$read_headers"; then fail "the headers above are neither the wheels' nor the system's"; fi
for h in cuda_runtime.h cublasLt.h cudnn.h; do
  grep -q "^$(realpath "$nv")/.*/include/$h$" <<<"$read_headers" || fail "$h was not read from the wheels"
done
say "(a) ok: $host_files host files compiled against the CUDA 12.4, cuBLAS 12.4.5, cuDNN 9.1.0 headers; $(grep -c "^$(realpath "$nv")" <<<"$read_headers") headers read from the wheels, none from the local toolkit"
step_done "(a) host files against 12.4 / 9.1 headers"

# ---- (b) the cuDNN graph tests against the 9.1 library --------------------------------------------
libs=("$nv/cuda_runtime/lib" "$nv/cublas/lib" "$nv/cudnn/lib")
rpath=$(IFS=:; echo "${libs[*]}")
g++ -o "$objs/cudnn_graph_tests" "$objs"/{test_cudnn_graphs,cudnn_graph,attention_cudnn,conv_cudnn,cuda_check,cuda_memory,cuda_device,cuda_versions,dtype}.o \
  "$nv/cuda_runtime/lib/libcudart.so.12" "$nv/cublas/lib/libcublasLt.so.12" "$nv/cudnn/lib/libcudnn.so.9" \
  -lgtest -lgtest_main -lfmt -fopenmp -pthread -Wl,-rpath,"$rpath" || fail "linking tests/cudnn against the 12.4 / 9.1 libraries"
ldd "$objs/cudnn_graph_tests" | grep -E 'libcudart|libcublasLt|libcudnn' | sed 's/^/  /'
if ldd "$objs/cudnn_graph_tests" | grep -E 'libcudart|libcublasLt|libcudnn' | grep -vqF "$(realpath "$nv")"; then
  fail "a CUDA library above does not come from the wheels"
fi
LD_LIBRARY_PATH=$rpath "$objs/cudnn_graph_tests" >"$objs/tests.log" 2>&1 || { cat "$objs/tests.log"; fail "tests/cudnn against cuDNN 9.1"; }
grep -E '^\[ *(SKIPPED|PASSED|FAILED) |^\[cudnn\]|^\[ +OK|Skipped|built against' "$objs/tests.log" | sed 's/^/  /'
grep -q '^\[cudnn\] SDPA path: disabled: cuDNN SDPA is not compiled in: this build.s cuDNN headers are 9.1.0' "$objs/tests.log" ||
  fail "the SDPA path is not off with its reason in the 9.1 build"
grep -q '^\[cudnn\] convolution path: available (cuDNN 90100' "$objs/tests.log" || fail "the convolution path is not on with cuDNN 9.1"
for t in CudnnGraphs.AnInconsistentConvolutionIsRefused CudnnSdpa.IsOffWithTheReasonExactlyWhenItCannotRun \
         CudnnConv.IsOnWheneverTheCudnnLoadedMatchesTheCudaMajor; do
  grep -q "^\[       OK \] $t " "$objs/tests.log" || fail "$t did not run and pass against cuDNN 9.1"
done
# Every test skipped against 9.1 is skipped for what those headers lack (deviceless heuristics,
# 9.8.0; the SDPA operation, 9.13.0), by the reason it prints, and nothing else is.
skipped=$(sed -n 's/^\[  SKIPPED \] \([A-Za-z0-9_.]*\) (.*/\1/p' "$objs/tests.log" | sort | tr '\n' ' ')
reasons=$(grep -A1 ': Skipped$' "$objs/tests.log" | grep -vE ': Skipped$|^--$' | sort -u)
other=$(grep -vE '^ *built against cuDNN 9\.1\.0 headers: (no deviceless heuristics \(needs 9\.8\.0\)|the SDPA operation is compiled out)' <<<"$reasons" || true)
[[ -n $skipped && -z $other ]] ||
  fail "skipped against cuDNN 9.1: '$skipped' for '$other' (expected the deviceless and SDPA graph tests only)"
say "(b) ok: against libcudnn 9.1.0 the SDPA path is compiled out (attention takes the GEMM path), the convolution path is on"
step_done "(b) tests/cudnn against the 9.1 library"

# ---- (c) the kernels for every default architecture -----------------------------------------------
kernels_rc=0
wait "$kernels_pid" || kernels_rc=$?
trap - EXIT  # waited for: its PID is no longer ours to signal
[[ $kernels_rc == 0 ]] || { cat "$out/kernels.log"; fail "kernels/*.cu do not compile for the default architectures"; }
kernel_seconds=$(cat "$out/kernels.seconds")
if [[ $build == "$main" ]]; then
  made="made by the main build, ${kernel_seconds} s here to bring them up to date"
else
  made="compiled here in ${kernel_seconds} s on $jobs jobs, beside the steps above"
fi
codes=$(nvcc --list-gpu-code)
want=()
for a in 80 90 100; do grep -qx "sm_$a" <<<"$codes" && want+=("$a"); done
newest=${want[-1]}
cuobjdump=$site/nvidia/cu13/bin/cuobjdump
[[ -x $cuobjdump ]] || cuobjdump=$(find "$site/nvidia" -name cuobjdump -type f | head -1)
[[ -x $cuobjdump ]] || fail "no cuobjdump in the nvidia-cuda-cuobjdump wheel"
for o in "${cu_objects[@]}"; do
  elf=$("$cuobjdump" --list-elf "$build/$o" | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
  ptx=$("$cuobjdump" --list-ptx "$build/$o" | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
  for a in "${want[@]}"; do [[ " $elf" == *" sm_$a "* ]] || fail "$o has no SASS for sm_$a (SASS: $elf)"; done
  [[ $ptx == "sm_$newest " ]] || fail "$o: PTX for ${ptx:-nothing}, expected the newest architecture's alone (sm_$newest)"
  printf '  %-44s SASS %s PTX %s\n' "$(basename "$o")" "$elf" "$ptx"
done
say "(c) ok: ${#cu_objects[@]} kernel objects, each with SASS for $(printf 'sm_%s ' "${want[@]}")and PTX for compute_$newest (nvcc $(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2), read by cuobjdump $("$cuobjdump" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2); $made)"
step_done "(c) kernels, waited for"

echo "cuda_portability: times ((c) ran beside the wheels, (a) and (b); build: ${build#"$root"/})"
printf '  %s\n' "${times[@]}"
say "total $((SECONDS - t_start)) s (target: 360 s)"
