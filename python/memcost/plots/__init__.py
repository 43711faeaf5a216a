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
