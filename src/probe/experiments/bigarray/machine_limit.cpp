// The machine's limit and the fill methods (machine_limit.hpp).
#include "probe/experiments/bigarray/machine_limit.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/experiments/bigarray/work_item.hpp"

namespace memcost::probe::bigarray {
namespace {

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

}  // namespace

// The machine's limit: a parallel memset, one part per thread.
void parallel_memset(void* data, std::size_t bytes, unsigned threads, int byte) {
  auto* bytes_at = static_cast<unsigned char*>(data);
  parallel_for(threads, bytes, [bytes_at, byte](std::size_t first, std::size_t last) {
    std::memset(bytes_at + first, byte, last - first);
    measure::keep_writes(bytes_at);
  });
}

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

}  // namespace memcost::probe::bigarray
