// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1; MEMCOST_CUDA_LIBRARY names
// another, as the tests' fake driver does): the few calls pinning needs, behind one small
// interface. Calls only, no policy: chunking and errors for the user are pinned.cpp's.
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
  void* context_ = nullptr;
};

}  // namespace memcost::detail
