"""Two readings of the counters (samples of `memcost-probe monitor`) make one interval record of rates."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Optional

from .. import kernel
from ..analysis.cost_model import CostModel
from ..analysis.derived import MB
from .stream import Reading, same_process_before

KERNEL_THREADS = ("kswapd", "khugepaged", "kcompactd", "kworker")
MACHINE_RATES = {
    # record name: (vmstat fields summed)
    "major_faults_per_s": ("pgmajfault",),
    "pages_allocated_per_s": ("pgalloc_dma", "pgalloc_dma32", "pgalloc_normal", "pgalloc_movable", "pgalloc_device"),
    "pages_freed_per_s": ("pgfree",),
    "thp_faults_per_s": ("thp_fault_alloc",),
    "thp_fallbacks_per_s": ("thp_fault_fallback",),
    "thp_collapses_per_s": ("thp_collapse_alloc",),
    "compaction_stalls_per_s": ("compact_stall",),
    "pages_reclaimed_per_s": ("pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged"),
}
UPPER_BOUND_WHY = ("every minor fault counted as one zeroed page, though file-backed and copy-on-write faults "
                   "zero nothing")


def thp_bytes_here() -> int:
    return kernel.pmd_huge_page_bytes()


def _delta(before: Optional[int], after: Optional[int]) -> Optional[int]:
    """A counter's growth; None when missing, or when it went backwards (wrap or reset)."""
    if before is None or after is None or after < before:
        return None
    return after - before


@dataclass
class Sampler:
    pids: Optional[list[int]] = None  # None: every process
    top: int = 5
    cost: Optional[CostModel] = None  # this machine's measured fault cost (None: no `memcost costs` result)
    # How the kernel's zeroing was counted, or why it was not ("" until the stream says).
    zeroing_method: Optional[str] = None
    zeroing_unavailable: Optional[str] = None
    page_bytes: int = field(default_factory=lambda: os.sysconf("SC_PAGE_SIZE"))
    huge_bytes: int = field(default_factory=thp_bytes_here)

    def interval(self, before: Reading, after: Reading) -> dict:
        seconds = max(after.time_s - before.time_s, 1e-9)
        rate = lambda delta: None if delta is None else delta / seconds  # noqa: E731
        machine = {}
        for name, fields in MACHINE_RATES.items():
            present = [f for f in fields if f in after.vmstat and f in before.vmstat]
            deltas = [_delta(before.vmstat[f], after.vmstat[f]) for f in present]
            machine[name] = None if not present or None in deltas else rate(sum(deltas))
        faults = _delta(before.vmstat.get("pgfault"), after.vmstat.get("pgfault"))
        major = _delta(before.vmstat.get("pgmajfault"), after.vmstat.get("pgmajfault")) or 0
        machine["minor_faults_per_s"] = None if faults is None else rate(max(faults - major, 0))

        nanoseconds = lambda name: _delta(before.cpu.get(name), after.cpu.get(name))  # noqa: E731
        percent_of_core = lambda ns: None if ns is None else 100.0 * ns / 1e9 / seconds  # noqa: E731
        cpu = {"system_percent": percent_of_core(nanoseconds("system")),
               "steal_percent": percent_of_core(nanoseconds("steal"))}
        for family in KERNEL_THREADS:
            # With --pid or a command only those processes are watched: the threads were not, which is not 0 %.
            threads = None if self.pids is not None or not before.kernel_threads or not after.kernel_threads else \
                _delta(before.kernel_threads.get(family), after.kernel_threads.get(family))
            cpu[f"{family}_percent"] = percent_of_core(threads)

        processes = []
        for pid, stat in after.processes.items():
            old = same_process_before(before, stat)
            if old is None:
                continue  # a rate needs two readings
            processes.append({"pid": pid, "comm": stat.comm,
                              "minor_faults_per_s": rate(max(stat.minor_faults - old.minor_faults, 0)),
                              "major_faults_per_s": rate(max(stat.major_faults - old.major_faults, 0)),
                              "rss_growth_bytes_per_s": rate(stat.rss_bytes - old.rss_bytes) if stat.rss_bytes >= old.rss_bytes
                              else -rate(old.rss_bytes - stat.rss_bytes),
                              "system_cpu_percent": percent_of_core(max(stat.system_ns - old.system_ns, 0))})
        processes.sort(key=lambda p: p["minor_faults_per_s"], reverse=True)
        return {"type": "interval", "time": time.time(), "interval_s": seconds, "machine": machine, "cpu": cpu,
                "zeroing": self.zeroing(machine, self.kernel_rates(before, after)), "processes": processes[: self.top],
                "hidden_processes": after.hidden}

    def kernel_rates(self, before: Reading, after: Reading) -> Optional[dict]:
        """Zeroed allocations per second by the kernel's count, between the probe's two newest samples."""
        old, new = before.zeroed, after.zeroed
        if old is None or new is None or new.elapsed_s <= old.elapsed_s:
            return None
        seconds = new.elapsed_s - old.elapsed_s
        return {"base_pages_per_s": (new.base_pages - old.base_pages) / seconds,
                "larger_blocks_per_s": (new.larger_blocks - old.larger_blocks) / seconds}

    def zeroing(self, machine: dict, kernel: Optional[dict] = None) -> dict:
        """Bytes zeroed per second — counted by the kernel where it lets us, else an upper bound
        from the fault counts — and their CPU cost at this machine's measured cost per fault."""
        huge = machine.get("thp_faults_per_s")
        minor = machine.get("minor_faults_per_s")
        small = None if minor is None else max(minor - (huge or 0.0), 0.0)
        result: dict = {"page_size_bytes": self.page_bytes, "huge_page_bytes": self.huge_bytes,
                        "kernel_zeroed_mb_per_s": None, "kernel_larger_blocks_per_s": None,
                        "kernel_count_method": None, "kernel_count_note": None,
                        "upper_bound_mb_per_s": None if small is None else
                        (small * self.page_bytes + (huge or 0.0) * self.huge_bytes) / MB,
                        "upper_bound_why": UPPER_BOUND_WHY}
        if kernel is not None:
            # Anonymous THP faults are zeroed by the kernel outside the tracepoint's count: vmstat has them.
            result.update(kernel_zeroed_mb_per_s=(kernel["base_pages_per_s"] * self.page_bytes
                                                  + (huge or 0.0) * self.huge_bytes) / MB,
                          kernel_larger_blocks_per_s=kernel["larger_blocks_per_s"],
                          kernel_count_method=f"{self.zeroing_method} + vmstat thp_fault_alloc")
        else:
            result["kernel_count_note"] = self.zeroing_unavailable or "not counted"
        if self.cost is None:
            result.update(estimated_cpu_percent=None,
                          note="no `memcost costs` result for this machine: run `memcost costs --quick` to measure "
                               "the cost per fault")
            return result
        if kernel is not None:
            pages, basis = kernel["base_pages_per_s"], "kernel count"
        else:
            pages, basis = small or 0.0, "minor faults (upper bound)"
        base_fault_us = self.cost.fault_us("base")
        huge_fault_us = self.cost.fault_us("thp") if self.cost.thp_us_per_mb is not None else None
        microseconds = pages * base_fault_us + (huge or 0.0) * (huge_fault_us or 0.0)
        result.update(estimated_cpu_percent=microseconds / 1e4, estimate_basis=basis,
                      base_fault_us=base_fault_us, huge_fault_us=huge_fault_us, source=self.cost.source)
        return result
