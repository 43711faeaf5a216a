// The preload library's table of big blocks (src/trace/preload/block_table.c): what free() asks on
// every call, so a lookup of a block it does not hold must stay short however many came and went.
#include "trace/preload/block_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

void* block(std::uintptr_t n) { return reinterpret_cast<void*>(0x7f0000000000ULL + n * 0x10000ULL); }

TEST(BlockTable, ABlockIsFoundOnceAndAnUnknownOneNever) {
  memcost_block_remember(block(1));
  memcost_block_remember(block(2));
  EXPECT_EQ(memcost_block_forget(block(3)), 0);
  EXPECT_EQ(memcost_block_forget(block(1)), 1);
  EXPECT_EQ(memcost_block_forget(block(1)), 0);
  EXPECT_EQ(memcost_block_forget(block(2)), 1);
  EXPECT_EQ(memcost_block_slots_used(), 0U);
}

TEST(BlockTable, BlocksThatComeAndGoLeaveNoTrailOfTombstones) {
  // Four times the table's slots, 1,000 live at a time: without emptying tombstones the table
  // fills with them, and a lookup of an absent block walks every slot.
  const std::uintptr_t live = 1000, total = 4 * MEMCOST_BLOCK_TABLE_SLOTS;
  for (std::uintptr_t n = 0; n < total; ++n) {
    memcost_block_remember(block(n));
    if (n >= live) {
      ASSERT_EQ(memcost_block_forget(block(n - live)), 1) << n;
    }
  }
  EXPECT_LT(memcost_block_slots_used(), 4 * live);
  // Every block still live is found, and none of those gone.
  for (std::uintptr_t n = total - live; n < total; ++n) EXPECT_EQ(memcost_block_forget(block(n)), 1) << n;
  for (std::uintptr_t n = 0; n < 100; ++n) EXPECT_EQ(memcost_block_forget(block(n)), 0) << n;
  EXPECT_EQ(memcost_block_slots_used(), 0U);
}

TEST(BlockTable, ChainsThroughATombstoneStillFindTheirBlocks) {
  // Blocks whose keys collide sit in consecutive slots; forgetting the first leaves a tombstone
  // that the second's lookup walks through.
  std::vector<void*> colliding;
  for (std::uintptr_t n = 0; colliding.size() < 3; ++n) {
    // The same slot: keys that differ only in the 4 bits the hash drops.
    colliding.push_back(reinterpret_cast<void*>(0x7f1000000000ULL + n));
  }
  for (void* pointer : colliding) memcost_block_remember(pointer);
  EXPECT_EQ(memcost_block_forget(colliding[0]), 1);
  EXPECT_EQ(memcost_block_forget(colliding[2]), 1);
  EXPECT_EQ(memcost_block_forget(colliding[1]), 1);
  EXPECT_EQ(memcost_block_slots_used(), 0U);
}

}  // namespace
