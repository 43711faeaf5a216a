/* libmemcost-preload.so: what `memcost trace` uses instead of the kernel's syscall tracepoints
   when it may not read them (not root). Loaded into a dynamically linked command with LD_PRELOAD,
   it reports every mmap, munmap, mremap and madvise, and every malloc, calloc, realloc, aligned
   allocation and free of at least MEMCOST_PRELOAD_MIN_BYTES (glibc's malloc makes its own mmap
   and brk calls internally, where no interposer can see them), each with its measured duration
   and its return addresses, as one binary record per write() to the descriptor in
   MEMCOST_PRELOAD_FD (a pipe to the probe; a write of at most PIPE_BUF bytes is atomic).

   It calls the kernel and glibc's own allocator entry points directly (syscall(), __libc_*), so
   it needs no dlsym() and cannot recurse into itself. Record layout: see preload.hpp. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *pointer);

enum { CALL_MMAP = 0, CALL_MUNMAP = 1, CALL_MREMAP = 2, CALL_BRK = 3, CALL_MADVISE = 4,
       CALL_MALLOC = 5, CALL_FREE = 6, CALL_REALLOC = 7 };
enum { MAX_FRAMES = 48, SKIPPED_FRAMES = 2, TABLE_SIZE = 1 << 16 };

struct record {
  uint32_t size, kind, pid, tid;
  uint64_t enter_ns, exit_ns;
  uint64_t args[6];
  int64_t result;
  uint32_t frames, reserved;
  uint64_t pcs[MAX_FRAMES];
};

static int out_fd = -1;
static size_t min_bytes = 64 * 1024;
static __thread int inside; /* backtrace() may allocate the first time it runs */

/* The big blocks handed out, so that free() knows which to report: open addressing. */
static uintptr_t table[TABLE_SIZE];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(uintptr_t key) { return (key >> 4) * 0x9E3779B97F4A7C15ULL >> 48; }

static void remember(void *pointer) {
  pthread_mutex_lock(&table_lock);
  for (size_t i = slot_of((uintptr_t)pointer), n = 0; n < TABLE_SIZE; i = (i + 1) % TABLE_SIZE, ++n) {
    if (table[i] == 0 || table[i] == 1) { table[i] = (uintptr_t)pointer; break; }
  }
  pthread_mutex_unlock(&table_lock);
}

static int forget(void *pointer) {
  int found = 0;
  pthread_mutex_lock(&table_lock);
  for (size_t i = slot_of((uintptr_t)pointer), n = 0; n < TABLE_SIZE && table[i] != 0; i = (i + 1) % TABLE_SIZE, ++n) {
    if (table[i] == (uintptr_t)pointer) { table[i] = 1; found = 1; break; } /* 1: a tombstone */
  }
  pthread_mutex_unlock(&table_lock);
  return found;
}

__attribute__((constructor)) static void start(void) {
  const char *fd = getenv("MEMCOST_PRELOAD_FD");
  const char *bytes = getenv("MEMCOST_PRELOAD_MIN_BYTES");
  if (fd) out_fd = atoi(fd);
  if (bytes) min_bytes = strtoull(bytes, NULL, 10);
}

static uint64_t now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}

static void emit(uint32_t kind, uint64_t enter_ns, uint64_t exit_ns, uint64_t a0, uint64_t a1, uint64_t a2,
                 uint64_t a3, int64_t result) {
  if (out_fd < 0 || inside) return;
  inside = 1;
  int saved_errno = errno;
  struct record r;
  void *frames[MAX_FRAMES + SKIPPED_FRAMES];
  int depth = backtrace(frames, MAX_FRAMES + SKIPPED_FRAMES);
  r.frames = depth > SKIPPED_FRAMES ? (uint32_t)(depth - SKIPPED_FRAMES) : 0;
  for (uint32_t i = 0; i < r.frames; ++i) r.pcs[i] = (uint64_t)(uintptr_t)frames[i + SKIPPED_FRAMES];
  r.kind = kind;
  r.pid = (uint32_t)getpid();
  r.tid = (uint32_t)syscall(SYS_gettid);
  r.enter_ns = enter_ns;
  r.exit_ns = exit_ns;
  r.args[0] = a0, r.args[1] = a1, r.args[2] = a2, r.args[3] = a3, r.args[4] = 0, r.args[5] = 0;
  r.result = result;
  r.reserved = 0;
  r.size = (uint32_t)(offsetof(struct record, pcs) + r.frames * sizeof(uint64_t));
  ssize_t ignored = write(out_fd, &r, r.size);
  (void)ignored;
  errno = saved_errno;
  inside = 0;
}

static long checked(long result) {
  if (result < 0 && result > -4096) {
    errno = (int)-result;
    return -1;
  }
  return result;
}

void *mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
  uint64_t enter = now_ns();
  long result = syscall(SYS_mmap, address, length, prot, flags, fd, offset);
  uint64_t exit = now_ns();
  if (length >= min_bytes) emit(CALL_MMAP, enter, exit, (uint64_t)(uintptr_t)address, length, (uint64_t)prot,
                                (uint64_t)flags, result);
  return (void *)checked(result);
}

void *mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset)
    __attribute__((alias("mmap")));

int munmap(void *address, size_t length) {
  uint64_t enter = now_ns();
  long result = syscall(SYS_munmap, address, length);
  if (length >= min_bytes) emit(CALL_MUNMAP, enter, now_ns(), (uint64_t)(uintptr_t)address, length, 0, 0, result);
  return (int)checked(result);
}

void *mremap(void *address, size_t old_length, size_t new_length, int flags, ...) {
  void *new_address = NULL;
  if (flags & MREMAP_FIXED) {
    __builtin_va_list extra;
    __builtin_va_start(extra, flags);
    new_address = __builtin_va_arg(extra, void *);
    __builtin_va_end(extra);
  }
  uint64_t enter = now_ns();
  long result = syscall(SYS_mremap, address, old_length, new_length, flags, new_address);
  emit(CALL_MREMAP, enter, now_ns(), (uint64_t)(uintptr_t)address, old_length, new_length, (uint64_t)flags, result);
  return (void *)checked(result);
}

int madvise(void *address, size_t length, int advice) {
  uint64_t enter = now_ns();
  long result = syscall(SYS_madvise, address, length, advice);
  if (length >= min_bytes) emit(CALL_MADVISE, enter, now_ns(), (uint64_t)(uintptr_t)address, length, (uint64_t)advice, 0, result);
  return (int)checked(result);
}

static void *allocated(void *pointer, size_t size, uint64_t enter) {
  if (pointer && size >= min_bytes && !inside) {
    remember(pointer);
    emit(CALL_MALLOC, enter, now_ns(), 0, size, 0, 0, (int64_t)(uintptr_t)pointer);
  }
  return pointer;
}

void *malloc(size_t size) {
  uint64_t enter = size >= min_bytes ? now_ns() : 0;
  return allocated(__libc_malloc(size), size, enter);
}

void *calloc(size_t count, size_t size) {
  size_t bytes = count * size;
  uint64_t enter = bytes >= min_bytes ? now_ns() : 0;
  return allocated(__libc_calloc(count, size), bytes, enter);
}

void *memalign(size_t alignment, size_t size) {
  uint64_t enter = size >= min_bytes ? now_ns() : 0;
  return allocated(__libc_memalign(alignment, size), size, enter);
}

void *aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }

int posix_memalign(void **out, size_t alignment, size_t size) {
  void *pointer = memalign(alignment, size);
  if (!pointer) return ENOMEM;
  *out = pointer;
  return 0;
}

void free(void *pointer) {
  if (pointer && forget(pointer)) {
    uint64_t enter = now_ns();
    __libc_free(pointer);
    emit(CALL_FREE, enter, now_ns(), (uint64_t)(uintptr_t)pointer, 0, 0, 0, 0);
    return;
  }
  __libc_free(pointer);
}

void *realloc(void *pointer, size_t size) {
  int tracked = pointer && forget(pointer);
  if (!tracked && size < min_bytes) return __libc_realloc(pointer, size);
  uint64_t enter = now_ns();
  void *result = __libc_realloc(pointer, size);
  if (result && size >= min_bytes) remember(result);
  else if (!result && tracked) remember(pointer); /* failed: the old block stays */
  emit(CALL_REALLOC, enter, now_ns(), (uint64_t)(uintptr_t)pointer, 0, size, (uint64_t)tracked,
       (int64_t)(uintptr_t)result);
  return result;
}
