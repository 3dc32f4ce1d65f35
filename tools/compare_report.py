#!/usr/bin/env python3
"""Renders the report of a finished `vtensor compare` folder: DIR/report.html and, for every
figure, DIR/figures/NAME.png, NAME.svg and NAME.json (the data the figure was drawn from).

    compare_report.py DIR [--cell CELL_ID] [--verdicts FILE] [--eviction FILE] [--quiet]

DIR is what `vtensor compare --out DIR` wrote (docs/compare-output.md); only DIR is read, so a
comparison can be rendered again anywhere. The verdicts are not judged here: their wording is made
once, by vtensor (tools/compare_verdict.hpp), which hands them over in --verdicts FILE (the
"verdicts" object of summary.json's format); without it, summary.json's own "verdicts" are shown. `vtensor report DIR` runs this script with a Python
that has matplotlib; `vtensor compare --report` does the same after the comparison. The eviction
analysis (arms that differ only in their eviction order: tools/compare_eviction.hpp) comes the
same way, in --eviction FILE (summary.json's "eviction" format), else from summary.json; without
one, the report has no eviction section and no eviction figure.

Note [Report figures over several cells]
A comparison multiplies arms by axes (memory budgets, time scales, kernel-factor sets, traces), so
a figure either spans every cell or shows one. The defaults:
  - hit_rate_vs_memory: every cell. Memory is the x axis; one panel per value of the other axes
    (time scale, kernel factors, trace), each with one line per arm and the two bounds.
  - misses_by_cause: every point, one stacked bar per arm in two panels per cell (every cause, and
    every cause but cold, which no policy can avoid); a row of cells per value of the other axes
    when each has the same few memory budgets, else three cells to a row.
  - throughput_preemptions: every point, grouped bars (one group per cell, one bar per arm).
  - eviction_hit_rate_vs_memory (only with eviction groups): every cell. One panel per eviction
    group and value of the other axes, one line per eviction order, LRU (the floor) and the
    ceiling drawn thick, the cell's offline and infinite bounds dashed.
  - memory_over_time, memory_breakdown, ttft_cdf, tpot_cdf, reuse_distance, cached_lifetime:
    one cell, the focus cell: the first cell of summary.json (the first value of every axis, as
    given on the command line), or the one named by --cell. Drawing these for every cell would
    multiply figures without adding a comparison: within a cell the arms are comparable, across
    cells the settings differ. The HTML tables cover every cell.
Only the axes that take more than one value appear in labels.

Note [Report written whole or not at all]
Everything is rendered into a temporary folder inside DIR (DIR/.report-XXXXXX). Only when every
figure and the HTML are written are they moved in: the old DIR/figures (if any) is moved aside,
the new one renamed into place, then report.html renamed over the old one; the temporary folder
is then removed. A failure before that leaves DIR as it was (a process killed mid-render can leave
a DIR/.report-* folder behind, which is safe to delete).

Note [Deterministic figures]
Rendering the same folder twice gives byte-identical files: matplotlib's Agg backend, fixed
figure sizes and DPI, the SVG id salt fixed (svg.hashsalt) and no dates in the metadata. Long
time series are reduced to at most MAX_SERIES_POINTS points: the maximum of each column in each of
that many equal time bins, so peaks survive the reduction.

Exit codes: 0 done, 2 the folder's content is bad (the message names the file), 1 anything else.
Needs matplotlib (Debian's python3-matplotlib); nothing else outside the standard library.
"""
import argparse
import csv
import html
import json
import math
import os
import shutil
import sys
import tempfile

GIB = float(1 << 30)
MAX_SERIES_POINTS = 1000
UNLIMITED_BYTES = (1 << 64) - 1
CAUSES = ["cold", "evicted", "granularity", "preempted", "in_flight", "unpublished", "no_cache"]
BREAKDOWN_PARTS = ["used", "internal", "reserved_idle", "external", "cached", "free"]
PNG_DPI = 110
FIGURE_NAMES = [
    "memory_over_time",
    "memory_breakdown",
    "hit_rate_vs_memory",
    "misses_by_cause",
    "ttft_cdf",
    "tpot_cdf",
    "throughput_preemptions",
    "reuse_distance",
    "cached_lifetime",
]
EVICTION_FIGURE = "eviction_hit_rate_vs_memory"  # drawn only when the comparison has eviction groups


class InputError(Exception):
    """The comparison folder holds something this script cannot read (exit 2)."""


# ---- reading the folder ------------------------------------------------------------------------


def load_summary(directory):
    path = os.path.join(directory, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: not found (is {directory} a `vtensor compare --out` folder?)")
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not readable JSON: {e}")
    if not isinstance(summary, dict) or summary.get("format") != "vtensor-compare" or summary.get("version") != 1:
        raise InputError(f"{path}: not a vtensor-compare version 1 file (\"format\" and \"version\")")
    for key in ("baseline", "arms", "cells", "points"):
        if key not in summary:
            raise InputError(f"{path}: the key \"{key}\" is missing")
    return summary


def need(obj, key, where):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"summary.json: {where}: the key \"{key}\" is missing")
    return obj[key]


def read_timeseries(directory, point):
    """The memory columns of a point's time series, reduced (Note [Deterministic figures])."""
    rel = need(point, "timeseries", f"point {point.get('id')}")
    if not isinstance(rel, str) or not rel:
        raise InputError(f"summary.json: point {point.get('id')}: no time series (\"timeseries\" is not a path)")
    path = os.path.join(directory, rel)
    columns = ["time_s", "physical_bytes", "used_bytes", "cached_bytes"]
    rows = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{path}: the columns {', '.join(missing)} are missing")
            for line, row in enumerate(reader, start=2):
                try:
                    rows.append(tuple(float(row[c]) for c in columns))
                except (TypeError, ValueError):
                    raise InputError(f"{path}:{line}: not a number in {', '.join(columns)}")
    except FileNotFoundError:
        raise InputError(f"{path}: the time series of point {point.get('id')} is missing")
    except OSError as e:
        raise InputError(f"{path}: {e}")
    rows = reduce_rows(rows)
    out = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    for c in columns[1:]:
        out[c] = [int(v) for v in out[c]]
    return out


def reduce_rows(rows):
    """At most MAX_SERIES_POINTS rows: per equal time bin, the bin's last time and each column's max."""
    if len(rows) <= MAX_SERIES_POINTS:
        return rows
    t0, t1 = rows[0][0], rows[-1][0]
    span = (t1 - t0) or 1.0
    bins = {}
    for r in rows:
        b = min(MAX_SERIES_POINTS - 1, int((r[0] - t0) / span * MAX_SERIES_POINTS))
        if b in bins:
            old = bins[b]
            bins[b] = (r[0],) + tuple(max(a, c) for a, c in zip(old[1:], r[1:]))
        else:
            bins[b] = r
    return [bins[b] for b in sorted(bins)]


# ---- the comparison's shape ---------------------------------------------------------------------


class Comparison:
    """summary.json indexed: arms in order, cells in order, the point of each arm at each cell."""

    def __init__(self, directory, summary, focus_cell, verdicts=None, eviction=None):
        self.directory = directory
        self.summary = summary
        # The eviction groups (summary.json's "eviction"); [] when there are none.
        self.eviction = eviction if eviction is not None else summary.get("eviction") or []
        if not isinstance(self.eviction, list):
            raise InputError("eviction: not a list of groups")
        # (arm, cell id) -> verdict text; None when neither --verdicts nor summary.json has them.
        self.verdicts = verdicts if verdicts is not None else summary.get("verdicts")
        if self.verdicts is not None and (not isinstance(self.verdicts, dict) or
                                          not isinstance(self.verdicts.get("items"), list)):
            raise InputError("verdicts: not a \"verdicts\" object with \"items\"")
        self.verdict_text = {} if self.verdicts is None else {
            (need(v, "arm", "verdicts.items[]"), need(v, "cell", "verdicts.items[]")):
            need(v, "text", "verdicts.items[]") for v in self.verdicts["items"]}
        self.baseline = summary["baseline"]
        self.arms = [need(a, "name", "arms[]") for a in summary["arms"]]
        self.arm_info = {a["name"]: a for a in summary["arms"]}
        if self.baseline not in self.arms:
            raise InputError(f"summary.json: the baseline \"{self.baseline}\" is not one of the arms")
        self.cells = summary["cells"]
        if not self.cells:
            raise InputError("summary.json: no cells")
        self.cell_by_id = {need(c, "id", "cells[]"): c for c in self.cells}
        self.points = {}
        for p in summary["points"]:
            arm = need(p, "arm", "points[]")
            cell = need(p, "cell", "points[]")
            if cell not in self.cell_by_id:
                raise InputError(f"summary.json: point {p.get('id')}: unknown cell \"{cell}\"")
            if arm not in self.arm_info:
                raise InputError(f"summary.json: point {p.get('id')}: unknown arm \"{arm}\"")
            for key in ("id", "summary", "hit_rate"):
                need(p, key, f"point {p.get('id')}")
            self.points[(arm, cell)] = p
        for g in self.eviction:
            for key in ("policy", "arms", "floor", "ceiling", "ceiling_kind", "cells"):
                need(g, key, "eviction[]")
            for e in g["cells"]:
                if need(e, "cell", "eviction[].cells[]") not in self.cell_by_id:
                    raise InputError(f"eviction: unknown cell \"{e['cell']}\"")
                for key in ("hit_rate", "gap_closed", "offline_bound", "infinite_bound", "ceiling_hit_rate"):
                    need(e, key, "eviction[].cells[]")
        if focus_cell is None:
            focus_cell = self.cells[0]["id"]
        if focus_cell not in self.cell_by_id:
            raise InputError(f"--cell {focus_cell}: no such cell (cells: {', '.join(self.cell_by_id)})")
        self.focus = self.cell_by_id[focus_cell]
        # The axes that take more than one value: the only ones labels need.
        self.varying = [
            axis for axis in ("memory", "time_scale", "kernel_factors", "trace")
            if len({json.dumps(c.get(axis)) for c in self.cells}) > 1
        ]

    def point(self, arm, cell):
        return self.points.get((arm, cell["id"]))

    def cell_points(self, cell):
        """(arm, point) for every arm with a point at `cell`, in arm order."""
        return [(a, self.point(a, cell)) for a in self.arms if self.point(a, cell) is not None]

    def cell_label(self, cell, axes=None):
        axes = self.varying if axes is None else axes
        parts = [f"{axis_label(a)} {self.axis_value(cell, a)}" for a in axes]
        return ", ".join(parts) if parts else "the only cell"

    def axis_value(self, cell, axis):
        v = cell.get(axis)
        if axis == "trace":  # the trace's file name, not its index
            for t in self.summary.get("traces") or []:
                if isinstance(t, dict) and t.get("index") == v and isinstance(t.get("path"), str):
                    return os.path.basename(t["path"])
        return "?" if v is None else str(v)

    def group_axes(self):
        return [a for a in self.varying if a != "memory"]

    def group_key(self, cell):
        return tuple(json.dumps(cell.get(a)) for a in self.group_axes())

    def groups(self):
        """Cells grouped by every axis but memory, in first-seen order."""
        order, cells = [], {}
        for c in self.cells:
            k = self.group_key(c)
            if k not in cells:
                order.append(k)
                cells[k] = []
            cells[k].append(c)
        return [(cells[k][0], cells[k]) for k in order]


def axis_label(axis):
    return {"memory": "memory", "time_scale": "time scale", "kernel_factors": "kernels", "trace": "trace"}[axis]




def is_unlimited(cell):
    b = cell.get("memory_bytes")
    return cell.get("memory") == "unlimited" or b is None or not isinstance(b, (int, float)) or b >= UNLIMITED_BYTES


def memory_text(cell):
    label = str(cell.get("memory"))
    if is_unlimited(cell):
        return "unlimited"
    gib = cell["memory_bytes"] / GIB
    text = f"{gib:.1f} GiB"
    return text if label.replace(" ", "").lower() == f"{gib:g}gib" else f"{label} ({text})"


def metric(point, path):
    """point["summary"][path...] (or point[path] for top-level keys), or None."""
    obj = point
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj if isinstance(obj, (int, float)) and not isinstance(obj, bool) else None


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---- figures -----------------------------------------------------------------------------------


def setup_matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "svg.hashsalt": "vtensor-compare-report",
        "svg.fonttype": "path",
        "figure.dpi": 100,
        "font.size": 9,
        "axes.titlesize": 9,
        "axes.grid": True,
        "axes.axisbelow": True,
        "grid.alpha": 0.3,
        "legend.fontsize": 8,
        "figure.max_open_warning": 0,
    })
    import matplotlib.pyplot as plt

    return plt


def arm_colors(comparison):
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"]
    return {a: palette[i % len(palette)] for i, a in enumerate(comparison.arms)}


class FigureWriter:
    def __init__(self, plt, out_dir):
        self.plt = plt
        self.out_dir = out_dir
        self.written = []

    def save(self, name, fig, data):
        base = os.path.join(self.out_dir, name)
        fig.savefig(base + ".png", dpi=PNG_DPI, metadata={"Software": None})
        fig.savefig(base + ".svg", metadata={"Date": None})
        self.plt.close(fig)
        with open(base + ".json", "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
        self.written.append(name)


def grid(n, ncols_max=3):
    ncols = min(ncols_max, max(1, n))
    return ncols, (n + ncols - 1) // ncols


def fig_memory_over_time(c, fw, colors):
    cell = c.focus
    pts = c.cell_points(cell)
    fig, axes = fw.plt.subplots(len(pts), 1, figsize=(8, 1.9 * len(pts) + 0.8), sharex=True, sharey=True,
                                squeeze=False)
    series = []
    for ax, (arm, p) in zip(axes[:, 0], pts):
        ts = read_timeseries(c.directory, p)
        series.append({"arm": arm, **ts})
        t = ts["time_s"]
        if not is_unlimited(cell):
            ax.axhline(cell["memory_bytes"] / GIB, color="#d62728", lw=0.8, ls="--", label="budget", zorder=1)
        ax.plot(t, [v / GIB for v in ts["physical_bytes"]], color="#333333", lw=1.0, label="physical")
        ax.plot(t, [v / GIB for v in ts["used_bytes"]], color="#1f77b4", lw=1.0, label="used")
        ax.plot(t, [v / GIB for v in ts["cached_bytes"]], color="#2ca02c", lw=1.0, label="cached")
        ax.set_title(f"{arm}" + (" (baseline)" if arm == c.baseline else ""), loc="left")
        ax.set_ylabel("GiB")
    axes[-1, 0].set_xlabel("simulated time (s)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=4)
    fig.suptitle(f"Memory over time at {c.cell_label(cell)}", x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fw.save("memory_over_time", fig, {
        "cell": cell["id"],
        "reduction": f"at most {MAX_SERIES_POINTS} points per series: per equal time bin, its last time and "
                     "each column's maximum",
        "series": series,
    })


def fig_memory_breakdown(c, fw, colors):
    cell = c.focus
    pts = c.cell_points(cell)
    part_colors = {"used": "#1f77b4", "internal": "#ff7f0e", "reserved_idle": "#ffbb78", "external": "#d62728",
                   "cached": "#2ca02c", "free": "#dddddd"}
    parts = {part: [] for part in BREAKDOWN_PARTS}
    for arm, p in pts:
        mean = metric_obj(p, ["summary", "memory_breakdown", "mean_bytes"])
        for part in BREAKDOWN_PARTS:
            v = mean.get(part) if isinstance(mean, dict) else None
            if not finite(v):
                raise InputError(f"summary.json: point {p['id']}: summary.memory_breakdown.mean_bytes.{part} "
                                 "is missing or not a number")
            parts[part].append(v)
    arms = [a for a, _ in pts]
    fig, ax = fw.plt.subplots(figsize=(max(4.5, 1.1 * len(arms) + 2.5), 4.2))
    bottom = [0.0] * len(arms)
    for part in BREAKDOWN_PARTS:
        vals = [v / GIB for v in parts[part]]
        ax.bar(range(len(arms)), vals, bottom=bottom, color=part_colors[part], label=part.replace("_", " "),
               edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(arms)), [a + ("\n(baseline)" if a == c.baseline else "") for a in arms])
    ax.set_ylabel("mean bytes (GiB, time-weighted)")
    ax.set_title(f"Memory breakdown at {c.cell_label(cell)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fw.save("memory_breakdown", fig, {"cell": cell["id"], "arms": arms, "parts": parts})


def metric_obj(point, path):
    obj = point
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def memory_positions(cells):
    """x position (log2 bytes) for each distinct memory of `cells`; unlimited right of the largest."""
    finite_bytes = sorted({c["memory_bytes"] for c in cells if not is_unlimited(c)})
    top = finite_bytes[-1] if finite_bytes else float(1 << 30)
    pos = {}
    for cell in cells:
        pos[cell["id"]] = math.log2(top) + 1.0 if is_unlimited(cell) else math.log2(cell["memory_bytes"])
    return pos


def fig_hit_rate_vs_memory(c, fw, colors):
    groups = c.groups()
    ncols, nrows = grid(len(groups))
    fig, axes = fw.plt.subplots(nrows, ncols, figsize=(4.6 * ncols + 1.6, 3.6 * nrows), squeeze=False,
                                sharey=True)
    series, bounds = [], {"infinite": [], "offline": []}
    for gi, (first, cells) in enumerate(groups):
        ax = axes[gi // ncols][gi % ncols]
        cells = sorted(cells, key=lambda cell: (is_unlimited(cell), cell.get("memory_bytes") or 0))
        pos = memory_positions(cells)
        group = {a: first.get(a) for a in c.group_axes()}
        for kind, style in (("infinite", dict(color="black", ls="--", marker="_", ms=12)),
                            ("offline", dict(color="#7f7f7f", ls=":", marker="_", ms=12))):
            xs, ys = [], []
            for cell in cells:
                v = metric_obj(cell, ["bounds", f"{kind}_hit_rate"])
                if finite(v):
                    xs.append(pos[cell["id"]])
                    ys.append(v)
                bounds[kind].append({"group": group, "cell": cell["id"], "memory": cell.get("memory"),
                                     "memory_bytes": cell.get("memory_bytes"), "hit_rate": v if finite(v) else None})
            ax.plot(xs, ys, lw=1.4, label=f"{kind} bound", **style)
        for arm in c.arms:
            xs, ys, entry = [], [], {"arm": arm, "group": group, "cells": [], "memory": [], "memory_bytes": [],
                                     "hit_rate": []}
            for cell in cells:
                p = c.point(arm, cell)
                if p is None or not finite(p["hit_rate"]):
                    continue
                xs.append(pos[cell["id"]])
                ys.append(p["hit_rate"])
                entry["cells"].append(cell["id"])
                entry["memory"].append(cell.get("memory"))
                entry["memory_bytes"].append(cell.get("memory_bytes"))
                entry["hit_rate"].append(p["hit_rate"])
            series.append(entry)
            ax.plot(xs, ys, color=colors[arm], marker="o", ms=4, lw=1.2,
                    label=arm + (" (baseline)" if arm == c.baseline else ""))
        ticks = sorted({pos[cell["id"]]: memory_text(cell).replace(" (", "\n(") for cell in cells}.items())
        ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=7)
        ax.set_xlim(min(t for t, _ in ticks) - 0.5, max(t for t, _ in ticks) + 0.5)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("memory budget (log scale)")
        ax.set_title(c.cell_label(first, c.group_axes()) if c.group_axes() else "Hit rate against memory",
                     loc="left")
        if gi % ncols == 0:
            ax.set_ylabel("prefix hit rate")
    for gi in range(len(groups), nrows * ncols):
        axes[gi // ncols][gi % ncols].set_visible(False)
    axes[0][ncols - 1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fw.save("hit_rate_vs_memory", fig, {"series": series, "bounds": bounds})


def tokens_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v / 1e6:g}M" if abs(v) >= 1e6 else f"{v / 1e3:g}k" if abs(v) >= 1e3
                         else f"{v:g}")


def panel_layout(c):
    """(ncols, nrows, {cell id: (row, col)}): a row per value of the axes other than memory when
    every such group has the same few memory budgets, else the cells three to a row."""
    groups = c.groups()
    sizes = {len(cells) for _, cells in groups}
    if len(groups) > 1 and len(sizes) == 1 and max(sizes) <= 6:
        where = {cell["id"]: (gi, mi) for gi, (_, cells) in enumerate(groups) for mi, cell in enumerate(cells)}
        return max(sizes), len(groups), where
    ncols, nrows = grid(len(c.cells))
    return ncols, nrows, {cell["id"]: (i // ncols, i % ncols) for i, cell in enumerate(c.cells)}


def fig_misses_by_cause(c, fw, colors):
    """Per cell two panels: every cause, and every cause but cold (what a policy could have hit)."""
    cause_colors = {"cold": "#7f7f7f", "evicted": "#d62728", "granularity": "#ff7f0e", "preempted": "#9467bd",
                    "in_flight": "#17becf", "unpublished": "#bcbd22", "no_cache": "#8c564b"}
    ncols, nrows, where = panel_layout(c)
    fig, axes = fw.plt.subplots(2 * nrows, ncols, figsize=(max(3.2, 0.8 * len(c.arms) + 1.2) * ncols + 1.6,
                                                           5.6 * nrows), squeeze=False)
    data = {"points": [], "arms": [], "cells": [], "causes": {k: [] for k in CAUSES}, "total": []}
    for ci, cell in enumerate(c.cells):
        pts = c.cell_points(cell)
        first = len(data["points"])
        for arm, p in pts:
            misses = metric_obj(p, ["misses"]) or {}
            data["points"].append(p["id"])
            data["arms"].append(arm)
            data["cells"].append(cell["id"])
            for k in CAUSES:
                v = misses.get(k, 0)
                data["causes"][k].append(v if finite(v) else 0)
            data["total"].append(misses.get("total") if finite(misses.get("total")) else None)
        for row, causes in ((0, CAUSES), (1, CAUSES[1:])):
            ax = axes[2 * where[cell["id"]][0] + row][where[cell["id"]][1]]
            bottom = [0.0] * len(pts)
            for k in causes:
                vals = data["causes"][k][first:]
                ax.bar(range(len(pts)), vals, bottom=bottom, color=cause_colors[k], label=k.replace("_", " "),
                       edgecolor="white", linewidth=0.5)
                bottom = [b + v for b, v in zip(bottom, vals)]
            ax.yaxis.set_major_formatter(tokens_formatter())
            ax.set_xticks(range(len(pts)), [a for a, _ in pts], rotation=30, ha="right", fontsize=7)
            ax.set_title(c.cell_label(cell) + (": every cause" if row == 0 else ": all but cold"), loc="left",
                         fontsize=8)
            if where[cell["id"]][1] == 0:
                ax.set_ylabel("missed prompt tokens")
    used = set(where.values())
    for r in range(nrows):
        for col in range(ncols):
            if (r, col) not in used:
                axes[2 * r][col].set_visible(False)
                axes[2 * r + 1][col].set_visible(False)
    axes[0][ncols - 1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), title="cause")
    fig.suptitle("Why prompt tokens missed the cache, per point", x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / (5.6 * nrows)))
    fw.save("misses_by_cause", fig, data)


def fig_latency_cdf(c, fw, colors, name, key, title):
    cell = c.focus
    fig, ax = fw.plt.subplots(figsize=(6.4, 4.0))
    series, positive = [], []
    for arm, p in c.cell_points(cell):
        lq = metric_obj(p, ["latency_quantiles"]) or {}
        q, ms = lq.get("q"), lq.get(key)
        if not isinstance(q, list) or not isinstance(ms, list) or (ms and len(q) != len(ms)):
            raise InputError(f"summary.json: point {p['id']}: latency_quantiles.q and .{key} are missing or "
                             "of different lengths")
        series.append({"arm": arm, "ms": ms, "q": q})
        # No completed request: no values (drawn as nothing); a value the JSON could not hold: null.
        pairs = [(v, f) for v, f in zip(ms, q) if finite(v) and finite(f)]
        ax.plot([v for v, _ in pairs], [f for _, f in pairs], color=colors[arm], lw=1.3,
                label=arm + (" (baseline)" if arm == c.baseline else "") + ("" if pairs else ": no values"))
        positive += [v for v, _ in pairs if v > 0]
    if positive and max(positive) / min(positive) >= 100:
        ax.set_xscale("log")
    ax.set_xlabel(f"{title} (ms)" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{title} CDF at {c.cell_label(cell)}", loc="left")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fw.save(name, fig, {"cell": cell["id"], "series": series})


def fig_throughput_preemptions(c, fw, colors):
    fig, (ax_t, ax_p) = fw.plt.subplots(2, 1, figsize=(max(6.0, 0.35 * len(c.summary["points"]) + 3.0), 6.0),
                                        sharex=True)
    data = {"points": [], "arms": [], "cells": [], "throughput_tokens_per_s": [], "preemptions": []}
    width = 0.8 / max(1, len(c.arms))
    for ai, arm in enumerate(c.arms):
        xs, tput, pre = [], [], []
        for ci, cell in enumerate(c.cells):
            p = c.point(arm, cell)
            if p is None:
                continue
            t = metric(p, ["summary", "throughput_tokens_per_s"])
            n = metric(p, ["summary", "preemptions"])
            xs.append(ci - 0.4 + width * (ai + 0.5))
            tput.append(t if t is not None else 0)
            pre.append(n if n is not None else 0)
        ax_t.bar(xs, tput, width, color=colors[arm], label=arm + (" (baseline)" if arm == c.baseline else ""))
        ax_p.bar(xs, pre, width, color=colors[arm])
    for cell in c.cells:  # the data in the order of the points of summary.json
        for arm, p in c.cell_points(cell):
            data["points"].append(p["id"])
            data["arms"].append(arm)
            data["cells"].append(cell["id"])
            data["throughput_tokens_per_s"].append(metric(p, ["summary", "throughput_tokens_per_s"]))
            data["preemptions"].append(metric(p, ["summary", "preemptions"]))
    ax_t.set_ylabel("output tokens/s")
    ax_t.set_title("Throughput", loc="left")
    ax_p.set_ylabel("preemptions")
    ax_p.set_title("Preemptions", loc="left")
    ax_p.set_xticks(range(len(c.cells)), [c.cell_label(cell).replace(", ", "\n") for cell in c.cells], fontsize=7)
    ax_t.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fw.save("throughput_preemptions", fig, data)


def fig_histogram(c, fw, colors, name, key, xlabel, title):
    cell = c.focus
    fig, ax = fw.plt.subplots(figsize=(6.4, 4.0))
    series, positive = [], []
    for arm, p in c.cell_points(cell):
        h = metric_obj(p, ["histograms", key]) or {}
        edges, counts = h.get("edges"), h.get("counts")
        if not isinstance(edges, list) or not isinstance(counts, list) or (counts and len(edges) != len(counts) + 1):
            raise InputError(f"summary.json: point {p['id']}: histograms.{key} needs n+1 edges for n counts")
        series.append({"arm": arm, "edges": edges, "counts": counts})
        positive += [e for e in edges if finite(e) and e > 0]
    log = len(positive) >= 2 and max(positive) / min(positive) >= 100
    for s in series:
        if not s["counts"]:
            continue
        edges = list(s["edges"])
        if log and edges[0] <= 0:  # a first bin from 0 starts at half the next edge on a log axis
            edges[0] = edges[1] / 2
        ax.stairs(s["counts"], edges, color=colors[s["arm"]], lw=1.3,
                  label=s["arm"] + (" (baseline)" if s["arm"] == c.baseline else ""))
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel + (" (log scale)" if log else ""))
    ax.set_ylabel("count")
    ax.set_title(f"{title} at {c.cell_label(cell)}", loc="left")
    if any(s["counts"] for s in series):
        ax.legend(loc="upper right")
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fw.save(name, fig, {"cell": cell["id"], "series": series})


def fig_eviction(c, fw, colors):
    """Per eviction group and value of the axes other than memory: hit rate against memory, one line
    per order, the floor (LRU) and the ceiling thick, the cell's bounds dashed."""
    panels = []
    for g in c.eviction:
        by_cell = {e["cell"]: e for e in g["cells"]}
        for first, cells in c.groups():
            cells = [cell for cell in cells if cell["id"] in by_cell]
            if cells:
                panels.append((g, first, sorted(cells, key=lambda cell: (is_unlimited(cell),
                                                                         cell.get("memory_bytes") or 0))))
    ncols, nrows = grid(len(panels), 2)
    fig, axes = fw.plt.subplots(nrows, ncols, figsize=(5.2 * ncols + 2.2, 3.8 * nrows), squeeze=False, sharey=True)
    data = []
    for pi, (g, first, cells) in enumerate(panels):
        ax = axes[pi // ncols][pi % ncols]
        by_cell = {e["cell"]: e for e in g["cells"]}
        pos = memory_positions(cells)
        xs = [pos[cell["id"]] for cell in cells]
        entry = {"policy": g["policy"], "floor": g["floor"], "ceiling": g["ceiling"],
                 "ceiling_kind": g["ceiling_kind"], "axes": {a: first.get(a) for a in c.group_axes()},
                 "cells": [cell["id"] for cell in cells], "memory": [cell.get("memory") for cell in cells],
                 "memory_bytes": [cell.get("memory_bytes") for cell in cells], "series": [],
                 "offline_bound": [by_cell[cell["id"]]["offline_bound"] for cell in cells],
                 "infinite_bound": [by_cell[cell["id"]]["infinite_bound"] for cell in cells]}
        bound_is_ceiling = g["ceiling"] is None
        ax.plot(xs, entry["infinite_bound"], color="black", ls="--", lw=1.2, label="infinite bound")
        ax.plot(xs, entry["offline_bound"], color="#7f7f7f", ls="--", lw=2.6 if bound_is_ceiling else 1.2,
                label="offline bound" + (" (ceiling)" if bound_is_ceiling else ""))
        for a in g["arms"]:
            arm, order = need(a, "arm", "eviction[].arms[]"), need(a, "order", "eviction[].arms[]")
            ys = [by_cell[cell["id"]]["hit_rate"].get(arm) for cell in cells]
            gaps = [by_cell[cell["id"]]["gap_closed"].get(arm) for cell in cells]
            entry["series"].append({"arm": arm, "order": order, "hit_rate": ys, "gap_closed": gaps})
            role = " (lru, floor)" if arm == g["floor"] else " (offline, ceiling)" if arm == g["ceiling"] else \
                f" ({order})"
            thick = arm in (g["floor"], g["ceiling"])
            ax.plot([x for x, y in zip(xs, ys) if finite(y)], [y for y in ys if finite(y)], color=colors[arm],
                    marker="o", ms=5 if thick else 3.5, lw=2.8 if thick else 1.1, zorder=3 if thick else 2,
                    label=arm + role)
        ticks = sorted({pos[cell["id"]]: memory_text(cell).replace(" (", "\n(") for cell in cells}.items())
        ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=7)
        ax.set_xlim(min(t for t, _ in ticks) - 0.5, max(t for t, _ in ticks) + 0.5)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("memory budget (log scale)")
        where = [c.axis_value(first, "trace")] + [f"{axis_label(a)} {c.axis_value(first, a)}"
                                                  for a in c.group_axes() if a != "trace"]
        ax.set_title(f"{g['policy']}: eviction orders, {', '.join(where)}", loc="left")
        if pi % ncols == 0:
            ax.set_ylabel("prefix hit rate")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
        data.append(entry)
    for pi in range(len(panels), nrows * ncols):
        axes[pi // ncols][pi % ncols].set_visible(False)
    fig.tight_layout()
    fw.save(EVICTION_FIGURE, fig, {"panels": data})


def render_figures(c, plt, out_dir):
    fw = FigureWriter(plt, out_dir)
    colors = arm_colors(c)
    fig_memory_over_time(c, fw, colors)
    fig_memory_breakdown(c, fw, colors)
    fig_hit_rate_vs_memory(c, fw, colors)
    fig_misses_by_cause(c, fw, colors)
    fig_latency_cdf(c, fw, colors, "ttft_cdf", "ttft_ms", "TTFT")
    fig_latency_cdf(c, fw, colors, "tpot_cdf", "tpot_ms", "TPOT")
    fig_throughput_preemptions(c, fw, colors)
    fig_histogram(c, fw, colors, "reuse_distance", "reuse_distance_s", "reuse distance of hits (s)",
                  "Reuse distance of hits")
    fig_histogram(c, fw, colors, "cached_lifetime", "cached_lifetime_s", "lifetime of cached blocks (s)",
                  "Lifetime of cached blocks")
    if c.eviction:
        fig_eviction(c, fw, colors)
    assert fw.written == FIGURE_NAMES + ([EVICTION_FIGURE] if c.eviction else []), fw.written
    return fw.written


# ---- HTML --------------------------------------------------------------------------------------

# The arms table: (key, label, where in the point, higher is better, format).
METRICS = [
    ("prefix_hit_rate", "hit rate", ["hit_rate"], True, "fraction"),
    ("throughput_tokens_per_s", "throughput", ["summary", "throughput_tokens_per_s"], True, "tokens_per_s"),
    ("ttft_p50_ms", "TTFT p50", ["summary", "ttft_ms", "p50"], False, "ms"),
    ("ttft_p99_ms", "TTFT p99", ["summary", "ttft_ms", "p99"], False, "ms"),
    ("tpot_p50_ms", "TPOT p50", ["summary", "tpot_ms", "p50"], False, "ms"),
    ("tpot_p99_ms", "TPOT p99", ["summary", "tpot_ms", "p99"], False, "ms"),
    ("preemptions", "preemptions", ["summary", "preemptions"], False, "count"),
    # Neither direction is better: a cache that fills its budget does its job (compare_verdict.hpp).
    ("peak_physical_bytes", "peak physical", ["summary", "peak_physical_bytes"], None, "bytes"),
    ("vmm_critical_time_us", "VMM critical", ["summary", "vmm_critical_time_us"], False, "us"),
]

BOUND_SLACK = 1e-9  # a hit rate equal to the bound up to rounding is at the bound, not over it


def significant3(v):
    """`v` at three significant digits, trailing zeros kept (as significant3 in tools/compare_verdict.cpp)."""
    if not finite(v):
        return str(v)
    if v == 0:
        return "0"
    exponent = math.floor(math.log10(abs(v)))
    decimals = max(0, 2 - exponent)
    rounded = round(v, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exponent:
        decimals = max(0, 1 - exponent)
    return f"{v:.{decimals}f}"


def fmt_value(v, spec):
    """A value in a unit that keeps four digits or fewer (as quantity_text in tools/compare_verdict.cpp)."""
    if v is None:
        return "–"
    a = abs(v)
    if spec == "fraction":
        return f"{v:.4f}"
    if spec == "count":
        return f"{v:.0f}"
    if spec == "tokens_per_s":
        if a >= 9999.5e3:
            return significant3(v / 1e6) + "M tok/s"
        if a >= 9999.5:
            return significant3(v / 1e3) + "k tok/s"
        return significant3(v) + " tok/s"
    if spec in ("ms", "us"):
        ms = v / 1000 if spec == "us" else v
        if ms == 0:
            return "0 ms"
        if abs(ms) < 1:
            return significant3(ms * 1e3) + " us"
        if abs(ms) < 999.5:
            return significant3(ms) + " ms"
        if abs(ms) < 9999.5e3:
            return significant3(ms / 1e3) + " s"
        return significant3(ms / 3.6e6) + " h"
    if spec == "bytes":
        mib = 1024.0 * 1024.0
        if a < 999.5 * mib:
            return significant3(v / mib) + " MiB"
        if a < 9999.5 * mib * 1024:
            return significant3(v / (mib * 1024)) + " GiB"
        return significant3(v / (mib * 1024 * 1024)) + " TiB"
    return spec.format(v)


def esc(s):
    return html.escape(str(s), quote=True)


def ratio(v, ref):
    if v is None or ref is None:
        return None
    if ref == 0:
        return 1.0 if v == 0 else None
    return v / ref


def ratio_text(r):
    """Three significant digits: "1.00x", "0.830x", "12.3x" (as ratio_text in tools/compare_verdict.cpp)."""
    return significant3(r) + "x"


def best_arms(values, higher):
    """The arms with the best value (all of them on a tie); none when fewer than two have a value."""
    known = {a: v for a, v in values.items() if v is not None}
    if len(known) < 2 or higher is None:
        return set()
    target = max(known.values()) if higher else min(known.values())
    return {a for a, v in known.items() if v == target}


def bound_check(p, cell):
    """(True, text) when the point's hit rate is at most its cell's infinite bound, (False, text) when
    not, or when compare found a request that hit more than the bound allows ("within_infinite_bound"),
    (None, text) without a bound."""
    inf = metric_obj(cell, ["bounds", "infinite_hit_rate"])
    hit = p["hit_rate"]
    if not finite(inf) or not finite(hit):
        return None, "no bound to check against"
    if p.get("within_infinite_bound") is False and hit <= inf + BOUND_SLACK:
        return False, (f"NO: {hit:.4f} &le; {inf:.4f} overall, but compare found requests that hit more than the "
                       "infinite cache could: a bug in the arm or the bound")
    if hit <= inf + BOUND_SLACK:
        return True, f"yes: {hit:.4f} &le; {inf:.4f}"
    return False, (f"NO: {hit:.4f} &gt; {inf:.4f}, above the infinite-cache bound, which no policy can beat: "
                   "a bug in the arm or the bound")


CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 75em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; }
pre { background: #f4f4f4; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.88em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; vertical-align: top; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
td.best { font-weight: bold; background: #e8f5e9; }
tr.baseline td { background: #f6f8ff; }
.ratio { color: #666; font-size: 0.9em; }
.loses { color: #b71c1c; } .bad { color: #b71c1c; font-weight: bold; } .ok { color: #1b5e20; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #444; }
"""

FIGURE_CAPTIONS = {
    "hit_rate_vs_memory": "Prefix hit rate against the memory budget, per arm, with the infinite-cache bound "
                          "and the offline (next-use-aware eviction) bound of each budget.",
    "memory_breakdown": "Time-weighted mean memory of each arm at the focus cell, split into used, internal "
                        "fragmentation, reserved but idle, external fragmentation, cached and free.",
    "memory_over_time": "Physical, used and cached bytes over simulated time, one panel per arm, at the focus "
                        "cell (the dashed line is the memory budget).",
    "misses_by_cause": "Why prompt tokens missed the cache, per point: never seen before (cold), evicted before "
                       "reuse, below the sharing granularity, recomputed after preemption, arrived while the "
                       "prefix was being computed (in flight) or not yet published.",
    "ttft_cdf": "Time to first token, cumulative distribution per arm at the focus cell.",
    "tpot_cdf": "Time per output token, cumulative distribution per arm at the focus cell.",
    "throughput_preemptions": "Output-token throughput and preemptions of every point, grouped by cell.",
    "reuse_distance": "Reuse distance of cache hits (time since the block's previous use) per arm at the focus "
                      "cell: a cache that holds blocks this long catches these hits.",
    "cached_lifetime": "How long cached blocks stayed cached per arm at the focus cell.",
    EVICTION_FIGURE: "Hit rate against the memory budget for each eviction order of a policy (arms that differ "
                     "only in --eviction), LRU (the floor) and the ceiling (the group's offline arm, else the "
                     "offline bound) drawn thick, with the cell's offline and infinite bounds dashed.",
}


def render_html(c, figures):
    s = c.summary
    h = []
    add = h.append
    add("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
    add("<title>vtensor compare report</title>\n<style>" + CSS + "</style>\n</head>\n<body>\n")
    add("<h1>vtensor compare report</h1>\n")
    add("<p>Produced by:</p>\n<pre><code>" + esc(s.get("command", "(the command is not recorded)")) +
        "</code></pre>\n")
    add(f"<p>Baseline (reference of every ratio): <b>{esc(c.baseline)}</b>. "
        f"{len(c.arms)} arms &times; {len(c.cells)} cells = {len(s['points'])} points. "
        f"Focus cell of the one-cell figures: <b>{esc(c.cell_label(c.focus))}</b> "
        f"(<code>{esc(c.focus['id'])}</code>). Rendered by <code>tools/compare_report.py</code> from "
        "<code>summary.json</code>, <code>timeseries/</code>; figures in <code>figures/</code> "
        "(PNG, SVG and the data each was drawn from as JSON).</p>\n")

    # Per arm, in one place: the bound check, then per cell where it wins, loses and ties against the
    # baseline, in the words vtensor printed (Note [Verdicts weigh differences] in
    # tools/compare_verdict.hpp).
    add("<h2>Verdicts</h2>\n")
    if c.verdicts is None:
        add("<p>No verdicts: this summary.json has none and none were given; render it with "
            "<code>vtensor report DIR</code>.</p>\n")
    else:
        tie = c.verdicts.get("tie")
        add(f"<p>Each arm against the baseline <b>{esc(c.baseline)}</b>, per cell: where it wins, then where it "
            "loses, each the largest difference first, then the ties: differences within "
            f"{esc(significant3(tie * 100) if finite(tie) else '?')}% (<code>--tie</code>). Higher is better for "
            "the hit rate and the throughput, lower for TTFT, TPOT and preemptions; peak memory is not judged. "
            "Each point is one deterministic replay, so there is no run-to-run spread to weigh.</p>\n")
    add("<ul>\n")
    for arm in c.arms:
        pts = [(cell, c.point(arm, cell)) for cell in c.cells if c.point(arm, cell) is not None]
        checks = [bound_check(p, cell)[0] for cell, p in pts]
        over = [cell for (cell, p), ok in zip(pts, checks) if ok is False]
        if over:
            line = (f"<span class=\"bad\">{esc(arm)}: hit rate NOT within the infinite bound in {len(over)} of "
                    f"{len(pts)} cells ({esc('; '.join(c.cell_label(x) for x in over))}): a bug.</span>")
        elif any(ok is None for ok in checks):
            line = f"{esc(arm)}: hit rate at most the infinite bound where a bound is known."
        else:
            line = (f"<span class=\"ok\">{esc(arm)}: hit rate at most the infinite bound in every cell "
                    f"({len(pts)} of {len(pts)}).</span>")
        if arm == c.baseline:
            line += " The baseline."
        elif c.verdicts is not None:
            texts = [(cell, c.verdict_text.get((arm, cell["id"]))) for cell, _ in pts]
            line += "\n<ul>\n" + "".join(
                f"<li>{esc(c.cell_label(cell))}: {esc(text)}</li>\n" for cell, text in texts if text is not None) + \
                "</ul>\n"
        add(f"<li>{line}</li>\n")
    add("</ul>\n")

    add("<h2>Arms</h2>\n<table>\n<tr><th class=\"l\">arm</th><th class=\"l\">policy</th>"
        "<th class=\"l\">options</th></tr>\n")
    for arm in c.arms:
        info = c.arm_info[arm]
        add(f"<tr><td class=\"l\">{esc(arm)}{' (baseline)' if arm == c.baseline else ''}</td>"
            f"<td class=\"l\">{esc(info.get('policy', ''))}</td><td class=\"l\"><code>"
            f"{esc(info.get('options', ''))}</code></td></tr>\n")
    add("</table>\n")

    add("<h2>Bounds per cell</h2>\n<p>The infinite-cache bound is the hit rate of a cache that never evicts; "
        "the offline bound evicts with knowledge of each block's next use (a heuristic bound: "
        "<code>docs/compare.md</code>). No arm should exceed the infinite bound.</p>\n")
    add("<table>\n<tr><th class=\"l\">cell</th><th>memory</th><th>infinite</th><th>offline</th>"
        "<th class=\"l\">offline model</th></tr>\n")
    for cell in c.cells:
        b = cell.get("bounds") or {}
        add(f"<tr><td class=\"l\"><code>{esc(cell['id'])}</code></td><td>{esc(memory_text(cell))}</td>"
            f"<td>{fmt_value(b.get('infinite_hit_rate') if finite(b.get('infinite_hit_rate')) else None, '{:.4f}')}"
            f"</td><td>{fmt_value(b.get('offline_hit_rate') if finite(b.get('offline_hit_rate')) else None, '{:.4f}')}"
            f"</td><td class=\"l\">{esc(b.get('offline_model', ''))}</td></tr>\n")
    add("</table>\n")

    add("<h2>Results per cell</h2>\n<p>Each value with its ratio to the baseline's in the same cell; the best "
        "value of each judged metric (ties included) is in bold with &#9733;. Hit rate is also given as a fraction of "
        "both bounds.</p>\n")
    for cell in c.cells:
        pts = c.cell_points(cell)
        add(f"<h3>{esc(c.cell_label(cell))}</h3>\n<p><code>{esc(cell['id'])}</code></p>\n<table>\n<tr>"
            "<th class=\"l\">arm</th>")
        for _, label, _, higher, _ in METRICS:
            direction = "not judged" if higher is None else f"{'higher' if higher else 'lower'} is better"
            add(f"<th>{esc(label)}<br><span class=\"ratio\">{direction}</span></th>")
        add("<th>of infinite</th><th>of offline</th><th class=\"l\">hit rate &le; infinite bound?</th></tr>\n")
        base = c.point(c.baseline, cell)
        bests = {key: best_arms({a: metric(p, path) for a, p in pts}, higher) for key, _, path, higher, _ in METRICS}
        for arm, p in pts:
            row_class = ' class="baseline"' if arm == c.baseline else ""
            add(f"<tr{row_class}><td class=\"l\">{esc(arm)}"
                f"{' (baseline)' if arm == c.baseline else ''}</td>")
            for key, _, path, _, spec in METRICS:
                v = metric(p, path)
                r = ratio(v, metric(base, path)) if base is not None else None
                best = arm in bests[key]
                td_class = ' class="best"' if best else ""
                add(f"<td{td_class}>{fmt_value(v, spec)}{' &#9733;' if best else ''}"
                    + (f"<br><span class=\"ratio\">{ratio_text(r)}</span>" if r is not None else "") + "</td>")
            of_inf, of_off = metric(p, ["of_infinite"]), metric(p, ["of_offline"])
            ok, text = bound_check(p, cell)
            add(f"<td>{fmt_value(of_inf, '{:.3f}')}</td><td>{fmt_value(of_off, '{:.3f}')}</td>"
                f"<td class=\"l {'bad' if ok is False else 'ok' if ok else ''}\">{text}</td></tr>\n")
        add("</table>\n")
        lines = [(arm, c.verdict_text.get((arm, cell["id"]))) for arm, _ in pts if arm != c.baseline]
        lines = [(arm, text) for arm, text in lines if text is not None]
        if lines:
            add("<ul>\n" + "".join(f"<li><b>{esc(arm)}</b> against {esc(c.baseline)}: {esc(text)}</li>\n"
                                   for arm, text in lines) + "</ul>\n")
        # Why tokens missed.
        add("<table>\n<tr><th class=\"l\">arm: missed prompt tokens</th>" +
            "".join(f"<th>{esc(k.replace('_', ' '))}</th>" for k in CAUSES) + "<th>total</th>"
            "<th class=\"l\">causes add up?</th></tr>\n")
        for arm, p in pts:
            m = metric_obj(p, ["misses"]) or {}
            vals = [m.get(k, 0) for k in CAUSES]  # a cause a file lacks counted none
            total = m.get("total")
            known = [v for v in vals if finite(v)]
            adds_up = "yes" if finite(total) and len(known) == len(vals) and sum(known) == total else \
                f"<span class=\"bad\">no: the causes sum to {sum(known):.0f}</span>"
            add(f"<tr><td class=\"l\">{esc(arm)}</td>" + "".join(f"<td>{fmt_value(v, '{:.0f}')}</td>" for v in vals) +
                f"<td>{fmt_value(total if finite(total) else None, '{:.0f}')}</td><td class=\"l\">{adds_up}</td></tr>\n")
        add("</table>\n")

    if c.eviction:
        render_eviction_html(c, add)

    add("<h2>Figures</h2>\n<p>Figures over one cell are drawn at the focus cell "
        f"({esc(c.cell_label(c.focus))}); <code>vtensor report DIR --cell ID</code> draws them at another.</p>\n")
    for name in figures:
        add(f"<figure id=\"{name}\"><a href=\"figures/{name}.svg\"><img src=\"figures/{name}.png\" "
            f"alt=\"{esc(name)}\"></a>\n<figcaption><b>{esc(name)}</b>: {esc(FIGURE_CAPTIONS[name])} "
            f"[<a href=\"figures/{name}.png\">PNG</a> | <a href=\"figures/{name}.svg\">SVG</a> | "
            f"<a href=\"figures/{name}.json\">data</a>]</figcaption></figure>\n")

    add("<h2>Settings</h2>\n<table>\n")
    for key, value in (s.get("settings") or {}).items():
        add(f"<tr><th class=\"l\">{esc(key)}</th><td class=\"l\"><code>"
            f"{esc(value if isinstance(value, str) else json.dumps(value, sort_keys=True))}</code></td></tr>\n")
    add("</table>\n<h3>Traces</h3>\n<table>\n<tr><th>index</th><th class=\"l\">path</th><th class=\"l\">format"
        "</th><th>requests</th></tr>\n")
    for t in s.get("traces") or []:
        add(f"<tr><td>{esc(t.get('index', ''))}</td><td class=\"l\"><code>{esc(t.get('path', ''))}</code></td>"
            f"<td class=\"l\">{esc(t.get('format', ''))}</td><td>{esc(t.get('requests', ''))}</td></tr>\n")
    add("</table>\n")
    if "jobs" in s or "wall_seconds" in s:
        add(f"<p>Ran with {esc(s.get('jobs', '?'))} jobs in {esc(s.get('wall_seconds', '?'))} s wall.</p>\n")
    add("</body>\n</html>\n")
    return "".join(h)


def render_eviction_html(c, add):
    """The eviction section: per group, the share of the LRU-to-offline gap each order closes per cell."""
    add("<h2 id=\"eviction\">Eviction orders</h2>\n<p>Arms that run the same policy with the same options but "
        "for their eviction order (<code>--eviction</code>). Per cell, the share of the gap from LRU (the floor) "
        "to the ceiling that each order closes: (hit &minus; LRU's) / (ceiling &minus; LRU's), 0 for LRU, 1 for "
        "the ceiling, below 0 for an order worse than LRU; n/a where the ceiling is not above LRU (nothing to "
        "close). The hit rate is below each share. Figure: <a href=\"#" + EVICTION_FIGURE + "\"><code>" +
        EVICTION_FIGURE + "</code></a>.</p>\n")
    for g in c.eviction:
        cells = [c.cell_by_id[e["cell"]] for e in g["cells"]]
        by_cell = {e["cell"]: e for e in g["cells"]}
        ceiling = (f"the group's offline arm <b>{esc(g['ceiling'])}</b>" if g["ceiling"] is not None
                   else "the cell's offline bound (the group has no offline arm)")
        add(f"<h3>{esc(g['policy'])}</h3>\n<p>Floor: <b>{esc(g['floor'])}</b> (lru); ceiling: {ceiling}.</p>\n"
            "<table>\n<tr><th class=\"l\">arm</th><th class=\"l\">order</th>")
        for cell in cells:
            parts = [c.axis_value(cell, "trace"), memory_text(cell)] + [
                f"{axis_label(a)} {c.axis_value(cell, a)}" for a in c.group_axes() if a != "trace"]
            add(f"<th>{esc(', '.join(parts))}</th>")
        add("</tr>\n")
        for a in g["arms"]:
            arm = a["arm"]
            emphasis = ' class="baseline"' if arm in (g["floor"], g["ceiling"]) else ""
            add(f"<tr{emphasis}><td class=\"l\">{esc(arm)}</td><td class=\"l\">{esc(a['order'])}</td>")
            for cell in cells:
                e = by_cell[cell["id"]]
                gap, hit = e["gap_closed"].get(arm), e["hit_rate"].get(arm)
                add(f"<td>{'n/a' if not finite(gap) else f'{gap:.3f}'}<br><span class=\"ratio\">"
                    f"{fmt_value(hit if finite(hit) else None, 'fraction')}</span></td>")
            add("</tr>\n")
        for key, label in (("offline_bound", "offline bound"), ("infinite_bound", "infinite bound")):
            add(f"<tr><td class=\"l\">oracle</td><td class=\"l\">{label}</td>" + "".join(
                f"<td><span class=\"ratio\">{fmt_value(by_cell[cell['id']][key], 'fraction')}</span></td>"
                for cell in cells) + "</tr>\n")
        add("</table>\n")


# ---- writing -----------------------------------------------------------------------------------


def install(tmp, directory):
    """Moves tmp/figures and tmp/report.html into DIR (Note [Report written whole or not at all])."""
    figures, old = os.path.join(directory, "figures"), os.path.join(tmp, "old-figures")
    had_old = os.path.lexists(figures)
    if had_old:
        os.rename(figures, old)
    try:
        os.rename(os.path.join(tmp, "figures"), figures)
    except OSError:
        if had_old:
            os.rename(old, figures)
        raise
    os.replace(os.path.join(tmp, "report.html"), os.path.join(directory, "report.html"))


def load_optional_json(option, path):
    """The JSON file `path` handed in by `option`, or None when the option was not given."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{option} {path}: not readable JSON: {e}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the folder `vtensor compare --out DIR` wrote")
    ap.add_argument("--cell", help="focus cell of the one-cell figures (a cell id of summary.json)")
    ap.add_argument("--verdicts", help="the verdicts to show, judged by vtensor (summary.json's \"verdicts\" format); "
                    "default: summary.json's own")
    ap.add_argument("--eviction", help="the eviction groups to show, computed by vtensor (summary.json's \"eviction\" "
                    "format); default: summary.json's own")
    ap.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = ap.parse_args(argv)
    directory = args.dir
    try:
        verdicts = load_optional_json("--verdicts", args.verdicts)
        eviction = load_optional_json("--eviction", args.eviction)
        comparison = Comparison(directory, load_summary(directory), args.cell, verdicts, eviction)
        plt = setup_matplotlib()
        tmp = tempfile.mkdtemp(prefix=".report-", dir=directory)
        try:
            os.mkdir(os.path.join(tmp, "figures"))
            figures = render_figures(comparison, plt, os.path.join(tmp, "figures"))
            with open(os.path.join(tmp, "report.html"), "w", encoding="utf-8") as f:
                f.write(render_html(comparison, figures))
            install(tmp, directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except InputError as e:
        print(f"compare_report: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        print(f"compare_report: {directory}/summary.json: unexpected content ({type(e).__name__}: {e}); the "
              "format is docs/compare-output.md", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"compare_report: {e} (install Debian's python3-matplotlib: tools/install-deps.sh)", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"compare_report: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(os.path.join(directory, "report.html"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
