"""The experiment registry. Everything the Python side knows about one experiment is declared in
its module here — its options (the flags, the probe's arguments and the recorded params all come
from one list), how it measures, its figures, its tables as data, the lines under them, its plain
reading, and what `compare` compares — and `run`, `report`, `compare` and the plots iterate this
registry instead of naming experiments. Adding one: its module here, its probe file
(src/probe/experiments/), its docs page; see docs/architecture.md."""

from __future__ import annotations

import importlib
from typing import Optional

from .base import Comparison, Experiment, Option, Table

# In the suite's and the reports' order: the machine first.
_ORDER = ("info", "costs", "scaling", "bigarray", "pinned", "trace")
_registry: dict[str, Experiment] = {}


def __getattr__(name: str):
    """REGISTRY is built on first use: a command that needs one experiment (`memcost trace`)
    imports that one's module alone, not every experiment's."""
    if name != "REGISTRY":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _registry:
        for module in _ORDER:
            experiment = importlib.import_module(f"{__name__}.{module}").EXPERIMENT
            _registry[experiment.name] = experiment
    return _registry


def experiment_of(document: dict) -> Optional[Experiment]:
    return __getattr__("REGISTRY").get(document["experiment"])


__all__ = ["REGISTRY", "Comparison", "Experiment", "Option", "Table", "experiment_of"]
