"""A PyTorch program that pins host memory, for bench/gpu_host.py's `torch` step on a GPU host:
staging_buffer takes SIZE bytes of pinned memory (torch.empty(..., pin_memory=True): PyTorch's
host allocator calls cudaHostAlloc), fills them and copies them to the GPU; pin_copy pins a copy
of an ordinary tensor (Tensor.pin_memory). Usage: python3 torch_pinning.py [BYTES] (default 1 GiB)."""
import sys

import torch


def staging_buffer(size: int) -> int:
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    return int(host.to("cuda", non_blocking=False).sum().item())


def pin_copy(size: int) -> int:
    ordinary = torch.ones(size // 4, dtype=torch.uint8)
    return int(ordinary.pin_memory().sum().item())


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 30
    print(staging_buffer(size), pin_copy(size))
