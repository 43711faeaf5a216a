"""Figures for `scaling`, in the manner of the 2011 and 2019 charts: total time
against the number of allocations, per case and all together, and the cost
of one call against the number outstanding."""

from __future__ import annotations

import math
from pathlib import Path

from . import plt, save


def _colour(index: int):
    return plt.get_cmap("tab20")(index % 20)


def totals_grid(cases: list[dict], host: str, directory: Path) -> list[Path]:
    """One small chart per case: allocation and free totals against n."""
    if not cases:
        return []
    columns = min(4, len(cases))
    rows = math.ceil(len(cases) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.6 * rows), squeeze=False)
    for axis, case in zip(axes.flat, cases):
        axis.plot(case["counts"], case["alloc_total_s"], "o-", markersize=2, label="allocate n")
        axis.plot(case["counts"][: len(case["free_total_s"])], case["free_total_s"], "s-", markersize=2, label="free n")
        axis.set_title(f"{case['label']}\n{case['complexity']}", fontsize=8)
        axis.tick_params(labelsize=7)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(cases):]:
        axis.axis("off")
    for axis in axes[-1]:
        axis.set_xlabel("blocks outstanding (n)", fontsize=8)
    for axis in axes[:, 0]:
        axis.set_ylabel("total time (s)", fontsize=8)
    axes[0][0].legend(fontsize=7)
    figure.suptitle(f"Time to allocate and to free n blocks, per case — {host}")
    figure.tight_layout()
    return save(figure, directory, "scaling-cases")


def totals_together(cases: list[dict], host: str, directory: Path) -> list[Path]:
    if not cases:
        return []
    figure, axis = plt.subplots(figsize=(9, 5.5))
    for index, case in enumerate(cases):
        axis.plot(case["counts"], case["alloc_total_s"], "-", color=_colour(index), label=case["label"], linewidth=1.2)
    axis.set_xlabel("blocks outstanding (n)")
    axis.set_ylabel("time to allocate n blocks (s)")
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.set_title(f"Allocation time against n, all cases — {host}")
    return save(figure, directory, "scaling-totals")


def marginal(cases: list[dict], host: str, directory: Path) -> list[Path]:
    if not cases:
        return []
    figure, axis = plt.subplots(figsize=(9, 5.5))
    for index, case in enumerate(cases):
        axis.plot(case["marginal_n"], [ns / 1000 for ns in case["marginal_ns"]], "-", color=_colour(index),
                  label=case["label"], linewidth=1)
    axis.set_xlabel("blocks already outstanding (n)")
    axis.set_ylabel("cost of the next allocation (µs per call)")
    values = [ns for case in cases for ns in case["marginal_ns"] if ns > 0]
    if values and max(values) / min(values) > 30:
        axis.set_yscale("log")
    else:
        axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.set_title(f"Marginal cost of one allocation — {host}")
    return save(figure, directory, "scaling-marginal")
