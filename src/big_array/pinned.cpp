// Host memory pinned for a GPU (memcost/pinned.hpp).
#include "memcost/pinned.hpp"

#include <algorithm>

#include "big_array/cuda_driver.hpp"
#include "memcost/measure.hpp"

namespace memcost {

std::vector<registration_chunk> registration_chunks(std::size_t bytes, std::size_t max_chunk, std::size_t align) {
  std::vector<registration_chunk> chunks;
  align = std::max<std::size_t>(align, 1);
  const std::size_t step = std::max(max_chunk / align * align, align);
  for (std::size_t offset = 0; offset < bytes; offset += step) chunks.push_back({offset, std::min(step, bytes - offset)});
  return chunks;
}

std::string pinning_unavailable() {
  std::string why_not;
  detail::cuda_driver::get(why_not);
  return why_not;
}

pinned_registration::pinned_registration(void* data, std::size_t bytes) : data_(static_cast<char*>(data)), bytes_(bytes) {
  std::string why_not;
  detail::cuda_driver* driver = detail::cuda_driver::get(why_not);
  if (!driver) throw pinning_error(why_not);
  const std::uint64_t started_ns = measure::now_ns();
  for (const registration_chunk& chunk : registration_chunks(bytes)) {
    if (std::string error = driver->host_register(data_ + chunk.offset, chunk.bytes); !error.empty()) {
      release();
      throw pinning_error("the CUDA driver would not pin " + std::to_string(chunk.bytes) + " bytes at offset " +
                          std::to_string(chunk.offset) + ": " + error);
    }
    chunks_.push_back(chunk);
  }
  register_seconds_ = static_cast<double>(measure::now_ns() - started_ns) / 1e9;
}

void pinned_registration::release() noexcept {
  if (chunks_.empty()) return;
  std::string ignored;
  if (detail::cuda_driver* driver = detail::cuda_driver::get(ignored)) {
    for (const registration_chunk& chunk : chunks_) driver->host_unregister(data_ + chunk.offset);
  }
  chunks_.clear();
}

}  // namespace memcost
