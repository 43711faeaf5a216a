// Host memory pinned for a GPU (memcost/pinned.hpp).
#include "memcost/pinned.hpp"

#include <algorithm>
#include <system_error>

#include "memcost/big_array.hpp"

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

namespace {
detail::cuda_driver& driver_or_throw() {
  std::string why_not;
  detail::cuda_driver* driver = detail::cuda_driver::get(why_not);
  if (!driver) throw pinning_error(why_not);
  return *driver;
}
}  // namespace

pinned_registration pinned_registration::in_parts(void* data, std::size_t bytes, unsigned release_threads) {
  (void)driver_or_throw();
  pinned_registration made;
  made.data_ = static_cast<char*>(data);
  made.bytes_ = bytes;
  made.release_threads_ = std::max(release_threads, 1U);
  made.adding_ = std::make_unique<std::mutex>();
  return made;
}

void pinned_registration::add(registration_chunk chunk) {
  if (std::string error = driver_or_throw().host_register(data_ + chunk.offset, chunk.bytes); !error.empty()) {
    throw pinning_error("the CUDA driver would not pin " + std::to_string(chunk.bytes) + " bytes at offset " +
                        std::to_string(chunk.offset) + ": " + error);
  }
  std::lock_guard guard(*adding_);
  chunks_.push_back(chunk);
}

pinned_registration::pinned_registration(void* data, std::size_t bytes, registration_plan plan) {
  *this = in_parts(data, bytes, plan.threads);
  const std::uint64_t started_ns = measure::now_ns();
  const std::vector<registration_chunk> chunks = registration_chunks(bytes, plan.chunk_bytes);
  try {
    if (plan.threads <= 1 || chunks.size() <= 1) {
      for (const registration_chunk& chunk : chunks) add(chunk);
    } else {
      detail::fill_job job(chunks.size(), 1, 1, plan.threads, [this, &chunks](std::size_t first, std::size_t last) {
        for (std::size_t i = first; i < last; ++i) add(chunks[i]);
      });
      job.wait();  // rethrows the first refusal once every thread has stopped
    }
  } catch (const pinning_error&) {
    release();
    throw;
  }
  register_seconds_ = static_cast<double>(measure::now_ns() - started_ns) / 1e9;
}

void pinned_registration::release(const std::function<void(const registration_chunk&)>& after_each) noexcept {
  if (chunks_.empty()) return;
  std::string ignored;
  if (detail::cuda_driver* driver = detail::cuda_driver::get(ignored)) {
    const auto unregister = [&](std::size_t first, std::size_t last) {
      for (std::size_t i = first; i < last; ++i) {
        driver->host_unregister(data_ + chunks_[i].offset);
        if (!after_each) continue;
        try {
          after_each(chunks_[i]);
        } catch (...) {  // the caller's own unmapping: nothing to undo here
        }
      }
    };
    std::unique_ptr<detail::fill_job> job;
    if (release_threads_ > 1 && chunks_.size() > 1) {
      try {
        job = std::make_unique<detail::fill_job>(chunks_.size(), 1, 1, release_threads_, unregister);
      } catch (const std::system_error&) {  // no thread to start: one after the other, on this one
      }
    }
    if (job) job->wait();
    else unregister(0, chunks_.size());
  }
  chunks_.clear();
}

}  // namespace memcost
