"""Figure for `bigarray`: GB/s of every strategy against the machine's limit."""

from __future__ import annotations

from pathlib import Path

from . import plt, save


def strategies_chart(summary: dict, host: str, directory: Path) -> list[Path]:
    inits = [init for init in ("zero", "value") if any(r["init"] == init for r in summary["rows"])]
    if not inits:
        return []
    height = max(4.0, 0.28 * max(sum(1 for r in summary["rows"] if r["init"] == i) for i in inits) + 1.5)
    figure, axes = plt.subplots(1, len(inits), figsize=(7.5 * len(inits), height), squeeze=False)
    for axis, init in zip(axes[0], inits):
        rows = [r for r in summary["rows"] if r["init"] == init][::-1]  # fastest on top
        colours = ["#c44e52" if r["strategy"].startswith("make_big_array") else "#4c72b0" for r in rows]
        axis.barh([r["strategy"] for r in rows], [r["gb_per_s"] for r in rows], color=colours)
        limit = (summary.get("limit_by_init") or {}).get(init) or summary.get("limit_gb_per_s")
        if limit:
            axis.axvline(limit, color="black", linestyle="--",
                         label=f"limit: writing {'zeros' if init == 'zero' else 'the value'} into faulted memory, "
                               f"{limit:.1f} GB/s")
            axis.legend(fontsize=8, loc="lower right")
        axis.set_xlabel("GB/s to allocate and initialize (higher is better)")
        axis.set_title(f"{init} initialization")
        axis.tick_params(axis="y", labelsize=7)
        axis.grid(axis="x", alpha=0.3)
    size_gib = summary["rows"][0]["size_bytes"] / (1 << 30)
    figure.suptitle(f"Allocating and initializing {size_gib:g} GiB — {host}")
    figure.tight_layout()
    return save(figure, directory, "bigarray-strategies")
