#!/usr/bin/env bash
# The easyconfigs of packaging/easybuild under the real EasyBuild (its PyPI release, pinned, in a
# venv of build-easybuild/) and the real Lmod (Debian's lmod): tests/install/easybuild_test.sh.
# eb builds the CPU-only easyconfig from scratch (the program only, no tests), so this costs one
# release build of ditbatch (~3 min on 2 cores) plus the venv (~1 min the first time).
# Usage: bash tools/ci/easybuild.sh [BUILD_DIR]   (BUILD_DIR: the build whose images the module's
# must equal; default build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
venv="build-easybuild/venv"
eb_version=5.4.1
if [ ! -x "$venv/bin/eb" ] || [ "$("$venv/bin/python" -c 'import easybuild.tools.version as v; print(v.VERSION)' 2>/dev/null)" != "$eb_version" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --no-cache-dir "easybuild==$eb_version"
fi
# eb finds its Python through EB_PYTHON (there is no `python` on a Debian PATH)
export EB_PYTHON=$PWD/$venv/bin/python PATH=$PWD/$venv/bin:$PATH
bash tests/install/easybuild_test.sh "$build"
