// Standard-container access to big_array's memory: a std::pmr::memory_resource and a
// std::allocator-compatible memcost::allocator<T>. Blocks of at least `threshold_bytes` get the
// page-kind ladder (huge pages where the machine offers them), are faulted in by every CPU in
// parallel before the container writes them, and come from / go back to an array_pool when one
// is given; smaller blocks pass straight through to the upstream resource.
//
//   std::vector<float, memcost::allocator<float>> v(n);   // huge pages, parallel first touch
//
//   memcost::array_pool pool(1ull << 30);
//   memcost::big_memory_resource resource({.pool = &pool});
//   std::pmr::vector<float> w(n, &resource);               // the second one of a size: no faults
#pragma once

#include <cstddef>
#include <map>
#include <memory_resource>
#include <mutex>

#include "memcost/big_array.hpp"

namespace memcost {

struct big_memory_options {
  std::size_t threshold_bytes = std::size_t{1} << 21;  // below this, the upstream resource serves
  memcost::pages pages = pages::automatic;
  array_pool* pool = nullptr;
  unsigned threads = 0;  // for the parallel first touch; 0: every logical CPU
  std::pmr::memory_resource* upstream = std::pmr::new_delete_resource();
  // Big blocks pinned for a GPU (pinned.hpp): registered with the CUDA driver once faulted in,
  // unregistered when given back (a pool keeps them registered); allocate throws pinning_error
  // without a driver or a GPU.
  bool pinned = false;
};

class big_memory_resource : public std::pmr::memory_resource {
 public:
  explicit big_memory_resource(big_memory_options options = {}) : options_(options) {}
  ~big_memory_resource() override;
  big_memory_resource(const big_memory_resource&) = delete;
  big_memory_resource& operator=(const big_memory_resource&) = delete;

  // What the most recent big block got ("thp", "base", …) and whether it came from the pool.
  [[nodiscard]] allocation_report last_report() const;
  // Big blocks handed out and not yet given back.
  [[nodiscard]] std::size_t blocks_outstanding() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* pointer, std::size_t bytes, std::size_t alignment) override;
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  struct block {
    detail::mapping memory;
    std::string page_kind;
    pinned_registration registration;  // after the memory: unregistered before it is unmapped
  };
  big_memory_options options_;
  mutable std::mutex lock_;
  std::map<void*, block> blocks_;
  allocation_report last_;
};

// The resource memcost::allocator<T> uses unless given another: one per process, default options.
[[nodiscard]] big_memory_resource& default_big_memory_resource();

template <class T>
class allocator {
 public:
  using value_type = T;
  allocator() noexcept : resource_(&default_big_memory_resource()) {}
  explicit allocator(big_memory_resource* resource) noexcept : resource_(resource) {}
  template <class U>
  allocator(const allocator<U>& other) noexcept : resource_(other.resource()) {}  // NOLINT: rebinding converts implicitly

  [[nodiscard]] T* allocate(std::size_t count) {
    return static_cast<T*>(resource_->allocate(detail::checked_bytes(count, sizeof(T)), alignof(T)));
  }
  void deallocate(T* pointer, std::size_t count) noexcept { resource_->deallocate(pointer, count * sizeof(T), alignof(T)); }
  [[nodiscard]] big_memory_resource* resource() const noexcept { return resource_; }

  template <class U>
  bool operator==(const allocator<U>& other) const noexcept { return resource_ == other.resource(); }

 private:
  big_memory_resource* resource_;
};

}  // namespace memcost
