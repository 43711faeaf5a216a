"""Host memory pinned for a GPU, made the fast way, in one call from Python: memcost's own library
(`make_big_array` with `pinned`: huge pages where usable, every CPU faulting its part in, then
registered with the CUDA driver in chunks of at most 64 GiB) through its C API, loaded with ctypes
(libmemcost-c.so, beside the probe). Neither PyTorch nor CUDA is a dependency: the driver is loaded
at run time, and `pinned_tensor` imports torch only when called.

    import memcost.pinned_memory as pinned
    staging = pinned.pinned_tensor(32 << 30)      # a torch.uint8 tensor; staging.is_pinned() is True
    buffer = pinned.pinned_buffer(32 << 30)       # without torch: a writable memoryview of bytes (numpy too)

The memory is unpinned and freed when the last reference to it goes (a tensor made from it holds
one). Without a CUDA driver or a GPU: PinningError, one sentence that says which."""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

LIBRARY = "libmemcost-c.so"
# memcost.h
_OK, _BAD_SIZE, _OUT_OF_MEMORY, _NO_GPU = 0, 1, 2, 6


class PinningError(RuntimeError):
    """No CUDA driver, no GPU, or the driver refused: the sentence says which."""


class _Options(ctypes.Structure):
    """memcost_options (memcost.h), field by field."""
    _fields_ = [("pages", ctypes.c_int), ("strict", ctypes.c_int), ("prefault", ctypes.c_int),
                ("threads", ctypes.c_uint), ("pool", ctypes.c_void_p), ("numa", ctypes.c_int),
                ("numa_node", ctypes.c_uint), ("pinned", ctypes.c_int)]


def library_path() -> Path:
    """The C library beside the probe (in the package, or beside $MEMCOST_PROBE in a build folder)."""
    from .probe import probe_path
    return probe_path().parent / LIBRARY


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    path = library_path()
    if not path.exists():
        raise PinningError(f"memcost's C library is not installed beside the probe ({path}): reinstall memcost "
                           "(`pip install .`) on Linux")
    library = ctypes.CDLL(str(path))
    library.memcost_options_init.argtypes = [ctypes.POINTER(_Options)]
    library.memcost_array_create_zeroed.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(_Options),
                                                    ctypes.POINTER(ctypes.c_void_p)]
    library.memcost_array_create_zeroed.restype = ctypes.c_int
    library.memcost_array_data.argtypes = [ctypes.c_void_p]
    library.memcost_array_data.restype = ctypes.c_void_p
    library.memcost_array_page_kind.argtypes = [ctypes.c_void_p]
    library.memcost_array_page_kind.restype = ctypes.c_char_p
    library.memcost_array_destroy.argtypes = [ctypes.c_void_p]
    library.memcost_last_error.restype = ctypes.c_char_p
    return library


def pinned_buffer(nbytes: int, threads: int = 0):
    """`nbytes` of zeroed host memory pinned for the GPU, made by memcost's library on `threads`
    threads (0: every CPU). A writable memoryview of unsigned bytes (format "B"), which
    numpy.frombuffer and torch.frombuffer take too; `.obj.page_kind` says which pages it got. It is
    unpinned and freed when the last reference goes. Raises PinningError without a driver or a GPU,
    MemoryError beyond the memory available, ValueError for a size below 1."""
    if not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"pinned memory takes a whole number of bytes, at least 1, not {nbytes!r}")
    library = _library()
    options = _Options()
    library.memcost_options_init(ctypes.byref(options))
    options.threads, options.pinned = threads, 1
    handle = ctypes.c_void_p()
    status = library.memcost_array_create_zeroed(nbytes, 1, ctypes.byref(options), ctypes.byref(handle))
    if status != _OK:
        message = (library.memcost_last_error() or b"").decode(errors="replace")
        raise {_NO_GPU: PinningError, _OUT_OF_MEMORY: MemoryError, _BAD_SIZE: ValueError}.get(status, PinningError)(message)
    release = library.memcost_array_destroy

    def __del__(self):  # the last reference gone: unpinned, then unmapped
        release(self._handle)
    buffer_type = type("PinnedBuffer", (ctypes.c_ubyte * nbytes,), {"__del__": __del__})
    buffer = buffer_type.from_address(library.memcost_array_data(handle))
    buffer._handle = handle
    buffer.page_kind = library.memcost_array_page_kind(handle).decode()
    # ctypes' own view says "<B", which memoryview cannot index; the cast keeps the array alive.
    return memoryview(buffer).cast("B")


def pinned_tensor(nbytes: int, threads: int = 0):
    """A torch.uint8 tensor of `nbytes` pinned for the GPU, made as pinned_buffer makes it
    (`.view(torch.float32)` and the like for other types). Needs PyTorch, imported here only."""
    try:
        import torch
    except ImportError as error:
        raise ImportError(f"pinned_tensor needs PyTorch ({error}); pinned_buffer gives the same memory without it") \
            from None
    return torch.frombuffer(pinned_buffer(nbytes, threads), dtype=torch.uint8)
