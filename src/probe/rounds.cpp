#include "probe/rounds.hpp"

#include <algorithm>
#include <numeric>
#include <random>

namespace memcost::probe {

std::vector<std::vector<std::size_t>> interleaved_order(std::size_t rows, int rounds, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<std::vector<std::size_t>> order;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::size_t> this_round(rows);
    std::iota(this_round.begin(), this_round.end(), std::size_t{0});
    std::shuffle(this_round.begin(), this_round.end(), generator);
    order.push_back(std::move(this_round));
  }
  return order;
}

std::uint64_t fresh_seed() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) ^ device();
}

}  // namespace memcost::probe
