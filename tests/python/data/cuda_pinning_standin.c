/* A stand-in for a CUDA program pinning host memory, for machines without a GPU: nvcc links the
   CUDA runtime into the program, so `cudaHostAlloc` and `cudaHostRegister` are functions of the
   program itself, and the driver they reach faults the pages in inside a system call (an ioctl,
   get_user_pages) with no frame of the program between. Here each faults its memory in by MADV_POPULATE_WRITE on base pages: 32 MiB
   (8,192 faults) by cudaHostAlloc from load_batch, 16 MiB (4,096) by cudaHostRegister from
   register_staging. tests/python/e2e/test_trace_in_calls.py checks each site is named by its call. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define ALLOCATED (32UL << 20)
#define REGISTERED (16UL << 20)

/* The empty asm after each call keeps it from being a tail call, so each function keeps its frame. */
#define KEEP(pointer) __asm__ volatile("" : : "r"(pointer) : "memory")

__attribute__((noinline)) int cudaHostAlloc(void **host, size_t bytes, unsigned flags) {
  (void)flags;
  *host = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (*host == MAP_FAILED) return 2;
  madvise(*host, bytes, MADV_NOHUGEPAGE);
  int status = madvise(*host, bytes, MADV_POPULATE_WRITE);
  KEEP(host);
  return status;
}

__attribute__((noinline)) int cudaHostRegister(void *host, size_t bytes, unsigned flags) {
  (void)flags;
  madvise(host, bytes, MADV_NOHUGEPAGE);
  int status = madvise(host, bytes, MADV_POPULATE_WRITE);
  KEEP(host);
  return status;
}

__attribute__((noinline)) void *load_batch(void) {
  void *host = NULL;
  if (cudaHostAlloc(&host, ALLOCATED, 0) != 0) perror("cudaHostAlloc");
  KEEP(host);
  return host;
}

__attribute__((noinline)) void *register_staging(void) {
  void *host = mmap(NULL, REGISTERED, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED || cudaHostRegister(host, REGISTERED, 0) != 0) perror("cudaHostRegister");
  KEEP(host);
  return host;
}

int main(void) {
  void *batch = load_batch(), *staging = register_staging();
  printf("%p %p\n", batch, staging);
  return 0;
}
