"""Reports over a results directory: one module per output format."""

from __future__ import annotations

import importlib
from pathlib import Path

from ..results import ResultsError, load_document

from ..experiments import REGISTRY

EXPERIMENT_ORDER = list(REGISTRY)


def reading(experiment):
    """What renders an experiment's results (tables, notes, interpret, drawings): its declaration,
    or the module of this package it names as its prose."""
    if experiment is not None and experiment.prose:
        return importlib.import_module(f"{__name__}.{experiment.prose}")
    return experiment


def title_of(name: str) -> str:
    """A report section's title: the experiment's own."""
    return REGISTRY[name].title if name in REGISTRY else name


def load_run(directory: Path) -> dict[str, dict]:
    """Every results document in a run directory, by experiment, in the suite's order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ResultsError(f"{directory}: no such results directory (run `memcost run` first, or name one)")
    documents = {}
    for path in sorted(directory.glob("*.json")):
        document = load_document(path)
        documents[document["experiment"]] = document
    if not documents:
        raise ResultsError(f"{directory}: holds no results documents")
    return {name: documents[name] for name in sorted(documents, key=lambda n: (EXPERIMENT_ORDER.index(n)
                                                                               if n in EXPERIMENT_ORDER else 99, n))}
