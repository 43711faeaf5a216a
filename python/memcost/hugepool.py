"""Reserving a hugetlb pool for a run and giving it back, whatever happens."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Optional

from . import exit_codes
from .probe import ProbeFailed, run_probe

PAGE_SIZES = {"2M": 2 << 20, "1G": 1 << 30}


def pool_status(page_size_bytes: int) -> dict:
    """The pool as the kernel reports it: total, free, reserved and surplus pages."""
    run = run_probe("hugepages", ["--page-size", str(page_size_bytes)])
    return run.samples[0]["metrics"]["after"]


def set_pool(page_size_bytes: int, pages: int) -> dict:
    run = run_probe("hugepages", ["--page-size", str(page_size_bytes), "--set-pages", str(pages)])
    return run.samples[0]["metrics"]["after"]


def reserve(size_bytes: int, page_size_bytes: int) -> tuple[dict, dict]:
    """Grow the pool until `size_bytes` worth of pages are free; returns (before, after).
    The kernel may grant fewer pages than asked (fragmented memory): that is an error."""
    before = pool_status(page_size_bytes)
    needed = math.ceil(size_bytes / page_size_bytes)
    free = before["free_pages"] - before["reserved_pages"]
    if free >= needed:
        return before, before
    after = set_pool(page_size_bytes, before["total_pages"] + needed - free)
    if after["free_pages"] - after["reserved_pages"] < needed:
        set_pool(page_size_bytes, before["total_pages"])
        raise ProbeFailed(exit_codes.NOT_ENOUGH_MEMORY, "pool_short",
                          f"the kernel granted only {after['total_pages'] - before['total_pages']} of "
                          f"{needed - free} more hugetlb pages (memory too fragmented); ask for less or free memory")
    return before, after


class PoolReservation:
    """`with PoolReservation(size, page)`: the pool is grown on entry and set back
    to its previous size on exit, on Ctrl-C (KeyboardInterrupt) and on error."""

    def __init__(self, size_bytes: int, page_size_bytes: int):
        self.size_bytes = size_bytes
        self.page_size_bytes = page_size_bytes
        self.before: dict | None = None
        self.after: dict | None = None

    def __enter__(self) -> "PoolReservation":
        self.before, self.after = reserve(self.size_bytes, self.page_size_bytes)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.before and self.after and self.after["total_pages"] != self.before["total_pages"]:
            set_pool(self.page_size_bytes, self.before["total_pages"])


@contextmanager
def reserved_for_run(size_bytes: Optional[int], page_size: str, params: dict) -> Iterator[None]:
    """With a size, a PoolReservation around the run, its pool before and during noted in
    `params`; without one, nothing."""
    if not size_bytes:
        yield
        return
    with PoolReservation(size_bytes, PAGE_SIZES[page_size]) as reservation:
        params["hugepage_pool_before"] = reservation.before
        params["hugepage_pool_during"] = reservation.after
        yield
