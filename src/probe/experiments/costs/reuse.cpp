// The costs experiment's reuse part (parts.hpp).
#include "probe/experiments/costs/parts.hpp"

#include <cstring>
#include <string>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"

namespace memcost::probe::costs {
namespace {

// A frame's buffer made by make_big_array from a pool (base pages, like the other routes), and
// given back to it at the end of the frame: the reuse a program gets without keeping the buffer.
void pool_frames(const Settings& settings, std::size_t frame_size, json& frame_ns, json& frame_faults) {
  array_pool pool(2 * frame_size);
  for (int frame = 0; frame < settings.frames; ++frame) {
    auto before = measure::take_snapshot({.machine = false});
    auto frame_start = measure::now_ns();
    {
      auto buffer = make_big_array<unsigned char>(frame_size, uninitialized, {.pages = pages::base, .threads = 1, .pool = &pool});
      std::memset(buffer.data(), frame & 0xff, frame_size);
      measure::keep_writes(buffer.data());
    }
    frame_ns.push_back(measure::now_ns() - frame_start);
    auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
    frame_faults.push_back(fault_count(interval.faults_counted, interval.minor_faults));
  }
}

}  // namespace

void plan_reuse_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps) {
  const std::size_t frame_size = settings.frame_size;
  // Reallocating through an array_pool: the buffer comes back faulted in every frame after the first.
  for (int rep = 0; rep < reps; ++rep) {
    plan.push_back({"reuse pool reallocate", [=, &emitter, &settings] {
      json frame_ns = json::array(), frame_faults = json::array();
      auto start = measure::now_ns();
      pool_frames(settings, frame_size, frame_ns, frame_faults);
      auto total = measure::now_ns() - start;
      emitter.sample({{"part", "reuse"}, {"route", "pool"}, {"mode", "reallocate"}, {"frame_bytes", frame_size}, {"rep", rep}},
                     {{"frames", settings.frames}, {"total_ns", total}, {"frame_ns", frame_ns}, {"frame_minor_faults", frame_faults}});
    }});
  }
  for (Route route : {Route::malloc, Route::os}) {
    for (int rep = 0; rep < reps; ++rep) {
      for (const char* mode : {"reallocate", "reuse"}) {
        plan.push_back({std::string("reuse ") + route_name(route) + " " + mode, [=, &emitter, &settings] {
        bool reuse = std::strcmp(mode, "reuse") == 0;
        json frame_ns = json::array();
        json frame_faults = json::array();
        auto start = measure::now_ns();
        Buffer kept;
        if (reuse) kept = allocate(route, os::PageKind::base, frame_size);
        for (int frame = 0; frame < settings.frames; ++frame) {
          auto before = measure::take_snapshot({.machine = false});
          auto frame_start = measure::now_ns();
          Buffer buffer = reuse ? kept : allocate(route, os::PageKind::base, frame_size);
          write_all(buffer, frame & 0xff);
          if (!reuse) release(buffer);
          auto frame_end = measure::now_ns();
          frame_ns.push_back(frame_end - frame_start);
          auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
    frame_faults.push_back(fault_count(interval.faults_counted, interval.minor_faults));
        }
        if (reuse) release(kept);
        auto total = measure::now_ns() - start;
        // The process-wide glibc state (its mmap threshold) carries over from
        // one rep to the next: `sequence` records the order.
        emitter.sample({{"part", "reuse"}, {"route", route_name(route)}, {"mode", mode}, {"frame_bytes", frame_size}, {"rep", rep}},
                       {{"frames", settings.frames}, {"total_ns", total}, {"frame_ns", frame_ns}, {"frame_minor_faults", frame_faults}});
        }});
      }
    }
  }
}

}  // namespace memcost::probe::costs
