// The measurement core against the real kernel: fault counts, CPU accounting, backing.
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "memcost/measure.hpp"
#include "skip_or_fail.hpp"
#include "test_support.hpp"

using namespace memcost;
using namespace memcost::test;

TEST(Measure, ClockIsMonotonicAndNanosecond) {
  auto a = measure::now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto b = measure::now_ns();
  EXPECT_GE(b - a, 2'000'000U);
  EXPECT_LT(b - a, 2'000'000'000U);
}

TEST(Measure, TouchingBasePagesCountsOneMinorFaultPerPage) {
  constexpr std::size_t size = 64 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  ASSERT_TRUE(mapping.mapping.status.ok());
  auto before = measure::take_snapshot({.machine = false});
  std::memset(mapping.bytes(), 1, size);
  auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
  double expected = static_cast<double>(size / os::base_page_size());
  EXPECT_NEAR(static_cast<double>(interval.minor_faults), expected, expected * 0.01);
  EXPECT_EQ(interval.major_faults, 0U);
}

TEST(Measure, PerfPageFaultCounterAgreesWithRusage) {
  measure::PerfCounters counters;
  if (!counters.availability().at("page_faults").empty()) GTEST_SKIP() << counters.availability().at("page_faults");
  constexpr std::size_t size = 16 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  counters.start();
  std::memset(mapping.bytes(), 1, size);
  counters.stop();
  auto faults = counters.read().at("page_faults");
  ASSERT_TRUE(faults.has_value());
  double expected = static_cast<double>(size / os::base_page_size());
  EXPECT_NEAR(static_cast<double>(*faults), expected, expected * 0.02);
}

TEST(Measure, UnavailableCountersSayWhy) {
  measure::PerfCounters counters;
  counters.start();
  counters.stop();
  auto values = counters.read();
  const auto availability = counters.availability();
  ASSERT_FALSE(availability.empty());  // every counter is listed, available or not
  for (const auto& [name, reason] : availability) {
    ASSERT_TRUE(values.count(name)) << name << " is listed but not read";
    // Available: a value. Unavailable: a reason and no value.
    EXPECT_EQ(values.at(name).has_value(), reason.empty()) << name << ": " << reason;
  }
}

TEST(Measure, FaultingMemoryRaisesProcessSystemTime) {
  constexpr std::size_t size = 256 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  auto before = measure::take_snapshot();
  std::memset(mapping.bytes(), 1, size);
  auto interval = measure::between(before, measure::take_snapshot());
  // 65,536 faults, each zeroing a page in the kernel: several milliseconds at the very least.
  EXPECT_GT(interval.process_system_ns, 5'000'000U);
}

TEST(Measure, MachineCountersMove) {
  auto before = measure::take_snapshot({.machine = true, .kernel_threads = true});
  ASSERT_TRUE(before.machine.has_value());
  ASSERT_TRUE(before.kernel_threads.has_value());
  auto until = measure::now_ns() + 50'000'000;
  volatile std::uint64_t spin = 0;
  while (measure::now_ns() < until) spin = spin + 1;
  auto interval = measure::between(before, measure::take_snapshot({.machine = true, .kernel_threads = true}));
  ASSERT_TRUE(interval.machine.has_value());
  // /proc/stat ticks at USER_HZ (10 ms): 50 ms of spinning shows as busy time.
  EXPECT_GE(interval.machine->busy_ns(), 20'000'000U);
  EXPECT_GT(interval.machine->busy_ns() + interval.machine->idle_ns, 0U);
  EXPECT_TRUE(interval.elsewhere_ns().has_value());
}

TEST(Measure, BackingOfThpRangeIsHuge) {
  if (!thp_usable()) GTEST_SKIP() << "THP is 'never' here";
  AlignedThpRange range(4 * MiB);
  ASSERT_EQ(madvise(range.begin, range.size_bytes, MADV_HUGEPAGE), 0);
  std::memset(range.begin, 1, range.size_bytes);
  auto backing = measure::backing_of(range.begin, range.size_bytes);
  ASSERT_TRUE(backing.has_value());
  EXPECT_EQ(backing->anon_huge_bytes, 4 * MiB);
  EXPECT_GT(backing->huge_fraction(), 0.5);
}

TEST(Measure, BudgetIsAFractionOfUsableMemory) {
  auto budget = measure::memory_budget();
  EXPECT_GT(budget.total_bytes, 0U);
  EXPECT_LE(budget.usable_bytes, budget.available_bytes);
  EXPECT_NEAR(static_cast<double>(budget.budget_bytes), 0.8 * static_cast<double>(budget.usable_bytes), 1.0);
  auto half = measure::memory_budget(0.5);
  EXPECT_LT(half.budget_bytes, budget.budget_bytes);
}

// tracefs for the length of a test, as root, when a fresh boot left it unmounted; unmounted after.
class ScopedTracefs {
 public:
  ScopedTracefs() {
    if (geteuid() == 0 && access("/sys/kernel/tracing/events", F_OK) != 0 &&
        access("/sys/kernel/debug/tracing/events", F_OK) != 0) {
      mounted_ = mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0;
    }
  }
  ~ScopedTracefs() {
    if (mounted_) umount2("/sys/kernel/tracing", MNT_DETACH);
  }

 private:
  bool mounted_ = false;
};

TEST(Measure, PageFaultTracepointCountsUserFaultsWhenPermitted) {
  ScopedTracefs tracefs;
  measure::PerfCounters counters;
  const std::string reason = counters.availability().at("exceptions:page_fault_user");
  if (!reason.empty()) MEMCOST_SKIP_OR_FAIL(reason);
  constexpr std::size_t size = 16 * MiB;
  ScopedMapping mapping(os::MapRequest{size, os::PageKind::base});
  counters.start();
  std::memset(mapping.bytes(), 1, size);
  counters.stop();
  auto faults = counters.read().at("exceptions:page_fault_user");
  ASSERT_TRUE(faults.has_value());
  double expected = static_cast<double>(size / os::base_page_size());
  EXPECT_NEAR(static_cast<double>(*faults), expected, expected * 0.02);
}

TEST(Measure, WorkInAnotherProcessIsChargedElsewhere) {
  auto before = measure::take_snapshot({.machine = true, .kernel_threads = false, .other_tasks = true});
  if (!before.other_tasks) GTEST_SKIP() << "no per-task schedstat here (CONFIG_SCHED_INFO off): /proc/stat fallback only";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto until = measure::now_ns() + 200'000'000;
    volatile std::uint64_t spin = 0;
    while (measure::now_ns() < until) spin = spin + 1;
    _exit(0);
  }
  // Read while the child still runs: an exited task takes its run time with it.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  auto interval = measure::between(before, measure::take_snapshot({.machine = true, .kernel_threads = false, .other_tasks = true}));
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(interval.elsewhere_ns().has_value());
  EXPECT_STREQ(interval.elsewhere_method(), "schedstat");
  EXPECT_GE(*interval.elsewhere_ns(), 100'000'000);
  // This process slept: its own CPU time is not counted as elsewhere.
  EXPECT_LT(interval.process_user_ns + interval.process_system_ns, 50'000'000U);
}

TEST(Measure, TasksThatExitOrAppearDoNotDistortWorkElsewhere) {
  measure::Snapshot before, after;
  before.other_tasks = {{{1, 100}, {2, 500'000}, {7, 40}}};
  // Task 2 (busy) exited, task 3 appeared, task 7's id was reused by a newer task.
  after.other_tasks = {{{1, 300}, {3, 50}, {7, 10}}};
  auto interval = measure::between(before, after);
  ASSERT_TRUE(interval.other_tasks_ns.has_value());
  EXPECT_EQ(*interval.other_tasks_ns, 200U + 50U + 10U);
  EXPECT_EQ(*interval.elsewhere_ns(), 260);
}
