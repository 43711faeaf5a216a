// Repetitions measured round by round across the rows a table ranks or compares, each round in its
// own order shuffled from a recorded seed: a slow minute of the host (memory bandwidth here drifts
// within minutes) lands on every row alike instead of on whichever rows ran then. The Python side's
// twin is memcost.stats.interleaved_order (trace --verify).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memcost::probe {

// rounds lists, each a permutation of 0 .. rows-1; the same seed gives the same lists.
[[nodiscard]] std::vector<std::vector<std::size_t>> interleaved_order(std::size_t rows, int rounds, std::uint64_t seed);

// A seed for a run that was not given one (it is recorded in the settings line either way).
[[nodiscard]] std::uint64_t fresh_seed();

}  // namespace memcost::probe
