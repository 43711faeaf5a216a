"""costs: what a large allocation costs, part by part (docs/costs.md; the probe's side is
src/probe/experiments/costs/; the summary is analysis/costs.py, the figures plots/costs.py)."""

from __future__ import annotations

import re
from typing import Optional

from .. import arguments
from ..units import format_bytes, short_size
from .base import Comparison, Experiment, Option, Table, comma_list, number
from .shared import budget_option, hugepage_options, measure_simple

PAGES = ["base", "thp", "hugetlb-2M", "hugetlb-1G"]
ROUTES = ["os", "malloc", "new"]
PARTS = ["rows", "reuse", "threads", "idle", "shootdowns"]
ORDERS = ["blocks", "rounds"]

OPTIONS = [
    Option("sizes", "buffer sizes, e.g. 8M,32M (default 8M,32M,128M,1G capped by the budget)",
           quick=[8 << 20, 64 << 20], parse=arguments.size_list, metavar="LIST", to_probe=comma_list),
    Option("pages", "page kinds (default: all; hugetlb kinds need a pool)",
           parse=arguments.choice_list(PAGES), metavar="LIST", to_probe=comma_list),
    Option("routes", "allocation routes: os, malloc, new (default: all)",
           parse=arguments.choice_list(ROUTES), metavar="LIST", to_probe=comma_list),
    Option("parts", "what to measure: rows (the tables), reuse, threads, idle, shootdowns (default: all)",
           parse=arguments.choice_list(PARTS), metavar="LIST", to_probe=comma_list),
    Option("reps", "measured repetitions (default 9; --quick 5)", quick=5, parse=arguments.positive_int),
    Option("warmup", "unmeasured repetitions first (default 2; --quick 1)", quick=1,
           parse=arguments.non_negative_int),
    Option("frames", "frames in reuse vs reallocate (default 200; --quick 50)", quick=50,
           parse=arguments.positive_int),
    Option("threads_size", "buffer for the threads and shootdowns parts (default 256M; --quick 64M)",
           quick=64 << 20, parse=arguments.size, metavar="SIZE"),
    Option("order", "blocks: each case's repetitions back to back (default); rounds: every case once per round, "
                    "each round in an order shuffled from a seed recorded in the settings line",
           choices=ORDERS),
    Option("idle_size", "buffer for the idle part (default 256M; --quick 128M)", quick=128 << 20,
           parse=arguments.size, metavar="SIZE"),
    Option("idle_seconds", "how long memory stays free in the idle part (default 4)",
           parse=arguments.bounded_seconds(0.0, 600.0), metavar="S"),
    Option("idle_reps", "repetitions of the idle part (default 3; --quick 1)", quick=1,
           parse=arguments.positive_int),
    budget_option(),
    *hugepage_options(),
]


def _cell(row: dict, name: str, digits: int = 0) -> str:
    """A median with ± half its interquartile range."""
    text = number(row.get(name), digits)
    spread = row.get("spread", {}).get(name)
    if row.get(name) is not None and spread and spread["n"] > 1:
        text += f" ±{(spread['q3'] - spread['q1']) / 2:,.{digits}f}"
    return text


def _within_one_tick(row: dict) -> bool:
    """The row's steal is a single 10 ms tick (or less) over all its repetitions: below steal's resolution."""
    steal, tick = row.get("elsewhere_steal_us_per_mb"), row.get("elsewhere_steal_resolution_us_per_mb")
    return bool(steal and tick and steal <= tick * 1.001)


def tables(summary: dict) -> list[Table]:
    result: list[Table] = []
    headings = ["page", "route", "size", "alloc µs", "free µs", "fault µs/MB", "free-after-touch µs/MB", "elsewhere µs/MB",
                "total µs/MB", "naive µs", "missed %", "faults/MB", "huge"]
    for page in PAGES:
        rows = [r for r in summary["rows"] if r["page"] == page]
        if rows:
            result.append((f"{page} pages — medians ±half the interquartile range", headings,
                           [[r["page"], r["route"], short_size(r["size_bytes"]), _cell(r, "alloc_us", 1), _cell(r, "free_us", 1),
                             _cell(r, "fault_us_per_mb"), _cell(r, "free_after_touch_us_per_mb"),
                             _cell(r, "elsewhere_us_per_mb", 1) + ("†" if _within_one_tick(r) else ""),
                             _cell(r, "total_us_per_mb"), _cell(r, "naive_us", 1),
                             number(r["missed_percent"], 1), number(r["faults_per_mb"], 1),
                             "n/a" if r["huge_fraction"] is None else f"{r['huge_fraction']:.0%}"] for r in rows]))
    reuse = summary.get("reuse")
    if reuse:
        result.append((f"Reuse vs reallocate: {format_bytes(reuse['frame_bytes'])} per frame, {reuse['frames']} frames",
                       ["route", "reallocate µs/frame", "reuse µs/frame", "ratio", "faults/frame (reallocate)"],
                       [[route, number(r["reallocate_us_per_frame"]), number(r["reuse_us_per_frame"]),
                         "n/a" if r.get("ratio") is None else f"{r['ratio']:.1f}×", number(r["reallocate_faults_per_frame"])]
                        for route, r in reuse["routes"].items()]))
    if summary.get("threads"):
        result.append((f"First touch with threads ({format_bytes(summary['threads'][0]['size_bytes'])}, base pages)",
                       ["threads", "first touch µs/MB", "fault µs/MB", "speedup"],
                       [[str(e["threads"]), number(e["first_touch_us_per_mb"]), number(e["fault_us_per_mb"]),
                         "n/a" if e["speedup"] is None else f"{e['speedup']:.2f}×"] for e in summary["threads"]]))
    if summary.get("idle"):
        result.append(("Memory reused at once vs left free first (os route)",
                       ["page", "size", "left free", "fault µs/MB reused at once", "fault µs/MB after idle", "ratio"],
                       [[e["page"], short_size(e["size_bytes"]), f"{e['idle_seconds']:g} s",
                         number(e["hot_fault_us_per_mb"]), number(e["cold_fault_us_per_mb"]),
                         "n/a" if e["ratio"] is None else f"{e['ratio']:.1f}×"] for e in summary["idle"]]))
    if summary.get("shootdowns"):
        entries = summary["shootdowns"]
        result.append((f"Freeing a written {format_bytes(entries[0]['size_bytes'])} buffer: TLB shootdowns",
                       ["who wrote it", "free-after-touch µs/MB", "TLB shootdowns", "per MB",
                        "µs per shootdown (receiver)", "on other CPUs µs/MB"],
                       [["one thread" if e["mode"] == "single" else f"{e['threads']} threads, still running",
                         number(e["free_after_touch_us_per_mb"]), number(e["shootdowns"]),
                         number(e["shootdowns_per_mb"], 3),
                         "—" if e["mode"] == "single" else number(None if e["remote_ns_per_shootdown"] is None
                                                                  else e["remote_ns_per_shootdown"] / 1e3, 1),
                         "—" if e["mode"] == "single" else number(e["remote_us_per_mb"], 2)] for e in entries]))
    return result


def notes(summary: dict) -> list[str]:
    lines = list(summary.get("elsewhere_notes", []))
    if any(_within_one_tick(row) for row in summary["rows"]):
        lines.insert(0, "† includes one 10 ms steal tick or less over all its repetitions: below what /proc/stat's "
                        "steal can resolve at this size; measure more or larger repetitions to tell")
    for route, result in ((summary.get("reuse") or {}).get("routes") or {}).items():
        if "path_text" in result:  # absent where faults are not counted (Wine): the path is told by faults
            lines.append(f"{route} path, reallocating: {result['path_text']}")
    lines += [summary[key] for key in ("threads_verdict", "idle_verdict", "shootdowns_verdict") if summary.get(key)]
    return lines


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def interpret(summary: dict) -> list[str]:
    from ..analysis.derived import largest_os_row
    sentences = []
    base = largest_os_row(summary["rows"], "base")
    if base:
        share = 100 * base["fault_us_per_mb"] / base["total_us_per_mb"] if base["total_us_per_mb"] else 0
        sentences.append(
            f"First touch is the expensive part here: {base['fault_us_per_mb']:.0f} µs per MB on base pages "
            f"({share:.0f} % of the {base['total_us_per_mb']:.0f} µs/MB total), while a timer around allocate and "
            f"free alone sees {100 - base['missed_percent']:.2f} % of it.")
        huge = [r for r in (largest_os_row(summary["rows"], p) for p in ("thp", "hugetlb-2M", "hugetlb-1G")) if r]
        if huge:
            best = min(huge, key=lambda r: r["fault_us_per_mb"])
            sentences.append(
                f"On {best['page']} pages the same faults cost {best['fault_us_per_mb']:.0f} µs/MB "
                f"({base['fault_us_per_mb'] / max(best['fault_us_per_mb'], 1e-9):.0f}× less): ask for huge pages "
                "(MADV_HUGEPAGE, or memcost::make_big_array) for large buffers.")
    reuse = (summary.get("reuse") or {}).get("routes", {}).get("os")
    if reuse and reuse.get("ratio"):
        sentences.append(f"Reusing a buffer instead of reallocating it every frame is {reuse['ratio']:.0f}× cheaper "
                         "through the OS; keep big buffers alive.")
    if summary.get("shootdowns_verdict"):
        sentences.append(_sentence(summary["shootdowns_verdict"]))
    sentences.extend(_sentence(note) for note in summary.get("elsewhere_notes", []))
    if summary.get("idle_verdict") and "more to fault in" in summary["idle_verdict"]:
        sentences.append(_sentence(summary["idle_verdict"]))
    return sentences


def _compared(sample: dict) -> Optional[tuple[tuple, list[float]]]:
    from ..analysis.derived import fault_us_per_mb
    case = sample["case"]
    if case.get("part") != "rows" or case.get("warmup"):
        return None
    return (case["page"], case["route"], case["size_bytes"]), [fault_us_per_mb(case, sample["metrics"])]


def _compare_plots():
    from ..plots import compare  # matplotlib loads only when drawing
    return compare


def with_front_end_hints(warnings: list[dict]) -> list[dict]:
    """The probe names the pool command; the front end adds its own flag that does the same for one run."""
    hinted = []
    for warning in warnings:
        match = re.search(r"`memcost hugepages reserve (\S+) --size (\S+)` as root", warning["message"])
        if warning["code"] == "hugetlb_pool_too_small" and match:
            warning = {**warning, "message": warning["message"] + f", or pass `--reserve-hugepages {match[1]} "
                                                                  f"--hugepage-size {match[2]}` to `memcost costs`"}
        hinted.append(warning)
    return hinted


def _summarize(samples: list) -> tuple[dict, list[dict]]:
    from ..analysis import costs as analysis  # numpy loads only when measuring or reporting
    summary = analysis.summarize(samples)
    summary["headline"] = analysis.headline(summary)
    return summary, analysis.row_warnings(summary["rows"])


def _figures(summary: dict, host: str, folder):
    from ..plots import costs as plots  # matplotlib loads only when drawing
    return plots.parts_chart(summary, host, folder) + plots.threads_chart(summary, host, folder)


EXPERIMENT = Experiment(
    name="costs",
    title="What a large allocation costs (costs)",
    summary="Measure the per-MB hidden cost of a large allocation on this machine.",
    options=OPTIONS,
    measure=lambda values, directory: measure_simple(EXPERIMENT, values, directory, _summarize, with_front_end_hints),
    analyze=_summarize,
    figures=_figures,
    tables=tables,
    notes=notes,
    interpret=interpret,
    comparison=Comparison("fault µs/MB", ("page", "route", "size_bytes"), _compared,
                          figures=lambda comparison, runs, names, out: _compare_plots().costs_bars(comparison, names, out)),
)
