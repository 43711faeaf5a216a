"""`memcost scaling`: does allocation cost grow with the number of outstanding allocations?
(declared in experiments/scaling.py; this module adds the raw-sweep CSV)."""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from .. import exit_codes, export
from ..console import console
from ..report import terminal
from ..results import write_atomically
from .. import arguments
from .base import ExperimentCommand


def write_csv(document: dict, path: Path) -> None:
    from ..analysis import scaling as analysis
    rows = analysis.csv_rows(document["samples"])
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=["count", *analysis.CASE_KEYS, "rep", "alloc_s", "free_s", "mappings"])
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue())



class ScalingCommand(ExperimentCommand):
    """Measure how allocation cost grows with the number of outstanding allocations.

    Sweeps up to 64,000 outstanding blocks of 64 KB, 264,752 bytes and 1 MB,
    placed by default, bottom-up by address hints and under the legacy
    bottom-up layout, as mergeable or distinct mappings, reserved or committed;
    fits the cost of one call against the count and says whether the total is
    O(n), O(n log n) or O(n²). See docs/scaling.md.
    """

    experiment_name = "scaling"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        super().prepare_parser(parser)
        parser.add_argument("--csv", type=arguments.output_file, metavar="FILE",
                            help="also write the raw sweep (count, case, alloc and free seconds) to FILE")

    def run(self, args: argparse.Namespace) -> int:
        document = self.measure(args)
        if args.csv:
            write_csv(document, args.csv)
        terminal.render(self.experiment, document)
        export.export_requested(document, args)
        if args.csv:
            console.print(f"Raw sweep: {args.csv}", markup=False)
        return exit_codes.OK
