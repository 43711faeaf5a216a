"""This machine's measured cost of a page fault, from a `memcost costs` result: the one cost model
trace (fault time per site, advice) and monitor (the zeroing estimate) both use. Page sizes come
from the context of the machine that was measured, never from constants."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .derived import MB, largest_os_row


@dataclass
class CostModel:
    base_us_per_mb: float               # first touch on base pages, µs per MB (costs' largest os row)
    thp_us_per_mb: Optional[float]      # the same on THP; None where THP was not measured
    source: str                         # where the figures come from, said in every output
    page_bytes: int = 4096              # the measured machine's base page ...
    huge_bytes: int = 2 * MB            # ... and THP (PMD) size, from its context
    threads: Optional[int] = None       # first touch with this many threads ...
    threads_speedup: Optional[float] = None  # ... was this much faster than with one
    # costs' reuse part: making, writing and freeing a buffer per frame vs writing one kept buffer.
    reuse_saving_us_per_mb: Optional[float] = None

    def fault_us(self, kind: str) -> float:
        """µs of one fault of this page kind ("base" or "thp")."""
        if kind == "thp" and self.thp_us_per_mb is not None:
            return self.thp_us_per_mb * self.huge_bytes / MB
        return self.base_us_per_mb * self.page_bytes / MB

    @classmethod
    def from_costs_summary(cls, summary: dict, source: str, pages: Optional[dict] = None) -> Optional["CostModel"]:
        """From a costs summary and the `pages` of its context (None: the sizes usual on x86-64 Linux)."""
        def largest(page: str) -> Optional[float]:
            row = largest_os_row(summary.get("rows", []), page)
            return max(row["fault_us_per_mb"], 0.0) if row else None
        base = largest("base")
        if base is None or base <= 0:
            return None
        pages = pages or {}
        model = cls(base_us_per_mb=base, thp_us_per_mb=largest("thp"), source=source,
                    page_bytes=pages.get("base_page_bytes") or 4096,
                    huge_bytes=(pages.get("thp") or {}).get("pmd_size_bytes") or 2 * MB)
        reuse = (summary.get("reuse") or {}).get("routes", {}).get("os")
        if reuse and summary["reuse"].get("frame_bytes"):
            model.reuse_saving_us_per_mb = ((reuse["reallocate_us_per_frame"] - reuse["reuse_us_per_frame"])
                                            / (summary["reuse"]["frame_bytes"] / MB))
        threads = [t for t in summary.get("threads", []) if t.get("speedup")]
        if threads:
            top = max(threads, key=lambda t: t["threads"])
            model.threads, model.threads_speedup = top["threads"], top["speedup"]
        return model

    @classmethod
    def newest(cls, results_root: Path, host: Optional[str] = None) -> Optional["CostModel"]:
        """From the newest `memcost costs` result of `host` (this machine) under `results_root`."""
        from ..results import documents_of_host
        for path, document in documents_of_host(results_root, "costs", host or socket.gethostname()):
            model = cls.from_costs_summary(document.get("summary", {}), f"memcost costs result {path}",
                                           (document.get("context") or {}).get("pages"))
            if model:
                return model
        return None
