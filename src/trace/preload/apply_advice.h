/* The preload library's third job: advice applied inside the command, for `memcost trace --verify`
   (apply_advice.c). The interposers in interposer.c hand their big calls here first.

   MEMCOST_APPLY_FILE names the advice, one line each:
     <id> <action> <min_bytes> <threads> <frame> [<frame> ...]
   action: `huge` (MADV_HUGEPAGE, mmap's mappings aligned to 2 MiB), `reuse` (freed blocks kept
   per advice and handed back to the same call path, cleared to zero first), `populate`
   (MADV_POPULATE_WRITE on <threads> threads at allocation), `none` (found, nothing done: what the
   runs without advice use, so they pay for the same search); a frame is <module basename>:<hex
   offset of the return address from the module's start>, innermost first, the frames of the C
   library, the dynamic loader, libstdc++, libgcc and this library left out. A call of at least
   min_bytes whose return addresses begin with those frames gets the advice.
   MEMCOST_APPLY_REPORT names a file each process appends to: `applied <id> <pid>` when an advice
   first applies, `overridden <id> <pid>` when the program's own call against it was first skipped,
   and at exit `count <id> <pid> <times>`. */
#ifndef MEMCOST_TRACE_PRELOAD_APPLY_H
#define MEMCOST_TRACE_PRELOAD_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "trace/preload/safe_primitives.h"

enum { MEMCOST_APPLY_MAX_FRAMES = 4 };


void memcost_apply_start(void);
/* The smallest call any advice looks at; SIZE_MAX when none is asked for. */
size_t memcost_apply_min_bytes(void);
/* An anonymous private mapping with no address asked for: the advised mapping, or NULL when no
   advice applies (the caller maps as usual). */
void *memcost_apply_mmap(size_t length, int prot, int flags);
/* 1: the range was an advised block and is kept for reuse (the caller does not unmap it). */
int memcost_apply_munmap(void *address, size_t length);
/* malloc (zero 0) and calloc (zero 1): the advised block, or NULL when no advice applies. */
void *memcost_apply_malloc(size_t size, int zero);
/* 1: an advised block, kept for reuse (the caller does not free it). */
int memcost_apply_free(void *pointer);
/* The block is leaving (realloc): no longer the advice's. */
void memcost_apply_forget(void *pointer);
/* 1: the program's own madvise(MADV_NOHUGEPAGE) on a block the huge-page advice made, skipped (the
   caller returns 0 as if done): the advice is what is measured, not the program's call undoing it.
   Reported once a process as `overridden <id> <pid>`. */
int memcost_apply_madvise(void *address, size_t length, int advice);

#endif
