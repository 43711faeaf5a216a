/* The test program of `memcost trace`: three allocation sites whose costs are known.
   Built in the test with -O2 -g and no frame pointers, as distribution binaries are.
   A: map, write and free 8 MiB per frame, 50 frames (or reuse one buffer with "reuse").
   B: a 256 MiB array allocated in one function and written in another.
   C: a malloc'd 64 MiB block, used so the compiler keeps it.
   Arguments: [reuse|fresh] [exit code]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#define MIB (1024UL * 1024UL)

static volatile unsigned long sink;

__attribute__((noinline)) static void frame_work(unsigned char *buffer, size_t size, int frame) {
  memset(buffer, frame + 1, size);
  sink += buffer[size / 2];
}

__attribute__((noinline)) static void site_a_frames(int frames, int reuse) {
  const size_t size = 8 * MIB;
  unsigned char *kept = NULL;
  for (int frame = 0; frame < frames; ++frame) {
    unsigned char *buffer = kept;
    if (buffer == NULL) {
      buffer = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (buffer == MAP_FAILED) exit(2);
    }
    frame_work(buffer, size, frame);
    if (reuse) kept = buffer;
    else munmap(buffer, size);
  }
  if (kept) munmap(kept, size);
}

__attribute__((noinline)) static unsigned char *site_b_allocate(size_t size) {
  void *array = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (array == MAP_FAILED) exit(2);
  return array;
}

__attribute__((noinline)) static void site_b_writer(unsigned char *array, size_t size) {
  for (size_t i = 0; i < size; i += 64) array[i] = (unsigned char)i;
  sink += array[size - 64];
}

__attribute__((noinline)) static void site_c_malloc(void) {
  unsigned char *block = malloc(64 * MIB);
  if (block == NULL) exit(2);
  memset(block, 7, 64 * MIB);
  __asm__ volatile("" : : "r"(block) : "memory"); /* the writes must happen: the block escapes */
  sink += block[12345];
  free(block);
}

int main(int argc, char **argv) {
  prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0); /* base pages whatever the system's THP setting: known fault counts */
  int reuse = argc > 1 && strcmp(argv[1], "reuse") == 0;
  site_a_frames(50, reuse);
  unsigned char *array = site_b_allocate(256 * MIB);
  site_b_writer(array, 256 * MIB);
  munmap(array, 256 * MIB);
  site_c_malloc();
  printf("done %lu\n", sink & 1);
  return argc > 2 ? atoi(argv[2]) : 0;
}
