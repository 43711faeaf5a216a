/* The test program of `memcost trace --verify`: two sites whose advice is known.
   Built -O2 -g without frame pointers, like trace_sites.c.
   frames: map, check, write and free an 8 MiB buffer per frame, 60 frames (reuse advice). Each
     frame first reads the end of its fresh buffer, which must be zero: the output says how many
     frames found it so, so handing back an uncleared buffer changes the output.
   table: a 512 MiB table made by malloc and written by one thread (huge-page advice).
   Arguments: [random] (exit with a code that changes from run to run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)

static volatile unsigned long sink;

__attribute__((noinline)) static int frames(int count) {
  const size_t size = 8 * MIB;
  int fresh = 0;
  for (int frame = 0; frame < count; ++frame) {
    unsigned char *buffer = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffer == MAP_FAILED) exit(2);
    int zero = 1;
    for (size_t i = size - 64 * 1024; i < size; i += 4096) zero &= buffer[i] == 0;
    fresh += zero;
    memset(buffer, frame + 1, size);
    sink += buffer[size / 3];
    munmap(buffer, size);
  }
  return fresh;
}

__attribute__((noinline)) static unsigned long table(size_t size) {
  unsigned char *t = malloc(size);
  if (t == NULL) exit(2);
  for (size_t i = 0; i < size; i += 4096) t[i] = (unsigned char)(i >> 12);
  unsigned long sum = 0;
  for (size_t i = 0; i < size; i += 4096) sum += t[i];
  free(t);
  return sum;
}

int main(int argc, char **argv) {
  int fresh = frames(60);
  unsigned long sum = table(512 * MIB);
  printf("fresh %d of 60, sum %lu\n", fresh, sum);
  if (argc > 1 && strcmp(argv[1], "random") == 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return 1 + (int)((now.tv_nsec / 1000 + getpid()) % 200);
  }
  return 0;
}
