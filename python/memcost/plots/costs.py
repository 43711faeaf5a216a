"""Figures for `costs`: the per-MB parts as stacked bars, and fault cost against threads."""

from __future__ import annotations

from pathlib import Path

from ..analysis.costs import MB, ROUTE_ORDER
from ..units import short_size
from . import plt, save

PARTS = [("alloc per MB", lambda r: r["alloc_us"] / (r["size_bytes"] / MB), "#4c72b0"),
         ("first-touch faults", lambda r: max(r["fault_us_per_mb"], 0.0), "#dd8452"),
         ("free after touch", lambda r: r["free_after_touch_us_per_mb"], "#55a868"),
         ("charged elsewhere", lambda r: r["elsewhere_us_per_mb"] or 0.0, "#c44e52")]


def parts_chart(summary: dict, host: str, directory: Path) -> list[Path]:
    rows = summary["rows"]
    routes = [r for r in ROUTE_ORDER if any(row["route"] == r for row in rows)]
    if not routes:
        return []
    figure, axes = plt.subplots(1, len(routes), figsize=(4.5 * len(routes), 4.8), sharey=True, squeeze=False)
    for axis, route in zip(axes[0], routes):
        route_rows = [r for r in rows if r["route"] == route]
        labels = [f"{r['page']}\n{short_size(r['size_bytes'])}" for r in route_rows]
        bottom = [0.0] * len(route_rows)
        for name, value, colour in PARTS:
            heights = [value(r) for r in route_rows]
            axis.bar(labels, heights, bottom=bottom, label=name, color=colour)
            bottom = [b + h for b, h in zip(bottom, heights)]
        axis.set_title(f"route: {route}")
        axis.tick_params(axis="x", labelsize=8)
        axis.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("µs per MB (median)")
    axes[0][-1].legend(loc="upper right", fontsize=8)
    figure.suptitle(f"Hidden cost of a large allocation, per MB — {host}")
    return save(figure, directory, "costs-parts")


def threads_chart(summary: dict, host: str, directory: Path) -> list[Path]:
    threads = summary["threads"]
    if not threads:
        return []
    figure, axis = plt.subplots(figsize=(5.5, 4))
    counts = [t["threads"] for t in threads]
    axis.plot(counts, [t["first_touch_us_per_mb"] for t in threads], "o-", label="first touch (measured)")
    single = threads[0]["first_touch_us_per_mb"]
    axis.plot(counts, [single / n for n in counts], "--", color="grey", label="perfect scaling")
    axis.plot(counts, [t["second_touch_us_per_mb"] for t in threads], "s-", label="second touch (no faults)")
    axis.set_xlabel("threads writing disjoint parts of one buffer")
    axis.set_ylabel("wall time, µs per MB (median)")
    axis.set_xticks(counts)
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title(f"First touch with threads, {short_size(threads[0]['size_bytes'])} — {host}")
    return save(figure, directory, "costs-threads")
