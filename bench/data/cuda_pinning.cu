// A CUDA program that pins host memory the two ways programs do, for bench/gpu_host.py to trace on
// a GPU host: `cudaHostAlloc` (what PyTorch's pin_memory=True calls) and `malloc` +
// `cudaHostRegister`. In both, the driver faults the pages in inside its own system calls, where
// only the tracer's in-call counting sees them; `memcost trace` names each site by its CUDA call.
// Each buffer is copied to the GPU once, so the program does what a loader does with it.
// Built there by nvcc (bench/gpu_host.py): nvcc -O2 -g -o cuda_pinning cuda_pinning.cu
// Usage: cuda_pinning [BYTES]   (each way pins BYTES, default 1 GiB)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cuda_pinning: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

__attribute__((noinline)) void* allocate_staging(std::size_t bytes) {
  void* host = nullptr;
  check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  return host;
}

__attribute__((noinline)) void* register_buffer(std::size_t bytes) {
  void* host = std::malloc(bytes);
  if (host == nullptr) {
    std::fprintf(stderr, "cuda_pinning: malloc of %zu bytes failed\n", bytes);
    std::exit(1);
  }
  check(cudaHostRegister(host, bytes, cudaHostRegisterDefault), "cudaHostRegister");
  return host;
}

__attribute__((noinline)) void copy_to_gpu(void* device, const void* host, std::size_t bytes) {
  check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : std::size_t{1} << 30;
  if (bytes == 0) {
    std::fprintf(stderr, "cuda_pinning: BYTES must be a positive number\n");
    return 2;
  }
  void* device = nullptr;
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  void* staging = allocate_staging(bytes);
  copy_to_gpu(device, staging, bytes);
  void* registered = register_buffer(bytes);
  copy_to_gpu(device, registered, bytes);
  check(cudaHostUnregister(registered), "cudaHostUnregister");
  std::free(registered);
  check(cudaFreeHost(staging), "cudaFreeHost");
  check(cudaFree(device), "cudaFree");
  std::printf("pinned %zu bytes by cudaHostAlloc and %zu by cudaHostRegister\n", bytes, bytes);
  return 0;
}
