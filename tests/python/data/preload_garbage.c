/* Writes garbage into the descriptor the preload library reports through (MEMCOST_PRELOAD_FD), as
   a buggy or hostile program can, between big allocations it touches: the tracer must drop the
   garbage, count it, and read every record around it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BYTES (32UL << 20)

__attribute__((noinline)) static void touch_a_block(void) {
  char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (unsigned long i = 0; i < BYTES; i += 4096) p[i] = 1;
  munmap(p, BYTES);
}

int main(void) {
  const char *descriptor = getenv("MEMCOST_PRELOAD_FD");
  int fd = descriptor ? atoi(descriptor) : -1;
  unsigned char junk[3000];
  for (size_t i = 0; i < sizeof(junk); ++i) junk[i] = (unsigned char)(i * 131 + 7);
  uint32_t lies[24] = {96 + 8 * 1000, 5, 1, 1, 0, 0, 0, 0};  /* a header claiming 1,000 frames */
  lies[22] = 1000;
  for (int round = 0; round < 4; ++round) {
    touch_a_block();
    if (fd >= 0) {
      (void)!write(fd, junk, 37 + round * 700);
      (void)!write(fd, lies, sizeof(lies));
    }
  }
  touch_a_block();
  return 0;
}
