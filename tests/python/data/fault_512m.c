/* Faults in 512 MiB of base pages, one write per 4 KB page: 131,072 minor faults. */
#include <stddef.h>
#include <sys/mman.h>

int main(void) {
  size_t size = (size_t)512 << 20;
  char* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  madvise(p, size, MADV_NOHUGEPAGE);
  for (size_t i = 0; i < size; i += 4096) p[i] = 1;
  return 0;
}
