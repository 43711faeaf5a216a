"""The experiment registry. Everything the Python side knows about one experiment is declared in
its module here — its options (the flags, the probe's arguments and the recorded params all come
from one list), how it measures, its figures, its tables as data, the lines under them, its plain
reading, and what `compare` compares — and `run`, `report`, `compare` and the plots iterate this
registry instead of naming experiments. Adding one: its module here, its probe file
(src/probe/experiments/), its docs page; see docs/architecture.md."""

from __future__ import annotations

from typing import Optional

from . import bigarray, costs, info, pinned, scaling, trace
from .base import Comparison, Experiment, Option, Table

# In the suite's and the reports' order: the machine first.
REGISTRY: dict[str, Experiment] = {e.name: e for e in (info.EXPERIMENT, costs.EXPERIMENT, scaling.EXPERIMENT,
                                                       bigarray.EXPERIMENT, pinned.EXPERIMENT,
                                                       trace.EXPERIMENT)}


def experiment_of(document: dict) -> Optional[Experiment]:
    return REGISTRY.get(document["experiment"])


__all__ = ["REGISTRY", "Comparison", "Experiment", "Option", "Table", "experiment_of"]
