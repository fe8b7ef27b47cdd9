#!/usr/bin/env python3
"""Runs the CUDA backend's tests on the CPU, under an emulation of the CUDA execution model.

kernels/*.cu are compiled as C++ (tools/device/emu/transform.py rewrites the <<<>>> launches)
against tools/device/emu/include (a small fake CUDA runtime: fibers for threads, real
barriers and warp shuffles, host memory as device memory). cuBLASLt is replaced by our
reference GEMM kernel (itself emulated) and cuDNN is absent (emu_stubs.cpp). Everything else
is the real code: CudaBackend, the allocator, every hand-written kernel, the tests.

This is not a GPU: no timing, no concurrency between blocks, and cuBLASLt / cuDNN / the
launch-configuration limits of a real device are not exercised. What it does prove is that
the kernels' indexing, reductions, barriers, shuffles and masks compute the same functions as
the CPU backend, and that the backend's dispatch works end to end (the golden pipelines).

It also links the app layer (src/app) into an emulated `ditbatch` (build-emu/ditbatch), so
that `ditbatch selftest --backend cuda` runs its CUDA half here before any GPU sees it:
--selftest "ARGS" runs it with those arguments after (or, with --no-tests, instead of) the tests.

Usage: python3 tools/device/emulate.py [--asan] [--core-build DIR] [--build DIR] [--no-tests]
                                       [--selftest "ARGS"] [-- gtest args]
The core library and the link line come from a CMake build (default build-cuda).
Default gtest filter: every CUDA test except the 16,384-token attention (too slow emulated).
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EMU = os.path.join(ROOT, "tools", "device", "emu")
KERNELS = os.path.join(ROOT, "kernels")
HOST_SOURCES = ["cuda_backend.cpp", "cuda_memory.cpp", "cuda_check.cpp", "cuda_versions.cpp"]  # gemm.cpp, attention_cudnn.cpp: stubs
SKIPPED_CU = {"cuda_device.cu"}  # stubbed in emu_stubs.cpp
TESTS = ["test_cuda_ops.cpp", "test_cuda_pipeline.cpp"]
DEFAULT_FILTER = "*Cuda*:-*CudaAttentionLarge*"


def ninja_commands(build, target):
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", target], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--core-build", default=os.path.join(ROOT, "build-cuda"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build-emu"))
    ap.add_argument("--asan", action="store_true", help="AddressSanitizer on the kernels, backend and tests")
    ap.add_argument("--jobs", default="2")
    ap.add_argument("--no-tests", action="store_true", help="build, but run no gtest")
    ap.add_argument("--selftest", help="then run the emulated `ditbatch selftest` with these arguments")
    ap.add_argument("gtest", nargs="*")
    args = ap.parse_args()
    core = os.path.abspath(args.core_build)
    build = os.path.abspath(args.build + ("-asan" if args.asan else ""))
    os.makedirs(os.path.join(build, "src"), exist_ok=True)
    # The layer libraries but the two rebuilt here from source (app, and cuda: the kernels).
    with open(os.path.join(core, "layers.txt")) as f:
        layer_libs = [line.split()[0] for line in f if line.strip()]
    layer_libs = ["ditbatch_" + name for name in layer_libs if name not in ("app", "cuda")]
    subprocess.run(["ninja", "-C", core] + layer_libs, check=True)

    # Compile flags: those of the CUDA test object in the core build, with our fake CUDA headers
    # in place of the toolkit's.
    compile_line = [l for l in ninja_commands(core, "tests/CMakeFiles/ditbatch_tests.dir/unit/test_cuda_ops.cpp.o")
                    if "test_cuda_ops.cpp" in l][-1]
    words = shlex.split(compile_line)
    while words and not words[0].startswith("-"):  # the compiler (and a launcher such as ccache)
        words = words[1:]
    cleaned, i = [], 0
    while i < len(words):
        w = words[i]
        if w in ("-o", "-c", "-MF", "-MT"):  # per-file arguments
            i += 2
            continue
        if w == "-isystem" and i + 1 < len(words) and "cuda" in words[i + 1]:  # the toolkit's headers
            i += 2
            continue
        if w != "-MD" and not w.endswith(".cpp"):
            cleaned.append(w)
        i += 1
    flags = ["-I" + os.path.join(EMU, "include"), "-I" + KERNELS, "-DDITBATCH_CUDA_EMULATION=1"] + cleaned + [
        "-g", "-O1", "-ffp-contract=off", "-Wno-unknown-pragmas", "-fno-omit-frame-pointer"]
    if args.asan:
        flags += ["-fsanitize=address"]

    link_line = ninja_commands(core, "tests/ditbatch_tests")[-1]
    libs, after_core = [], False
    link_words = next(part for part in link_line.split("&&") if "c++" in part or "g++" in part)
    for w in shlex.split(link_words):
        if os.path.basename(w)[3:-2] in layer_libs:
            after_core = True
            libs.append(os.path.join(core, w) if not os.path.isabs(w) else w)
            continue
        if re.search(r"libditbatch_\w+\.a$", w):
            continue
        if not after_core or w.startswith("-Wl,-rpath"):
            continue
        if any(x in w for x in ("cuda", "cublas", "cudnn", "cudadevrt", "culibos")):
            continue
        libs.append(w)
    libs += ["/usr/lib/x86_64-linux-gnu/libgtest.a", "/usr/lib/x86_64-linux-gnu/libgtest_main.a", "-lpthread"]
    if args.asan:
        libs = ["-fsanitize=address"] + libs

    sources = []
    for name in sorted(os.listdir(KERNELS)):
        if name.endswith(".cu") and name not in SKIPPED_CU:
            out = os.path.join(build, "src", name[:-3] + ".cpp")
            sources.append(("transform", os.path.join(KERNELS, name), out))
    for name in HOST_SOURCES:
        sources.append(("cxx", os.path.join(KERNELS, name), None))
    for name in ("emu_runtime.cpp", "emu_stubs.cpp"):
        sources.append(("cxx", os.path.join(EMU, name), None))
    app_dir = os.path.join(ROOT, "src", "app")
    app_sources = sorted(f for f in os.listdir(app_dir) if f.endswith(".cpp") and f != "main.cpp")
    for name in app_sources:
        sources.append(("cxx", os.path.join(app_dir, name), None))
    for name in TESTS:
        sources.append(("cxx", os.path.join(ROOT, "tests", "unit", name), None))

    n = ["rule transform", f"  command = python3 {EMU}/transform.py $in > $out", "  description = emulate $in", "",
         "rule cxx", f"  command = c++ {' '.join(shlex.quote(f) for f in flags)} -MD -MF $out.d -c $in -o $out",
         "  depfile = $out.d", "  deps = gcc", "  description = c++ $in", "",
         "rule link", f"  command = c++ -o $out $in {' '.join(shlex.quote(l) for l in libs)}", "  description = link $out", "",
         "rule link_app", f"  command = c++ -o $out $in {' '.join(shlex.quote(l) for l in libs if 'gtest' not in l)}",
         "  description = link $out", ""]
    objects, test_objects = [], []
    for kind, src, out in sources:
        if kind == "transform":
            n.append(f"build {out}: transform {src} | {EMU}/transform.py")
            src = out
        obj = os.path.join(build, "obj", os.path.basename(src) + ".o")
        n.append(f"build {obj}: cxx {src}")
        (test_objects if os.path.basename(src) in TESTS else objects).append(obj)
    core_lib = " ".join(l for l in libs if re.search(r"libditbatch_\w+\.a$", l))
    exe = os.path.join(build, "ditbatch_cuda_emulated_tests")
    n.append(f"build {exe}: link {' '.join(test_objects + objects)} | {core_lib}")
    main_obj = os.path.join(build, "obj", "main.cpp.o")
    n.append(f"build {main_obj}: cxx {os.path.join(app_dir, 'main.cpp')}")
    ditbatch = os.path.join(build, "ditbatch")
    n.append(f"build {ditbatch}: link_app {main_obj} {' '.join(objects)} | {core_lib}")
    with open(os.path.join(build, "build.ninja"), "w") as f:
        f.write("\n".join(n) + "\n")
    subprocess.run(["ninja", "-C", build, "-j", args.jobs], check=True)

    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    if args.asan:
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "detect_leaks=0:detect_stack_use_after_return=0")
    rc = 0
    if not args.no_tests:
        gtest = args.gtest or ["--gtest_filter=" + DEFAULT_FILTER]
        print("running", exe, *gtest, flush=True)
        rc = subprocess.run([exe] + gtest, env=env).returncode
    if args.selftest is not None:
        command = [ditbatch, "selftest"] + shlex.split(args.selftest)
        print("running", *command, flush=True)
        rc = rc or subprocess.run(command, env=env).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
