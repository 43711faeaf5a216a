"""bigarray: allocate and initialize one big array by every common strategy, against the
machine's limit (docs/bigarray.md; src/probe/experiments/bigarray/; analysis/bigarray.py;
plots/bigarray.py)."""

from __future__ import annotations

import glob
import os
import time
from typing import Optional

from .. import arguments
from ..units import format_bytes
from .base import Comparison, Experiment, Option, Table, comma_list, number
from .shared import budget_option, finish, hugepage_options

INITS = ["zero", "value"]
# Other allocators, preloaded into the probe when their library is installed.
ALLOCATORS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": ("libmimalloc.so.2*", "libmimalloc2.0"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
LIBRARY_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
GLIBC_HUGE = ("glibc hugetlb=1", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})

OPTIONS = [
    Option("size", "array size (default 1G, capped by the budget; 8G and more for the big picture)",
           quick=512 << 20, parse=arguments.size, metavar="SIZE"),
    Option("inits", "zero, value (default both)", parse=arguments.choice_list(INITS),
           metavar="LIST", to_probe=comma_list),
    Option("strategies", "only strategies whose names contain one of these", metavar="LIST"),
    # Adaptive by default (docs/bigarray.md "How many repetitions"): at most 5 rounds, a row stopping
    # once its time is known within ±10 % or it is 3 times the fastest; --reps N fixes the count
    # (`memcost compare` tests rows with 4 or more a side).
    Option("reps", "repetitions per strategy (default adaptive: at most 5 rounds, a row stopping once its time is known "
                   "within ±10 %% or its fastest round is 3 times the fastest row's median (5 times after 2 rounds, 15 after 1); "
                   "N: N for every row, and all --repeat iterations; --quick 4)",
           quick=4, parse=arguments.positive_int),
    Option("repeat", "most iterations of the repeat scenario: the array made, initialized and freed again (default "
                     "10; unless --reps is given, a variant stops by the ranked rows' rule, the floor as the fastest: "
                     "known within ±10 %% after 4, or taking 3 times its floor in every pair (5 times after 3, 15 after 2); --quick "
                     "5; 0: none)", quick=5, parse=arguments.non_negative_int),
    Option("side_by_side", "one-thread rows (new[], std::vector, malloc + memset, calloc, mmap + memset) measured at "
                           "once, each in a process of its own (default: at most half the CPUs, as many arrays as the "
                           "budget holds, their writing under a third of the machine's limit; the run's first batch "
                           "checked against one row measured alone; 1: every row alone)",
           parse=arguments.positive_int, metavar="N"),
    Option("serial_part", "rows that write the array from one thread (new[], std::vector, malloc + memset, calloc, "
                          "mmap + memset, MAP_POPULATE, make_unique_for_overwrite) are measured on this much of the array "
                          "when it is larger, their seconds, faults and free scaled to the whole (default 8G; checked once "
                          "against one such row measured whole; 0: every row on the whole array)",
           parse=arguments.size_or_zero, metavar="SIZE"),
    Option("no_allocators", "skip the runs under other allocators", flag_only=True, to_probe=None),
    budget_option(),
    *hugepage_options(),
]


def find_library(pattern: str) -> Optional[str]:
    for directory in LIBRARY_DIRS:
        matches = sorted(glob.glob(os.path.join(directory, pattern)))
        if matches:
            return matches[0]
    return None


def _variants(values: dict) -> tuple[list[tuple[str, dict]], list[dict]]:
    """(label, environment) for each extra run of the libc strategies, and notes on what is missing."""
    variants, notes_ = [], []
    if values.get("no_allocators"):
        return variants, notes_
    for name, (pattern, package) in ALLOCATORS.items():
        library = find_library(pattern)
        if library:
            variants.append((name, {"LD_PRELOAD": library}))
        else:
            notes_.append({"code": "allocator_absent",
                           "message": f"{name} is not installed, so its rows are skipped (Debian: apt-get install {package})"})
    variants.append(GLIBC_HUGE)
    return variants, notes_


def measure(values: dict, directory) -> dict:
    from ..hugepool import reserved_for_run
    from ..runner import run_with_progress
    variants, missing = _variants(values)
    params = {**values, "allocators": [label for label, _ in variants]}
    started = time.monotonic()
    with reserved_for_run(values.get("reserve_hugepages"), values.get("hugepage_size", "2M"), params):
        run = run_with_progress("bigarray", EXPERIMENT.probe_arguments(values) + ["--allocator-runs", str(len(variants))],
                                "bigarray")
        samples = list(run.samples)
        # The main run's fastest alone (an allocator's reuse rows are no yardstick), and its side-by-side verdict.
        allocator_flags = _fastest_flag(samples) + _side_by_side_flags(samples) + _serial_part_flags(samples)
        for label, extra_env in variants:
            # Zero-init only: the allocator decides how memory arrives; the value pass is the same code.
            extra = run_with_progress("bigarray", EXPERIMENT.probe_arguments({**values, **_allocator_values(values)})
                                      + ["--libc-only", "--label", label] + allocator_flags,
                                      f"bigarray ({label})", env={**os.environ, **extra_env})
            samples += extra.samples
    params["probe_settings"] = run.settings
    params["duration_s"] = time.monotonic() - started
    summary, unverified = analyze(samples)
    summary["estimate"] = _estimate_against_duration(samples, params["duration_s"])
    from ..analysis.bigarray import machine_facts
    summary["machine_facts"] = machine_facts(run.context, directory.root)
    said = [w for w in run.warnings if w.get("code") != "estimate"]  # said at the start; kept in the summary
    return finish(EXPERIMENT, run.context, params, samples, summary, said + missing + unverified, directory)


def _estimate_against_duration(samples: list, duration_s: float) -> Optional[dict]:
    """The estimate the probe made before the run (src/probe/run_estimate.cpp), beside what the run
    took: the model's error on this machine, kept with the result."""
    estimate = next((s["metrics"] for s in samples if s["case"].get("part") == "estimate"), None)
    if not estimate:
        return None
    return {"estimated_s": estimate["seconds"], "actual_s": duration_s, "ratio": duration_s / estimate["seconds"]}


# What an allocator's run measures unless --strategies says otherwise: how the allocator gets a big
# block (malloc + memset) and whether its calloc knows the block is zero already. new[],
# std::vector and make_unique reach the same malloc and differ from malloc + memset only in the
# writing, which the glibc rows show; in a 4 GiB run of five fixed repetitions those three took 137 s
# of the allocators' 367.
ALLOCATOR_STRATEGIES = ["malloc + memset", "calloc + first touch"]


def _allocator_values(values: dict) -> dict:
    return {"inits": ["zero"], "repeat": 0, "strategies": values.get("strategies") or ",".join(ALLOCATOR_STRATEGIES)}


def _fastest_flag(samples: list) -> list[str]:
    """--fastest-s for an allocator's run: the main run's fastest median for zero initialization,
    against which the run's adaptive repetitions judge a row far behind."""
    from ..analysis.bigarray import fastest_median_s
    fastest = fastest_median_s(samples, "zero")
    return ["--fastest-s", f"{fastest:.9f}"] if fastest else []


def _side_by_side_flags(samples: list) -> list[str]:
    """An allocator's run measures its one-thread rows as the main run did: side by side, without a
    check of its own, where the main run's check held; alone where it failed; its own choice and
    check where the main run made none."""
    width = next((s["metrics"]["rows"] for s in samples if s["case"].get("part") == "side_by_side"), 1)
    check = next((s["metrics"] for s in samples if s["case"].get("part") == "side_by_side_check"), None)
    if check is None:
        return []
    return ["--side-by-side", str(width), "--side-by-side-checked"] if check["kept"] else ["--side-by-side", "1"]


def _serial_part_flags(samples: list) -> list[str]:
    """An allocator's run measures its serial rows as the main run did: on a part, without a check
    of its own, where the main run's check held; on the whole array where it failed."""
    check = next((s["metrics"] for s in samples if s["case"].get("part") == "serial_part_check"), None)
    if check is None:
        return []
    return ["--serial-part-checked"] if check["kept"] else ["--serial-part", "0"]


def analyze(samples: list) -> tuple[dict, list]:
    from ..analysis import bigarray as analysis
    summary = analysis.summarize(samples)
    unverified = [{"code": "not_verified", "message": f"{row['strategy']} ({row['init']}): sampled elements did not "
                                                      "hold the expected value; its row is not trustworthy"}
                  for row in summary["rows"] if not row["verified"]]
    for row in _limit_rows(summary):
        name = _row_name(row)
        above = row.get("above_limit")
        if above and above["reason"] is None:
            unverified.append({"code": "above_limit", "message": f"{name} ran at {above['ratio']:.0%} of the machine's "
                               "limit, above it beyond the noise, and the tool finds no reason: a measuring error, so "
                               "its row is not trustworthy"})
    return summary, unverified


def _limit_rows(summary: dict) -> list[dict]:
    """Every row set against the machine's limit: the ranked strategies and the repeat scenario's."""
    return summary["rows"] + (summary.get("repeat") or [])


def _row_name(row: dict) -> str:
    """A row as the warnings and notes name it: "strategy (init)", or "repeat: variant"."""
    return f"{row['strategy']} ({row['init']})" if "strategy" in row else f"repeat: {row['variant']}"


_FLOOR_METHODS = {"memset": "a parallel memset", "stores": "parallel plain stores", "nontemporal": "parallel streaming stores"}


def tables(summary: dict) -> list[Table]:
    result: list[Table] = []
    for init in INITS:
        rows = [r for r in summary["rows"] if r["init"] == init]
        limit = (summary.get("limit_by_init") or {}).get(init) or summary.get("limit_gb_per_s")
        if rows:
            caption = (f"{format_bytes(rows[0]['size_bytes'])}, {init} initialization — ranked (limit {limit:.1f} GB/s"
                       + ("; of limit: each repetition against the limit measured in its own round, median"
                          if any(r.get("limit_basis") == "same round" for r in rows) else "") + ")"
                       if limit else f"{format_bytes(rows[0]['size_bytes'])}, {init} initialization — ranked")
            result.append((caption, ["#", "strategy", "seconds", "× fastest (95 %)", "reps", "GB/s", "of limit", "faults",
                                     "huge", "first 1 %", "free s"],
                           [["reuse" if r["rank"] is None else f"{r['rank']}{' (tied)' if r.get('tied') else ''}",
                             r["strategy"] + (" ‖" if (r.get("side_by_side") or 1) > 1 else "")
                             + (" †" if r.get("measured_bytes") else ""),
                             number(r["median_s"], 3), _vs_fastest(r), _reps(r), number(r["gb_per_s"], 1),
                             _of_limit(r), number(r["faults"]),
                             "n/a" if r["huge_fraction"] is None else f"{r['huge_fraction']:.0%}",
                             "" if r["first_percent_s"] is None else f"{r['first_percent_s']:.3f} s",
                             number(r["free_s"], 3)] for r in rows]))
    fills = summary.get("fills") or []
    if fills:
        methods = [m for m in fills[0]["gb_per_s"] if m != "automatic"]
        result.append(("Fill methods: GB/s writing a 16-byte value (memset: one byte), medians of "
                       f"{fills[0]['reps']}; fresh = the fill faults the memory in; automatic = fill_method::automatic "
                       "as make_big_array runs it, measuring on slices of the memory first (included), against the "
                       "fastest in the same repetition (median of the ratios)",
                       ["memory", *methods, "faults", "fastest (16-byte value)", "automatic picks", "automatic",
                        "measuring cost"],
                       [[f["memory"], *[number(f["gb_per_s"].get(m), 1) for m in methods], number(f["faults_per_fill"]),
                         f["fastest"], _picks(f), _automatic(f),
                         "n/a" if f.get("calibration_ms") is None else
                         f"{f['calibration_ms']:.1f} ms ({f['calibration_share']:.1%} of the fill)"] for f in fills]))
    repeat = summary.get("repeat") or []
    if repeat:
        result.append((f"{format_bytes(repeat[0]['size_bytes'])} made, initialized and freed again and again (iterations: "
                       "how many; adaptive unless --reps: the ranked rows' rule, the floor as the fastest) — medians after "
                       "the first iteration; of limit: each iteration against the floor taken "
                       f"beside it (one kept array filled again by {_FLOOR_METHODS.get(repeat[0].get('floor_method'), 'memset')}, "
                       "the fastest fill method there), median",
                       ["variant", "iterations", "seconds", "GB/s", "of limit", "faults", "first iteration s"],
                       [[r["variant"] + (" †" if r.get("measured_bytes") else ""), str(r["iterations"]), number(r["median_s"], 4), number(r["gb_per_s"], 1),
                         _of_limit(r), number(r["faults_per_iteration"]), number(r["first_s"], 4)]
                        for r in repeat]))
    return result


def _vs_fastest(row: dict) -> str:
    """How sure the rank is: the row's time over the fastest's, round by round, median and 95 %
    interval; blank for the fastest, the reused rows, and rows with too few rounds to say."""
    interval = row.get("vs_fastest_interval")
    if row.get("vs_fastest") is not None and row.get("stopped") == "far behind":
        return f"{row['vs_fastest']:.2f} (far behind)"  # the ratio of medians; every repetition ≥ 3× (reps column)
    if row.get("vs_fastest") is None or not interval:
        return ""
    return f"{row['vs_fastest']:.2f} ({interval[0]:.2f}–{interval[1]:.2f})"


# How a row's repetitions ended, as the reps column says it (adaptive repetitions, probe/rounds.hpp).
_STOPPED = {"tight": "±10 %", "far behind": "≥ 3×", "most rounds": ""}


def _reps(row: dict) -> str:
    """The row's repetitions, and why they stopped where adaptive: known within ±10 %, or at least
    3 times the fastest row's median in every round (5 times when it stopped after two, 15 after
    one); nothing added at the most rounds or a fixed --reps."""
    mark = _STOPPED.get(row.get("stopped") or "most rounds", "")
    if row.get("stopped") == "far behind" and row["reps"] in (1, 2):
        mark = "≥ 15×" if row["reps"] == 1 else "≥ 5×"
    return f"{row['reps']} ({mark})" if mark else str(row["reps"])


def _of_limit(row: dict) -> str:
    """The row's share of the limit; above it beyond the noise, marked: * with its reason in the
    notes, ! without one (a warning says so)."""
    if row.get("ratio_to_limit") is None:
        return "n/a"
    above = row.get("above_limit")
    return f"{row['ratio_to_limit']:.0%}" + ("" if not above else " *" if above["reason"] else " !")


def _automatic(fill: dict) -> str:
    """Automatic's GB/s, and how far behind the fastest it was, paired repetition by repetition."""
    speed, behind = fill["gb_per_s"].get("automatic"), fill.get("automatic_behind_fastest_percent")
    if speed is None:
        return "n/a"
    return f"{speed:.1f}" if behind is None else f"{speed:.1f} ({-behind:+.1f} %)"


def _picks(fill: dict) -> str:
    """The method automatic picked, and how often when it did not pick the same every time."""
    every = fill.get("automatic_picks_all") or []
    if not fill.get("automatic_picks"):
        return "n/a"
    if len(set(every)) <= 1:
        return fill["automatic_picks"]
    return ", ".join(f"{method} ×{every.count(method)}" for method in sorted(set(every), key=every.count, reverse=True))


def _side_by_side_lines(summary: dict) -> list[str]:
    """How the one-thread rows were measured, where not one at a time, and what the check found."""
    side = summary.get("side_by_side")
    if not side:
        return []
    marked = sorted({r["strategy"] for r in summary["rows"] if (r.get("side_by_side") or 1) > 1})
    lines = [f"‖ measured side by side, up to {side['rows']} at once, each in a process of its own (its own clock, faults "
             f"and CPU; the machine's events shared): {', '.join(marked) or 'none'}"
             + ("" if side.get("asked") else f" — {side['rows']} of {side['cpus']} CPUs: at most half the CPUs, the "
                "arrays within the budget, their writing under a third of the limit")]
    check = side.get("check")
    if check:
        ratio = check["beside_s"] / check["alone_s"] if check["alone_s"] else float("nan")
        lines.append(f"side-by-side check: {check['strategy']} ({check['init']}) took {check['alone_s']:.3f} s alone and "
                     f"{check['beside_s']:.3f} s beside {len(check['rows']) - 1} other row"
                     f"{'s' if len(check['rows']) > 2 else ''} ({ratio:.2f}×): "
                     + ("within 1.10×, so the rows measured side by side are kept" if check["kept"] else
                        "over 1.10×, so that batch's side-by-side times were not kept and every row was measured alone "
                        "after it"))
    return lines


def _serial_part_lines(summary: dict) -> list[str]:
    """Which rows were measured on a part of the array and scaled, and what their check found."""
    part = summary.get("serial_part")
    marked: dict[tuple[int, int], set] = {}
    for r in summary["rows"] + (summary.get("repeat") or []):
        if r.get("measured_bytes"):
            marked.setdefault((r["size_bytes"], r["measured_bytes"]), set()).add(r.get("strategy") or r.get("variant"))
    if not part and not marked:
        return []
    lines = []
    for (size, measured), names in sorted(marked.items(), reverse=True):
        lines.append(f"† measured on the first {format_bytes(measured)} of the {format_bytes(size)} array, and scaled ×"
                     f"{size / measured:.3g} (seconds, faults, free): these rows write the array from one thread, so their "
                     f"time grows with the bytes at one thread's rate: {', '.join(sorted(names))}")
    if part:
        ratio = part["scaled_s"] / part["whole_s"] if part.get("whole_s") and part.get("scaled_s") else float("nan")
        lines.append(f"serial-part check: {part['strategy']} ({part['init']}) took {part['whole_s']:.3f} s on the whole "
                     f"array and {part['scaled_s']:.3f} s scaled from {format_bytes(part['measured_bytes'])} ({ratio:.2f}×): "
                     + (f"within {part.get('within', 1.15):.2f}×, so the rows measured on a part are kept" if part["kept"] else
                        f"beyond {part.get('within', 1.15):.2f}×, so every one-thread row after it was measured on the whole array"
                        + (" (the repeat scenario's, measured before the check, stay scaled: the check does not "
                           "support them)" if any(r.get("measured_bytes") for r in summary.get("repeat") or []) else "")))
    return lines


def notes(summary: dict) -> list[str]:
    from ..analysis.bigarray import outlier_lines, reused
    lines = outlier_lines(summary)
    estimate = summary.get("estimate")
    if estimate:
        lines.append(f"the run took {estimate['actual_s'] / 60:.1f} min; estimated at the start "
                     f"{estimate['estimated_s'] / 60:.1f} min ({estimate['ratio']:.2f}× the estimate)")
    lines += _side_by_side_lines(summary) + _serial_part_lines(summary)
    kept = sorted({r["strategy"] for r in summary["rows"] if reused(r)})
    if kept:
        lines.append(f"{', '.join(kept)}: far fewer faults than the array has pages — the allocator kept the memory an "
                     "earlier row freed and handed it out again; these rows measure reuse, not a fresh allocation, and "
                     "the headline leaves them out")
    for row in _limit_rows(summary):
        above = row.get("above_limit")
        if above and above["reason"]:
            lines.append(f"* {_row_name(row)}: {above['ratio']:.0%} of the limit: {above['reason']}")
    stopped = [r.get("stopped") for r in summary["rows"]]
    if "tight" in stopped or "far behind" in stopped:
        lines.append(f"repetitions adaptive (--reps N fixes them): {stopped.count('tight')} rows stopped once the 95 % "
                     f"interval of their time was within ±10 % (reps marked ±10 %), {stopped.count('far behind')} once "
                     "even their fastest repetition took 3 times the fastest row's median (5 times after two rounds, 15 after one; "
                     "≥ 3×), "
                     f"{stopped.count('most rounds')} ran the most rounds; `memcost compare` tests rows with 4 or more a side")
    overlapped = sum(r.get("host_reporting_overlaps_kept") or 0 for r in summary["rows"])
    if overlapped:
        lines.append(f"{overlapped} ranked repetition{'s' if overlapped > 1 else ''} of a second or more overlapped a burst "
                     "of free-page reporting to the host and were kept: the kernel reports freed memory every 2 s while "
                     "any waits, so a retake would race the next burst; interleaved rounds spread them over every row")
    retaken = summary.get("retaken_repetitions") or []
    if retaken:
        worst = max(retaken, key=lambda attempt: attempt["elapsed_s"])
        lines.append(f"{len(retaken)} ranked repetition{'s' if len(retaken) > 1 else ''} taken again: the VM handed "
                     f"64 MiB or more of free memory to its host during {'them' if len(retaken) > 1 else 'it'} (the "
                     f"worst: {worst['strategy']}, {worst['init']}, rep {worst['rep'] + 1}, {worst['elapsed_s']:.2f} s "
                     f"while {worst['host_reported_bytes'] / 2**20:,.0f} MiB went); the ranks use the retakes")
    for fill in summary.get("fills") or []:
        raced = fill.get("raced_with_host_reporting") or []
        if raced:
            worst = min(raced, key=lambda attempt: attempt["gb_per_s"])
            lines.append(f"{len(raced)} {fill['memory']}-memory fill{'s' if len(raced) > 1 else ''} taken again: the VM "
                         "handed free memory to its host during "
                         f"{'them' if len(raced) > 1 else 'it'} (free page reporting's own count; the worst: "
                         f"{worst['method']}, rep {worst['rep'] + 1}, {worst['gb_per_s']:.1f} GB/s while "
                         f"{worst['host_reported_bytes'] / 2**20:,.0f} MiB went)")
        behind = fill["picked_behind_fastest_percent"]
        # A pick within 5 % of the fastest is inside this machine's run-to-run noise.
        if behind is not None and behind > 5:
            lines.append(f"fill_method::automatic picked {fill['automatic_picks']} on {fill['memory']} memory, which "
                         f"the full fills put {behind:.0f}% behind {fill['fastest']}: its measurement on slices of the "
                         f"memory disagreed with the full fills this time ({fill.get('automatic_reason')})")
        elif (fill.get("automatic_behind_fastest_percent") or 0) > 5:
            lines.append(f"fill_method::automatic ran {fill['automatic_behind_fastest_percent']:.0f}% behind "
                         f"{fill['fastest']} on {fill['memory']} memory in the same repetitions, though it picked "
                         f"{fill['automatic_picks']}: its own measuring, or the host, slowed it")
    choice = summary.get("auto_choice")
    if not choice:
        return lines
    lines.append(f"make_big_array auto {choice['why']}")
    if choice.get("zero_fault"):
        lines.append(f"make_big_array auto faulted its fresh zero pages in by {choice['zero_fault']['method']}: "
                     f"{choice['zero_fault']['reason']}")
    for init in INITS:
        if init in choice:
            placed = choice[init]
            where = "tied with the fastest" if placed.get("tied") else f"rank {placed['rank']} of {placed['of']}"
            interval = placed.get("vs_fastest_interval")
            if placed.get("tied") and interval and interval[1] > 1.5:
                # Not shown slower, but not shown alike either: the rounds disagreed that much.
                where += (f" within this run's noise (its time over the fastest's, round by round: 95 % interval "
                          f"{interval[0]:.2f}–{interval[1]:.1f}×; a quieter run would tell them apart)")
            lines.append(f"  {init}: {where}, "
                         f"{placed['slower_than_fastest_percent']:+.0f}% against the fastest ({placed['fastest']})")
    return lines


def interpret(summary: dict) -> list[str]:
    rows = summary["rows"]
    if not rows:
        return []
    sentences = [summary["headline"][0].upper() + summary["headline"][1:] + "."]
    choice = summary.get("auto_choice")
    if choice and "zero" in choice:
        placed = choice["zero"]
        where = "was tied with the fastest" if placed.get("tied") else f"ranked {placed['rank']} of {placed['of']}"
        sentences.append(f"memcost::make_big_array {choice['why']}, and {where} for zero initialization.")
    zero = [r for r in rows if r["init"] == "zero"]
    zero_limit = (summary.get("limit_by_init") or {}).get("zero")
    if zero and zero[0].get("ratio_to_limit") is not None and zero_limit:
        sentences.append(f"The best zero initialization reached {zero[0]['ratio_to_limit']:.0%} of this machine's "
                         f"limit for writing zeros ({zero_limit:.1f} GB/s, median of the rounds: the faster of a "
                         "parallel memset and streaming stores over memory already faulted in).")
    return sentences


def _compared(sample: dict) -> Optional[tuple[tuple, list[float]]]:
    case = sample["case"]
    if case.get("part") != "strategy":
        return None
    allocator = case.get("allocator") or ""
    name = case["strategy"] + (f" ({allocator})" if allocator and allocator != "glibc" else "")
    return (name, case["init"]), [sample["metrics"]["elapsed_s"]]


def _figures(summary: dict, host: str, folder):
    from ..plots import bigarray as plots
    return plots.strategies_chart(summary, host, folder)


EXPERIMENT = Experiment(
    name="bigarray",
    title="Allocating and initializing a big array (bigarray)",
    summary="Allocate and initialize one big array by every common strategy, against the machine's limit.",
    options=OPTIONS,
    measure=measure,
    analyze=analyze,
    figures=_figures,
    tables=tables,
    notes=notes,
    interpret=interpret,
    comparison=Comparison("seconds", ("strategy", "init"), _compared),
)
