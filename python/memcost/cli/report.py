"""`memcost report`: report.html and summary.md for a results directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from .. import exit_codes
from ..console import console
from ..report import html, load_run, markdown
from ..results import LATEST
from .base import Command


def write_report(directory: Path) -> tuple[Path, Path]:
    documents = load_run(directory)
    return html.write(documents, directory), markdown.write(documents, directory)


class ReportCommand(Command):
    """Write report.html (self-contained, images embedded) and summary.md for a results directory.

    RESULTS_DIR defaults to the newest run (results/latest).
    """

    name = "report"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("directory", nargs="?", type=Path, metavar="RESULTS_DIR",
                            help="a run directory (default: RESULTS/latest)")

    def run(self, args: argparse.Namespace) -> int:
        directory: Optional[Path] = args.directory or args.results_dir / LATEST
        page, summary = write_report(directory)
        console.print(f"Report: {page}\nMarkdown: {summary}", markup=False)
        return exit_codes.OK
