// The OS layer's contract (os.hpp), checked against the real kernel.

#include <algorithm>

#include "memcost/measure.hpp"
#include "test_support.hpp"

using namespace memcost;
using namespace memcost::test;

TEST(OsContract, CommittedMemoryIsWritableAndReadsZero) {
  os::Mapping reserved = os::reserve({8 * MiB});
  ASSERT_TRUE(reserved.status.ok()) << reserved.status.message();
  ScopedMapping guard(reserved);
  ASSERT_TRUE(os::commit(reserved.address, 8 * MiB).ok());
  const char* bytes = guard.bytes();
  EXPECT_TRUE(std::all_of(bytes, bytes + 8 * MiB, [](char c) { return c == 0; }));
  std::memset(guard.bytes(), 0x5a, 8 * MiB);
  EXPECT_EQ(guard.bytes()[8 * MiB - 1], 0x5a);
}

TEST(OsContract, MappedMemoryOfEveryUsableKindReadsZero) {
  for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp}) {
    ScopedMapping mapping(os::MapRequest{4 * MiB, kind});
    ASSERT_TRUE(mapping.mapping.status.ok()) << os::page_kind_name(kind) << ": " << mapping.mapping.status.message();
    const char* bytes = mapping.bytes();
    EXPECT_TRUE(std::all_of(bytes, bytes + 4 * MiB, [](char c) { return c == 0; })) << os::page_kind_name(kind);
  }
}

TEST(OsContract, DecommitDropsContentsAndRecommitReadsZero) {
  ScopedMapping mapping(os::reserve({4 * MiB}));
  ASSERT_TRUE(os::commit(mapping.bytes(), 4 * MiB).ok());
  std::memset(mapping.bytes(), 1, 4 * MiB);
  ASSERT_TRUE(os::decommit(mapping.bytes(), 4 * MiB).ok());
  ASSERT_TRUE(os::commit(mapping.bytes(), 4 * MiB).ok());
  EXPECT_EQ(mapping.bytes()[12345], 0);
}

TEST(OsContract, ReleaseLowersResidentSize) {
  constexpr std::size_t size = 64 * MiB;
  os::Mapping mapping = os::map({size, os::PageKind::base});
  ASSERT_TRUE(mapping.status.ok());
  std::memset(mapping.address, 1, size);
  auto before = os::process_times().rss_bytes;
  ASSERT_TRUE(os::release(mapping.address, size).ok());
  auto after = os::process_times().rss_bytes;
  EXPECT_GE(before - after, size * 9 / 10);
}

TEST(OsContract, MapWithPopulateFaultsTheRangeInBeforeItReturns) {
  constexpr std::size_t size = 32 * MiB;
  os::MapRequest request{size, os::PageKind::system};
  request.populate = true;
  auto before = os::process_times().rss_bytes;
  ScopedMapping mapping(request);
  ASSERT_TRUE(mapping.mapping.status.ok()) << mapping.mapping.status.message();
  auto after = os::process_times().rss_bytes;
  EXPECT_GE(after - before, size * 9 / 10);
  EXPECT_EQ(mapping.bytes()[size - 1], 0);
}

TEST(OsContract, PopulateRaisesResidentSizeWithoutTouching) {
  constexpr std::size_t size = 32 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  auto before = os::process_times().rss_bytes;
  os::Status populated = os::populate_write(mapping.bytes(), size);
  if (populated.error == EINVAL) GTEST_SKIP() << "kernel lacks MADV_POPULATE_WRITE (Linux < 5.14)";
  ASSERT_TRUE(populated.ok()) << populated.message();
  auto after = os::process_times().rss_bytes;
  EXPECT_GE(after - before, size * 9 / 10);
  EXPECT_EQ(mapping.bytes()[size / 2], 0);
}

TEST(OsContract, PopulateFromSeveralThreadsOnDisjointRanges) {
  constexpr std::size_t size = 32 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  std::vector<std::thread> threads;
  std::vector<os::Status> results(4);
  for (std::size_t i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { results[i] = os::populate_write(mapping.bytes() + i * size / 4, size / 4); });
  }
  for (auto& thread : threads) thread.join();
  if (results[0].error == EINVAL) GTEST_SKIP() << "kernel lacks MADV_POPULATE_WRITE";
  for (const auto& result : results) EXPECT_TRUE(result.ok()) << result.message();
  auto backing = measure::backing_of(mapping.bytes(), size);
  ASSERT_TRUE(backing.has_value());
  // smaps reports whole VMAs, and this one may have merged with a neighbour.
  EXPECT_GE(backing->resident_bytes, size);
  EXPECT_LE(backing->resident_bytes, size + 1 * MiB);
}

TEST(OsContract, TouchPagesKeepsContents) {
  ScopedMapping mapping(os::MapRequest{1 * MiB, os::PageKind::base});
  mapping.bytes()[4096] = 42;
  os::touch_pages(mapping.bytes(), 1 * MiB, os::base_page_size());
  EXPECT_EQ(mapping.bytes()[4096], 42);
  EXPECT_EQ(mapping.bytes()[8192], 0);
}

TEST(OsContract, ThpRequestOnAlignedRangeGetsHugePages) {
  if (!thp_usable()) GTEST_SKIP() << "THP is 'never' here: the kernel gives no huge pages on request";
  constexpr std::size_t size = 8 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::thp});
  ASSERT_TRUE(mapping.mapping.status.ok());
  std::memset(mapping.bytes(), 1, size);
  auto backing = measure::backing_of(mapping.bytes(), size);
  ASSERT_TRUE(backing.has_value());
  // mmap aligns the start to 4 KB only: allow the unaligned head and tail to be on base pages.
  EXPECT_GE(backing->anon_huge_bytes, size - 2 * MiB) << "resident " << backing->resident_bytes;
}

TEST(OsContract, BasePageKindStaysOnBasePages) {
  constexpr std::size_t size = 8 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  std::memset(mapping.bytes(), 1, size);
  auto backing = measure::backing_of(mapping.bytes(), size);
  ASSERT_TRUE(backing.has_value());
  EXPECT_EQ(backing->anon_huge_bytes, 0U);
  EXPECT_EQ(backing->kernel_page_bytes, os::base_page_size());
}

TEST(OsContract, HugetlbWithEmptyPoolFailsCleanly) {
  for (os::PageKind kind : {os::PageKind::huge_2mb, os::PageKind::huge_1gb}) {
    std::size_t page = os::page_kind_bytes(kind);
    if (os::page_kind_verdict(os::capabilities(), kind, page).usable) continue;  // not empty here: nothing to prove
    os::Mapping mapping = os::map({page, kind});
    EXPECT_FALSE(mapping.status.ok()) << os::page_kind_name(kind);
    EXPECT_EQ(mapping.address, nullptr);
    EXPECT_FALSE(mapping.status.message().empty());
  }
}

TEST(OsContract, DistinctProtectionSplitsMappings) {
  if (!os::neighbouring_mappings_merge()) GTEST_SKIP() << "mappings never merge here: every one is distinct already";
  constexpr std::size_t page = 4096;
  ScopedMapping mapping(os::MapRequest{64 * page, os::PageKind::base});
  auto before = os::mapping_count();
  ASSERT_TRUE(before.has_value());
  for (std::size_t i = 0; i < 64; i += 2) ASSERT_TRUE(os::protect(mapping.bytes() + i * page, page, false).ok());
  auto after = os::mapping_count();
  EXPECT_GE(*after - *before, 60U);
}

TEST(OsContract, QueriesDescribeTheMachine) {
  EXPECT_GE(os::base_page_size(), 4096U);
  EXPECT_GE(os::logical_cpu_count(), 1U);
  auto memory = os::memory_info();
  EXPECT_GT(memory.total_bytes, 0U);
  EXPECT_GT(memory.available_bytes, 0U);
  EXPECT_LE(memory.available_bytes, memory.total_bytes);
  for (const auto& pool : os::hugetlb_pools()) EXPECT_GE(pool.page_size_bytes, 2 * MiB);
  auto info = os::system_info();
  EXPECT_FALSE(info.os_release.empty());
  if (info.os_name == "Linux") {
    EXPECT_TRUE(os::max_map_count().has_value());
    EXPECT_TRUE(os::overcommit_mode().has_value());
  } else {
    EXPECT_EQ(info.os_name, "Windows");
  }
}
