// array_pool: the memory of released big arrays, kept faulted in for the next one.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "memcost/big_array.hpp"

namespace memcost {
namespace {

const char* kind_name(pages kind) {
  switch (kind) {
    case pages::hugetlb_1g: return "hugetlb-1G";
    case pages::hugetlb_2m: return "hugetlb-2M";
    case pages::thp: return "thp";
    case pages::base: return "base";
    case pages::automatic: return "";
  }
  return "";
}

// A piece more than this many times the request stays for a larger array.
constexpr std::size_t kLargestWaste = 2;

}  // namespace

bool array_pool::take(std::size_t bytes, const big_array_options& options, detail::mapping& into, std::string& page_kind,
                      pinned_registration* registration) {
  std::lock_guard guard(lock_);
  const std::string wanted = kind_name(options.pages);
  const bool pinned = options.pinned && registration;
  auto best = pieces_.end();
  // The smallest piece that fits; among those, one registered as the array wants it first.
  const auto better = [pinned](const piece& candidate, const piece& held) {
    const bool fits = candidate.registration.pinned() == pinned, held_fits = held.registration.pinned() == pinned;
    return fits != held_fits ? fits : candidate.memory.bytes() < held.memory.bytes();
  };
  for (auto it = pieces_.begin(); it != pieces_.end(); ++it) {
    const std::size_t size = it->memory.bytes();
    if (size < bytes || size > kLargestWaste * std::max<std::size_t>(bytes, 1)) continue;
    if (!wanted.empty() && it->page_kind != wanted) continue;
    if (best == pieces_.end() || better(*it, *best)) best = it;
  }
  if (best == pieces_.end()) {
    ++stats_.misses;
    return false;
  }
  ++stats_.hits;
  stats_.bytes_held -= best->memory.bytes();
  --stats_.pieces_held;
  if (best->registration.pinned()) {
    --stats_.pieces_pinned;
    if (pinned) {
      ++stats_.pinned_hits;
      *registration = std::move(best->registration);
    } else {
      best->registration.release();  // an unpinned array gets its memory unpinned
    }
  }
  into = std::move(best->memory);
  page_kind = best->page_kind;
  pieces_.erase(best);
  return true;
}

void array_pool::give(detail::mapping&& memory, const std::string& page_kind, pinned_registration&& registration) {
  std::lock_guard guard(lock_);
  const std::size_t size = memory.bytes();
  if (size > max_bytes_) {
    stats_.bytes_trimmed += size;
    registration.release();                        // unpinned,
    detail::mapping released(std::move(memory));  // then back to the OS here
    return;
  }
  if (registration.pinned()) ++stats_.pieces_pinned;
  pieces_.push_front({std::move(memory), page_kind, std::move(registration)});
  stats_.bytes_held += size;
  ++stats_.pieces_held;
  trim_locked(max_bytes_);
}

void array_pool::trim(std::size_t keep_bytes) {
  std::lock_guard guard(lock_);
  trim_locked(keep_bytes);
}

void array_pool::trim_locked(std::size_t keep_bytes) {
  while (stats_.bytes_held > keep_bytes && !pieces_.empty()) {
    stats_.bytes_held -= pieces_.back().memory.bytes();
    stats_.bytes_trimmed += pieces_.back().memory.bytes();
    --stats_.pieces_held;
    if (pieces_.back().registration.pinned()) --stats_.pieces_pinned;
    pieces_.pop_back();  // unregistered, then unmapped (the piece's members, last first)
  }
}

namespace {
// Set while the default pool is enabled; the pool object itself is never destroyed, so arrays
// made from it can give their memory back at any time.
std::atomic<array_pool*> enabled_default{nullptr};
std::mutex default_lock;
std::unique_ptr<array_pool> default_instance;
}  // namespace

void enable_default_array_pool(std::size_t max_bytes) {
  std::lock_guard guard(default_lock);
  if (!default_instance || default_instance->max_bytes() != max_bytes) {
    if (default_instance) {
      default_instance->release();
      // Arrays still out may give their memory back to the old pool: keep it, never delete.
      (void)default_instance.release();
    }
    default_instance = std::make_unique<array_pool>(max_bytes);
  }
  enabled_default = default_instance.get();
}

void disable_default_array_pool() {
  std::lock_guard guard(default_lock);
  enabled_default = nullptr;
  // A cap of 0: everything held goes back now, and arrays still out give theirs straight back too.
  if (default_instance) default_instance->set_max_bytes(0);
}

namespace detail {
array_pool* default_pool() { return enabled_default.load(); }
}  // namespace detail

std::size_t array_pool::max_bytes() const {
  std::lock_guard guard(lock_);
  return max_bytes_;
}

void array_pool::set_max_bytes(std::size_t max_bytes) {
  std::lock_guard guard(lock_);
  max_bytes_ = max_bytes;
  trim_locked(max_bytes);
}

array_pool_stats array_pool::stats() const {
  std::lock_guard guard(lock_);
  return stats_;
}

namespace detail {

bool acquire(std::size_t bytes, big_array_options& options, mapping& into, allocation_report& report,
             pinned_registration* registration) {
  if (options.numa != numa_placement::inherit) options.pool = nullptr;
  else if (!options.pool) options.pool = default_pool();
  const bool from_pool = options.pool && options.pool->take(bytes, options, into, report.page_kind, registration);
  if (!from_pool) {
    into = mapping(bytes, options, report);
    place_on_nodes(into, options, report);
  }
  report.from_pool = from_pool;
  report.read_back = from_pool;  // the page kind it had when it was last used
  report.mapped_bytes = into.bytes();
  return from_pool;
}

}  // namespace detail
}  // namespace memcost
