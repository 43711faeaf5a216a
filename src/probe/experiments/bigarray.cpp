// `memcost-probe bigarray`: allocate and initialize one big array of 16-byte
// work items by every common strategy, against the machine's limit (a
// parallel memset over memory that is already faulted in).
//
// Each strategy is timed from the allocation to the last element written,
// then checked (sampled elements), then freed (timed on its own).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "memcost/allocator.hpp"
#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/capabilities.hpp"
#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"
#include "probe/rounds.hpp"
#include "probe/run_estimate.hpp"

namespace memcost::probe {
namespace {

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

}  // namespace
}  // namespace memcost::probe

// All-zero bytes are a valid WorkItem equal to WorkItem{}, and a WorkItem's bytes
// copied make an equal WorkItem: big_array may skip constructors and copy bytes.
template <>
struct memcost::zero_is_valid<memcost::probe::WorkItem> : std::true_type {};
template <>
struct memcost::bytes_copyable<memcost::probe::WorkItem> : std::true_type {};

namespace memcost::probe {
namespace {

const WorkItem value_item(1, 0x0101010101010101ULL);

bool matches(const WorkItem& item, bool zero) {
  return zero ? item.state.load(std::memory_order_relaxed) == 0 && item.payload == 0
              : item.state.load(std::memory_order_relaxed) == 1 && item.payload == value_item.payload;
}

void parallel_for(unsigned threads, std::size_t count, const std::function<void(std::size_t, std::size_t)>& work) {
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    std::size_t first = count * t / threads, last = count * (t + 1) / threads;
    workers.emplace_back([&work, first, last] { work(first, last); });
  }
  for (auto& worker : workers) worker.join();
}

void fill_items(WorkItem* items, std::size_t first, std::size_t last, bool zero) {
  if (zero) {
    std::memset(static_cast<void*>(items + first), 0, (last - first) * sizeof(WorkItem));
  } else {
    for (std::size_t i = first; i < last; ++i) std::memcpy(static_cast<void*>(items + i), &value_item, sizeof(WorkItem));
  }
  measure::keep_writes(items);
}

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

// The malloc this process runs on, told by the entry points only it exports, so that a row
// measured under a preloaded allocator is known to have been.
std::string malloc_implementation() {
  static const std::pair<const char*, const char*> signatures[] = {
      {"mallctl", "jemalloc"}, {"mi_version", "mimalloc"}, {"tc_version", "tcmalloc"}};
  for (const auto& [symbol, name] : signatures) {
    if (os::symbol_present(symbol)) return name;
  }
  return os::native_malloc_name();
}

// os::populate_write, with the probe's test hook (tests/python/test_bigarray.py): with
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
    std::mutex lock;
    std::string failure;
    parallel_for(c.threads, mapped / page, [&](std::size_t first, std::size_t last) {
      os::Status status = populate_write_or_injected(static_cast<char*>(mapping.address) + first * page, (last - first) * page);
      std::lock_guard<std::mutex> hold(lock);
      if (!status.ok() && failure.empty()) failure = status.message();
    });
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

struct NamedStrategy {
  std::string name;
  std::string family;  // "libc" strategies also run under other allocators
  Strategy make;
  bool huge_pages = false;  // asks for huge pages (THP or hugetlb): it runs in the rounds' huge-page group
};

std::vector<NamedStrategy> strategies(const std::vector<os::PageKind>& kinds) {
  std::vector<NamedStrategy> list = {
      {"new[]", "libc",
       [](const StrategyInputs& c) {
         auto* items = new WorkItem[c.count];  // one constructor per element, on one thread
         if (!c.zero) std::fill(items, items + c.count, value_item);
         return BuiltArray{items, [items] { delete[] items; }, "libc"};
       }},
      {"std::vector", "libc",
       [](const StrategyInputs& c) {
         auto vector = std::make_shared<std::vector<WorkItem>>();
         if (c.zero) vector->resize(c.count);
         else vector->assign(c.count, value_item);
         return BuiltArray{vector->data(), [vector]() mutable { vector.reset(); }, "libc"};
       }},
      {"make_unique_for_overwrite + parallel fill", "libc",
       [](const StrategyInputs& c) {
         // Default-initialization still runs WorkItem's constructor (the atomic's initializer), serially.
         std::shared_ptr<WorkItem[]> items(std::make_unique_for_overwrite<WorkItem[]>(c.count).release(),
                                           std::default_delete<WorkItem[]>());
         parallel_for(c.threads, c.count, [&](std::size_t first, std::size_t last) { fill_items(items.get(), first, last, c.zero); });
         return BuiltArray{items.get(), [items]() mutable { items.reset(); }, "libc"};
       }},
      {"malloc + memset", "libc",
       [](const StrategyInputs& c) {
         auto* items = static_cast<WorkItem*>(std::malloc(c.count * sizeof(WorkItem)));
         if (!items) throw ProbeError(exit_not_enough_memory, "out_of_memory", "malloc failed");
         measure::keep_writes(items);  // else the compiler turns malloc + memset(0) into calloc, which writes nothing
         fill_items(items, 0, c.count, c.zero);
         return BuiltArray{items, [items] { std::free(items); }, "libc"};
       }},
      {"calloc + first touch", "libc",
       [](const StrategyInputs& c) {
         auto* items = static_cast<WorkItem*>(std::calloc(c.count, sizeof(WorkItem)));
         if (!items) throw ProbeError(exit_not_enough_memory, "out_of_memory", "calloc failed");
         if (c.zero) os::touch_pages(items, c.count * sizeof(WorkItem), os::base_page_size());
         else fill_items(items, 0, c.count, false);
         return BuiltArray{items, [items] { std::free(items); }, "libc"};
       }},
  };
  for (os::PageKind kind : kinds) {
    std::string suffix = kind == os::PageKind::system ? "" : std::string(" [") + os::page_kind_name(kind) + "]";
    const bool huge = kind != os::PageKind::system;
    list.push_back({"mmap + memset" + suffix, "os", [kind](const StrategyInputs& c) { return from_os(c, kind, false, false, false); }, huge});
    list.push_back({"mmap + parallel memset" + suffix, "os", [kind](const StrategyInputs& c) { return from_os(c, kind, false, true, false); }, huge});
    // MAP_POPULATE faults the range in before the THP advice applies (os::MapRequest::populate):
    // a thp row would get base pages, so it is not offered.
    if (kind != os::PageKind::thp) {
      list.push_back({os::populate_at_map_call() + suffix, "os", [kind](const StrategyInputs& c) { return from_os(c, kind, true, true, false); }, huge});
    }
    list.push_back({std::string("parallel ") + os::populate_write_call() + suffix, "os",
                    [kind](const StrategyInputs& c) { return from_os(c, kind, false, true, true); }, huge});
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

// Every variant leaves every element equal to this: a repeated byte, so memset can write it too.
constexpr std::uint32_t kRepeatValue = 0x01010101;

// Every element of [data, data + bytes) set to kRepeatValue by `method`, in the library's chunks
// taken by whichever thread is free (detail::fill_job), as make_big_array fills: the repeat
// scenario's floor. (With one contiguous part per thread, a thread the host slowed held the whole
// fill back, and a pooled make_big_array beat this "floor" by 1.10-1.15x in every run on a 2-vCPU
// AMD EPYC guest.)
void parallel_fill(void* data, std::size_t bytes, unsigned threads, fill_method method) {
  auto* bytes_at = static_cast<unsigned char*>(data);
  detail::fill_job job(bytes / sizeof(kRepeatValue), sizeof(kRepeatValue), os::base_page_size(), threads,
                       [bytes_at, method](std::size_t first, std::size_t last) {
                         detail::fill_pattern(bytes_at + first * sizeof(kRepeatValue), (last - first) * sizeof(kRepeatValue),
                                              &kRepeatValue, sizeof(kRepeatValue), method);
                         measure::keep_writes(bytes_at);
                       });
  job.wait();
}

// The machine's limit: a parallel memset, one part per thread.
void parallel_memset(void* data, std::size_t bytes, unsigned threads, int byte) {
  auto* bytes_at = static_cast<unsigned char*>(data);
  parallel_for(threads, bytes, [bytes_at, byte](std::size_t first, std::size_t last) {
    std::memset(bytes_at + first, byte, last - first);
    measure::keep_writes(bytes_at);
  });
}

// What the machine did while one repetition ran, for explaining one that took far longer than
// the others: compaction stalls, THP fallbacks, pages reclaimed (vmstat) and steal time.
struct MachineEvents {
  std::map<std::string, std::uint64_t> vmstat;
  std::optional<std::uint64_t> steal_ns;
  std::optional<std::uint64_t> host_reported_bytes;
};

MachineEvents machine_events() {
  auto times = os::machine_times();
  return {os::vmstat().value_or(std::map<std::string, std::uint64_t>{}),
          times && times->steal_available ? std::optional<std::uint64_t>(times->steal_ns) : std::nullopt,
          os::host_reported_bytes()};
}

json events_between(const MachineEvents& before, const MachineEvents& after) {
  auto grown = [&](std::initializer_list<const char*> names) -> json {
    std::uint64_t total = 0;
    bool any = false;
    for (const char* name : names) {
      auto a = before.vmstat.find(name), b = after.vmstat.find(name);
      if (a == before.vmstat.end() || b == after.vmstat.end()) continue;
      any = true;
      total += b->second >= a->second ? b->second - a->second : 0;
    }
    return any ? json(total) : json(nullptr);
  };
  // A counter of its own: null where either reading lacks it, 0 if it went backwards.
  auto grown_counter = [](const std::optional<std::uint64_t>& a, const std::optional<std::uint64_t>& b) -> json {
    return a && b ? json(*b - std::min(*a, *b)) : json(nullptr);
  };
  return {{"compaction_stalls", grown({"compact_stall"})},
          {"thp_fallbacks", grown({"thp_fault_fallback"})},
          {"reclaimed_pages", grown({"pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged"})},
          {"steal_ns", grown_counter(before.steal_ns, after.steal_ns)},
          {"host_reported_bytes", grown_counter(before.host_reported_bytes, after.host_reported_bytes)}};
}

// The machine's limit: GB/s of a parallel memset over memory already faulted in.
double limit_gb_per_s(std::size_t bytes, unsigned threads) {
  auto buffer = make_big_array<unsigned char>(bytes, zero, {.threads = threads});
  auto start = measure::now_ns();
  parallel_memset(buffer.data(), bytes, threads, 0x11);
  return static_cast<double>(bytes) / static_cast<double>(measure::now_ns() - start);
}

// One fill of memory already faulted in, by `method`, on `threads` threads: GB/s. The value is
// the work item's 16 bytes (memset: one byte), as value-initialization writes them, or zeros.
double fill_gb_per_s(unsigned char* data, std::size_t bytes, unsigned threads, fill_method method, bool zeros = false) {
  static const WorkItem zero_item{};
  const WorkItem* pattern = zeros ? &zero_item : &value_item;
  const std::size_t items = bytes / sizeof(WorkItem);
  auto start = measure::now_ns();
  parallel_for(threads, items, [data, method, pattern](std::size_t first, std::size_t last) {
    detail::fill_pattern(data + first * sizeof(WorkItem), (last - first) * sizeof(WorkItem), pattern, sizeof(WorkItem),
                         method);
    measure::keep_writes(data);
  });
  return static_cast<double>(items * sizeof(WorkItem)) / static_cast<double>(measure::now_ns() - start);
}

// The limit measured in a strategy round: the faster of a parallel memset and parallel streaming
// stores (the two that lead on this machine) over memory faulted in once, writing what the round's
// rows write: zeros for zero-initialization (this machine writes zeros 2-2.5x as fast as any other
// byte, docs/bigarray.md), the work item's value otherwise. 1 GiB at most: far past any cache, and
// a round should not pay for a second copy of a big array.
constexpr std::size_t kRoundLimitBytes = std::size_t{1} << 30;
json round_limit(std::size_t bytes, unsigned threads, bool zeros) {
  auto buffer = make_big_array<unsigned char>(bytes, zero, {.threads = threads});
  // (What the memory held before does not change the speed: measured, zeros over zeros or not.)
  auto start = measure::now_ns();
  parallel_memset(buffer.data(), bytes, threads, zeros ? 0 : 0x11);
  const double memset_gb_per_s = static_cast<double>(bytes) / static_cast<double>(measure::now_ns() - start);
  const double streaming_gb_per_s = fill_gb_per_s(buffer.data(), bytes, threads, fill_method::nontemporal, zeros);
  return {{"size_bytes", bytes}, {"memset_gb_per_s", memset_gb_per_s}, {"nontemporal_gb_per_s", streaming_gb_per_s},
          {"gb_per_s", std::max(memset_gb_per_s, streaming_gb_per_s)}};
}

// fill_method::automatic as make_big_array runs it: measured on slices of this memory (first use
// in the process: `forget` makes every call a first use), the rest filled by the winner; GB/s
// over the whole, measuring included.
struct AutomaticFill {
  double gb_per_s;
  detail::fill_choice choice;
};
AutomaticFill automatic_fill(unsigned char* data, std::size_t bytes, std::size_t page_bytes, unsigned threads, bool fresh) {
  detail::forget_fill_measurements();
  const std::size_t items = bytes / sizeof(WorkItem);
  auto start = measure::now_ns();
  detail::fill_choice choice = detail::choose_fill_method(fill_method::automatic, data, items * sizeof(WorkItem),
                                                          &value_item, sizeof(WorkItem), fresh, page_bytes, threads);
  const std::size_t done = choice.filled_bytes / sizeof(WorkItem);
  parallel_for(threads, items - done, [data, done, method = choice.method](std::size_t first, std::size_t last) {
    detail::fill_pattern(data + (done + first) * sizeof(WorkItem), (last - first) * sizeof(WorkItem), &value_item,
                         sizeof(WorkItem), method);
    measure::keep_writes(data);
  });
  return {static_cast<double>(items * sizeof(WorkItem)) / static_cast<double>(measure::now_ns() - start), std::move(choice)};
}

// Memory handed to the host during a fill beyond which the fill is taken again: a few MiB go now
// and then with no visible effect; a burst of hundreds of MiB cut a fresh fill from 10 to 3.9 GB/s.
constexpr std::uint64_t host_reporting_race_bytes = std::uint64_t{64} << 20;

// One fill for the fill-methods table: fresh (mapped as make_big_array maps it, not touched: the
// fill takes the faults) or into `buffer` faulted in once. Its metrics, with what the machine did.
json fill_once(big_array<unsigned char>& buffer, std::size_t bytes, unsigned threads, fill_method method, bool fresh) {
  const MachineEvents events_before = machine_events();
  if (fresh) buffer = make_big_array<unsigned char>(bytes, uninitialized, {.prefault = prefault::none});
  else if (buffer.size() == 0) buffer = make_big_array<unsigned char>(bytes, zero, {.threads = threads});
  auto before = measure::take_snapshot({.machine = false});
  json metrics;
  if (method == fill_method::automatic) {
    AutomaticFill automatic = automatic_fill(buffer.data(), bytes, buffer.page_bytes(), threads, fresh);
    metrics = {{"gb_per_s", automatic.gb_per_s}, {"automatic_picks", detail::fill_method_name(automatic.choice.method)},
               {"automatic_reason", automatic.choice.reason}, {"calibration_ns", automatic.choice.calibration_ns},
               {"calibration_bytes", automatic.choice.filled_bytes}};
  } else {
    metrics = {{"gb_per_s", fill_gb_per_s(buffer.data(), bytes, threads, method)}};
  }
  auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
  metrics["minor_faults"] = fault_count(interval.faults_counted, interval.minor_faults);
  metrics["events"] = events_between(events_before, machine_events());
  return metrics;
}

// Every flag, typed: CLI11 parses, checks and converts; the runner handles no strings.
struct Settings {
  std::size_t size = std::size_t{1} << 30;
  std::vector<std::string> strategies_filter;
  std::vector<std::string> inits = {"zero", "value"};
  std::string label = "glibc";
  std::string budget;
  int reps = 0;  // 0: adaptive (probe/rounds.hpp StoppingRule), else this many rounds for every row
  double fastest_s = 0;  // the fastest row's median from the main run, for an allocator's run
  int limit_reps = 3;
  unsigned threads = 0;
  bool libc_only = false;
  int repeat = 10;  // iterations of the repeat scenario (0: leave it out)
  int allocator_runs = 0;  // runs under other allocators the front end will add: for the estimate
  std::uint64_t order_seed = probe::fresh_seed();  // the ranked rows' order, round by round
};

bool verified(const WorkItem* items, std::size_t count, bool zero) {
  std::mt19937_64 random(1);
  for (int k = 0; k < 4096; ++k) {
    if (!matches(items[random() % count], zero)) return false;
  }
  return matches(items[0], zero) && matches(items[count - 1], zero);
}

// ---- the repeat scenario: the same array made, initialized and freed again and again ----

struct RepeatVariant {
  std::string name;
  // One iteration: allocate, initialize to kRepeatValue, free. `kept` is the floor's one array.
  std::function<void(std::size_t count)> iterate;
};

std::vector<RepeatVariant> repeat_variants(std::shared_ptr<array_pool> pool, std::shared_ptr<big_memory_resource> resource,
                                           std::shared_ptr<big_array<std::uint32_t>> kept,
                                           std::shared_ptr<const fill_method> floor_method, unsigned threads) {
  return {
      {"make_big_array (fresh each time)",
       [](std::size_t count) {
         auto a = make_big_array<std::uint32_t>(count, fill(kRepeatValue));
         measure::keep_writes(a.data());
       }},
      {"make_big_array + array_pool",
       [pool](std::size_t count) {
         auto a = make_big_array<std::uint32_t>(count, fill(kRepeatValue), {.pool = pool.get()});
         measure::keep_writes(a.data());
       }},
      {"std::vector + memcost::allocator + pool",
       [resource](std::size_t count) {
         std::vector<std::uint32_t, allocator<std::uint32_t>> v(count, kRepeatValue, allocator<std::uint32_t>(resource.get()));
         measure::keep_writes(v.data());
       }},
      {"std::vector",
       [](std::size_t count) {
         std::vector<std::uint32_t> v(count, kRepeatValue);
         measure::keep_writes(v.data());
       }},
      {"malloc + memset",
       [](std::size_t count) {
         auto* p = static_cast<std::uint32_t*>(std::malloc(count * sizeof(std::uint32_t)));
         if (!p) throw std::bad_alloc();
         std::memset(p, 0x01, count * sizeof(std::uint32_t));
         measure::keep_writes(p);
         std::free(p);
       }},
      {"one array kept, filled again (the floor)",
       [kept, floor_method, threads](std::size_t count) {
         if (kept->size() != count) *kept = make_big_array<std::uint32_t>(count, zero);
         // The fastest fill method on this array: what re-initializing costs at best.
         parallel_fill(kept->data(), count * sizeof(std::uint32_t), threads, *floor_method);
       }},
  };
}

// 1. Parse: every flag typed and checked by CLI11.
void declare(CLI::App& command, Settings& s) {
  add_size_option(command, "--size", s.size, "1G", "array size (capped by the budget unless given)");
  command.add_option("--strategies", s.strategies_filter, "only the strategies whose names contain one of these")
      ->delimiter(',');
  add_names_option(command, "--inits", s.inits, {"zero", "value"}, "zero, value");
  command.add_option("--reps", s.reps, "repetitions per strategy (0, the default: adaptive, at most 5 rounds, a row stopping "
                     "once its time is known within ±10 % (3 rounds at least) or its fastest round is 3x the fastest "
                     "row's median (5x after 2 rounds, 15x after 1); N: N rounds for every row)")
      ->check(CLI::Range(0, 100));
  command.add_option("--fastest-s", s.fastest_s, "the fastest row's median seconds in the main run, against which an "
                     "allocator's run judges a row far behind (adaptive repetitions)")->check(CLI::NonNegativeNumber);
  command.add_option("--limit-reps", s.limit_reps, "repetitions of the limit measurement")->check(CLI::Range(1, 100));
  command.add_option("--threads", s.threads, "threads for parallel strategies (default 0: all CPUs)");
  command.add_option("--label", s.label, "the allocator the libc strategies run on (for the rows)");
  command.add_flag("--libc-only", s.libc_only, "only the strategies that go through malloc/new (for other allocators)");
  command.add_option("--allocator-runs", s.allocator_runs, "runs under other allocators that will follow this one "
                     "(for the run's estimate, printed at the start)")->check(CLI::Range(0, 100));
  command.add_option("--repeat", s.repeat, "iterations of the repeat scenario: allocate, initialize, free (0: none)")
      ->check(CLI::Range(0, 1000));
  command.add_option("--budget", s.budget, "memory budget (default 80% of available memory)");
  command.add_option("--order-seed", s.order_seed, "seed of the order the strategies and the fill methods run in, shuffled each round "
                     "(default: a new one, recorded in the settings line)")->capture_default_str();
}

// One strategy's repetition, measured once: allocate and initialize, check, free. Null when the
// strategy failed (said once in a warning).
json measure_strategy_once(Emitter& emitter, const NamedStrategy& strategy, std::size_t count, unsigned threads,
                           bool zero_init, std::set<std::string>& failed) {
  StrategyInputs inputs{count, threads, zero_init};
  const MachineEvents events_before = machine_events();
  auto before = measure::take_snapshot({.machine = false});
  BuiltArray made = strategy.make(inputs);
  auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
  const json events = events_between(events_before, machine_events());
  if (!made.failure.empty()) {
    if (failed.insert(strategy.name).second) {
      emitter.warning("strategy_failed", strategy.name + " failed and is left out of the ranking: " + made.failure);
    }
    return nullptr;
  }
  bool ok = verified(made.items, count, zero_init);
  auto backing = measure::backing_of(made.items, count * sizeof(WorkItem));
  auto free_start = measure::now_ns();
  made.release();
  double free_s = static_cast<double>(measure::now_ns() - free_start) / 1e9;
  json metrics = {{"elapsed_s", static_cast<double>(interval.wall_ns) / 1e9},
                  {"free_s", free_s},
                  {"minor_faults", fault_count(interval.faults_counted, interval.minor_faults)},
                  {"system_s", static_cast<double>(interval.process_system_ns) / 1e9},
                  {"user_s", static_cast<double>(interval.process_user_ns) / 1e9},
                  {"huge_fraction", backing ? json(backing->huge_fraction()) : json(nullptr)},
                  {"verified", ok},
                  {"page_kind", made.page_kind},
                  {"malloc", malloc_implementation()},
                  {"events", events}};
  if (made.first_percent_s >= 0) metrics["first_percent_s"] = made.first_percent_s;
  if (!made.auto_choice.empty()) {
    metrics["auto_choice"] = made.auto_choice;
    metrics["auto_fallbacks"] = made.fallbacks;
    metrics["auto_initialization"] = made.initialization;
    metrics["auto_initialization_reason"] = made.initialization_reason;
  }
  return metrics;
}

// One strategy's repetition, reported; its seconds (none when the strategy failed). Taken again
// (twice at most) when the VM handed 64 MiB or more to its host while it ran, as the fill table's
// fills are: the host's work lands on whichever rows run then, and the ranks would follow the host.
// What was thrown away is kept in the sample. Only a repetition shorter than half the reporting
// period is taken again: the kernel reports freed memory in bursts every 2 s
// (PAGE_REPORTING_DELAY) while any waits, so a longer one overlaps a burst whenever memory was
// freed before it, and so would each retake (at 4 GiB, 43 of 240 repetitions raced three times
// running and the retakes took half the run); it is kept, marked, and counted in the notes.
constexpr double kRetakeBelowS = 1.0;
std::optional<double> measure_strategy(Emitter& emitter, const Settings& s, const NamedStrategy& strategy, std::size_t count,
                                       unsigned threads, bool zero_init, int rep, std::set<std::string>& failed) {
  json metrics, raced = json::array();
  bool overlap_kept = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    metrics = measure_strategy_once(emitter, strategy, count, threads, zero_init, failed);
    if (metrics.is_null()) return std::nullopt;
    const json& reported = metrics["events"]["host_reported_bytes"];
    if (!reported.is_number() || reported.get<std::uint64_t>() < host_reporting_race_bytes) break;
    if (metrics["elapsed_s"].get<double>() >= kRetakeBelowS) {
      overlap_kept = true;
      break;
    }
    raced.push_back({{"elapsed_s", metrics["elapsed_s"]}, {"host_reported_bytes", reported}});
  }
  metrics["raced_with_host_reporting"] = std::move(raced);
  metrics["host_reporting_overlap_kept"] = overlap_kept;
  const double seconds = metrics["elapsed_s"].get<double>();
  emitter.sample({{"part", "strategy"}, {"strategy", strategy.name}, {"family", strategy.family},
                  {"allocator", strategy.family == "libc" ? s.label : ""}, {"init", zero_init ? "zero" : "value"},
                  {"size_bytes", count * sizeof(WorkItem)}, {"rep", rep}, {"threads", threads}},
                 metrics);
  return seconds;
}

// 2. Plan: the size the budget allows, the page kinds the machine offers, the strategies chosen; one step each.
// The page kinds this machine can back `bytes` with; each one it cannot says why, and how to
// get it where a pool could be grown.
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

// The strategies --strategies and --libc-only leave, of those the page kinds allow.
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

// The machine's limit, and the fill methods side by side on fresh and faulted-in memory.
void add_limit_and_fill_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter, std::size_t bytes,
                              unsigned threads) {
  if (s.libc_only) return;
  for (int rep = 0; rep < s.limit_reps; ++rep) {
    steps.push_back({"limit", [&emitter, bytes, rep, threads] {
      emitter.sample({{"part", "limit"}, {"size_bytes", bytes}, {"rep", rep}, {"threads", threads}},
                     {{"gb_per_s", limit_gb_per_s(bytes, threads)}});
    }});
  }
  // The fill methods side by side, on fresh memory (the fill faults it in) and on memory faulted
  // in once and filled again: the evidence for fill_method::automatic's rule.
  auto buffer = std::make_shared<big_array<unsigned char>>();
  // fill_method::automatic is measured beside them, as make_big_array runs it (it measures too).
  const std::vector<fill_method> methods = {fill_method::memset, fill_method::stores, fill_method::nontemporal,
                                            fill_method::automatic};
  // Round by round, each round's methods in an order shuffled from --order-seed, so that the
  // host's slow moments fall on every method alike (fresh memory first, then faulted-in memory).
  const auto order = probe::interleaved_order(methods.size(), s.limit_reps, s.order_seed);
  for (int rep = 0; rep < s.limit_reps; ++rep) {
    for (bool fresh : {true, false}) {
      for (std::size_t position = 0; position < methods.size(); ++position) {
        const fill_method method = methods[order[rep][position]];
        const bool last = rep + 1 == s.limit_reps && !fresh && position + 1 == methods.size();
        steps.push_back({"fill methods", [&emitter, buffer, bytes, threads, method, rep, fresh, last] {
          // A fill during which the VM handed memory to its host is taken again (twice at most):
          // the host's work slows every method alike, by whatever share of the fill it overlaps.
          json metrics, raced = json::array();
          for (int attempt = 0; attempt < 3; ++attempt) {
            metrics = fill_once(*buffer, bytes, threads, method, fresh);
            if (fresh) *buffer = big_array<unsigned char>();
            const json& reported = metrics["events"]["host_reported_bytes"];
            if (!reported.is_number() || reported.get<std::uint64_t>() < host_reporting_race_bytes) break;
            raced.push_back({{"gb_per_s", metrics["gb_per_s"]}, {"host_reported_bytes", reported}});
          }
          metrics["raced_with_host_reporting"] = std::move(raced);
          emitter.sample({{"part", "fill"}, {"method", detail::fill_method_name(method)}, {"memory", fresh ? "fresh" : "faulted"},
                          {"size_bytes", bytes}, {"rep", rep}, {"threads", threads}},
                         std::move(metrics));
          if (last) *buffer = big_array<unsigned char>();
        }});
      }
    }
  }
}

// The repeat scenario: each iteration of a variant paired with a floor taken beside it.
constexpr int kRepeatMinIterations = 3;
// Fills by each fill method before the floor takes the fastest (by median).
constexpr int kFloorChoiceTurns = 5;

// The size the repeat scenario uses: it keeps four arrays at once (the floor's, the pool's two
// pieces and the array being made), so a quarter of the budget when that would not fit (0: left out).
std::size_t repeat_bytes_within(const BudgetChoice& budget, std::size_t bytes, Emitter& emitter) {
  if (4 * bytes <= budget.budget_bytes) return bytes;
  const std::size_t repeat_bytes = budget.budget_bytes / 4 / (16 << 20) * (16 << 20);
  emitter.warning("repeat_size_reduced", "the repeat scenario keeps four arrays at once; " +
                                             (repeat_bytes ? "it uses " + human_size(repeat_bytes) : std::string("it is left out")) +
                                             " (a quarter of the memory budget) instead of " + human_size(bytes));
  return repeat_bytes;
}

// The floor's fill: the fastest of the fill methods (memset, plain stores, streaming stores) on the
// kept array, by the median of a few fills by each, taking turns. (One fill each once chose memset at
// 64 MiB on a 260 MiB last-level cache, where its fills took 1.5-3.7 ms against the streaming
// stores' steady 1.6; one quick memset won, and a pooled array then beat its "floor" by 1.27x.)
fill_method fastest_floor_method(void* kept, std::size_t bytes, unsigned threads) {
  constexpr fill_method methods[] = {fill_method::memset, fill_method::stores, fill_method::nontemporal};
  std::map<fill_method, std::vector<double>> ns;
  for (int turn = 0; turn < kFloorChoiceTurns; ++turn) {
    for (fill_method method : methods) {
      const std::uint64_t start = measure::now_ns();
      parallel_fill(kept, bytes, threads, method);
      ns[method].push_back(static_cast<double>(measure::now_ns() - start));
    }
  }
  return *std::ranges::min_element(methods, {}, [&ns](fill_method method) { return median_of(ns[method]); });
}

// One variant's iterations, each paired with the floor, and what each iteration faulted and
// cost the machine.
struct RepeatTimes {
  json iteration_ns = json::array(), floor_ns = json::array(), iteration_faults = json::array(),
       iteration_events = json::array();
  int done = 0;
};

// The pair's order alternates (variant then floor, floor then variant, ...): whatever the second
// of two fills pays or saves falls on both alike. Adaptive (no --reps): a variant stops once the
// pairs after its first iteration (the one that pays the first faults) settle as a ranked row does
// (probe/rounds.hpp), the floor being the fastest (a ratio of 1): known within ±10 %, or at least
// 3 times the floor in every pair, 5 times with two pairs (the variants that fault their memory in
// afresh each time: at 4 GiB, 3.4 s an iteration against 0.16); at least kRepeatMinIterations
// iterations, --repeat at most.
RepeatTimes time_repeat(const RepeatVariant& variant, const RepeatVariant& floor, std::size_t elements, int repeat,
                        bool adaptive) {
  RepeatTimes times;
  auto timed = [&](const RepeatVariant& run, json& ns, bool counted) {
    const MachineEvents events_before = machine_events();
    auto before = measure::take_snapshot({.machine = false});
    run.iterate(elements);
    auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
    ns.push_back(interval.wall_ns);
    if (counted) {
      times.iteration_faults.push_back(fault_count(interval.faults_counted, interval.minor_faults));
      times.iteration_events.push_back(events_between(events_before, machine_events()));
    }
  };
  for (int i = 0; i < repeat; ++i) {
    if (i % 2 == 0) {
      timed(variant, times.iteration_ns, true);
      timed(floor, times.floor_ns, false);
    } else {
      timed(floor, times.floor_ns, false);
      timed(variant, times.iteration_ns, true);
    }
    times.done = i + 1;
    if (adaptive && times.done >= kRepeatMinIterations) {
      std::vector<double> ratios;
      for (int k = 1; k < times.done; ++k) {
        ratios.push_back(times.iteration_ns[k].get<double>() / std::max(1.0, times.floor_ns[k].get<double>()));
      }
      const Settled now = settled(ratios, 1.0, StoppingRule{.max_rounds = repeat});
      if (now == Settled::tight || now == Settled::far_behind) break;
    }
  }
  return times;
}

// Each variant runs its iterations as a program would, and beside each one the floor (one kept
// array filled again) is taken: on a virtual machine the bandwidth the host gives moves within
// seconds, so each iteration is set against a floor measured beside it, and a row's ratio is the
// median of those pairs. (Taking turns between variants iteration by iteration was tried: a fresh
// array then always follows another variant's free of a whole array, and on this VM paid up to
// 12x for it. The floor frees nothing.) The floor writes by the fastest fill method, chosen once on
// the kept array.
void add_repeat_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter, std::size_t bytes,
                      const BudgetChoice& budget, unsigned threads) {
  if (s.libc_only || s.repeat <= 0) return;
  const std::size_t repeat_bytes = repeat_bytes_within(budget, bytes, emitter);
  if (repeat_bytes == 0) return;
  auto pool = std::make_shared<array_pool>(2 * repeat_bytes + (std::size_t{4} << 20));
  auto resource = std::make_shared<big_memory_resource>(big_memory_options{.pool = pool.get()});
  auto kept = std::make_shared<big_array<std::uint32_t>>();
  auto floor_method = std::make_shared<fill_method>(fill_method::memset);
  const std::vector<RepeatVariant> variants = repeat_variants(pool, resource, kept, floor_method, threads);
  const RepeatVariant& floor = variants.back();
  const std::size_t elements = repeat_bytes / sizeof(std::uint32_t);
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const bool first = v == 0, last = v + 1 == variants.size();
    steps.push_back({"repeat " + variants[v].name, [&emitter, variant = variants[v], floor, elements, repeat_bytes, pool,
                                                    kept, floor_method, first, last, repeat = s.repeat, threads,
                                                    adaptive = s.reps == 0] {
      if (first) {
        *kept = make_big_array<std::uint32_t>(elements, zero, {.threads = threads});
        *floor_method = fastest_floor_method(kept->data(), repeat_bytes, threads);
      }
      RepeatTimes times = time_repeat(variant, floor, elements, repeat, adaptive);
      pool->release();
      if (last) *kept = big_array<std::uint32_t>();
      emitter.sample({{"part", "repeat"}, {"variant", variant.name}, {"size_bytes", repeat_bytes}, {"iterations", times.done},
                      {"floor_method", detail::fill_method_name(*floor_method)}, {"is_floor", last}},
                     {{"iteration_ns", std::move(times.iteration_ns)}, {"iteration_faults", std::move(times.iteration_faults)},
                      {"floor_ns", std::move(times.floor_ns)}, {"iteration_events", std::move(times.iteration_events)}});
    }});
  }
}

// The rows of one initialization as their rounds go: each row's seconds so far, and whether it has
// settled (probe/rounds.hpp: adaptive repetitions; with --reps N every row runs N rounds).
struct RowsInRounds {
  std::vector<std::vector<double>> seconds;  // by strategy index
  std::vector<Settled> settled;
  std::vector<bool> failed;
};

// The fastest row's median so far: --fastest-s when given (an allocator's run is set against the
// main run's fastest), else the lowest median of this run's rows.
double fastest_median_s(const RowsInRounds& rows, double given) {
  if (given > 0) return given;
  double fastest = 0;
  for (const auto& seconds : rows.seconds) {
    if (seconds.empty()) continue;
    const double median = median_of(seconds);
    if (fastest == 0 || median < fastest) fastest = median;
  }
  return fastest;
}

// Settles the rows whose rounds so far say enough, each said in a sample of its own once; true while
// any row still goes on.
bool settle_rows(Emitter& emitter, RowsInRounds& rows, const std::vector<NamedStrategy>& chosen, const std::string& init,
                 const std::string& label, const StoppingRule& rule, double given_fastest_s) {
  const double fastest = fastest_median_s(rows, given_fastest_s);
  bool going = false;
  for (std::size_t index = 0; index < chosen.size(); ++index) {
    if (rows.failed[index] || rows.settled[index] != Settled::no) continue;
    const Settled now = settled(rows.seconds[index], fastest, rule);
    if (now == Settled::no) {
      going = true;
      continue;
    }
    rows.settled[index] = now;
    emitter.sample({{"part", "settled"}, {"strategy", chosen[index].name},
                    {"allocator", chosen[index].family == "libc" ? label : ""}, {"init", init},
                    {"rounds", rows.seconds[index].size()}},
                   {{"reason", settled_name(now)}, {"fastest_median_s", fastest}});
  }
  return going;
}

// A round's order with the rows that ask for huge pages together, after the base-page rows in even
// rounds and before them in odd ones, each group in the round's shuffled order. Here a huge-page
// allocation right after a base-page row freed its array gets memory the host must fault in again:
// 4 GiB on THP took 0.42-0.80 s after 4 GiB of base pages were freed, 0.19-0.20 s after another THP
// allocation (one process, alternating, nothing between). Mixed at random, a THP row followed a
// base-page row in about two rounds of three, and adaptive repetitions stopped `make_big_array auto`
// as far behind after three such rounds. Grouped, the group is preceded by an unmeasured huge-page
// allocation of the array's size (warm_up_huge_pages) in every round, so every huge-page row follows
// one: with it only at the crossing of even rounds, the group's first row still read 0.26-0.30 s
// against 0.20-0.21 for the rest (4 GiB), and a row first in four rounds of five ranked behind.
std::vector<std::size_t> grouped_by_page_size(const std::vector<NamedStrategy>& chosen, const std::vector<std::size_t>& order,
                                              bool base_first) {
  std::vector<std::size_t> grouped;
  for (bool huge : {!base_first, base_first}) {
    for (std::size_t index : order) {
      if (chosen[index].huge_pages == huge) grouped.push_back(index);
    }
  }
  return grouped;
}

// The first huge-page row of a round (chosen.size() when there is none).
std::size_t first_huge_row(const std::vector<NamedStrategy>& chosen, const std::vector<std::size_t>& order) {
  for (std::size_t index : order) {
    if (chosen[index].huge_pages) return index;
  }
  return chosen.size();
}

bool any_going(const RowsInRounds& rows, const std::vector<NamedStrategy>& chosen, bool huge) {
  for (std::size_t index = 0; index < chosen.size(); ++index) {
    if (chosen[index].huge_pages == huge && !rows.failed[index] && rows.settled[index] == Settled::no) return true;
  }
  return false;
}

// An array of `bytes` on huge pages (the library's ladder), faulted in on every thread and freed,
// unmeasured: what a huge-page row right after another finds.
void warm_up_huge_pages(std::size_t bytes, unsigned threads) {
  auto warm = make_big_array<unsigned char>(bytes, zero, {.threads = threads});
  measure::keep_writes(warm.data());
}

// Every chosen strategy, for each initialization asked for, round by round, each round's order
// shuffled from --order-seed (probe/rounds.hpp), so that the host's slow minutes fall on every
// strategy alike. Rounds go on while any row has not settled (adaptive), or --reps times.
void add_strategy_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter,
                        const std::shared_ptr<std::vector<NamedStrategy>>& chosen, std::size_t count, unsigned threads) {
  auto failed = std::make_shared<std::set<std::string>>();  // strategies already reported as failed
  const StoppingRule rule = s.reps > 0 ? StoppingRule::fixed(s.reps) : StoppingRule{};
  const auto order = probe::interleaved_order(chosen->size(), rule.max_rounds, s.order_seed);
  for (const std::string& init : s.inits) {
    const bool zero_init = init == "zero";
    auto rows = std::make_shared<RowsInRounds>(RowsInRounds{std::vector<std::vector<double>>(chosen->size()),
                                                            std::vector<Settled>(chosen->size(), Settled::no),
                                                            std::vector<bool>(chosen->size(), false)});
    for (int rep = 0; rep < rule.max_rounds; ++rep) {
      // The limit again, in every round beside its rows (an allocator's run too): a row's share
      // of the limit is taken against the bandwidth the host gave in the same minute. First, what
      // the rounds before settled: a round only runs the rows still going.
      steps.push_back({"limit (round " + std::to_string(rep + 1) + ")",
                       [&emitter, &s, &init, rep, threads, count, rows, chosen, rule] {
        if (!settle_rows(emitter, *rows, *chosen, init, s.label, rule, s.fastest_s)) return;
        emitter.sample({{"part", "round_limit"}, {"label", s.label}, {"init", init}, {"rep", rep}, {"threads", threads}},
                       round_limit(std::min(count * sizeof(WorkItem), kRoundLimitBytes), threads, init == "zero"));
      }});
      for (std::size_t index : grouped_by_page_size(*chosen, order[static_cast<std::size_t>(rep)], rep % 2 == 0)) {
        if ((*chosen)[index].huge_pages && index == first_huge_row(*chosen, order[static_cast<std::size_t>(rep)])) {
          steps.push_back({"huge-page warm-up (round " + std::to_string(rep + 1) + ")", [rows, chosen, count, threads] {
            if (!any_going(*rows, *chosen, true) || !any_going(*rows, *chosen, false)) return;
            warm_up_huge_pages(count * sizeof(WorkItem), threads);
          }});
        }
        steps.push_back({(*chosen)[index].name + (zero_init ? " (zero)" : " (value)"),
                         [&emitter, &s, chosen, failed, index, count, threads, zero_init, rep, rows] {
                           if (rows->failed[index] || rows->settled[index] != Settled::no) return;
                           auto seconds = measure_strategy(emitter, s, (*chosen)[index], count, threads, zero_init, rep, *failed);
                           if (seconds) rows->seconds[index].push_back(*seconds);
                           else rows->failed[index] = true;
                         }});
      }
    }
    steps.push_back({"settled (" + init + ")", [&emitter, &s, &init, rows, chosen, rule] {
      (void)settle_rows(emitter, *rows, *chosen, init, s.label, rule, s.fastest_s);
    }});
  }
}

// The rates the run's estimate is made from (probe/run_estimate.hpp), measured in a fraction of a
// second: one thread writing fresh base pages and fresh THP (128 MiB each), every thread faulting
// 512 MiB in as make_big_array does, then writing it again.
MeasuredRates calibrate_once(unsigned threads) {
  constexpr std::size_t serial_bytes = std::size_t{128} << 20, parallel_bytes = std::size_t{512} << 20;
  MeasuredRates rates;
  for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp}) {
    os::MapRequest request{serial_bytes, kind};
    request.alignment_bytes = std::size_t{2} << 20;
    os::Mapping mapping = os::map(request);
    if (!mapping.status.ok()) return {};
    const std::uint64_t start = measure::now_ns();
    std::memset(mapping.address, 0x11, serial_bytes);
    measure::keep_writes(mapping.address);
    const double gb_per_s = static_cast<double>(serial_bytes) / static_cast<double>(measure::now_ns() - start);
    (kind == os::PageKind::base ? rates.serial_gb_per_s : rates.serial_huge_gb_per_s) = gb_per_s;
    const std::uint64_t freeing = measure::now_ns();
    (void)os::release(mapping.address, mapping.size_bytes);
    (kind == os::PageKind::base ? rates.free_gb_per_s : rates.free_huge_gb_per_s) =
        static_cast<double>(serial_bytes) / static_cast<double>(measure::now_ns() - freeing);
  }
  std::uint64_t start = measure::now_ns();
  auto array = make_big_array<unsigned char>(parallel_bytes, zero, {.threads = threads});
  rates.parallel_gb_per_s = static_cast<double>(parallel_bytes) / static_cast<double>(measure::now_ns() - start);
  start = measure::now_ns();
  parallel_memset(array.data(), parallel_bytes, threads, 0x11);
  rates.faulted_gb_per_s = static_cast<double>(parallel_bytes) / static_cast<double>(measure::now_ns() - start);
  return rates;
}

// Twice, each rate the faster: at a probe's start the guest's memory may not be backed by the host
// yet (its first touch here ran 18x slower than the run's own rows, and the estimate was 2.8x the
// run); the second time takes memory the first just freed.
MeasuredRates calibrate(unsigned threads) {
  const MeasuredRates first = calibrate_once(threads), second = calibrate_once(threads);
  return {std::max(first.serial_gb_per_s, second.serial_gb_per_s), std::max(first.serial_huge_gb_per_s, second.serial_huge_gb_per_s),
          std::max(first.parallel_gb_per_s, second.parallel_gb_per_s), std::max(first.faulted_gb_per_s, second.faulted_gb_per_s),
          std::max(first.free_gb_per_s, second.free_gb_per_s), std::max(first.free_huge_gb_per_s, second.free_huge_gb_per_s)};
}

// The run's estimate, said before it starts (a warning, printed at once) and kept (a sample).
void say_estimate(const Settings& s, Emitter& emitter, const std::vector<NamedStrategy>& chosen, std::size_t bytes,
                  unsigned threads) {
  if (s.libc_only) return;  // an allocator's run: the main run's estimate counted it
  RunShape shape{.bytes = bytes, .rows = {}, .inits = static_cast<int>(s.inits.size()), .limit_reps = s.limit_reps,
                 .repeat = s.repeat, .allocator_runs = s.allocator_runs, .fixed_reps = s.reps > 0, .reps = s.reps};
  for (const NamedStrategy& strategy : chosen) {
    const bool parallel = strategy.name.find("parallel") != std::string::npos || strategy.name.starts_with("make_big_array");
    shape.rows.push_back({.serial = !parallel, .huge_pages = strategy.huge_pages});
  }
  const MeasuredRates rates = calibrate(threads);
  const RunEstimate estimate = estimate_run(shape, rates);
  if (estimate.seconds <= 0) return;
  emitter.warning("estimate", describe(estimate, rates));
  emitter.sample({{"part", "estimate"}, {"size_bytes", bytes}, {"threads", threads}},
                 {{"seconds", estimate.seconds}, {"rows_seconds", estimate.rows_seconds},
                  {"fixed_seconds", estimate.fixed_seconds}, {"allocator_seconds", estimate.allocator_seconds},
                  {"serial_gb_per_s", rates.serial_gb_per_s}, {"serial_huge_gb_per_s", rates.serial_huge_gb_per_s},
                  {"parallel_gb_per_s", rates.parallel_gb_per_s}, {"faulted_gb_per_s", rates.faulted_gb_per_s},
                  {"free_gb_per_s", rates.free_gb_per_s}, {"free_huge_gb_per_s", rates.free_huge_gb_per_s}});
}

std::vector<Step> plan(const Settings& s, bool size_given, Emitter& emitter) {
  const BudgetChoice budget = choose_budget(s.budget);
  const std::size_t bytes = size_within_budget(s.size, size_given, budget, emitter, "measuring");
  const unsigned threads = s.threads ? s.threads : os::logical_cpu_count();
  const std::size_t count = bytes / sizeof(WorkItem);
  if (count == 0) throw ProbeError(exit_bad_arguments, "bad_arguments", "--size must hold at least one 16-byte item");
  const auto chosen = chosen_strategies(s, usable_page_kinds(bytes, emitter));
  say_estimate(s, emitter, *chosen, bytes, threads);
  std::vector<Step> steps;
  add_limit_and_fill_steps(steps, s, emitter, bytes, threads);
  add_repeat_steps(steps, s, emitter, bytes, budget, threads);
  add_strategy_steps(steps, s, emitter, chosen, count, threads);
  return steps;
}

// 3. Run: the plan, step by step, progress counted from its length.
Runner attach(CLI::App& command, std::shared_ptr<Settings> settings) {
  declare(command, *settings);
  return [settings, &command](Emitter& emitter) {
    run_plan(emitter, plan(*settings, command.count("--size") > 0, emitter));
  };
}

}  // namespace

Experiment bigarray_experiment() {
  return {"bigarray", "Allocate and initialize one big array by every common strategy, against the machine's limit",
          [](CLI::App& command) { return attach(command, std::make_shared<Settings>()); }};
}

}  // namespace memcost::probe

