/* memcost C API: big arrays allocated and initialized at the machine's speed.
 * The same library as memcost::big_array (see big_array.hpp), for C callers:
 * every function reports errors by status code, never by aborting.
 *
 *   memcost_options options;
 *   memcost_options_init(&options);
 *   memcost_array* array;
 *   if (memcost_array_create_zeroed(n, sizeof(float), &options, &array) != MEMCOST_OK) ...
 *   float* data = memcost_array_data(array);
 *   memcost_array_destroy(array);
 */
#ifndef MEMCOST_H
#define MEMCOST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum memcost_status {
  MEMCOST_OK = 0,
  MEMCOST_ERROR_BAD_SIZE = 1,       /* count * element size overflows, or a size is 0 */
  MEMCOST_ERROR_OUT_OF_MEMORY = 2,  /* more than the memory available */
  MEMCOST_ERROR_POOL_TOO_SMALL = 3, /* strict hugetlb request and the pool lacks pages */
  MEMCOST_ERROR_NOT_SUPPORTED = 4,  /* strict request for a page kind this system lacks */
  MEMCOST_ERROR_BAD_ARGUMENT = 5,   /* a null pointer or an unknown option value */
  MEMCOST_ERROR_NO_GPU = 6          /* `pinned` asked, and no CUDA driver or GPU, or the driver refused */
} memcost_status;

typedef enum memcost_pages {
  MEMCOST_PAGES_AUTO = 0,
  MEMCOST_PAGES_HUGETLB_1G = 1,
  MEMCOST_PAGES_HUGETLB_2M = 2,
  MEMCOST_PAGES_THP = 3,
  MEMCOST_PAGES_BASE = 4
} memcost_pages;

typedef enum memcost_prefault { MEMCOST_PREFAULT_NOW = 0, MEMCOST_PREFAULT_ASYNC = 1, MEMCOST_PREFAULT_NONE = 2 } memcost_prefault;

/* A pool of released arrays' memory, already faulted in (memcost::array_pool): arrays created with
 * `options.pool` set take a held piece when one fits and give their memory back on destroy. */
typedef struct memcost_pool memcost_pool;

/* Which NUMA nodes the pages go to (memcost::numa_placement). */
typedef enum memcost_numa {
  MEMCOST_NUMA_INHERIT = 0,    /* the thread's policy (normally the node of the first touch) */
  MEMCOST_NUMA_LOCAL = 1,      /* first touch, the fill threads spread over the nodes */
  MEMCOST_NUMA_INTERLEAVE = 2, /* page by page over every node */
  MEMCOST_NUMA_NODE = 3        /* all on `numa_node` */
} memcost_numa;

typedef struct memcost_options {
  memcost_pages pages;
  int strict; /* nonzero: fail instead of falling back from a forced page kind */
  memcost_prefault prefault;
  unsigned threads;   /* 0: every logical CPU */
  memcost_pool* pool; /* NULL: no pool (an array with a NUMA placement never uses one) */
  memcost_numa numa;
  unsigned numa_node; /* for MEMCOST_NUMA_NODE */
  int pinned;         /* nonzero: pinned for a GPU (registered with the CUDA driver), made at once */
} memcost_options;

typedef struct memcost_pool_stats {
  size_t hits;          /* arrays served from held memory */
  size_t misses;        /* arrays that mapped fresh memory */
  size_t bytes_held;    /* held now */
  size_t bytes_trimmed; /* given back to the OS, in all */
  size_t pieces_held;
} memcost_pool_stats;

/* A pool holding at most `max_bytes`; NULL when out of memory. Destroy it after every array made with it. */
memcost_pool* memcost_pool_create(size_t max_bytes);
/* Give back to the OS the least recently used pieces until at most `keep_bytes` are held. */
void memcost_pool_trim(memcost_pool* pool, size_t keep_bytes);
memcost_pool_stats memcost_pool_get_stats(const memcost_pool* pool);
void memcost_pool_destroy(memcost_pool* pool);

typedef struct memcost_array memcost_array;

/* Defaults: automatic pages, not strict, prefault now, all CPUs, no pool. */
void memcost_options_init(memcost_options* options);

/* An array of `count` elements of `element_size` bytes, all bytes zero. */
memcost_status memcost_array_create_zeroed(size_t count, size_t element_size, const memcost_options* options,
                                           memcost_array** array);
/* Every element a copy of the `element_size` bytes at `value`. */
memcost_status memcost_array_create_filled(size_t count, size_t element_size, const void* value,
                                           const memcost_options* options, memcost_array** array);

void* memcost_array_data(const memcost_array* array);
size_t memcost_array_count(const memcost_array* array);
/* Nonzero once element `index` is initialized (always, unless MEMCOST_PREFAULT_ASYNC is still working). */
int memcost_array_ready(const memcost_array* array, size_t index);
void memcost_array_wait(memcost_array* array);
/* "hugetlb-1G", "hugetlb-2M", "thp" or "base". */
const char* memcost_array_page_kind(const memcost_array* array);
/* Share of the resident memory on huge pages, read from the OS now. */
double memcost_array_huge_fraction(const memcost_array* array);
/* With a NUMA placement: the policy the kernel holds for the array, read back ("interleave:0-1"); "" without. */
const char* memcost_array_numa_policy(const memcost_array* array);
/* The page kinds skipped and why, one per line; "" when none was. */
const char* memcost_array_fallbacks(const memcost_array* array);
void memcost_array_destroy(memcost_array* array);

/* The message of the last failed create call on this thread. */
const char* memcost_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMCOST_H */
