"""`scaling` summary: totals at each count, the marginal cost per call against
the number outstanding, a fit of that cost as a + b·n^k, and a verdict on how
the total grows."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

import numpy as np
from scipy import optimize, stats

# The marginal cost must not grow by more than this over the sweep for O(n).
FLAT_GROWTH = 0.25
# Growth whose whole interval stays below this is not quadratic, even when
# it cannot be told whether it is flat.
SUBQUADRATIC_GROWTH = 1.0
# A power-law rise smaller than this share of the intercept leaves k undefined.
ABOVE_INTERCEPT = 0.05
MIN_FIT_POINTS = 8
RERUN_HINT = "rerun with --reps 5"

CASE_KEYS = ("block_size_bytes", "placement", "shape", "commit")


def case_key(case: dict) -> tuple:
    return tuple(case[k] for k in CASE_KEYS)


def case_label(case: dict) -> str:
    size = case["block_size_bytes"]
    size_text = f"{size // 1024} KB" if size % 1024 == 0 and size < (1 << 20) else (
        f"{size >> 20} MB" if size % (1 << 20) == 0 else f"{size:,} B")
    return f"{size_text} {case['placement']} {case['shape']} {case['commit']}"


def linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """Least squares y = c0 + c1·x; returns c0, c1 and the 95 % interval of c1."""
    fit = stats.linregress(x, y)
    margin = float(stats.t.ppf(0.975, max(len(x) - 2, 1))) * fit.stderr
    return float(fit.intercept), float(fit.slope), float(fit.slope - margin), float(fit.slope + margin)


def marginal_points(samples: list) -> tuple[np.ndarray, np.ndarray]:
    """(n, ns per call) for each bin of consecutive calls: the median over repetitions."""
    per_bin: dict[int, list] = defaultdict(list)
    calls = samples[0]["metrics"]["bin_calls"]
    for sample in samples:
        for index, total in enumerate(sample["metrics"]["alloc_bin_ns"]):
            per_bin[index].append(total / calls)
    indexes = sorted(per_bin)
    n = np.array([(i + 0.5) * calls for i in indexes], dtype=float)
    ns = np.array([float(np.median(per_bin[i])) for i in indexes], dtype=float)
    return n, ns


def power_fit(n: np.ndarray, ns: np.ndarray, intercept: float) -> Optional[tuple[float, float, float]]:
    """k of ns = a + b·(n/N)^k by nonlinear least squares, with its 95 % interval;
    None when the data do not pin k down (no growth above the intercept)."""
    scaled = n / n.max()
    rise = max(float(ns.max()) - intercept, 1e-9)
    try:
        (a, b, k), covariance = optimize.curve_fit(
            lambda x, a, b, k: a + b * np.power(x, k), scaled, ns, p0=(intercept, rise, 1.0),
            bounds=([0.0, 0.0, 0.0], [np.inf, np.inf, 4.0]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    error = float(np.sqrt(covariance[2][2])) if np.isfinite(covariance[2][2]) else math.inf
    if not math.isfinite(error) or b <= ABOVE_INTERCEPT * intercept:
        return None
    margin = float(stats.t.ppf(0.975, max(len(n) - 3, 1))) * error
    return float(k), float(k - margin), float(k + margin)


def classify(n: np.ndarray, ns: np.ndarray, max_count: Optional[int] = None) -> dict:
    """Fit the marginal cost as a + b·n^k and say how the total grows."""
    max_count = max_count or int(n.max())
    result: dict = {"exponent_k": None, "exponent_ci": None, "marginal_growth": None, "marginal_growth_ci": None}
    if len(n) < MIN_FIT_POINTS:
        result.update(complexity="inconclusive", verdict=f"inconclusive: too few points, use more counts or {RERUN_HINT}")
        return result
    lowest = np.argsort(n)[: max(3, len(n) // 10)]
    intercept = float(np.median(ns[lowest]))
    c0, c1, c1_low, c1_high = linear_fit(n, ns)
    scale = n.max() / max(intercept, 1e-9)
    growth, growth_low, growth_high = c1 * scale, c1_low * scale, c1_high * scale
    result.update(intercept_ns=intercept, marginal_growth=growth, marginal_growth_ci=[growth_low, growth_high])

    power = power_fit(n, ns, intercept)
    if power is not None:
        result.update(exponent_k=power[0], exponent_ci=[power[1], power[2]])

    if growth_high < FLAT_GROWTH:
        # Nothing grows, so there is no exponent to speak of: a fit would only describe noise.
        result.update(exponent_k=None, exponent_ci=None)
        result.update(complexity="O(n)",
                      verdict=f"O(n): the next call costs about the same at {max_count:,} outstanding as at the start "
                              f"({intercept / 1000:.1f} µs; growth {growth:+.0%}, 95 % interval {growth_low:+.0%} to "
                              f"{growth_high:+.0%})")
    elif growth_low >= FLAT_GROWTH and result["exponent_ci"] is not None:
        k_low, k_high = result["exponent_ci"]
        k_text = f"k = {result['exponent_k']:.2f}, 95 % interval {k_low:.2f} to {k_high:.2f}"
        if 0.7 <= k_low and k_high <= 1.3:
            result.update(complexity="O(n²)", verdict=f"O(n²): each call costs more the more are outstanding ({k_text})")
        elif k_low > 1.3:
            result.update(complexity="worse than O(n²)",
                          verdict=f"worse than O(n²): the cost per call grows faster than the count ({k_text})")
        elif k_high < 0.6:
            result.update(complexity="O(n log n)",
                          verdict=f"O(n log n): the cost per call grows slowly with the count ({k_text})")
        else:
            result.update(complexity="inconclusive",
                          verdict=f"inconclusive: the cost grows, but no class fits ({k_text}); {RERUN_HINT}")
    elif growth_high < SUBQUADRATIC_GROWTH:
        # The verdict rests on the growth interval; k of a rise this small would mislead.
        result.update(exponent_k=None, exponent_ci=None)
        result.update(complexity="≤ O(n log n)",
                      verdict=f"at most O(n log n): the next call costs {growth:+.0%} more at {max_count:,} outstanding "
                              f"(95 % interval {growth_low:+.0%} to {growth_high:+.0%}), far from quadratic; "
                              f"{RERUN_HINT} to tell O(n) from O(n log n)")
    else:
        result.update(complexity="inconclusive", verdict=f"inconclusive: spread too wide, {RERUN_HINT}")
    return result


def summarize(samples: list) -> dict:
    groups: dict[tuple, list] = defaultdict(list)
    for sample in samples:
        groups[case_key(sample["case"])].append(sample)
    cases = []
    for key, group in groups.items():
        case = dict(zip(CASE_KEYS, key))
        counts = min((s["metrics"]["counts"] for s in group), key=len)
        alloc = [float(np.median([s["metrics"]["alloc_total_ns"][i] for s in group])) / 1e9 for i in range(len(counts))]
        free = [float(np.median([s["metrics"]["free_total_ns"][i] for s in group])) / 1e9 for i in range(len(counts))]
        mappings = next((s["metrics"]["mappings"] for s in group if s["metrics"].get("mappings")), None)
        n, ns = marginal_points(group)
        fit = classify(n, ns, counts[-1] if counts else None)
        tail = ns[-max(1, len(ns) // 16):]
        cases.append({
            **case,
            "label": case_label(case),
            "reps": len(group),
            "max_count": counts[-1] if counts else 0,
            "counts": counts,
            "alloc_total_s": alloc,
            "free_total_s": free,
            "alloc_total_s_at_max": alloc[-1] if alloc else None,
            "free_total_s_at_max": free[-1] if free else None,
            "marginal_n": n.tolist(),
            "marginal_ns": ns.tolist(),
            "marginal_ns_at_max": float(np.median(tail)),
            "mappings": mappings,
            "mappings_at_max": mappings[-1] if mappings else None,
            "hint_misses": max(s["metrics"]["hint_misses"] for s in group),
            **fit,
        })
    cases.sort(key=lambda c: (c["block_size_bytes"], c["placement"], c["shape"], c["commit"]))
    return {"cases": cases, "headline": headline(cases)}


def headline(cases: list[dict]) -> Optional[str]:
    if not cases:
        return None
    classes = sorted({c["complexity"] for c in cases})
    if classes == ["O(n)"]:
        slowest = max(cases, key=lambda c: c["marginal_ns_at_max"])
        return (f"allocation is O(n) here in all {len(cases)} cases: at {cases[0]['max_count']:,} outstanding a call "
                f"still costs ≤ {slowest['marginal_ns_at_max'] / 1000:.1f} µs")
    counts = {cls: sum(1 for c in cases if c["complexity"] == cls) for cls in classes}
    return "allocation scaling here: " + ", ".join(f"{cls} in {count} case{'s' if count > 1 else ''}"
                                                   for cls, count in counts.items())


def csv_rows(samples: list) -> list[dict]:
    """The raw sweep, one row per count, case and repetition (seconds)."""
    rows = []
    for sample in samples:
        m = sample["metrics"]
        for i, count in enumerate(m["counts"]):
            rows.append({"count": count, **{k: sample["case"][k] for k in CASE_KEYS}, "rep": sample["case"]["rep"],
                         "alloc_s": m["alloc_total_ns"][i] / 1e9,
                         "free_s": m["free_total_ns"][i] / 1e9 if i < len(m["free_total_ns"]) else None,
                         "mappings": m["mappings"][i] if m.get("mappings") else None})
    return rows
