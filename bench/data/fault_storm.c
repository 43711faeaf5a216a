/* A fault storm on many threads, for bench/gpu_host.py's `overhead` step: THREADS threads, each
   mapping MIB MiB on base pages, writing one byte a page and unmapping it, ROUNDS times (the
   storm of issue 49: 16 threads, 256 MiB, eight times: 8.4 M faults). Usage:
   fault_storm THREADS MIB ROUNDS. Prints the faults it took. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static unsigned long bytes;
static int rounds;

static void *storm(void *unused) {
  (void)unused;
  for (int round = 0; round < rounds; ++round) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      perror("mmap");
      exit(1);
    }
    madvise(p, bytes, MADV_NOHUGEPAGE);
    for (unsigned long i = 0; i < bytes; i += 4096) p[i] = 1;
    munmap(p, bytes);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: fault_storm THREADS MIB ROUNDS\n");
    return 2;
  }
  const int threads = atoi(argv[1]);
  bytes = strtoul(argv[2], NULL, 10) << 20;
  rounds = atoi(argv[3]);
  if (threads < 1 || threads > 1024 || bytes == 0 || rounds < 1) {
    fprintf(stderr, "fault_storm: THREADS 1-1024, MIB and ROUNDS at least 1\n");
    return 2;
  }
  pthread_t *ids = calloc((size_t)threads, sizeof(*ids));
  for (int t = 0; t < threads; ++t) pthread_create(&ids[t], NULL, storm, NULL);
  for (int t = 0; t < threads; ++t) pthread_join(ids[t], NULL);
  printf("%lu faults\n", (unsigned long)threads * (unsigned long)rounds * (bytes / 4096));
  free(ids);
  return 0;
}
