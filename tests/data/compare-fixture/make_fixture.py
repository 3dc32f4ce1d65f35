#!/usr/bin/env python3
"""Writes the fixture of the `report` test suite: a small `vtensor compare --out` folder
(summary.json, arms.csv, timeseries/) in the format of docs/compare-output.md, made by hand
around real replays, so the report can be tested without `vtensor compare`.

    tests/data/compare-fixture/make_fixture.py [--bin build/bin/vtensor]

Real: each point's replay summary and time series (`vtensor replay --json --timeseries` of the
first 300 lines of the bundled Mooncake excerpt, three policies at 8 GiB and 32 GiB) and the
infinite-cache bound (`vtensor inspect` of the same lines). Hand-made (a fixture, not a result):
the offline bounds, the split of the missed tokens into causes other than cold and preempted,
the 101 latency quantiles (interpolated through the summary's p50, p90 and p99) and the
histograms. Standard library only; run from the repository root.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = [("vtensor", "vtensor", ""), ("paged", "paged", "--block-tokens 16"), ("radix", "radix", "")]
MEMORY = [("8GiB", 8 << 30), ("32GiB", 32 << 30)]
OFFLINE = {"8GiB": 0.052, "32GiB": 0.071}  # hand-made
SAMPLE_MS = 2000


def cell_id(memory):
    return f"memory={memory},time_scale=1,kernel_factors=modern,trace=0"


def quantiles(lat):
    """101 values through (0, p50/20), (0.5, p50), (0.9, p90), (0.99, p99), (1, 1.05 p99)."""
    knots = [(0.0, lat["p50"] / 20), (0.5, lat["p50"]), (0.9, lat["p90"]), (0.99, lat["p99"]), (1.0, lat["p99"] * 1.05)]
    out = []
    for i in range(101):
        q = i / 100
        for (q0, v0), (q1, v1) in zip(knots, knots[1:]):
            if q0 <= q <= q1:
                out.append(round(v0 + (v1 - v0) * (q - q0) / (q1 - q0), 3))
                break
    return out


def histogram(seed, scale):
    edges = [0.0] + [0.5 * 2**k for k in range(11)]  # 0, 0.5 s ... 512 s
    counts = [int(scale * (1 + ((seed * 7 + k * 13) % 11)) * (1 if k < 6 else 0.3)) for k in range(len(edges) - 1)]
    return {"edges": edges, "counts": counts}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/vtensor")
    args = ap.parse_args()
    excerpt = os.path.join("traces", "data", "mooncake_conversation_excerpt.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t300.jsonl")
        with open(excerpt) as src, open(trace, "w") as dst:
            for _, line in zip(range(300), src):
                dst.write(line)
        stats_path = os.path.join(tmp, "inspect.json")
        subprocess.run([args.bin, "inspect", trace, "--json", stats_path], check=True, stdout=subprocess.DEVNULL)
        stats = json.load(open(stats_path))
        infinite = stats["prefix_hit_rate"]
        infinite_hits = stats["prefix_hit_tokens"]
        os.makedirs(os.path.join(HERE, "timeseries"), exist_ok=True)
        cells, points, rows = [], [], []
        for memory, memory_bytes in MEMORY:
            cid = cell_id(memory)
            cells.append({"id": cid, "memory": memory, "memory_bytes": memory_bytes, "time_scale": 1,
                          "kernel_factors": "modern", "trace": 0,
                          "bounds": {"infinite_hit_rate": infinite, "offline_hit_rate": OFFLINE[memory],
                                     "offline_model": "hand-made fixture value (not computed)"}})
            cell_points = []
            for ai, (arm, policy, options) in enumerate(ARMS):
                pid = f"{arm}@{cid}"
                js, ts = os.path.join(tmp, pid + ".json"), os.path.join(HERE, "timeseries", pid + ".csv")
                cmd = [args.bin, "replay", "--trace", trace, "--policy", policy, "--memory", memory, "--no-wall",
                       "--sample-ms", str(SAMPLE_MS), "--json", js, "--timeseries", ts] + options.split()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                s = json.load(open(js))
                s["config"]["trace"] = "t300.jsonl"  # not the temporary path
                hits, prompt, recomputed = s["prefix_hit_tokens"], s["prompt_tokens"], s["recomputed_tokens"]
                total = prompt - hits + recomputed
                cold = prompt - infinite_hits
                rest = total - cold - recomputed  # the infinite cache's hits this point missed
                evicted = rest * 6 // 10
                granularity = rest * 2 // 10 if policy == "paged" else 0
                in_flight = (rest - evicted - granularity) // 2
                unpublished = rest - evicted - granularity - in_flight
                point = {
                    "id": pid, "arm": arm, "cell": cid, "summary": s, "hit_rate": s["prefix_hit_rate"],
                    "of_infinite": s["prefix_hit_rate"] / infinite, "of_offline": s["prefix_hit_rate"] / OFFLINE[memory],
                    "misses": {"cold": cold, "evicted": evicted, "granularity": granularity, "preempted": recomputed,
                               "in_flight": in_flight, "unpublished": unpublished, "total": total},
                    "latency_quantiles": {"q": [i / 100 for i in range(101)], "ttft_ms": quantiles(s["ttft_ms"]),
                                          "tpot_ms": quantiles(s["tpot_ms"])},
                    "histograms": {"reuse_distance_s": histogram(ai, 40), "cached_lifetime_s": histogram(ai + 3, 25)},
                    "timeseries": f"timeseries/{pid}.csv",
                }
                cell_points.append(point)
            base = cell_points[0]["summary"]
            for p in cell_points:
                p["ratios"] = {k: p["summary"][k] / base[k] for k in ("prefix_hit_rate", "throughput_tokens_per_s")}
                p["best"] = [k for k in ("prefix_hit_rate", "throughput_tokens_per_s")
                             if p["summary"][k] == max(q["summary"][k] for q in cell_points)]
            points += cell_points
        first = points[0]["summary"]["config"]
        settings = {k: v for k, v in first.items()
                    if k not in ("policy", "policy_options", "memory", "trace", "format", "time_scale")}
        summary = {
            "format": "vtensor-compare", "version": 1,
            "command": "tests/data/compare-fixture/make_fixture.py (a hand-made fixture around real replays: "
                       "vtensor replay --trace t300.jsonl --policy POLICY --memory 8GiB|32GiB --sample-ms 2000)",
            "baseline": "vtensor",
            "traces": [{"index": 0, "path": "t300.jsonl", "format": "mooncake", "requests": stats["requests"],
                        "prompt_tokens": stats["prompt_tokens"], "block_tokens": stats["block_tokens"]}],
            "settings": settings,
            "axes": {"memory": [m for m, _ in MEMORY], "time_scale": [1], "kernel_factors": ["modern"], "trace": [0]},
            "arms": [{"name": a, "policy": p, "options": o} for a, p, o in ARMS],
            "cells": cells, "points": points, "wall_seconds": 0.0, "jobs": 1,
        }
    with open(os.path.join(HERE, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    header = ["id", "arm", "policy", "memory", "time_scale", "kernel_factors", "trace", "hit_rate",
              "infinite_hit_rate", "offline_hit_rate", "of_infinite", "of_offline", "throughput_tokens_per_s",
              "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "preemptions", "peak_physical_bytes",
              "mean_used_bytes", "mean_internal_bytes", "mean_reserved_idle_bytes", "mean_external_bytes",
              "mean_cached_bytes", "mean_free_bytes", "vmm_critical_time_us", "misses_cold", "misses_evicted",
              "misses_granularity", "misses_preempted", "misses_in_flight", "misses_unpublished", "throughput_ratio",
              "hit_rate_ratio"]
    cell_by_id = {c["id"]: c for c in cells}
    policy = {a: p for a, p, _ in ARMS}
    with open(os.path.join(HERE, "arms.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for p in points:
            c, s, m, mb = cell_by_id[p["cell"]], p["summary"], p["misses"], p["summary"]["memory_breakdown"]["mean_bytes"]
            w.writerow([p["id"], p["arm"], policy[p["arm"]], c["memory"], 1, "modern", 0, p["hit_rate"],
                        c["bounds"]["infinite_hit_rate"], c["bounds"]["offline_hit_rate"], p["of_infinite"],
                        p["of_offline"], s["throughput_tokens_per_s"], s["ttft_ms"]["p50"], s["ttft_ms"]["p99"],
                        s["tpot_ms"]["p50"], s["tpot_ms"]["p99"], s["preemptions"], s["peak_physical_bytes"],
                        s["mean_used_bytes"], mb["internal"], mb["reserved_idle"], mb["external"], mb["cached"],
                        mb["free"], s["vmm_critical_time_us"], m["cold"], m["evicted"], m["granularity"],
                        m["preempted"], m["in_flight"], m["unpublished"], p["ratios"]["throughput_tokens_per_s"],
                        p["ratios"]["prefix_hit_rate"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
