/* The fast way to make memory present, shared by the advice applied in a command (apply_advice.c)
   and the pinning stand-in (pinning_standin.c): a block mapped on a 2 MiB boundary for huge
   pages, huge pages asked for on the 2 MiB-aligned inside of a block, and its pages faulted in on
   several threads at once; and the line each appends to the report `--verify` reads. They make
   system calls and start threads only: no malloc of their own (pthread_create's may). */
#ifndef MEMCOST_TRACE_PRELOAD_FIRST_TOUCH_H
#define MEMCOST_TRACE_PRELOAD_FIRST_TOUCH_H

#include <stddef.h>

enum { MEMCOST_FIRST_TOUCH_MAX_THREADS = 64 };
#define MEMCOST_HUGE_PAGE_BYTES ((size_t)2 << 20)

/* `length` bytes mapped (anonymous, as `flags` say) on a 2 MiB boundary, as make_big_array maps:
   2 MiB more mapped, the slack on either side unmapped, MADV_HUGEPAGE on the block. NULL where
   the mapping fails. */
void *memcost_map_huge_aligned(size_t length, int prot, int flags);
/* MADV_HUGEPAGE on the whole 2 MiB pages inside [pointer, pointer + size). */
void memcost_advise_huge_inside(void *pointer, size_t size);
/* MADV_POPULATE_WRITE over the whole base pages of [pointer, pointer + size), in `threads` parts
   (at most MEMCOST_FIRST_TOUCH_MAX_THREADS), each part on its own thread, the first on the
   caller's; a thread that cannot start leaves its part to the caller. Where it cannot (kernels
   before 5.14 lack MADV_POPULATE_WRITE), the pages are faulted in later, where they are first used. */
void memcost_populate_parallel(void *pointer, size_t size, int threads);
/* `line` appended to the report file at `path` (nothing where path is empty or the file cannot be
   opened: the report is the measurement's, never the program's concern). */
void memcost_append_report(const char *path, const char *line, int length);

#endif
