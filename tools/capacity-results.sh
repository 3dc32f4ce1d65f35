#!/usr/bin/env bash
# The capacities committed under results/capacity/ (issue 34, "capacity at an SLO"): the five KV
# policies on one replica (Llama-3-8B, H200, default memory), each the largest load, as a multiple
# of the trace's own arrival rate, that meets a latency objective (`vtensor capacity`, Note
# [Capacity search] in tools/capacity.cpp). The objectives are stated per trace: Mooncake's
# prompts (up to 100k tokens) take seconds to prefill even alone, so its TTFT limit is 10 s;
# so does the bundled excerpt; the Azure conversation trace and a gen-trace multi-turn trace get 2 s.
# Each search's probes also give the figure of goodput (the share of requests within the limits)
# against load per arm (NAME-goodput.png, tools/capacity_figure.py, Debian's python3-matplotlib).
# Usage: tools/capacity-results.sh [BINARY] [OUT_DIR] [JOBS]   (defaults: build/bin/vtensor results/capacity 2)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin/vtensor}
root=${2:-results/capacity}
jobs=${3:-2}
mkdir -p "$root"
five=(--arm vtensor=vtensor --arm paged=paged --arm radix=radix --arm static=static --arm vattention=vattention)
run() {  # run NAME ARGS...: one search into $root/NAME.txt and NAME.json
  local name=$1
  shift
  echo "== $name: $bin capacity $*" >&2
  "$bin" capacity "$@" "${five[@]}" --tolerance 0.02 --jobs "$jobs" --no-wall --json "$root/$name.json" >"$root/$name.txt"
  /usr/bin/python3 tools/capacity_figure.py "$root/$name.json" "$root/$name-goodput.png"
}
run mooncake traces/data/mooncake_conversation_trace.jsonl --slo 'ttft_p90<=10s,tpot_p90<=100ms'
# The same objective asked the other way (Note [Fewest replicas]): how many replicas, one H200
# each behind prefix-precise routing, serve the whole trace at its own rate.
precise=()
for p in vtensor paged radix static vattention; do precise+=(--arm "$p=$p --router prefix-precise"); done
echo "== mooncake-replicas: $bin capacity --fewest-replicas 16" >&2
"$bin" capacity traces/data/mooncake_conversation_trace.jsonl "${precise[@]}" --slo 'ttft_p90<=10s,tpot_p90<=100ms' \
  --fewest-replicas 16 --jobs "$jobs" --no-wall --json "$root/mooncake-replicas.json" >"$root/mooncake-replicas.txt"
# The bundled excerpt, whose vtensor and paged capacities set the main job's operating point
# (Note [The main job's operating point] in tools/replay_options.cpp).
run excerpt traces/data/mooncake_conversation_excerpt.jsonl --slo 'ttft_p90<=10s,tpot_p90<=100ms'
run azure traces/data/AzureLLMInferenceTrace_conv.csv --slo 'ttft_p90<=2s,tpot_p90<=100ms'
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$bin" gen-trace --out "$gen/multi-turn.jsonl" --sessions 3000 --seed 7 --rate 2 >/dev/null
run gen-trace "$gen/multi-turn.jsonl" --slo 'ttft_p90<=2s,tpot_p90<=100ms'
