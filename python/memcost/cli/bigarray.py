"""`memcost bigarray`: allocate and initialize one big array by every common strategy."""

from __future__ import annotations

import argparse
import glob
import os
from dataclasses import dataclass, field
from typing import Optional

from rich.markup import escape
from rich.table import Table

from .. import exit_codes, export
from ..console import console
from ..hugepool import reserved_for_run
from ..results import RunDirectory, make_document
from ..runner import run_with_progress
from ..units import format_bytes
from . import arguments
from .base import Command, print_closing

INITS = ["zero", "value"]
# Other allocators, preloaded into the probe when their library is installed.
ALLOCATORS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": ("libmimalloc.so.2*", "libmimalloc2.0"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
LIBRARY_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
GLIBC_HUGE = ("glibc hugetlb=1", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})


def find_library(pattern: str) -> Optional[str]:
    for directory in LIBRARY_DIRS:
        matches = sorted(glob.glob(os.path.join(directory, pattern)))
        if matches:
            return matches[0]
    return None


@dataclass
class BigarrayOptions:
    size: Optional[int] = None  # None: 1 GiB, capped by the budget
    inits: list[str] = field(default_factory=lambda: list(INITS))
    strategies: Optional[str] = None
    # Five, so that `memcost compare` can test each row (it needs four) and medians hold;
    # at 1 GiB the whole run stays under three minutes here.
    reps: int = 5
    allocators: bool = True
    budget: Optional[int] = None
    reserve_hugepages: Optional[int] = None
    hugepage_size: str = "2M"

    @classmethod
    def quick(cls) -> "BigarrayOptions":
        return cls(size=512 << 20, reps=4)

    def probe_arguments(self) -> list[str]:
        args = ["--inits", ",".join(self.inits), "--reps", str(self.reps)]
        if self.size:
            args += ["--size", str(self.size)]
        if self.strategies:
            args += ["--strategies", self.strategies]
        if self.budget:
            args += ["--budget", str(self.budget)]
        return args


def _variants(options: BigarrayOptions) -> tuple[list[tuple[str, dict]], list[dict]]:
    """(label, environment) for each extra run of the libc strategies, and notes on what is missing."""
    variants, notes = [], []
    if not options.allocators:
        return variants, notes
    for name, (pattern, package) in ALLOCATORS.items():
        library = find_library(pattern)
        if library:
            variants.append((name, {"LD_PRELOAD": library}))
        else:
            notes.append({"code": "allocator_absent",
                          "message": f"{name} is not installed, so its rows are skipped (Debian: apt-get install {package})"})
    variants.append(GLIBC_HUGE)
    return variants, notes


def measure(options: BigarrayOptions, directory: RunDirectory, title: str = "bigarray") -> dict:
    from ..analysis import bigarray as analysis  # numpy and matplotlib load only when measuring
    from ..plots import bigarray as plots
    variants, notes = _variants(options)
    params = {"size": options.size, "inits": options.inits, "strategies": options.strategies, "reps": options.reps,
              "allocators": [label for label, _ in variants], "budget": options.budget,
              "reserve_hugepages": options.reserve_hugepages, "hugepage_size": options.hugepage_size}
    with reserved_for_run(options.reserve_hugepages, options.hugepage_size, params):
        run, samples = _run_all(options, variants, title)
    warnings = list(run.warnings) + notes
    summary = analysis.summarize(samples)
    host = run.context.get("host", "")
    figures = plots.strategies_chart(summary, host, directory.directory_for(host))
    summary["figures"] = [path.name for path in figures]
    warnings += summary_warnings(summary)
    document = make_document("bigarray", run.context, params, samples, summary, warnings)
    document["path"] = str(directory.write(document))
    return document


def _run_all(options: BigarrayOptions, variants: list[tuple[str, dict]], title: str):
    """The main probe run, then the libc strategies again for each allocator variant."""
    run = run_with_progress("bigarray", options.probe_arguments(), title)
    samples = list(run.samples)
    for label, extra_env in variants:
        # Zero-init only: the allocator decides how memory arrives; the value pass is the same code.
        variant = BigarrayOptions(size=options.size, inits=["zero"], strategies=options.strategies, reps=options.reps,
                                  budget=options.budget)
        extra = run_with_progress("bigarray", variant.probe_arguments() + ["--libc-only", "--label", label],
                                  f"{title} ({label})", env={**os.environ, **extra_env})
        samples += extra.samples
    return run, samples


def summary_warnings(summary: dict) -> list[dict]:
    return [{"code": "not_verified", "message": f"{row['strategy']} ({row['init']}): sampled elements did not hold the "
                                                "expected value; its row is not trustworthy"}
            for row in summary["rows"] if not row["verified"]]


def render(document: dict) -> None:
    summary = document["summary"]
    limit = summary["limit_gb_per_s"]
    for init in INITS:
        rows = [r for r in summary["rows"] if r["init"] == init]
        if not rows:
            continue
        table = Table(title=f"{format_bytes(rows[0]['size_bytes'])}, {init} initialization — ranked "
                            f"(limit {limit:.1f} GB/s)" if limit else f"{init} initialization", title_justify="left")
        for heading in ("#", "strategy", "seconds", "GB/s", "of limit", "faults", "huge", "first 1 %", "free s"):
            table.add_column(heading, justify="left" if heading == "strategy" else "right")
        for row in rows:
            table.add_row(str(row["rank"]), escape(row["strategy"]), f"{row['median_s']:.3f}", f"{row['gb_per_s']:.1f}",
                          f"{row['ratio_to_limit']:.0%}" if row["ratio_to_limit"] else "n/a", f"{row['faults']:,}",
                          f"{row['huge_fraction']:.0%}" if row["huge_fraction"] is not None else "n/a",
                          f"{row['first_percent_s']:.3f} s" if row["first_percent_s"] is not None else "",
                          f"{row['free_s']:.3f}")
        console.print(table)
    choice = summary.get("auto_choice")
    if choice:
        console.print(f"make_big_array auto {choice['why']}", markup=False)
        for init in INITS:
            if init in choice:
                placed = choice[init]
                console.print(f"  {init}: rank {placed['rank']} of {placed['of']}, "
                              f"{placed['slower_than_fastest_percent']:+.0f}% against the fastest ({placed['fastest']})",
                              markup=False)
    print_closing(document)


class BigarrayCommand(Command):
    """Allocate and initialize one big array by every common strategy, against the machine's limit.

    An array of 16-byte work items holding a std::atomic (default 1 GiB,
    capped by the budget), made with zero and with a non-zero value by new[],
    std::vector, make_unique_for_overwrite, malloc, calloc, mmap (serial,
    parallel, MAP_POPULATE, MADV_POPULATE_WRITE; base pages, THP, hugetlb where
    a pool allows) and memcost::make_big_array; the libc ones again under the
    other allocators installed and glibc's huge-page tunable. See docs/bigarray.md.
    """

    name = "bigarray"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--size", type=arguments.size, metavar="SIZE", help="array size (default 1G, capped by the budget; 8G and more for the big picture)")
        parser.add_argument("--inits", type=arguments.choice_list(INITS), default=list(INITS), metavar="LIST",
                            help="zero, value (default both)")
        parser.add_argument("--strategies", metavar="LIST", help="only strategies whose names contain one of these")
        parser.add_argument("--reps", type=arguments.positive_int, default=5,
                            help="repetitions per strategy (default 5: enough for `memcost compare`, which needs 4)")
        parser.add_argument("--no-allocators", action="store_true", help="skip the runs under other allocators")
        parser.add_argument("--quick", action="store_true", help="1 GiB, as `memcost run` does")
        arguments.add_budget(parser)
        arguments.add_hugepage_reservation(parser)
        export.add_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        options = BigarrayOptions.quick() if args.quick else BigarrayOptions()
        if args.size:
            options.size = args.size
        options.inits, options.strategies, options.reps = args.inits, args.strategies, args.reps
        options.allocators = not args.no_allocators
        options.budget, options.reserve_hugepages, options.hugepage_size = args.budget, args.reserve_hugepages, args.hugepage_size
        document = measure(options, RunDirectory(args.results_dir))
        render(document)
        export.export_requested(document, args)
        return exit_codes.OK
