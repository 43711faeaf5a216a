/* The big blocks the preload library handed out (malloc, calloc, realloc of at least its smallest
   reported size), so that free() knows which to report: an open-addressing set of addresses,
   behind one lock. Its memory is static (no malloc: it is asked from inside malloc and free). */
#ifndef MEMCOST_TRACE_PRELOAD_BLOCK_TABLE_H
#define MEMCOST_TRACE_PRELOAD_BLOCK_TABLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MEMCOST_BLOCK_TABLE_SLOTS = 1 << 16 };

/* Adds a block (a full table drops it: that block's free is not reported). */
void memcost_block_remember(void *pointer);
/* 1 if the block was in the table (and is no longer), else 0. */
int memcost_block_forget(void *pointer);
/* The slots in use, blocks and tombstones: what a lookup of an absent block may walk (for tests). */
size_t memcost_block_slots_used(void);

#ifdef __cplusplus
}
#endif

#endif
