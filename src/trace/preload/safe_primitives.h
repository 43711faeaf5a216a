/* What both halves of the preload library (interposer.c, apply_advice.c) need and what must be
   safe in any process they enter: thread-local storage that never calls into the loader, and a
   walk of the caller's return addresses that never faults on a bad frame pointer. */
#ifndef MEMCOST_TRACE_PRELOAD_SAFE_PRIMITIVES_H
#define MEMCOST_TRACE_PRELOAD_SAFE_PRIMITIVES_H

#include <stdint.h>

/* Every thread-local variable of the preload library. The initial-exec model reads it at a fixed
   offset from the thread pointer; the default model for shared libraries calls __tls_get_addr,
   which may itself call malloc and free while it brings a thread's TLS table up to date after a
   dlopen or dlclose (glibc 2.39 on every access by such a thread): malloc -> __tls_get_addr ->
   malloc -> ... until the stack runs out (`import torch` on a GPU host). A library preloaded at
   start-up always has room in the static TLS block. tests/python/e2e/test_preload_safety.py reads the
   built library back to check that nothing in it reaches __tls_get_addr; its control builds the
   library with the default model (-DMEMCOST_THREAD_LOCAL=__thread) and sees it crash. */
#ifndef MEMCOST_THREAD_LOCAL
#define MEMCOST_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
#endif

/* The caller's return addresses, innermost first, skipping `skip` frames (this function's own
   frame is the first of them). */
uint32_t memcost_return_addresses(uint64_t *pcs, uint32_t most, uint32_t skip);

#endif
