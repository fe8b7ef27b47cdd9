#!/usr/bin/env bash
# Tokenizer throughput: 10,000 typical prompts through `ditbatch tokenize --template`, on one core.
#
#   tools/bench/tokenize_bench.sh [DITBATCH_BINARY] [TOKENIZER_FOLDER_OR_H5]
#
# Defaults: build/ditbatch and weights/tokenizer (the real Qwen2.5-VL vocabulary). PROMPTS=N
# changes the count, REPEAT=N the number of timed runs (the best is reported). The start-up cost
# (loading 151,643 symbols and 151,387 merges) is timed separately with an empty input and
# subtracted, so the figure is the tokenizer's own rate; both are printed.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary=${1:-build/ditbatch}
tokenizer=${2:-weights/tokenizer}
count=${PROMPTS:-10000}
repeat=${REPEAT:-3}
[[ -x $binary ]] || { echo "tokenize_bench: $binary is not an executable (build first, or pass the binary)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Typical prompts: a subject, three details and an index, 15-40 words, some non-ASCII and
# quoted text, as JSON strings (the generator writes only characters that need no escaping
# besides \").
awk -v n="$count" 'BEGIN {
  ns = split("A cat|A red fox|An old lighthouse|A bowl of ramen|Two astronauts|A cyberpunk street|" \
             "A watercolor painting of a village|A portrait of a young woman|A steam locomotive|A dragon|" \
             "Une terrasse de café à Paris|A neon sign that says \\\"OPEN 24/7\\\"", subjects, "|")
  nd = split("holding a sign that says \\\"hello world\\\"|at sunset, golden hour lighting|" \
             "in the style of Studio Ghibli|with neon reflections on wet asphalt|surrounded by cherry blossoms|" \
             "on a snowy mountain peak|4k, highly detailed, cinematic|under a starry night sky|" \
             "made of glass and light|in a busy Tokyo market, 東京の夜景|shot on 35mm film, f/1.8, ISO 400|" \
             "minimalist flat illustration, pastel colors", details, "|")
  srand(1)
  for (i = 0; i < n; ++i) {
    line = subjects[int(rand() * ns) + 1]
    for (k = 0; k < 3; ++k) line = line ", " details[int(rand() * nd) + 1]
    printf "\"%s, variation %d\"\n", line, i
  }
}' > "$work/prompts.jsonl"

now() { date +%s.%N; }
best_total=""
best_startup=""
for ((r = 0; r < repeat; ++r)); do
  t0=$(now)
  taskset -c 0 "$binary" tokenize --tokenizer "$tokenizer" --template < /dev/null > /dev/null
  t1=$(now)
  taskset -c 0 "$binary" tokenize --tokenizer "$tokenizer" --template < "$work/prompts.jsonl" > "$work/ids.jsonl"
  t2=$(now)
  startup=$(echo "$t1 - $t0" | bc -l)
  total=$(echo "$t2 - $t1" | bc -l)
  if [[ -z $best_total ]] || (( $(echo "$total < $best_total" | bc -l) )); then best_total=$total; fi
  if [[ -z $best_startup ]] || (( $(echo "$startup < $best_startup" | bc -l) )); then best_startup=$startup; fi
done

lines=$(wc -l < "$work/ids.jsonl")
[[ $lines -eq $count ]] || { echo "tokenize_bench: got $lines id lines for $count prompts" >&2; exit 1; }
ids=$(tr -cd ',\n' < "$work/ids.jsonl" | wc -c)  # one comma per id after the first, one newline per line
tokenize=$(echo "$best_total - $best_startup" | bc -l)
printf 'prompts          %d (templated, %.1f ids each on average)\n' "$count" "$(echo "$ids / $count" | bc -l)"
printf 'start-up         %.3f s (load the tokenizer, no prompts)\n' "$best_startup"
printf 'total            %.3f s for %d prompts, one core (best of %d)\n' "$best_total" "$count" "$repeat"
printf 'tokenizer alone  %.3f s -> %.0f prompts/s\n' "$tokenize" "$(echo "$count / $tokenize" | bc -l)"
printf 'end to end       %.0f prompts/s including start-up\n' "$(echo "$count / $best_total" | bc -l)"
