#!/usr/bin/env bash
# Tries the bad inputs a user meets and prints what vtensor does with each, as a Markdown table
# (the first table of docs/bad-inputs.md is this script's output). Every case runs the real
# binary in a temporary folder; the table shows the exit code and the first line of the message.
# Usage: tools/bad-inputs.sh [BINARY]    (default build/bin/vtensor)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/bin/vtensor}")
trace=$(realpath traces/data/mooncake_conversation_excerpt.jsonl)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

printf '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1, "input_length": "x"}\n' >wrong-type.jsonl
printf '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1, "input_len\n' >truncated.jsonl
printf '{"timestamp": 5, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [2]}\n' >backwards.jsonl
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nnot-a-date,1,1\n' >bad-date.csv
printf 'arrived_at,num_prefill_tokens\n0.0,10\n' >vidur-missing-column.csv
: >empty.jsonl
mkdir -p used && : >used/notes.txt
printf '{"format": "vtensor-calibration"}' >calibration.json
printf '{"name": "x"}' >factors.json
printf '{"arms": [{"name": "x"}]}' >experiment.json
mkdir -p not-a-comparison
"$bin" compare --arm v=vtensor --max-requests 10 --plan compare-plan >/dev/null
echo old >kept.json
ln -s kept.json link.json

row() {  # row "what" "expected" args...
  local what=$1 expected=$2
  shift 2
  local out rc
  "$bin" "$@" >/dev/null 2>err.txt
  rc=$?
  out=$(grep -m1 "^vtensor" err.txt | sed 's/|/\\|/g')
  printf '| %s | `vtensor %s` | %s | %s |\n' "$what" "$(echo "$*" | sed "s|$trace|EXCERPT|g; s|$tmp/||g")" "$rc" "${out:-$expected}"
}

echo "| input | command | exit | message or outcome |"
echo "| --- | --- | ---: | --- |"
row "missing trace file" "" replay --trace /nonexistent/trace.jsonl
row "JSON field of the wrong type" "" replay --trace wrong-type.jsonl
row "trace line cut short" "" replay --trace truncated.jsonl
row "timestamps going backwards" "" replay --trace backwards.jsonl
row "Azure date that is not a date" "" replay --trace bad-date.csv --format azure
row "Vidur CSV without a needed column" "" replay --trace vidur-missing-column.csv --format vidur
row "empty trace" "" replay --trace empty.jsonl
row "unknown unit in a size" "" replay --memory 12XB
row "memory below one request" "every request rejected over memory, reported" replay --trace "$trace" --max-requests 5 --memory 1MiB
row "no memory" "" replay --memory 0
row "a negative count" "" replay --max-requests -1
row "a negative count of a policy's option" "" replay --policy paged --block-tokens -16
row "unknown policy" "" replay --policy magic
row "option of another policy" "" replay --block-tokens 16
row "tensor parallelism that does not divide the heads" "" replay --model llama-3-70b --tp 3
row "weights larger than the GPU" "" replay --model llama-3-70b --gpu a100-80gb
row "calibration file without its keys" "" replay --calibration calibration.json
row "missing calibration file" "" replay --calibration /nonexistent/cal.json
row "kernel-factor file without factors" "" replay --kernel-factors factors.json
row "two outputs to standard output" "" replay --json - --timeseries -
row "output on a full device" "" replay --trace "$trace" --max-requests 5 --json /dev/full
row "output in a missing folder" "" replay --trace "$trace" --max-requests 5 --json /nonexistent/dir/out.json
row "output through a symlink" "written to its target, the link kept" replay --trace "$trace" --max-requests 5 --json link.json
row "cuda backend without a GPU or driver" "" replay --backend cuda --max-requests 5
row "gen-trace without --out" "" gen-trace --requests 10
row "inspect of a missing file" "" inspect /nonexistent.jsonl
row "compare arm with an option of another policy" "" compare --arm 'p=paged --megacache true'
row "compare arm with a negative count" "" compare --arm 'p=paged --block-tokens -1'
row "compare arm naming no policy" "" compare --arm 'p=heap'
row "experiment file arm without a policy" "" compare --arms experiment.json
row "an axis value given twice" "" compare --arm v=vtensor --memory 16GiB,16GiB
row "--report without --out" "" compare --arm v=vtensor --report
row "report of a folder that is no comparison" "" report not-a-comparison
row "a plan into a folder in use" "" compare --arm v=vtensor --plan used
row "merge of a folder that is no plan" "" compare --merge not-a-plan
row "an array throttle without a Slurm array" "" compare --arm v=vtensor --plan p1 --emit parallel --array-throttle 4
row "a compare plan merged by capacity" "" capacity --merge compare-plan
row "capacity without an objective" "" capacity --arm v=vtensor
row "capacity objective that does not parse" "" capacity --arm v=vtensor --slo 'ttft_p95<=5s'
row "fewest replicas beside a replicas axis" "" capacity --arm v=vtensor --slo 'ttft_p90<=5s' --fewest-replicas 8 --replicas 2
row "standby larger than the context" "" replay --trace "$trace" --standby-tokens 200000
row "no replica" "" replay --trace "$trace" --replicas 0
row "an unknown router" "" replay --trace "$trace" --replicas 2 --router random
row "a router option out of range" "" replay --trace "$trace" --replicas 2 --router prefix-approx --router-cache-threshold 2
row "a time series of a cluster" "" replay --trace "$trace" --replicas 2 --timeseries ts.csv
if [ -L link.json ] && [ "$(head -c1 kept.json)" = "{" ]; then
  echo "(check: link.json is still a symlink and kept.json holds the summary)" >&2
else
  echo "symlink check FAILED" >&2
  exit 1
fi
