"""`memcost compare`: runs or machines side by side, with what differs beyond noise."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from .. import exit_codes, export
from ..console import console
from ..report import load_run
from ..results import ResultsError, load_document, reading
from ..units import format_bytes
from .. import arguments
from .base import Command


def load_input(path: Path) -> dict[str, dict]:
    """A run directory, or a single results document."""
    if path.is_dir():
        return load_run(path)
    document = load_document(path)
    return {document["experiment"]: document}


def _key_text(row: dict, key: list[str]) -> list[str]:
    return [format_bytes(row[k]) if k.endswith("bytes") else str(row[k]) for k in key]


def render(result: dict) -> None:
    from ..analysis.compare import ALPHA, NOISE_FLOOR
    names = result["runs"]
    # Which machine each run measured, Wine runs labelled as such: a Wine figure says nothing of Windows.
    for name, machine in zip(names, result.get("machines", [])):
        console.print(f"{name}: {machine}", markup=False)
    for experiment, comparison in result["experiments"].items():
        table = Table(title=f"{experiment}: {comparison['measure']} (median); ratio to {names[0]} [95 % interval]; "
                            "≠ marks a difference beyond noise", title_justify="left")
        for heading in comparison["key"]:
            table.add_column(heading)
        for name in names:
            table.add_column(escape(name), justify="right")
        for name in names[1:]:
            table.add_column(f"{escape(name)} ÷ {escape(names[0])}", justify="right")
        for row in comparison["rows"]:
            ratios = []
            for versus in row["versus_first"]:
                mark = " ≠" if versus["significant"] else (" ?" if versus["significant"] is None else "")
                interval = (f" [{versus['ratio_low']:.2f}–{versus['ratio_high']:.2f}]"
                            if versus.get("ratio_low") is not None else "")
                ratios.append("n/a" if versus["ratio"] is None else f"{versus['ratio']:.2f}×{interval}{mark}")
            table.add_row(*[escape(t) for t in _key_text(row, comparison["key"])],
                          *[f"{m:,.3g}" for m in row["medians"]], *ratios)
        console.print(table)
        columns = len(comparison["rows"][0]["versus_first"]) if comparison["rows"] else 0
        differing = ", ".join(str(sum(1 for r in comparison["rows"] if r["versus_first"][column]["significant"]))
                              for column in range(columns))
        console.print(f"  {differing} of {len(comparison['rows'])} rows differ beyond noise (per later run against the "
                      f"first; Welch's t on the logarithms, Holm-corrected "
                      f"over the rows, p < {ALPHA}, and the whole interval beyond ±{NOISE_FLOOR:.0%}, the drift between "
                      "runs of the same settings; ? = too few samples to tell)", markup=False)
    for line in result["missing"]:
        console.print(f"  {line}", markup=False)


class CompareCommand(Command):
    """Put two or more runs side by side: the same tables, one column per run, ratios to the first.

    Each input is a run directory (results/<time>-<host>) or one results
    document. A difference is flagged only when it stands out from the runs'
    own spread. Overlaid plots go to --out (default results/compare-<time>).
    """

    name = "compare"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("inputs", nargs="+", type=Path, metavar="RUN", help="run directories or results documents")
        parser.add_argument("--out", type=arguments.output_folder, metavar="DIR", help="where the overlaid plots go")
        export.add_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        if len(args.inputs) < 2:
            raise ResultsError("compare needs at least two runs: name two or more run folders or results files",
                               exit_codes.BAD_ARGUMENTS)
        from ..analysis.compare import compare  # scipy and matplotlib load only here
        from ..experiments import REGISTRY
        runs = [load_input(path) for path in args.inputs]
        names = [path.resolve().name if path.is_dir() else path.stem for path in args.inputs]
        if len(set(names)) < len(names):
            names = [f"{i + 1}:{name}" for i, name in enumerate(names)]
        with reading("one of " + ", ".join(str(path) for path in args.inputs)):
            result = compare(runs, names)
        if not result["experiments"]:
            raise ResultsError("these runs have no experiment in common: " + "; ".join(result["missing"]))
        out = args.out or args.results_dir / f"compare-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
        figures = []
        with reading("one of " + ", ".join(str(path) for path in args.inputs)):
            for name, comparison in result["experiments"].items():
                figures += REGISTRY[name].comparison.figures(comparison, runs, names, out)
        result["figures"] = [str(path) for path in figures]
        render(result)
        export.export_requested(result, args)
        if figures:
            console.print(f"Plots: {out}", markup=False)
        return exit_codes.OK
