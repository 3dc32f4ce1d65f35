#!/usr/bin/env python3
"""The eviction table of results/eviction/README.md from the four comparisons' summary.json:
per policy and order, the share of the LRU-to-offline-arm gap closed in each cell, and hit rates.
Usage: python3 results/eviction/table.py [DIR]   (default: this file's folder)"""
import json, os, sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
traces = ["mooncake-conversation", "mooncake-synthetic", "gen-multiturn", "gen-syspool"]
rows = {}
cols = []
for t in traces:
    s = json.load(open(os.path.join(root, t, "summary.json")))
    for g in s.get("eviction", []):
        for c in g["cells"]:
            col = f"{t} {c['memory']}"
            if col not in cols:
                cols.append(col)
            for a in g["arms"]:
                share = c["gap_closed"].get(a["arm"])
                hit = c["hit_rate"][a["arm"]]
                rows.setdefault((g["policy"], a["order"]), {})[col] = (share, hit)
print("| policy | order | " + " | ".join(cols) + " |")
print("| --- | --- | " + " | ".join("---:" for _ in cols) + " |")
for (policy, order), cells in rows.items():
    out = []
    for col in cols:
        share, hit = cells.get(col, (None, None))
        if hit is None:
            out.append("")
        elif share is None:
            out.append(f"n/a ({hit:.4f})")
        else:
            out.append(f"{share:+.2f} ({hit:.4f})")
    print(f"| {policy} | {order} | " + " | ".join(out) + " |")
