#!/usr/bin/env bash
# The easyconfigs of packaging/easybuild under the real EasyBuild and the real Lmod:
#   1. `eb` builds and installs ditbatch-VERSION.eb (CPU-only, the system toolchain, Debian's
#      libraries) from a source tarball of this checkout into a temporary prefix, runs its sanity
#      checks (`ditbatch selftest --quick --backend cpu` among them) and writes its Lua module;
#   2. under Lmod: `module use`, `module load ditbatch` (PATH, MANPATH, DITBATCH_JOBS, EBROOT*,
#      whatis and help as `module spider` shows them), a second load changes nothing, the loaded
#      `ditbatch` makes the tiny model and generates the example prompts, the same bytes as the
#      build tree's binary, and `module unload` gives back the environment it found;
#   3. the CUDA easyconfig: `eb --dry-run --robot` resolves its CUDA and cuDNN to EasyBuild's own
#      easyconfigs, and its real configure step (`--stop=configure`, the local toolkit standing
#      in for those modules) turns the CUDA backend on for the site's compute capabilities.
# usage: easybuild_test.sh BUILD_DIR     (eb on PATH: tools/ci/easybuild.sh installs it)
# EB_TEST_KEEP=1 keeps the work folder (it is printed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/ditbatch-eb-XXXXXX)
[ -n "${EB_TEST_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
show() { echo "---- $1"; tail -n "${2:-40}" "$1"; }

command -v eb >/dev/null || fail "eb is not on PATH (tools/ci/easybuild.sh installs EasyBuild)"
lmod_init=/usr/share/lmod/lmod/init/bash
[ -f "$lmod_init" ] || fail "$lmod_init: Lmod is not installed (Debian package lmod)"

version=$(sed -n 's/^project(ditbatch VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
easyconfig=$root/packaging/easybuild/ditbatch-$version.eb
cuda_easyconfig=$root/packaging/easybuild/ditbatch-$version-CUDA-12.4.0.eb
for f in "$easyconfig" "$cuda_easyconfig"; do
  [ -f "$f" ] || fail "$f: no easyconfig for the version CMakeLists.txt declares ($version)"
done

# The source tarball a release would be: this checkout's tracked files (with their uncommitted
# changes), as `git archive` makes it, in the sourcepath where eb looks for it.
mkdir -p "$work/sources/d/ditbatch"
tree=$(git -C "$root" stash create 2>/dev/null || true)
tree=${tree:-$(git -C "$root" rev-parse HEAD)}
git -C "$root" archive --format=tar.gz --prefix="ditbatch-$version/" -o "$work/sources/d/ditbatch/ditbatch-$version.tar.gz" \
  "$tree"

# shellcheck source=/dev/null
. "$lmod_init"
eb_flags=(--prefix="$work/eb" --sourcepath="$work/sources" --modules-tool=Lmod --module-syntax=Lua
          --robot-paths="$root/packaging/easybuild:")
[ "$(id -u)" = 0 ] && eb_flags+=(--allow-use-as-root-and-accept-consequences)

# -- 1. build, install, sanity-check, module ------------------------------------------------------
eb "$easyconfig" "${eb_flags[@]}" > "$work/eb.log" 2>&1 || {
  show "$work/eb.log"; for l in "$work"/eb/tmp/eb-*/easybuild-*.log; do [ -f "$l" ] && show "$l" 80; done
  fail "eb $easyconfig"; }
grep -q "COMPLETED: Installation ended successfully" "$work/eb.log" || { show "$work/eb.log"; fail "eb did not complete"; }
prefix=$work/eb/software/ditbatch/$version
modules=$work/eb/modules/all
[ -f "$modules/ditbatch/$version.lua" ] || fail "no Lua module at $modules/ditbatch/$version.lua"
grep -q "sanity check command ditbatch selftest --quick --backend cpu ran successfully" \
  "$prefix"/easybuild/easybuild-ditbatch-*.log || fail "the sanity check did not run the selftest"

# -- 2. the module under Lmod ---------------------------------------------------------------------
# Lmod's own bookkeeping (_ModuleTable*, __LMOD_REF_COUNT_*, LOADEDMODULES, _LMFILES_) aside, the
# environment after `module unload` must be the one before `module load`.
user_env() { env | grep -v '^\(_ModuleTable\|__LMOD_REF_COUNT\|LOADEDMODULES=\|_LMFILES_=\|_=\)' | sort; }
module use "$modules"
unset DITBATCH_JOBS EBROOTDITBATCH
# Lmod keeps one copy of each PATH entry: start from such a PATH so that the comparison is ours.
PATH=$(tr ':' '\n' <<<"$PATH" | awk 'NF && !seen[$0]++' | paste -sd:)
before=$(user_env)
module load ditbatch
[ "$(command -v ditbatch)" = "$prefix/bin/ditbatch" ] || fail "module load: ditbatch on PATH is $(command -v ditbatch)"
[ "${EBROOTDITBATCH:-}" = "$prefix" ] || fail "EBROOTDITBATCH=${EBROOTDITBATCH:-} (expected $prefix)"
[ "${DITBATCH_JOBS:-}" = "$prefix/share/ditbatch/jobs" ] || fail "DITBATCH_JOBS=${DITBATCH_JOBS:-}"
[ -f "$DITBATCH_JOBS/generate-job.sh" ] || fail "DITBATCH_JOBS has no generate-job.sh"
[[ ":${MANPATH:-}:" == *":$prefix/share/man:"* ]] || fail "MANPATH=${MANPATH:-} lacks $prefix/share/man"
[ -f "$prefix/share/man/man1/ditbatch.1" ] || fail "no man page in $prefix/share/man/man1"
[[ ":${XDG_DATA_DIRS:-}:" == *":$prefix/share:"* ]] || fail "XDG_DATA_DIRS=${XDG_DATA_DIRS:-} lacks $prefix/share (bash completion)"
loaded=$(user_env)
module load ditbatch   # again: nothing changes
[ "$(user_env)" = "$loaded" ] || { diff <(echo "$loaded") <(user_env) || true; fail "a second module load changed the environment"; }
module whatis ditbatch > "$work/whatis.txt" 2>&1
grep -q "Keywords: diffusion" "$work/whatis.txt" || { cat "$work/whatis.txt"; fail "module whatis"; }
module help ditbatch > "$work/help.txt" 2>&1
grep -q 'DITBATCH_JOBS' "$work/help.txt" || { cat "$work/help.txt"; fail "module help does not name DITBATCH_JOBS"; }
module spider ditbatch > "$work/spider.txt" 2>&1
grep -q "ditbatch/$version" "$work/spider.txt" || { cat "$work/spider.txt"; fail "module spider does not list ditbatch/$version"; }

ditbatch --version > "$work/version.txt"
grep -q "installed at: $prefix/bin/ditbatch" "$work/version.txt" || { cat "$work/version.txt"; fail "--version does not say where it is installed"; }
head -n 1 "$work/version.txt" | grep -qx "ditbatch $version ${tree:0:12}" ||
  { cat "$work/version.txt"; fail "--version does not name the archived commit ${tree:0:12}"; }
grep -q "CUDA backend: not built" "$work/version.txt" || { cat "$work/version.txt"; fail "the CPU easyconfig built a CUDA backend"; }
ditbatch make-tiny --out "$work/tiny.h5" > "$work/make.log" 2>&1 || { cat "$work/make.log"; fail "make-tiny"; }
gen_args=(--weights "$work/tiny.h5" --prompts "$DITBATCH_JOBS/examples/prompts.txt" --width 64 --height 64 --steps 3)
ditbatch generate "${gen_args[@]}" --out "$work/out" > "$work/gen.log" 2>&1 || { cat "$work/gen.log"; fail "generate"; }
ditbatch verify "$work/out" > /dev/null || fail "verify of the module's images"
count=$(find "$work/out" -name '*.png' | wc -l)
prompts=$(grep -cv '^\s*\(#\|$\)' "$DITBATCH_JOBS/examples/prompts.txt")
[ "$count" = "$prompts" ] || fail "$count images for $prompts prompts"
# The same images as the build tree's binary (another compile of the same code, by CMake alone):
# the same pixels and text chunks, but for the software chunk, which names each binary's commit.
"$build/ditbatch" generate "${gen_args[@]}" --out "$work/ref" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "the build tree's generate"; }
python3 - "$work/ref" "$work/out" "ditbatch $version (${tree:0:12})" <<'PY' || fail "the module's images differ from $build/ditbatch's"
import pathlib, struct, sys, zlib
def chunks(path):  # {type: [data, ...]} of a PNG
    data, out = path.read_bytes()[8:], {}
    while data:
        n = struct.unpack(">I", data[:4])[0]
        out.setdefault(data[4:8], []).append(data[8:8 + n])
        data = data[12 + n:]
    return out
ref_dir, out_dir, software = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
for ref_png in sorted(ref_dir.glob("*.png")):
    ref, out = chunks(ref_png), chunks(out_dir / ref_png.name)
    if zlib.decompress(b"".join(ref[b"IDAT"])) != zlib.decompress(b"".join(out[b"IDAT"])):
        sys.exit(f"{ref_png.name}: other pixels")
    def text(c):  # {keyword: text}, each binary's own software name (also in "parameters") masked
        chunks = dict(t.split(b"\0", 1) for t in c[b"iTXt"])
        name = chunks[b"software"].split(b"\0")[-1]
        return name.decode(), {k: v.replace(name, b"<software>") for k, v in chunks.items()}
    (_, ref_text), (out_software, out_text) = text(ref), text(out)
    if out_software != software:
        sys.exit(f"{ref_png.name}: its software is {out_software!r}, not {software!r}")
    if ref_text != out_text:
        sys.exit(f"{ref_png.name}: other text chunks")
PY

module unload ditbatch
[ "$(user_env)" = "$before" ] || { diff <(echo "$before") <(user_env) || true; fail "module unload did not restore the environment"; }
command -v ditbatch >/dev/null && fail "ditbatch still on PATH after module unload"

# -- 3. the CUDA easyconfig ------------------------------------------------------------------------
# Its dependencies are EasyBuild's own easyconfigs (the robot finds them in the easyconfigs
# release it came with); none is built here.
eb "$cuda_easyconfig" "${eb_flags[@]}" --dry-run --robot > "$work/cuda-dry.log" 2>&1 ||
  { show "$work/cuda-dry.log"; fail "eb --dry-run --robot $cuda_easyconfig"; }
for module in CUDA/12.4.0 cuDNN/9.1.1.17-CUDA-12.4.0 "ditbatch/$version-CUDA-12.4.0"; do
  grep -q "\.eb (module: $module)" "$work/cuda-dry.log" || { show "$work/cuda-dry.log"; fail "the dry run does not resolve $module"; }
done
# Its real configure step, with the local toolkit standing in for the CUDA and cuDNN modules
# (EBROOT* as their modules set them, the modules themselves filtered out): CMakeMake maps the
# site's compute capabilities to CMAKE_CUDA_ARCHITECTURES and CMake builds for them.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  cudnn_home=$cuda_home
  [ -f "$cudnn_home/include/cudnn.h" ] || cudnn_home=/usr
  EBROOTCUDA=$cuda_home EBROOTCUDNN=$cudnn_home PATH=$(dirname "$nvcc"):$PATH \
    eb "$cuda_easyconfig" "${eb_flags[@]}" --filter-deps=CUDA,cuDNN --stop=configure --trace \
    --cuda-compute-capabilities=8.0,9.0,10.0 > "$work/cuda-configure.log" 2>&1 ||
    { show "$work/cuda-configure.log"; fail "the CUDA easyconfig's configure step"; }
  configure=$(grep -m1 -- '-DCMAKE_INSTALL_PREFIX=' "$work/cuda-configure.log") || { show "$work/cuda-configure.log"; fail "no configure line"; }
  for want in '-DDITBATCH_CUDA=ON' "-DCMAKE_CUDA_ARCHITECTURES='80;90;100'" '-DBUILD_TESTING=OFF'; do
    [[ $configure == *"$want"* ]] || fail "the CUDA configure line lacks $want: $configure"
  done
  eb_log=$(sed -n 's/^== Results of the build can be found in the log file(s) //p' "$work/cuda-configure.log")
  grep -q "ditbatch: CUDA backend with CUDA .* for 80 90 100;" "$eb_log" ||
    { show "$eb_log"; fail "the CUDA configure does not build for the site's architectures"; }
else
  echo "note: no nvcc here: the CUDA easyconfig's configure step did not run"
fi
echo "PASS: eb installed ditbatch/$version into $prefix; Lmod loaded, ran and unloaded it; the CUDA easyconfig resolves and configures"
