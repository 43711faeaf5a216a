"""The kernel's own count of the pages it zeroed, streamed by `memcost-probe monitor`.

The probe counts machine-wide, per CPU, with the kmem:mm_page_alloc tracepoint
filtered on __GFP_ZERO (root or CAP_PERFMON). It writes one cumulative sample
per interval; a reader thread keeps the newest. Where the count cannot be read,
`unavailable` says why and the monitor falls back to its upper bound."""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass
from typing import Optional

from ..probe import probe_path


@dataclass
class ZeroedCount:
    elapsed_s: float
    base_pages: int
    larger_blocks: int


class KernelZeroingStream:
    def __init__(self, interval_s: float):
        self.latest: Optional[ZeroedCount] = None
        self.unavailable: Optional[str] = None
        self.method: Optional[str] = None
        self.context: dict = {}
        self._ready = threading.Event()  # the first count, or the reason there is none
        interval_ms = max(10, min(250, int(interval_s * 1000 / 4)))
        try:
            self._process = subprocess.Popen([str(probe_path()), "monitor", "--interval-ms", str(interval_ms)],
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except Exception as error:  # a missing or unstartable probe only costs this one figure
            self._process = None
            self.unavailable = f"memcost-probe could not start ({error})"
            self._ready.set()
            return
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._process.stdout:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = record.get("type")
            if kind == "context":
                self.context = record
            elif kind == "sample":
                metrics = record["metrics"]
                self.method = metrics.get("method")
                self.latest = ZeroedCount(metrics["elapsed_ns"] / 1e9, metrics["zeroed_base_pages"],
                                          metrics["zeroed_larger_blocks"])
                self._ready.set()
            elif kind == "error":
                self.unavailable = record.get("message", "the probe stopped")
        if self.unavailable is None:
            self.unavailable = "the counting probe ended"
        self._ready.set()

    def wait_ready(self, timeout_s: float = 3.0) -> None:
        """Until the first count (or the reason for none): the monitor's first reading then has one,
        and the probe's own start-up is over before anything is measured."""
        self._ready.wait(timeout_s)

    def page_bytes(self) -> Optional[int]:
        return (self.context.get("pages") or {}).get("base_page_bytes")

    def thp_bytes(self) -> Optional[int]:
        return ((self.context.get("pages") or {}).get("thp") or {}).get("pmd_size_bytes")

    def close(self) -> None:
        if self._process and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
