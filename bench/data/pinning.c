/* A model of a CUDA program pinning host memory, for machines without a GPU (bench/trace_overhead.py
   --program pinning): the driver reserves address space, maps chunks into it with MAP_FIXED, and
   pins each chunk inside an ioctl, where the kernel faults every page in (get_user_pages), while
   the runtime makes many small control ioctls. Here each chunk is faulted in by a system call in
   8 MiB pieces, as the driver pins it (MADV_POPULATE_WRITE, or mlock with `lock`), with 500 small
   ioctls beside each, on base pages. Usage: pinning CHUNKS [populate|lock]: CHUNKS × 64 MiB. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define CHUNK (64UL << 20)
#define PIECE (8UL << 20)
#define CONTROL_CALLS 500

__attribute__((noinline)) static void pin(char *chunk, int lock) {
  for (unsigned long at = 0; at < CHUNK; at += PIECE) {
    if ((lock ? mlock(chunk + at, PIECE) : madvise(chunk + at, PIECE, MADV_POPULATE_WRITE)) != 0) {
      perror(lock ? "mlock" : "madvise");
      exit(1);
    }
  }
}

__attribute__((noinline)) static void control_calls(int device) {
  for (int i = 0; i < CONTROL_CALLS; ++i) {
    int pending = 0;
    (void)ioctl(device, FIONREAD, &pending);
  }
}

int main(int argc, char **argv) {
  const long chunks = argc > 1 ? atol(argv[1]) : 32;
  const int lock = argc > 2 && strcmp(argv[2], "lock") == 0;
  int pipe_ends[2];
  if (chunks <= 0 || pipe(pipe_ends) != 0) return 2;
  char *reserved = mmap(NULL, chunks * CHUNK, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return 1;
  for (long c = 0; c < chunks; ++c) {
    char *chunk = mmap(reserved + c * CHUNK, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (chunk == MAP_FAILED) return 1;
    madvise(chunk, CHUNK, MADV_NOHUGEPAGE);
    pin(chunk, lock);
    control_calls(pipe_ends[0]);
  }
  unsigned long sum = 0;
  for (long c = 0; c < chunks; ++c) sum += (unsigned char)reserved[c * CHUNK];
  printf("%ld chunks pinned, %lu\n", chunks, sum);
  munmap(reserved, chunks * CHUNK);
  return 0;
}
