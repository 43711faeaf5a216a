"""Comparing runs: per experiment, the same measure from each run, its ratio to
the first run with a bootstrap confidence interval, and whether the difference
stands out from noise. A row is flagged only when (1) Welch's t-test on the
logarithms of the raw samples (differences on a ratio scale) says so after
Holm's correction over all the rows of that comparison,
so that a dozen rows do not buy a dozen chances of a false alarm, and (2) the
whole 95 % interval of the ratio lies beyond the noise floor: runs of the same
settings on one machine drift apart by more than their own within-run spread
shows (NOISE_FLOOR)."""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

import numpy as np
from scipy import stats

from ..results import machine_label


ALPHA = 0.05
# Two same-settings runs on a 2-vCPU KVM guest a minute apart differed by up to ≈ 1.15× in a row
# (host state, memory the hypervisor took back): a ratio inside ±20 % is not called a difference.
NOISE_FLOOR = 0.20
BOOTSTRAP_RESAMPLES = 2000
# Below 4 samples a side, a run's own spread is too poorly known to test against.
MIN_SAMPLES = 4

def samples_by_key(document: dict) -> dict[tuple, list[float]]:
    """Each comparable row's raw values, as the experiment's declaration (experiments/) extracts them."""
    from ..experiments import REGISTRY
    comparison = REGISTRY[document["experiment"]].comparison
    if comparison.rows_of:
        return comparison.rows_of(document)
    values: dict[tuple, list[float]] = defaultdict(list)
    for sample in document["samples"]:
        found = comparison.values_of(sample)
        if found:
            values[found[0]].extend(found[1])
    return values


def ratio_interval(first: list[float], other: list[float], seed: int = 0) -> Optional[tuple[float, float]]:
    """95 % percentile-bootstrap interval of median(other) / median(first), resampling each run's
    raw samples (fixed seed: the same inputs always give the same interval)."""
    a, b = np.asarray(first, dtype=float), np.asarray(other, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    medians_a = np.median(rng.choice(a, size=(BOOTSTRAP_RESAMPLES, len(a))), axis=1)
    medians_b = np.median(rng.choice(b, size=(BOOTSTRAP_RESAMPLES, len(b))), axis=1)
    valid = medians_a != 0
    if not valid.any():
        return None
    ratios = medians_b[valid] / medians_a[valid]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def difference(first: list[float], other: list[float], untested: Optional[str] = None) -> dict:
    """Ratio, its interval, the raw p-value of `other` against `first`, and `significant` as if
    this were the only row (holm_flags decides again over all the rows of a comparison)."""
    a, b = np.asarray(first, dtype=float), np.asarray(other, dtype=float)
    median_a, median_b = float(np.median(a)), float(np.median(b))
    interval = ratio_interval(first, other)
    result = {"ratio": median_b / median_a if median_a else None, "ratio_low": interval[0] if interval else None,
              "ratio_high": interval[1] if interval else None, "p_value": None, "significant": None}
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        result["note"] = untested or f"too few samples to tell (need {MIN_SAMPLES} per run: rerun with --reps {MIN_SAMPLES})"
        return result
    result["p_value"] = welch_p_value(a, b)
    holm_flags([result])  # alone, a family of one; compare_experiment decides again over all rows
    return result


def welch_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Welch t-test, on logarithms when every value is positive (run-to-run noise is
    multiplicative). Not Mann–Whitney: with five samples a side its smallest possible p (0.008)
    could never pass Holm's threshold over a few dozen rows, so nothing could ever be flagged."""
    if (a > 0).all() and (b > 0).all():
        a, b = np.log(a), np.log(b)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] == b[0] else 0.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def beyond_noise_floor(result: dict, floor: float = NOISE_FLOOR) -> bool:
    """The whole interval of the ratio lies outside [1 / (1 + floor), 1 + floor]."""
    if result["ratio_low"] is None:
        return False
    return result["ratio_low"] > 1 + floor or result["ratio_high"] < 1 / (1 + floor)


def holm_flags(results: list[dict], floor: float = NOISE_FLOOR) -> None:
    """Set `significant` on each result of one comparison: Holm–Bonferroni over the rows' p-values
    (family-wise error ≤ ALPHA), and beyond the noise floor. Rows that cannot be tested stay None."""
    tested = sorted((r for r in results if r["p_value"] is not None), key=lambda r: r["p_value"])
    rejecting, adjusted = True, 0.0
    for rank, result in enumerate(tested):
        # Holm: the k-th smallest p-value is held to ALPHA / (m - k); after the first that fails, none pass.
        rejecting = rejecting and result["p_value"] < ALPHA / (len(tested) - rank)
        adjusted = max(adjusted, min(1.0, result["p_value"] * (len(tested) - rank)))
        result["p_adjusted"] = adjusted
        result["significant"] = bool(rejecting and beyond_noise_floor(result, floor))


def compare_experiment(name: str, documents: list[dict]) -> dict:
    from ..experiments import REGISTRY
    comparison = REGISTRY[name].comparison
    measure, key_names = comparison.measure, comparison.key_names
    per_run = [samples_by_key(document) for document in documents]
    keys = [key for key in per_run[0] if all(key in run for run in per_run[1:])]
    rows = []
    for key in keys:
        medians = [float(np.median(run[key])) for run in per_run]
        rows.append({**dict(zip(key_names, key)), "medians": medians, "samples": [len(run[key]) for run in per_run],
                     "versus_first": [difference(per_run[0][key], run[key], comparison.untested) for run in per_run[1:]]})
    for column in range(len(per_run) - 1):
        holm_flags([row["versus_first"][column] for row in rows])
    only_some = sorted({str(key) for run in per_run for key in run} - {str(key) for key in keys})
    return {"measure": measure, "key": list(key_names), "rows": rows, "not_in_every_run": only_some}


def compare(runs: list[dict[str, dict]], names: list[str]) -> dict:
    """`runs`: per run, its documents by experiment."""
    experiments = {}
    missing = []
    from ..experiments import REGISTRY
    for experiment in (name for name, declared in REGISTRY.items() if declared.comparison):
        present = [run.get(experiment) for run in runs]
        if all(present):
            experiments[experiment] = compare_experiment(experiment, present)
        elif any(present):
            have = [name for name, document in zip(names, present) if document]
            missing.append(f"{experiment}: only in {', '.join(have)}, not compared")
    return {"runs": names, "experiments": experiments, "missing": missing,
            "machines": [machine_label(next(iter(run.values()))["context"]) for run in runs]}
