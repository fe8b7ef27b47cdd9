#!/usr/bin/env bash
# What the Lightning LoRA buys: images/hour of the default settings (50 steps, true CFG 4)
# and of Lightning's (the LoRA, --scheduler lightning, 8 steps, --cfg 1) on the same weights,
# prompts and size, measured in one run and printed as a ratio; and the load-time cost of
# merging the LoRA (seconds per GB of the weights it touches). A benchmark, not a test.
#
#   tools/bench/lightning.sh [BUILD_DIR] [IMAGES] [WEIGHTS.h5 LORA.safetensors [SIZE]]
#
# Without WEIGHTS the tiny model (make-tiny) and the golden LoRA that touches every linear of
# every block (tests/data/golden/lora/comfy_bf16.safetensors) at 128x128; with real weights
# give the Lightning file, e.g. Qwen-Image-Lightning-8steps-V1.0.safetensors, and SIZE 1328.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
images=${2:-3}
exe=$build/ditbatch
work=$(mktemp -d /tmp/ditbatch-lightning-XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ $# -ge 4 ]; then
  weights=$3 lora=$4 size=${5:-1328}
else
  weights=$work/tiny.h5 lora=$here/../../tests/data/golden/lora/comfy_bf16.safetensors size=128
  "$exe" make-tiny --out "$weights" > /dev/null 2>&1
fi
for i in $(seq 1 "$images"); do echo "lightning benchmark prompt $i, a harbour at dawn"; done > "$work/prompts.txt"
run() {  # run NAME ARGS...: one generate job, its log in $work/NAME.log
  local name=$1
  shift
  if ! "$exe" generate --weights "$weights" --prompts "$work/prompts.txt" --out "$work/$name" \
    --width "$size" --height "$size" "$@" > "$work/$name.log" 2>&1; then
    echo "lightning: the $name run failed:" >&2
    cat "$work/$name.log" >&2
    return 1
  fi
}
run default --steps 50 --cfg 4
run lightning --lora "$lora" --scheduler lightning --steps 8 --cfg 1
python3 - "$work/default.log" "$work/lightning.log" "$size" "$images" <<'PY'
import re, sys
def rates(log):  # images/hour of the generate loop (no start-up) and of the transformer alone
    text = open(log).read()
    loop = float(re.search(r"rank 0 on .*?\(([0-9.]+) images/hour\)", text).group(1))
    dit = [float(s) for s in re.findall(r"image \d+ done: .*transformer ([0-9.]+)", text)]
    return loop, 3600 * len(dit) / sum(dit)
(default, default_dit), (lightning, lightning_dit) = rates(sys.argv[1]), rates(sys.argv[2])
merge = re.search(r"merged into (\d+) linears \(([0-9.]+) MB of weights\) in ([0-9.]+) s", open(sys.argv[2]).read())
print(f"{sys.argv[4]} images of {sys.argv[3]}x{sys.argv[3]}, one process")
print(f"{'settings':<34} {'images/hour':>12} {'transformer only':>17}")
print(f"{'default (50 steps, true CFG 4)':<34} {default:12.1f} {default_dit:17.1f}")
print(f"{'Lightning (LoRA, 8 steps, cfg 1)':<34} {lightning:12.1f} {lightning_dit:17.1f}")
print(f"Lightning / default: {lightning / default:.1f}x images/hour, {lightning_dit / default_dit:.1f}x in the "
      "transformer (100 forwards an image against 8; the text encoder and the VAE cost the same)")
linears, mb, s = int(merge.group(1)), float(merge.group(2)), float(merge.group(3))
print(f"LoRA merge at load: {linears} linears, {mb:.1f} MB of weights in {s:.3f} s"
      + (f" ({1e3 * s / mb:.2f} s per GB)" if mb > 0 and s > 0 else ""))
PY
