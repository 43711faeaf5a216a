// memcost::allocator<T> and big_memory_resource: standard containers on big_array's memory.
#include "memcost/allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "memcost/measure.hpp"
#include "test_support.hpp"

using namespace memcost;
using namespace memcost::test;

TEST(BigArrayAllocator, AVectorOfBigSizeGetsTheLadderAndParallelFirstTouch) {
  big_memory_resource resource;
  {
    std::vector<float, allocator<float>> v(16 * MiB / sizeof(float), allocator<float>(&resource));
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    EXPECT_EQ(resource.blocks_outstanding(), 1U);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % os::base_page_size(), 0U);
    const auto report = resource.last_report();
    EXPECT_TRUE(report.read_back);
    EXPECT_EQ(report.initialization, "populate") << "16 MiB: under the size worth measuring populate against touch";
    EXPECT_EQ(report.fault_method_reason.rfind("the default rule", 0), 0U) << report.fault_method_reason;
    if (thp_usable()) {
      EXPECT_EQ(report.page_kind, "thp");
    }
  }
  EXPECT_EQ(resource.blocks_outstanding(), 0U);
}

TEST(BigArrayAllocator, SmallBlocksPassThroughToTheUpstreamResource) {
  big_memory_resource resource;
  std::vector<int, allocator<int>> v(100, 3, allocator<int>(&resource));
  EXPECT_EQ(resource.blocks_outstanding(), 0U);
  EXPECT_EQ(v[99], 3);
}

TEST(BigArrayAllocator, WithAPoolTheSecondContainerTakesNoFaults) {
  array_pool pool(64 * MiB);
  // Base pages, so that a fresh block's faults (one per page) stand far above what a reused one takes.
  big_memory_resource resource({.pages = pages::base, .pool = &pool});
  const std::size_t n = 8 * MiB / sizeof(std::int32_t);
  const auto fresh = faults_during([&] { std::pmr::vector<std::int32_t> first(n, 7, &resource); });
  EXPECT_EQ(pool.stats().bytes_held, 8 * MiB);
  std::pmr::vector<std::int32_t> second(&resource);
  const auto reused = faults_during([&] { second.assign(n, 5); });
  EXPECT_TRUE(resource.last_report().from_pool);
  expect_reuse_takes_far_fewer_faults(fresh, reused, 8 * MiB);
  EXPECT_TRUE(std::all_of(second.begin(), second.end(), [](std::int32_t x) { return x == 5; }));
}

TEST(BigArrayAllocator, TheDefaultAllocatorWorksWithoutSetUp) {
  std::vector<double, allocator<double>> v(4 * MiB / sizeof(double), 1.5);
  EXPECT_EQ(v.front(), 1.5);
  EXPECT_EQ(v.back(), 1.5);
  v.resize(8 * MiB / sizeof(double), 2.5);  // grows through the resource again
  EXPECT_EQ(v.back(), 2.5);
}
