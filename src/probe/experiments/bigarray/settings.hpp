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
  // Rows that write the array from one thread (NamedStrategy::serial_writes) are measured on the
  // array's first `serial_part` bytes when it is larger, their times scaled to the whole
  // (strategy_rounds.cpp, "A serial row on a part"); 0: every row on the whole array.
  // `serial_part_checked`: the main run's check held (an allocator's run skips its own).
  std::size_t serial_part = std::size_t{8} << 30;
  bool serial_part_checked = false;
  int allocator_runs = 0;  // runs under other allocators the front end will add: for the estimate
  std::uint64_t order_seed = probe::fresh_seed();  // the ranked rows' order, round by round
};

// The bytes a serial row writes of an array of `bytes`: --serial-part where it is smaller, else 0
// (the whole array).
[[nodiscard]] inline std::size_t serial_part_of(const Settings& s, std::size_t bytes) {
  return s.serial_part > 0 && s.serial_part < bytes ? s.serial_part : 0;
}

}  // namespace memcost::probe::bigarray
