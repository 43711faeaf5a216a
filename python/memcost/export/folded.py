"""Folded stacks of a trace (flamegraph.pl, speedscope, inferno): one line per allocation stack
and touching site, root first, with its number of page faults."""

from pathlib import Path

from ..analysis import trace as analysis
from ..results import write_atomically


def write(document: dict, path: Path) -> None:
    write_atomically(Path(path), "\n".join(analysis.folded(document["samples"], analysis.frames_of(document.get("params", {}))))
                     + "\n")
