// The costs experiment's threads part (parts.hpp).
#include "probe/experiments/costs/parts.hpp"

#include <algorithm>
#include <barrier>
#include <cstring>
#include <string>
#include <thread>

#include "memcost/measure.hpp"

namespace memcost::probe::costs {

void plan_threads_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps) {
  const std::size_t size = settings.threads_size;
  unsigned cpus = os::logical_cpu_count();
  std::vector<unsigned> counts;
  for (unsigned n = 1; n < cpus; n *= 2) counts.push_back(n);
  counts.push_back(cpus);
  for (unsigned threads : counts) {
    for (int rep = -settings.warmup; rep < reps; ++rep) {
      plan.push_back({"threads " + std::to_string(threads), [=, &emitter] {
      Buffer buffer = allocate(Route::os, os::PageKind::base, size);
      std::barrier sync(static_cast<std::ptrdiff_t>(threads) + 1);
      std::vector<std::thread> workers;
      std::size_t chunk = (size / threads + 4095) & ~std::size_t{4095};
      for (unsigned i = 0; i < threads; ++i) {
        workers.emplace_back([&, i] {
          std::size_t begin = std::min(size, i * chunk);
          std::size_t length = std::min(size, begin + chunk) - begin;
          for (int value : {1, 2}) {
            sync.arrive_and_wait();  // start
            std::memset(buffer.data + begin, value, length);
            measure::keep_writes(buffer.data);
            sync.arrive_and_wait();  // done
          }
        });
      }
      std::uint64_t elapsed[2] = {};
      auto before = measure::take_snapshot({.machine = false});
      measure::Interval first_faults;
      for (int pass = 0; pass < 2; ++pass) {
        auto start = measure::now_ns();
        sync.arrive_and_wait();
        sync.arrive_and_wait();
        elapsed[pass] = measure::now_ns() - start;
        if (pass == 0) first_faults = measure::between(before, measure::take_snapshot({.machine = false}));
      }
      for (auto& worker : workers) worker.join();
      release(buffer);
      emitter.sample({{"part", "threads"}, {"threads", threads}, {"size_bytes", size}, {"rep", rep}, {"warmup", rep < 0}},
                     {{"first_touch_ns", elapsed[0]},
                      {"second_touch_ns", elapsed[1]},
                      {"first_touch_minor_faults", fault_count(first_faults.faults_counted, first_faults.minor_faults)}});
      }});
    }
  }
}

}  // namespace memcost::probe::costs
