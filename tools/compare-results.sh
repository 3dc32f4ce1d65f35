#!/usr/bin/env bash
# The comparisons committed under results/compare/ (issue 10), each one `vtensor compare`
# command with its report: the five KV policies at the default memory, 16 GiB, 64 GiB and
# unlimited, under both kernel-factor sets, on
#   mooncake/   the whole Mooncake conversation trace (multi-turn, shared prefixes);
#   azure/      the Azure conversation trace (single turn, no prefix identity);
#   gen-trace/  a seeded `vtensor gen-trace` multi-turn trace (regenerated here, not committed);
#   layouts/    vtensor in each layout (kv-fused, the default before issue 33, is the baseline)
#               beside paged, on the whole Mooncake trace and the gen-trace one above (issue 33:
#               Note [Default layout] in sim/vtensor_policy.hpp);
#   standby/    vtensor with standby vTensors of 0 to 8192 tokens beside paged and vattention on
#               both Azure traces (every admission misses the cache), default memory (issue 33:
#               Note [Standby vTensor] in core/scheduler.cpp picks the default from it);
#   parked/     vtensor with and without parked vTensors beside paged and radix on the gen-trace
#               multi-turn trace above (hits after idle spells: Note [Parked vTensors] in
#               core/scheduler.cpp) at the default memory, 64 GiB and 16 GiB;
#   paper-*/    the vTensor paper's scenario of tools/paper-scenario.sh (A100, Yi-6B and Yi-34B on
#               two GPUs, both traces compressed 100x, vtensor against paged with 16-token blocks
#               and radix), one folder per model.
# Time series are sampled every 10 simulated seconds (--sample-ms 10000) to keep the folders small.
# Usage: tools/compare-results.sh [BINARY] [OUT_ROOT] [JOBS]   (defaults: build/bin/vtensor results/compare 2)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin/vtensor}
root=${2:-results/compare}
jobs=${3:-2}
mkdir -p "$root"
five=(--arm vtensor=vtensor --arm paged=paged --arm radix=radix --arm static=static --arm vattention=vattention)
axes=(--memory default,16GiB,64GiB,unlimited --kernel-factors modern,2024 --sample-ms 10000)
run() {  # run NAME ARGS...: one comparison into $root/NAME, its table beside it
  local name=$1
  shift
  echo "== $name: $bin compare $*" >&2
  "$bin" compare "$@" --jobs "$jobs" --out "$root/$name" --report >"$root/$name.txt"
}
run mooncake traces/data/mooncake_conversation_trace.jsonl "${five[@]}" "${axes[@]}"
run azure traces/data/AzureLLMInferenceTrace_conv.csv "${five[@]}" "${axes[@]}"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$bin" gen-trace --out "$gen/multi-turn.jsonl" --sessions 3000 --seed 7 --rate 2
run gen-trace "$gen/multi-turn.jsonl" "${five[@]}" "${axes[@]}"
run layouts traces/data/mooncake_conversation_trace.jsonl "$gen/multi-turn.jsonl" \
  --arm kv-fused='vtensor --layout kv-fused' --arm kv-split='vtensor --layout kv-split' \
  --arm token-major='vtensor --layout token-major' --arm paged=paged --memory default,16GiB,64GiB,unlimited \
  --sample-ms 10000
standby=()
for tokens in 0 1024 2048 4096 8192; do standby+=(--arm "standby-$tokens=vtensor --standby-tokens $tokens"); done
run standby traces/data/AzureLLMInferenceTrace_conv.csv traces/data/AzureLLMInferenceTrace_code.csv "${standby[@]}" \
  --arm paged=paged --arm vattention=vattention --sample-ms 10000
run parked "$gen/multi-turn.jsonl" --arm parked-0='vtensor --parked 0' --arm parked-64='vtensor --parked 64' \
  --arm paged=paged --arm radix=radix --memory default,64GiB,16GiB --sample-ms 10000
paper=(--arm vtensor=vtensor --arm paged='paged --block-tokens 16' --arm radix=radix --gpu a100-80gb --time-scale 0.01
  --kernel-factors 2024,modern --sample-ms 10000)
run paper-yi-6b traces/data/mooncake_conversation_trace.jsonl traces/data/AzureLLMInferenceTrace_conv.csv \
  --model yi-6b --tp 1 "${paper[@]}"
run paper-yi-34b-tp2 traces/data/mooncake_conversation_trace.jsonl traces/data/AzureLLMInferenceTrace_conv.csv \
  --model yi-34b --tp 2 "${paper[@]}"
