"""Two or three plain sentences per experiment, generated from its numbers."""

from __future__ import annotations

from typing import Optional


from ..analysis.derived import largest_os_row as _largest


def costs(summary: dict) -> list[str]:
    sentences = []
    base = _largest(summary["rows"], "base")
    if base:
        share = 100 * base["fault_us_per_mb"] / base["total_us_per_mb"] if base["total_us_per_mb"] else 0
        sentences.append(
            f"First touch is the expensive part here: {base['fault_us_per_mb']:.0f} µs per MB on base pages "
            f"({share:.0f} % of the {base['total_us_per_mb']:.0f} µs/MB total), while a timer around allocate and "
            f"free alone sees {100 - base['missed_percent']:.2f} % of it.")
        huge = [r for r in (_largest(summary["rows"], p) for p in ("thp", "hugetlb-2M", "hugetlb-1G")) if r]
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
        sentences.append(summary["shootdowns_verdict"][0].upper() + summary["shootdowns_verdict"][1:] + ".")
    sentences.extend(note[0].upper() + note[1:] + "." for note in summary.get("elsewhere_notes", []))
    if summary.get("idle_verdict") and "more to fault in" in summary["idle_verdict"]:
        sentences.append(summary["idle_verdict"][0].upper() + summary["idle_verdict"][1:] + ".")
    return sentences


def scaling(summary: dict) -> list[str]:
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
    if superlinear:
        sentences.append(f"In {len(superlinear)} case(s) each call costs more the more are outstanding (total "
                         f"{', '.join(sorted({c['complexity'] for c in superlinear}))}): avoid that placement for many "
                         "allocations.")
    unclear = [c for c in cases if c["complexity"] == "inconclusive"]
    if unclear:
        sentences.append(f"{len(unclear)} case(s) are inconclusive: their per-call times fit more than one shape; "
                         "more sweeps (--reps 5) tell them apart.")
    return sentences


def bigarray(summary: dict) -> list[str]:
    rows = summary["rows"]
    if not rows:
        return []
    sentences = [summary["headline"][0].upper() + summary["headline"][1:] + "."]
    choice = summary.get("auto_choice")
    if choice and "zero" in choice:
        sentences.append(f"memcost::make_big_array {choice['why']}, and ranked {choice['zero']['rank']} of "
                         f"{choice['zero']['of']} for zero initialization.")
    zero = [r for r in rows if r["init"] == "zero"]
    if zero and summary.get("limit_gb_per_s"):
        sentences.append(f"The best zero initialization reached {zero[0]['ratio_to_limit']:.0%} of this machine's "
                         f"limit ({summary['limit_gb_per_s']:.1f} GB/s, a parallel memset of memory already faulted in).")
    return sentences


def trace(summary: dict) -> list[str]:
    sentences = [f"{' '.join(summary['totals'].get('command', []))}: {summary['headline']}."
                 if summary["totals"].get("command") else summary["headline"] + "."]
    for row in summary["rows"]:
        sentences += [f"At {row['site']}: {item['text']}." for item in row["advice"]]
    return sentences


INTERPRETERS = {"costs": costs, "scaling": scaling, "bigarray": bigarray, "trace": trace}


def interpret(document: dict) -> list[str]:
    interpreter = INTERPRETERS.get(document["experiment"])
    return interpreter(document["summary"]) if interpreter else []
