"""Folded stacks of a trace (flamegraph.pl, speedscope, inferno): one line per allocation stack
and touching site, root first, with its number of page faults."""

from pathlib import Path

from ..analysis.trace import frames as trace_frames
from ..analysis.trace import sites as trace_sites
from ..results import write_atomically


def write(document: dict, path: Path) -> None:
    write_atomically(Path(path), "\n".join(trace_sites.folded(document["samples"], trace_frames.frames_of(document.get("params", {}))))
                     + "\n")
