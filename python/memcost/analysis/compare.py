"""Comparing runs: per experiment, the same measure from each run, its ratio to
the first run, and whether the difference stands out from the runs' own spread
(Mann–Whitney U on the raw samples, and a difference of medians larger than
half the wider interquartile range)."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Optional

import numpy as np
from scipy import stats

MB = 1 << 20
ALPHA = 0.05
# Below 4 samples a side, a two-sided Mann–Whitney test cannot reach p < 0.05 at all.
MIN_SAMPLES = 4

# For each experiment: what identifies a comparable row, and the measure compared.
Extractor = Callable[[dict], Optional[tuple[tuple, float]]]


def _costs(sample: dict) -> Optional[tuple[tuple, float]]:
    case, m = sample["case"], sample["metrics"]
    if case.get("part") != "rows" or case.get("warmup"):
        return None
    mb = case["size_bytes"] / MB
    return (case["page"], case["route"], case["size_bytes"]), (m["first_touch_ns"] - m["second_touch_ns"]) / 1e3 / mb


def _bigarray(sample: dict) -> Optional[tuple[tuple, float]]:
    case = sample["case"]
    if case.get("part") != "strategy":
        return None
    allocator = case.get("allocator") or ""
    name = case["strategy"] + (f" ({allocator})" if allocator and allocator != "glibc" else "")
    return (name, case["init"]), sample["metrics"]["elapsed_s"]


def _scaling_values(sample: dict) -> tuple[tuple, list[float]]:
    case, m = sample["case"], sample["metrics"]
    key = (case["block_size_bytes"], case["placement"], case["shape"], case["commit"])
    return key, [total / m["bin_calls"] for total in m["alloc_bin_ns"]]


MEASURES = {
    "costs": ("fault µs/MB", ("page", "route", "size_bytes")),
    "scaling": ("ns per allocation call", ("block_size_bytes", "placement", "shape", "commit")),
    "bigarray": ("seconds", ("strategy", "init")),
}


def samples_by_key(document: dict) -> dict[tuple, list[float]]:
    values: dict[tuple, list[float]] = defaultdict(list)
    for sample in document["samples"]:
        if document["experiment"] == "scaling":
            key, bins = _scaling_values(sample)
            values[key].extend(bins)
            continue
        extractor = {"costs": _costs, "bigarray": _bigarray}.get(document["experiment"])
        found = extractor(sample) if extractor else None
        if found:
            values[found[0]].append(found[1])
    return values


def difference(first: list[float], other: list[float]) -> dict:
    """Whether `other` differs from `first` by more than their own spread."""
    a, b = np.asarray(first), np.asarray(other)
    median_a, median_b = float(np.median(a)), float(np.median(b))
    result = {"ratio": median_b / median_a if median_a else None, "p_value": None, "significant": None}
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        result["note"] = f"too few samples to tell (need {MIN_SAMPLES} per run: rerun with --reps {MIN_SAMPLES})"
        return result
    p_value = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    spread = max(np.subtract(*np.percentile(a, [75, 25])), np.subtract(*np.percentile(b, [75, 25])))
    result["p_value"] = p_value
    result["significant"] = bool(p_value < ALPHA and abs(median_b - median_a) > spread / 2)
    return result


def compare_experiment(name: str, documents: list[dict]) -> dict:
    measure, key_names = MEASURES[name]
    per_run = [samples_by_key(document) for document in documents]
    keys = [key for key in per_run[0] if all(key in run for run in per_run[1:])]
    rows = []
    for key in keys:
        medians = [float(np.median(run[key])) for run in per_run]
        rows.append({**dict(zip(key_names, key)), "medians": medians, "samples": [len(run[key]) for run in per_run],
                     "versus_first": [difference(per_run[0][key], run[key]) for run in per_run[1:]]})
    only_some = sorted({str(key) for run in per_run for key in run} - {str(key) for key in keys})
    return {"measure": measure, "key": list(key_names), "rows": rows, "not_in_every_run": only_some}


def compare(runs: list[dict[str, dict]], names: list[str]) -> dict:
    """`runs`: per run, its documents by experiment."""
    experiments = {}
    missing = []
    for experiment in MEASURES:
        present = [run.get(experiment) for run in runs]
        if all(present):
            experiments[experiment] = compare_experiment(experiment, present)
        elif any(present):
            have = [name for name, document in zip(names, present) if document]
            missing.append(f"{experiment}: only in {', '.join(have)}, not compared")
    return {"runs": names, "experiments": experiments, "missing": missing,
            "machines": [next(iter(run.values()))["context"].get("host", "") for run in runs]}
