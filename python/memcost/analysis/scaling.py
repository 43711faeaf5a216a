"""`scaling` summary: totals at each count, the marginal cost per call against
the number outstanding, models of that cost compared (constant, log n, n^k,
flat-then-linear), and a verdict on how one call and the total grow."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from scipy import optimize, stats

# Models of the cost of one call against the number outstanding are compared by
# BIC. A growing class is printed only when its model beats every model that
# implies another class by at least this much ("strong" evidence on the usual
# scale); otherwise the verdict is "inconclusive" and names the rivals. The
# constant model, when it fits best, must also bound the growth it could hide.
CLEAR_MARGIN_BIC = 6.0
MIN_FIT_POINTS = 8
RERUN_HINT = "rerun with --reps 5"
# A power law's exponent names a class only when its 95 % interval is this narrow.
EXPONENT_WIDTH = 0.5
# Total classes for per-call exponents whose whole interval lies within ±0.25 of them.
NAMED_EXPONENTS = {1.0: "O(n²)", 2.0: "O(n³)"}
# Below this exponent a power law cannot be told from log n over a sweep: both are "slow growth".
SLOW_EXPONENT = 0.25
# "Constant" also needs precision: the growth over the sweep must be known to within ±this.
FLAT_TOLERANCE = 0.25

# A class is a shape; its size is what the whole sweep cost against the same number of calls at the
# first calls' cost. Below this ratio (its interval's upper end) growth is said to be small, and the
# summary advises no change of placement for it: a start-up 1,000× slower and a sweep 8 % dearer
# are not the same finding.
WORTH_CHANGING_SWEEP = 1.25

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


@dataclass
class Model:
    """One fitted shape of the per-call cost, with the total class it implies."""
    name: str          # constant, logarithmic, power, knee
    parameters: int
    rss: float         # residual sum of squares, ns²
    per_call: str      # how one call's cost grows, in words
    complexity: str    # how the total of n calls grows
    extra: dict = field(default_factory=dict)

    def bic(self, points: int) -> float:
        return points * math.log(max(self.rss, 1e-12) / points) + self.parameters * math.log(points)


def _rss(residuals: np.ndarray) -> float:
    return float(np.sum(np.square(residuals)))


def _constant(n: np.ndarray, ns: np.ndarray) -> Model:
    return Model("constant", 1, _rss(ns - ns.mean()), "constant", "O(n)")


def _logarithmic(n: np.ndarray, ns: np.ndarray) -> Optional[Model]:
    _, slope, low, _ = linear_fit(np.log(n), ns)
    if low <= 0:
        return None  # no growth the data support: the constant model says the same with fewer parameters
    intercept = float(np.mean(ns) - slope * np.mean(np.log(n)))
    return Model("logarithmic", 2, _rss(ns - intercept - slope * np.log(n)), "grows as log n", "O(n log n)")


def _power_complexity(k_low: float, k_high: float) -> str:
    if k_high <= SLOW_EXPONENT:
        return "O(n log n)"
    if k_high - k_low > EXPONENT_WIDTH:
        return "inconclusive"
    for exponent, name in NAMED_EXPONENTS.items():
        if exponent - 0.25 <= k_low and k_high <= exponent + 0.25:
            return name
    return f"O(n^{1 + k_low:.2f}…n^{1 + k_high:.2f})"


def _power(n: np.ndarray, ns: np.ndarray) -> Optional[Model]:
    """ns = a + b·(n/N)^k, with k's 95 % interval from the fit's covariance."""
    scaled = n / n.max()
    lowest = float(np.median(ns[np.argsort(n)[: max(3, len(n) // 10)]]))
    rise = max(float(ns.max()) - lowest, 1e-9)
    try:
        (a, b, k), covariance = optimize.curve_fit(
            lambda x, a, b, k: a + b * np.power(x, k), scaled, ns, p0=(lowest, rise, 1.0),
            bounds=([-np.inf, 0.0, 0.0], [np.inf, np.inf, 4.0]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    t = float(stats.t.ppf(0.975, max(len(n) - 3, 1)))
    b_error, k_error = (float(np.sqrt(covariance[i][i])) for i in (1, 2))
    if not (math.isfinite(k_error) and math.isfinite(b_error)) or b - t * b_error <= 0:
        return None  # no rise the data support
    k_low, k_high = max(float(k - t * k_error), 0.0), float(k + t * k_error)
    residuals = ns - (a + b * np.power(scaled, k))
    return Model("power", 3, _rss(residuals), f"grows as n^{k:.2f} (95 % interval {k_low:.2f} to {k_high:.2f})",
                 _power_complexity(k_low, k_high), {"exponent_k": float(k), "exponent_ci": [k_low, k_high]})


def _knee(n: np.ndarray, ns: np.ndarray, block_size_bytes: int) -> Optional[Model]:
    """Flat to n0, then linear: ns = a + s·max(n - n0, 0), n0 searched over the points. The knee
    must leave a tenth of the points on either side: a few slow bins at one end are not a shape."""
    best = None
    margin = max(3, len(n) // 10)
    for n0 in n[margin:-margin]:
        x = np.maximum(n - n0, 0.0)
        design = np.column_stack([np.ones_like(n), x])
        (a, slope), *_ = np.linalg.lstsq(design, ns, rcond=None)
        if slope <= 0:
            continue
        rss = _rss(ns - a - slope * x)
        if best is None or rss < best[0]:
            best = (rss, float(n0), float(a), float(slope))
    if best is None:
        return None
    rss, n0, a, slope = best
    # The slope must be supported on its own: a t-test on the points past the knee.
    past = n > n0
    if past.sum() < 3:
        return None
    _, fitted_slope, low, _ = linear_fit(n[past] - n0, ns[past])
    if low <= 0:
        return None
    megabytes = n0 * block_size_bytes / (1 << 20)
    return Model("knee", 3, rss, f"flat to n ≈ {n0:,.0f} (≈ {megabytes:,.0f} MB), then linear",
                 "O(n²)", {"knee_n": n0, "knee_bytes": int(n0 * block_size_bytes)})


def fit_models(n: np.ndarray, ns: np.ndarray, block_size_bytes: int = 0) -> list[Model]:
    models = [_constant(n, ns), _logarithmic(n, ns), _power(n, ns), _knee(n, ns, block_size_bytes)]
    return [m for m in models if m is not None]


def classify(n: np.ndarray, ns: np.ndarray, max_count: Optional[int] = None, block_size_bytes: int = 0) -> dict:
    """Compare models of the per-call cost and say how one call and the total grow."""
    max_count = max_count or int(n.max())
    result: dict = {"model": None, "per_call": None, "exponent_k": None, "exponent_ci": None, "knee_n": None,
                    "knee_bytes": None, "marginal_growth": None, "marginal_growth_ci": None, "models_bic": {}}
    if len(n) < MIN_FIT_POINTS:
        result.update(complexity="inconclusive", verdict=f"inconclusive: too few points, use more counts or {RERUN_HINT}")
        return result
    intercept = float(np.median(ns[np.argsort(n)[: max(3, len(n) // 10)]]))
    _, c1, c1_low, c1_high = linear_fit(n, ns)
    scale = n.max() / max(intercept, 1e-9)
    result.update(intercept_ns=intercept, marginal_growth=c1 * scale, marginal_growth_ci=[c1_low * scale, c1_high * scale])
    # The sweep's size: its calls' mean cost (the bins are equal runs of calls) against the first
    # calls' cost; the interval is the slope's, over the mean call (half-way through the sweep).
    sweep = float(np.mean(ns)) / max(intercept, 1e-9)
    half_way = float(np.mean(n)) / max(intercept, 1e-9)
    result.update(sweep_cost_ratio=sweep,
                  sweep_cost_ratio_ci=[sweep + (c1_low - c1) * half_way, sweep + (c1_high - c1) * half_way])

    models = fit_models(n, ns, block_size_bytes)
    scores = {m.name: m.bic(len(n)) for m in models}
    result["models_bic"] = {name: round(score, 1) for name, score in scores.items()}
    best = min(models, key=lambda m: scores[m.name])
    growth = (f"the next call costs {result['marginal_growth']:+.0%} at {max_count:,} outstanding against the start "
              f"(95 % interval {c1_low * scale:+.0%} to {c1_high * scale:+.0%})")
    if best.name == "constant":
        # The simplest model fits best; the linear growth interval says how much growth it could still hide.
        if c1_high * scale >= FLAT_TOLERANCE:
            result.update(complexity="inconclusive",
                          verdict=f"inconclusive: no growth stands out of the noise, but {growth} allows more than "
                                  f"+{FLAT_TOLERANCE:.0%}; {RERUN_HINT}")
            return result
        if c1_low * scale > 0:
            result.update(complexity="inconclusive",
                          verdict=f"inconclusive: one call grows a little ({growth}) but no model of growth fits "
                                  f"clearly better than a constant; {RERUN_HINT}")
            return result
    else:
        rivals = [m for m in models
                  if m.complexity != best.complexity and scores[m.name] - scores[best.name] < CLEAR_MARGIN_BIC]
        if best.complexity == "inconclusive" or rivals:
            options = "; ".join(f"{m.name}: per call {m.per_call}, total {m.complexity}" for m in [best] + rivals)
            result.update(complexity="inconclusive", per_call=best.per_call, **best.extra,
                          verdict=f"inconclusive: the data do not tell these apart ({options}); {RERUN_HINT}")
            return result
    result.update(model=best.name, per_call=best.per_call, complexity=best.complexity, **best.extra)
    first = intercept / 1000
    if best.name == "constant":
        verdict = f"O(n): one call costs the same throughout ({first:.1f} µs; {growth})"
    elif best.name == "knee":
        verdict = f"{best.complexity} beyond the knee, {sweep_size(result)}: one call's cost is {best.per_call} ({growth})"
    else:
        verdict = f"{best.complexity}, {sweep_size(result)}: one call's cost {best.per_call}, from {first:.1f} µs ({growth})"
    result["verdict"] = verdict
    return result


def sweep_size(case: dict) -> str:
    """A class's size in words: small or large, and what the whole sweep cost against flat calls."""
    low, high = case["sweep_cost_ratio_ci"]
    size = "small" if not worth_changing(case) else "large"
    return (f"{size} (the whole sweep cost {case['sweep_cost_ratio']:.2f}× what as many calls at the first calls' "
            f"cost would have, 95 % interval {low:.2f}× to {high:.2f}×)")


def worth_changing(case: dict) -> bool:
    """Whether a growing case costs enough that avoiding it saves a user something worth the change:
    its sweep's interval reaches WORTH_CHANGING_SWEEP."""
    interval = case.get("sweep_cost_ratio_ci")
    return bool(interval) and interval[1] >= WORTH_CHANGING_SWEEP


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
        fit = classify(n, ns, counts[-1] if counts else None, case["block_size_bytes"])
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
