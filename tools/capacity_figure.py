#!/usr/bin/env python3
"""Goodput against offered load, one line per arm, from `vtensor capacity --json` (issue 34).

Usage: tools/capacity_figure.py CAPACITY.json OUT.png

Every probe of every search is a point: x is the load (a multiple of the trace's arrival rate),
y the share of requests within every clause's limit (the probe's "goodput"). Each arm's capacity
is marked on its line. One panel per cell of the other axes. Needs python3-matplotlib (Agg).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: capacity_figure.py CAPACITY.json OUT.png")
    with open(sys.argv[1]) as f:
        data = json.load(f)
    cells = data["cells"]
    fig, axes = plt.subplots(1, len(cells), figsize=(6.4 * len(cells), 4.2), squeeze=False)
    objective = ", ".join(data["slo"])
    for ax, cell in zip(axes[0], cells):
        for arm in cell["arms"]:
            probes = sorted(arm["probes"], key=lambda p: p["load"])
            if not probes or "goodput" not in probes[0]:
                sys.exit(f"{sys.argv[1]}: the probes carry no goodput (a capacity JSON from an older vtensor)")
            line, = ax.plot([p["load"] for p in probes], [p["goodput"] for p in probes], marker="o", ms=3,
                            label=arm["arm"])
            if arm["capacity"] is not None:
                ax.axvline(arm["capacity"], color=line.get_color(), ls=":", lw=1)
        if data.get("goodput") is not None:
            ax.axhline(data["goodput"], color="grey", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("offered load (x the trace's arrival rate)")
        ax.set_ylabel("goodput (share of requests within the limits)")
        title = f"{cell['trace'].split('/')[-1]}, memory {cell['memory']}"
        if "replicas" in cell:
            title += f", {cell['replicas']} replicas"
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"goodput against load per arm\nlimits per request: {objective}; dotted: each arm's capacity",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
