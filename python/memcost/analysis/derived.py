"""Figures derived from raw samples or summary rows, computed here once for every consumer
(the summaries, compare, the monitor's and trace's cost models, the report). No numpy: the
monitor imports this at start-up."""

from __future__ import annotations

from typing import Optional

MB = 1 << 20  # memcost's "MB" in µs/MB is a mebibyte


def fault_us_per_mb(case: dict, m: dict) -> float:
    """The fault cost of one repetition: first write minus second, per MB — for every consumer.

    A first touch that took no fault (memory the allocator recycled) has no fault cost: its
    difference from the second is the noise of two ordinary writes, either sign. A first write
    measured faster than the second is that noise too, never a negative cost."""
    if m.get("first_touch_minor_faults") == 0:
        return 0.0
    return max(m["first_touch_ns"] - m["second_touch_ns"], 0) / 1e3 / (case["size_bytes"] / MB)


def largest_os_row(rows: list[dict], page: str) -> Optional[dict]:
    """The os-route row of a page kind at the largest size measured: the steadiest figure of a run."""
    matching = [r for r in rows if r["page"] == page and r["route"] == "os" and r.get("fault_us_per_mb") is not None]
    return max(matching, key=lambda r: r["size_bytes"]) if matching else None
