"""Overlaid figures for `compare`: every run on shared axes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..units import short_size
from . import plt, save


def costs_bars(comparison: dict, names: list[str], directory: Path) -> list[Path]:
    rows = [r for r in comparison["rows"] if r["route"] == "os"]
    if not rows:
        return []
    figure, axis = plt.subplots(figsize=(max(6, 1.0 * len(rows) * len(names) / 2 + 3), 4.5))
    width = 0.8 / len(names)
    positions = np.arange(len(rows))
    for index, name in enumerate(names):
        axis.bar(positions + index * width, [r["medians"][index] for r in rows], width, label=name)
    axis.set_xticks(positions + width * (len(names) - 1) / 2)
    axis.set_xticklabels([f"{r['page']}\n{short_size(r['size_bytes'])}" for r in rows], fontsize=8)
    axis.set_ylabel("first-touch fault cost, µs per MB (median)")
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title("Fault cost per MB, os route — runs side by side")
    return save(figure, directory, "compare-costs")


def scaling_curves(runs: list[dict], names: list[str], directory: Path) -> list[Path]:
    figure, axis = plt.subplots(figsize=(9, 5.5))
    styles = ["-", "--", ":", "-."]
    for index, (run, name) in enumerate(zip(runs, names)):
        for case_index, case in enumerate(run["scaling"]["summary"]["cases"]):
            axis.plot(case["counts"], case["alloc_total_s"], styles[index % len(styles)],
                      color=plt.get_cmap("tab20")(case_index % 20), linewidth=1,
                      label=f"{name}: {case['label']}" if case_index < 6 else None)
    axis.set_xlabel("blocks outstanding (n)")
    axis.set_ylabel("time to allocate n blocks (s)")
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.set_title("Scaling curves of every run (line style = run)")
    return save(figure, directory, "compare-scaling")
