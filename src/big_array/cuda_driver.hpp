// The CUDA driver API, loaded at run time through the OS layer (os::load_library: libcuda.so.1
// on Linux, nvcuda.dll on Windows; MEMCOST_CUDA_LIBRARY names another, as the tests' fake driver
// does): the few calls pinning needs, and those the `pinned` experiment measures pinning against
// (the driver's own pinned allocation, a buffer on the GPU and a copy to it), behind one small
// interface. Calls only, no policy: chunking and errors for the user are pinned.cpp's. Every
// call returns "" or the driver's error, in words.
#pragma once

#include <cstddef>
#include <string>

namespace memcost::detail {

class cuda_driver {
 public:
  // The process's driver, loaded and initialized on first use with the first GPU's primary
  // context made current; nullptr with `why_not` (one sentence) where there is none.
  static cuda_driver* get(std::string& why_not);

  // cuMemHostRegister (portable: every context sees it pinned); "" or the driver's error.
  [[nodiscard]] std::string host_register(void* data, std::size_t bytes);
  void host_unregister(void* data);

  // The first GPU's name, as the driver gives it.
  [[nodiscard]] std::string device_name() const;
  // cuMemHostAlloc with cudaHostAlloc's default flags: what cudaHostAlloc and PyTorch's pinned
  // allocator call.
  [[nodiscard]] std::string host_alloc(std::size_t bytes, void** data);
  void free_host(void* data);
  // A buffer in the GPU's memory, and a copy into it that returns once the bytes are there.
  [[nodiscard]] std::string device_alloc(std::size_t bytes, unsigned long long* device_address);
  void device_free(unsigned long long device_address);
  [[nodiscard]] std::string copy_to_device(unsigned long long device_address, const void* data, std::size_t bytes);

 private:
  cuda_driver() = default;
  [[nodiscard]] std::string error_text(int result) const;
  using register_fn = int (*)(void*, std::size_t, unsigned);
  using unregister_fn = int (*)(void*);
  using error_string_fn = int (*)(int, const char**);
  using set_context_fn = int (*)(void*);
  register_fn register_ = nullptr;
  unregister_fn unregister_ = nullptr;
  error_string_fn error_string_ = nullptr;
  set_context_fn set_context_ = nullptr;
  // The calls only the experiment makes: null where a driver lacks them (the calls then say so).
  int (*device_name_)(char*, int, int) = nullptr;
  int (*host_alloc_)(void**, std::size_t, unsigned) = nullptr;
  int (*free_host_)(void*) = nullptr;
  int (*device_alloc_)(unsigned long long*, std::size_t) = nullptr;
  int (*device_free_)(unsigned long long) = nullptr;
  int (*copy_to_device_)(unsigned long long, const void*, std::size_t) = nullptr;
  int (*synchronize_)() = nullptr;
  [[nodiscard]] std::string current_context() const;
  void* context_ = nullptr;
};

}  // namespace memcost::detail
