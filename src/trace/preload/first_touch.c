/* The contract: first_touch.h. */
#define _GNU_SOURCE
#include "trace/preload/first_touch.h"

#include <fcntl.h>
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
};

static void *populate_part(void *argument) {
  struct part *part = argument;
  (void)syscall(SYS_madvise, part->start, part->bytes, MADV_POPULATE_WRITE);
  return NULL;
}

void *memcost_map_huge_aligned(size_t length, int prot, int flags) {
  const size_t huge = MEMCOST_HUGE_PAGE_BYTES;
  long mapped = syscall(SYS_mmap, NULL, length + huge, prot, flags, -1, 0);
  if (mapped < 0 && mapped > -4096) return NULL;
  uintptr_t start = (uintptr_t)mapped, aligned = (start + huge - 1) & ~(uintptr_t)(huge - 1);
  if (aligned > start) (void)syscall(SYS_munmap, (void *)start, aligned - start);
  if (start + huge > aligned) (void)syscall(SYS_munmap, (void *)(aligned + length), start + huge - aligned);
  (void)syscall(SYS_madvise, (void *)aligned, length, MADV_HUGEPAGE);
  return (void *)aligned;
}

void memcost_advise_huge_inside(void *pointer, size_t size) {
  uintptr_t start = ((uintptr_t)pointer + MEMCOST_HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(MEMCOST_HUGE_PAGE_BYTES - 1);
  uintptr_t end = ((uintptr_t)pointer + size) & ~(uintptr_t)(MEMCOST_HUGE_PAGE_BYTES - 1);
  if (end > start) (void)syscall(SYS_madvise, (void *)start, end - start, MADV_HUGEPAGE);
}

void memcost_populate_parallel(void *pointer, size_t size, int threads) {
  uintptr_t start = ((uintptr_t)pointer + PAGE_BYTES - 1) & ~(uintptr_t)(PAGE_BYTES - 1);
  uintptr_t end = ((uintptr_t)pointer + size) & ~(uintptr_t)(PAGE_BYTES - 1);
  if (end <= start) return;
  threads = threads < 1 ? 1 : threads > MEMCOST_FIRST_TOUCH_MAX_THREADS ? MEMCOST_FIRST_TOUCH_MAX_THREADS : threads;
  size_t pages = (end - start) / PAGE_BYTES, each = (pages + (size_t)threads - 1) / (size_t)threads;
  struct part parts[MEMCOST_FIRST_TOUCH_MAX_THREADS];
  int started[MEMCOST_FIRST_TOUCH_MAX_THREADS] = {0}, parts_count = 0;
  for (size_t first = 0; first < pages; first += each, ++parts_count) {
    size_t last = first + each < pages ? first + each : pages;
    parts[parts_count] = (struct part){(char *)start + first * PAGE_BYTES, (last - first) * PAGE_BYTES, 0};
    if (parts_count > 0) started[parts_count] = pthread_create(&parts[parts_count].thread, NULL, populate_part,
                                                               &parts[parts_count]) == 0;
  }
  for (int t = 0; t < parts_count; ++t) {
    if (!started[t]) populate_part(&parts[t]);
  }
  for (int t = 1; t < parts_count; ++t) {
    if (started[t]) pthread_join(parts[t].thread, NULL);
  }
}

void memcost_append_report(const char *path, const char *line, int length) {
  if (!path[0] || length <= 0) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, (size_t)length);
  (void)ignored;
  close(fd);
}
