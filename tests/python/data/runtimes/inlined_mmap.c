// A `static` helper that wraps mmap, inlined by -O2 into two callers: a 4 MiB scratch buffer made
// and freed 40 times, and a 192 MiB table touched once. memcost trace must show two sites,
// `map_base ← scratch_per_frame` and `map_base ← allocate_table`, each with its own advice.
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static inline __attribute__((always_inline)) void* map_base(size_t bytes) {
  void* memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? NULL : memory;
}

__attribute__((noinline)) static unsigned long scratch_per_frame(int frames) {
  const size_t bytes = 4u << 20;
  unsigned long sum = 0;
  for (int frame = 0; frame < frames; ++frame) {
    unsigned char* scratch = map_base(bytes);
    if (scratch == NULL) return 0;
    memset(scratch, frame + 1, bytes);
    sum += scratch[bytes / 2];
    munmap(scratch, bytes);
  }
  return sum;
}

__attribute__((noinline)) static unsigned char* allocate_table(size_t bytes) {
  unsigned char* table = map_base(bytes);
  if (table != NULL) memset(table, 7, bytes);
  return table;
}

int main(void) {
  unsigned long sum = scratch_per_frame(40);
  unsigned char* table = allocate_table(192u << 20);
  printf("%lu %d\n", sum, table ? table[12345] : -1);
  return 0;
}
