"""scaling: how allocation cost grows with the number of outstanding allocations
(docs/scaling.md; src/probe/experiments/scaling.cpp; analysis/scaling.py; plots/scaling.py)."""

from __future__ import annotations

import argparse
from typing import Optional

from .. import exit_codes
from .. import arguments
from ..units import format_bytes
from .base import Comparison, Experiment, Option, Table, comma_list, number
from .shared import budget_option, finish

SHAPES = ["mergeable", "distinct"]
COMMITS = ["reserve", "commit"]
PLACEMENTS = ["default", "top-down", "bottom-up", "legacy"]
PRESETS = ["dawson2011", "fastmm2019"]


def count_list(text: str) -> list[int]:
    """Comma-separated whole numbers of blocks, each at least 1."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items or not all(item.isdigit() and int(item) > 0 for item in items):
        raise argparse.ArgumentTypeError(f"'{text}': counts are whole numbers of blocks, at least 1, e.g. 1000,2000,4000")
    return sorted({int(item) for item in items})


OPTIONS = [
    Option("counts", "outstanding counts (default 4000,8000,...,64000; capped below vm.max_map_count)",
           quick=[2000 * step for step in range(1, 17)], parse=count_list, metavar="LIST", to_probe=comma_list, set_by_preset=True),
    Option("block_sizes", "block sizes (default 64K,264752,1M)", quick=[64 << 10, 1 << 20], parse=arguments.size_list, metavar="LIST", to_probe=comma_list, set_by_preset=True),
    Option("placements", "default, bottom-up, legacy (Linux); default, top-down (Windows)",
           parse=arguments.choice_list(PLACEMENTS), metavar="LIST", to_probe=comma_list, set_by_preset=True),
    Option("shapes", "mergeable, distinct (default both)", parse=arguments.choice_list(SHAPES),
           metavar="LIST", to_probe=comma_list, set_by_preset=True),
    Option("commits", "reserve, commit (default both)", parse=arguments.choice_list(COMMITS),
           metavar="LIST", to_probe=comma_list, set_by_preset=True),
    Option("reps", "sweeps per case (default 2; --quick 1)", quick=1, parse=arguments.positive_int),
    Option("preset", "a seed's sweep exactly: dawson2011 (64 KB blocks, 1,000..64,000, top-down and not) or "
                     "fastmm2019 (264,752-byte blocks, 1..6,000, top vs bottom); sets counts, block sizes, "
                     "placements, shapes and commits itself", choices=PRESETS),
    budget_option(),
]


def _runs(values: dict) -> list[tuple[list[str], list[str]]]:
    """(global probe flags, placements) per probe process: the legacy layout needs a probe of its own.
    A preset chooses its placements in the probe (they depend on the OS)."""
    if values.get("preset"):
        return [([], None)]
    placements = values["placements"] or ["default", "bottom-up", "legacy"]
    ordinary = [p for p in placements if p != "legacy"]
    runs = [([], ordinary)] if ordinary else []
    if "legacy" in placements:
        runs.append((["--legacy-layout"], ["legacy"]))
    return runs


def measure(values: dict, directory) -> dict:
    from ..errors import MemcostError
    from ..probe import ProbeFailed
    from ..runner import run_with_progress
    samples, warnings, context, settings = [], [], None, None
    for global_flags, placements in _runs(values):
        try:
            run = run_with_progress("scaling", EXPERIMENT.probe_arguments({**values, "placements": placements}),
                                    f"scaling ({', '.join(placements or [values['preset']])})",
                                    global_arguments=global_flags)
        except ProbeFailed as error:
            # The legacy layout is an extra; the rest of the sweep stands without it.
            if global_flags and error.exit_code == exit_codes.UNSUPPORTED and not values["placements"]:
                warnings.append({"code": "legacy_layout_unavailable", "message": error.message})
                continue
            raise
        samples += run.samples
        warnings += [w for w in run.warnings if w not in warnings]
        context = context or run.context
        settings = settings or run.settings
    if not any(sample["metrics"].get("counts") for sample in samples):
        reason = warnings[0]["message"] if warnings else "the probe returned no sweep"
        raise MemcostError(f"no case could allocate even one block ({reason}): use smaller --block-sizes",
                           exit_codes.NOT_ENOUGH_MEMORY)
    summary, _ = analyze(samples)
    return finish(EXPERIMENT, context, {**values, "probe_settings": settings}, samples, summary, warnings, directory)


def analyze(samples: list) -> tuple[dict, list]:
    """A case whose first block already failed measured nothing; its warning says why."""
    from ..analysis import scaling as analysis  # numpy and scipy load only when measuring
    from ..errors import MemcostError
    measured = [sample for sample in samples if sample["metrics"].get("counts")]
    if not measured:
        raise MemcostError("no sweep in these samples measured even one block", exit_codes.NOT_ENOUGH_MEMORY)
    return analysis.summarize(measured), []


def tables(summary: dict) -> list[Table]:
    headings = ["block", "placement", "shape", "commit", "alloc s at max", "free s at max", "µs/call at max", "k",
                "mappings", "class"]
    rows = [[format_bytes(c["block_size_bytes"]), c["placement"], c["shape"], c["commit"],
             number(c["alloc_total_s_at_max"], 3), number(c["free_total_s_at_max"], 3),
             number(c["marginal_ns_at_max"] / 1000, 2),
             "—" if c["exponent_k"] is None else f"{c['exponent_k']:.2f} [{c['exponent_ci'][0]:.2f}, {c['exponent_ci'][1]:.2f}]",
             number(c["mappings_at_max"]), _class_with_size(c)] for c in summary["cases"]]
    return [(f"Scaling to {max((c['max_count'] for c in summary['cases']), default=0):,} outstanding blocks", headings, rows)]


def _class_with_size(case: dict) -> str:
    """The class, and for a growing one its size: the whole sweep against flat calls."""
    if case["complexity"] in ("O(n)", "inconclusive") or not case.get("sweep_cost_ratio_ci"):
        return case["complexity"]
    from ..analysis import scaling as analysis
    size = "large" if analysis.worth_changing(case) else "small"
    return f"{case['complexity']}, {size}: sweep {case['sweep_cost_ratio']:.2f}×"


def notes(summary: dict) -> list[str]:
    return [f"{case['label']}: {case['verdict']}" for case in summary["cases"]]


def interpret(summary: dict) -> list[str]:
    from ..analysis import scaling as analysis
    cases = summary["cases"]
    if not cases:
        return []
    sentences = [summary["headline"][0].upper() + summary["headline"][1:] + "."]
    merge = [c["marginal_ns_at_max"] for c in cases if c["shape"] == "mergeable"]
    distinct = [c["marginal_ns_at_max"] for c in cases if c["shape"] == "distinct"]
    if merge and distinct:
        ratio = (sum(distinct) / len(distinct)) / (sum(merge) / len(merge))
        sentences.append(f"Blocks that cannot merge into their neighbours' mappings cost {100 * (ratio - 1):.0f} % more "
                         "per call and each one counts against vm.max_map_count.")
    superlinear = [c for c in cases if c["complexity"] not in ("O(n)", "O(n log n)", "inconclusive")]
    costly = [c for c in superlinear if analysis.worth_changing(c)]
    small = [c for c in superlinear if not analysis.worth_changing(c)]
    if costly:
        worst = max(costly, key=lambda c: c["sweep_cost_ratio"])
        low, high = worst["sweep_cost_ratio_ci"]
        sentences.append(f"In {len(costly)} case(s) each call costs more the more are outstanding (total "
                         f"{', '.join(sorted({c['complexity'] for c in costly}))}), and it adds up: the sweep of "
                         f"{worst['label']} cost {worst['sweep_cost_ratio']:.2f}× what flat calls would have (95 % "
                         f"interval {low:.2f}× to {high:.2f}×): avoid that placement for many allocations.")
    if small:
        most = max(c["sweep_cost_ratio_ci"][1] for c in small)
        sentences.append(f"In {len(small)} case(s) a call costs a little more the more are outstanding (total "
                         f"{', '.join(sorted({c['complexity'] for c in small}))}), but the whole sweep cost at most "
                         f"{most:.2f}× what flat calls would have: not worth changing the placement for.")
    unclear = [c for c in cases if c["complexity"] == "inconclusive"]
    if unclear:
        sentences.append(f"{len(unclear)} case(s) are inconclusive: their per-call times fit more than one shape; "
                         "more sweeps (--reps 5) tell them apart.")
    return sentences


def _compared(sample: dict) -> Optional[tuple[tuple, list[float]]]:
    case, m = sample["case"], sample["metrics"]
    # The sweep's length is part of the key: bin i covers other counts in a longer or shorter sweep.
    key = (case["block_size_bytes"], case["placement"], case["shape"], case["commit"], m["reached"])
    return key, [total / m["bin_calls"] for total in m["alloc_bin_ns"]]


def _compare_curves(runs: list, names: list, out):
    from ..plots import compare  # matplotlib loads only when drawing
    return compare.scaling_curves(runs, names, out)


def _figures(summary: dict, host: str, folder):
    from ..plots import scaling as plots
    return (plots.totals_grid(summary["cases"], host, folder) + plots.totals_together(summary["cases"], host, folder)
            + plots.marginal(summary["cases"], host, folder))


EXPERIMENT = Experiment(
    name="scaling",
    title="Allocation cost against outstanding allocations (scaling)",
    summary="Measure how allocation cost grows with the number of outstanding allocations.",
    options=OPTIONS,
    measure=measure,
    analyze=analyze,
    figures=_figures,
    tables=tables,
    notes=notes,
    interpret=interpret,
    comparison=Comparison("ns per allocation call", ("block_size_bytes", "placement", "shape", "commit", "count"),
                          _compared, figures=lambda comparison, runs, names, out: _compare_curves(runs, names, out)),
)
