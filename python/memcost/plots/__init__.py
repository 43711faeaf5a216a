"""matplotlib figures (Agg backend: no display needed), one module per experiment."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def save(figure, directory: Path, stem: str) -> list[Path]:
    """PNG (for the report) and SVG (for print) side by side."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix in ("png", "svg"):
        path = directory / f"{stem}.{suffix}"
        figure.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    plt.close(figure)
    return paths


def draw(document: dict, directory: Path) -> list[Path]:
    """Every figure of a results document, drawn from its summary."""
    from . import bigarray, costs, scaling  # the experiment modules import this one

    summary, host = document["summary"], document["context"].get("host", "")
    if document["experiment"] == "costs":
        return costs.parts_chart(summary, host, directory) + costs.threads_chart(summary, host, directory)
    if document["experiment"] == "scaling":
        return (scaling.totals_grid(summary["cases"], host, directory)
                + scaling.totals_together(summary["cases"], host, directory)
                + scaling.marginal(summary["cases"], host, directory))
    if document["experiment"] == "bigarray":
        return bigarray.strategies_chart(summary, host, directory)
    return []
