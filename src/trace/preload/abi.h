/* The preload library's records, as interposer.c writes them into its pipe and the tracer
   (preload/reader.cpp, python_frames.hpp) reads them: defined once, for C and C++. */
#ifndef MEMCOST_TRACE_PRELOAD_ABI_H
#define MEMCOST_TRACE_PRELOAD_ABI_H

#include <stdint.h>

/* Record kinds: the tracer's CallKind has the same numbers (tracer.hpp, checked there). */
enum memcost_preload_call {
  MEMCOST_CALL_MMAP = 0,
  MEMCOST_CALL_MUNMAP = 1,
  MEMCOST_CALL_MREMAP = 2,
  MEMCOST_CALL_BRK = 3,
  MEMCOST_CALL_MADVISE = 4,
  MEMCOST_CALL_MALLOC = 5,
  MEMCOST_CALL_FREE = 6,
  MEMCOST_CALL_REALLOC = 7,
  /* Not a call the tracer replays but what one took: the faults a system call took without an
     exception (MAP_POPULATE, MADV_POPULATE_*, mlock, a driver pinning memory in an ioctl), from
     the thread's own fault counters (getrusage RUSAGE_THREAD) across it. args: 0 its number,
     1 and 2 the range it worked on (length 0: none known), 3 the faults. */
  MEMCOST_CALL_FAULTS_IN_CALL = 16,
  /* Not a call either: the Python stack of a release of the GIL that big calls named while it
     lasted (MEMCOST_PYTHON_PENDING_MAGIC, below). args: 0 the release's number; the record's
     Python block is the stack. */
  MEMCOST_CALL_PYTHON_RESOLVES = 17,
};

enum { MEMCOST_PRELOAD_MAX_FRAMES = 48 };

/* A record: this header, then `frames` return addresses (uint64, at most MEMCOST_PRELOAD_MAX_FRAMES),
   then, when python_bytes is not 0, a Python block (its header and frames). `size` is exactly all
   of it, and at most MEMCOST_PRELOAD_MAX_RECORD_BYTES: one write() of at most PIPE_BUF, so that
   records of several threads never interleave. */
struct memcost_preload_header {
  uint32_t size, kind, pid, tid;
  uint64_t enter_ns, exit_ns; /* CLOCK_MONOTONIC */
  uint64_t args[6];
  int64_t result;
  uint32_t frames, python_bytes;
};

/* The Python stack: this header, then per frame, innermost first, a memcost_python_entry and the
   two names (not terminated); file bytes MEMCOST_PYTHON_SAME_FILE: the same file as the frame
   before, not repeated. Frames past the block's end are left out. It
   is also put on the C stack for the length of a big allocation, behind its magic word, where
   the tracer finds it in a copied user stack. */
#define MEMCOST_PYTHON_MAGIC 0x4b54535950434d4dULL /* "MMCPYSTK" */
enum { MEMCOST_PYTHON_BLOCK_BYTES = 2048, MEMCOST_PYTHON_SAME_FILE = 0xFFFF };
struct memcost_python_header {
  uint64_t magic;
  uint32_t bytes, frames; /* bytes: of the frames that follow */
};
/* One frame of the block, before its names: copied in and out with memcpy (it sits at any offset). */
struct memcost_python_entry {
  uint32_t line;
  uint16_t file_bytes, function_bytes;
};

/* A thread that has released the GIL (a PyTorch operation runs without it) may not read its
   Python frames. A big call it makes meanwhile carries, where the Python block would be, this
   pending block: its magic and the release's number (unique in the process), no frames. When the
   thread takes the GIL back (PyEval_RestoreThread), its Python stack is still the one it released
   the GIL at, and it is sent once, linked by the number: as root on the C stack of a madvise(NULL,
   0, MADV_NORMAL) call (a call that does nothing, which the kernel's tracepoints copy), as
   memcost_python_resolves followed by the Python block; when reporting as a
   MEMCOST_CALL_PYTHON_RESOLVES record. The tracer then gives the pending stacks their frames. */
#define MEMCOST_PYTHON_PENDING_MAGIC 0x444e455059434d4dULL  /* "MMCYPEND" */
#define MEMCOST_PYTHON_RESOLVES_MAGIC 0x5345525259434d4dULL /* "MMCYRRES" */
struct memcost_python_pending {
  uint64_t magic; /* MEMCOST_PYTHON_PENDING_MAGIC or MEMCOST_PYTHON_RESOLVES_MAGIC */
  uint64_t release;
};

/* The largest record: header, every frame and a full Python block. */
#define MEMCOST_PRELOAD_MAX_RECORD_BYTES \
  (sizeof(struct memcost_preload_header) + MEMCOST_PRELOAD_MAX_FRAMES * 8 + sizeof(struct memcost_python_header) + \
   MEMCOST_PYTHON_BLOCK_BYTES)

#endif
