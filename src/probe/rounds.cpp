#include "probe/rounds.hpp"

#include <algorithm>
#include <cmath>
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

namespace memcost::probe {

namespace {

// Student's t, two-sided 95 %, for 1..30 degrees of freedom (beyond: 2.0, within 2 % of the true value).
double student_t_95(int degrees) {
  static constexpr double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                     2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                     2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  return degrees >= 1 && degrees <= 30 ? table[degrees - 1] : 2.0;
}

}  // namespace

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

Settled settled(const std::vector<double>& seconds, double fastest_median_s, const StoppingRule& rule) {
  const int rounds = static_cast<int>(seconds.size());
  if (rounds >= rule.max_rounds) return Settled::max_rounds;
  if (rounds == 1 && rule.far_behind_single > 0 && fastest_median_s > 0 &&
      seconds[0] >= rule.far_behind_single * fastest_median_s) {
    return Settled::far_behind;
  }
  if (rounds < 2 || std::any_of(seconds.begin(), seconds.end(), [](double s) { return !(s > 0); })) return Settled::no;
  if (rounds >= rule.far_behind_min_rounds && fastest_median_s > 0) {
    const double factor = rounds >= rule.min_rounds ? rule.far_behind : rule.far_behind_early;
    if (*std::min_element(seconds.begin(), seconds.end()) >= factor * fastest_median_s) return Settled::far_behind;
  }
  if (rounds < rule.min_rounds) return Settled::no;
  double mean = 0;
  for (double s : seconds) mean += std::log(s);
  mean /= rounds;
  double squares = 0;
  for (double s : seconds) squares += (std::log(s) - mean) * (std::log(s) - mean);
  const double half_width = student_t_95(rounds - 1) * std::sqrt(squares / (rounds - 1) / rounds);
  return half_width <= std::log1p(rule.interval_half_width) ? Settled::tight : Settled::no;
}

const char* settled_name(Settled reason) {
  switch (reason) {
    case Settled::tight: return "tight";
    case Settled::far_behind: return "far behind";
    case Settled::max_rounds: return "most rounds";
    case Settled::no: break;
  }
  return "going";
}

std::size_t side_by_side_width(const SideBySideLimits& limits) {
  if (limits.asked > 0) return limits.asked;
  std::size_t width = std::max<std::size_t>(1, limits.cpus / 2);
  if (limits.array_bytes > 0) width = std::min<std::size_t>(width, std::max<std::size_t>(1, limits.budget_bytes / limits.array_bytes));
  if (limits.one_thread_gb_per_s > 0 && limits.limit_gb_per_s > 0) {
    width = std::min<std::size_t>(width, std::max<std::size_t>(1, static_cast<std::size_t>(
                                                                      limits.limit_gb_per_s / 3 / limits.one_thread_gb_per_s)));
  }
  return width;
}

}  // namespace memcost::probe
