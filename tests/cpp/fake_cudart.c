/* A stand-in for the CUDA runtime as a shared library (libcudart.so), for the pinned-memory advice's
   --verify on machines without a GPU: the runtime's pinning calls, each passed to the stand-in
   driver (fake_cuda.c, linked as libcuda.so.1) as the real runtime passes them to libcuda, the
   primary context made current on first use. The driver's cuMemHostAlloc faults its memory in
   inside mmap (MAP_POPULATE), on base pages, as the real one faults it in inside an ioctl.
   tests/python/e2e/test_pinning_standin.py builds it with a program that calls it, without sibling
   calls (-fno-optimize-sibling-calls): a tail call would leave no frame of the runtime's call. */
#include <stddef.h>

int cuInit(unsigned flags);
int cuDeviceGet(int *device, int ordinal);
int cuDevicePrimaryCtxRetain(void **context, int device);
int cuCtxSetCurrent(void *context);
int cuMemHostAlloc(void **data, size_t bytes, unsigned flags);
int cuMemFreeHost(void *data);
int cuMemHostRegister_v2(void *start, size_t bytes, unsigned flags);
int cuMemHostUnregister(void *start);

static int context(void) {
  static int status = -1;
  if (status < 0) {
    int device = 0;
    void *primary = NULL;
    status = cuInit(0);
    if (status == 0) status = cuDeviceGet(&device, 0);
    if (status == 0) status = cuDevicePrimaryCtxRetain(&primary, device);
    if (status == 0) status = cuCtxSetCurrent(primary);
  }
  return status;
}

int cudaHostAlloc(void **host, size_t bytes, unsigned flags) {
  int status = context();
  return status ? status : cuMemHostAlloc(host, bytes, flags);
}
int cudaMallocHost(void **host, size_t bytes) { return cudaHostAlloc(host, bytes, 0); }
int cudaFreeHost(void *host) { return cuMemFreeHost(host); }
int cudaHostRegister(void *host, size_t bytes, unsigned flags) {
  int status = context();
  return status ? status : cuMemHostRegister_v2(host, bytes, flags);
}
int cudaHostUnregister(void *host) { return cuMemHostUnregister(host); }
