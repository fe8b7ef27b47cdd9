#!/usr/bin/env bash
# Creates tools/golden/.venv with the pinned library versions that made the committed goldens.
# Idempotent: does nothing when the venv already holds exactly these versions.
# Python only regenerates goldens; nothing in the build or the tests needs it.
#
#   tools/golden/setup.sh && tools/golden/.venv/bin/python tools/golden/make_goldens.py
#
# Env: PYTHON=/path/to/python3 (>= 3.10; the committed files were made with 3.11.7).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"

# torch comes from PyPI (the CUDA wheel with its nvidia-* dependencies; it runs fine on the CPU).
pins=(
  torch==2.15.0
  diffusers==0.42.1
  transformers==5.24.0
  safetensors==0.8.0
  h5py==3.16.0
  numpy==2.4.6
  tokenizers==0.23.3
  peft==0.21.2
)

pins_satisfied() {
  "$venv/bin/python" - "${pins[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
bad = []
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have is None or have.split("+")[0] != want:
        bad.append(f"{name}: have {have}, want {want}")
if bad:
    print("tools/golden/setup.sh: installing, because " + "; ".join(bad))
sys.exit(1 if bad else 0)
PY
}

if [ ! -x "$venv/bin/python" ]; then
  "$python" - <<'PY' || { echo "tools/golden/setup.sh: need Python >= 3.10 (set PYTHON=...)" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
  echo "tools/golden/setup.sh: creating $venv with $("$python" --version 2>&1)"
  "$python" -m venv "$venv"
fi

if pins_satisfied; then
  echo "tools/golden/setup.sh: $venv already has the pinned versions"
  exit 0
fi

"$venv/bin/python" -m pip install --disable-pip-version-check "${pins[@]}"
pins_satisfied || { echo "tools/golden/setup.sh: pins still not satisfied after install" >&2; exit 1; }
echo "tools/golden/setup.sh: done; run tools/golden/.venv/bin/python tools/golden/make_goldens.py"
