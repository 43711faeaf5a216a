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


def machine_limit(samples: list) -> tuple[Optional[float], Optional[str]]:
    """The fastest way this machine writes memory already faulted in: the parallel memset of the
    limit part, or the fastest method of the fill table on faulted memory (streaming stores skip
    the read-for-ownership and beat memset here), whichever median is higher; and which it was."""
    limits = [s["metrics"]["gb_per_s"] for s in samples if s["case"]["part"] == "limit"]
    candidates = {"parallel memset": float(np.median(limits))} if limits else {}
    faulted: dict[str, list[float]] = {}
    for sample in samples:
        case = sample["case"]
        if case["part"] == "fill" and case.get("memory") == "faulted" and case["method"] != "automatic":
            faulted.setdefault(case["method"], []).append(sample["metrics"]["gb_per_s"])
    for method, values in faulted.items():
        candidates[f"parallel {method} fill"] = float(np.median(values))
    if not candidates:
        return None, None
    best = max(candidates, key=candidates.get)
    return candidates[best], best


def round_limits(samples: list) -> dict[tuple[str, str, int], float]:
    """The limit measured at the start of each round of the ranked strategies: (the run's label,
    init, round) -> GB/s. An allocator's rows run in a probe of their own, with its own rounds."""
    return {(s["case"].get("label", "glibc"), s["case"]["init"], s["case"]["rep"]): s["metrics"]["gb_per_s"]
            for s in samples if s["case"]["part"] == "round_limit" and s["metrics"]["gb_per_s"] > 0}


def _same_round_ratios(group: list, limits: dict[tuple[str, str, int], float]) -> list[float]:
    """Each repetition's GB/s over its own round's limit (empty where rounds had no limit: results
    from before every run measured them). A libc row carries its run's label as its allocator; the
    OS's rows carry none and ran in the main run ("glibc")."""
    ratios = []
    for sample in group:
        label = sample["case"].get("allocator") or "glibc"
        limit = limits.get((label, sample["case"]["init"], sample["case"].get("rep", 0)))
        elapsed = sample["metrics"]["elapsed_s"]
        if limit and elapsed > 0:
            ratios.append(sample["case"]["size_bytes"] / elapsed / 1e9 / limit)
    return ratios


def above_limit(row: dict, reuse_explains: bool = True, noise_ceiling: float = 1.0) -> Optional[dict]:
    """A row faster than the machine's limit, beyond the noise, and why: its reason when the tool
    can name one, else None as the reason (a measuring bug, said so). None when it is not above.
    With its samples' ratios (per round, or per iteration), "beyond the noise" is the 95 % bootstrap
    interval of their median lying above 1; without them, the median above 1. `reuse_explains`:
    False where writing memory already faulted is what the limit itself measures (the repeat
    scenario's rows), so an allocator's reuse is no reason there. `noise_ceiling`: where the method
    has a measured resolution (the repeat floor against itself), the ratio must be above it too."""
    from ..stats import bootstrap_median_interval
    ratio = row.get("ratio_to_limit")
    threshold = max(1.0, noise_ceiling)
    if ratio is None or ratio <= threshold:
        return None
    samples = row.get("ratio_to_limit_samples") or []
    if len(samples) >= TIE_MIN_ROUNDS and bootstrap_median_interval(samples, seed=len(samples))[0] <= threshold:
        return None
    if reuse_explains and reused(row):
        reason = ("its allocator handed back memory the process already had (far fewer faults than the array has "
                  "pages): nothing was faulted in, and an allocator may skip clearing memory it knows is still zero")
    else:
        reason = None
    return {"ratio": ratio, "reason": reason}


# What a repetition measured on a part of the array (a serial row above --serial-part: the probe's
# strategy_rounds.cpp, "A serial row on a part") grows in proportion to the bytes written: scaled to
# the whole array by the sample's scaled_by, what was measured kept under "measured".
SCALED_METRICS = ("elapsed_s", "free_s", "system_s", "user_s", "minor_faults")


def scaled_to_whole(samples: list) -> list:
    """The samples with each strategy repetition or repeat iteration made on a part scaled to the
    whole array."""
    out = []
    for sample in samples:
        part = sample["case"].get("part")
        metrics = sample.get("metrics") or {}
        scale = metrics.get("scaled_by") if part in ("strategy", "repeat") else None
        if part == "repeat" and scale:
            scaled = {"iteration_ns": [t * scale for t in metrics["iteration_ns"]],
                      "iteration_faults": [None if f is None else round(f * scale) for f in metrics["iteration_faults"]]}
            out.append({**sample, "metrics": {**metrics, **scaled, "measured": {k: metrics[k] for k in scaled}}})
            continue
        if part != "strategy" or not scale:
            out.append(sample)
            continue
        scaled = {name: (round(metrics[name] * scale) if name == "minor_faults" else metrics[name] * scale)
                  for name in SCALED_METRICS if metrics.get(name) is not None}
        out.append({**sample, "metrics": {**metrics, **scaled,
                                          "measured": {name: metrics[name] for name in scaled}}})
    return out


def fastest_median_s(samples: list, init: str) -> Optional[float]:
    """The fastest row's median seconds for `init` among these samples' strategy rows."""
    times: dict[str, list[float]] = defaultdict(list)
    for sample in scaled_to_whole(samples):
        case = sample["case"]
        if case["part"] == "strategy" and case["init"] == init:
            times[row_name(case)].append(sample["metrics"]["elapsed_s"])
    medians = [float(np.median(values)) for values in times.values() if values]
    return min(medians) if medians else None


def settled_rows(samples: list) -> dict[tuple[str, str], dict]:
    """(row, init) -> why its repetitions stopped (adaptive repetitions: "tight", "far behind",
    "most rounds"; --reps N: "most rounds") and after how many rounds."""
    return {(row_name(s["case"]), s["case"]["init"]): {"reason": s["metrics"]["reason"], "rounds": s["case"]["rounds"]}
            for s in samples if s["case"]["part"] == "settled"}


def summarize(samples: list) -> dict:
    samples = scaled_to_whole(samples)
    limit, limit_method = machine_limit(samples)
    round_limits_ = round_limits(samples)
    groups: dict[tuple, list] = defaultdict(list)
    for sample in samples:
        if sample["case"]["part"] == "strategy":
            groups[(row_name(sample["case"]), sample["case"]["init"])].append(sample)
    settled = settled_rows(samples)
    rows = []
    for (name, init), group in groups.items():
        metrics = [s["metrics"] for s in group]
        size = group[0]["case"]["size_bytes"]
        median_s = float(np.median([m["elapsed_s"] for m in metrics]))
        gb_per_s = size / median_s / 1e9 if median_s > 0 else None
        huge = [m["huge_fraction"] for m in metrics if m.get("huge_fraction") is not None]
        first = [m["first_percent_s"] for m in metrics if "first_percent_s" in m]
        same_round = _same_round_ratios(group, round_limits_)
        rows.append({
            "strategy": name, "init": init, "allocator": group[0]["case"].get("allocator") or None,
            "family": group[0]["case"]["family"], "size_bytes": size, "reps": len(group),
            "median_s": median_s, "gb_per_s": gb_per_s,
            "ratio_to_limit": (float(np.median(same_round)) if same_round
                               else gb_per_s / limit if gb_per_s and limit else None),
            "limit_basis": "same round" if same_round else "run" if limit else None,
            "ratio_to_limit_samples": same_round,
            "faults": _median_count([m["minor_faults"] for m in metrics]),
            "huge_fraction": float(np.median(huge)) if huge else None,
            "first_percent_s": float(np.median(first)) if first else None,
            "free_s": float(np.median([m["free_s"] for m in metrics])),
            "system_s": float(np.median([m["system_s"] for m in metrics])),
            "verified": all(m["verified"] for m in metrics),
            "stopped": (settled.get((name, init)) or {}).get("reason"),
            "host_reporting_overlaps_kept": sum(1 for m in metrics if m.get("host_reporting_overlap_kept")),
            # The most rows it was measured beside at once, itself included (1: always alone).
            "side_by_side": max(int(m.get("side_by_side") or 1) for m in metrics),
            # Bytes its repetitions wrote where they were measured on a part (scaled to size_bytes).
            "measured_bytes": min((m["measured_bytes"] for m in metrics if m.get("measured_bytes")), default=None),
        })
    # Rows that reused memory an earlier row freed are not fresh allocations: listed, not ranked.
    rows.sort(key=lambda r: (r["init"] != "zero", reused(r), r["median_s"]))
    for init in ("zero", "value"):
        ranked = [r for r in rows if r["init"] == init and not reused(r)]
        for rank, row in enumerate(ranked, start=1):
            row["rank"] = rank
        _ties_with_the_fastest(ranked, {row["strategy"]: groups[(row["strategy"], init)] for row in ranked})
    for row in rows:
        row.setdefault("rank", None)
        row["above_limit"] = above_limit(row)
    retaken = [{"strategy": row_name(s["case"]), "init": s["case"]["init"], "rep": s["case"].get("rep", 0), **attempt}
               for s in samples if s["case"]["part"] == "strategy"
               for attempt in s["metrics"].get("raced_with_host_reporting") or []]
    # Per initialization, the median of the main run's round limits: zeros write faster here.
    by_init = {init: float(np.median([v for (label, i, _), v in round_limits_.items() if label == "glibc" and i == init]))
               for init in {i for (label, i, _) in round_limits_ if label == "glibc"}}
    return {"limit_gb_per_s": limit, "limit_method": limit_method, "limit_by_init": by_init, "rows": rows, "retaken_repetitions": retaken, "auto_choice": auto_choice(samples, rows),
            "repeat": summarize_repeat(samples), "fills": summarize_fills(samples, limit),
            "outliers": find_outliers(samples), "headline": headline(rows), "side_by_side": side_by_side(samples),
            "serial_part": serial_part(samples)}


def serial_part(samples: list) -> Optional[dict]:
    """The main run's check of the serial rows measured on a part (one row on the whole array and on
    its part); None where no row was measured on a part."""
    check = next((s for s in samples if s["case"]["part"] == "serial_part_check"), None)
    if check is None:
        return None
    return {"strategy": check["case"]["strategy"], "init": check["case"]["init"], **check["metrics"]}


def side_by_side(samples: list) -> Optional[dict]:
    """How the main run measured its one-thread rows: how many at once, and its check (the first
    batch's first row alone, then beside the others); None where every row ran alone unchecked."""
    width = next((s for s in samples if s["case"]["part"] == "side_by_side" and not s["metrics"].get("checked_by_main_run")),
                 None)
    check = next((s for s in samples if s["case"]["part"] == "side_by_side_check"), None)
    if width is None or (width["metrics"]["rows"] < 2 and check is None):
        return None
    return {"rows": width["metrics"]["rows"], "cpus": width["case"]["cpus"], "asked": width["case"]["asked"] or None,
            "check": None if check is None else {"strategy": check["case"]["strategy"], "init": check["case"]["init"],
                                                 **check["metrics"]}}


TIE_MIN_ROUNDS = 3  # fewer paired rounds than this cannot tell a tie from a difference
# A difference smaller than this is not one a user can rely on here, however consistent within one
# run: the same row's median moves more than that from one sitting to the next on this VM (4 GiB,
# value: make_big_array auto 0.263-0.288 s over four sittings, mmap + parallel memset [thp]
# 0.251-0.308 s, and which of the two was ahead flipped), so a row whose interval reaches 1.05 is
# tied with the fastest.
TIE_MARGIN = 1.05


def _ties_with_the_fastest(ranked: list[dict], samples_of: dict[str, list]) -> None:
    """A row is tied with the fastest when its time, divided by the fastest's in the same round
    (the rounds interleave the rows), is not shown to be above 1 by more than this machine's
    sitting-to-sitting noise: the 95 % bootstrap interval of the median of those ratios reaches
    TIE_MARGIN (1.05). A row of another run (an allocator's, in a probe of its
    own) shares no round with the fastest: its ratio is of the two medians, with each resampled on
    its own (`vs_fastest_paired` false). Tied rows share rank 1 ("tied"); the others keep their
    place, with the interval that shows them slower."""
    from ..stats import bootstrap_median_interval, bootstrap_ratio_of_medians_interval
    if len(ranked) < 2:
        return
    fastest = ranked[0]

    def by_round(name: str) -> dict[int, float]:
        return {s["case"].get("rep", i): s["metrics"]["elapsed_s"] for i, s in enumerate(samples_of[name])}

    def run_of(row: dict) -> str:
        return row.get("allocator") or "glibc"
    best = by_round(fastest["strategy"])
    for row in ranked[1:]:
        mine = by_round(row["strategy"])
        if row.get("stopped") == "far behind":
            # Its repetitions stopped because even the fastest of them took 3 times the fastest row's
            # median or more (5 times after two rounds, 15 after one): not tied, whatever the pairing says. On this
            # VM a repetition is slow when its memory comes back from the host, one repetition here
            # and one there, not a round at a time, so the fastest row's slow repetitions make the
            # paired ratios of a row 3-10x behind reach below 1 (at 4 GiB: 3.31×, 0.54–6.09).
            row["vs_fastest"] = float(np.median(list(mine.values())) / np.median(list(best.values())))
            row["vs_fastest_paired"] = False
            continue
        paired = run_of(row) == run_of(fastest)
        if paired:
            ratios = [mine[r] / best[r] for r in sorted(set(mine) & set(best)) if best[r] > 0]
            if len(ratios) < TIE_MIN_ROUNDS:
                continue
            row["vs_fastest"] = float(np.median(ratios))
            low, high = bootstrap_median_interval(ratios, seed=len(ratios))
        else:
            if min(len(mine), len(best)) < TIE_MIN_ROUNDS:
                continue
            row["vs_fastest"] = float(np.median(list(mine.values())) / np.median(list(best.values())))
            low, high = bootstrap_ratio_of_medians_interval(mine.values(), best.values(), seed=len(mine))
        row["vs_fastest_paired"] = paired
        row["vs_fastest_interval"] = [low, high]
        if low <= TIE_MARGIN:
            row["rank"], row["tied"] = 1, True
    if any(row.get("tied") for row in ranked):
        fastest["tied"] = True


OUTLIER_TIMES = 3.0  # a repetition this many times the median of its group is explained, or said unexplained


def find_outliers(samples: list) -> list[dict]:
    """Repetitions (ranked tables) and iterations (repeat scenario) that took more than 3× the
    median of their group, with what the machine did meanwhile (compaction stalls, reclaim, steal)."""
    timed: dict[str, list[tuple[float, dict, bool]]] = defaultdict(list)  # group -> (seconds, events, first)
    faults: dict[str, list] = defaultdict(list)  # group -> each one's minor faults (None: not counted)
    for sample in samples:
        case, metrics = sample["case"], sample["metrics"]
        if case["part"] == "strategy":
            group = f"{row_name(case)} ({case['init']}), repetition"
            timed[group].append((metrics["elapsed_s"], metrics.get("events") or {}, case["rep"] == 0))
            faults[group].append(metrics.get("minor_faults"))
        elif case["part"] == "repeat":
            events = metrics.get("iteration_events") or [{}] * len(metrics["iteration_ns"])
            group = f"repeat: {case['variant']}, iteration"
            for i, (ns, event) in enumerate(zip(metrics["iteration_ns"], events)):
                timed[group].append((ns / 1e9, event, i == 0))
            faults[group] += metrics["iteration_faults"]
    found = []
    for group, entries in timed.items():
        if len(entries) < 3:
            continue  # a median of two says nothing about which is the odd one
        median = float(np.median([seconds for seconds, _, _ in entries]))
        for number, (seconds, events, first) in enumerate(entries, start=1):
            if median > 0 and seconds > OUTLIER_TIMES * median:
                found.append({"where": f"{group} {number}", "seconds": seconds, "median_s": median,
                              "times_median": seconds / median, "first": first, "events": events,
                              "faults": faults[group][number - 1], "median_faults": _median_count(faults[group])})
    return found


# As the probe's bigarray experiment: less than this handed to the host during a fill shows no effect.
HOST_REPORTING_RACE_BYTES = 64 << 20


def outlier_causes(outlier: dict, facts: dict) -> list[str]:
    """The known causes that fit one outlier, from what the machine did during it and what the
    context and this machine's `costs` result say (facts: free_page_reporting, idle_ratio)."""
    events, causes = outlier["events"], []
    taken, usual = outlier.get("faults"), outlier.get("median_faults")
    if taken is not None and usual is not None and taken > 4 * usual + 1000:
        causes.append(f"page faults: {taken:,} against a median of {usual:,.0f} — it faulted its memory in, where "
                      "the others reused memory already faulted (a pool's or an allocator's first fill, or memory "
                      "the allocator had given back)")
    excess_s = outlier["seconds"] - outlier["median_s"]
    if events.get("compaction_stalls"):
        causes.append(f"THP compaction: {events['compaction_stalls']:,} direct compaction stalls in vmstat during it")
    if events.get("reclaimed_pages"):
        causes.append(f"memory reclaim: {events['reclaimed_pages']:,} pages reclaimed during it")
    steal_s = (events.get("steal_ns") or 0) / 1e9
    if excess_s > 0 and steal_s >= 0.25 * excess_s:
        causes.append(f"the hypervisor ran other work: {steal_s:.2f} s of steal time during it, against "
                      f"{excess_s:.2f} s more than the median")
    reported = events.get("host_reported_bytes") or 0
    if reported >= HOST_REPORTING_RACE_BYTES:
        # Measured where the kernel counts what it reported.
        causes.append(f"memory handed to the host: the VM reported {reported / 2**20:,.0f} MiB of free memory to "
                      "its host during it (free page reporting's own count); the host's work and the memory it "
                      "takes back slow the faults beside it")
    elif outlier["first"] and facts.get("free_page_reporting"):
        # Memory reported before a first use is faulted in by the host again: inferred, not counted.
        measured = (f"; `memcost costs` measured memory left free {facts['idle_ratio']:.1f}× costlier to fault in "
                    "here" if facts.get("idle_ratio") else "; run `memcost costs` to measure what it adds here")
        causes.append("memory returned to the host: the VM reports free pages to its host (free page reporting), so "
                      "the first use of memory that sat free is faulted in by the host again" + measured)
    return causes


def outlier_lines(summary: dict) -> list[str]:
    """One line per outlier: which known cause fits, or that none does."""
    facts = summary.get("machine_facts") or {}
    lines = []
    for outlier in summary.get("outliers") or []:
        causes = outlier_causes(outlier, facts)
        head = (f"{outlier['where']} took {outlier['seconds']:.3f} s, {outlier['times_median']:.1f}× the median "
                f"({outlier['median_s']:.3f} s)")
        lines.append(f"{head}: " + ("; ".join(causes) if causes else
                                    "no known cause fits (no compaction stall, reclaim or steal during it"
                                    + (", and this VM does not report free pages to its host)"
                                       if facts.get("free_page_reporting") is False else ")")))
    return lines


def machine_facts(context: dict, results_root) -> dict:
    """What the context and this machine's newest `costs` result say about causes of slow repetitions."""
    from ..results import documents_of_host
    facts = {"free_page_reporting": (context.get("hypervisor") or {}).get("free_page_reporting")}
    for _, document in documents_of_host(results_root, "costs", context.get("host", "")):
        ratios = [entry["ratio"] for entry in (document.get("summary") or {}).get("idle") or [] if entry.get("ratio")]
        if ratios:
            facts["idle_ratio"] = max(ratios)
            break
    return facts


def _median_count(counts: list) -> Optional[float]:
    """The median of fault counts; None when the OS counted none (Wine writes null)."""
    measured = [count for count in counts if count is not None]
    return float(np.median(measured)) if measured and len(measured) == len(counts) else None


def summarize_fills(samples: list, limit: Optional[float]) -> list[dict]:
    """Per kind of memory (fresh: the fill faults it in; faulted: filled again): each fill
    method's median GB/s, the fastest that can write a value of varied bytes (memset writes one
    byte; it is there for reference), and fill_method::automatic as the library runs it: what it
    picked each time (it measures on slices of the memory), its own GB/s with the measuring
    included, and what the measuring cost."""
    by_memory: dict[str, dict[str, list[float]]] = {}
    picks: dict[str, list[str]] = {}
    calibration: dict[str, list[tuple[int, int]]] = {}
    reasons: dict[str, str] = {}
    faults: dict[str, list[float]] = {}
    raced: dict[str, list[dict]] = {}
    by_rep: dict[str, dict[int, dict[str, float]]] = {}  # memory -> rep -> method -> GB/s
    for sample in samples:
        case, metrics = sample["case"], sample["metrics"]
        if case["part"] != "fill":
            continue
        memory = case["memory"]
        raced.setdefault(memory, []).extend({"method": case["method"], "rep": case["rep"], **attempt}
                                            for attempt in metrics.get("raced_with_host_reporting") or [])
        by_memory.setdefault(memory, {}).setdefault(case["method"], []).append(metrics["gb_per_s"])
        by_rep.setdefault(memory, {}).setdefault(case["rep"], {})[case["method"]] = metrics["gb_per_s"]
        if case["method"] == "automatic":
            picks.setdefault(memory, []).append(metrics["automatic_picks"])
            calibration.setdefault(memory, []).append((metrics.get("calibration_ns") or 0, case["size_bytes"]))
            reasons[memory] = metrics.get("automatic_reason", "")
        else:
            faults.setdefault(memory, []).append(metrics["minor_faults"])  # None: not counted
    result = []
    for memory, methods in by_memory.items():
        medians = {method: float(np.median(values)) for method, values in methods.items()}
        varied = {method: speed for method, speed in medians.items() if method not in ("memset", "automatic")}
        fastest = max(varied, key=varied.get)
        chosen = picks.get(memory) or []
        picked = max(set(chosen), key=chosen.count) if chosen else None
        automatic_s = [size / (medians["automatic"] * 1e9) for _, size in calibration.get(memory, [])] \
            if medians.get("automatic") else []
        costs = [ns / 1e9 / fill_s for (ns, _), fill_s in zip(calibration.get(memory, []), automatic_s)]
        result.append({"memory": memory, "gb_per_s": medians, "reps": min(len(v) for v in methods.values()),
                       "ratio_to_limit": {m: v / limit for m, v in medians.items()} if limit else None,
                       "fastest": fastest, "automatic_picks": picked,
                       "automatic_picks_all": chosen, "automatic_reason": reasons.get(memory),
                       "picked_behind_fastest_percent": _paired_behind_percent(by_rep[memory], picked, fastest)
                       if picked else None,
                       "automatic_behind_fastest_percent": _paired_behind_percent(by_rep[memory], "automatic", fastest),
                       "calibration_ms": float(np.median([ns for ns, _ in calibration[memory]])) / 1e6
                       if calibration.get(memory) else None,
                       "calibration_share": float(np.median(costs)) if costs else None,
                       "faults_per_fill": _median_count(faults.get(memory, [])),
                       "raced_with_host_reporting": raced.get(memory, [])})
    return result


def _paired_behind_percent(by_rep: dict[int, dict[str, float]], method: str, fastest: str) -> Optional[float]:
    """How far `method` is behind `fastest`, as the median over repetitions of their ratio within the
    same repetition: the methods of one repetition run seconds apart, and this VM's host moves the
    bandwidth it gives between 22 and 40 GB/s within a run, so medians of each column alone can set a
    method measured before a switch against one measured after it."""
    ratios = [rep[fastest] / rep[method] for rep in by_rep.values() if rep.get(method) and rep.get(fastest)]
    return 100.0 * (float(np.median(ratios)) - 1.0) if ratios else None


def summarize_repeat(samples: list) -> list[dict]:
    """Per variant of the repeat scenario: the iterations after the first (the first pays for
    whatever is not yet cached or pooled), their median time, GB/s, faults, and their share of the
    floor taken right after each (one kept array filled again by the fastest fill method there:
    the limit, measured beside the row)."""
    result = []
    for sample in samples:
        if sample["case"]["part"] != "repeat":
            continue
        all_times, all_floors = sample["metrics"]["iteration_ns"], sample["metrics"]["floor_ns"]
        # Pairs after the first iteration, or all of them when there was only one.
        pairs = [(t, f) for t, f in zip(all_times, all_floors) if t > 0 and f > 0][1:] or \
            [(t, f) for t, f in zip(all_times, all_floors) if t > 0 and f > 0]
        times = [t for t, _ in pairs]
        faults = sample["metrics"]["iteration_faults"][1:] or sample["metrics"]["iteration_faults"]
        median_s = float(np.median(times)) / 1e9
        floor_s = float(np.median([f for _, f in pairs])) / 1e9
        size = sample["case"]["size_bytes"]
        # Each iteration's GB/s over its own floor's: 1.0 is as fast as filling one kept array again.
        paired = [f / t for t, f in pairs]
        result.append({"variant": sample["case"]["variant"], "size_bytes": size,
                       "iterations": sample["case"]["iterations"], "median_s": median_s,
                       "gb_per_s": size / median_s / 1e9 if median_s > 0 else None,
                       "ratio_to_limit": float(np.median(paired)),
                       "ratio_to_limit_samples": paired,
                       "limit_basis": "floor beside each iteration",
                       "floor_method": sample["case"].get("floor_method"),
                       "is_floor": bool(sample["case"].get("is_floor")),
                       "faults_per_iteration": _median_count(faults),
                       "measured_bytes": sample["metrics"].get("measured_bytes"),
                       "floor_s": floor_s,
                       "first_s": all_times[0] / 1e9})
    # The floor set against floors beside it does the same work twice, so its ratio's interval
    # should hold 1; how far it strays from 1, on either side, is what this pairing can resolve (at
    # 64 MiB, 2 ms a fill, it strayed to 0.94-0.99 once here). It is the yardstick, never above
    # itself; a variant is above the limit only beyond 1 plus that stray.
    floor = next((r for r in result if r["is_floor"]), None)
    ceiling = 1.0
    if floor is not None and len(floor["ratio_to_limit_samples"]) >= TIE_MIN_ROUNDS:
        from ..stats import bootstrap_median_interval
        samples = floor["ratio_to_limit_samples"]
        floor["floor_noise_interval"] = bootstrap_median_interval(samples, seed=len(samples))
        low, high = floor["floor_noise_interval"]
        ceiling = 1.0 + max(abs(low - 1.0), abs(high - 1.0))
    for row in result:
        row["above_limit"] = None if row["is_floor"] else above_limit(
            {**row, "faults": row["faults_per_iteration"]}, reuse_explains=False, noise_ceiling=ceiling)
    return result


def auto_choice(samples: list, rows: list[dict]) -> Optional[dict]:
    """What make_big_array's automatic ladder chose and why, and how it placed."""
    chosen = next((s["metrics"] for s in samples
                   if s["case"]["part"] == "strategy" and s["case"]["strategy"] == AUTO), None)
    if chosen is None:
        return None
    result = {"page_kind": chosen.get("auto_choice"), "fallbacks": chosen.get("auto_fallbacks", [])}
    for init in ("zero", "value"):
        ranked = [r for r in rows if r["init"] == init and not reused(r)]  # fresh allocations only
        auto = next((r for r in ranked if r["strategy"] == AUTO), None)
        if auto and ranked:
            fastest = ranked[0]
            result[init] = {"rank": auto["rank"], "tied": bool(auto.get("tied")) and auto is not fastest,
                            "vs_fastest_interval": auto.get("vs_fastest_interval"),
                            "of": len(ranked),
                            "fastest": fastest["strategy"],
                            "slower_than_fastest_percent": 100.0 * (auto["median_s"] / fastest["median_s"] - 1.0)}
    why = "; ".join(result["fallbacks"]) if result["fallbacks"] else "the first rung of the ladder was available"
    result["why"] = f"chose {result['page_kind']}: {why}"
    zero = next((s["metrics"] for s in samples if s["case"].get("part") == "strategy" and s["case"]["strategy"] == AUTO
                 and s["case"]["init"] == "zero" and s["metrics"].get("auto_initialization")), None)
    if zero:  # how its fresh pages were faulted in for zero initialization, and why (fault_in.cpp)
        result["zero_fault"] = {"method": zero["auto_initialization"], "reason": zero.get("auto_initialization_reason")}
    return result


def reused(row: dict) -> bool:
    """A row that took fewer faults than even huge pages would need: its memory was not fresh but
    kept by its allocator from an earlier row (tcmalloc keeps freed blocks and hands them out again)."""
    return row["faults"] is not None and row["faults"] < row["size_bytes"] / (2 << 20) / 2


def headline(rows: list[dict]) -> Optional[str]:
    zero = [r for r in rows if r["init"] == "zero" and not reused(r)]
    if not zero:
        return None
    fastest = zero[0]
    vector = next((r for r in zero if r["strategy"] == "std::vector"), None)
    size_gib = fastest["size_bytes"] / (1 << 30)
    tied = [r["strategy"] for r in zero[1:] if r.get("tied")]
    text = f"fastest {size_gib:g} GiB zero-init: {fastest['median_s']:.2f} s via {fastest['strategy']}"
    if tied:
        text += f" (tied within noise with {', '.join(tied[:3])}{' and others' if len(tied) > 3 else ''})"
    if vector and vector is not fastest:
        text += f", {vector['median_s'] / fastest['median_s']:.0f}× faster than std::vector"
    return text
