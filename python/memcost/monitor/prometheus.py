"""`memcost monitor --serve`: the machine's memory counters as Prometheus metrics, by Prometheus'
conventions (docs/monitor.md has every name). Counters end in `_total` and carry their unit;
PromQL's rate() and increase() choose the window, so nothing between two scrapes is lost.
Gauges are kept for levels only. Per-process series are opt-in and bounded.

Where the kernel keeps a monotonic count (/proc/vmstat, /proc/stat, /proc/interrupts) the
counter is the kernel's own, since boot. What the kernel does not count for us (kernel-thread
CPU by family, zeroed bytes, per-process figures) is summed here from the probe's samples,
from 0 when memcost started: Prometheus treats a restart as a counter reset, as it should.
"""

from __future__ import annotations

import platform
import threading
from dataclasses import dataclass
from typing import Optional

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from .. import __version__
from .sampler import KERNEL_THREADS, MACHINE_RATES, _delta
from .stream import ProcessStat, Reading, same_process_before

# Kernel counters exposed as they are: metric, help, label values -> the vmstat fields summed.
VMSTAT_COUNTERS = {
    "memcost_pages_allocated_total": ("Pages the kernel allocated (vmstat pgalloc_*)",
                                      {(): MACHINE_RATES["pages_allocated_per_s"]}),
    "memcost_pages_freed_total": ("Pages the kernel freed (vmstat pgfree)", {(): ("pgfree",)}),
    "memcost_pages_reclaimed_total": ("Pages reclaimed by kswapd, direct reclaim and khugepaged (vmstat pgsteal_*)",
                                      {(): MACHINE_RATES["pages_reclaimed_per_s"]}),
    "memcost_compaction_stalls_total": ("Allocations that stalled for direct compaction (vmstat compact_stall)",
                                        {(): ("compact_stall",)}),
    "memcost_thp_events_total": ("Transparent huge page events (vmstat thp_*)",
                                 {("fault_alloc",): ("thp_fault_alloc",), ("fault_fallback",): ("thp_fault_fallback",),
                                  ("collapse_alloc",): ("thp_collapse_alloc",),
                                  ("collapse_alloc_failed",): ("thp_collapse_alloc_failed",),
                                  ("split_page",): ("thp_split_page",)}),
}
LABELS = {"memcost_thp_events_total": ["event"]}
OTHER = "other"


@dataclass
class ProcessTotals:
    minor_faults: int = 0
    major_faults: int = 0
    user_seconds: float = 0.0
    system_seconds: float = 0.0
    recent_faults: float = 0.0  # decays each interval: who is busy now, for choosing the top N
    pending_zero: bool = True  # a new series is shown at 0 for one scrape, so increase() counts its first faults

    def add(self, minor: int, major: int, user_s: float, system_s: float) -> None:
        self.minor_faults += minor
        self.major_faults += major
        self.user_seconds += user_s
        self.system_seconds += system_s
        self.recent_faults += minor + major


class TopProcesses:
    """Per-process counters for at most `top` groups (comm, or comm and pid) plus `other`.

    A group gets its own series when it faults and there is room, or when it faulted more in an
    interval than the quietest shown group has lately (that one's series then ends; its past
    stays in Prometheus). Everything else is summed into comm="other". A new series is exposed at
    0 for one scrape before its first figures, so increase() over it counts them.
    """

    DECAY = 0.8  # per interval

    def __init__(self, top: int, by_pid: bool):
        self.top, self.by_pid = top, by_pid
        self.shown: dict[tuple, ProcessTotals] = {}
        self.other = ProcessTotals(pending_zero=False)

    def add(self, before: Reading, after: Reading) -> None:
        for totals in self.shown.values():
            totals.recent_faults *= self.DECAY
        for pid, stat in after.processes.items():
            # Born during the interval (or a pid reused by another program): all of its figures are
            # the interval's. A process that lived less than an interval is in neither reading, and
            # is in the machine's counters only.
            old = same_process_before(before, stat) or ProcessStat(pid, stat.comm, 0, 0, 0, 0, 0)
            minor, major = max(stat.minor_faults - old.minor_faults, 0), max(stat.major_faults - old.major_faults, 0)
            user_s, system_s = max(stat.user_ns - old.user_ns, 0) / 1e9, max(stat.system_ns - old.system_ns, 0) / 1e9
            if not (minor or major or user_s or system_s):
                continue
            group = (stat.comm, str(pid)) if self.by_pid else (stat.comm,)
            self.totals_for(group, minor + major).add(minor, major, user_s, system_s)

    def totals_for(self, group: tuple, faults: int) -> ProcessTotals:
        if group in self.shown:
            return self.shown[group]
        if faults and len(self.shown) < self.top:
            self.shown[group] = ProcessTotals()
            return self.shown[group]
        if faults and self.shown:
            quietest = min(self.shown, key=lambda g: self.shown[g].recent_faults)
            if faults > self.shown[quietest].recent_faults:
                del self.shown[quietest]
                self.shown[group] = ProcessTotals()
                return self.shown[group]
        return self.other


class Collector:
    """What a scrape sees: the newest reading's kernel counters, the sums kept here, the levels."""

    def __init__(self, context: dict, top_processes: int, pid_label: bool, budget_bytes: Optional[int]):
        self.lock = threading.Lock()
        self.context = context
        self.budget_bytes = budget_bytes
        self.reading: Optional[Reading] = None
        self.kernel_thread_seconds = {family: 0.0 for family in KERNEL_THREADS}
        self.zeroed_bytes = {"kernel": None, "upper_bound": 0.0}
        self.estimated_zeroing_seconds: Optional[float] = None
        self.processes = TopProcesses(top_processes, pid_label) if top_processes else None

    def update(self, before: Reading, after: Reading, record: dict) -> None:
        with self.lock:
            self.reading = after
            if before.kernel_threads and after.kernel_threads:
                for family in KERNEL_THREADS:
                    grown = _delta(before.kernel_threads.get(family), after.kernel_threads.get(family))
                    self.kernel_thread_seconds[family] += (grown or 0) / 1e9  # a thread that ended: not a loss
            seconds, zeroing = record["interval_s"], record["zeroing"]
            if zeroing["kernel_zeroed_mb_per_s"] is not None:
                self.zeroed_bytes["kernel"] = (self.zeroed_bytes["kernel"] or 0.0) + \
                    zeroing["kernel_zeroed_mb_per_s"] * seconds * (1 << 20)
            if zeroing["upper_bound_mb_per_s"] is not None:
                self.zeroed_bytes["upper_bound"] += zeroing["upper_bound_mb_per_s"] * seconds * (1 << 20)
            if zeroing["estimated_cpu_percent"] is not None:
                self.estimated_zeroing_seconds = (self.estimated_zeroing_seconds or 0.0) + \
                    zeroing["estimated_cpu_percent"] / 100.0 * seconds
            if self.processes:
                self.processes.add(before, after)

    def collect(self):
        with self.lock:
            yield from self.info()
            if self.reading is None:
                return
            yield from self.kernel_counters(self.reading)
            yield from self.kept_counters()
            yield from self.levels(self.reading)
            if self.processes:
                yield from self.process_counters()

    def info(self):
        build = self.context.get("build") or {}
        yield InfoMetricFamily("memcost_build", "The memcost that serves these metrics",
                               value={"version": __version__, "probe_version": str(self.context.get("tool_version", "")),
                                      "compiler": str(build.get("compiler", "")),
                                      "python_version": platform.python_version()})
        pages = self.context.get("pages") or {}
        thp = pages.get("thp") or {}
        hypervisor = self.context.get("hypervisor") or {}
        system = self.context.get("os") or {}
        yield InfoMetricFamily("memcost_machine", "The machine measured: kernel, page sizes, THP mode at start, hypervisor",
                               value={"kernel": str(system.get("release", "")), "os": str(system.get("name", "")),
                                      "cpu_model": str((self.context.get("cpu") or {}).get("model", "")),
                                      "page_size_bytes": str(pages.get("base_page_bytes", "")),
                                      "thp_size_bytes": str(thp.get("pmd_size_bytes") or ""),
                                      "thp_mode": str(thp.get("enabled") or "absent"),
                                      "hypervisor": str(hypervisor.get("vendor") or
                                                        ("none" if hypervisor.get("present") is False else "unknown")),
                                      "host": str(self.context.get("host", ""))})

    @staticmethod
    def kernel_counters(reading: Reading):
        vmstat = reading.vmstat
        if "pgfault" in vmstat:
            faults = CounterMetricFamily("memcost_page_faults", "Page faults, whole machine (vmstat pgfault, "
                                         "pgmajfault): minor ones found the page in memory or made it", labels=["kind"])
            major = vmstat.get("pgmajfault", 0)
            faults.add_metric(["minor"], max(vmstat["pgfault"] - major, 0))
            faults.add_metric(["major"], major)
            yield faults
        for name, (text, series) in VMSTAT_COUNTERS.items():
            family = CounterMetricFamily(name.removesuffix("_total"), text, labels=LABELS.get(name, []))
            for labels, fields in series.items():
                present = [field for field in fields if field in vmstat]
                if present:
                    family.add_metric(list(labels), sum(vmstat[field] for field in present))
            if family.samples:
                yield family
        if reading.tlb_shootdowns is not None:
            yield CounterMetricFamily("memcost_tlb_shootdowns", "TLB-shootdown interrupts, all CPUs (/proc/interrupts)",
                                      value=reading.tlb_shootdowns)
        if reading.host_reported_bytes is not None:
            yield CounterMetricFamily("memcost_host_reported_bytes", "Free memory this VM handed back to its host "
                                      "(virtio-balloon free page reporting; the kernel's count since boot), bytes",
                                      value=reading.host_reported_bytes)

    def kept_counters(self):
        cpu = CounterMetricFamily("memcost_cpu_seconds", "CPU time by kind: the machine's system and steal time "
                                  "(/proc/stat, since boot) and the memory-management kernel threads' (since memcost "
                                  "started; inside system too)", labels=["kind"])
        for kind in ("system", "steal"):
            if self.reading.cpu.get(kind) is not None:
                cpu.add_metric([kind], self.reading.cpu[kind] / 1e9)
        if self.reading.kernel_threads:
            for family, seconds in self.kernel_thread_seconds.items():
                cpu.add_metric([family], seconds)
        yield cpu
        zeroed = CounterMetricFamily("memcost_zeroed_bytes", "Bytes the kernel zeroed to hand out, since memcost "
                                     "started: source=kernel (its count of __GFP_ZERO pages and THP faults; root only) "
                                     "or upper_bound (every minor fault one page)", labels=["source"])
        for source, value in self.zeroed_bytes.items():
            if value is not None:
                zeroed.add_metric([source], value)
        yield zeroed
        if self.estimated_zeroing_seconds is not None:
            yield CounterMetricFamily("memcost_estimated_zeroing_cpu_seconds", "An estimate: zeroed pages times this "
                                      "machine's measured cost per fault (memcost costs), since memcost started",
                                      value=self.estimated_zeroing_seconds)

    def levels(self, reading: Reading):
        pools = GaugeMetricFamily("memcost_hugetlb_pages", "Pages in each hugetlb pool, by state",
                                  labels=["page_size_bytes", "state"])
        for pool in reading.hugetlb or []:
            for state in ("total", "free", "reserved", "surplus"):
                pools.add_metric([str(pool["page_size_bytes"]), state], pool[f"{state}_pages"])
        yield pools
        if reading.thp:
            yield InfoMetricFamily("memcost_thp_mode", "Transparent huge pages: the mode now",
                                   value={"enabled": reading.thp["enabled"], "defrag": reading.thp["defrag"]})
        if self.budget_bytes:
            yield GaugeMetricFamily("memcost_memory_budget_bytes", "The memory memcost's experiments may use here",
                                    value=self.budget_bytes)

    def process_counters(self):
        labels = ["comm", "pid"] if self.processes.by_pid else ["comm"]
        faults = CounterMetricFamily("memcost_process_page_faults", "Page faults of the busiest processes; the rest "
                                     "in comm=\"other\"", labels=labels + ["kind"])
        cpu = CounterMetricFamily("memcost_process_cpu_seconds", "CPU time of the busiest processes; the rest in "
                                  "comm=\"other\"", labels=labels + ["mode"])
        other = (OTHER, "") if self.processes.by_pid else (OTHER,)
        for group, totals in [*self.processes.shown.items(), (other, self.processes.other)]:
            shown = ProcessTotals() if totals.pending_zero else totals
            totals.pending_zero = False
            faults.add_metric([*group, "minor"], shown.minor_faults)
            faults.add_metric([*group, "major"], shown.major_faults)
            cpu.add_metric([*group, "user"], shown.user_seconds)
            cpu.add_metric([*group, "system"], shown.system_seconds)
        yield faults
        yield cpu


class Exporter:
    def __init__(self, host: str, port: int, context: dict, top_processes: int = 0, pid_label: bool = False):
        budget = (context.get("memory") or {}).get("budget_bytes")
        self.collector = Collector(context, top_processes, pid_label, budget)
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)

    def update(self, before: Reading, after: Reading, record: dict) -> None:
        self.collector.update(before, after, record)

    def close(self) -> None:
        self.server.shutdown()
