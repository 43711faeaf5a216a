/* A program that pins host memory through the CUDA runtime loaded as a shared library, as PyTorch
   does (built against tests/cpp/fake_cudart.c, a stand-in, on machines without a GPU): each round,
   load_batch takes 128 MiB from cudaHostAlloc, writes a byte into each page and frees it; then
   stage_output registers 64 MiB of its own memory with cudaHostRegister (the driver faults it in),
   reads it and unregisters it. Its output is the same however the memory was pinned.
   tests/python/e2e/test_pinning_standin.py. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

int cudaHostAlloc(void **host, size_t bytes, unsigned flags);
int cudaFreeHost(void *host);
int cudaHostRegister(void *host, size_t bytes, unsigned flags);
int cudaHostUnregister(void *host);

#define BATCH (128UL << 20)
#define ROUNDS 3
#define STAGED (64UL << 20)

__attribute__((noinline)) unsigned long load_batch(unsigned round) {
  unsigned char *host = NULL;
  if (cudaHostAlloc((void **)&host, BATCH, 0) != 0) {
    fprintf(stderr, "cudaHostAlloc failed\n");
    exit(1);
  }
  unsigned long sum = 0;
  for (size_t page = 0; page < BATCH; page += 4096) {
    host[page] = (unsigned char)(page >> 12) ^ (unsigned char)round;
    sum += host[page];
  }
  if (cudaFreeHost(host) != 0) {
    fprintf(stderr, "cudaFreeHost failed\n");
    exit(1);
  }
  return sum;
}

__attribute__((noinline)) unsigned long stage_output(void) {
  unsigned char *own = mmap(NULL, STAGED, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (own == MAP_FAILED || cudaHostRegister(own, STAGED, 0) != 0) {
    fprintf(stderr, "cudaHostRegister failed\n");
    exit(1);
  }
  unsigned long sum = 0;
  for (size_t page = 0; page < STAGED; page += 4096) sum += own[page];  /* zero: fresh memory */
  if (cudaHostUnregister(own) != 0) {
    fprintf(stderr, "cudaHostUnregister failed\n");
    exit(1);
  }
  munmap(own, STAGED);
  return sum;
}

int main(void) {
  unsigned long sum = 0;
  for (unsigned round = 0; round < ROUNDS; ++round) sum += load_batch(round);
  sum += stage_output();
  printf("%lu\n", sum);
  return 0;
}
