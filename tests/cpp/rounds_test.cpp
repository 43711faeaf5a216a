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
