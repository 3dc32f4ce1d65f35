#!/usr/bin/env bash
# A sweep of the whole Mooncake conversation trace as a Slurm job array (issue 35), end to end on
# this machine: the five KV policies x four memory budgets x two loads (--time-scale 1 and 4) as
# a compare plan (`--plan --emit slurm`), its job array run by a single-node Slurm started here
# (tools/slurm-local.sh, stopped by its pids at the end whatever happens), merged with the report
# into OUT (default results/sweep/mooncake-slurm), beside the plan's sbatch script, each task's
# log line and the time it all took; then the same comparison run on this machine alone
# (`--jobs 2`), which the merged outputs must equal byte for byte (the script fails otherwise).
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
sweep=(traces/data/mooncake_conversation_trace.jsonl
  --arm vtensor=vtensor --arm paged=paged --arm radix=radix --arm static=static --arm vattention=vattention
  --memory default,16GiB,64GiB,unlimited --time-scale 1,4 --sample-ms 10000 --no-wall)
"$bin" compare "${sweep[@]}" --plan "$plan" --emit slurm --array-throttle "$throttle" | tee "$work/plan.txt"
planned=$(date +%s)
job=$(sbatch --parsable "$plan/run-slurm.sbatch" | cut -d';' -f1)
# Polled every second (sbatch --wait polls at growing intervals, up to half a minute).
while [ -n "$(squeue -h -j "$job" 2>/dev/null)" ]; do sleep 1; done
ran=$(date +%s)
rm -rf "$out"
mkdir -p "$(dirname "$out")"
"$bin" compare --merge "$plan" --out "$out" --report >"$out.txt"
merged=$(date +%s)
# The same comparison on this machine alone: the merge must be its output byte for byte.
"$bin" compare "${sweep[@]}" --jobs 2 --out "$work/single" >"$work/single.txt"
single=$(date +%s)
same=yes
cmp -s "$out.txt" "$work/single.txt" || same=no
# summary.json names the command, whose output options differ (--out here, there): that line aside.
cmp -s <(grep -v '^  "command": ' "$out/summary.json") <(grep -v '^  "command": ' "$work/single/summary.json") ||
  { same=no; echo "differs from the single run: summary.json" >&2; }
for f in arms.csv $(cd "$work/single" && ls timeseries/*); do
  cmp -s "$out/$f" "$work/single/$f" || { same=no; echo "differs from the single run: $f" >&2; }
done
cp "$plan/run-slurm.sbatch" "$out/run-slurm.sbatch"
{
  echo "# tools/sweep-slurm.sh $*: whole Mooncake, 5 arms x 4 budgets x 2 loads, Slurm job $job"
  echo "# $(nproc) cores; array throttle $throttle (Slurm keeps no accounting here: each task's log line below)"
  echo "plan (and the points measured): $((planned - start)) s"
  echo "job array (submitted to the last task ended, polled each second): $((ran - planned)) s"
  echo "merge with --report: $((merged - ran)) s"
  echo "the same comparison run alone (--jobs 2): $((single - merged)) s"
  echo "merged outputs byte-identical to the single run's (table, summary.json but its command line, arms.csv, $(ls "$work/single/timeseries" | wc -l) time series): $same"
  for f in "$plan"/slurm/*.out; do echo "== $(basename "$f"): $(tail -n 1 "$f")"; done
} >"$out/slurm-run.txt"
head -8 "$out/slurm-run.txt"
[ "$same" = yes ]
