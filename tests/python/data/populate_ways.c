/* Faults memory in by each of the ways the kernel takes faults inside a system call, and one by
   touching, on base pages: MAP_POPULATE and madvise(MADV_POPULATE_WRITE) 64 MiB each (16,384
   faults), mlock 4 MiB (1,024: within an ordinary user's default RLIMIT_MEMLOCK of 8 MiB), and a
   first touch of 256 MiB (65,536 faults: without privilege perf samples its stacks in frequency
   mode, whose period, guessed after the start-up's faults, was once 33,321 faults, and a first touch
   of 64 MiB then had no stack at all). tests/python/e2e/test_trace_in_calls.py checks each is counted and named at
   its own function. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define BYTES (64UL << 20)
#define LOCKED_BYTES (4UL << 20)
#define TOUCHED_BYTES (256UL << 20)

/* The empty asm after each call keeps it from being a tail call, so each function keeps its frame. */
#define KEEP(pointer) __asm__ volatile("" : : "r"(pointer) : "memory")

static char *base_pages(unsigned long bytes) {
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) perror("mmap");
  KEEP(p);
  return p;
}

__attribute__((noinline)) char *by_map_populate(void) {
  char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  KEEP(p);
  return p;
}

__attribute__((noinline)) char *by_madv_populate(void) {
  char *p = base_pages(BYTES);
  madvise(p, BYTES, MADV_NOHUGEPAGE);
  if (madvise(p, BYTES, MADV_POPULATE_WRITE) != 0) perror("madvise");
  KEEP(p);
  return p;
}

__attribute__((noinline)) char *by_mlock(void) {
  char *p = base_pages(LOCKED_BYTES);
  madvise(p, LOCKED_BYTES, MADV_NOHUGEPAGE);
  if (mlock(p, LOCKED_BYTES) != 0) perror("mlock");
  KEEP(p);
  return p;
}

__attribute__((noinline)) char *by_touch(void) {
  char *p = base_pages(TOUCHED_BYTES);
  madvise(p, TOUCHED_BYTES, MADV_NOHUGEPAGE);
  for (unsigned long i = 0; i < TOUCHED_BYTES; i += 4096) p[i] = 1;
  KEEP(p);
  return p;
}

int main(void) {
  char *ways[] = {by_map_populate(), by_madv_populate(), by_mlock(), by_touch()};
  printf("%p %p %p %p\n", (void *)ways[0], (void *)ways[1], (void *)ways[2], (void *)ways[3]);
  return 0;
}
