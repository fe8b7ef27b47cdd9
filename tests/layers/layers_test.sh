#!/usr/bin/env bash
# The layer check (tools/check_layers.py) on this tree, and on copies of it where it must fail:
# a wrong-direction include planted in io/, in core/ and in a model family's subfolder of
# model/, and a declaration with a cycle.
#   layers_test.sh SOURCE_DIR BUILD_DIR/layers.txt
set -euo pipefail
source_dir=$1 layers=$2
check="python3 $source_dir/tools/check_layers.py"
fail() { echo "FAIL: $*" >&2; exit 1; }
checked() {  # LAYERS ROOT: sets out (what the check printed) and rc (its exit status)
  rc=0
  out=$($check --layers "$1" --root "$2" 2>&1) || rc=$?
  echo "$out"
}

$check --layers "$layers" --root "$source_dir" || fail "the tree itself breaks the layer order"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree/tools"
cp -r "$source_dir/src" "$source_dir/kernels" "$work/tree/"

# A model header in the ground floor, and the pipeline in io/: each named with its line.
plant() {  # FILE INCLUDE -> the line number it lands on
  printf '#include "%s"\n' "$2" >>"$work/tree/$1"
  wc -l <"$work/tree/$1"
}
line_io=$(plant src/io/h5.cpp pipeline/runner.h)
line_core=$(plant src/core/backend.h model/transformer.h)
line_family=$(plant src/model/qwen_image_21/transformer.cpp pipeline/runner.h)
checked "$layers" "$work/tree"
[ "$rc" -eq 1 ] || fail "planted includes: exit $rc, expected 1"
grep -qF "src/io/h5.cpp:$line_io: includes \"pipeline/runner.h\" of layer pipeline; layer io may use only core, io" <<<"$out" ||
  fail "the include planted in src/io/h5.cpp:$line_io is not named"
grep -qF "src/core/backend.h:$line_core: includes \"model/transformer.h\" of layer model; layer core may use only core " <<<"$out" ||
  fail "the include planted in src/core/backend.h:$line_core is not named"
grep -qF "src/model/qwen_image_21/transformer.cpp:$line_family: includes \"pipeline/runner.h\" of layer pipeline; layer model may use only core, io, model" <<<"$out" ||
  fail "the include planted in the family folder src/model/qwen_image_21/ is not named"
[ "$(grep -c ': includes ' <<<"$out")" -eq 3 ] || fail "exactly the three planted includes are reported"

# A declaration that loops (core using app) is refused as such.
sed 's/^core src\/core:.*/core src\/core:app/' "$layers" >"$work/cycle.txt"
checked "$work/cycle.txt" "$source_dir"
[ "$rc" -eq 2 ] || fail "a cyclic declaration: exit $rc, expected 2"
grep -q "a cycle: .*core" <<<"$out" || fail "the cycle is not named"
echo "PASS"
