"""`memcost costs`: the per-MB hidden cost of a large allocation (declared in experiments/costs.py)."""

from __future__ import annotations

from .base import ExperimentCommand


class CostsCommand(ExperimentCommand):
    """Measure the per-MB hidden cost of a large allocation on this machine.

    For each page kind (base, THP, hugetlb 2 MB and 1 GB where a pool has
    pages), each route (the OS directly, malloc, new[]) and each size, times
    the allocation, the first and second write, the free of the written buffer
    and the CPU time charged elsewhere; also reuse vs reallocate per frame,
    first touch with 1..N threads, memory reused at once vs left free for a
    few seconds (a hypervisor may take it back), and the TLB shootdowns a free
    sends to other CPUs. See docs/costs.md.
    """

    experiment_name = "costs"
