"""`memcost pinned`: every way to pin host memory for a GPU (declared in experiments/pinned.py)."""

from __future__ import annotations

from .base import ExperimentCommand


class PinnedCommand(ExperimentCommand):
    """Rank every way to pin host memory for a GPU, each phase timed, with the copy to the GPU from each.

    N bytes (default 1 GiB, capped by the budget) pinned by cuMemHostAlloc
    (what cudaHostAlloc calls), in chunks from many threads, by malloc and
    cuMemHostRegister, by mmap (base pages, THP, hugetlb where a pool allows)
    faulted in by every CPU and then registered, with the two overlapped, and
    by memcost::make_big_array; PyTorch's pinned allocator too when torch can
    be imported. Needs NVIDIA's driver and a GPU (exit 4 without). See docs/pinned.md.
    """

    experiment_name = "pinned"
