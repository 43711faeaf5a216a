// The bigarray experiment's flags, typed (bigarray.cpp declares them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "probe/rounds.hpp"

namespace memcost::probe::bigarray {

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
  // One-thread rows measured at once (strategy_rounds.hpp): 0 chooses (side_by_side_width), 1 each
  // alone. `side_by_side_checked`: the main run's check held already (an allocator's run skips its own).
  std::size_t side_by_side = 0;
  bool side_by_side_checked = false;
  int allocator_runs = 0;  // runs under other allocators the front end will add: for the estimate
  std::uint64_t order_seed = probe::fresh_seed();  // the ranked rows' order, round by round
};

}  // namespace memcost::probe::bigarray
