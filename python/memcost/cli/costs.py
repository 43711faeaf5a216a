"""`memcost costs`: the per-MB hidden cost of a large allocation."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Optional

from rich.table import Table

from .. import exit_codes, export
from ..console import console
from ..hugepool import reserved_for_run
from ..results import RunDirectory, make_document
from ..runner import run_with_progress
from ..units import format_bytes, short_size
from . import arguments
from ..report.tables import shootdowns_table
from .base import Command, print_closing

PAGES = ["base", "thp", "hugetlb-2M", "hugetlb-1G"]
ROUTES = ["os", "malloc", "new"]
PARTS = ["rows", "reuse", "threads", "idle", "shootdowns"]
ORDERS = ["blocks", "rounds"]


@dataclass
class CostsOptions:
    sizes: Optional[list[int]] = None  # None: the probe's defaults, capped by the budget
    pages: list[str] = field(default_factory=lambda: list(PAGES))
    routes: list[str] = field(default_factory=lambda: list(ROUTES))
    parts: list[str] = field(default_factory=lambda: list(PARTS))
    reps: int = 9
    warmup: int = 2
    frames: int = 200
    threads_size: int = 256 << 20
    order: str = "blocks"
    idle_size: int = 256 << 20
    idle_seconds: float = 4.0
    idle_reps: int = 3
    budget: Optional[int] = None
    reserve_hugepages: Optional[int] = None
    hugepage_size: str = "2M"

    @classmethod
    def quick(cls) -> "CostsOptions":
        """A short run for `memcost run`: two sizes, fewer repetitions."""
        return cls(sizes=[8 << 20, 64 << 20], reps=5, warmup=1, frames=50, threads_size=64 << 20,
                   idle_size=128 << 20, idle_reps=1)

    def probe_arguments(self) -> list[str]:
        args = ["--pages", ",".join(self.pages), "--routes", ",".join(self.routes), "--parts", ",".join(self.parts),
                "--reps", str(self.reps),
                "--warmup", str(self.warmup), "--frames", str(self.frames),
                "--threads-size", str(self.threads_size), "--order", self.order, "--idle-size", str(self.idle_size),
                "--idle-seconds", str(self.idle_seconds), "--idle-reps", str(self.idle_reps)]
        if self.sizes:
            args += ["--sizes", ",".join(str(s) for s in self.sizes)]
        if self.budget:
            args += ["--budget", str(self.budget)]
        return args


def measure(options: CostsOptions, directory: RunDirectory, title: str = "costs") -> dict:
    """Run the probe, summarize, draw, and store the results document."""
    from ..analysis import costs as analysis  # numpy, scipy and matplotlib load only when measuring
    from ..plots import costs as plots
    params = {"sizes": options.sizes, "pages": options.pages, "routes": options.routes, "parts": options.parts,
              "reps": options.reps,
              "warmup": options.warmup, "frames": options.frames, "threads_size": options.threads_size,
              "order": options.order, "idle_size": options.idle_size, "idle_seconds": options.idle_seconds,
              "idle_reps": options.idle_reps,
              "budget": options.budget, "reserve_hugepages": options.reserve_hugepages,
              "hugepage_size": options.hugepage_size}
    with reserved_for_run(options.reserve_hugepages, options.hugepage_size, params):
        run = run_with_progress("costs", options.probe_arguments(), title)
    summary = analysis.summarize(run.samples)
    summary["headline"] = analysis.headline(summary)
    warnings = run.warnings + analysis.row_warnings(summary["rows"])
    host = run.context.get("host", "")
    folder = directory.directory_for(host)
    figures = plots.parts_chart(summary, host, folder) + plots.threads_chart(summary, host, folder)
    summary["figures"] = [path.name for path in figures]
    document = make_document("costs", run.context, params, run.samples, summary, warnings)
    document["path"] = str(directory.write(document))
    return document


def _cell(row: dict, name: str, digits: int = 0) -> str:
    value = row.get(name)
    if value is None:
        return "n/a"
    text = f"{value:,.{digits}f}"
    spread = row.get("spread", {}).get(name)
    if spread and spread["n"] > 1:
        text += f" ±{(spread['q3'] - spread['q1']) / 2:,.{digits}f}"
    return text


def render(document: dict) -> None:
    summary = document["summary"]
    for page in PAGES:
        rows = [r for r in summary["rows"] if r["page"] == page]
        if not rows:
            continue
        table = Table(title=f"{page} pages — medians ±half the interquartile range", title_justify="left")
        for heading in ("route", "size", "alloc µs", "free µs", "fault µs/MB", "free-after-touch µs/MB",
                        "elsewhere µs/MB", "total µs/MB", "naive µs", "missed %", "faults/MB", "huge"):
            table.add_column(heading, justify="left" if heading in ("route", "size") else "right")
        for row in rows:
            table.add_row(row["route"], short_size(row["size_bytes"]), _cell(row, "alloc_us", 1), _cell(row, "free_us", 1),
                          _cell(row, "fault_us_per_mb"), _cell(row, "free_after_touch_us_per_mb"),
                          _cell(row, "elsewhere_us_per_mb", 1), _cell(row, "total_us_per_mb"), _cell(row, "naive_us", 1),
                          f"{row['missed_percent']:.1f}" if row["missed_percent"] is not None else "n/a",
                          f"{row['faults_per_mb']:.1f}",
                          f"{row['huge_fraction']:.0%}" if row["huge_fraction"] is not None else "n/a")
        console.print(table)
    for note in summary.get("elsewhere_notes", []):
        console.print(f"  {note}", markup=False)
    reuse = summary.get("reuse")
    if reuse:
        table = Table(title=f"Reuse vs reallocate: {format_bytes(reuse['frame_bytes'])} per frame, {reuse['frames']} frames",
                      title_justify="left")
        for heading in ("route", "reallocate µs/frame", "reuse µs/frame", "ratio", "faults/frame (reallocate)"):
            table.add_column(heading, justify="left" if heading == "route" else "right")
        for route, result in reuse["routes"].items():
            table.add_row(route, f"{result['reallocate_us_per_frame']:,.0f}", f"{result['reuse_us_per_frame']:,.0f}",
                          f"{result.get('ratio', float('nan')):.1f}×", f"{result['reallocate_faults_per_frame']:,.0f}")
        console.print(table)
        for route, result in reuse["routes"].items():
            console.print(f"  {route} path, reallocating: {result['path_text']}", markup=False)
    if summary["threads"]:
        table = Table(title=f"First touch with threads ({format_bytes(summary['threads'][0]['size_bytes'])}, base pages)",
                      title_justify="left")
        for heading in ("threads", "first touch µs/MB", "fault µs/MB", "speedup"):
            table.add_column(heading, justify="right")
        for entry in summary["threads"]:
            table.add_row(str(entry["threads"]), f"{entry['first_touch_us_per_mb']:,.0f}", f"{entry['fault_us_per_mb']:,.0f}",
                          f"{entry['speedup']:.2f}×")
        console.print(table)
        if summary.get("threads_verdict"):
            console.print(f"  {summary['threads_verdict']}", markup=False)
    if summary.get("idle"):
        table = Table(title="Memory reused at once vs left free first (os route)", title_justify="left")
        for heading in ("page", "size", "left free", "fault µs/MB reused at once", "fault µs/MB after idle", "ratio"):
            table.add_column(heading, justify="left" if heading == "page" else "right")
        for entry in summary["idle"]:
            table.add_row(entry["page"], short_size(entry["size_bytes"]), f"{entry['idle_seconds']:g} s",
                          f"{entry['hot_fault_us_per_mb']:,.0f}", f"{entry['cold_fault_us_per_mb']:,.0f}",
                          f"{entry['ratio']:.1f}×" if entry["ratio"] else "n/a")
        console.print(table)
        if summary.get("idle_verdict"):
            console.print(f"  {summary['idle_verdict']}", markup=False)
    if summary.get("shootdowns"):
        caption, headings, rows = shootdowns_table(summary["shootdowns"])
        table = Table(title=caption, title_justify="left")
        for heading in headings:
            table.add_column(heading, justify="left" if heading == "who wrote it" else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        if summary.get("shootdowns_verdict"):
            console.print(f"  {summary['shootdowns_verdict']}", markup=False)
    print_closing(document)


class CostsCommand(Command):
    """Measure the per-MB hidden cost of a large allocation on this machine.

    For each page kind (base, THP, hugetlb 2 MB and 1 GB where a pool has
    pages), each route (the OS directly, malloc, new[]) and each size, times
    the allocation, the first and second write, the free of the written buffer
    and the CPU time charged elsewhere; also reuse vs reallocate per frame,
    first touch with 1..N threads, and memory reused at once vs left free for a
    few seconds (a hypervisor may take it back). See docs/costs.md.
    """

    name = "costs"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sizes", type=arguments.size_list, metavar="LIST",
                            help="buffer sizes, e.g. 8M,32M (default 8M,32M,128M,1G capped by the budget)")
        parser.add_argument("--pages", type=arguments.choice_list(PAGES), default=list(PAGES), metavar="LIST",
                            help="page kinds (default: all; hugetlb kinds need a pool)")
        parser.add_argument("--routes", type=arguments.choice_list(ROUTES), default=list(ROUTES), metavar="LIST",
                            help="allocation routes: os, malloc, new (default: all)")
        parser.add_argument("--parts", type=arguments.choice_list(PARTS), default=list(PARTS), metavar="LIST",
                            help="what to measure: rows (the tables), reuse, threads, idle, shootdowns (default: all)")
        parser.add_argument("--reps", type=arguments.positive_int, help="measured repetitions (default 9; --quick 5)")
        parser.add_argument("--warmup", type=arguments.non_negative_int,
                            help="unmeasured repetitions first (default 2; --quick 1)")
        parser.add_argument("--frames", type=arguments.positive_int, help="frames in reuse vs reallocate (default 200)")
        parser.add_argument("--threads-size", type=arguments.size, metavar="SIZE",
                            help="buffer for the threads test (default 256M; --quick 64M)")
        parser.add_argument("--order", choices=ORDERS, default="blocks",
                            help="blocks: each case's repetitions back to back (default); rounds: every case once "
                                 "per round")
        parser.add_argument("--idle-seconds", type=arguments.bounded_seconds(0.0, 600.0), metavar="S",
                            help="how long memory stays free in the idle part (default 4)")
        parser.add_argument("--quick", action="store_true", help="two sizes and five repetitions, as `memcost run` does")
        arguments.add_budget(parser)
        arguments.add_hugepage_reservation(parser)
        export.add_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        options = CostsOptions.quick() if args.quick else CostsOptions()
        # Flags given override the mode's defaults.
        for name in ("sizes", "reps", "warmup", "frames", "threads_size", "idle_seconds"):
            if getattr(args, name) is not None:
                setattr(options, name, getattr(args, name))
        options.pages, options.routes, options.parts, options.order = args.pages, args.routes, args.parts, args.order
        options.budget, options.reserve_hugepages, options.hugepage_size = args.budget, args.reserve_hugepages, args.hugepage_size
        document = measure(options, RunDirectory(args.results_dir))
        render(document)
        export.export_requested(document, args)
        return exit_codes.OK
