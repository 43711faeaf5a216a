"""Advice for an allocation site: what changing how it allocates would save, priced by this
machine's measured costs (docs/trace.md, Advice)."""

from __future__ import annotations

from typing import Optional

from ..cost_model import CostModel
from ..derived import MB
from .records import Site
from .sites import PINNING_CALLS


# Advice is given only where it saves at least this much, and this share of the run.
ADVICE_MIN_MS = 1.0


ADVICE_MIN_SHARE = 0.01


def fault_us(cost: CostModel, base: float, thp: float) -> float:
    return base * cost.fault_us("base") + thp * cost.fault_us("thp")


def advise(row: dict, site: Site, cost: CostModel, thp_available: bool, wall_ms: float, period: int) -> list[dict]:
    """Only advice this run's figures support, each with its what-if saving."""
    advice = []

    def worth(saving_ms: float) -> bool:
        return saving_ms >= max(ADVICE_MIN_MS, ADVICE_MIN_SHARE * wall_ms)

    if row["churn"] >= 3 and row.get("runtime") != "jvm":
        churning = site.freed_by_size()[row["churn_bytes"]]
        n = churning["freed"]
        base_faults = churning["faults_base"] * period
        thp_faults = churning["faults_thp"] * period
        free_ms = churning["free_ns"] / 1e6
        map_ms = churning["map_ns"] / 1e6
        if cost.reuse_saving_us_per_mb is not None:
            # Base pages: measured here for exactly this pattern (a fresh buffer per frame, written
            # and freed, against one kept buffer), per MB; it includes their share of the frees.
            base_bytes, huge_bytes = base_faults * cost.page_bytes, thp_faults * cost.huge_bytes
            base_share = base_bytes / max(base_bytes + huge_bytes, 1)
            spent = (base_bytes / MB * cost.reuse_saving_us_per_mb / 1e3 + thp_faults * cost.fault_us("thp") / 1e3
                     + free_ms * (1 - base_share) + map_ms)
            how = "base-page faults and frees from this machine's measured cost of reallocating instead of reusing"
        else:
            spent = fault_us(cost, base_faults, thp_faults) / 1e3 + free_ms + map_ms
            how = "its faults, estimated, and its frees, measured, paid once instead of every time"
        saving = spent * (n - 1) / n
        if worth(saving):
            advice.append({"kind": "reuse", "saving_ms": saving,
                           "text": f"reuse this {_size(row['churn_bytes'])} buffer instead of making and freeing it {n} "
                                   f"times: saves ≈ {saving:,.1f} ms ({how})"})
    outgrown = site.outgrown()
    if outgrown["freed"] >= 2:
        n = outgrown["freed"]
        grown_to = max(origin.get("grown_to_bytes", 0) for origin in site.origins)
        saving = (fault_us(cost, outgrown["faults_base"] * period, outgrown["faults_thp"] * period) / 1e3
                  + (outgrown["free_ns"] + outgrown["map_ns"]) / 1e6)
        if worth(saving):
            advice.append({"kind": "growth", "saving_ms": saving,
                           "text": f"reserve {_size(grown_to)} once instead of growing {n + 1} times: saves ≈ "
                                   f"{saving:,.1f} ms (faults, estimated, and frees, measured, of the {n} outgrown "
                                   "buffers, from this machine's costs; their copies are not counted)"})
    base_faults = row["faults_base"]
    per_huge_page = cost.huge_bytes // cost.page_bytes  # base pages in one huge page (512 on x86-64)
    # A file's or a device's memory (a library the loader maps, a driver's pinned pages) takes no
    # madvise(MADV_HUGEPAGE) and is not the program's to make with make_big_array.
    anonymous = not row.get("file_backed")
    if anonymous and thp_available and cost.thp_us_per_mb is not None and row["largest_bytes"] >= 2 * cost.huge_bytes \
            and base_faults >= per_huge_page:
        huge_faults = base_faults / per_huge_page
        saving = base_faults * cost.fault_us("base") / 1e3 - huge_faults * cost.fault_us("thp") / 1e3
        # Already advised huge: what is left on base pages are the ends of mappings not aligned to 2 MB.
        how = ("align these mappings to 2 MB (memcost::make_big_array does): their unaligned ends fault on base pages"
               if row["huge_advised"] else "ask for huge pages here (madvise MADV_HUGEPAGE, or memcost::make_big_array)")
        if row.get("huge_refused_by"):
            # The program turns huge pages off for this memory itself: advice that ignores that is undone.
            how = (f"remove the program's own madvise(MADV_NOHUGEPAGE) at {row['huge_refused_by']}, which turns huge "
                   "pages off for this memory, and ask for them instead (madvise MADV_HUGEPAGE, or "
                   "memcost::make_big_array)")
        if row.get("runtime") == "jvm":
            how = "run the JVM with -XX:+UseTransparentHugePages (its heap madvised for huge pages)"
        if worth(saving):
            advice.append({"kind": "huge_pages", "saving_ms": saving, "faults_saved": round(base_faults - huge_faults),
                           "undone_by": row.get("huge_refused_by"),
                           "text": f"{how}: {base_faults:,} base-page faults become ≈ {huge_faults:,.0f}, "
                                   f"saves ≈ {saving:,.1f} ms"})
    largest = site.largest()
    largest_faults = largest["largest_faults_base"] + largest["largest_faults_thp"]
    if (anonymous and cost.threads_speedup and cost.threads_speedup > 1.2 and largest["largest_bytes"] >= 64 * MB
            and largest["largest_one_thread"] and largest_faults):
        spent = fault_us(cost, largest["largest_faults_base"], largest["largest_faults_thp"]) * period / 1e3
        saving = spent * (1 - 1 / cost.threads_speedup)
        how = (f"fault the {_size(largest['largest_bytes'])} block in with {cost.threads} threads (measured "
               f"{cost.threads_speedup:.1f}× faster here, e.g. make_big_array's parallel prefault)")
        if row.get("runtime") == "jvm":
            how = ("run the JVM with -XX:+AlwaysPreTouch: it faults the heap in at start, on the GC's threads in "
                   f"parallel (measured {cost.threads_speedup:.1f}× faster here with {cost.threads} threads), instead "
                   "of in the middle of the run")
        if worth(saving):
            advice.append({"kind": "parallel", "saving_ms": saving, "text": f"{how}: saves ≈ {saving:,.1f} ms"})
    return advice


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MB), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"



# The runtime's pinning calls the stand-in serves (src/trace/preload/pinning_standin.c).
STANDIN_CALLS = ("cudaHostAlloc", "cudaMallocHost", "cudaHostRegister")


def pinning_verification(call: str, module: str) -> tuple[bool, str]:
    """Whether --verify can apply the pinning advice to a call made through `module` (the file its
    frame was in), and what it does or why not."""
    if call in STANDIN_CALLS and module.startswith("libcudart"):
        return True, ("--verify applies it: a preloaded stand-in for the CUDA runtime's pinning calls "
                      "(libmemcost-pinning.so) serves each of 4 MiB or more the fast way, and the runs are compared")
    if call not in STANDIN_CALLS:
        return False, (f"not applied by --verify: the program calls the driver's {call} itself, and memcost stands in "
                       "for the runtime's calls only (cudaHostAlloc, cudaMallocHost, cudaHostRegister); change the "
                       "allocation in the program")
    return False, ("not applied by --verify: the CUDA runtime is linked into the program (nvcc's default: its "
                   f"{call} is in {module or 'the program'}, not in libcudart.so), where no preloaded library can stand in for "
                   "the call (and the runtime reaches the driver through its own table of entry points); link it as a "
                   "library (nvcc -cudart shared) for --verify, or change the allocation in the program")


def pinning_advice(touching: list[dict], pinned: Optional[dict]) -> list[dict]:
    """For each touching site where a CUDA call pinned host memory (sites.call_name: "cudaHostAlloc
    (ioctl) ← …"): what it cost in the call, the fast way, and what that way measured on this host
    (`pinned`: the newest `memcost pinned` summary of the traced machine, or None), with its
    estimated saving where that is known; whether `--verify` can apply it (pinning_verification)."""
    advice = []
    for row in touching:
        call = row["site"].split(" (", 1)[0]
        if call not in PINNING_CALLS or "call_ms" not in row:
            continue
        text = (f"{call} pinned memory with the driver faulting its {row['faults']:,} pages in one by one inside the call "
                f"({row['call_ms']:,.1f} ms); the fast way maps it on huge pages, has every CPU fault its part in, then "
                "registers it (memcost::make_big_array(..., {.pinned = true}), or memcost.pinned_memory.pinned_tensor "
                "from Python)")
        versus = (pinned or {}).get("memcost_against_host_alloc")
        saving = None
        if versus:
            saving = row["call_ms"] * (1 - 1 / versus["times_faster"]) if versus["times_faster"] > 0 else None
            text += (f": `memcost pinned` measured it {versus['times_faster']:.1f}× faster than cudaHostAlloc on this "
                     f"host ({versus['memcost_s']:.2f} s against {versus['cuda_host_alloc_s']:.2f} s for "
                     f"{pinned['size_bytes'] / (1 << 30):g} GiB)")
            if saving is not None:
                text += f", which would save ≈ {saving:,.1f} ms of the call's"
        else:
            text += ": run `memcost pinned` on this host for what it would save"
        verifiable, verify = pinning_verification(call, row.get("pinning_module", ""))
        advice.append({"site": row["site"], "call": call, "faults": row["faults"], "call_ms": row["call_ms"],
                       "text": text, "times_faster": versus["times_faster"] if versus else None,
                       "saving_ms": saving, "verifiable": verifiable, "verify": verify})
    return advice
