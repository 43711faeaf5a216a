"""Reserving a hugetlb pool for a run and giving it back, whatever happens."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Optional

from . import exit_codes, journal
from .probe import ProbeFailed, ProbeRun, run_probe
from .units import format_bytes

PAGE_SIZES = {"2M": 2 << 20, "1G": 1 << 30}


def _pool_run(page_size_bytes: int, pages: Optional[int] = None) -> ProbeRun:
    arguments = ["--page-size", str(page_size_bytes)]
    if pages is not None:
        arguments += ["--set-pages", str(pages)]
    return run_probe("hugepages", arguments)


def pool_status(page_size_bytes: int) -> dict:
    """The pool as the kernel reports it: total, free, reserved and surplus pages."""
    return _pool_run(page_size_bytes).samples[0]["metrics"]["after"]


def set_pool(page_size_bytes: int, pages: int) -> dict:
    return _pool_run(page_size_bytes, pages).samples[0]["metrics"]["after"]


def _restore_pool(undo: dict) -> str:
    after = set_pool(undo["page_size_bytes"], undo["total_pages"])
    return f"hugetlb {format_bytes(undo['page_size_bytes'])} pool set back to {after['total_pages']} pages"


journal.register("hugetlb_pool", _restore_pool)


def _pages_to_add(size_bytes: int, page_size_bytes: int) -> tuple[dict, int]:
    """The pool now, and how many pages it must grow by; refuses more than the memory budget."""
    run = _pool_run(page_size_bytes)
    before = run.samples[0]["metrics"]["after"]
    needed = math.ceil(size_bytes / page_size_bytes)
    missing = max(0, needed - (before["free_pages"] - before["reserved_pages"]))
    budget = run.context.get("memory", {}).get("budget_bytes")
    if budget is not None and missing * page_size_bytes > budget:
        raise ProbeFailed(exit_codes.NOT_ENOUGH_MEMORY, "over_budget",
                          f"reserving {format_bytes(missing * page_size_bytes)} more of hugetlb pages would take more "
                          f"than memcost's budget of {format_bytes(budget)} (80% of available memory): ask for less")
    return before, missing


def _grow(before: dict, missing: int, page_size_bytes: int) -> dict:
    """Grow the pool by `missing` pages; the kernel may grant fewer (fragmented memory): that is an
    error, and the pool is set back first."""
    after = set_pool(page_size_bytes, before["total_pages"] + missing)
    if after["total_pages"] - before["total_pages"] < missing:
        set_pool(page_size_bytes, before["total_pages"])
        raise ProbeFailed(exit_codes.NOT_ENOUGH_MEMORY, "pool_short",
                          f"the kernel granted only {after['total_pages'] - before['total_pages']} of "
                          f"{missing} more hugetlb pages (memory too fragmented); ask for less or free memory")
    return after


def reserve(size_bytes: int, page_size_bytes: int) -> tuple[dict, dict]:
    """Grow the pool, for good, until `size_bytes` worth of pages are free; returns (before, after)."""
    before, missing = _pages_to_add(size_bytes, page_size_bytes)
    return before, (_grow(before, missing, page_size_bytes) if missing else before)


class PoolReservation:
    """`with PoolReservation(size, page)`: the pool is grown on entry and set back to its
    previous size on exit, on Ctrl-C, on SIGTERM and on error; a journal entry, written before
    the pool grows, lets the next memcost put it back if this process is killed outright."""

    def __init__(self, size_bytes: int, page_size_bytes: int):
        self.size_bytes = size_bytes
        self.page_size_bytes = page_size_bytes
        self.before: dict | None = None
        self.after: dict | None = None
        self._journal = None

    def __enter__(self) -> "PoolReservation":
        self.before, missing = _pages_to_add(self.size_bytes, self.page_size_bytes)
        if not missing:
            self.after = self.before
            return self
        self._journal = journal.record("hugetlb_pool", f"the hugetlb {format_bytes(self.page_size_bytes)} pool",
                                       page_size_bytes=self.page_size_bytes, total_pages=self.before["total_pages"])
        try:
            self.after = _grow(self.before, missing, self.page_size_bytes)
        except BaseException:
            # Whatever stopped the growth (Ctrl-C inside the probe, a short grant), the pool goes back.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        if self._journal is None:
            return
        # If this fails (a second Ctrl-C, say), the journal entry stays for the next memcost.
        set_pool(self.page_size_bytes, self.before["total_pages"])
        journal.forget(self._journal)
        self._journal = None


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
