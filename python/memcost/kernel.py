"""The few /proc and /sys files the front end reads itself, one reader each (everything else the
kernel says comes through the probe, whose C++ OS layer has its own one reader per file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

MB = 1 << 20


def vmstat_counter(name: str) -> Optional[int]:
    """One of /proc/vmstat's counters (oom_kill, Linux 4.13+), or None where it is not kept."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def process_start_ticks(pid: int) -> Optional[str]:
    """When a process started, in clock ticks since boot (/proc/PID/stat's 22nd field): a pid
    reused later has another. None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The name (field 2) is in parentheses and may hold spaces or ')': the fields after the last.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def pmd_huge_page_bytes() -> int:
    """The size of a transparent huge page here (a PMD's), 2 MiB where the kernel does not say."""
    try:
        return int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 * MB


def standard_input_path() -> Optional[str]:
    """The file this process's standard input reads (/proc/self/fd/0), or None."""
    try:
        return os.readlink("/proc/self/fd/0")
    except OSError:
        return None
