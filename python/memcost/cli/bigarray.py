"""`memcost bigarray`: allocate and initialize one big array by every common strategy
(declared in experiments/bigarray.py)."""

from __future__ import annotations

from .base import ExperimentCommand


class BigarrayCommand(ExperimentCommand):
    """Allocate and initialize one big array by every common strategy, against the machine's limit.

    An array of 16-byte work items holding a std::atomic (default 1 GiB,
    capped by the budget), made with zero and with a non-zero value by new[],
    std::vector, make_unique_for_overwrite, malloc, calloc, mmap (serial,
    parallel, MAP_POPULATE, MADV_POPULATE_WRITE; base pages, THP, hugetlb where
    a pool allows) and memcost::make_big_array; the libc ones again under the
    other allocators installed and glibc's huge-page tunable. See docs/bigarray.md.
    """

    experiment_name = "bigarray"
