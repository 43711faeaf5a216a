// big_memory_resource: big blocks by the page-kind ladder (or from a pool), faulted in by every
// CPU before the container writes them; small blocks through to the upstream resource.
#include "memcost/allocator.hpp"

#include <algorithm>

namespace memcost {

big_memory_resource::~big_memory_resource() {
  std::lock_guard guard(lock_);
  for (auto& [pointer, held] : blocks_) {
    if (options_.pool) options_.pool->give(std::move(held.memory), held.page_kind, std::move(held.registration));
  }
  blocks_.clear();
}

void* big_memory_resource::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (bytes < options_.threshold_bytes) return options_.upstream->allocate(bytes, alignment);
  // Mappings start on a page: any alignment a type can ask for (up to a page) holds.
  big_array_options array_options{.pages = options_.pages, .threads = options_.threads, .pool = options_.pool,
                                  .pinned = options_.pinned};
  allocation_report report;
  block held;
  report.from_pool = options_.pool && options_.pool->take(bytes, array_options, held.memory, report.page_kind,
                                                          &held.registration);
  if (!report.from_pool) {
    held.memory = detail::mapping(bytes, array_options, report);
    // Parallel first touch: the container then writes memory already faulted in, by populate or
    // touch as measured here (fault_in.cpp, as make_big_array's zero arrays are).
    auto* base = static_cast<unsigned char*>(held.memory.data());
    const unsigned threads = detail::default_threads(options_.threads);
    const detail::fault_choice choice =
        detail::choose_fault_method(base, held.memory.bytes(), held.memory.page_bytes(), threads, true);
    report.initialization = detail::fault_method_name(choice.method);
    report.fault_method_reason = choice.reason;
    detail::fill_job job(held.memory.bytes(), 1, held.memory.page_bytes(), threads,
                         [base, method = choice.method, done = choice.faulted_bytes](std::size_t first, std::size_t last) {
                           first = std::max(first, done);  // measuring faulted [0, done) in
                           if (first < last) detail::fault_in(base + first, last - first, method);
                         });
    job.wait();
    detail::read_back(report, held.memory.data(), held.memory.bytes());
  }
  report.mapped_bytes = held.memory.bytes();
  held.page_kind = report.page_kind;
  if (options_.pinned && !held.registration.pinned()) {
    held.registration = pinned_registration(held.memory.data(), held.memory.bytes());  // throws pinning_error
    report.pin_seconds = held.registration.register_seconds();
  }
  report.pinned = held.registration.pinned();
  void* pointer = held.memory.data();
  std::lock_guard guard(lock_);
  blocks_.emplace(pointer, std::move(held));
  last_ = report;
  return pointer;
}

void big_memory_resource::do_deallocate(void* pointer, std::size_t bytes, std::size_t alignment) {
  if (bytes < options_.threshold_bytes) {
    options_.upstream->deallocate(pointer, bytes, alignment);
    return;
  }
  block held;
  {
    std::lock_guard guard(lock_);
    auto found = blocks_.find(pointer);
    if (found == blocks_.end()) return;  // not ours: nothing to give back
    held = std::move(found->second);
    blocks_.erase(found);
  }
  if (options_.pool) options_.pool->give(std::move(held.memory), held.page_kind, std::move(held.registration));
  // Otherwise `held` unregisters and unmaps the block as it goes.
}

allocation_report big_memory_resource::last_report() const {
  std::lock_guard guard(lock_);
  return last_;
}

std::size_t big_memory_resource::blocks_outstanding() const {
  std::lock_guard guard(lock_);
  return blocks_.size();
}

big_memory_resource& default_big_memory_resource() {
  static big_memory_resource resource;
  return resource;
}

}  // namespace memcost
