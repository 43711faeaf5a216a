// The bigarray experiment's strategies (strategies.hpp).
#include "probe/experiments/bigarray/strategies.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "memcost/allocator.hpp"
#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/capabilities.hpp"
#include "probe/arguments.hpp"

namespace memcost::probe::bigarray {
namespace {

// os::populate_write, with the probe's test hook (tests/python/e2e/test_bigarray.py): with
// MEMCOST_INJECT_FAILURE containing "populate_write" it fails with EINVAL, as on a kernel older
// than 5.14. A hook of this experiment's, not of the OS layer.
os::Status populate_write_or_injected(void* address, std::size_t size_bytes) {
  static const bool injected = [] {
    const char* failing = std::getenv("MEMCOST_INJECT_FAILURE");
    return failing && std::strstr(failing, "populate_write");
  }();
  if (injected) return os::Status{EINVAL, "madvise(MADV_POPULATE_WRITE) [failure injected by MEMCOST_INJECT_FAILURE]"};
  return os::populate_write(address, size_bytes);
}

// An array mapped from the OS on `kind` pages: faulted in by the mapping (populate), by every
// thread's MADV_POPULATE_WRITE (populate_write), by a parallel fill, or by the first touch.
BuiltArray from_os(const StrategyInputs& c, os::PageKind kind, bool populate, bool parallel_fill, bool populate_write) {
  std::size_t bytes = c.count * sizeof(WorkItem);
  std::size_t page = os::page_kind_bytes(kind);
  std::size_t mapped = (bytes + page - 1) / page * page;
  os::MapRequest request{mapped, kind};
  request.populate = populate;
  if (kind == os::PageKind::thp) request.alignment_bytes = 2 << 20;
  os::Mapping mapping = os::map(request);
  if (!mapping.status.ok()) throw ProbeError(exit_unsupported, "map_failed", mapping.status.message());
  auto* items = static_cast<WorkItem*>(mapping.address);
  if (populate_write) {
    const std::string failure = populate_on_every_thread(mapping.address, mapped, page, c.threads);
    // A zero-init row that populated nothing would read back zero and rank first: it failed.
    if (!failure.empty()) {
      (void)os::release(mapping.address, mapping.size_bytes);
      BuiltArray nothing;
      nothing.failure = failure;
      return nothing;
    }
  }
  // Fresh OS memory is zero already: a zero-init strategy that populated is done.
  if (!(c.zero && (populate || populate_write))) {
    if (parallel_fill) {
      parallel_for(c.threads, c.count, [&](std::size_t first, std::size_t last) { fill_items(items, first, last, c.zero); });
    } else {
      fill_items(items, 0, c.count, c.zero);
    }
  }
  return {items, [mapping] { (void)os::release(mapping.address, mapping.size_bytes); }, os::page_kind_name(kind)};
}

}  // namespace

std::string populate_on_every_thread(void* address, std::size_t bytes, std::size_t page, unsigned threads) {
  std::mutex lock;
  std::string failure;
  parallel_for(threads, bytes / page, [&](std::size_t first, std::size_t last) {
    os::Status status = populate_write_or_injected(static_cast<char*>(address) + first * page, (last - first) * page);
    std::lock_guard<std::mutex> hold(lock);
    if (!status.ok() && failure.empty()) failure = status.message();
  });
  return failure;
}

std::string malloc_implementation() {
  static const std::pair<const char*, const char*> signatures[] = {
      {"mallctl", "jemalloc"}, {"mi_version", "mimalloc"}, {"tc_version", "tcmalloc"}};
  for (const auto& [symbol, name] : signatures) {
    if (os::symbol_present(symbol)) return name;
  }
  return os::native_malloc_name();
}

std::vector<NamedStrategy> strategies(const std::vector<os::PageKind>& kinds) {
  std::vector<NamedStrategy> list = {
      {.name = "new[]", .family = "libc",
       .make = [](const StrategyInputs& c) {
         auto* items = new WorkItem[c.count];  // one constructor per element, on one thread
         if (!c.zero) std::fill(items, items + c.count, value_item);
         return BuiltArray{items, [items] { delete[] items; }, "libc"};
       }, .one_thread = true, .serial_writes = true},
      {.name = "std::vector", .family = "libc",
       .make = [](const StrategyInputs& c) {
         auto vector = std::make_shared<std::vector<WorkItem>>();
         if (c.zero) vector->resize(c.count);
         else vector->assign(c.count, value_item);
         return BuiltArray{vector->data(), [vector]() mutable { vector.reset(); }, "libc"};
       }, .one_thread = true, .serial_writes = true},
      {.name = "make_unique_for_overwrite + parallel fill", .family = "libc",
       .make = [](const StrategyInputs& c) {
         // Default-initialization still runs WorkItem's constructor (the atomic's initializer), serially.
         std::shared_ptr<WorkItem[]> items(std::make_unique_for_overwrite<WorkItem[]>(c.count).release(),
                                           std::default_delete<WorkItem[]>());
         parallel_for(c.threads, c.count, [&](std::size_t first, std::size_t last) { fill_items(items.get(), first, last, c.zero); });
         return BuiltArray{items.get(), [items]() mutable { items.reset(); }, "libc"};
       },
       .serial_writes = true},  // the constructors, on one thread, before the parallel fill
      {.name = "malloc + memset", .family = "libc",
       .make = [](const StrategyInputs& c) {
         auto* items = static_cast<WorkItem*>(std::malloc(c.count * sizeof(WorkItem)));
         if (!items) throw ProbeError(exit_not_enough_memory, "out_of_memory", "malloc failed");
         measure::keep_writes(items);  // else the compiler turns malloc + memset(0) into calloc, which writes nothing
         fill_items(items, 0, c.count, c.zero);
         return BuiltArray{items, [items] { std::free(items); }, "libc"};
       }, .one_thread = true, .serial_writes = true},
      {.name = "calloc + first touch", .family = "libc",
       .make = [](const StrategyInputs& c) {
         auto* items = static_cast<WorkItem*>(std::calloc(c.count, sizeof(WorkItem)));
         if (!items) throw ProbeError(exit_not_enough_memory, "out_of_memory", "calloc failed");
         if (c.zero) os::touch_pages(items, c.count * sizeof(WorkItem), os::base_page_size());
         else fill_items(items, 0, c.count, false);
         return BuiltArray{items, [items] { std::free(items); }, "libc"};
       }, .one_thread = true, .serial_writes = true},
  };
  for (os::PageKind kind : kinds) {
    std::string suffix = kind == os::PageKind::system ? "" : std::string(" [") + os::page_kind_name(kind) + "]";
    const bool huge = kind != os::PageKind::system;
    list.push_back({.name = "mmap + memset" + suffix, .family = "os",
                    .make = [kind](const StrategyInputs& c) { return from_os(c, kind, false, false, false); },
                    .huge_pages = huge, .one_thread = true, .serial_writes = true});
    list.push_back({"mmap + parallel memset" + suffix, "os", [kind](const StrategyInputs& c) { return from_os(c, kind, false, true, false); }, huge});
    // MAP_POPULATE faults the range in before the THP advice applies (os::MapRequest::populate):
    // a thp row would get base pages, so it is not offered.
    if (kind != os::PageKind::thp) {
      // The kernel populates on the calling thread; a value is then written on every thread.
      list.push_back({.name = os::populate_at_map_call() + suffix, .family = "os",
                      .make = [kind](const StrategyInputs& c) { return from_os(c, kind, true, true, false); },
                      .huge_pages = huge, .one_thread_when_zero = true, .serial_writes = true});
    }
    list.push_back({.name = std::string("parallel ") + os::populate_write_call() + suffix, .family = "os",
                    .make = [kind](const StrategyInputs& c) { return from_os(c, kind, false, true, true); },
                    .huge_pages = huge, .populate_write = true});
  }
  // The library's ladder takes huge pages wherever a kind of them is usable here.
  const bool ladder_has_huge_pages = kinds.size() > 1;
  list.push_back({"make_big_array auto", "memcost", [](const StrategyInputs& c) {
                    big_array_options options{.threads = c.threads};
                    auto array = std::make_shared<big_array<WorkItem>>(
                        c.zero ? make_big_array<WorkItem>(c.count, construct, options)
                               : make_big_array<WorkItem>(c.count, fill(value_item), options));
                    BuiltArray made{array->data(), [array]() mutable { array.reset(); }, array->report().page_kind};
                    made.auto_choice = array->report().page_kind;
                    made.fallbacks = array->report().fallbacks;
                    made.initialization = array->report().initialization;
                    made.initialization_reason = c.zero ? array->report().fault_method_reason : array->report().fill_method_reason;
                    return made;
                  }, ladder_has_huge_pages});
  list.push_back({"make_big_array auto async", "memcost", [](const StrategyInputs& c) {
                    big_array_options options{.prefault = prefault::async, .threads = c.threads};
                    auto start = measure::now_ns();
                    auto array = std::make_shared<big_array<WorkItem>>(
                        c.zero ? make_big_array<WorkItem>(c.count, construct, options)
                               : make_big_array<WorkItem>(c.count, fill(value_item), options));
                    // The first 1 % is usable once its last element is ready.
                    const std::size_t one_percent = std::max<std::size_t>(1, c.count / 100) - 1;
                    while (!array->ready(one_percent)) std::this_thread::yield();
                    double first = static_cast<double>(measure::now_ns() - start) / 1e9;
                    array->wait();
                    BuiltArray made{array->data(), [array]() mutable { array.reset(); }, array->report().page_kind};
                    made.first_percent_s = first;
                    return made;
                  }, ladder_has_huge_pages});
  return list;
}

std::vector<os::PageKind> usable_page_kinds(std::size_t bytes, Emitter& emitter) {
  std::vector<os::PageKind> kinds = {os::PageKind::system};
  const os::Capabilities offered = os::capabilities();
  os::Verdict thp = os::page_kind_verdict(offered, os::PageKind::thp, bytes);
  if (thp.usable) kinds.push_back(os::PageKind::thp);
  else emitter.warning("page_kind_unavailable", "no [thp] strategies: " + thp.why_not);
  for (os::PageKind kind : {os::PageKind::huge_2mb, os::PageKind::huge_1gb}) {
    os::Verdict verdict = os::page_kind_verdict(offered, kind, bytes);
    if (verdict.usable) {
      kinds.push_back(kind);
    } else {
      const std::size_t page = os::page_kind_bytes(kind);
      const std::string what = std::string("no [") + os::page_kind_name(kind) + "] strategies: " + verdict.why_not;
      if (!os::hugetlb_pool(offered, page)) {  // no pool to grow (Windows, or a kernel without one): the reason says all
        emitter.warning("page_kind_unavailable", what);
        continue;
      }
      emitter.warning("hugetlb_pool_too_small", what + "; `memcost hugepages reserve " +
                                                    flag_size((bytes + page - 1) / page * page) + " --size " +
                                                    (kind == os::PageKind::huge_2mb ? "2M" : "1G") + "` as root");
    }
  }
  return kinds;
}

std::shared_ptr<std::vector<NamedStrategy>> chosen_strategies(const Settings& s, const std::vector<os::PageKind>& kinds) {
  auto chosen = std::make_shared<std::vector<NamedStrategy>>();
  std::vector<std::string> filters;
  for (std::string filter : s.strategies_filter) {
    filter.erase(std::remove(filter.begin(), filter.end(), ' '), filter.end());
    if (!filter.empty()) filters.push_back(filter);
  }
  for (auto& strategy : strategies(kinds)) {
    if (s.libc_only && strategy.family != "libc") continue;
    // Names and filters are compared without spaces ("malloc+memset" matches "malloc + memset").
    std::string compact = strategy.name;
    compact.erase(std::remove(compact.begin(), compact.end(), ' '), compact.end());
    bool wanted = filters.empty() || std::any_of(filters.begin(), filters.end(), [&](const std::string& f) {
                    return compact.find(f) != std::string::npos;
                  });
    if (wanted) chosen->push_back(std::move(strategy));
  }
  if (chosen->empty()) throw ProbeError(exit_bad_arguments, "bad_arguments", "--strategies matches no strategy");

  return chosen;
}

}  // namespace memcost::probe::bigarray
