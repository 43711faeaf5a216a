"""`costs` summary: medians and spreads per page kind × route × size, the
reuse-vs-reallocate comparison, and first-touch scaling with threads."""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from ..stats import spread
from .derived import MB, fault_us_per_mb, largest_os_row
from ..units import format_bytes

PAGE_ORDER = ["base", "thp", "hugetlb-2M", "hugetlb-1G"]
ROUTE_ORDER = ["os", "malloc", "new"]
ROW_FIELDS = ["alloc_us", "free_us", "first_touch_us_per_mb", "second_touch_us_per_mb", "fault_us_per_mb",
              "free_after_touch_us_per_mb", "elsewhere_us_per_mb", "total_us_per_mb", "naive_us", "faults_per_mb",
              "huge_fraction"]
# Below this share of huge pages a huge-page row did not really run on huge pages.
HUGE_FRACTION_EXPECTED = 0.5
# "Elsewhere" worth explaining: rows above this get who took it and whether one repetition did.
ELSEWHERE_NOTABLE_US_PER_MB = 5.0
# A row whose elsewhere time came this much from one repetition depends on what ran around it.
ONE_REPETITION_SHARE = 0.5
# /proc/stat counts steal in USER_HZ ticks, 100 a second on every Linux memcost runs on.
STEAL_TICK_NS = 10_000_000


def _per_sample(case: dict, m: dict) -> dict:
    """The row's figures for one repetition; None where the probe could not measure."""
    mb = case["size_bytes"] / MB
    first = m["first_touch_ns"] / 1e3 / mb
    second = m["second_touch_ns"] / 1e3 / mb
    free_after = m["free_after_touch_ns"] / 1e3 / mb
    # With the parts apart, the per-sample figure is the nanosecond-exact schedstat part only;
    # tick-granular steal is added once per row, summed over all its repetitions.
    if "elsewhere_tasks_ns" in m:
        elsewhere = max(m["elsewhere_tasks_ns"] - m["elsewhere_tasks_baseline_ns"], 0.0) / 1e3 / mb
    else:
        elsewhere = m["elsewhere_ns"] / 1e3 / mb if m.get("elsewhere_ns") is not None else None
    alloc_us = m["alloc_ns"] / 1e3
    fault = fault_us_per_mb(case, m)
    return {
        "alloc_us": alloc_us,
        "free_us": m["free_ns"] / 1e3,
        "first_touch_us_per_mb": first,
        "second_touch_us_per_mb": second,
        "fault_us_per_mb": fault,
        "free_after_touch_us_per_mb": free_after,
        "elsewhere_us_per_mb": elsewhere,
        # What allocating costs beyond using the memory: the call, the faults
        # (first write minus an ordinary write), the free, and work elsewhere.
        "total_us_per_mb": alloc_us / mb + fault + free_after + (elsewhere or 0.0),
        "naive_us": (m["alloc_ns"] + m["free_ns"]) / 1e3,
        # None where the OS counts no faults (Wine): unmeasured, never 0.
        "faults_per_mb": None if m["first_touch_minor_faults"] is None else m["first_touch_minor_faults"] / mb,
        "huge_fraction": m.get("huge_fraction"),
    }


def _measured(samples: list, part: str) -> list:
    return [s for s in samples if s["case"].get("part") == part and not s["case"].get("warmup")]


def summarize_rows(samples: list) -> list[dict]:
    groups: dict[tuple, list] = defaultdict(list)
    for sample in _measured(samples, "rows"):
        case = sample["case"]
        groups[(case["page"], case["route"], case["size_bytes"])].append(sample)
    rows = []
    for (page, route, size), group in groups.items():
        figures = [_per_sample(s["case"], s["metrics"]) for s in group]
        row: dict = {"page": page, "route": route, "size_bytes": size, "reps": len(group)}
        row["spread"] = {}
        for field in ROW_FIELDS:
            result = spread(f[field] for f in figures)
            row[field] = result.median if result else None
            if result:
                row["spread"][field] = result.as_dict()
        row["elsewhere_clamped"] = sum(1 for s in group if s["metrics"].get("elsewhere_clamped"))
        row["elsewhere_method"] = group[0]["metrics"].get("elsewhere_method")
        row.update(explain_elsewhere(group, row))  # adds the row's steal to its total
        row["missed_percent"] = missed_percent(row["naive_us"], row["total_us_per_mb"] * size / MB)
        rows.append(row)
    rows.sort(key=lambda r: (PAGE_ORDER.index(r["page"]) if r["page"] in PAGE_ORDER else 99,
                             ROUTE_ORDER.index(r["route"]) if r["route"] in ROUTE_ORDER else 99, r["size_bytes"]))
    return rows


def missed_percent(naive_us: float, total_us: float) -> Optional[float]:
    """The share of the total a timer around allocate and free alone does not see. Where the
    allocator recycles a block (no faults, nothing elsewhere) the two time the same calls, and the
    naive median can come out a little above the total (a free of a block never touched against
    one touched): that timer missed nothing, 0, never a negative share."""
    if total_us <= 0:
        return None
    return max(0.0, 100.0 * (1.0 - naive_us / total_us))


def explain_elsewhere(group: list, row: dict) -> dict:
    """Steal summed over the row's repetitions (it comes in 10 ms ticks), who took
    the time elsewhere, and whether one repetition carried most of it."""
    metrics = [s["metrics"] for s in group]
    total_mb = sum(s["case"]["size_bytes"] for s in group) / MB
    result: dict = {"elsewhere_tasks_us_per_mb": row["elsewhere_us_per_mb"], "elsewhere_steal_us_per_mb": None,
                    "elsewhere_steal_resolution_us_per_mb": None, "elsewhere_by": [], "elsewhere_one_repetition": None}
    if not all("elsewhere_steal_ns" in m for m in metrics) or total_mb <= 0:
        return result
    steal = sum(m["elsewhere_steal_ns"] - m["elsewhere_steal_baseline_ns"] for m in metrics) / 1e3 / total_mb
    result["elsewhere_steal_us_per_mb"] = max(steal, 0.0)
    # One tick more or less over all the row's repetitions moves the figure by this much.
    result["elsewhere_steal_resolution_us_per_mb"] = STEAL_TICK_NS / 1e3 / total_mb
    if row["elsewhere_us_per_mb"] is not None:
        row["elsewhere_us_per_mb"] += result["elsewhere_steal_us_per_mb"]
        row["total_us_per_mb"] += result["elsewhere_steal_us_per_mb"]
    # Who ran: each top task's share of all the run time other tasks and steal took in
    # the windows (gross, before the idle baseline is taken off: the baseline has no names).
    by_name: dict[str, float] = defaultdict(float)
    for m in metrics:
        for task in m.get("elsewhere_top_tasks", []):
            by_name[task["name"]] += task["ns"]
    steal_ns = sum(m["elsewhere_steal_ns"] for m in metrics)
    if steal_ns:
        by_name["steal (hypervisor)"] = steal_ns
    gross = sum(m.get("elsewhere_tasks_ns", 0) for m in metrics) + steal_ns
    if gross > 0:
        result["elsewhere_by"] = [{"name": name, "share": value / gross}
                                  for name, value in sorted(by_name.items(), key=lambda item: -item[1])[:4]]
    # Each repetition's own share of the time elsewhere (tasks and steal, net of baseline):
    # a notable figure that one repetition carried depends on what ran around that moment.
    gains = [max(m.get("elsewhere_tasks_ns", 0) - m.get("elsewhere_tasks_baseline_ns", 0), 0.0)
             + max(m["elsewhere_steal_ns"] - m["elsewhere_steal_baseline_ns"], 0.0) for m in metrics]
    if len(gains) >= 3 and sum(gains) > 0 and (row["elsewhere_us_per_mb"] or 0) >= ELSEWHERE_NOTABLE_US_PER_MB:
        largest = max(range(len(gains)), key=gains.__getitem__)
        share = gains[largest] / sum(gains)
        if share >= ONE_REPETITION_SHARE:
            result["elsewhere_one_repetition"] = {"rep": group[largest]["case"]["rep"],
                                                  "sequence": group[largest]["case"].get("sequence"), "share": share}
    return result


def elsewhere_notes(rows: list[dict]) -> list[str]:
    """One line per row with notable time elsewhere: who took it, and whether one repetition did."""
    notes = []
    for row in rows:
        if (row.get("elsewhere_us_per_mb") or 0) < ELSEWHERE_NOTABLE_US_PER_MB or not row.get("elsewhere_by"):
            continue
        who = ", ".join(f"{e['name']} {e['share']:.0%}" for e in row["elsewhere_by"])
        text = (f"{row['page']} {row['route']} {format_bytes(row['size_bytes'])}: elsewhere "
                f"{row['elsewhere_us_per_mb']:.1f} µs/MB; who ran meanwhile: {who}")
        if row.get("elsewhere_steal_us_per_mb"):
            text += (f"; steal {row['elsewhere_steal_us_per_mb']:.1f} µs/MB, counted in 10 ms ticks over all "
                     f"repetitions: ±{row['elsewhere_steal_resolution_us_per_mb']:.1f} µs/MB per tick")
        one = row.get("elsewhere_one_repetition")
        if one:
            text += (f"; {one['share']:.0%} of it came in one repetition (#{one['rep']}), so it depends on what ran "
                     "around that moment, not on the allocation: measure the row alone to check")
        notes.append(text)
    return notes


def summarize_shootdowns(samples: list) -> list[dict]:
    """The free of a written buffer alone against the same free while other
    threads of the process still run on the other CPUs: TLB-shootdown
    interrupts counted, and what they cost the CPUs that receive them."""
    groups: dict[str, list] = defaultdict(list)
    for sample in _measured(samples, "shootdowns"):
        groups[sample["case"]["mode"]].append(sample)
    result = []
    for mode in ("single", "threads"):
        group = groups.get(mode)
        if not group:
            continue
        mb = group[0]["case"]["size_bytes"] / MB
        free = spread(s["metrics"]["free_after_touch_ns"] / 1e3 / mb for s in group)
        counts = [s["metrics"]["tlb_shootdowns"] for s in group if s["metrics"].get("tlb_shootdowns") is not None]
        shootdowns = spread(counts)
        per_shootdown = spread(s["metrics"]["remote_ns_per_shootdown"] for s in group
                               if s["metrics"].get("remote_ns_per_shootdown") is not None)
        entry = {"mode": mode, "threads": group[0]["case"]["threads"], "size_bytes": group[0]["case"]["size_bytes"],
                 "reps": len(group), "free_after_touch_us_per_mb": free.median,
                 "shootdowns": shootdowns.median if shootdowns else None,
                 "shootdowns_per_mb": shootdowns.median / mb if shootdowns else None,
                 "remote_ns_per_shootdown": per_shootdown.median if per_shootdown else None,
                 "spread": {"free_after_touch_us_per_mb": free.as_dict()}}
        entry["remote_us_per_mb"] = (entry["shootdowns_per_mb"] * entry["remote_ns_per_shootdown"] / 1e3
                                     if entry["shootdowns_per_mb"] is not None and entry["remote_ns_per_shootdown"]
                                     else None)
        result.append(entry)
    return result


def shootdowns_verdict(entries: list[dict]) -> Optional[str]:
    by_mode = {e["mode"]: e for e in entries}
    threads, single = by_mode.get("threads"), by_mode.get("single")
    if not threads or threads["shootdowns"] is None:
        return None
    text = (f"freeing {format_bytes(threads['size_bytes'])} that {threads['threads']} threads wrote sent "
            f"{threads['shootdowns']:.0f} TLB-shootdown interrupts to the other CPUs")
    if single and single["shootdowns"] is not None:
        text += f" ({single['shootdowns']:.0f} when one thread wrote and freed it)"
    if threads["remote_ns_per_shootdown"]:
        text += (f"; each costs a receiving CPU about {threads['remote_ns_per_shootdown'] / 1e3:.1f} µs, "
                 f"{threads['remote_us_per_mb']:.2f} µs/MB in all")
    return text


def row_warnings(rows: list[dict]) -> list[dict]:
    """What the rows themselves show to be off: huge-page rows that ran on base pages."""
    warnings = []
    for row in rows:
        if row["page"] == "base" or row["huge_fraction"] is None:
            continue
        if row["huge_fraction"] < HUGE_FRACTION_EXPECTED:
            if row["faults_per_mb"] is not None and row["faults_per_mb"] < 1:
                why = ("the allocator recycled memory the process already had (no faults), so the page kind "
                       "could not apply")
            else:
                why = ("the block is not huge-page aligned, or the kernel fell back to base pages; "
                       "check THP defrag and free memory")
            warnings.append({
                "code": "not_on_huge_pages",
                "message": f"{row['page']} {row['route']} {format_bytes(row['size_bytes'])}: only "
                           f"{row['huge_fraction']:.0%} of the buffer was on huge pages, so this row mostly measures "
                           f"base pages: {why}"})
    return warnings


def _frame_path(faults: list[int], pages_per_frame: int) -> list[dict]:
    """Runs of frames that got fresh pages from the kernel (a fault per page)
    or recycled memory the process already had (almost no faults)."""
    runs: list[dict] = []
    for index, count in enumerate(faults, start=1):
        kind = "fresh" if count >= pages_per_frame / 2 else "recycled"
        if runs and runs[-1]["kind"] == kind:
            runs[-1]["last_frame"] = index
            runs[-1]["faults"].append(count)
        else:
            runs.append({"kind": kind, "first_frame": index, "last_frame": index, "faults": [count]})
    for run in runs:
        counts = run.pop("faults")
        run["faults_per_frame"] = sorted(counts)[len(counts) // 2]
    return runs


def describe_path(runs: list[dict]) -> str:
    parts = []
    for run in runs:
        frames = (f"frame {run['first_frame']}" if run["first_frame"] == run["last_frame"]
                  else f"frames {run['first_frame']}–{run['last_frame']}")
        what = "fresh pages from the kernel" if run["kind"] == "fresh" else "recycled memory"
        parts.append(f"{frames}: {what} ({run['faults_per_frame']:,} faults/frame)")
    return "; ".join(parts)


def summarize_reuse(samples: list, page_bytes: int = 4096) -> Optional[dict]:
    reuse = [s for s in samples if s["case"].get("part") == "reuse"]
    if not reuse:
        return None
    frame_bytes = reuse[0]["case"]["frame_bytes"]
    frames = reuse[0]["metrics"]["frames"]
    pages = frame_bytes // page_bytes
    routes = {}
    for route in sorted({s["case"]["route"] for s in reuse}, key=lambda r: ROUTE_ORDER.index(r) if r in ROUTE_ORDER else 99):
        result: dict = {}
        for mode in ("reallocate", "reuse"):
            group = sorted((s for s in reuse if s["case"]["route"] == route and s["case"]["mode"] == mode),
                           key=lambda s: s["case"]["rep"])
            per_frame = spread(s["metrics"]["total_ns"] / 1e3 / s["metrics"]["frames"] for s in group)
            faults = spread(None if None in s["metrics"]["frame_minor_faults"]
                            else sum(s["metrics"]["frame_minor_faults"]) / s["metrics"]["frames"] for s in group)
            result[f"{mode}_us_per_frame"] = per_frame.median if per_frame else None
            result[f"{mode}_faults_per_frame"] = faults.median if faults else None
            if mode == "reallocate" and group and None not in group[0]["metrics"]["frame_minor_faults"]:
                # The first rep starts from the process's fresh allocator state.
                runs = _frame_path(group[0]["metrics"]["frame_minor_faults"], pages)
                result["path"] = runs
                result["path_text"] = describe_path(runs)
        if result.get("reuse_us_per_frame"):
            result["ratio"] = result["reallocate_us_per_frame"] / result["reuse_us_per_frame"]
        routes[route] = result
    return {"frame_bytes": frame_bytes, "frames": frames, "routes": routes}


def summarize_threads(samples: list) -> list[dict]:
    groups: dict[int, list] = defaultdict(list)
    for sample in _measured(samples, "threads"):
        groups[sample["case"]["threads"]].append(sample)
    result = []
    for threads in sorted(groups):
        group = groups[threads]
        mb = group[0]["case"]["size_bytes"] / MB
        first = spread(s["metrics"]["first_touch_ns"] / 1e3 / mb for s in group)
        second = spread(s["metrics"]["second_touch_ns"] / 1e3 / mb for s in group)
        fault = spread((s["metrics"]["first_touch_ns"] - s["metrics"]["second_touch_ns"]) / 1e3 / mb for s in group)
        result.append({"threads": threads, "size_bytes": group[0]["case"]["size_bytes"], "reps": len(group),
                       "first_touch_us_per_mb": first.median, "second_touch_us_per_mb": second.median,
                       "fault_us_per_mb": fault.median, "spread": {"fault_us_per_mb": fault.as_dict()}})
    if result:
        single = result[0]["first_touch_us_per_mb"]
        for entry in result:
            entry["speedup"] = single / entry["first_touch_us_per_mb"] if entry["first_touch_us_per_mb"] else None
    return result


def threads_verdict(threads: list[dict]) -> Optional[str]:
    """Do faults scale with threads, or serialize in the kernel?"""
    if len(threads) < 2:
        return None
    top = threads[-1]
    efficiency = top["speedup"] / top["threads"]
    if efficiency >= 0.7:
        return f"first touch scales: {top['threads']} threads fault {top['speedup']:.1f}× faster than one"
    if top["speedup"] < 1.3:
        return f"first touch serializes: {top['threads']} threads are only {top['speedup']:.1f}× faster than one"
    return f"first touch scales partly: {top['threads']} threads are {top['speedup']:.1f}× faster than one"


def summarize_idle(samples: list) -> list[dict]:
    """Fault cost of memory reused at once ("hot") against memory that sat free
    for idle_seconds first ("cold"), per page kind."""
    groups: dict[str, list] = defaultdict(list)
    for sample in samples:
        if sample["case"].get("part") == "idle":
            groups[sample["case"]["page"]].append(sample)
    result = []
    for page in sorted(groups, key=lambda p: PAGE_ORDER.index(p) if p in PAGE_ORDER else 99):
        group = groups[page]
        mb = group[0]["case"]["size_bytes"] / MB
        hot = spread((s["metrics"]["hot_first_touch_ns"] - s["metrics"]["hot_second_touch_ns"]) / 1e3 / mb for s in group)
        cold = spread((s["metrics"]["cold_first_touch_ns"] - s["metrics"]["cold_second_touch_ns"]) / 1e3 / mb
                      for s in group)
        result.append({"page": page, "size_bytes": group[0]["case"]["size_bytes"], "reps": len(group),
                       "idle_seconds": group[0]["case"]["idle_seconds"], "hot_fault_us_per_mb": hot.median,
                       "cold_fault_us_per_mb": cold.median,
                       "ratio": cold.median / hot.median if hot.median > 0 else None,
                       "spread": {"hot_fault_us_per_mb": hot.as_dict(), "cold_fault_us_per_mb": cold.as_dict()}})
    return result


def idle_verdict(idle: list[dict]) -> Optional[str]:
    """Whether memory left free costs more to fault in again (a hypervisor reclaiming it)."""
    worst = max((entry for entry in idle if entry["ratio"]), key=lambda e: e["ratio"], default=None)
    if worst is None:
        return None
    if worst["ratio"] >= 1.5:
        return (f"memory left free for {worst['idle_seconds']:g} s costs {worst['ratio']:.1f}× more to fault in again "
                f"({worst['page']}: {worst['cold_fault_us_per_mb']:.0f} vs {worst['hot_fault_us_per_mb']:.0f} µs/MB): "
                "something below the kernel (a hypervisor reclaiming free memory) takes it back")
    return f"memory left free for {worst['idle_seconds']:g} s costs no more to fault in than memory reused at once"


def summarize(samples: list) -> dict:
    rows = summarize_rows(samples)
    threads = summarize_threads(samples)
    idle = summarize_idle(samples)
    shootdowns = summarize_shootdowns(samples)
    return {"rows": rows, "elsewhere_notes": elsewhere_notes(rows), "reuse": summarize_reuse(samples),
            "threads": threads, "threads_verdict": threads_verdict(threads), "idle": idle,
            "idle_verdict": idle_verdict(idle), "shootdowns": shootdowns,
            "shootdowns_verdict": shootdowns_verdict(shootdowns)}


def headline(summary: dict) -> Optional[str]:
    """One sentence: first-touch fault cost on base pages against huge pages, at the largest size."""
    def largest(page: str) -> Optional[dict]:
        return largest_os_row(summary["rows"], page)
    base = largest("base")
    if not base:
        return None
    text = f"first touch costs {base['fault_us_per_mb']:.0f} µs/MB on base pages"
    huge = [r for r in (largest("thp"), largest("hugetlb-2M"), largest("hugetlb-1G")) if r]
    if huge:
        text += ", " + ", ".join(f"{r['fault_us_per_mb']:.0f} on {r['page']}" for r in huge)
    return text + f" ({format_bytes(base['size_bytes'])} buffers)"
