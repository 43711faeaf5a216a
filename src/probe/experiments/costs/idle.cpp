// The costs experiment's idle part (parts.hpp).
#include "probe/experiments/costs/parts.hpp"

#include <chrono>
#include <string>
#include <thread>

#include "memcost/measure.hpp"

namespace memcost::probe::costs {
namespace {

struct Touch {
  std::uint64_t first_ns = 0;
  std::uint64_t second_ns = 0;
  json faults;
  std::uint64_t system_ns = 0;
};

Touch map_touch_release(os::PageKind kind, std::size_t size) {
  Buffer buffer = allocate(Route::os, kind, size);
  auto before = measure::take_snapshot({.machine = false});
  auto t0 = measure::now_ns();
  write_all(buffer, 1);
  auto t1 = measure::now_ns();
  auto first = measure::between(before, measure::take_snapshot({.machine = false}));
  auto t2 = measure::now_ns();
  write_all(buffer, 2);
  auto t3 = measure::now_ns();
  release(buffer);
  return {t1 - t0, t3 - t2, fault_count(first.faults_counted, first.minor_faults), first.process_system_ns};
}

}  // namespace

void plan_idle_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, os::PageKind kind) {
  const std::size_t size = settings.idle_size;
  for (int rep = 0; rep < settings.idle_reps; ++rep) {
    plan.push_back({std::string("idle ") + os::page_kind_name(kind), [=, &emitter, &settings] {
    (void)map_touch_release(kind, size);  // makes the next mapping reuse just-freed memory
    Touch hot = map_touch_release(kind, size);
    std::this_thread::sleep_for(std::chrono::duration<double>(settings.idle_seconds));
    Touch cold = map_touch_release(kind, size);
    emitter.sample({{"part", "idle"}, {"page", os::page_kind_name(kind)}, {"size_bytes", size}, {"rep", rep},
                    {"idle_seconds", settings.idle_seconds}},
                   {{"hot_first_touch_ns", hot.first_ns}, {"hot_second_touch_ns", hot.second_ns},
                    {"hot_faults", hot.faults}, {"hot_system_ns", hot.system_ns},
                    {"cold_first_touch_ns", cold.first_ns}, {"cold_second_touch_ns", cold.second_ns},
                    {"cold_faults", cold.faults}, {"cold_system_ns", cold.system_ns}});
    }});
  }
}

}  // namespace memcost::probe::costs
