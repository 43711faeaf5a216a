/* The fast way to make memory present, shared by the advice applied in a command (apply_advice.c)
   and the pinning stand-in (pinning_standin.c): huge pages asked for on the 2 MiB-aligned inside
   of a block, and its pages faulted in on several threads at once. Both make system calls and
   start threads only: no malloc of their own (pthread_create's may). */
#ifndef MEMCOST_TRACE_PRELOAD_FIRST_TOUCH_H
#define MEMCOST_TRACE_PRELOAD_FIRST_TOUCH_H

#include <stddef.h>

enum { MEMCOST_FIRST_TOUCH_MAX_THREADS = 64 };
#define MEMCOST_HUGE_PAGE_BYTES ((size_t)2 << 20)

/* MADV_HUGEPAGE on the whole 2 MiB pages inside [pointer, pointer + size). */
void memcost_advise_huge_inside(void *pointer, size_t size);
/* MADV_POPULATE_WRITE over the whole base pages of [pointer, pointer + size), in `threads` parts
   (at most MEMCOST_FIRST_TOUCH_MAX_THREADS), each part on its own thread, the first on the
   caller's; a thread that cannot start leaves its part to the caller. 0, or the first part's
   errno (EINVAL on kernels before 5.14, which lack MADV_POPULATE_WRITE). */
int memcost_populate_parallel(void *pointer, size_t size, int threads);

#endif
