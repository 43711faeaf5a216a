// The interleaving helper of ranked tables (src/probe/rounds.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "probe/rounds.hpp"

using memcost::probe::interleaved_order;

TEST(Rounds, EachRoundIsAPermutationOfTheRows) {
  const auto order = interleaved_order(7, 5, 42);
  ASSERT_EQ(order.size(), 5u);
  for (auto round : order) {
    std::sort(round.begin(), round.end());
    EXPECT_EQ(round, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6}));
  }
}

TEST(Rounds, TheSameSeedGivesTheSameOrderAndAnotherAnother) {
  EXPECT_EQ(interleaved_order(9, 4, 7), interleaved_order(9, 4, 7));
  EXPECT_NE(interleaved_order(9, 4, 7), interleaved_order(9, 4, 8));
  const auto order = interleaved_order(9, 6, 7);
  EXPECT_GT(std::set<std::vector<std::size_t>>(order.begin(), order.end()).size(), 1u);  // not one order repeated
}

using memcost::probe::Settled;
using memcost::probe::settled;
using memcost::probe::StoppingRule;

TEST(Rounds, ARowWhoseRoundsAgreeSettlesAfterThreeRounds) {
  const StoppingRule rule;  // ±10 % from 3 rounds, 3x the fastest from 2, 5 at most
  EXPECT_EQ(settled({1.00, 1.02}, 0.5, rule), Settled::no);  // too few rounds to know it within ±10 %
  EXPECT_EQ(settled({1.00, 1.02, 0.99}, 0, rule), Settled::tight);
}

TEST(Rounds, ARowWhoseRoundsDisagreeGoesOnToTheMostRounds) {
  const StoppingRule rule;
  EXPECT_EQ(settled({0.2, 1.8, 0.2}, 0.2, rule), Settled::no);  // a 9x spread: not known to ±10 %
  EXPECT_EQ(settled({0.2, 1.8, 0.2, 0.25}, 0.2, rule), Settled::no);
  EXPECT_EQ(settled({0.2, 1.8, 0.2, 0.25, 1.1}, 0.2, rule), Settled::max_rounds);
  // Just outside and just inside ±10 %: three rounds 1.0, 1.1, 1.2 spread too much for t(2) = 4.3.
  EXPECT_EQ(settled({1.0, 1.1, 1.2}, 0, rule), Settled::no);
  EXPECT_EQ(settled({1.0, 1.01, 1.02, 1.0}, 0, rule), Settled::tight);
}

TEST(Rounds, ARowFarBehindTheFastestStopsEarlyTheFartherBehindItIs) {
  const StoppingRule rule;
  EXPECT_EQ(settled({3.0}, 0.4, rule), Settled::no);               // one round 7.5x behind says nothing
  EXPECT_EQ(settled({24.3}, 0.682, rule), Settled::far_behind);    // one round 36x behind (16 CPUs, 32 GiB) does
  EXPECT_EQ(settled({5.9}, 0.4, rule), Settled::no);               // 14.75x: just short of 15x
  EXPECT_EQ(settled({3.0, 6.5}, 0.4, rule), Settled::far_behind);  // after two: its best round is 7.5x the fastest
  EXPECT_EQ(settled({1.02, 2.18}, 0.27, rule), Settled::no);       // 3.8x after two: a fast row's unlucky rounds, maybe
  EXPECT_EQ(settled({1.02, 2.18, 1.6}, 0.27, rule), Settled::far_behind);  // 3.8x after three
  EXPECT_EQ(settled({3.0, 6.5, 1.1}, 0.4, rule), Settled::no);     // one round within 3x: not far behind
  EXPECT_EQ(settled({0.9, 0.95, 0.92}, 0.4, rule), Settled::tight);  // 2.3x: behind, and known within ±10 %
  EXPECT_EQ(settled({3.0, 6.5, 3.3}, 0.0, rule), Settled::no);     // no fastest known yet
}

TEST(Rounds, AFixedCountRunsEveryRowThatManyRounds) {
  const StoppingRule fixed = StoppingRule::fixed(4);
  EXPECT_EQ(settled({1.0, 1.0, 1.0}, 0.1, fixed), Settled::no);  // 10x the fastest, and agreeing: still going
  EXPECT_EQ(settled({10.0}, 0.1, fixed), Settled::no);           // 100x after one: still going
  EXPECT_EQ(settled({1.0, 1.0, 1.0, 1.0}, 0.1, fixed), Settled::max_rounds);
}

TEST(Rounds, TheMedianOfEvenAndOddCounts) {
  EXPECT_DOUBLE_EQ(memcost::probe::median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(memcost::probe::median_of({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(memcost::probe::median_of({}), 0);
}

namespace memcost::probe {
namespace {

// One-thread rows side by side: asked, or half the CPUs, within the budget and a third of the limit.
TEST(SideBySide, HalfTheCpusWithinTheBudgetAndAThirdOfTheLimit) {
  constexpr std::size_t GiB = std::size_t{1} << 30;
  EXPECT_EQ(side_by_side_width({.cpus = 2}), 1U);  // a 2-vCPU guest: every row alone, as before
  EXPECT_EQ(side_by_side_width({.cpus = 16}), 8U);
  EXPECT_EQ(side_by_side_width({.cpus = 17}), 8U);
  // The 16-vCPU GPU host at 32 GiB: a 103.7 GB budget holds three arrays.
  EXPECT_EQ(side_by_side_width({.cpus = 16, .budget_bytes = 103'753'049'292, .array_bytes = 32 * GiB}), 3U);
  // Its writing: four rows at 5.3 GB/s under a third of 64.8; a fifth would pass it.
  EXPECT_EQ(side_by_side_width({.cpus = 16, .budget_bytes = 1000 * GiB, .array_bytes = GiB, .one_thread_gb_per_s = 5.3,
                                .limit_gb_per_s = 64.8}),
            4U);
  EXPECT_EQ(side_by_side_width({.cpus = 16, .budget_bytes = GiB / 2, .array_bytes = GiB}), 1U);  // never below one
  EXPECT_EQ(side_by_side_width({.cpus = 16, .one_thread_gb_per_s = 40, .limit_gb_per_s = 64.8}), 1U);
  EXPECT_EQ(side_by_side_width({.asked = 3, .cpus = 2}), 3U);  // --side-by-side is taken as given
}

}  // namespace
}  // namespace memcost::probe
