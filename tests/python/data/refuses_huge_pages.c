/* Turns huge pages off for its own buffers right after it maps them, as some programs do (a
   database's page cache, a runtime's heap): advice to use huge pages here must say so, and
   `trace --verify` must measure the advice with that call skipped. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>

#define BYTES (32UL << 20)

__attribute__((noinline)) char *map_buffer(void) {
  char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(p, BYTES, MADV_NOHUGEPAGE);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

int main(void) {
  unsigned long sum = 0;
  for (int round = 0; round < 20; ++round) {
    char *p = map_buffer();
    for (unsigned long i = 0; i < BYTES; i += 4096) p[i] = (char)i, sum += (unsigned char)p[i];
    munmap(p, BYTES);
  }
  printf("%lu\n", sum);
  return 0;
}
