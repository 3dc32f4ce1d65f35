#!/usr/bin/env bash
# The checks that need a real GPU, in one go, each output kept:
#   1. the whole test suite, whose cuda cases (backend conformance, manager, replay, measurements)
#      run instead of skipping; a GPU_SKIP there fails the check;
#   2. `vtensor validate-gpu` on the three layouts;
#   3. `vtensor replay --compare-backends sim,cuda` on the first 500 requests of the bundled
#      excerpt, with lookahead 2 (the worker) and without (synchronous mapping), in the default
#      layout (token-major), and with lookahead 2 in the other two (eager publication, the
#      default, in each: issue 33);
#   4. the same for every other policy (paged, radix, static, vattention); the preallocating ones
#      make no VMM call during the replay, so their steps are not emulated (--emulate-steps
#      false), vattention's are (its worker maps while steps run);
#   5. vtensor on the first 500 requests of the Azure conversation trace, whose admissions all
#      miss the cache and so take the standby vTensor (Note [Standby vTensor] in
#      core/scheduler.cpp): at the default memory, and at 3 GiB and 3.3x the load (preemptions),
#      token-major and kv-fused;
#   6. two replicas on the one GPU (issue 34), vtensor and paged, each replica its own pool and
#      16 GiB cap, routed by prefix-precise, every replica's steps compared.
# Usage: tools/gpu-check.sh BIN_DIR OUT_DIR   (BIN_DIR holds vtensor and vtensor_tests; shared
# libraries they need may sit beside them; the tests read their data from the source tree the
# binary was built from, so run this from that tree or a copy at the same path). Exit 0 when every
# check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:?usage: $0 BIN_DIR OUT_DIR}" && pwd) || { echo "gpu-check: no folder $1" >&2; exit 2; }
out=${2:?usage: $0 BIN_DIR OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
step() {  # step NAME COMMAND...: runs COMMAND, its output into OUT/NAME.txt, and records failures
  local name=$1; shift
  { echo "# $*"; "$@"; } >"$out/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >"$out/summary.txt" 2>&1
step tests "$bin/vtensor_tests"
"$bin/vtensor_tests" -tc='*cuda*,*gpu*,*GPU*' -s >"$out/tests-cuda-verbose.txt" 2>&1
skips=$(grep -c GPU_SKIP "$out/tests-cuda-verbose.txt")
echo "cuda test cases skipped: $skips" | tee -a "$out/summary.txt"
[ "$skips" -eq 0 ] || status=1
for layout in kv-split kv-fused token-major; do
  step "validate-$layout" "$bin/vtensor" validate-gpu --layout "$layout" --seed 1 --json "$out/validate-$layout.json"
done
trace=traces/data/mooncake_conversation_excerpt.jsonl
for lookahead in 2 0; do
  step "compare-lookahead$lookahead" "$bin/vtensor" replay --trace "$trace" --max-requests 500 --memory 16GiB \
    --step-time-scale 0.05 --lookahead "$lookahead" --compare-backends sim,cuda
done
for layout in kv-split kv-fused; do
  step "compare-$layout" "$bin/vtensor" replay --trace "$trace" --max-requests 500 --memory 16GiB \
    --step-time-scale 0.05 --lookahead 2 --layout "$layout" --compare-backends sim,cuda
done
for policy in paged radix static vattention; do
  emulate=false
  [ "$policy" = vattention ] && emulate=true
  step "compare-$policy" "$bin/vtensor" replay --trace "$trace" --max-requests 500 --memory 16GiB \
    --emulate-steps "$emulate" --step-time-scale 0.05 --policy "$policy" --compare-backends sim,cuda
done
azure=traces/data/AzureLLMInferenceTrace_conv.csv
for layout in token-major kv-fused; do
  step "compare-standby-$layout" "$bin/vtensor" replay --trace "$azure" --max-requests 500 --step-time-scale 0.05 \
    --layout "$layout" --compare-backends sim,cuda
  step "compare-standby-$layout-3GiB" "$bin/vtensor" replay --trace "$azure" --max-requests 500 --memory 3GiB \
    --time-scale 0.3 --step-time-scale 0.05 --layout "$layout" --compare-backends sim,cuda
done
# Two replicas' pools on one GPU (issue 34): each policy its own cuda backend with its own 16 GiB
# cap, arrivals placed by a router that reads both caches; every replica step by step.
for policy in vtensor paged; do
  step "compare-cluster-$policy" "$bin/vtensor" replay --trace "$trace" --max-requests 500 --memory 16GiB \
    --replicas 2 --router prefix-precise --step-time-scale 0.05 --policy "$policy" --compare-backends sim,cuda
done
exit $status
