/* An independent cross-check of memcost's fault cost, written from docs/costs.md's description
 * alone and sharing no code with memcost: each repetition maps SIZE bytes, advises the page kind
 * (base: THP off; thp: MADV_HUGEPAGE), times a first and a second memset over it, unmaps it and
 * sleeps the 20 ms settle window. Prints the median of (first - second) in microseconds per MiB
 * over the measured repetitions. Used by tests/python/e2e/test_costs.py and bench/costs_agreement.py.
 *
 *     first_touch SIZE_BYTES [base|thp] [WARMUPS] [REPS]      (defaults: base, 0, 7)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)64 << 20;
  const int huge = argc > 2 && strcmp(argv[2], "thp") == 0;
  const int warmups = argc > 3 ? atoi(argv[3]) : 0, reps = argc > 4 ? atoi(argv[4]) : 7;
  if (size == 0 || (argc > 2 && !huge && strcmp(argv[2], "base") != 0) || warmups < 0 || reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: %s SIZE_BYTES [base|thp] [WARMUPS] [REPS 1..1000]\n", argv[0]);
    return 2;
  }
  double* fault_us_per_mb = calloc((size_t)reps, sizeof(double));
  if (!fault_us_per_mb) return 1;
  for (int rep = -warmups; rep < reps; ++rep) {
    unsigned char* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    double t0 = now_us();
    memset(p, 1, size);
    double t1 = now_us();
    memset(p, 2, size);
    double t2 = now_us();
    __asm__ volatile("" : : "g"(p) : "memory");
    munmap(p, size);
    const struct timespec settle = {0, 20 * 1000 * 1000};
    nanosleep(&settle, NULL);
    if (rep >= 0) fault_us_per_mb[rep] = ((t1 - t0) - (t2 - t1)) / ((double)size / (1 << 20));
  }
  qsort(fault_us_per_mb, (size_t)reps, sizeof(double), by_value);
  printf("%f\n", reps % 2 ? fault_us_per_mb[reps / 2] : (fault_us_per_mb[reps / 2 - 1] + fault_us_per_mb[reps / 2]) / 2);
  free(fault_us_per_mb);
  return 0;
}
