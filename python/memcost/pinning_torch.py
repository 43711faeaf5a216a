"""PyTorch's pinned allocator as rows of the `pinned` experiment: run by `memcost pinned` in a
process of its own per round (python -m memcost.pinning_torch), so that each round's block is made
afresh, as a program's first `pin_memory=True` is; PyTorch caches a freed block and hands it out
again, which a second allocation in one process would time instead. It writes the probe's sample
lines (docs/probe.md) on standard output; without a GPU, one line and exit 4. torch is imported
here only: it is never a memcost dependency."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from .exit_codes import UNSUPPORTED


def _copy_gb_per_s(torch, host, copy_bytes: int) -> float:
    """Three copies of the first copy_bytes to the GPU, each waited for: their median GB/s."""
    device = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda")
    speeds = []
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        device.copy_(host[:copy_bytes])
        torch.cuda.synchronize()
        speeds.append(copy_bytes / (time.perf_counter() - start) / 1e9)
    del device
    return statistics.median(speeds)


def one_round(torch, way: str, size: int, copy_bytes: int, round_: int, threads: int) -> dict:
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context exists before the clock starts, as in the probe
    start = time.perf_counter()
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    allocate_s = time.perf_counter() - start
    copy = _copy_gb_per_s(torch, host, copy_bytes)
    start = time.perf_counter()
    del host
    empty_cache = getattr(torch._C, "_host_emptyCache", None)
    free_s = None
    if empty_cache is not None:
        empty_cache()  # the cached block goes back to CUDA: what a program's exit would pay
        free_s = time.perf_counter() - start
    metrics = {"allocate_s": allocate_s, "fault_s": None, "register_s": None, "unregister_s": None, "free_s": free_s,
               "ready_s": allocate_s, "copy_gb_per_s": copy, "registrations": None, "page_kind": "PyTorch's",
               "minor_faults": None}
    return {"type": "sample", "case": {"part": "way", "way": way, "pinned": True, "size_bytes": size, "round": round_,
                                       "threads": threads, "paired": False},
            "metrics": metrics}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memcost.pinning_torch")
    parser.add_argument("--way", required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--copy-size", type=int, required=True)
    parser.add_argument("--round", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    given = parser.parse_args(argv)
    try:
        import torch
    except ImportError as error:
        print(json.dumps({"type": "error", "code": "no_torch", "message": f"PyTorch cannot be imported: {error}"}))
        return UNSUPPORTED
    if not torch.cuda.is_available():
        print(json.dumps({"type": "error", "code": "no_gpu", "message": "PyTorch sees no GPU"}))
        return UNSUPPORTED
    print(json.dumps(one_round(torch, given.way, given.size, given.copy_size, given.round, given.threads)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
