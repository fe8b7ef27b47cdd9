#!/usr/bin/env bash
# The run report (OUT/report.html) of real generate runs under mpiexec, checked in headless
# Chromium by check_report.py: a 2-rank run with a failed image, then a resumed 2-rank run
# into the same folder (more prompts, the failed image made again, another one failing), and
# `ditbatch report` writing the same page from the folder, the page at 100,000 images
# (check_scale.py), and an edit run's page, each input beside its output (check_edit_report.py).
# The screenshots stay in ARTEFACTS.
# Skips (77) where chromium, chromedriver or python3-selenium are missing
# (tools/install-deps.sh installs them).
# usage: report_test.sh DITBATCH TINY_MODEL ARTEFACTS_DIR
set -euo pipefail
exe=$1 model=$2 artefacts=$3
here=$(cd "$(dirname "$0")" && pwd)
for tool in chromium chromedriver mpiexec; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed (tools/install-deps.sh)"; exit 77; }
done
# Debian's python3-selenium is for Debian's python3, which another python3 first on PATH (pyenv) lacks.
py=''
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import selenium' 2> /dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "SKIP: python3-selenium is not installed (tools/install-deps.sh)"; exit 77; }
work=$(mktemp -d /tmp/ditbatch-report-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$artefacts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*"; exit 1; }

# Prompts a user might write, and some that try to become markup in the page. With the
# contiguous shard and 2 ranks, "blocked-5" is rank 1's last image of 6 prompts and
# "blocked-7" rank 1's last of 8: a folder at its PNG's name fails it, with nothing left after.
python3 - "$work" <<'PY'
import json, sys
prompts = [
    {"prompt": "a lighthouse on a cliff at dusk, oil painting"},
    {"prompt": "<script>window.__pwned = 1</script> a harbour at night", "negative_prompt": "<i class=\"hostile\">blurry</i>"},
    {"prompt": "\"><img class=\"hostile\" src=x onerror=\"window.__pwned = 2\"> a red fox in the snow"},
    {"prompt": "東京の夜景, neon reflections & rain <b class=\"hostile\">bold</b>", "name": "night #1 100% <b>"},
    {"prompt": "a cat on a windowsill </script><script>window.__pwned = 3</script>", "seed": 18446744073709551615},
    {"prompt": "a quiet harbour, morning fog", "name": "blocked-5"},
    {"prompt": "mountains under the milky way, long exposure"},
    {"prompt": "a bowl of ramen, studio light", "name": "blocked-7"},
]
for n in (6, 8):
    with open(f"{sys.argv[1]}/prompts{n}.jsonl", "w", encoding="utf-8") as f:
        for p in prompts[:n]:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
PY
out="$work/out"
gen() {  # gen PROMPTS LOG
  set +e
  mpiexec -n 2 "$exe" generate --weights "$model" --out "$out" --prompts "$1" --width 48 --height 32 --steps 2 \
    --shard contiguous --threads 1 > "$2" 2>&1
  status=$?
  set -e
}

mkdir -p "$out/blocked-5.png"
gen "$work/prompts6.jsonl" "$work/run1.log"
[ "$status" = 1 ] || { cat "$work/run1.log"; fail "run 1 exited $status, expected 1 (a failed image)"; }
grep -q "report: $out/report.html" "$work/run1.log" || { cat "$work/run1.log"; fail "run 1 did not say where its report is"; }
"$py" "$here/check_report.py" "$out" "$artefacts/report-run1.png" --expect-runs 1 || fail "run 1's report"

# The resume: the failed image is made now, two new ones are made, one of them fails.
rmdir "$out/blocked-5.png"
mkdir -p "$out/blocked-7.png"
gen "$work/prompts8.jsonl" "$work/run2.log"
[ "$status" = 1 ] || { cat "$work/run2.log"; fail "run 2 exited $status, expected 1 (a failed image)"; }
grep -q "summary: 2 done, 5 skipped, 1 failed" "$work/run2.log" || { cat "$work/run2.log"; fail "run 2's summary"; }
cp "$out/report.html" "$work/by-generate.html"
"$py" "$here/check_report.py" "$out" "$artefacts/report.png" --expect-runs 2 || fail "the resumed run's report"

# `ditbatch report` writes the page from the folder alone: the same data but for its time.
[ "$("$exe" report "$out")" = "$out/report.html" ] || fail "ditbatch report did not print the report's path"
python3 - "$work/by-generate.html" "$out/report.html" <<'PY' || fail "ditbatch report wrote other data than generate"
import json, re, sys
def data(path):
    text = open(path, encoding="utf-8").read()
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S).group(1)
    assert "<" not in block and ">" not in block, "markup characters in the data block"
    d = json.loads(block)
    d.pop("generated")
    return d
a, b = data(sys.argv[1]), data(sys.argv[2])
assert a == b, [k for k in a if a[k] != b.get(k)]
print(f"ditbatch report: the same {len(a['images'])} images and {len(a['runs'])} runs as generate's report")
PY
"$py" "$here/check_report.py" "$out" "$artefacts/report-command.png" --expect-runs 2 || fail "ditbatch report's page"
# The same page at 100,000 images (the run's lines repeated): one page of the gallery in the DOM.
"$py" "$here/check_scale.py" "$exe" "$out" "$work/scale" 100000 || fail "the report at 100,000 images"
# An edit run (a tiny Edit-2511 file converted here), its inputs beside the prompt file and one
# by an absolute path: each card shows its input images beside the output.
golden="$here/../data/golden"
cp -r "$golden/tiny-pipeline" "$work/edit-2511"
cp -r "$golden/tiny-pipeline-edit-2511/." "$work/edit-2511/"
"$exe" convert --from "$work/edit-2511" --to "$work/edit.h5" > "$work/convert.log" 2>&1 ||
  { cat "$work/convert.log"; fail "converting the Edit-2511 folder"; }
mkdir -p "$work/edits/pictures"
cp "$golden/input_images/q90_420.jpg" "$work/edits/pictures/a.jpg"
cp "$golden/input_images/rgb8.png" "$work/edits/pictures/b.png"
cp "$golden/input_images/q75_422.jpg" "$work/c.jpg"
cat > "$work/edits/edits.jsonl" <<EOF
{"prompt": "make the sky green", "image": "pictures/a.jpg", "width": 64, "height": 48, "steps": 2}
{"prompt": "put both on a table", "image": ["pictures/a.jpg", "pictures/b.png"], "width": 64, "height": 48, "steps": 2}
{"prompt": "a sunny day", "image": "$work/c.jpg", "width": 64, "height": 48, "steps": 2}
EOF
"$exe" generate --weights "$work/edit.h5" --out "$work/edit-out" --prompts "$work/edits/edits.jsonl" --threads 1 \
  > "$work/edit.log" 2>&1 || { cat "$work/edit.log"; fail "the edit run"; }
"$py" "$here/check_edit_report.py" "$work/edit-out" "$artefacts/report-edit.png" || fail "the edit run's report"
echo "PASS: report (screenshots in $artefacts)"
