// Parallel initialization of a big_array: the threads, the chunks, readiness.
#include <algorithm>

#include "memcost/big_array.hpp"
#include "os/os.hpp"

namespace memcost::detail {
namespace {
// Jobs cut the array into this many chunks at least, taken front to back by whichever thread is
// free: an asynchronous job's first chunks are ready long before the last, and a thread slowed by
// the host (another guest on its CPU, memory the host must fault in again) takes fewer chunks
// instead of holding the whole job back. With one contiguous part per thread, `prefault::now` at
// 4 GiB here took 7-15 % longer than `prefault::async` doing the same work (value initialization,
// medians of 5: 0.280 against 0.258 s in one run, 0.281 against 0.242 in another).
constexpr std::size_t min_chunks = 256;
}  // namespace

fill_job::fill_job(std::size_t count, std::size_t element_bytes, std::size_t page_bytes, unsigned threads,
                   work_function work, std::vector<std::vector<unsigned>> cpu_sets)
    : work_(std::move(work)) {
  threads = std::max(1U, std::min<unsigned>(threads, static_cast<unsigned>(std::min<std::size_t>(count, 1U << 16))));
  std::size_t chunks = std::max<std::size_t>(min_chunks, threads);
  chunks = std::min(chunks, count);
  // Chunk borders fall on page borders, so that no two threads fault one page.
  const std::size_t chunk_bytes = count * element_bytes / chunks;
  bounds_.push_back(0);
  for (std::size_t i = 1; i < chunks; ++i) {
    std::size_t border_byte = chunk_bytes * i / page_bytes * page_bytes;
    std::size_t index = (border_byte + element_bytes - 1) / element_bytes;  // first element starting at or after it
    if (index > bounds_.back() && index < count) bounds_.push_back(index);
  }
  bounds_.push_back(count);
  done_ = std::make_unique<std::atomic<bool>[]>(bounds_.size() - 1);
  // All threads exist before the first fault, as the caller asked.
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    std::vector<unsigned> cpus = cpu_sets.empty() ? std::vector<unsigned>{} : cpu_sets[i % cpu_sets.size()];
    workers_.emplace_back([this, cpus = std::move(cpus)] { run(cpus); });
  }
}

fill_job::~fill_job() {
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

void fill_job::run(const std::vector<unsigned>& cpus) {
  // A thread placed on a node first-touches its part there; if the placement fails it still fills.
  if (!cpus.empty()) (void)os::pin_current_thread_to(cpus);
  const std::size_t chunks = bounds_.size() - 1;
  for (std::size_t chunk = next_.fetch_add(1); chunk < chunks && !failed_.load(); chunk = next_.fetch_add(1)) {
    try {
      work_(bounds_[chunk], bounds_[chunk + 1]);
      done_[chunk].store(true, std::memory_order_release);
    } catch (...) {
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
  }
}

bool fill_job::ready(std::size_t index) const {
  auto chunk = std::upper_bound(bounds_.begin(), bounds_.end(), index) - bounds_.begin() - 1;
  return chunk >= 0 && static_cast<std::size_t>(chunk) < bounds_.size() - 1 &&
         done_[static_cast<std::size_t>(chunk)].load(std::memory_order_acquire);
}

void fill_job::wait() {
  if (!joined_) {
    for (auto& worker : workers_) worker.join();
    joined_ = true;
    work_ = nullptr;  // lets go of what the initializer captured (a fill value, a generator)
  }
  if (error_) std::rethrow_exception(error_);
}

void fill_job::for_each_done(const std::function<void(std::size_t, std::size_t)>& f) const {
  for (std::size_t chunk = 0; chunk + 1 < bounds_.size(); ++chunk) {
    if (done_[chunk].load(std::memory_order_acquire)) f(bounds_[chunk], bounds_[chunk + 1]);
  }
}

}  // namespace memcost::detail
