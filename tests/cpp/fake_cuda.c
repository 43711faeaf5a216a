/* A stand-in for NVIDIA's libcuda.so.1, for the pinning tests on machines without a GPU: the driver
   calls memcost makes, recording what was registered. FAKE_CUDA_NO_DEVICE makes cuInit find no
   GPU; FAKE_CUDA_MAX_BYTES refuses a registration larger than that, as the real driver refuses
   one of 512 GiB or more. The tests read the record through fake_cuda_* (dlsym). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

enum { SUCCESS = 0, INVALID_VALUE = 1, NO_DEVICE = 100, HOST_MEMORY_ALREADY_REGISTERED = 712, MOST = 4096 };

static struct {
  void *start;
  size_t bytes;
  unsigned flags;
} registered[MOST];
static int registrations, unregistrations, live;
static int context_current;

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
  if (!context_current || registrations >= MOST || (most && bytes > strtoull(most, NULL, 10))) return INVALID_VALUE;
  for (int i = 0; i < registrations; ++i) {
    if (registered[i].bytes && registered[i].start == start) return HOST_MEMORY_ALREADY_REGISTERED;
  }
  registered[registrations].start = start;
  registered[registrations].bytes = bytes;
  registered[registrations].flags = flags;
  ++registrations;
  ++live;
  return SUCCESS;
}
int cuMemHostUnregister(void *start) {
  for (int i = 0; i < registrations; ++i) {
    if (registered[i].bytes && registered[i].start == start) {
      registered[i].bytes = 0;
      ++unregistrations;
      --live;
      return SUCCESS;
    }
  }
  return INVALID_VALUE;
}
int cuGetErrorString(int error, const char **text) {
  *text = error == INVALID_VALUE ? "invalid argument" : error == NO_DEVICE ? "no CUDA-capable device is detected"
                                                                              : "unknown error";
  return SUCCESS;
}

int fake_cuda_live(void) { return live; }
int fake_cuda_registrations(void) { return registrations; }
int fake_cuda_unregistrations(void) { return unregistrations; }
size_t fake_cuda_bytes(int i) { return i < registrations ? registered[i].bytes : 0; }
void *fake_cuda_start(int i) { return i < registrations ? registered[i].start : NULL; }
unsigned fake_cuda_flags(int i) { return i < registrations ? registered[i].flags : 0; }
