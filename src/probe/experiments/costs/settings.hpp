// The costs experiment's flags, typed (costs.cpp declares them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "os/os.hpp"
#include "probe/experiments/costs/buffers.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe::costs {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Every flag, typed: CLI11 parses, checks and converts; the runner handles no strings.
struct Settings {
  std::vector<std::size_t> sizes = {8 * MiB, 32 * MiB, 128 * MiB, 1024 * MiB};
  std::vector<os::PageKind> pages = {os::PageKind::base, os::PageKind::thp, os::PageKind::huge_2mb, os::PageKind::huge_1gb};
  std::vector<Route> routes = {Route::os, Route::malloc, Route::new_array};
  std::vector<std::string> parts = {"rows", "reuse", "threads", "idle", "shootdowns"};
  std::string budget;
  int reps = 9;
  int warmup = 2;
  int settle_ms = 20;
  int baseline_ms = 250;
  int frames = 200;
  std::size_t frame_size = 8 * MiB;
  std::size_t threads_size = 256 * MiB;
  std::string order = "blocks";
  std::uint64_t order_seed = probe::fresh_seed();  // --order rounds: each round's order of the cases
  std::size_t idle_size = 256 * MiB;
  double idle_seconds = 4.0;
  int idle_reps = 3;
  bool sizes_given = false;
};

}  // namespace memcost::probe::costs
