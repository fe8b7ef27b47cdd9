#!/usr/bin/env bash
# tools/device/compare_pngs.py (the GPU check's CPU-against-GPU image comparison) on real
# `ditbatch generate` folders: the same run twice is identical (99 dB, exit 0), another seed is
# a different image (below 30 dB, exit 1), a missing image is reported (exit 1).
# usage: compare_pngs_test.sh DITBATCH TINY_MODEL
set -euo pipefail
exe=$1 model=$2
here=$(cd "$(dirname "$0")" && pwd)
compare="python3 $here/../../tools/device/compare_pngs.py"
work=$(mktemp -d /tmp/ditbatch-compare-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
printf 'a red fox in the snow\na lighthouse at dusk\n' > "$work/prompts.txt"
gen() { "$exe" generate --weights "$model" --prompts "$work/prompts.txt" --width 64 --height 48 --steps 3 \
          --backend cpu "$@" > /dev/null 2>&1; }
gen --out "$work/a"
gen --out "$work/b"
gen --out "$work/c" --seed 7

out=$($compare "$work/a" "$work/b") || fail "identical runs: $out"
grep -q "PSNR worst 99.00 dB over 2 of 2 images" <<< "$out" || fail "identical runs: $out"

if out=$($compare "$work/a" "$work/c"); then fail "another seed passed: $out"; fi
grep -q "FAIL" <<< "$out" || fail "another seed: $out"
worst=$(sed -n 's/^PSNR worst \([0-9.]*\) dB.*/\1/p' <<< "$out")
python3 -c "import sys; sys.exit(0 if float('$worst') < 30 else 1)" || fail "another seed scored $worst dB"

rm "$work/b/"*lighthouse*.png
if out=$($compare "$work/a" "$work/b"); then fail "a missing image passed: $out"; fi
grep -q "lighthouse.*missing in" <<< "$out" || fail "missing image not named: $out"
grep -q "over 1 of 2 images" <<< "$out" || fail "missing image counted: $out"
rm "$work/b/"*.png
if out=$($compare "$work/a" "$work/b"); then fail "no image at all passed: $out"; fi
grep -q "none of the 2 images could be compared" <<< "$out" || fail "nothing compared: $out"
echo "compare_pngs: ok"
