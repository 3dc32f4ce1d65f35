#!/usr/bin/env bash
# The compute calibration on a GPU, in one go (issue 14), each output kept:
#   1. the GPU test of the decode-attention kernels (contiguous in each layout and paged give the
#      same output);
#   2. `vtensor calibrate --compute` for each MODEL:TP[:LABEL] given (default llama-3-8b:1; a
#      label tells a repeated run's files apart).
# Usage: tools/gpu-compute.sh BIN_DIR OUT_DIR [MODEL:TP[:LABEL] ...]   (BIN_DIR holds vtensor and
# vtensor_tests and the shared libraries they need; cuBLAS is found through LD_LIBRARY_PATH or
# /usr/local/cuda/lib64). Exit 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:?usage: $0 BIN_DIR OUT_DIR [MODEL:TP ...]}" && pwd) || { echo "gpu-compute: no folder $1" >&2; exit 2; }
out=${2:?usage: $0 BIN_DIR OUT_DIR [MODEL:TP ...]}
shift 2
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(llama-3-8b:1)
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
# Files are named after the card (h100, h200, ...), whatever the machine gave.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9][0-9]*' | tr 'H' 'h')
card=${card:-gpu}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv
  ls /usr/local/cuda/lib64/libcublas.so* 2>&1
} >"$out/summary.txt" 2>&1
"$bin/vtensor_tests" -ts=gpu -tc='decode attention*' -s >"$out/tests-decode-attention.txt" 2>&1
rc=$?
echo "decode attention test: exit $rc, GPU_SKIP lines: $(grep -c GPU_SKIP "$out/tests-decode-attention.txt")" |
  tee -a "$out/summary.txt"
[ $rc -eq 0 ] || status=1
for m in "${models[@]}"; do
  IFS=: read -r name tp label <<<"$m"
  tag=$name-tp$tp${label:+-$label}
  cmd=("$bin/vtensor" calibrate --compute --model "$name" --tp "$tp" --out "$out/$card-compute-$tag.json")
  { echo "# ${cmd[*]}"; "${cmd[@]}"; } >"$out/calibrate-$tag.txt" 2>&1
  rc=$?
  echo "calibrate $tag: exit $rc" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
done
exit $status
