"""The monitor's figures as Prometheus / OpenMetrics gauges (names and labels in docs/monitor.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, start_http_server

MACHINE = {
    "minor_faults_per_s": ("memcost_page_faults_per_second", {"kind": "minor"}),
    "major_faults_per_s": ("memcost_page_faults_per_second", {"kind": "major"}),
    "pages_allocated_per_s": ("memcost_pages_allocated_per_second", {}),
    "pages_freed_per_s": ("memcost_pages_freed_per_second", {}),
    "thp_faults_per_s": ("memcost_thp_events_per_second", {"event": "fault_alloc"}),
    "thp_fallbacks_per_s": ("memcost_thp_events_per_second", {"event": "fault_fallback"}),
    "thp_collapses_per_s": ("memcost_thp_events_per_second", {"event": "collapse_alloc"}),
    "compaction_stalls_per_s": ("memcost_compaction_stalls_per_second", {}),
    "pages_reclaimed_per_s": ("memcost_pages_reclaimed_per_second", {}),
}
HELP = {
    "memcost_page_faults_per_second": "Page faults per second, whole machine",
    "memcost_pages_allocated_per_second": "Pages allocated per second (pgalloc_*)",
    "memcost_pages_freed_per_second": "Pages freed per second (pgfree)",
    "memcost_thp_events_per_second": "Transparent huge page events per second",
    "memcost_compaction_stalls_per_second": "Direct compaction stalls per second",
    "memcost_pages_reclaimed_per_second": "Pages reclaimed per second (pgsteal_*)",
    "memcost_cpu_percent": "Machine CPU time by kind, percent of one core",
    "memcost_kernel_thread_cpu_percent": "CPU of memory-management kernel threads, percent of one core",
    "memcost_estimated_zeroing_cpu_percent": "Zeroed pages/s (kernel count, else faults/s) times this machine's measured cost per fault, percent of one core",
    "memcost_zeroed_bytes_per_second": "Bytes the kernel zeroed per second: source=kernel (its count) or upper_bound (from faults)",
    "memcost_process_minor_faults_per_second": "Minor faults per second of the busiest processes",
}


class Exporter:
    def __init__(self, host: str, port: int):
        self.registry = CollectorRegistry()
        self.gauges: dict[str, Gauge] = {}
        labels = {"memcost_page_faults_per_second": ["kind"], "memcost_thp_events_per_second": ["event"],
                  "memcost_cpu_percent": ["kind"], "memcost_kernel_thread_cpu_percent": ["family"],
                  "memcost_process_minor_faults_per_second": ["pid", "comm"], "memcost_zeroed_bytes_per_second": ["source"]}
        for name, text in HELP.items():
            self.gauges[name] = Gauge(name, text, labels.get(name, []), registry=self.registry)
        self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)

    def update(self, record: dict) -> None:
        for field, (name, labels) in MACHINE.items():
            value = record["machine"].get(field)
            if value is not None:
                gauge = self.gauges[name]
                (gauge.labels(**labels) if labels else gauge).set(value)
        for kind in ("system", "steal"):
            if record["cpu"][f"{kind}_percent"] is not None:
                self.gauges["memcost_cpu_percent"].labels(kind=kind).set(record["cpu"][f"{kind}_percent"])
        for family in ("kswapd", "khugepaged", "kcompactd", "kworker"):
            value = record["cpu"][f"{family}_percent"]
            if value is not None:
                self.gauges["memcost_kernel_thread_cpu_percent"].labels(family=family).set(value)
        for source, field in (("kernel", "kernel_zeroed_mb_per_s"), ("upper_bound", "upper_bound_mb_per_s")):
            if record["zeroing"][field] is not None:
                self.gauges["memcost_zeroed_bytes_per_second"].labels(source=source).set(record["zeroing"][field] * (1 << 20))
        if record["zeroing"]["estimated_cpu_percent"] is not None:
            self.gauges["memcost_estimated_zeroing_cpu_percent"].set(record["zeroing"]["estimated_cpu_percent"])
        processes = self.gauges["memcost_process_minor_faults_per_second"]
        processes.clear()  # only the current top processes, so vanished ones drop out
        for process in record["processes"]:
            processes.labels(pid=str(process["pid"]), comm=process["comm"]).set(process["minor_faults_per_s"])

    def close(self) -> None:
        self.server.shutdown()
