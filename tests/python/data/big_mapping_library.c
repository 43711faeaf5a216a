/* A library whose make_big() maps 64 MiB and writes every page (library_loader.c loads it). */
#include <string.h>
#include <sys/mman.h>

void make_big(void) {
  const size_t bytes = 64u << 20;
  char *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;
  memset(memory, 1, bytes);
  munmap(memory, bytes);
}
