// Host memory pinned for a GPU: page-locked and registered with the CUDA driver
// (cuMemHostRegister), so that copies to the GPU run at pinned speed (55 GB/s on an H200 host,
// where ordinary memory copies at 7-9). The driver is loaded at run time (libcuda.so.1, dlopen):
// memcost has no build-time CUDA dependency, and without a GPU pinning is one clear error.
//
// make_big_array(..., {.pinned = true}) registers the array once its pages are faulted in (the
// fast way: huge pages and a parallel first touch, then the driver only locks what is there), and
// unregisters it before the memory goes. pinned_registration does it for memory of your own.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace memcost {

// The driver refuses one registration of 512 GiB or more; vLLM registers in chunks of at most
// 64 GiB, and so does memcost.
inline constexpr std::size_t max_registration_bytes = std::size_t{64} << 30;

// What cannot be pinned, and why: no CUDA driver, no GPU, or the driver's own error.
class pinning_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct registration_chunk {
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

// `bytes` cut into registrations of at most `max_chunk` bytes, each a whole number of `align`
// bytes but the last. (Pure.)
[[nodiscard]] std::vector<registration_chunk> registration_chunks(std::size_t bytes,
                                                                  std::size_t max_chunk = max_registration_bytes,
                                                                  std::size_t align = 4096);

// Why memory cannot be pinned here, in one sentence; "" where it can (a driver and a GPU).
[[nodiscard]] std::string pinning_unavailable();

// How a registration is cut and made: chunks of at most `chunk_bytes`, registered (and later
// unregistered) by `threads` threads at once. The driver copies at pinned speed only within one
// registration (docs/pinned.md), so the default is one chunk, from one thread.
struct registration_plan {
  std::size_t chunk_bytes = max_registration_bytes;
  unsigned threads = 1;
};

// [data, data + bytes) registered with the driver, chunk by chunk, until destroyed or released.
class pinned_registration {
 public:
  pinned_registration() = default;
  // Throws pinning_error (what was registered is unregistered first).
  pinned_registration(void* data, std::size_t bytes, registration_plan plan = {});
  // Nothing registered yet: add() registers [data + offset, data + offset + bytes), from any
  // thread, as soon as its pages are in (faulting and registering overlapped). Throws
  // pinning_error where there is no driver.
  [[nodiscard]] static pinned_registration in_parts(void* data, std::size_t bytes, unsigned release_threads);
  void add(registration_chunk chunk);  // throws pinning_error (the chunk is not registered)
  ~pinned_registration() { release(); }
  pinned_registration(pinned_registration&& other) noexcept { swap(other); }
  pinned_registration& operator=(pinned_registration&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }
  pinned_registration(const pinned_registration&) = delete;
  pinned_registration& operator=(const pinned_registration&) = delete;

  // Unregisters every chunk (the memory stays mapped), from the plan's threads.
  void release() noexcept { release({}); }
  // The same, calling after_each(chunk) on the unregistering thread as each chunk is unregistered:
  // the caller unmaps it there, unpinning and unmapping overlapped.
  void release(const std::function<void(const registration_chunk&)>& after_each) noexcept;
  [[nodiscard]] bool pinned() const { return !chunks_.empty(); }
  [[nodiscard]] std::size_t chunks() const { return chunks_.size(); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  [[nodiscard]] double register_seconds() const { return register_seconds_; }  // the driver's time

 private:
  void swap(pinned_registration& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    std::swap(chunks_, other.chunks_);
    std::swap(register_seconds_, other.register_seconds_);
    std::swap(release_threads_, other.release_threads_);
    std::swap(adding_, other.adding_);
  }
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<registration_chunk> chunks_;
  double register_seconds_ = 0;
  unsigned release_threads_ = 1;
  std::unique_ptr<std::mutex> adding_;  // add() from many threads
};

}  // namespace memcost
