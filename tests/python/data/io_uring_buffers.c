/* Pins memory the way a storage engine does, by registering buffers with io_uring
   (io_uring_register(IORING_REGISTER_BUFFERS)): the kernel pins each buffer (pin_user_pages),
   faulting its pages in inside the call, where the call's arguments name no range, only a pointer to
   iovecs. Two buffers of 32 MiB on base pages, made in make_buffer and never touched before:
   16,384 faults in one call. tests/python/e2e/test_trace_in_calls.py checks they are charged to the
   two buffers' mappings (made at make_buffer) and named at register_buffers. Raw system calls: no
   liburing. Prints "io_uring unavailable: <why>" and exits 0 where the kernel has no io_uring for it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define BYTES (32UL << 20)
#define KEEP(pointer) __asm__ volatile("" : : "r"(pointer) : "memory")

struct ring_parameters { /* struct io_uring_params: the kernel fills it in; 120 bytes */
  unsigned int words[30];
};

__attribute__((noinline)) char *make_buffer(void) {
  char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, BYTES, MADV_NOHUGEPAGE);
  KEEP(p);
  return p;
}

__attribute__((noinline)) int register_buffers(int ring, char *first, char *second) {
  struct iovec buffers[2] = {{first, BYTES}, {second, BYTES}};
  long result = syscall(SYS_io_uring_register, ring, 0 /* IORING_REGISTER_BUFFERS */, buffers, 2);
  KEEP(buffers);
  return result == 0 ? 0 : errno;
}

int main(void) {
  struct ring_parameters parameters;
  memset(&parameters, 0, sizeof(parameters));
  long ring = syscall(SYS_io_uring_setup, 4, &parameters);
  if (ring < 0) {
    printf("io_uring unavailable: %s\n", strerror(errno));
    return 0;
  }
  char *first = make_buffer(), *second = make_buffer();
  if (!first || !second) return 1;
  int error = register_buffers((int)ring, first, second);
  if (error) {
    printf("io_uring unavailable: registering buffers: %s\n", strerror(error));
    return 0;
  }
  printf("registered %p %p\n", (void *)first, (void *)second);
  return 0;
}
