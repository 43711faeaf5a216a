"""pinned: the ways to pin host memory for a GPU, ranked by the time until the memory is pinned,
each phase's median, the copy to the GPU from each set against ordinary memory's, and the two
limits the fast ways meet: the machine's fault rate and the driver's registration rate."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..stats import bootstrap_median_interval, bootstrap_ratio_of_medians_interval
from .bigarray import TIE_MARGIN, TIE_MIN_ROUNDS

PHASES = ("allocate_s", "fault_s", "register_s", "unregister_s", "free_s")
# A pinned way copies to the GPU at pinned speed when it beats ordinary memory's copy by this much:
# on the H200 host pinned memory copies at 55 GB/s and ordinary memory at 7-9 (issue 41), so a
# way within 1.5x of the control was not really pinned, or its copies were staged.
PINNED_COPY_MARGIN = 1.5
MEMCOST_WAY = "make_big_array pinned (memcost)"
HOST_ALLOC_WAY = "cuMemHostAlloc (cudaHostAlloc)"
PYTORCH_PREFIX = "torch"


def _median(values: list) -> Optional[float]:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return float(np.median(numbers)) if numbers else None


def _release_s(metrics: dict) -> Optional[float]:
    """Unregistering and freeing together: until the memory is unpinned and gone."""
    phases = [metrics.get(p) for p in ("unregister_s", "free_s") if isinstance(metrics.get(p), (int, float))]
    return sum(phases) if phases else None


def _rows(samples: list) -> list[dict]:
    by_way: dict[str, list] = {}
    for sample in samples:
        if sample["case"].get("part") == "way":
            by_way.setdefault(sample["case"]["way"], []).append(sample)
    rows = []
    for way, runs in by_way.items():
        size = runs[0]["case"]["size_bytes"]
        # PyTorch's rows run after the probe's rounds, in processes of their own: not paired by round.
        row = {"way": way, "pinned": bool(runs[0]["case"]["pinned"]), "size_bytes": size, "rounds": len(runs),
               "paired": runs[0]["case"].get("paired", True),
               "page_kind": runs[0]["metrics"].get("page_kind"),
               "registrations": runs[0]["metrics"].get("registrations"),
               "ready_s_by_round": {s["case"]["round"]: s["metrics"]["ready_s"] for s in runs},
               "copy_gb_per_s": _median([s["metrics"].get("copy_gb_per_s") for s in runs]),
               "copy_across_registrations_gb_per_s": _median(
                   [s["metrics"].get("copy_across_registrations_gb_per_s") for s in runs]),
               # The driver refused a copy from one of its registrations into the next (NVIDIA's
               # 580 did, every time): the memory serves only copies within one chunk.
               "copy_across_refused": any(s["metrics"].get("copy_across_refused") for s in runs),
               "release_s": _median([_release_s(s["metrics"]) for s in runs]),
               "minor_faults": _median([s["metrics"].get("minor_faults") for s in runs])}
        for phase in PHASES:
            row[phase] = _median([s["metrics"].get(phase) for s in runs])
        row["ready_s"] = _median(list(row["ready_s_by_round"].values()))
        row["gb_per_s"] = size / row["ready_s"] / 1e9 if row["ready_s"] else None
        rows.append(row)
    return rows


def _rank(ranked: list[dict]) -> None:
    """Ranks by the median time until pinned; a way is tied with the fastest when its time over the
    fastest's in the same round (the rounds interleave the ways) has a 95 % bootstrap interval
    reaching TIE_MARGIN, the margin the bigarray rows use. A way run apart from the rounds
    (PyTorch's) is set against the fastest by the ratio of the two medians, each resampled alone."""
    for place, row in enumerate(ranked, start=1):
        row["rank"] = place
    if len(ranked) < 2:
        return
    fastest = ranked[0]
    best = fastest["ready_s_by_round"]
    for row in ranked[1:]:
        mine = row["ready_s_by_round"]
        row["vs_fastest"] = row["ready_s"] / fastest["ready_s"]
        if row["paired"] and fastest["paired"]:
            ratios = [mine[r] / best[r] for r in sorted(set(mine) & set(best)) if best[r] > 0]
            if len(ratios) < TIE_MIN_ROUNDS:
                continue
            low, high = bootstrap_median_interval(ratios, seed=len(ratios))
            row["vs_fastest"] = float(np.median(ratios))
        else:
            if min(len(mine), len(best)) < TIE_MIN_ROUNDS:
                continue
            low, high = bootstrap_ratio_of_medians_interval(mine.values(), best.values(), seed=len(mine))
        row["vs_fastest_interval"] = [low, high]
        if low <= TIE_MARGIN:
            row["rank"], row["tied"] = 1, True
            fastest["tied"] = True


def _limits(rows: list[dict]) -> dict:
    """The machine's fault rate (the fastest fault phase of the ways that fault by touching), the
    driver's registration rate (the fastest registration of memory already faulted in, from one
    thread or several), and the rate of the two one after the other (their times' sum)."""
    touched = [r for r in rows if r["fault_s"] and r["way"].startswith(("mmap", "hugetlb"))]
    registered = [r for r in touched if r["register_s"]]
    fault = max(touched, key=lambda r: r["size_bytes"] / r["fault_s"], default=None)
    register = max(registered, key=lambda r: r["size_bytes"] / r["register_s"], default=None)
    fault_rate = fault["size_bytes"] / fault["fault_s"] / 1e9 if fault else None
    register_rate = register["size_bytes"] / register["register_s"] / 1e9 if register else None
    return {"fault_gb_per_s": fault_rate, "fault_way": fault["way"] if fault else None,
            "register_gb_per_s": register_rate, "register_way": register["way"] if register else None,
            "one_after_the_other_gb_per_s": 1 / (1 / fault_rate + 1 / register_rate) if fault and register else None}


def _fastest_release(rows: list[dict]) -> Optional[dict]:
    """The pinned way whose memory was unpinned and freed soonest, against cudaFreeHost's time for
    cudaHostAlloc's memory (item 2 of issue 48: a small fraction of it)."""
    released = [r for r in rows if r["pinned"] and r["release_s"] and r["way"] != HOST_ALLOC_WAY]
    host_alloc = next((r for r in rows if r["way"] == HOST_ALLOC_WAY and r["release_s"]), None)
    if not released:
        return None
    fastest = min(released, key=lambda r: r["release_s"])
    return {"way": fastest["way"], "release_s": fastest["release_s"],
            "cuda_free_host_s": host_alloc["release_s"] if host_alloc else None,
            "of_cuda_free_host": fastest["release_s"] / host_alloc["release_s"] if host_alloc else None}


def _copy_verdicts(rows: list[dict]) -> Optional[float]:
    """Each pinned way's copy set against ordinary memory's (the control): `copies_pinned` is False
    for a way within PINNED_COPY_MARGIN of it. Returns the control's GB/s."""
    control = next((r for r in rows if not r["pinned"] and r["copy_gb_per_s"]), None)
    for row in rows:
        if row["pinned"] and control and row["copy_gb_per_s"]:
            row["copy_vs_ordinary"] = row["copy_gb_per_s"] / control["copy_gb_per_s"]
            row["copies_pinned"] = row["copy_vs_ordinary"] >= PINNED_COPY_MARGIN
    return control["copy_gb_per_s"] if control else None


def summarize(samples: list) -> dict:
    device = next((s["metrics"] for s in samples if s["case"].get("part") == "device"), {})
    rows = _rows(samples)
    ranked = sorted((r for r in rows if r["pinned"] and r["ready_s"]), key=lambda r: r["ready_s"])
    _rank(ranked)
    control_copy = _copy_verdicts(rows)
    rows = ranked + [r for r in rows if r not in ranked]
    memcost = next((r for r in rows if r["way"] == MEMCOST_WAY), None)
    host_alloc = next((r for r in rows if r["way"] == HOST_ALLOC_WAY), None)
    versus = None
    if memcost and host_alloc and memcost["ready_s"] and host_alloc["ready_s"]:
        versus = {"memcost_s": memcost["ready_s"], "cuda_host_alloc_s": host_alloc["ready_s"],
                  "times_faster": host_alloc["ready_s"] / memcost["ready_s"],
                  "vs_fastest": memcost.get("vs_fastest", 1.0), "tied": bool(memcost.get("tied")),
                  "rank": memcost.get("rank")}
    for row in rows:
        row.pop("ready_s_by_round")
    return {"device": device.get("name"), "driver_library": device.get("driver_library"),
            "size_bytes": device.get("size_bytes"), "copy_bytes": device.get("copy_bytes"),
            "rows": rows, "limits": _limits(rows), "ordinary_copy_gb_per_s": control_copy,
            "fastest_release": _fastest_release(rows),
            "memcost_against_host_alloc": versus, "headline": _headline(rows, versus)}


def fastest_whole(ranked: list[dict]) -> Optional[dict]:
    """The fastest ranked way in one registration: what an array copied whole can use."""
    return next((r for r in ranked if r.get("registrations") == 1 and not r.get("copy_across_refused")), None)


def _headline(rows: list[dict], versus: Optional[dict]) -> Optional[str]:
    ranked = [r for r in rows if r.get("rank")]
    if not ranked:
        return None
    fastest = ranked[0]
    text = (f"fastest way to pin {fastest['size_bytes'] / (1 << 30):g} GiB: {fastest['ready_s']:.2f} s "
            f"via {fastest['way']}")
    if fastest.get("copy_across_refused"):
        whole = fastest_whole(ranked)
        text += (f" (its {fastest['registrations']} registrations take no copy that crosses from one into the next: "
                 "the driver refused one")
        text += f"; fastest as one registration: {whole['ready_s']:.2f} s via {whole['way']})" if whole else ")"
    if versus:
        text += f"; memcost's {versus['memcost_s']:.2f} s is {versus['times_faster']:.1f}× faster than cudaHostAlloc"
    return text


def warnings_of(summary: dict) -> list[dict]:
    """What the summary itself shows: pinned ways whose copies ran no faster than ordinary memory's."""
    return [{"code": "not_pinned_speed",
             "message": f"{row['way']}: copies to the GPU ran at {row['copy_gb_per_s']:.1f} GB/s, within "
                        f"{PINNED_COPY_MARGIN}× of ordinary memory's {summary['ordinary_copy_gb_per_s']:.1f}: "
                        "not at pinned speed"}
            for row in summary["rows"] if row.get("copies_pinned") is False]
