// Two small mappings made one after the other land side by side in one 2 MiB region, each touched
// as soon as it is made, on one thread and with no unmapping between: counted in the kernel, one
// CPU's run of faults in that region spans both. Each mapping's pages must still go to the
// function that made it (tests/python/e2e/test_trace.py).
#include <stdio.h>
#include <sys/mman.h>

enum { kRounds = 200, kPages = 64 };

__attribute__((noinline)) static char* make_first(size_t bytes) {
  return mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

__attribute__((noinline)) static char* make_second(size_t bytes) {
  return mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static void touch(char* memory) {
  for (int page = 0; page < kPages; ++page) memory[page * 4096] = 1;
}

int main(void) {
  long sum = 0;
  for (int round = 0; round < kRounds; ++round) {
    char* first = make_first(kPages * 4096);
    if (first == MAP_FAILED) return 1;
    touch(first);
    char* second = make_second(kPages * 4096);
    if (second == MAP_FAILED) return 1;
    touch(second);
    sum += first[0] + second[0];
  }
  printf("%ld\n", sum);
  return 0;
}
