#!/usr/bin/env bash
# A sweep of the whole Mooncake conversation trace as a Slurm job array (issue 35), end to end on
# this machine: the five KV policies x four memory budgets x two loads (--time-scale 1 and 4) as
# a compare plan (`--plan --emit slurm`), its job array run by a single-node Slurm started here
# (tools/slurm-local.sh, stopped by its pids at the end whatever happens), merged with the report
# into OUT (default results/sweep/mooncake-slurm), beside the plan's sbatch script, Slurm's
# accounting of the array and the time it all took.
# On a real cluster: the same `--plan` on a shared file system (or on each node's copy of the
# binary and traces at the same paths: every task checks their checksums), then sbatch the
# script the plan holds and merge (README, "Sweeps on Slurm or GNU parallel").
# Usage: tools/sweep-slurm.sh [BINARY] [OUT] [THROTTLE]   (root: slurmd runs the tasks)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/bin/vtensor}")
out=${2:-results/sweep/mooncake-slurm}
throttle=${3:-2}
work=$(mktemp -d /tmp/vtensor-sweep.XXXXXX)
chmod 755 "$work"
state=$work/slurm
trap 'tools/slurm-local.sh stop "$state" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
tools/slurm-local.sh start "$state" >"$work/slurm-start.txt"
export SLURM_CONF=$state/slurm.conf
plan=$work/plan
start=$(date +%s)
"$bin" compare traces/data/mooncake_conversation_trace.jsonl \
  --arm vtensor=vtensor --arm paged=paged --arm radix=radix --arm static=static --arm vattention=vattention \
  --memory default,16GiB,64GiB,unlimited --time-scale 1,4 --sample-ms 10000 --no-wall \
  --plan "$plan" --emit slurm --array-throttle "$throttle" | tee "$work/plan.txt"
planned=$(date +%s)
sbatch --wait --parsable "$plan/run-slurm.sbatch" >"$work/job.txt"
ran=$(date +%s)
job=$(cut -d';' -f1 "$work/job.txt")
sacct_note="(no accounting: AccountingStorageType=none; per-task logs below)"
rm -rf "$out"
mkdir -p "$(dirname "$out")"
"$bin" compare --merge "$plan" --out "$out" --report >"$out.txt"
merged=$(date +%s)
cp "$plan/run-slurm.sbatch" "$out/run-slurm.sbatch"
{
  echo "# tools/sweep-slurm.sh $*: whole Mooncake, 5 arms x 4 budgets x 2 loads, Slurm job $job"
  echo "# $(nproc) cores; array throttle $throttle; $sacct_note"
  echo "plan (and point 0 measured): $((planned - start)) s"
  echo "job array (sbatch --wait): $((ran - planned)) s"
  echo "merge with --report: $((merged - ran)) s"
  for f in "$plan"/slurm/*.out; do echo "== $(basename "$f"): $(tail -n 1 "$f")"; done
} >"$out/slurm-run.txt"
cat "$out/slurm-run.txt" | head -5
