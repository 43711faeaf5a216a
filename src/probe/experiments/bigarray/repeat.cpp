// The repeat scenario (repeat.hpp).
#include "probe/experiments/bigarray/repeat.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>

#include "memcost/allocator.hpp"
#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/experiments/bigarray/machine_limit.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe::bigarray {
namespace {

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

struct RepeatVariant {
  std::string name;
  // One iteration: allocate, initialize to kRepeatValue, free. `kept` is the floor's one array.
  std::function<void(std::size_t count)> iterate;
  // It writes the array from one thread: above --serial-part, measured on a part and scaled, as the
  // ranked serial rows are (strategy_rounds.cpp, "A serial row on a part").
  bool serial = false;
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
       }, true},
      {"malloc + memset",
       [](std::size_t count) {
         auto* p = static_cast<std::uint32_t*>(std::malloc(count * sizeof(std::uint32_t)));
         if (!p) throw std::bad_alloc();
         std::memset(p, 0x01, count * sizeof(std::uint32_t));
         measure::keep_writes(p);
         std::free(p);
       }, true},
      {"one array kept, filled again (the floor)",
       [kept, floor_method, threads](std::size_t count) {
         if (kept->size() != count) *kept = make_big_array<std::uint32_t>(count, zero);
         // The fastest fill method on this array: what re-initializing costs at best.
         parallel_fill(kept->data(), count * sizeof(std::uint32_t), threads, *floor_method);
       }},
  };
}

// The repeat scenario: each iteration of a variant paired with a floor taken beside it. Adaptive, a
// variant has 3 iterations at least, 2 when its second took 15 times its floor or more (one
// thread faulting 32 GiB in afresh each time on the 16-vCPU host: about 18 s against 0.6).
constexpr int kRepeatMinIterations = 2;
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
// 3 times the floor in every pair, 5 times with two pairs, 15 times with one (the variants that
// fault their memory in afresh each time: at 4 GiB, 3.4 s an iteration against 0.16); at least
// kRepeatMinIterations iterations, --repeat at most.
// `variant_elements`: what the variant writes (a serial variant's part, else `elements`); the
// adaptive rule sets its time, scaled to `elements`, against the floor's on the whole.
RepeatTimes time_repeat(const RepeatVariant& variant, const RepeatVariant& floor, std::size_t elements,
                        std::size_t variant_elements, int repeat, bool adaptive) {
  RepeatTimes times;
  const double scale = static_cast<double>(elements) / static_cast<double>(variant_elements);
  auto timed = [&](const RepeatVariant& run, json& ns, bool counted) {
    const MachineEvents events_before = machine_events();
    auto before = measure::take_snapshot({.machine = false});
    run.iterate(counted ? variant_elements : elements);
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
        ratios.push_back(scale * times.iteration_ns[k].get<double>() / std::max(1.0, times.floor_ns[k].get<double>()));
      }
      const Settled now = settled(ratios, 1.0, StoppingRule{.max_rounds = repeat});
      if (now == Settled::tight || now == Settled::far_behind) break;
    }
  }
  return times;
}

}  // namespace

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
  const std::size_t part_elements = serial_part_of(s, repeat_bytes) / sizeof(std::uint32_t);
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const bool first = v == 0, last = v + 1 == variants.size();
    steps.push_back({"repeat " + variants[v].name, [&emitter, variant = variants[v], floor, elements, repeat_bytes, pool,
                                                    kept, floor_method, first, last, repeat = s.repeat, threads, part_elements,
                                                    adaptive = s.reps == 0] {
      if (first) {
        *kept = make_big_array<std::uint32_t>(elements, zero, {.threads = threads});
        *floor_method = fastest_floor_method(kept->data(), repeat_bytes, threads);
      }
      const std::size_t variant_elements = variant.serial && part_elements > 0 ? part_elements : elements;
      RepeatTimes times = time_repeat(variant, floor, elements, variant_elements, repeat, adaptive);
      pool->release();
      if (last) *kept = big_array<std::uint32_t>();
      json metrics = {{"iteration_ns", std::move(times.iteration_ns)}, {"iteration_faults", std::move(times.iteration_faults)},
                      {"floor_ns", std::move(times.floor_ns)}, {"iteration_events", std::move(times.iteration_events)}};
      if (variant_elements < elements) {
        metrics["measured_bytes"] = variant_elements * sizeof(std::uint32_t);
        metrics["scaled_by"] = static_cast<double>(elements) / static_cast<double>(variant_elements);
      }
      emitter.sample({{"part", "repeat"}, {"variant", variant.name}, {"size_bytes", repeat_bytes}, {"iterations", times.done},
                      {"floor_method", detail::fill_method_name(*floor_method)}, {"is_floor", last}},
                     metrics);
    }});
  }
}

}  // namespace memcost::probe::bigarray
