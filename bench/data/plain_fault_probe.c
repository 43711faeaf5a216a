/* An independent check of `memcost costs`' fault column: written from docs/costs.md's description
 * alone, sharing no code with memcost. Each repetition maps SIZE MiB, advises the page kind,
 * writes every byte (first touch), writes every byte again (second touch), unmaps, and sleeps
 * 20 ms; the fault cost is first minus second touch, per MiB. Prints one line per measured
 * repetition, then the median:  fault_us_per_mb <value>
 *
 *     cc -O2 -o plain_fault_probe plain_fault_probe.c
 *     ./plain_fault_probe base|thp SIZE_MIB WARMUPS REPS
 */
#define _GNU_SOURCE
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
  if (argc != 5 || (strcmp(argv[1], "base") != 0 && strcmp(argv[1], "thp") != 0)) {
    fprintf(stderr, "usage: %s base|thp SIZE_MIB WARMUPS REPS\n", argv[0]);
    return 2;
  }
  const int huge = strcmp(argv[1], "thp") == 0;
  const size_t mib = strtoul(argv[2], NULL, 10), bytes = mib << 20;
  const int warmups = atoi(argv[3]), reps = atoi(argv[4]);
  if (mib == 0 || warmups < 0 || reps < 1 || reps > 1000) {
    fprintf(stderr, "SIZE_MIB must be positive and REPS 1..1000\n");
    return 2;
  }
  double* fault_us_per_mb = calloc((size_t)reps, sizeof(double));
  for (int rep = -warmups; rep < reps; ++rep) {
    char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    if (madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) { perror("madvise"); return 1; }
    const double t0 = now_us();
    memset(p, 1, bytes);
    const double t1 = now_us();
    memset(p, 2, bytes);
    const double t2 = now_us();
    /* Keep the writes: read one byte of each page back. */
    volatile unsigned sum = 0;
    for (size_t i = 0; i < bytes; i += 4096) sum += (unsigned char)p[i];
    munmap(p, bytes);
    const struct timespec settle = {0, 20 * 1000 * 1000};
    nanosleep(&settle, NULL);
    if (rep >= 0) {
      fault_us_per_mb[rep] = ((t1 - t0) - (t2 - t1)) / (double)mib;
      printf("rep %d %.1f\n", rep, fault_us_per_mb[rep]);
    }
  }
  qsort(fault_us_per_mb, (size_t)reps, sizeof(double), by_value);
  const double median = reps % 2 ? fault_us_per_mb[reps / 2]
                                 : (fault_us_per_mb[reps / 2 - 1] + fault_us_per_mb[reps / 2]) / 2;
  printf("fault_us_per_mb %.1f\n", median);
  free(fault_us_per_mb);
  return 0;
}
