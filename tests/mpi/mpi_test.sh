#!/usr/bin/env bash
# MPI tests of `ditbatch generate` under mpiexec (oversubscribed, CPU backend, tiny model).
# usage: mpi_test.sh CASE DITBATCH TINY_MODEL   (CASE: placement | sharded | webdataset | idle |
#        empty | failure | kill-rerun | kill-rerun-sharded | kill-rerun-webdataset | weights-once |
#        selftest | lora | qwen-image-21 | qwen-image-edit)
set -euo pipefail
case_name=$1 exe=$2 model=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ditbatch-mpi-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive   # the same arithmetic on every rank, any -n

prompts="$work/prompts.txt"
for i in 0 1 2 3 4 5 6; do echo "test prompt number $i, a small scene"; done > "$prompts"

size=(--width 48 --height 32)
gen() {  # gen N OUT [extra args...]
  local n=$1 out=$2
  shift 2
  mpiexec -n "$n" "$exe" generate --weights "$model" --out "$out" "${size[@]}" --steps 3 "$@"
}
check() { python3 "$here/check_outputs.py" "$@"; }
check_tars() { python3 "$here/../webdataset/check_tars.py" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
count_pngs() { find "$1" -name '*.png' 2>/dev/null | wc -l; }  # in subfolders too (--layout sharded)
alive() { local st; st=$(ps -o stat= -p "$1") && [[ $st != Z* ]]; }  # a child not yet waited for is a zombie
# every_shard_mode GEN PROMPTS COUNT REF: `GEN 3 OUT --prompts PROMPTS` in each shard mode makes
# REF's COUNT images byte for byte.
every_shard_mode() {
  local generate=$1 prompt_file=$2 count=$3 ref=$4 shard
  for shard in contiguous strided dynamic; do
    "$generate" 3 "$work/n3-$shard" --prompts "$prompt_file" --shard "$shard" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n 3 $shard"; }
    grep -q "shard $shard" "$work/log" || { cat "$work/log"; fail "shard mode $shard not used"; }
    check "$work/n3-$shard" "$count" "$ref"
  done
}

case $case_name in
  placement)
    # Byte-identical images for -n 1, 2, 3 and every shard mode.
    gen 1 "$work/ref" --prompts "$prompts" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    check "$work/ref" 7
    for n in 2 3; do
      for shard in contiguous strided dynamic; do
        gen "$n" "$work/n$n-$shard" --prompts "$prompts" --shard "$shard" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n $n $shard"; }
        grep -q "shard $shard" "$work/log" || { cat "$work/log"; fail "shard mode $shard not used"; }
        check "$work/n$n-$shard" 7 "$work/ref"
        [ "$(grep -c '  rank [0-9]* on' "$work/log")" = "$n" ] || fail "summary does not list $n ranks"
      done
    done
    # Mixed sizes make auto pick dynamic.
    printf '{"prompt": "a", "width": 32}\n{"prompt": "b", "steps": 2}\n{"prompt": "c"}\n' > "$work/mixed.jsonl"
    gen 2 "$work/mixed" --prompts "$work/mixed.jsonl" > "$work/log" 2>&1 || { cat "$work/log"; fail "mixed"; }
    grep -q "shard dynamic" "$work/log" || fail "auto did not choose dynamic for mixed sizes"
    check "$work/mixed" 3
    ;;
  sharded)
    # --layout sharded: images 9998..10001 (array slice 2499 of 2500 over 10,002 prompts: slices
    # are contiguous, the first n % count one longer) lie across the first folder boundary;
    # byte-identical for -n 1 and -n 3 in every shard mode, and to the flat layout's images.
    python3 -c 'for i in range(10002): print(f"sharded test prompt {i}")' > "$work/many.txt"
    slice=(--prompts "$work/many.txt" --array-index 2499 --array-count 2500)
    gen 1 "$work/ref" "${slice[@]}" --layout sharded > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    check "$work/ref" 4
    for shard in contiguous strided dynamic; do
      gen 3 "$work/n3-$shard" "${slice[@]}" --layout sharded --shard "$shard" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n 3 $shard"; }
      grep -q "shard $shard" "$work/log" || { cat "$work/log"; fail "shard mode $shard not used"; }
      check "$work/n3-$shard" 4 "$work/ref"
    done
    gen 2 "$work/flat" "${slice[@]}" > "$work/log" 2>&1 || { cat "$work/log"; fail "flat run"; }
    python3 - "$work/ref" "$work/flat" <<'PY' || fail "sharded and flat images differ"
import json, sys
from pathlib import Path
sharded, flat = Path(sys.argv[1]), Path(sys.argv[2])
lines = {l["index"]: l for l in map(json.loads, (sharded / "manifest.jsonl").read_text().splitlines())}
flat_lines = {l["index"]: l for l in map(json.loads, (flat / "manifest.jsonl").read_text().splitlines())}
assert sorted(lines) == [9998, 9999, 10000, 10001], sorted(lines)
for i, l in lines.items():
    assert l["file"] == f"{i // 10000:05d}/{i:09d}-sharded-test-prompt-{i}.png", l["file"]
    assert flat_lines[i]["file"] == f"{i:06d}-sharded-test-prompt-{i}.png", flat_lines[i]["file"]
    assert (sharded / l["file"]).read_bytes() == (flat / flat_lines[i]["file"]).read_bytes(), i
PY
    ;;
  webdataset)
    # Tars of 2: every rank count and shard mode writes the same tars, each sample's PNG the
    # flat layout's image byte for byte (check_tars.py reads them with Python's tarfile).
    gen 1 "$work/flat" --prompts "$prompts" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    wds=(--prompts "$prompts" --output-format webdataset --images-per-tar 2)
    gen 1 "$work/n1" "${wds[@]}" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n 1"; }
    check_tars "$work/n1" 7 2 "$work/flat"
    for shard in contiguous strided dynamic; do
      gen 3 "$work/n3-$shard" "${wds[@]}" --shard "$shard" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n 3 $shard"; }
      grep -q "shard $shard" "$work/log" || { cat "$work/log"; fail "shard mode $shard not used"; }
      check_tars "$work/n3-$shard" 7 2 "$work/flat"
    done
    # Array slices are whole tars: slice 1 of 2 is tars 2 and 3 (images 4..6), slice 0 the rest.
    gen 2 "$work/slices" "${wds[@]}" --array-index 1 --array-count 2 > "$work/log" 2>&1 || { cat "$work/log"; fail "slice 1"; }
    [ "$(cd "$work/slices" && ls -- *.tar | tr '\n' ' ')" = "00002.tar 00003.tar " ] || { ls "$work/slices"; fail "slice 1 wrote other tars"; }
    gen 2 "$work/slices" "${wds[@]}" --array-index 0 --array-count 2 > "$work/log" 2>&1 || { cat "$work/log"; fail "slice 0"; }
    check_tars "$work/slices" 7 2 "$work/flat"
    ;;
  idle)
    # More ranks than prompts: the idle ranks exit cleanly.
    gen 3 "$work/out" --prompt "only one" > "$work/log" 2>&1 || { cat "$work/log"; fail "exit status"; }
    check "$work/out" 1
    grep -q "summary: 1 done, 0 skipped, 0 failed" "$work/log" || { cat "$work/log"; fail "summary"; }
    # The idle ranks know they have no image: they keep no conditioning weights; rank 0 computes its schedule's.
    for r in 1 2; do
      grep -q "rank $r/3\] \[info\] no image for this process: the weights that compute the timestep conditioning" "$work/log" ||
        { cat "$work/log"; fail "rank $r kept its conditioning weights"; }
    done
    grep -q "rank 0/3\] \[info\] timestep conditioning of 3 model times computed while loading" "$work/log" ||
      { cat "$work/log"; fail "rank 0 did not condition at load"; }
    ;;
  empty)
    # An empty prompt file is an error (a job script with a broken path must not "succeed"),
    # reported once, before --out is made; every rank exits non-zero.
    : > "$work/empty.txt"
    set +e
    gen 2 "$work/out" --prompts "$work/empty.txt" > "$work/log" 2>&1
    status=$?
    set -e
    [ "$status" -ne 0 ] || { cat "$work/log"; fail "an empty prompt file exited 0"; }
    [ "$(grep -c 'empty.txt: no prompts' "$work/log")" = 1 ] || { cat "$work/log"; fail "error not reported exactly once"; }
    [ ! -e "$work/out" ] || fail "--out was made for an empty prompt file"
    # An empty array slice of a non-empty file (more tasks than prompts) has nothing to do: exit 0.
    echo "the only prompt" > "$work/one.txt"
    gen 2 "$work/slice" --prompts "$work/one.txt" --array-index 1 --array-count 2 > "$work/log" 2>&1 ||
      { cat "$work/log"; fail "an empty slice failed"; }
    grep -q "0 done, 0 skipped, 0 failed .*slice 1 of 2 has no images (1 prompts)" "$work/log" ||
      { cat "$work/log"; fail "no 'slice 1 of 2 has no images' summary"; }
    [ ! -e "$work/slice/000000-the-only-prompt.png" ] || fail "the empty slice made another slice's image"
    # A bad prompt file: reported once (by rank 0), every rank exits non-zero.
    printf '{"prompt": "ok"}\n{"prompt": "x", "colour": "red"}\n' > "$work/bad.jsonl"
    set +e
    gen 3 "$work/bad" --prompts "$work/bad.jsonl" > "$work/log" 2>&1
    status=$?
    set -e
    [ "$status" -ne 0 ] || fail "a bad prompt file exited 0"
    [ "$(grep -c 'bad.jsonl:2: unknown field "colour"' "$work/log")" = 1 ] || { cat "$work/log"; fail "error not reported exactly once"; }
    ;;
  failure)
    # One image cannot be written (a folder sits at its PNG's name): recorded, the rest go on.
    mkdir -p "$work/out/000003-test-prompt-number-3-a-small-scene.png"
    set +e
    gen 2 "$work/out" --prompts "$prompts" > "$work/log" 2>&1
    status=$?
    set -e
    [ "$status" = 1 ] || { cat "$work/log"; fail "exit status $status, expected 1"; }
    grep -q "summary: 6 done, 0 skipped, 1 failed" "$work/log" || { cat "$work/log"; fail "summary"; }
    python3 - "$work/out/manifest.jsonl" <<'PY' || fail "manifest"
import json, sys
lines = {l["index"]: l for l in map(json.loads, open(sys.argv[1]))}
assert len(lines) == 7, lines.keys()
assert lines[3]["status"] == "failed" and "cannot write" in lines[3]["error"], lines[3]
assert all(lines[i]["status"] == "ok" for i in lines if i != 3)
PY
    ;;
  kill-rerun | kill-rerun-sharded | kill-rerun-webdataset)
    case $case_name in
      kill-rerun-sharded) layout=(--layout sharded) ;;
      kill-rerun-webdataset) layout=(--output-format webdataset --images-per-tar 2) ;;  # 6 tars, 2 a rank
      *) layout=() ;;
    esac
    ref_layout=("${layout[@]}")
    [ "$case_name" = kill-rerun-webdataset ] && ref_layout=()  # its tars are checked against flat PNGs
    # Killed mid-run with -n 3 (every process of the run, as a job's end kills them), rerun
    # with -n 2: every image present, none duplicated or corrupt, and the same bytes as an
    # uninterrupted run. Each rank's second image is slow (1000 steps at 128², seconds): once
    # three PNGs exist every rank is inside its slow image, so the kill lands mid-run whatever
    # the machine's load.
    python3 - "$work/many.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(12):
        f.write(json.dumps({"prompt": f"kill test prompt {i}", **({"steps": 1000, "width": 128, "height": 128} if i % 4 == 1 else {})}) + "\n")
PY
    size=(--width 64 --height 64)
    gen 1 "$work/ref" --prompts "$work/many.jsonl" "${ref_layout[@]}" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    # setsid: the run gets a session of its own. mpiexec puts each rank in a process group of
    # its own, but all of them stay in this session, so it names every process of the run.
    setsid mpiexec -n 3 "$exe" generate --weights "$model" --out "$work/out" --prompts "$work/many.jsonl" \
      "${size[@]}" --steps 3 --shard contiguous "${layout[@]}" > "$work/killed.log" 2>&1 &
    pid=$!
    until [ "$(count_pngs "$work/out")" -ge 3 ]; do
      alive "$pid" || { cat "$work/killed.log"; fail "the run ended before its third PNG"; }
      sleep 0.05
    done
    [ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] || fail "mpiexec ($pid) does not lead a session of its own"
    # kill -9 every process of the session until none is left (a zombie holds no lock): a rank
    # still alive, e.g. inside an fsync, would hold the run lock and the rerun would be refused.
    while live=$(ps -s "$pid" -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}'); [ -n "$live" ]; do
      # shellcheck disable=SC2086
      kill -9 $live 2>/dev/null || true
      sleep 0.05
    done
    wait "$pid" 2>/dev/null || true
    made=$(count_pngs "$work/out")
    [ "$made" -lt 12 ] || fail "the run finished before the kill; the test proves nothing"
    echo "killed the run at $made of 12 PNGs"
    gen 2 "$work/out" --prompts "$work/many.jsonl" "${layout[@]}" > "$work/log" 2>&1 || { cat "$work/log"; fail "rerun"; }
    # a PNG renamed into place just before the kill may lack its manifest line: made again
    python3 - "$work/log" "$made" <<'PY' || { cat "$work/log"; fail "the rerun's summary"; }
import re, sys
done, skipped, failed = map(int, re.search(r"summary: (\d+) done, (\d+) skipped, (\d+) failed", open(sys.argv[1]).read()).groups())
assert failed == 0 and done + skipped == 12 and skipped <= int(sys.argv[2]), (done, skipped, failed)
print(f"rerun: {done} done, {skipped} skipped")
PY
    if [ "$case_name" = kill-rerun-webdataset ]; then check_tars "$work/out" 12 2 "$work/ref"; else check "$work/out" 12 "$work/ref"; fi
    ;;
  weights-once)
    # 3 ranks on one node: bytes read from the weight file total about 1x the file.
    gen 3 "$work/out" --prompts "$prompts" --log-dir "$work/logs" --log-level debug > "$work/log" 2>&1 ||
      { cat "$work/log"; fail "run"; }
    model_bytes=$(stat -c %s "$model")
    total=$(grep -o 'weights read from [^:]*: [0-9.]* MB in all' "$work/log" | grep -o '[0-9.]* MB' | grep -o '[0-9.]*')
    python3 -c "
size, total = $model_bytes / 1e6, $total
print(f'file {size:.1f} MB, read by all ranks {total:.1f} MB')
assert 0.9 * size <= total <= 1.2 * size, 'weights were not read once per node'
"
    [ "$(ls "$work/logs" | wc -l)" = 3 ] || fail "expected one log file per rank"
    grep -q "\[rank 2/3\]" "$work/logs/rank-00002.log" || fail "rank 2's log lacks its prefix"
    # Each rank opens the file once (rank 0: its input check, then the run).
    for r in 0 1 2; do
      grep -q "opened 1 time(s) by this rank" "$work/logs/rank-0000$r.log" ||
        { cat "$work/logs/rank-0000$r.log"; fail "rank $r opened the weight file more than once"; }
    done
    # Over TCP (as between nodes) the broadcast's socket reads are not weight reads: the other
    # ranks still read nothing from the file (counted as process reads, they showed ~53 MB each).
    OMPI_MCA_btl=self,tcp gen 3 "$work/tcp" --prompts "$prompts" > "$work/tcp.log" 2>&1 || { cat "$work/tcp.log"; fail "tcp run"; }
    for r in 1 2; do
      grep -q "rank $r on [^:]*: .* weights read 0.0 MB" "$work/tcp.log" || { cat "$work/tcp.log"; fail "rank $r read weights over TCP"; }
    done
    ;;
  selftest)
    # `ditbatch selftest` under mpiexec: every rank checks its own backend, rank 0 prints one
    # row per rank and the verdict of all; the JSON holds every rank's report.
    mpiexec -n 2 "$exe" selftest --backend cpu --quick --json "$work/selftest.json" > "$work/log" 2>&1 ||
      { cat "$work/log"; fail "selftest exit status"; }
    cat "$work/log"
    for r in 0 1; do
      grep -qE "^  $r +[^ ]+ +$r +cpu +PASS +[0-9.e+-]+ +[0-9.e+-]+" "$work/log" || fail "no PASS row for rank $r"
    done
    grep -q "^PASS: all 2 rank(s) in " "$work/log" || fail "no verdict line for the 2 ranks"
    python3 - "$work/selftest.json" <<'PY' || fail "selftest.json"
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
assert [r["rank"] for r in ranks] == [0, 1], ranks
for r in ranks:
    assert r["passed"] and r["gemm"] > 0 and r["copy"] > 0, r
    assert {c["status"] for c in r["report"]["checks"]} == {"PASS"}, r["report"]["checks"]
print("selftest.json: 2 ranks, every check PASS")
PY
    ;;
  lora)
    # LoRAs under MPI: node rank 0 reads the factors and broadcasts them; the images of 3 ranks are
    # byte-identical to one process's, and the LoRAs change them.
    lora_dir=$here/../data/golden/lora
    loras=(--lora "$lora_dir/kohya.safetensors:0.7" --lora "$lora_dir/comfy_bf16.safetensors" --scheduler lightning)
    gen 1 "$work/ref" --prompts "$prompts" "${loras[@]}" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    check "$work/ref" 7
    gen 3 "$work/n3" --prompts "$prompts" "${loras[@]}" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n 3"; }
    check "$work/n3" 7 "$work/ref"
    factors() { grep -o "rank $2 on [^:]*: .*LoRA factors read [0-9.]* MB" "$1" | grep -o '[0-9.]* MB$'; }
    one=$(factors "$work/ref.log" 0)
    [ -n "$one" ] && [ "$one" != "0.000 MB" ] || { cat "$work/ref.log"; fail "one process read no LoRA factors"; }
    [ "$(factors "$work/log" 0)" = "$one" ] || { cat "$work/log"; fail "rank 0 of 3 did not read the factors once ($one alone)"; }
    for r in 1 2; do
      [ "$(factors "$work/log" $r)" = "0.000 MB" ] || { cat "$work/log"; fail "rank $r read LoRA factors itself"; }
    done
    gen 1 "$work/plain" --prompts "$prompts" --scheduler lightning > "$work/plain.log" 2>&1 || { cat "$work/plain.log"; fail "run without LoRAs"; }
    python3 - "$work/ref" "$work/plain" <<'PY' || fail "the LoRAs did not change the pixels"
import struct, sys, zlib
from pathlib import Path
def pixels(path):  # the inflated IDAT stream: the text chunks (which name the LoRAs) left out
    data, pos, idat = path.read_bytes(), 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        idat += data[pos + 8:pos + 8 + length] if kind == b"IDAT" else b""
        pos += 12 + length
    return zlib.decompress(idat)
for a in sorted(Path(sys.argv[1]).glob("*.png")):
    assert pixels(a) != pixels(Path(sys.argv[2]) / a.name), f"{a.name}: the same pixels with and without the LoRAs"
print("every image's pixels differ from the run without the LoRAs")
PY
    ;;
  qwen-image-edit)
    # An Edit-2511 file (make-tiny --model qwen-image-edit-2511) and prompt lines with input
    # images (one or two, of several sizes; CFG on some; mixed output sizes): byte-identical
    # images for -n 1 and -n 3 in every shard mode, and in WebDataset tars whose samples' .json
    # list the inputs.
    model_edit="$work/tiny-edit.h5"
    "$exe" make-tiny --model qwen-image-edit-2511 --seed 3 --out "$model_edit" > "$work/make.log" 2>&1 || { cat "$work/make.log"; fail "make-tiny"; }
    genedit() { local n=$1 out=$2; shift 2; mpiexec -n "$n" "$exe" generate --weights "$model_edit" --out "$out" --steps 2 "$@"; }
    python3 - "$work" > "$work/edit.jsonl" <<'PY'
import json, struct, sys, zlib
from pathlib import Path

def write_png(path, width, height, k):  # 8-bit RGB, a gradient that depends on k
    rows = b"".join(b"\0" + bytes((x * 5 + y * 3 + k * 40) % 256 for x in range(width) for _ in range(3))
                    for y in range(height))
    chunk = lambda kind, data: (struct.pack(">I", len(data)) + kind + data +
                                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
                           chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

work = Path(sys.argv[1])
sizes = [(40, 30), (24, 36), (32, 32)]
for k, (w, h) in enumerate(sizes):
    write_png(work / f"in{k}.png", w, h, k)
outputs = [(64, 48), (48, 64), (64, 64), (32, 48), (64, 32)]
for i, (w, h) in enumerate(outputs):
    line = {"prompt": f"edit number {i}: make it brighter", "width": w, "height": h,
            "image": ["in0.png", "in1.png"] if i == 1 else f"in{i % 3}.png"}
    line["cfg"] = 3.0 if i % 2 == 0 else 1.0  # true CFG on lines 0, 2 and 4
    print(json.dumps(line))
PY
    genedit 1 "$work/edit-ref" --prompts "$work/edit.jsonl" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    check "$work/edit-ref" 5
    python3 - "$work/edit-ref" "$work/edit.jsonl" <<'PY' || fail "the Edit images are not of the lines' sizes, CFG and input images"
import hashlib, json, struct, sys
from pathlib import Path
out, lines = Path(sys.argv[1]), [json.loads(l) for l in Path(sys.argv[2]).read_text().splitlines()]
for record in map(json.loads, (out / "manifest.jsonl").read_text().splitlines()):
    line = lines[record["index"]]
    width, height = struct.unpack(">II", (out / record["file"]).read_bytes()[16:24])
    assert (width, height) == (line["width"], line["height"]), record["file"]
    assert record["true_cfg"] == (line["cfg"] > 1), record
    images = line["image"] if isinstance(line["image"], list) else [line["image"]]
    assert [i["path"] for i in record["input_images"]] == images, record
    for i in record["input_images"]:
        assert i["sha256"] == hashlib.sha256((Path(sys.argv[2]).parent / i["path"]).read_bytes()).hexdigest(), i
print("5 Edit PNGs")
PY
    every_shard_mode genedit "$work/edit.jsonl" 5 "$work/edit-ref"
    # WebDataset: the flat layout's images in tars, each sample's .json the record with its inputs.
    genedit 3 "$work/edit-wds" --prompts "$work/edit.jsonl" --output-format webdataset --images-per-tar 2 > "$work/log" 2>&1 ||
      { cat "$work/log"; fail "-n 3 webdataset"; }
    check_tars "$work/edit-wds" 5 2 "$work/edit-ref"
    python3 - "$work/edit-wds" <<'PY' || fail "a WebDataset sample's .json lacks its input images"
import json, sys, tarfile
from pathlib import Path
samples = 0
for tar in sorted(Path(sys.argv[1]).glob("*.tar")):
    with tarfile.open(tar) as t:
        for member in t.getmembers():
            if member.name.endswith(".json"):
                record = json.load(t.extractfile(member))
                assert record["input_images"] and all(len(i["sha256"]) == 64 for i in record["input_images"]), record
                samples += 1
assert samples == 5, samples
PY
    ;;
  qwen-image-21)
    # A Qwen-Image-2.1 file (make-tiny --model qwen-image-2.1): its RGBA images are byte-identical
    # for -n 1 and -n 3 in every shard mode, with CFG on some prompts and mixed sizes (its sides
    # multiples of 32); its WebDataset tars hold the flat layout's images. Then the same with the
    # converted diffusers folder whose images tests/unit/test_generate_21.cpp checks against diffusers.
    model21="$work/tiny21.h5"
    "$exe" make-tiny --model qwen-image-2.1 --seed 3 --out "$model21" > "$work/make.log" 2>&1 || { cat "$work/make.log"; fail "make-tiny"; }
    gen21() { local n=$1 out=$2; shift 2; mpiexec -n "$n" "$exe" generate --weights "$model21" --out "$out" --steps 3 "$@"; }
    python3 - > "$work/p21.jsonl" <<'PY'
import json
for i in range(7):
    line = {"prompt": f"test prompt number {i}, a small scene", "width": 64 if i % 3 else 32, "height": 32}
    if i % 2:
        line["cfg"] = 3.0
    print(json.dumps(line))
PY
    gen21 1 "$work/ref" --prompts "$work/p21.jsonl" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
    check "$work/ref" 7
    every_shard_mode gen21 "$work/p21.jsonl" 7 "$work/ref"
    python3 - "$work/ref" <<'PY' || fail "the 2.1 images are not RGBA with the CFG the prompts asked for"
import json, struct, sys
from pathlib import Path
out = Path(sys.argv[1])
for line in map(json.loads, (out / "manifest.jsonl").read_text().splitlines()):
    data = (out / line["file"]).read_bytes()
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    assert (depth, color) == (8, 6), f"{line['file']}: bit depth {depth}, colour type {color} (RGBA is 8, 6)"
    assert (width, height) == (line["width"], line["height"]), line["file"]
    assert line["true_cfg"] == (line["index"] % 2 == 1), line
    assert "max_sequence_length" not in line, line
print("7 RGBA PNGs")
PY
    wds=(--prompts "$work/p21.jsonl" --output-format webdataset --images-per-tar 3)
    gen21 3 "$work/wds" "${wds[@]}" > "$work/log" 2>&1 || { cat "$work/log"; fail "-n 3 webdataset"; }
    check_tars "$work/wds" 7 3 "$work/ref"
    # The folder diffusers built (tests/data/golden/tiny-pipeline-21), converted: -n 3 makes -n 1's bytes.
    "$exe" convert --from "$here/../data/golden/tiny-pipeline-21" --to "$work/golden21.h5" > "$work/convert.log" 2>&1 ||
      { cat "$work/convert.log"; fail "convert"; }
    model21="$work/golden21.h5"
    gen21 1 "$work/golden-ref" --prompts "$work/p21.jsonl" > "$work/log" 2>&1 || { cat "$work/log"; fail "golden -n 1"; }
    gen21 3 "$work/golden-n3" --prompts "$work/p21.jsonl" --shard strided > "$work/log" 2>&1 || { cat "$work/log"; fail "golden -n 3"; }
    check "$work/golden-n3" 7 "$work/golden-ref"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
