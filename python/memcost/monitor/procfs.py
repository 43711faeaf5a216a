"""Readers of /proc, the monitor's only contact with the OS (Linux only).
Every reader tolerates fields a kernel does not have and processes that vanish."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def vmstat() -> dict[str, int]:
    counters = {}
    with open("/proc/vmstat") as lines:
        for line in lines:
            name, _, value = line.partition(" ")
            counters[name] = int(value)
    return counters


def cpu_ticks() -> dict[str, int]:
    """The machine's CPU time by kind, all CPUs together, in clock ticks."""
    with open("/proc/stat") as lines:
        fields = lines.readline().split()
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {name: int(value) for name, value in zip(names, fields[1:])}


@dataclass
class ProcessStat:
    pid: int
    comm: str
    minor_faults: int
    major_faults: int
    user_ticks: int
    system_ticks: int
    rss_bytes: int


def process_stat(pid: int) -> Optional[ProcessStat]:
    """None when the process is gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ..." — comm may hold spaces and parentheses.
    comm = text[text.index("(") + 1: text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): minflt 10, majflt 12, utime 14, stime 15, rss 24.
    return ProcessStat(pid, comm, int(fields[7]), int(fields[9]), int(fields[11]), int(fields[12]),
                       int(fields[21]) * PAGE_BYTES)


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]
