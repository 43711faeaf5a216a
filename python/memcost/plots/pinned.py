"""Figure for `pinned`: the seconds until the memory is pinned, phase by phase, for every way, with
the copy to the GPU beside each."""

from __future__ import annotations

from pathlib import Path

from . import plt, save

PHASES = [("allocate_s", "allocate", "#8c8c8c"), ("fault_s", "fault", "#4c72b0"), ("register_s", "register", "#c44e52")]


def ways_chart(summary: dict, host: str, directory: Path) -> list[Path]:
    rows = [r for r in summary["rows"] if r.get("rank")][::-1]  # fastest on top
    if not rows:
        return []
    figure, (phases, copies) = plt.subplots(1, 2, figsize=(13, max(3.5, 0.4 * len(rows) + 1.5)), sharey=True,
                                            gridspec_kw={"width_ratios": [3, 1]})
    names = [r["way"] for r in rows]
    left = [0.0] * len(rows)
    for key, label, colour in PHASES:
        widths = [r[key] or 0.0 for r in rows]
        phases.barh(names, widths, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, widths)]
    phases.set_xlabel("seconds until pinned (medians; lower is better)")
    phases.legend(fontsize=8, loc="upper right")
    phases.tick_params(axis="y", labelsize=7)
    phases.grid(axis="x", alpha=0.3)
    copies.barh(names, [r["copy_gb_per_s"] or 0.0 for r in rows],
                color=["#4c72b0" if r.get("copies_pinned", True) else "#dd8452" for r in rows])
    if summary.get("ordinary_copy_gb_per_s"):
        copies.axvline(summary["ordinary_copy_gb_per_s"], color="black", linestyle="--",
                       label=f"ordinary memory: {summary['ordinary_copy_gb_per_s']:.1f} GB/s")
        copies.legend(fontsize=8, loc="lower right")
    copies.set_xlabel("copy to the GPU, GB/s")
    copies.grid(axis="x", alpha=0.3)
    size_gib = rows[0]["size_bytes"] / (1 << 30)
    figure.suptitle(f"Pinning {size_gib:g} GiB for {summary.get('device') or 'the GPU'} — {host}")
    figure.tight_layout()
    return save(figure, directory, "pinned-ways")
