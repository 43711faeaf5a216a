/* The contract: first_touch.h. */
#define _GNU_SOURCE
#include "trace/preload/first_touch.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { PAGE_BYTES = 4096 };

struct part {
  char *start;
  size_t bytes;
  pthread_t thread;
  int error;
};

static void *populate_part(void *argument) {
  struct part *part = argument;
  part->error = syscall(SYS_madvise, part->start, part->bytes, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
  return NULL;
}

void memcost_advise_huge_inside(void *pointer, size_t size) {
  uintptr_t start = ((uintptr_t)pointer + MEMCOST_HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(MEMCOST_HUGE_PAGE_BYTES - 1);
  uintptr_t end = ((uintptr_t)pointer + size) & ~(uintptr_t)(MEMCOST_HUGE_PAGE_BYTES - 1);
  if (end > start) (void)syscall(SYS_madvise, (void *)start, end - start, MADV_HUGEPAGE);
}

int memcost_populate_parallel(void *pointer, size_t size, int threads) {
  uintptr_t start = ((uintptr_t)pointer + PAGE_BYTES - 1) & ~(uintptr_t)(PAGE_BYTES - 1);
  uintptr_t end = ((uintptr_t)pointer + size) & ~(uintptr_t)(PAGE_BYTES - 1);
  if (end <= start) return 0;
  threads = threads < 1 ? 1 : threads > MEMCOST_FIRST_TOUCH_MAX_THREADS ? MEMCOST_FIRST_TOUCH_MAX_THREADS : threads;
  size_t pages = (end - start) / PAGE_BYTES, each = (pages + (size_t)threads - 1) / (size_t)threads;
  struct part parts[MEMCOST_FIRST_TOUCH_MAX_THREADS];
  int started[MEMCOST_FIRST_TOUCH_MAX_THREADS] = {0}, parts_count = 0;
  for (size_t first = 0; first < pages; first += each, ++parts_count) {
    size_t last = first + each < pages ? first + each : pages;
    parts[parts_count] = (struct part){(char *)start + first * PAGE_BYTES, (last - first) * PAGE_BYTES, 0, 0};
    if (parts_count > 0) started[parts_count] = pthread_create(&parts[parts_count].thread, NULL, populate_part,
                                                               &parts[parts_count]) == 0;
  }
  for (int t = 0; t < parts_count; ++t) {
    if (!started[t]) populate_part(&parts[t]);
  }
  for (int t = 1; t < parts_count; ++t) {
    if (started[t]) pthread_join(parts[t].thread, NULL);
  }
  return parts[0].error;
}
