#!/usr/bin/env bash
# ditbatch's CPU transformer against diffusers' on the same config, measured in one run.
#
#   tools/bench/compare_dit.sh [DITBATCH_BINARY] [-- extra bench options, e.g. --cfg]
#
# Default: the small config (4 blocks, 8 heads x 64, joint dim 3584) at 256x256 (S = 256) with
# 20 text tokens, 3 timed forwards after 1 warm-up, float32 on the CPU, both engines with the
# same thread count. Rounds alternate ditbatch and diffusers so that both see the same machine
# state; the ratio ditbatch/diffusers is printed per round and over all rounds (below 1: ditbatch
# is faster). Env: CONFIG, SIZE, TEXT_TOKENS, STEPS, WARMUP, ROUNDS (default 2), THREADS
# (default nproc), PYTHON (default tools/golden/.venv/bin/python: tools/golden/setup.sh makes it),
# BACKEND (cpu, the default, in float32; cuda: ditbatch --backend cuda against diffusers in bf16
# on the GPU, e.g. CONFIG=real SIZE=1024x1024 BACKEND=cuda ... -- --cfg), MODEL (qwen-image, the
# default, or qwen-image-2.1: its transformer's cached steps, sizes multiples of 32).
set -euo pipefail
cd "$(dirname "$0")/../.."

binary=build/ditbatch
if [[ $# -gt 0 && $1 != -- ]]; then binary=$1; shift; fi
[[ ${1:-} == -- ]] && shift
extra=("$@")
config=${CONFIG:-small}
size=${SIZE:-256x256}
text_tokens=${TEXT_TOKENS:-20}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
rounds=${ROUNDS:-2}
threads=${THREADS:-$(nproc)}
python=${PYTHON:-tools/golden/.venv/bin/python}
backend=${BACKEND:-cpu}
model=${MODEL:-qwen-image}
case $backend in
  cpu) reference=(--device cpu --dtype float32) ;;
  cuda) reference=(--device cuda --dtype bfloat16) ;;
  *) echo "compare_dit: BACKEND=$backend (expected cpu or cuda)" >&2; exit 2 ;;
esac
[[ -x $binary ]] || { echo "compare_dit: $binary is not an executable (build first, or pass the binary)" >&2; exit 2; }
[[ -x $python ]] || { echo "compare_dit: no $python (run tools/golden/setup.sh, or set PYTHON)" >&2; exit 2; }

export OMP_NUM_THREADS=$threads
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
common=(--model "$model" --config "$config" --size "$size" --text-tokens "$text_tokens" --steps "$steps" --warmup "$warmup" "${extra[@]}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "compare_dit: $model, $backend, config $config, $size, $text_tokens text tokens, $steps timed + $warmup warm-up steps," \
     "$threads threads, $rounds rounds, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; ++r)); do
  "$binary" bench dit --backend "$backend" "${common[@]}" > "$work/ditbatch.$r.txt"
  "$python" tools/bench/dit_diffusers.py --threads "$threads" "${reference[@]}" "${common[@]}" > "$work/diffusers.$r.txt"
  grep -h '^BENCH_JSON ' "$work/ditbatch.$r.txt" | sed "s/^BENCH_JSON /$r /" >> "$work/results"
  grep -h '^BENCH_JSON ' "$work/diffusers.$r.txt" | sed "s/^BENCH_JSON /$r /" >> "$work/results"
done
cat "$work/ditbatch.1.txt" "$work/diffusers.1.txt"
echo

# The summary: per round, then the best (min), the mean and the CPU time over all rounds. Under
# load, CPU time with THREADS=1 is the steadiest figure: it leaves out time spent waiting for a core.
"$python" - "$work/results" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    r, js = line.split(" ", 1)
    rows.append((int(r), json.loads(js)))
def by(engine):
    return {r: j for r, j in rows if j["engine"] == engine}
d, t = by("ditbatch"), by("diffusers")
print(f"{'round':>5}  {'ditbatch ms/fwd':>16}  {'diffusers ms/fwd':>16}  {'ratio (mean)':>12}  {'ratio (min)':>11}"
      f"  {'ratio (CPU time)':>16}")
for r in sorted(d):
    a, b = d[r], t[r]
    print(f"{r:>5}  {a['ms_per_forward_mean']:>16.2f}  {b['ms_per_forward_mean']:>16.2f}  "
          f"{a['ms_per_forward_mean'] / b['ms_per_forward_mean']:>12.3f}  "
          f"{a['ms_per_forward_min'] / b['ms_per_forward_min']:>11.3f}  "
          f"{a['cpu_ms_per_forward_mean'] / b['cpu_ms_per_forward_mean']:>16.3f}")
def summary(name, runs):
    best = min(j["ms_per_forward_min"] for j in runs.values())
    mean = sum(j["ms_per_forward_mean"] for j in runs.values()) / len(runs)
    cpu = sum(j["cpu_ms_per_forward_mean"] for j in runs.values()) / len(runs)
    some = next(iter(runs.values()))
    print(f"{name:<10} best {best:.2f} ms/forward ({some['flops'] / best * 1e-6:.1f} GFLOP/s), mean {mean:.2f}, "
          f"CPU time {cpu:.2f} ms/forward, peak RSS {max(j['peak_rss_mib'] for j in runs.values()):.0f} MiB, "
          f"{some['threads']} threads")
    return best, mean, cpu
print()
best_d, mean_d, cpu_d = summary("ditbatch", d)
best_t, mean_t, cpu_t = summary("diffusers", t)
# Rounds alternate engines, so a round's ratio compares like with like; the median of the
# rounds' ratios is the figure that a burst of load on the machine moves least.
round_ratios = sorted(d[r]["ms_per_forward_mean"] / t[r]["ms_per_forward_mean"] for r in d)
median = round_ratios[len(round_ratios) // 2] if len(round_ratios) % 2 else \
    0.5 * (round_ratios[len(round_ratios) // 2 - 1] + round_ratios[len(round_ratios) // 2])
print(f"ratio ditbatch/diffusers: best {best_d / best_t:.3f}, mean {mean_d / mean_t:.3f}, "
      f"CPU time {cpu_d / cpu_t:.3f}, median of rounds {median:.3f} (target <= 1.0)")
if any(j.get("conditioning_at_load") for j in d.values()):
    print("(ditbatch computed the timestep conditioning at load, as generate does; diffusers computes it in every forward)")
print("COMPARE_JSON " + json.dumps({"ditbatch_ms_best": best_d, "diffusers_ms_best": best_t, "ditbatch_ms_mean": mean_d,
                                    "diffusers_ms_mean": mean_t, "ditbatch_cpu_ms_mean": cpu_d,
                                    "diffusers_cpu_ms_mean": cpu_t, "ratio_best": best_d / best_t,
                                    "ratio_mean": mean_d / mean_t, "ratio_cpu": cpu_d / cpu_t,
                                    "ratio_median_of_rounds": median, "rounds": len(d)}))
PY
