// The Windows back end's own promises (os.hpp), run under Windows or Wine by `make test`.
#include <algorithm>
#include <string>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "test_support.hpp"

using namespace memcost;
using namespace memcost::test;

TEST(WindowsContract, LargePagesAreOfferedAndSayWhyTheyCannotBeUsed) {
  const os::LargePages pages = os::large_pages();
  if (!pages.offered) GTEST_SKIP() << pages.why_not;
  EXPECT_GE(pages.page_bytes, 2 * MiB);
  if (pages.privilege_held) GTEST_SKIP() << "this account holds SeLockMemoryPrivilege: nothing to refuse";
  EXPECT_NE(pages.why_not.find("SeLockMemoryPrivilege"), std::string::npos) << pages.why_not;
  EXPECT_NE(pages.why_not.find("Lock pages in memory"), std::string::npos) << pages.why_not;
  const os::Verdict verdict = os::page_kind_verdict(os::capabilities(), os::PageKind::huge_2mb, 2 * MiB);
  EXPECT_FALSE(verdict.usable);
  EXPECT_EQ(verdict.why_not, pages.why_not);
}

TEST(WindowsContract, ALargePageArrayWithoutThePrivilegeFailsWhenStrictAndFallsBackOtherwise) {
  const os::LargePages pages = os::large_pages();
  if (!pages.offered || pages.privilege_held) GTEST_SKIP() << "large pages are usable or absent here";
  try {
    (void)make_big_array<char>(4 * MiB, zero, {.pages = pages::hugetlb_2m, .strict = true});
    FAIL() << "a strict large-page request without the privilege must fail";
  } catch (const big_array_error& error) {
    EXPECT_NE(std::string(error.what()).find("SeLockMemoryPrivilege"), std::string::npos) << error.what();
  }
  auto array = make_big_array<char>(4 * MiB, fill('x'));
  EXPECT_EQ(array.report().page_kind, "base");
  ASSERT_FALSE(array.report().fallbacks.empty());
  EXPECT_NE(array.report().fallbacks.front().find("Lock pages in memory"), std::string::npos) << array.report().fallbacks.front();
  EXPECT_TRUE(std::all_of(array.begin(), array.end(), [](char c) { return c == 'x'; }));
}

TEST(WindowsContract, TopDownMappingsComeFromHigherAddresses) {
  ASSERT_TRUE(os::top_down_on_request());
  ScopedMapping bottom(os::MapRequest{64 * 1024, os::PageKind::system, nullptr, false});
  ScopedMapping top(os::MapRequest{64 * 1024, os::PageKind::system, nullptr, true});
  ASSERT_TRUE(bottom.mapping.status.ok() && top.mapping.status.ok());
  EXPECT_GT(top.bytes(), bottom.bytes());
}

TEST(WindowsContract, FaultCountsAreMeasuredOrSaidToBeMissing) {
  const os::ProcessTimes times = os::process_times();
  if (os::wine()) {
    EXPECT_FALSE(times.faults_counted) << "Wine reports no page faults: they must read as not counted";
  } else {
    EXPECT_TRUE(times.faults_counted);
    EXPECT_GT(times.minor_faults, 0U);
  }
  auto before = measure::take_snapshot({.machine = false});
  auto after = measure::take_snapshot({.machine = false});
  EXPECT_EQ(measure::between(before, after).faults_counted, times.faults_counted);
}

TEST(WindowsContract, WorkElsewhereIsNamedForWhatItMeasures) {
  EXPECT_EQ(std::string(os::machine_times_method()), "GetSystemTimes");
  EXPECT_TRUE(os::machine_times().has_value());
  auto system = os::other_tasks_cpu();
  if (!system) {
    EXPECT_TRUE(os::wine().has_value()) << "Windows always has a System process";
    return;
  }
  ASSERT_EQ(system->size(), 1U);
  EXPECT_EQ(os::task_name(system->front().tid).value_or(""), "System");
}

TEST(WindowsContract, PopulateFaultsALargeRangeIn) {
  constexpr std::size_t size = 256 * MiB;  // beyond the default working-set minimum: VirtualLock needs it raised
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  ASSERT_TRUE(mapping.mapping.status.ok());
  os::Status status = os::populate_write(mapping.bytes(), size);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(mapping.bytes()[size - 1], 0);
}
