#!/usr/bin/env bash
# Builds the libFuzzer harnesses (preset `fuzz`: clang-14, ASan + UBSan + libFuzzer) and runs each
# for SECONDS (default 30) from a seed corpus made of the repository's traces, the tests' bad
# inputs and the shipped configuration files. Exit 1 on any crash, sanitizer report, leak or
# timeout (libFuzzer's own exit), with the reproducer left in build-fuzz/findings/.
# The build is the clang one: it fails on a thread-safety violation (-Werror=thread-safety,
# CMakeLists.txt).
# Usage: tools/fuzz.sh [SECONDS]     (installs clang-14 and libclang-rt-14-dev when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
./tools/install-deps.sh --fuzz
cmake --preset fuzz >/dev/null
cmake --build build-fuzz
work=build-fuzz/corpus
findings=build-fuzz/findings
mkdir -p "$findings"

# Seed corpora: the trace harness reads a format byte (0 mooncake, 1 azure, 2 vtensor, 3 vidur,
# 4 detect) before the file's bytes.
rm -rf "$work"
mkdir -p "$work/trace_reader" "$work/config_files" "$work/replay_options" "$work/compare_options" \
  "$work/experiment_file"
n=0
for f in tests/data/traces/* traces/data/*; do
  [ -f "$f" ] || continue
  for format in 0 1 2 3 4; do
    { printf "\\x0$format"; head -c 4096 "$f"; } >"$work/trace_reader/seed-$n-$format"
  done
  n=$((n + 1))
done
cp backends/calibration/h200.json "$work/config_files/h200.json"
printf '{"name": "x", "factors": {"paged": {"prefill": 1.2, "decode": 1.1}}, "sources": {"paged": "y"}}' \
  >"$work/config_files/factors.json"
printf -- '--policy\nstatic\n--reserve\npow2\n--arena\nbuddy\n' >"$work/replay_options/static"
printf -- '--policy\npaged\n--block-tokens\n16\n--memory\n1GiB\n' >"$work/replay_options/paged"
printf -- '--policy\nvtensor\n--lookahead\n2\n--layout\nkv-split\n--time-scale\n4\n' >"$work/replay_options/vtensor"
printf -- '--policy\nradix\n--page-tokens\n16\n--memory\nunlimited\n' >"$work/replay_options/radix"
printf -- '--policy\nvattention\n--megacache\ntrue\n--tp\n2\n--model\nyi-34b\n' >"$work/replay_options/vattention"
printf -- '--policy\npaged\n@8\n32\n@3\nfalse\n' >"$work/replay_options/table"
printf -- '--arm\na=paged --block-tokens 32\n--arm\nb=vtensor --lookahead 2\n--memory\n2GiB,unlimited\n' \
  >"$work/compare_options/two"
printf -- '--arm\ns=static --reserve pow2\n--time-scale\n1,4\n--baseline\ns\n' >"$work/compare_options/static"
printf '{"arms": {"vt": "vtensor", "paged16": "paged --block-tokens 16"}, "memory": ["2GiB", "unlimited"]}' \
  >"$work/experiment_file/object"
printf '{"arms": [{"name": "r", "policy": "radix", "options": "--page-tokens 16"}], "time_scale": [1, 4], "baseline": "r", "kernel_factors": ["modern", "2024"]}' \
  >"$work/experiment_file/array"

# The harnesses run in a scratch folder: an option the fuzzer makes up may name an output file
# (`--json --trace` once left a file named `--trace` in the source tree).
root=$(pwd)
scratch=build-fuzz/run
rm -rf "$scratch"
mkdir -p "$scratch"
status=0
for harness in trace_reader config_files replay_options compare_options experiment_file; do
  echo "== fuzz_$harness for ${seconds}s"
  if ! (cd "$scratch" && "$root/build-fuzz/bin/fuzz_$harness" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="$root/$findings/$harness-" -print_final_stats=1 \
      "$root/$work/$harness" >"$root/build-fuzz/fuzz_$harness.log" 2>&1); then
    echo "fuzz_$harness: FAILED (build-fuzz/fuzz_$harness.log, reproducer in $findings/)"
    status=1
  fi
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|cov:" \
    "build-fuzz/fuzz_$harness.log" | tail -3
done
exit $status
