/* A stand-in for NVIDIA's libcuda.so.1, for the pinning tests on machines without a GPU: the driver
   calls memcost makes, recording what was registered. FAKE_CUDA_NO_DEVICE makes cuInit find no
   GPU; FAKE_CUDA_MAX_BYTES refuses a registration larger than that, as the real driver refuses
   one of 512 GiB or more. The tests read the record through fake_cuda_* (dlsym). The calls the
   `pinned` experiment adds are here too, each doing the host's share of the real one's work: a
   registration faults the pages in (the real driver pins them, faulting in what is not there), a
   pinned allocation is memory mapped and faulted in, the GPU's memory is the process's own, and a
   copy is a memcpy; from memory neither registered nor allocated pinned it goes through a staging
   buffer first, as the real driver's copies of ordinary memory do (and so runs slower). */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NO_DEVICE = 100, HOST_MEMORY_ALREADY_REGISTERED = 712, MOST = 4096 };

static struct {
  void *start;
  size_t bytes;
  unsigned flags;
  size_t resident_at_call; /* pages of the range already in when the call came (mincore) */
} registered[MOST];
static int registrations, unregistrations, live;
static int context_current;
/* Registrations come from many threads at once (pinned_registration's plan): the record is kept
   under this lock; the pages are faulted in outside it, in parallel, as the real driver pins them. */
static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;

int cuInit(unsigned flags) { return flags == 0 && !getenv("FAKE_CUDA_NO_DEVICE") ? SUCCESS : NO_DEVICE; }
int cuDeviceGet(int *device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? SUCCESS : INVALID_VALUE;
}
int cuDevicePrimaryCtxRetain(void **context, int device) {
  (void)device;
  *context = &context_current;
  return SUCCESS;
}
int cuCtxSetCurrent(void *context) {
  context_current = context == &context_current;
  return SUCCESS;
}
int cuMemHostRegister_v2(void *start, size_t bytes, unsigned flags) {
  const char *most = getenv("FAKE_CUDA_MAX_BYTES");
  if (!context_current || (most && bytes > strtoull(most, NULL, 10))) return INVALID_VALUE;
  size_t resident = 0;
  unsigned char *in = malloc(bytes / 4096 + 1);
  if (in && mincore(start, bytes, in) == 0) {
    for (size_t page = 0; page < bytes / 4096; ++page) resident += in[page] & 1;
  }
  free(in);
  for (size_t page = 0; page < bytes; page += 4096) ((volatile char *)start)[page] += 0;  /* faulted in for writing */
  int result = SUCCESS;
  pthread_mutex_lock(&record_lock);
  for (int i = 0; i < registrations; ++i) {
    if (registered[i].bytes && registered[i].start == start) result = HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (result == SUCCESS && registrations >= MOST) result = INVALID_VALUE;
  if (result == SUCCESS) {
    registered[registrations].start = start;
    registered[registrations].bytes = bytes;
    registered[registrations].flags = flags;
    registered[registrations].resident_at_call = resident;
    ++registrations;
    ++live;
  }
  pthread_mutex_unlock(&record_lock);
  return result;
}
int cuMemHostUnregister(void *start) {
  int result = INVALID_VALUE;
  pthread_mutex_lock(&record_lock);
  for (int i = 0; i < registrations && result != SUCCESS; ++i) {
    if (registered[i].bytes && registered[i].start == start) {
      registered[i].bytes = 0;
      ++unregistrations;
      --live;
      result = SUCCESS;
    }
  }
  pthread_mutex_unlock(&record_lock);
  return result;
}
int cuDeviceGetName(char *name, int length, int device) {
  (void)device;
  strncpy(name, "memcost fake GPU (tests/cpp/fake_cuda.c)", (size_t)length);
  return SUCCESS;
}

static struct {
  void *start;
  size_t bytes;
} host_allocated[MOST];

int cuMemHostAlloc(void **data, size_t bytes, unsigned flags) {
  (void)flags;
  if (!context_current) return INVALID_VALUE;
  void *mapped = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mapped == MAP_FAILED) return OUT_OF_MEMORY;
  int result = OUT_OF_MEMORY;
  pthread_mutex_lock(&record_lock);
  for (int i = 0; i < MOST && result != SUCCESS; ++i) {
    if (host_allocated[i].start) continue;
    host_allocated[i].start = *data = mapped;
    host_allocated[i].bytes = bytes;
    result = SUCCESS;
  }
  pthread_mutex_unlock(&record_lock);
  if (result != SUCCESS) munmap(mapped, bytes);
  return result;
}
int cuMemFreeHost(void *data) {
  size_t bytes = 0;
  pthread_mutex_lock(&record_lock);
  for (int i = 0; i < MOST && !bytes; ++i) {
    if (host_allocated[i].start == data) {
      bytes = host_allocated[i].bytes;
      host_allocated[i].start = NULL;
    }
  }
  pthread_mutex_unlock(&record_lock);
  if (!bytes) return INVALID_VALUE;
  munmap(data, bytes);
  return SUCCESS;
}
int cuMemAlloc_v2(unsigned long long *device, size_t bytes) {
  void *memory = malloc(bytes);
  *device = (unsigned long long)(uintptr_t)memory;
  return memory ? SUCCESS : OUT_OF_MEMORY;
}
int cuMemFree_v2(unsigned long long device) {
  free((void *)(uintptr_t)device);
  return SUCCESS;
}
/* 1: [data, data + bytes) lies in one registration or one pinned allocation; 0: in neither; -1: it
   begins in a registration and runs past its end, which the real driver refuses (measured on an
   H100 host, driver 580: a copy over two registrations side by side is CUDA_ERROR_INVALID_VALUE). */
static int pinned_source(const char *data, size_t bytes) {
  int pinned = 0;
  pthread_mutex_lock(&record_lock);
  for (int i = 0; i < registrations && !pinned; ++i) {
    const char *start = registered[i].start;
    if (!registered[i].bytes || data < start || data >= start + registered[i].bytes) continue;
    pinned = data + bytes <= start + registered[i].bytes ? 1 : -1;
  }
  for (int i = 0; i < MOST && !pinned; ++i) {
    const char *start = host_allocated[i].start;
    pinned = start && data >= start && data + bytes <= start + host_allocated[i].bytes;
  }
  pthread_mutex_unlock(&record_lock);
  return pinned;
}
int cuMemcpyHtoD_v2(unsigned long long device, const void *data, size_t bytes) {
  static char staging[1 << 20];
  const int pinned = pinned_source(data, bytes);
  if (!context_current || pinned < 0) return INVALID_VALUE;
  if (pinned) {
    memcpy((void *)(uintptr_t)device, data, bytes);
    return SUCCESS;
  }
  for (size_t done = 0; done < bytes; done += sizeof staging) {
    const size_t piece = bytes - done < sizeof staging ? bytes - done : sizeof staging;
    memcpy(staging, (const char *)data + done, piece);
    memcpy((char *)(uintptr_t)device + done, staging, piece);
  }
  return SUCCESS;
}
int cuCtxSynchronize(void) { return SUCCESS; }

int cuGetErrorString(int error, const char **text) {
  *text = error == INVALID_VALUE   ? "invalid argument"
          : error == OUT_OF_MEMORY ? "out of memory"
          : error == NO_DEVICE     ? "no CUDA-capable device is detected"
                                   : "unknown error";
  return SUCCESS;
}

int fake_cuda_live(void) { return live; }
int fake_cuda_registrations(void) { return registrations; }
int fake_cuda_unregistrations(void) { return unregistrations; }
size_t fake_cuda_bytes(int i) { return i < registrations ? registered[i].bytes : 0; }
void *fake_cuda_start(int i) { return i < registrations ? registered[i].start : NULL; }
unsigned fake_cuda_flags(int i) { return i < registrations ? registered[i].flags : 0; }
size_t fake_cuda_resident_at_call(int i) { return i < registrations ? registered[i].resident_at_call : 0; }
