"""`bigarray` summary: every strategy against the machine's limit, ranked."""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

import numpy as np

AUTO = "make_big_array auto"


def row_name(case: dict) -> str:
    """The strategy, with the allocator it ran on when that is not plain glibc."""
    allocator = case.get("allocator") or ""
    return case["strategy"] + (f" ({allocator})" if allocator and allocator != "glibc" else "")


def summarize(samples: list) -> dict:
    limits = [s["metrics"]["gb_per_s"] for s in samples if s["case"]["part"] == "limit"]
    limit = float(np.median(limits)) if limits else None
    groups: dict[tuple, list] = defaultdict(list)
    for sample in samples:
        if sample["case"]["part"] == "strategy":
            groups[(row_name(sample["case"]), sample["case"]["init"])].append(sample)
    rows = []
    for (name, init), group in groups.items():
        metrics = [s["metrics"] for s in group]
        size = group[0]["case"]["size_bytes"]
        median_s = float(np.median([m["elapsed_s"] for m in metrics]))
        gb_per_s = size / median_s / 1e9 if median_s > 0 else None
        huge = [m["huge_fraction"] for m in metrics if m.get("huge_fraction") is not None]
        first = [m["first_percent_s"] for m in metrics if "first_percent_s" in m]
        rows.append({
            "strategy": name, "init": init, "allocator": group[0]["case"].get("allocator") or None,
            "family": group[0]["case"]["family"], "size_bytes": size, "reps": len(group),
            "median_s": median_s, "gb_per_s": gb_per_s,
            "ratio_to_limit": gb_per_s / limit if gb_per_s and limit else None,
            "faults": _median_count([m["minor_faults"] for m in metrics]),
            "huge_fraction": float(np.median(huge)) if huge else None,
            "first_percent_s": float(np.median(first)) if first else None,
            "free_s": float(np.median([m["free_s"] for m in metrics])),
            "system_s": float(np.median([m["system_s"] for m in metrics])),
            "verified": all(m["verified"] for m in metrics),
        })
    rows.sort(key=lambda r: (r["init"] != "zero", r["median_s"]))
    for init in ("zero", "value"):
        for rank, row in enumerate((r for r in rows if r["init"] == init), start=1):
            row["rank"] = rank
    return {"limit_gb_per_s": limit, "rows": rows, "auto_choice": auto_choice(samples, rows),
            "repeat": summarize_repeat(samples, limit), "fills": summarize_fills(samples, limit),
            "headline": headline(rows)}


def _median_count(counts: list) -> Optional[float]:
    """The median of fault counts; None when the OS counted none (Wine writes null)."""
    measured = [count for count in counts if count is not None]
    return float(np.median(measured)) if measured and len(measured) == len(counts) else None


def summarize_fills(samples: list, limit: Optional[float]) -> list[dict]:
    """Per kind of memory (fresh: the fill faults it in; faulted: filled again): each fill
    method's median GB/s, the fastest that can write a value of varied bytes (memset writes one
    byte; it is there for reference), and what fill_method::automatic picks for such a value."""
    by_memory: dict[str, dict[str, list[float]]] = {}
    picks: dict[str, str] = {}
    faults: dict[str, list[float]] = {}
    for sample in samples:
        case = sample["case"]
        if case["part"] != "fill":
            continue
        by_memory.setdefault(case["memory"], {}).setdefault(case["method"], []).append(sample["metrics"]["gb_per_s"])
        faults.setdefault(case["memory"], []).append(sample["metrics"]["minor_faults"])  # None: not counted
        picks[case["memory"]] = sample["metrics"]["automatic_picks"]
    result = []
    for memory, methods in by_memory.items():
        medians = {method: float(np.median(values)) for method, values in methods.items()}
        varied = {method: speed for method, speed in medians.items() if method != "memset"}
        fastest = max(varied, key=varied.get)
        picked = picks[memory]
        result.append({"memory": memory, "gb_per_s": medians, "reps": min(len(v) for v in methods.values()),
                       "ratio_to_limit": {m: v / limit for m, v in medians.items()} if limit else None,
                       "fastest": fastest, "automatic_picks": picked,
                       "picked_behind_fastest_percent": 100.0 * (medians[fastest] / medians[picked] - 1.0)
                       if medians.get(picked) else None,
                       "faults_per_fill": _median_count(faults[memory])})
    return result


def summarize_repeat(samples: list, limit: Optional[float]) -> list[dict]:
    """Per variant of the repeat scenario: the iterations after the first (the first pays for
    whatever is not yet cached or pooled), their median time, GB/s, share of the limit, faults."""
    result = []
    for sample in samples:
        if sample["case"]["part"] != "repeat":
            continue
        times = sample["metrics"]["iteration_ns"][1:] or sample["metrics"]["iteration_ns"]
        faults = sample["metrics"]["iteration_faults"][1:] or sample["metrics"]["iteration_faults"]
        median_s = float(np.median(times)) / 1e9
        # The floor measured just before this variant: 1.0 is as fast as filling one kept array again.
        floor_s = float(np.median(sample["metrics"]["floor_ns"])) / 1e9
        size = sample["case"]["size_bytes"]
        gb_per_s = size / median_s / 1e9 if median_s > 0 else None
        result.append({"variant": sample["case"]["variant"], "size_bytes": size,
                       "iterations": sample["case"]["iterations"], "median_s": median_s, "gb_per_s": gb_per_s,
                       "ratio_to_limit": gb_per_s / limit if gb_per_s and limit else None,
                       "faults_per_iteration": _median_count(faults),
                       "floor_s": floor_s, "times_floor": median_s / floor_s,
                       "first_s": sample["metrics"]["iteration_ns"][0] / 1e9})
    return result


def auto_choice(samples: list, rows: list[dict]) -> Optional[dict]:
    """What make_big_array's automatic ladder chose and why, and how it placed."""
    chosen = next((s["metrics"] for s in samples
                   if s["case"]["part"] == "strategy" and s["case"]["strategy"] == AUTO), None)
    if chosen is None:
        return None
    result = {"page_kind": chosen.get("auto_choice"), "fallbacks": chosen.get("auto_fallbacks", [])}
    for init in ("zero", "value"):
        ranked = [r for r in rows if r["init"] == init]
        auto = next((r for r in ranked if r["strategy"] == AUTO), None)
        if auto and ranked:
            fastest = ranked[0]
            result[init] = {"rank": auto["rank"], "of": len(ranked), "fastest": fastest["strategy"],
                            "slower_than_fastest_percent": 100.0 * (auto["median_s"] / fastest["median_s"] - 1.0)}
    why = "; ".join(result["fallbacks"]) if result["fallbacks"] else "the first rung of the ladder was available"
    result["why"] = f"chose {result['page_kind']}: {why}"
    return result


def headline(rows: list[dict]) -> Optional[str]:
    zero = [r for r in rows if r["init"] == "zero"]
    if not zero:
        return None
    fastest = zero[0]
    vector = next((r for r in zero if r["strategy"] == "std::vector"), None)
    size_gib = fastest["size_bytes"] / (1 << 30)
    text = f"fastest {size_gib:g} GiB zero-init: {fastest['median_s']:.2f} s via {fastest['strategy']}"
    if vector and vector is not fastest:
        text += f", {vector['median_s'] / fastest['median_s']:.0f}× faster than std::vector"
    return text
