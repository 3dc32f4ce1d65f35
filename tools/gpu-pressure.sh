#!/usr/bin/env bash
# Memory pressure from another process in the middle of a cuda replay (issue 12): a replay with
# real VMM calls runs with a memory cap above what the GPU will have left; after AFTER seconds
# vtensor_gpu_hog takes all but LEAVE of the free memory for HOLD seconds, then frees it. The
# replay must go on (evicting, preempting or rejecting with a clear message), never crash, and
# the driver's used memory must come back to where it started. Every output lands in OUT_DIR.
# Usage: tools/gpu-pressure.sh BIN_DIR OUT_DIR [POLICY] [AFTER] [HOLD] [LEAVE] [CAP]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1")
out=$2
policy=${3:-vtensor}
after=${4:-15}
hold=${5:-25}
leave=${6:-6GiB}
cap=${7:-130GiB}
mkdir -p "$out"
trace=traces/data/mooncake_conversation_excerpt.jsonl

"$bin/vtensor_gpu_hog" --report >"$out/$policy-before.json" || exit 1
# The cap (130 GiB) is far above what the hog leaves free, so the driver, not the cap, runs out.
"$bin/vtensor" replay --trace "$trace" --policy "$policy" --backend cuda --memory "$cap" --max-requests 300 \
  --step-time-scale 0.1 --json "$out/$policy-replay.json" >"$out/$policy-replay.txt" 2>&1 &
replay=$!
"$bin/vtensor_gpu_hog" --after "$after" --hold "$hold" --leave "$leave" >"$out/$policy-hog.txt" 2>&1
hog_rc=$?
wait $replay
replay_rc=$?
sleep 1
"$bin/vtensor_gpu_hog" --report >"$out/$policy-after.json" || exit 1
{
  echo "policy $policy: replay exit $replay_rc, hog exit $hog_rc"
  echo "before: $(cat "$out/$policy-before.json")"
  echo "after:  $(cat "$out/$policy-after.json")"
  grep -E "^requests|^memory:|evictions|^simulated" "$out/$policy-replay.txt" | head -4
} | tee "$out/$policy-summary.txt"
before=$(sed 's/.*"used_bytes": \([0-9]*\).*/\1/' "$out/$policy-before.json")
after_used=$(sed 's/.*"used_bytes": \([0-9]*\).*/\1/' "$out/$policy-after.json")
diff=$((after_used - before))
echo "driver used memory after - before: $diff bytes" | tee -a "$out/$policy-summary.txt"
# Within 64 MiB (the driver's own allocations may move a little; validate-gpu uses the same slack).
if [ "$replay_rc" -ne 0 ] || [ "$hog_rc" -ne 0 ] || [ "${diff#-}" -gt $((64 << 20)) ]; then
  echo "gpu-pressure: FAILED" | tee -a "$out/$policy-summary.txt"
  exit 1
fi
echo "gpu-pressure: passed" | tee -a "$out/$policy-summary.txt"
