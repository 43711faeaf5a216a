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
    """Every figure of a results document, drawn from its summary by its experiment."""
    from ..experiments import REGISTRY
    experiment = REGISTRY.get(document["experiment"])
    if experiment is None:
        return []
    from ..results import machine_label
    return experiment.figures(document["summary"], machine_label(document["context"]), directory)
