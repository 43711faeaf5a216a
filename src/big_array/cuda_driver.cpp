// The CUDA driver, loaded at run time (cuda_driver.hpp).
#include "big_array/cuda_driver.hpp"

#include <cstdlib>
#include <mutex>

#include "os/os.hpp"

namespace memcost::detail {
namespace {

// The driver API's values this needs (cuda.h): CUDA_SUCCESS, CUDA_ERROR_NO_DEVICE,
// CU_MEMHOSTREGISTER_PORTABLE.
constexpr int kSuccess = 0;
constexpr int kNoDevice = 100;
constexpr unsigned kRegisterPortable = 0x01;
constexpr unsigned kHostAllocDefault = 0;  // cudaHostAllocDefault: what cudaHostAlloc and PyTorch pass

template <class F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(os::find_symbol(library, name));
}

}  // namespace

cuda_driver* cuda_driver::get(std::string& why_not) {
  static std::once_flag once;
  static cuda_driver* driver = nullptr;
  static std::string why;
  std::call_once(once, [] {
    const char* named = std::getenv("MEMCOST_CUDA_LIBRARY");
    const char* path = named && *named ? named : os::cuda_driver_library();
    // Never unloaded: registrations live as long as the memory, and the driver with them.
    const os::SharedLibrary loaded = os::load_library(path);
    void* library = loaded.handle;
    if (!library) {
      why = std::string("no CUDA driver here: ") + path + " could not be loaded (" + loaded.error +
            "); pinning memory for a GPU needs NVIDIA's driver";
      return;
    }
    auto init = symbol<int (*)(unsigned)>(library, "cuInit");
    auto device_get = symbol<int (*)(int*, int)>(library, "cuDeviceGet");
    auto retain = symbol<int (*)(void**, int)>(library, "cuDevicePrimaryCtxRetain");
    auto made = new cuda_driver();
    made->register_ = symbol<register_fn>(library, "cuMemHostRegister_v2");
    made->unregister_ = symbol<unregister_fn>(library, "cuMemHostUnregister");
    made->error_string_ = symbol<error_string_fn>(library, "cuGetErrorString");
    made->set_context_ = symbol<set_context_fn>(library, "cuCtxSetCurrent");
    made->device_name_ = symbol<int (*)(char*, int, int)>(library, "cuDeviceGetName");
    made->host_alloc_ = symbol<int (*)(void**, std::size_t, unsigned)>(library, "cuMemHostAlloc");
    made->free_host_ = symbol<int (*)(void*)>(library, "cuMemFreeHost");
    made->device_alloc_ = symbol<int (*)(unsigned long long*, std::size_t)>(library, "cuMemAlloc_v2");
    made->device_free_ = symbol<int (*)(unsigned long long)>(library, "cuMemFree_v2");
    made->copy_to_device_ = symbol<int (*)(unsigned long long, const void*, std::size_t)>(library, "cuMemcpyHtoD_v2");
    made->synchronize_ = symbol<int (*)()>(library, "cuCtxSynchronize");
    if (!init || !device_get || !retain || !made->register_ || !made->unregister_ || !made->set_context_) {
      why = std::string(path) + " lacks the CUDA driver calls pinning needs (cuInit, cuMemHostRegister_v2, ...)";
      delete made;
      return;
    }
    int result = init(0);
    int device = 0;
    if (result == kSuccess) result = device_get(&device, 0);
    if (result == kSuccess) result = retain(&made->context_, device);
    if (result != kSuccess) {
      why = result == kNoDevice ? std::string("no GPU here: the CUDA driver found no device")
                                : "the CUDA driver would not start: " + made->error_text(result);
      delete made;
      return;
    }
    driver = made;
  });
  if (!driver) why_not = why;
  return driver;
}

std::string cuda_driver::error_text(int result) const {
  const char* text = nullptr;
  if (error_string_ && error_string_(result, &text) == kSuccess && text) {
    return std::string(text) + " (CUresult " + std::to_string(result) + ")";
  }
  return "CUresult " + std::to_string(result);
}

// Every call needs a context current on the calling thread (a registration then belongs to none).
std::string cuda_driver::current_context() const {
  const int result = set_context_(context_);
  return result == kSuccess ? std::string() : error_text(result);
}

std::string cuda_driver::host_register(void* data, std::size_t bytes) {
  if (std::string error = current_context(); !error.empty()) return error;
  const int result = register_(data, bytes, kRegisterPortable);
  return result == kSuccess ? std::string() : error_text(result);
}

void cuda_driver::host_unregister(void* data) {
  if (current_context().empty()) unregister_(data);
}

std::string cuda_driver::device_name() const {
  char name[256] = {};
  if (!device_name_ || device_name_(name, sizeof name - 1, 0) != kSuccess) return "an unnamed GPU";
  return name;
}

std::string cuda_driver::host_alloc(std::size_t bytes, void** data) {
  if (!host_alloc_ || !free_host_) return "this driver lacks cuMemHostAlloc";
  if (std::string error = current_context(); !error.empty()) return error;
  const int result = host_alloc_(data, bytes, kHostAllocDefault);
  return result == kSuccess ? std::string() : error_text(result);
}

void cuda_driver::free_host(void* data) {
  if (free_host_ && current_context().empty()) free_host_(data);
}

std::string cuda_driver::device_alloc(std::size_t bytes, unsigned long long* device_address) {
  if (!device_alloc_ || !device_free_) return "this driver lacks cuMemAlloc_v2";
  if (std::string error = current_context(); !error.empty()) return error;
  const int result = device_alloc_(device_address, bytes);
  return result == kSuccess ? std::string() : error_text(result);
}

void cuda_driver::device_free(unsigned long long device_address) {
  if (device_free_ && current_context().empty()) device_free_(device_address);
}

std::string cuda_driver::copy_to_device(unsigned long long device_address, const void* data, std::size_t bytes) {
  if (!copy_to_device_ || !synchronize_) return "this driver lacks cuMemcpyHtoD_v2";
  if (std::string error = current_context(); !error.empty()) return error;
  int result = copy_to_device_(device_address, data, bytes);
  // From pinned memory the copy may return before the GPU has the bytes: wait for them.
  if (result == kSuccess) result = synchronize_();
  return result == kSuccess ? std::string() : error_text(result);
}

}  // namespace memcost::detail
