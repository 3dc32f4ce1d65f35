#!/usr/bin/env bash
# The cluster figures committed under results/cluster/ (issue 34, "replicas and a router"): the
# whole Mooncake conversation trace on 8 replicas (Llama-3-8B, one H200 each, default memory),
# every router against vtensor, paged and radix, at the trace's own rate (x1: each replica about
# 70% busy) and at 1.6x it (time scale 0.625). One JSON per run (`vtensor replay --json`, its
# "cluster" block), then table.md: hit rate against the bounds, TTFT and TPOT quantiles,
# throughput, imbalance and routing decisions.
# Usage: tools/cluster-results.sh [BINARY] [OUT_DIR]   (defaults: build/bin/vtensor results/cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin/vtensor}
root=${2:-results/cluster}
trace=traces/data/mooncake_conversation_trace.jsonl
mkdir -p "$root"
for scale in 1 0.625; do
  for policy in vtensor paged radix; do
    for router in round-robin least-loaded session prefix-approx prefix-precise; do
      name="$policy-$router-x$scale"
      echo "== $name" >&2
      "$bin" replay --trace "$trace" --replicas 8 --router "$router" --policy "$policy" --time-scale "$scale" \
        --no-wall --json "$root/$name.json" >/dev/null
    done
  done
done
python3 - "$root" <<'PY'
import json, sys, pathlib
root = pathlib.Path(sys.argv[1])
routers = ["round-robin", "least-loaded", "session", "prefix-approx", "prefix-precise"]
out = ["# Whole Mooncake conversation trace, 8 replicas (tools/cluster-results.sh)", ""]
for scale in ["1", "0.625"]:
    load = 1 / float(scale)
    out += [f"## Load x{load:g} (--time-scale {scale})", "",
            "| policy | router | hit rate | split bound | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | TPOT p90 ms "
            "| output tok/s | busy max/mean | queued max/mean | decisions |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    glob = None
    for policy in ["vtensor", "paged", "radix"]:
        for router in routers:
            j = json.loads((root / f"{policy}-{router}-x{scale}.json").read_text())
            c = j["cluster"]
            glob = c["bounds"]["global_infinite_hit_rate"]
            d = ", ".join(f"{k} {v}" for k, v in c["decisions"].items())
            out.append(f"| {policy} | {router} | {j['prefix_hit_rate']:.4f} | {c['bounds']['split_infinite_hit_rate']:.4f} "
                       f"| {j['ttft_ms']['p50']:.0f} | {j['ttft_ms']['p90']:.0f} | {j['ttft_ms']['p99']:.0f} "
                       f"| {j['tpot_ms']['p90']:.1f} | {j['throughput_tokens_per_s']:.0f} "
                       f"| {c['imbalance']['busy_max_over_mean']:.2f} | {c['imbalance']['queued_max_over_mean']:.2f} | {d} |")
    out += ["", f"Global infinite-cache bound (one cache for the whole trace): {glob:.4f}.", ""]
(root / "table.md").write_text("\n".join(out) + "\n")
PY
echo "wrote $root/table.md" >&2
