/* A program that pins host memory through the CUDA runtime loaded as a shared library, as PyTorch
   does (built against tests/cpp/fake_cudart.c, a stand-in, on machines without a GPU): each round,
   load_batch takes 128 MiB from cudaHostAlloc, writes a byte into each page and frees it. Its
   output is the same however the memory was pinned. tests/python/e2e/test_pinning_standin.py. */
#include <stdio.h>
#include <stdlib.h>

int cudaHostAlloc(void **host, size_t bytes, unsigned flags);
int cudaFreeHost(void *host);

#define BATCH (128UL << 20)
#define ROUNDS 3

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

int main(void) {
  unsigned long sum = 0;
  for (unsigned round = 0; round < ROUNDS; ++round) sum += load_batch(round);
  printf("%lu\n", sum);
  return 0;
}
