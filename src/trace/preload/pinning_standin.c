/* A stand-in for the CUDA runtime's pinning calls, preloaded by `memcost trace --verify` to apply
   the pinned-memory advice to a program that loads the runtime as a shared library (PyTorch:
   libtorch_cuda.so needs libcudart.so). Preloaded, its cudaHostAlloc, cudaMallocHost, cudaFreeHost
   and cudaHostRegister come before the runtime's in every lookup; a program that links the runtime
   into itself (nvcc's default) calls its own copy, which no preloaded library can replace.

   MEMCOST_PINNING="<id> <min_bytes> <threads>" turns the fast way on; without it every call goes
   to the runtime unchanged (the runs without advice load this library too, so they pay for the
   same lookups). The fast way, for a call of at least min_bytes:
   - cudaHostAlloc, cudaMallocHost: the size rounded up to 2 MiB, mapped on a 2 MiB boundary with
     MADV_HUGEPAGE, faulted in on <threads> threads at once (MADV_POPULATE_WRITE), then registered
     with the runtime's cudaHostRegister (the driver finds its pages present, and pins them
     without faulting each in); portable and mapped are asked of the registration as of the
     allocation. Write-combined memory has no registered equivalent: that call goes to the runtime.
   - cudaFreeHost of such a block: unregistered, then unmapped; any other pointer goes to the runtime.
   - cudaHostRegister: the program's memory gets huge pages on its 2 MiB-aligned inside and is
     faulted in on <threads> threads before the runtime registers it (not for read-only or I/O
     memory, which must not be written).
   MEMCOST_APPLY_REPORT names the file each process appends `applied <id> <pid>` to when the fast
   way first served a call (apply_advice.h's report).

   The runtime is the loaded libcudart (found among the process's objects, so one loaded into a
   local scope by dlopen is found too), else the next definition after this library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "trace/preload/first_touch.h"

#define EXPORT __attribute__((visibility("default")))

/* The runtime's numbers (cuda_runtime_api.h, driver_types.h): stable since CUDA 4. */
enum { CUDA_SUCCESS = 0, CUDA_ERROR_MEMORY_ALLOCATION = 2, CUDA_ERROR_INITIALIZATION = 3 };
enum { HOST_ALLOC_PORTABLE = 1, HOST_ALLOC_MAPPED = 2, HOST_ALLOC_WRITE_COMBINED = 4 };
enum { HOST_REGISTER_PORTABLE = 1, HOST_REGISTER_MAPPED = 2, HOST_REGISTER_IO_MEMORY = 4, HOST_REGISTER_READ_ONLY = 8 };
enum { MAX_BLOCKS = 4096 };

typedef int (*host_alloc_fn)(void **, size_t, unsigned);
typedef int (*host_register_fn)(void *, size_t, unsigned);
typedef int (*pointer_fn)(void *);

static int fast, advice_id, threads;
static size_t min_bytes = SIZE_MAX;
static char report_path[512];
static int reported_pid;

/* The blocks the fast way handed out, for cudaFreeHost. */
static struct {
  void *start;
  size_t bytes;
} blocks[MAX_BLOCKS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void start(void) {
  const char *pinning = getenv("MEMCOST_PINNING"), *report = getenv("MEMCOST_APPLY_REPORT");
  if (pinning && sscanf(pinning, "%d %zu %d", &advice_id, &min_bytes, &threads) == 3 && threads > 0) fast = 1;
  if (report) snprintf(report_path, sizeof(report_path), "%s", report);
}

static void report_applied(void) {
  int pid = (int)getpid();
  if (!report_path[0] || __atomic_exchange_n(&reported_pid, pid, __ATOMIC_RELAXED) == pid) return;
  char line[64];
  memcost_append_report(report_path, line, snprintf(line, sizeof(line), "applied %d %d\n", advice_id, pid));
}

static int runtime_object(struct dl_phdr_info *info, size_t size, void *found) {
  (void)size;
  const char *slash = strrchr(info->dlpi_name, '/'), *name = slash ? slash + 1 : info->dlpi_name;
  if (strncmp(name, "libcudart", 9) != 0 || !strstr(name, ".so")) return 0;
  *(void **)found = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  return *(void **)found != NULL;
}

static void *runtime_function(const char *name) {
  void *runtime = NULL, *function = NULL;
  dl_iterate_phdr(runtime_object, &runtime);
  if (runtime) {
    function = dlsym(runtime, name);
    dlclose(runtime);  /* RTLD_NOLOAD took a reference; the runtime stays loaded by its own */
  }
  return function ? function : dlsym(RTLD_NEXT, name);
}

/* Each of the runtime's functions, found on first use (a race finds the same one twice). */
#define RUNTIME(type, name)                                                                         \
  static type runtime_##name(void) {                                                                \
    static type found;                                                                              \
    type function = __atomic_load_n(&found, __ATOMIC_ACQUIRE);                                      \
    if (!function) {                                                                                \
      void *address = runtime_function(#name);                                                      \
      memcpy(&function, &address, sizeof(function)); /* ISO C has no cast from dlsym's pointer */   \
      __atomic_store_n(&found, function, __ATOMIC_RELEASE);                                         \
    }                                                                                               \
    return function;                                                                                \
  }
RUNTIME(host_alloc_fn, cudaHostAlloc)
RUNTIME(host_register_fn, cudaHostRegister)
RUNTIME(pointer_fn, cudaHostUnregister)
RUNTIME(pointer_fn, cudaFreeHost)

static int remember(void *start, size_t bytes) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_BLOCKS; ++i) {
    if (!blocks[i].start) {
      blocks[i].start = start;
      blocks[i].bytes = bytes;
      pthread_mutex_unlock(&lock);
      return 1;
    }
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

/* The block's size when `start` is one the fast way handed out (and forgets it), else 0. */
static size_t forget(void *start) {
  size_t bytes = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_BLOCKS && !bytes; ++i) {
    if (blocks[i].start == start) {
      bytes = blocks[i].bytes;
      blocks[i].start = NULL;
    }
  }
  pthread_mutex_unlock(&lock);
  return bytes;
}

static int fast_host_alloc(void **host, size_t size, unsigned flags) {
  host_register_fn register_memory = runtime_cudaHostRegister();
  if (!register_memory) return CUDA_ERROR_INITIALIZATION;
  const size_t huge = MEMCOST_HUGE_PAGE_BYTES, bytes = (size + huge - 1) / huge * huge;
  void *block = memcost_map_huge_aligned(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  if (!block) return CUDA_ERROR_MEMORY_ALLOCATION;
  memcost_populate_parallel(block, bytes, threads);  /* where it cannot, the driver faults them in */
  int status = register_memory(block, bytes, flags & (HOST_ALLOC_PORTABLE | HOST_ALLOC_MAPPED));
  if (status == CUDA_SUCCESS && !remember(block, bytes)) {
    pointer_fn unregister = runtime_cudaHostUnregister();
    if (unregister) (void)unregister(block);
    status = CUDA_ERROR_MEMORY_ALLOCATION;
  }
  if (status != CUDA_SUCCESS) {
    (void)syscall(SYS_munmap, block, bytes);
    return status;
  }
  report_applied();
  *host = block;
  return CUDA_SUCCESS;
}

EXPORT int cudaHostAlloc(void **host, size_t size, unsigned flags) {
  if (fast && host && size >= min_bytes && !(flags & HOST_ALLOC_WRITE_COMBINED)) return fast_host_alloc(host, size, flags);
  host_alloc_fn runtime = runtime_cudaHostAlloc();
  return runtime ? runtime(host, size, flags) : CUDA_ERROR_INITIALIZATION;
}

/* The runtime's cudaMallocHost is cudaHostAlloc with no flags. */
EXPORT int cudaMallocHost(void **host, size_t size) { return cudaHostAlloc(host, size, 0); }

EXPORT int cudaFreeHost(void *host) {
  size_t bytes = host ? forget(host) : 0;
  if (bytes) {
    pointer_fn unregister = runtime_cudaHostUnregister();
    int status = unregister ? unregister(host) : CUDA_ERROR_INITIALIZATION;
    (void)syscall(SYS_munmap, host, bytes);
    return status;
  }
  pointer_fn runtime = runtime_cudaFreeHost();
  return runtime ? runtime(host) : CUDA_ERROR_INITIALIZATION;
}

EXPORT int cudaHostRegister(void *host, size_t size, unsigned flags) {
  host_register_fn runtime = runtime_cudaHostRegister();
  if (!runtime) return CUDA_ERROR_INITIALIZATION;
  if (fast && host && size >= min_bytes && !(flags & (HOST_REGISTER_IO_MEMORY | HOST_REGISTER_READ_ONLY))) {
    memcost_advise_huge_inside(host, size);
    memcost_populate_parallel(host, size, threads);
    report_applied();
  }
  return runtime(host, size, flags);
}
