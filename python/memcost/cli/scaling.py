"""`memcost scaling`: does allocation cost grow with the number of outstanding allocations?"""

from __future__ import annotations

import argparse
import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rich.table import Table

from .. import exit_codes, export
from ..console import console
from ..errors import MemcostError
from ..probe import ProbeFailed
from ..results import RunDirectory, make_document, write_atomically
from ..runner import run_with_progress
from ..units import format_bytes
from . import arguments
from .base import Command, print_closing

SHAPES = ["mergeable", "distinct"]
COMMITS = ["reserve", "commit"]
PLACEMENTS = ["default", "top-down", "bottom-up", "legacy"]


def count_list(text: str) -> list[int]:
    """Comma-separated whole numbers of blocks, each at least 1."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items or not all(item.isdigit() and int(item) > 0 for item in items):
        raise argparse.ArgumentTypeError(f"'{text}': counts are whole numbers of blocks, at least 1, e.g. 1000,2000,4000")
    return sorted({int(item) for item in items})


@dataclass
class ScalingOptions:
    counts: Optional[list[int]] = None  # None: 4000, 8000, ..., 64000
    block_sizes: list[int] = field(default_factory=lambda: [64 << 10, 264752, 1 << 20])
    placements: Optional[list[str]] = None  # None: this platform's default set, plus legacy where it can be set
    shapes: list[str] = field(default_factory=lambda: list(SHAPES))
    commits: list[str] = field(default_factory=lambda: list(COMMITS))
    reps: int = 2
    budget: Optional[int] = None

    @classmethod
    def quick(cls) -> "ScalingOptions":
        """A short sweep for `memcost run`: up to 32,000 blocks of 64 KB and 1 MB, one repetition."""
        return cls(counts=[2000 * step for step in range(1, 17)], block_sizes=[64 << 10, 1 << 20], reps=1)

    def probe_arguments(self, placements: list[str]) -> list[str]:
        args = ["--block-sizes", ",".join(str(s) for s in self.block_sizes), "--placements", ",".join(placements),
                "--shapes", ",".join(self.shapes), "--commits", ",".join(self.commits), "--reps", str(self.reps)]
        if self.counts:
            args += ["--counts", ",".join(str(c) for c in self.counts)]
        if self.budget:
            args += ["--budget", str(self.budget)]
        return args


def _runs(options: ScalingOptions) -> list[tuple[list[str], list[str]]]:
    """(global probe flags, placements) per probe process: the legacy layout needs a probe of its own."""
    placements = options.placements or ["default", "bottom-up", "legacy"]
    ordinary = [p for p in placements if p != "legacy"]
    runs = [([], ordinary)] if ordinary else []
    if "legacy" in placements:
        runs.append((["--legacy-layout"], ["legacy"]))
    return runs


def measure(options: ScalingOptions, directory: RunDirectory, title: str = "scaling") -> dict:
    from ..analysis import scaling as analysis  # numpy, scipy and matplotlib load only when measuring
    from ..plots import scaling as plots
    samples, warnings, context = [], [], None
    for global_flags, placements in _runs(options):
        try:
            run = run_with_progress("scaling", options.probe_arguments(placements), f"{title} ({', '.join(placements)})",
                                    global_arguments=global_flags)
        except ProbeFailed as error:
            # The legacy layout is an extra; the rest of the sweep stands without it.
            if global_flags and error.exit_code == exit_codes.UNSUPPORTED and not options.placements:
                warnings.append({"code": "legacy_layout_unavailable", "message": error.message})
                continue
            raise
        samples += run.samples
        warnings += [w for w in run.warnings if w not in warnings]
        context = context or run.context
    # A case whose first block already failed measured nothing; its warning says why.
    measured = [sample for sample in samples if sample["metrics"].get("counts")]
    if not measured:
        reason = warnings[0]["message"] if warnings else "the probe returned no sweep"
        raise MemcostError(f"no case could allocate even one block ({reason}): use smaller --block-sizes",
                           exit_codes.NOT_ENOUGH_MEMORY)
    summary = analysis.summarize(measured)
    host = context.get("host", "")
    folder = directory.directory_for(host)
    figures = (plots.totals_grid(summary["cases"], host, folder) + plots.totals_together(summary["cases"], host, folder)
               + plots.marginal(summary["cases"], host, folder))
    summary["figures"] = [path.name for path in figures]
    params = {"counts": options.counts, "block_sizes": options.block_sizes, "placements": options.placements,
              "shapes": options.shapes, "commits": options.commits, "reps": options.reps, "budget": options.budget}
    document = make_document("scaling", context, params, samples, summary, warnings)
    document["path"] = str(directory.write(document))
    return document


def write_csv(document: dict, path: Path) -> None:
    from ..analysis import scaling as analysis
    rows = analysis.csv_rows(document["samples"])
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=["count", *analysis.CASE_KEYS, "rep", "alloc_s", "free_s", "mappings"])
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue())


def render(document: dict) -> None:
    table = Table(title=f"Scaling up to {max((c['max_count'] for c in document['summary']['cases']), default=0):,} "
                        "outstanding blocks", title_justify="left")
    for heading in ("block", "placement", "shape", "commit", "alloc s", "free s", "µs/call at max", "k [95 %]",
                    "mappings", "verdict"):
        table.add_column(heading, justify="right" if heading in ("alloc s", "free s", "µs/call at max", "mappings") else "left")
    for case in document["summary"]["cases"]:
        k = (f"{case['exponent_k']:.2f} [{case['exponent_ci'][0]:.2f}, {case['exponent_ci'][1]:.2f}]"
             if case["exponent_k"] is not None else "—")
        table.add_row(format_bytes(case["block_size_bytes"]), case["placement"], case["shape"], case["commit"],
                      f"{case['alloc_total_s_at_max']:.3f}", f"{case['free_total_s_at_max']:.3f}",
                      f"{case['marginal_ns_at_max'] / 1000:.2f}", k,
                      f"{case['mappings_at_max']:,}" if case["mappings_at_max"] is not None else "n/a",
                      case["complexity"])
    console.print(table)
    for case in document["summary"]["cases"]:
        console.print(f"  {case['label']}: {case['verdict']}", markup=False)
    print_closing(document)


class ScalingCommand(Command):
    """Measure how allocation cost grows with the number of outstanding allocations.

    Sweeps up to 64,000 outstanding blocks of 64 KB, 264,752 bytes and 1 MB,
    placed by default, bottom-up by address hints and under the legacy
    bottom-up layout, as mergeable or distinct mappings, reserved or committed;
    fits the cost of one call against the count and says whether the total is
    O(n), O(n log n) or O(n²). See docs/scaling.md.
    """

    name = "scaling"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--counts", type=count_list, metavar="LIST",
                            help="outstanding counts (default 4000,8000,...,64000; capped below vm.max_map_count)")
        parser.add_argument("--block-sizes", type=arguments.size_list, metavar="LIST",
                            help="block sizes (default 64K,264752,1M)")
        parser.add_argument("--placements", type=arguments.choice_list(PLACEMENTS), metavar="LIST",
                            help="default, bottom-up, legacy (Linux); default, top-down (Windows)")
        parser.add_argument("--shapes", type=arguments.choice_list(SHAPES), default=list(SHAPES), metavar="LIST",
                            help="mergeable, distinct (default both)")
        parser.add_argument("--commits", type=arguments.choice_list(COMMITS), default=list(COMMITS), metavar="LIST",
                            help="reserve, commit (default both)")
        parser.add_argument("--reps", type=arguments.positive_int, help="sweeps per case (default 2; --quick 1)")
        parser.add_argument("--quick", action="store_true", help="a short sweep, as `memcost run` does")
        arguments.add_budget(parser)
        parser.add_argument("--csv", type=arguments.output_file, metavar="FILE",
                            help="also write the raw sweep (count, case, alloc and free seconds) to FILE")
        export.add_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        options = ScalingOptions.quick() if args.quick else ScalingOptions()
        for name in ("counts", "block_sizes", "placements", "reps", "budget"):
            if getattr(args, name) is not None:
                setattr(options, name, getattr(args, name))
        options.shapes, options.commits = args.shapes, args.commits
        document = measure(options, RunDirectory(args.results_dir))
        if args.csv:
            write_csv(document, args.csv)
        render(document)
        export.export_requested(document, args)
        if args.csv:
            console.print(f"Raw sweep: {args.csv}", markup=False)
        return exit_codes.OK
