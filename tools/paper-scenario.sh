#!/usr/bin/env bash
# The vTensor paper's end-to-end experiment (arXiv 2407.15309), as far as the paper states it,
# replayed here: vtensor against paged (vLLM) and radix (SGLang, the engine vTensor was built
# into) on an A100, Yi-series models, a multi-turn chat workload and a single-turn one,
# throughput at saturation, under both kernel factor sets.
#
# What the paper states (abstract and evaluation): an A100 GPU, Yi-series models, end-to-end
# throughput against vLLM, 1.86x on average across models and up to 2.42x in multi-turn chat.
# What we had to assume (each an assumption, not the paper's):
#   - models yi-6b on one GPU and yi-34b on two (tensor parallel 2: 68 GB of bf16 weights leave
#     too little KV memory on one 80 GB A100);
#   - multi-turn chat = the Mooncake conversation trace (shared prefixes across turns); single
#     turn = the Azure conversation trace (no prefix identity);
#   - throughput at saturation: arrivals compressed 100x (--time-scale 0.01) so the replica is
#     always busy, and throughput = output tokens / makespan, as a vLLM throughput benchmark does;
#   - 16-token blocks for vLLM (its default), vtensor with its defaults;
#   - everything else (context limit, batch limits, step overhead) at vtensor's replay defaults.
# Usage: tools/paper-scenario.sh [BINARY] > table.md   (BINARY defaults to build/bin/vtensor)
# Environment: GPU (default a100-80gb) and FACTORS (default "2024 modern"); the factor set
# "measured" replays with the compute calibration of the model measured on the H200
# (backends/calibration/h200-compute-MODEL[-tpN].json: measured linear and decode-attention rates
# and decode factors, prefill factors of `modern`), meaningful with GPU=h200 only.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin/vtensor}
gpu=${GPU:-a100-80gb}
factor_sets=${FACTORS:-2024 modern}
[ -x "$bin" ] || { echo "paper-scenario: $bin is not an executable" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { grep -m1 "\"$2\":" "$1" | sed 's/.*: *\([-0-9.eE+]*\).*/\1/'; }
echo "| workload | model | kernel factors | vtensor tok/s | paged tok/s | vs paged | radix tok/s | vs radix | vtensor hit | paged hit | radix hit | VMM on vtensor's steps |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for workload in multi-turn single-turn; do
  case $workload in
    multi-turn) trace=traces/data/mooncake_conversation_trace.jsonl ;;
    single-turn) trace=traces/data/AzureLLMInferenceTrace_conv.csv ;;
  esac
  for model in yi-6b:1 yi-34b:2; do
    name=${model%%:*} tp=${model##*:}
    for factors in $factor_sets; do
      set_args=(--kernel-factors "$factors")
      if [ "$factors" = measured ]; then
        suffix=""
        [ "$tp" = 1 ] || suffix="-tp$tp"
        set_args=(--kernel-factors modern --compute-calibration "backends/calibration/h200-compute-$name$suffix.json")
      fi
      for policy in vtensor paged radix; do
        "$bin" replay --trace "$trace" --gpu "$gpu" --model "$name" --tp "$tp" --time-scale 0.01 \
          --policy "$policy" "${set_args[@]}" --no-wall --json "$tmp/$policy.json" >/dev/null
      done
      tv=$(field "$tmp/vtensor.json" throughput_tokens_per_s)
      tp_=$(field "$tmp/paged.json" throughput_tokens_per_s)
      hv=$(field "$tmp/vtensor.json" prefix_hit_rate)
      hp=$(field "$tmp/paged.json" prefix_hit_rate)
      tr=$(field "$tmp/radix.json" throughput_tokens_per_s)
      hr=$(field "$tmp/radix.json" prefix_hit_rate)
      vc=$(field "$tmp/vtensor.json" vmm_critical_time_us)
      bz=$(field "$tmp/vtensor.json" simulated_seconds)
      awk -v w="$workload" -v m="$name x$tp" -v f="$factors" -v a="$tv" -v b="$tp_" -v c="$tr" -v ha="$hv" -v hb="$hp" \
        -v hc="$hr" -v vc="$vc" -v bz="$bz" \
        'BEGIN { printf "| %s | %s | %s | %.0f | %.0f | %.2fx | %.0f | %.2fx | %.4f | %.4f | %.4f | %.1f%% |\n", w, m, f, a, b, a / b, c, a / c, ha, hb, hc, 100 * vc / 1e6 / bz }'
    done
  done
done
