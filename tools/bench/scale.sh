#!/usr/bin/env bash
# Start-up at scale: for N prompts, (a) a rerun over N finished images, from its start to
# "nothing to do" (the process's end: the manifest read, the settings check, the merge and the
# report included), and (b) a first start of N prompts, from its start to its first denoising
# step; each with its peak memory (GNU time's maximum resident set). Then the end of a job
# whose runs were killed: (c) the same rerun with every line still in four manifest parts of
# killed runs, which it merges into manifest.jsonl (and so writes the report again), beside
# (r) `ditbatch report` of the folder alone: the merge is (c) less (r). The finished outputs are made
# without the model (tools/bench/scale_outputs.py: real PNGs, real manifest lines). One thread.
# IMAGES_PER_TAR=1000: the same for --output-format webdataset (tars of that many samples).
# A benchmark, not a test.  usage: tools/bench/scale.sh N [N...]   (BUILD_DIR=build, WORK=/tmp)
set -euo pipefail
build=${BUILD_DIR:-build}
exe=$(realpath "$build/ditbatch")
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 N [N...]" >&2; exit 2; }
work=$(mktemp -d "${WORK:-/tmp}/ditbatch-scale-XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -n "${KEEP:-}" ] && trap 'echo "kept $work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common=(--weights "$work/tiny.h5" --width 16 --height 16 --steps 2 --threads 1)  # 16x16 PNGs: a million take 4 GB
per_tar=${IMAGES_PER_TAR:-0}
[ "$per_tar" = 0 ] || common+=(--output-format webdataset --images-per-tar "$per_tar")
"$exe" make-tiny --out "$work/tiny.h5" > /dev/null
# One real image: its PNG and its manifest line are the template of every finished output.
echo "a photo of item 0 on a wooden table, soft morning light, 35mm film, shallow depth of field" > "$work/one.txt"
"$exe" generate "${common[@]}" --prompts "$work/one.txt" --out "$work/one" > "$work/one.log" 2>&1
tail -1 "$work/one/manifest.jsonl" > "$work/template.json"  # (a WebDataset image's packed line)
if [ "$per_tar" = 0 ]; then
  png=$(ls "$work"/one/*.png)
else
  png=$work/one.png
  tar -xOf "$work/one/00000.tar" 000000000.png > "$png"
fi

seconds() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
peak_mb() { awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$1"; }
cpu_s() { awk -F': ' '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$1"; }  # on a shared machine

printf "%9s %8s %10s %9s %10s %10s %9s %9s %10s %9s %9s %10s %10s\n" N "rerun s" "rerun cpu" "rerun MB" "first s" \
  "first cpu" "first MB" "parts s" "parts cpu" "parts MB" "report s" "report cpu" "outputs s"
for n in "$@"; do
  python3 -c "
import sys
for i in range(int(sys.argv[1])):
    print(f'a photo of item {i} on a wooden table, soft morning light, 35mm film, shallow depth of field')
" "$n" > "$work/prompts.txt"
  # (outputs s: how long making the N finished outputs took, for the record)
  t0=$(date +%s.%N)
  python3 "$here/scale_outputs.py" "$work/out" "$n" "$work/prompts.txt" "$work/template.json" "$png" 0 "$per_tar"
  t1=$(date +%s.%N)
  made=$(seconds "$t0" "$t1")

  # The report the end of a real run leaves beside its images (a rerun with nothing to do keeps it)
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$work/report.time" "$exe" report "$work/out" > /dev/null
  t1=$(date +%s.%N)
  report=$(seconds "$t0" "$t1")

  # (a) the rerun: every image is complete, so it ends once it has checked them
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$work/rerun.time" "$exe" generate "${common[@]}" --prompts "$work/prompts.txt" \
    --out "$work/out" > "$work/rerun.log" 2>&1 || { cat "$work/rerun.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  grep -q "0 done, $n skipped" "$work/rerun.log" || { echo "scale: the rerun did not skip all $n:" >&2; cat "$work/rerun.log" >&2; exit 1; }
  rerun=$(seconds "$t0" "$t1")

  # (b) a first start into an empty folder, to its first denoising step (then abandoned)
  rm -rf "$work/fresh"
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$work/first.time" "$exe" generate "${common[@]}" --prompts "$work/prompts.txt" \
    --out "$work/fresh" --log-level debug --on-signal abandon > "$work/first.log" 2>&1 &
  timer=$!
  until grep -q "denoising, 2 steps" "$work/first.log" 2> /dev/null; do
    kill -0 "$timer" 2> /dev/null || { echo "scale: the first start ended before a step:" >&2; cat "$work/first.log" >&2; exit 1; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  for pid in $(ps -o pid= --ppid "$timer"); do kill -TERM "$pid" || true; done  # ditbatch, time's child: it abandons its image
  wait "$timer" || true
  first=$(seconds "$t0" "$t1")
  # (c) the lines as four killed runs leave them (parts no process holds), merged by the rerun
  mkdir -p "$work/out/.manifest"
  split -n l/4 -d --additional-suffix=.jsonl "$work/out/manifest.jsonl" "$work/out/.manifest/killed-rank"
  rm "$work/out/manifest.jsonl"
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$work/parts.time" "$exe" generate "${common[@]}" --prompts "$work/prompts.txt" \
    --out "$work/out" > "$work/parts.log" 2>&1 || { cat "$work/parts.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  grep -q "0 done, $n skipped" "$work/parts.log" || { echo "scale: the rerun over parts did not skip all $n:" >&2; cat "$work/parts.log" >&2; exit 1; }
  [ "$(wc -l < "$work/out/manifest.jsonl")" = "$n" ] && { [ ! -d "$work/out/.manifest" ] || [ -z "$(ls -A "$work/out/.manifest")" ]; } ||
    { echo "scale: the parts were not merged into $n lines" >&2; exit 1; }
  parts=$(seconds "$t0" "$t1")
  printf "%9d %8s %10s %9s %10s %10s %9s %9s %10s %9s %9s %10s %10s\n" "$n" "$rerun" "$(cpu_s "$work/rerun.time")" \
    "$(peak_mb "$work/rerun.time")" "$first" "$(cpu_s "$work/first.time")" "$(peak_mb "$work/first.time")" "$parts" \
    "$(cpu_s "$work/parts.time")" "$(peak_mb "$work/parts.time")" "$report" "$(cpu_s "$work/report.time")" "$made"
  [ -n "${KEEP:-}" ] || rm -rf "$work/out" "$work/fresh"
done
