"""The monitor's samples, streamed by `memcost-probe monitor` (one per interval, cumulative
counters); the front end reads them line by line and turns consecutive pairs into rates."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Optional

from .. import exit_codes
from ..errors import MemcostError
from ..probe import probe_path


@dataclass
class ProcessStat:
    pid: int
    comm: str
    minor_faults: int
    major_faults: int
    user_ns: int
    system_ns: int
    rss_bytes: int


@dataclass
class ZeroedCount:
    elapsed_s: float
    base_pages: int
    larger_blocks: int


@dataclass
class Reading:
    time_s: float
    vmstat: dict
    cpu: dict       # "system", "steal": CPU time of the whole machine, ns (None: not counted)
    processes: dict  # pid -> ProcessStat
    hidden: int
    zeroed: Optional[ZeroedCount] = None        # the kernel's cumulative count, when it can be read
    kernel_threads: Optional[dict] = None       # family -> run time, ns
    tlb_shootdowns: Optional[int] = None        # all CPUs, since boot
    hugetlb: Optional[list] = None              # the pools now (levels)
    thp: Optional[dict] = None                  # the THP mode now: enabled, defrag
    host_reported_bytes: Optional[int] = None   # free memory handed to the host since boot (where counted)

    @classmethod
    def from_probe(cls, metrics: dict, pids: Optional[list[int]]) -> "Reading":
        processes = {p["pid"]: ProcessStat(p["pid"], p["name"], p["minor_faults"], p["major_faults"], p["user_ns"],
                                           p["system_ns"], p["rss_bytes"]) for p in metrics.get("processes", [])}
        if pids is not None:
            hidden = sum(1 for pid in pids if pid not in processes)
            processes = {pid: stat for pid, stat in processes.items() if pid in pids}
        else:
            hidden = metrics.get("unreadable_processes", 0)
        cpu = metrics.get("cpu") or {}
        zeroed = (ZeroedCount(metrics["elapsed_ns"] / 1e9, metrics["zeroed_base_pages"], metrics["zeroed_larger_blocks"])
                  if "zeroed_base_pages" in metrics else None)
        return cls(metrics["elapsed_ns"] / 1e9, metrics["vmstat"], {"system": cpu.get("system_ns"),
                                                                     "steal": cpu.get("steal_ns")},
                   processes, hidden, zeroed, metrics.get("kernel_threads_ns"), metrics.get("tlb_shootdowns"),
                   metrics.get("hugetlb"), metrics.get("thp"), metrics.get("host_reported_bytes"))


def same_process_before(before: Reading, stat: ProcessStat) -> Optional[ProcessStat]:
    """The process in an earlier reading; None when it was born since, or its pid now runs
    another program (a reused pid)."""
    old = before.processes.get(stat.pid)
    return old if old is not None and old.comm == stat.comm else None


class MonitorStream:
    """A `memcost-probe monitor` beside the front end, sampling every `interval_s`."""

    def __init__(self, interval_s: float, pids: Optional[list[int]] = None):
        self.pids = pids
        self.context: dict = {}
        self.warnings: list[dict] = []
        self.zeroing_method: Optional[str] = None
        command = [str(probe_path()), "monitor", "--interval-ms", str(max(10, round(interval_s * 1000)))]
        try:
            self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as error:
            raise MemcostError(f"cannot start {command[0]}: {error.strerror}; reinstall memcost (`make run`)",
                               exit_codes.FAILURE) from error

    def next_reading(self) -> Reading:
        """The next sample (waiting for it); one line and a documented exit code if the probe stops."""
        for line in self._process.stdout:
            record = json.loads(line)
            kind = record.get("type")
            if kind == "context":
                self.context = record
            elif kind == "warning":
                self.warnings.append(record)
            elif kind == "error":
                raise MemcostError(record.get("message", "the monitoring probe stopped"),
                                   exit_codes.UNSUPPORTED if record.get("code") == "not_supported_here"
                                   else exit_codes.FAILURE)
            elif kind == "sample":
                self.zeroing_method = record["metrics"].get("zeroing_method", self.zeroing_method)
                return Reading.from_probe(record["metrics"], self.pids)
        raise MemcostError("the monitoring probe (memcost-probe monitor) ended unexpectedly", exit_codes.FAILURE)

    @property
    def zeroing_unavailable(self) -> Optional[str]:
        return next((w["message"] for w in self.warnings if w.get("code") == "zeroing_count_unavailable"), None)

    def page_bytes(self) -> Optional[int]:
        return (self.context.get("pages") or {}).get("base_page_bytes")

    def thp_bytes(self) -> Optional[int]:
        return ((self.context.get("pages") or {}).get("thp") or {}).get("pmd_size_bytes")

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
