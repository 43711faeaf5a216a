// The strategies the bigarray experiment ranks: every common way to allocate and initialize one
// big array (new[], std::vector, malloc, calloc, mmap on each page kind with its ways of faulting
// in, make_big_array), and which of them a run measures.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "os/os.hpp"
#include "probe/emitter.hpp"
#include "probe/experiments/bigarray/settings.hpp"
#include "probe/experiments/bigarray/work_item.hpp"

namespace memcost::probe::bigarray {

// An array made by one strategy: where it is, and how to free it.
struct BuiltArray {
  BuiltArray() = default;
  BuiltArray(WorkItem* made_items, std::function<void()> release_items, std::string kind)
      : items(made_items), release(std::move(release_items)), page_kind(std::move(kind)) {}
  WorkItem* items = nullptr;
  std::function<void()> release;
  std::string page_kind;  // what the strategy asked for (make_big_array: what its report read back)
  std::string failure;    // non-empty: the strategy could not do its work, nothing to measure
  double first_percent_s = -1;
  std::string auto_choice;
  std::vector<std::string> fallbacks;
  std::string initialization, initialization_reason;  // make_big_array auto: how it initialized, and why
};

struct StrategyInputs {
  std::size_t count = 0;
  unsigned threads = 1;
  bool zero = true;
};

using Strategy = std::function<BuiltArray(const StrategyInputs&)>;

struct NamedStrategy {
  std::string name;
  std::string family;  // "libc" strategies also run under other allocators
  Strategy make;
  bool huge_pages = false;  // asks for huge pages (THP or hugetlb): it runs in the rounds' huge-page group
  // Does all its work, allocating, initializing and freeing, on the calling thread: such rows may be
  // measured side by side, each in a process of its own (strategy_rounds.hpp).
  bool one_thread = false;
  bool one_thread_when_zero = false;  // so for a zero array only (MAP_POPULATE: a value is written on every thread)
  // Most of its writing is done by one thread: the run's estimate prices it at one thread's rate.
  bool serial_writes = false;
  bool populate_write = false;  // every thread's MADV_POPULATE_WRITE faults it in (the estimate's own rate)
  [[nodiscard]] bool one_thread_for(bool zero) const { return one_thread || (zero && one_thread_when_zero); }
};

// Every strategy, with its mmap rows for each of `kinds`.
std::vector<NamedStrategy> strategies(const std::vector<os::PageKind>& kinds);

// `bytes` at `address` faulted in by MADV_POPULATE_WRITE, `page` bytes at a time, shared among
// `threads`; the first refusal's message, or "" (MEMCOST_INJECT_FAILURE containing
// "populate_write" refuses it, as a kernel older than 5.14 does: the probe's test hook).
std::string populate_on_every_thread(void* address, std::size_t bytes, std::size_t page, unsigned threads);

// The malloc this process runs on, told by the entry points only it exports, so that a row
// measured under a preloaded allocator is known to have been.
std::string malloc_implementation();

// The page kinds this machine can back `bytes` with; each one it cannot says why, and how to
// get it where a pool could be grown.
std::vector<os::PageKind> usable_page_kinds(std::size_t bytes, Emitter& emitter);

// The strategies --strategies and --libc-only leave, of those the page kinds allow.
std::shared_ptr<std::vector<NamedStrategy>> chosen_strategies(const Settings& s, const std::vector<os::PageKind>& kinds);

}  // namespace memcost::probe::bigarray
