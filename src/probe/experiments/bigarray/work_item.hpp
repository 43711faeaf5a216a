// The seed's work item, the one value every strategy writes, and the helpers every part of the
// bigarray experiment shares: a parallel loop over parts, a fill of items, a sampled check.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"

namespace memcost::probe::bigarray {

// The seed's work item: 16 bytes around a std::atomic, which zeroes itself.
struct WorkItem {
  std::atomic<std::uint8_t> state{0};
  std::uint8_t flags[7]{};
  std::uint64_t payload{0};
  WorkItem() = default;
  WorkItem(std::uint8_t s, std::uint64_t p) : state(s), payload(p) {}
  WorkItem(const WorkItem& other) : state(other.state.load(std::memory_order_relaxed)), payload(other.payload) {
    std::memcpy(flags, other.flags, sizeof flags);
  }
  WorkItem& operator=(const WorkItem& other) {
    state.store(other.state.load(std::memory_order_relaxed), std::memory_order_relaxed);
    std::memcpy(flags, other.flags, sizeof flags);
    payload = other.payload;
    return *this;
  }
};
static_assert(sizeof(WorkItem) == 16);


}  // namespace memcost::probe::bigarray

// All-zero bytes are a valid WorkItem equal to WorkItem{}, and a WorkItem's bytes
// copied make an equal WorkItem: big_array may skip constructors and copy bytes.
template <>
struct memcost::zero_is_valid<memcost::probe::bigarray::WorkItem> : std::true_type {};
template <>
struct memcost::bytes_copyable<memcost::probe::bigarray::WorkItem> : std::true_type {};

namespace memcost::probe::bigarray {

inline const WorkItem value_item(1, 0x0101010101010101ULL);

inline bool matches(const WorkItem& item, bool zero) {
  return zero ? item.state.load(std::memory_order_relaxed) == 0 && item.payload == 0
              : item.state.load(std::memory_order_relaxed) == 1 && item.payload == value_item.payload;
}

inline void parallel_for(unsigned threads, std::size_t count, const std::function<void(std::size_t, std::size_t)>& work) {
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    std::size_t first = count * t / threads, last = count * (t + 1) / threads;
    workers.emplace_back([&work, first, last] { work(first, last); });
  }
  for (auto& worker : workers) worker.join();
}

inline void fill_items(WorkItem* items, std::size_t first, std::size_t last, bool zero) {
  if (zero) {
    std::memset(static_cast<void*>(items + first), 0, (last - first) * sizeof(WorkItem));
  } else {
    for (std::size_t i = first; i < last; ++i) std::memcpy(static_cast<void*>(items + i), &value_item, sizeof(WorkItem));
  }
  measure::keep_writes(items);
}

// A sampled check: 4096 random elements, the first and the last.
inline bool verified(const WorkItem* items, std::size_t count, bool zero) {
  std::mt19937_64 random(1);
  for (int k = 0; k < 4096; ++k) {
    if (!matches(items[random() % count], zero)) return false;
  }
  return matches(items[0], zero) && matches(items[count - 1], zero);
}

}  // namespace memcost::probe::bigarray
