"""Folded stacks of a trace (flamegraph.pl, speedscope, inferno): one line per allocation stack
and touching site, root first, with its number of page faults."""

from pathlib import Path

from ..analysis.trace import frames as trace_frames
from ..analysis.trace import records as trace_records
from ..analysis.trace import sites as trace_sites
from ..results import write_atomically


def write(document: dict, path: Path) -> None:
    lines = trace_sites.folded(trace_records.read(document["samples"]), trace_frames.frames_of(document.get("params", {})))
    write_atomically(Path(path), "\n".join(lines) + "\n")
