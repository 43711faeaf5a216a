"""`memcost report`: report.html and summary.md for a results directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from .. import exit_codes, tracing
from ..console import console
from ..errors import MemcostError
from ..report import load_run
from ..results import LATEST, reading
from .base import Command


def write_report(directory: Path) -> tuple[Path, Path]:
    from ..report import html, markdown  # matplotlib loads only when a report is drawn
    documents = load_run(directory)
    with reading(str(directory)):
        return html.write(documents, directory), markdown.write(documents, directory)


class ReportCommand(Command):
    """Write report.html (self-contained, images embedded) and summary.md for a results directory.

    RESULTS_DIR defaults to the newest run (results/latest).
    """

    name = "report"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("directory", nargs="?", type=Path, metavar="RESULTS_DIR",
                            help="a run directory (default: RESULTS/latest)")
        parser.add_argument("--reaggregate", action="store_true",
                            help="first attribute a trace again from the raw records it kept (`memcost trace --raw`)")

    def run(self, args: argparse.Namespace) -> int:
        directory: Optional[Path] = args.directory or args.results_dir / LATEST
        if args.reaggregate:
            if not (directory / "trace.json").is_file() or not tracing.reaggregate(directory / "trace.json"):
                raise MemcostError(f"{directory} holds no trace with raw records: trace with `memcost trace --raw` to keep them",
                                   exit_codes.FAILURE)
            console.print(f"Re-aggregated: {directory / 'trace.json'}", markup=False)
        page, summary = write_report(directory)
        console.print(f"Report: {page}\nMarkdown: {summary}", markup=False)
        return exit_codes.OK
