// Streaming attribution on hand-made records: every number here is known.
#include "trace/attribution/attribution.hpp"

#include <cstring>

#include "trace/unwind/python_frames.hpp"
#include "python_block.hpp"

#include <gtest/gtest.h>

namespace memcost::trace {
namespace {

using trace::Fault;
using trace::MappingCall;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kBase = 0x7F0000000000ULL;
constexpr int kPid = 7;

MappingCall call(CallKind kind, std::uint64_t exit_ns, std::initializer_list<std::uint64_t> args, std::uint64_t result,
                 std::uint32_t stack = 1, std::uint64_t duration_ns = 1000, int pid = kPid) {
  MappingCall made;
  made.kind = kind;
  made.pid = made.tid = pid;
  made.enter_ns = exit_ns - duration_ns;
  made.exit_ns = exit_ns;
  std::size_t i = 0;
  for (std::uint64_t value : args) made.args[i++] = value;
  made.result = static_cast<std::int64_t>(result);
  made.stack = stack;
  return made;
}

void touch(Attribution& attribution, std::uint64_t start, std::uint64_t pages, std::uint64_t time_ns,
           std::uint32_t stack = 2, int pid = kPid, int tid = kPid) {
  for (std::uint64_t i = 0; i < pages; ++i) attribution.fault(Fault{pid, tid, time_ns + i, start + i * kPage, stack, true});
}

// Faults per allocation origin (stack, call) and page kind.
std::uint64_t faults_of(const Attribution& attribution, std::uint32_t stack, int call, bool huge) {
  std::uint64_t total = 0;
  for (const auto& [key, count] : attribution.faults()) {
    if (key.allocation_stack == stack && key.allocation_call == call && key.huge == huge) total += count;
  }
  return total;
}

const int kMmap = static_cast<int>(CallKind::mmap);

TEST(Attribution, FaultsGoToTheMappingLiveAtTheirMoment) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase, 1));
  touch(attribution, kBase, 100, 2'000);
  attribution.call(call(CallKind::munmap, 10'000, {kBase, kMiB}, 0));
  attribution.call(call(CallKind::mmap, 15'000, {0, kMiB, 3, 0x22}, kBase, 3));
  touch(attribution, kBase, 50, 20'000);
  touch(attribution, kBase + 8 * kMiB, 1, 30'000);
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 100U);
  EXPECT_EQ(faults_of(attribution, 3, kMmap, false), 50U);
  EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 1U);
  EXPECT_EQ(attribution.origins().at({1, kMmap}).freed, 1U);
  EXPECT_EQ(attribution.origins().at({3, kMmap}).freed, 0U);
  EXPECT_EQ(attribution.faults_seen(), 151U);
}

// Calls made while their thread had released the GIL come with stacks of their own (5 and 6),
// which the unwinder says are stack 1 once the thread sent its Python frames: one origin, whose
// growth is seen (the second outgrew the first).
TEST(Attribution, CallsOnStacksSaidToBeTheSameAreOneOrigin) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase, 5));
  attribution.call(call(CallKind::mmap, 2'000, {0, 2 * kMiB, 3, 0x22}, kBase + 4 * kMiB, 6));
  touch(attribution, kBase, 10, 3'000);
  attribution.same_stack(5, 1);
  attribution.same_stack(6, 1);
  attribution.call(call(CallKind::munmap, 10'000, {kBase, kMiB}, 0));
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 10U);
  EXPECT_EQ(attribution.origins().at({1, kMmap}).made, 2U);
  EXPECT_EQ(attribution.origins().at({1, kMmap}).outgrown.freed, 1U);
  EXPECT_EQ(attribution.origins().count({5, kMmap}) + attribution.origins().count({6, kMmap}), 0U);
}

// A region's counts from the kernel: `pages` page numbers (within the region) that faulted once.
trace::RegionFaults region_counts(std::uint64_t start, std::initializer_list<std::uint64_t> pages, std::uint64_t last_ns,
                                  std::uint64_t extra = 0, int tid = kPid) {
  trace::RegionFaults counts;
  counts.pid = kPid;
  counts.last_ns = last_ns;
  counts.start = start;
  for (std::uint64_t page : pages) counts.pages[page / 64] |= 1ULL << (page % 64);
  counts.faults = pages.size() + extra;
  counts.first_tid = tid;
  return counts;
}

TEST(Attribution, ARegionCountedInTheKernelIsSplitBetweenItsMappingsByPage) {
  // A 1 MiB and a 512 KiB mapping share the first 2 MiB region; the count says which pages faulted.
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::mmap, 1'100, {0, kMiB / 2, 3, 0x22}, kBase + kMiB, 3));
  // Pages 0-9 of the first, 256-258 of the second, page 500 in no mapping; page 1 faulted twice.
  attribution.region_faults(region_counts(kBase, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 256, 257, 258, 500}, 5'000, 1));
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 11U);  // its 10 pages and the extra fault (the first mapping's)
  EXPECT_EQ(faults_of(attribution, 3, kMmap, false), 3U);
  EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 1U);
  EXPECT_EQ(attribution.faults_seen(), 15U);
}

// Kernel fault time per key: the sum of what the region deliveries shared out to it.
FaultTime time_of(const Attribution& attribution, std::uint32_t stack, int call) {
  FaultTime total;
  for (const auto& [key, time] : attribution.fault_time()) {
    if (key.allocation_stack != stack || key.allocation_call != call) continue;
    total.timed_faults += time.timed_faults;
    total.timings_ended += time.timings_ended;
    total.kernel_ns += time.kernel_ns;
    total.kernel_ns_squares += time.kernel_ns_squares;
  }
  return total;
}

TEST(Attribution, ARegionsTimedFaultsAreSharedByTheFaultsEachMappingTookThere) {
  // As above: 15 faults, 11 the first mapping's, 3 the second's, 1 outside; 3 timed, 2 ended, 6 µs.
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::mmap, 1'100, {0, kMiB / 2, 3, 0x22}, kBase + kMiB, 3));
  trace::RegionFaults counts = region_counts(kBase, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 256, 257, 258, 500}, 5'000, 1);
  counts.timed_faults = 3;
  counts.timings_ended = 2;
  counts.fault_ns = 6'000;
  counts.fault_ns_squares = 2 * 187 * 187;
  attribution.region_faults(counts);
  // A timed fault's page count updated after the region was read: time alone, to the mapping at its start.
  trace::RegionFaults late = region_counts(kBase, {}, 6'000);
  late.timings_ended = 1;
  late.fault_ns = 1'500;
  attribution.region_faults(late);
  attribution.finish();
  const FaultTime first = time_of(attribution, 1, kMmap), second = time_of(attribution, 3, kMmap);
  const FaultTime outside = time_of(attribution, 0, kOutside);
  EXPECT_DOUBLE_EQ(first.timed_faults, 3.0 * 11 / 15);
  EXPECT_DOUBLE_EQ(second.timed_faults, 3.0 * 3 / 15);
  EXPECT_DOUBLE_EQ(outside.timed_faults, 3.0 / 15);
  EXPECT_DOUBLE_EQ(first.kernel_ns, 6'000.0 * 11 / 15 + 1'500);
  EXPECT_DOUBLE_EQ(second.kernel_ns, 6'000.0 * 3 / 15);
  EXPECT_DOUBLE_EQ(first.timings_ended + second.timings_ended + outside.timings_ended, 3.0);
  EXPECT_DOUBLE_EQ(first.kernel_ns_squares + second.kernel_ns_squares + outside.kernel_ns_squares, 2.0 * 187 * 187);
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 11U);  // the time alone adds no fault
}

TEST(Attribution, ARegionIsChargedToTheMappingsOfItsLastFaultsMoment) {
  // The same address mapped, touched, unmapped and mapped again: each generation's region goes to
  // the mapping live when it was counted, whenever it is delivered.
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, 2 * kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::munmap, 10'000, {kBase, 2 * kMiB}, 0));
  attribution.call(call(CallKind::mmap, 15'000, {0, 2 * kMiB, 3, 0x22}, kBase, 3));
  attribution.region_faults(region_counts(kBase, {5, 6}, 20'000));
  attribution.region_faults(region_counts(kBase, {0, 1, 2}, 5'000));  // delivered late: an earlier generation
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 3U);
  EXPECT_EQ(faults_of(attribution, 3, kMmap, false), 2U);
}

TEST(Attribution, ARegionsSingleFaultInAnAdvisedMappingIsAHugePage) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, 4 * kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::madvise, 1'500, {kBase, 4 * kMiB, 14}, 0));
  attribution.region_faults(region_counts(kBase, {0}, 2'000));
  attribution.region_faults(region_counts(kBase + 2 * kMiB, {3, 4}, 2'000));
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, true), 1U);
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 2U);
}

// An origin whose mappings are of a file or a device (mmap without MAP_ANONYMOUS: a library, a
// driver's memory) says so: no huge-page advice can apply to it.
TEST(Attribution, AnOriginOfAFilesOrADevicesMemorySaysSo) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, 4 * kMiB, 3, 0x22}, kBase, 1));                       // private, anonymous
  attribution.call(call(CallKind::mmap, 2'000, {0, 4 * kMiB, 3, 0x01, 5, 0}, kBase + 8 * kMiB, 2));       // shared, fd 5
  attribution.finish();
  EXPECT_FALSE(attribution.origins().at({1, kMmap}).file_backed);
  EXPECT_TRUE(attribution.origins().at({2, kMmap}).file_backed);
}

// A system call's faults taken without an exception (MAP_POPULATE, mlock, a driver pinning).
trace::CallFaults call_faults(long syscall, std::uint64_t exit_ns, std::uint64_t start, std::uint64_t length,
                              std::uint64_t faults, std::uint32_t stack = 9) {
  return trace::CallFaults{kPid, kPid, exit_ns - 500, exit_ns, syscall, start, length, faults, stack};
}

// Faults per (allocation origin, touching stack, page kind).
std::uint64_t faults_touched(const Attribution& attribution, std::uint32_t stack, int call, std::uint32_t touch, bool huge) {
  std::uint64_t total = 0;
  for (const auto& [key, count] : attribution.faults()) {
    if (key.allocation_stack == stack && key.allocation_call == call && key.touch_stack == touch && key.huge == huge) {
      total += count;
    }
  }
  return total;
}

constexpr long kSysMadvise = 28, kSysMlock = 149, kSysMmap = 9, kSysIoctl = 16;

TEST(Attribution, ASystemCallsFaultsGoToTheMappingsInItsRangeTouchedByTheCall) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, 8 * kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::mmap, 2'000, {0, 2 * kMiB, 3, 0x22}, kBase + 8 * kMiB, 2));
  // madvise(MADV_POPULATE_WRITE) over all of the first and half of the second: 2,304 base pages.
  attribution.call_faults(call_faults(kSysMadvise, 5'000, kBase, 9 * kMiB, 2304));
  attribution.call_faults(call_faults(kSysIoctl, 6'000, 0, 0, 40, 10));  // a driver's pinning: no range
  attribution.finish();
  EXPECT_EQ(faults_touched(attribution, 1, kMmap, 9, false), 2048U);  // by size: 8 of the 9 MiB
  EXPECT_EQ(faults_touched(attribution, 2, kMmap, 9, false), 256U);
  EXPECT_EQ(faults_touched(attribution, 0, kOutside, 10, false), 40U);
  EXPECT_EQ(attribution.faults_seen(), 2344U);
  EXPECT_EQ(attribution.faults_in_calls(), 2344U);
  const auto& madvise = attribution.calls_faulting().at({9, kSysMadvise});
  EXPECT_EQ(madvise.calls, 1U);
  EXPECT_EQ(madvise.faults, 2304U);
  EXPECT_EQ(madvise.call_ns, 500U);
}

TEST(Attribution, APopulatedHugePageRegionIsOneFaultAndAHugePage) {
  Attribution attribution(ThpMode::always);
  attribution.call(call(CallKind::mmap, 1'000, {0, 8 * kMiB, 3, 0x22}, kBase, 1));
  attribution.call_faults(call_faults(kSysMlock, 5'000, kBase, 8 * kMiB, 4));  // mlock on THP: one fault a 2 MiB region
  attribution.finish();
  EXPECT_EQ(faults_touched(attribution, 1, kMmap, 9, true), 4U);
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 0U);
}

TEST(Attribution, AMappingCallsFaultsThatArriveBeforeItsRecordWaitForIt) {
  // mmap(MAP_POPULATE): the faults' record and the call's own record are taken at the same return by
  // two programs, the call's a few microseconds later.
  Attribution attribution(ThpMode::madvise);
  attribution.call_faults(call_faults(kSysMmap, 1'000, kBase, 4 * kMiB, 1024));
  attribution.call(call(CallKind::mmap, 1'012, {0, 4 * kMiB, 3, 0x8022}, kBase, 1));
  attribution.call_faults(call_faults(kSysMmap, 9'000, kBase + 64 * kMiB, 4 * kMiB, 7));  // its record was lost
  attribution.finish();
  EXPECT_EQ(faults_touched(attribution, 1, kMmap, 9, false), 1024U);
  EXPECT_EQ(faults_touched(attribution, 0, kOutside, 9, false), 7U);
}

TEST(Attribution, TouchingSamplesAreKeptApartFromTheCounts) {
  // Counted in the kernel, perf's fault samples only say which stacks touched, and for how many.
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, 2 * kMiB, 3, 0x22}, kBase, 1));
  Fault sample{kPid, kPid, 2'000, kBase + 5 * kPage, 9, true};
  sample.counted = false;
  sample.period = 40;
  attribution.fault(sample);
  attribution.region_faults(region_counts(kBase, {0, 1, 2, 3, 4, 5}, 3'000));
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 6U);
  ASSERT_EQ(attribution.touch_samples().size(), 1U);
  const auto& [key, touch] = *attribution.touch_samples().begin();
  EXPECT_EQ(key.touch_stack, 9U);
  EXPECT_EQ(key.allocation_stack, 1U);
  EXPECT_EQ(touch.samples, 1U);
  EXPECT_EQ(touch.faults, 40U);
  EXPECT_EQ(attribution.touch_samples_seen(), 1U);
}

TEST(Attribution, RecordsDeliveredOutOfOrderAreReplayedInTimeOrder) {
  // Faults come before the call that preceded them (another CPU's buffer drained first).
  Attribution attribution(ThpMode::madvise);
  touch(attribution, kBase, 10, 5'000);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase));
  attribution.settle(4'000);  // the faults' moment has not settled: they wait
  EXPECT_EQ(attribution.faults().size(), 0U);
  touch(attribution, kBase + 100 * kPage, 5, 8'000);
  attribution.call(call(CallKind::munmap, 7'000, {kBase, kMiB}, 0));
  attribution.settle(10'000);
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 10U);  // known at once: the mapping ended
  EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 5U);  // after the munmap
}

// node frees a buffer on one thread while another allocates the next: the free's thread can be
// preempted after the memory is gone and before it reads the clock, and the new buffer, at the
// same address, returns first. Its record may even come after the new one has been settled.
TEST(Attribution, AFreeTakesEffectAtItsEntryAndNeverRemovesAMappingMadeAfterIt) {
  for (const bool free_recorded_late : {false, true}) {
    Attribution attribution(ThpMode::madvise);
    const MappingCall freed = call(CallKind::free, 9'000, {kBase}, 0, 1, 4'000);  // entered at 5'000
    attribution.call(call(CallKind::malloc, 1'000, {0, 64 * kMiB}, kBase, 1));
    touch(attribution, kBase, 10, 2'000);
    attribution.call(call(CallKind::malloc, 7'000, {0, 64 * kMiB}, kBase, 3));
    touch(attribution, kBase, 20, 8'000);
    if (free_recorded_late) attribution.settle(8'500);
    attribution.call(freed);
    touch(attribution, kBase + 20 * kPage, 5, 10'000);
    attribution.finish();
    const int malloc = static_cast<int>(CallKind::malloc);
    EXPECT_EQ(faults_of(attribution, 1, malloc, false), 10U) << free_recorded_late;
    EXPECT_EQ(faults_of(attribution, 3, malloc, false), 25U) << free_recorded_late;
    EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 0U) << free_recorded_late;
    // In order, the first buffer was freed; recorded late, the second displaced it first.
    EXPECT_EQ(attribution.origins().at({1, malloc}).freed, free_recorded_late ? 0U : 1U);
    EXPECT_EQ(attribution.origins().at({3, malloc}).freed, 0U) << free_recorded_late;
  }
}

TEST(Attribution, AMunmapRecordedLateLeavesAMappingMadeAfterItBeganAlone) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::mmap, 7'000, {0, kMiB, 3, 0x22}, kBase, 3));
  touch(attribution, kBase, 8, 8'000);
  attribution.settle(8'500);
  attribution.call(call(CallKind::munmap, 9'000, {kBase, kMiB}, 0, 1, 4'000));
  touch(attribution, kBase + 8 * kPage, 2, 10'000);
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 3, kMmap, false), 10U);
  EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 0U);
}

TEST(Attribution, APartialMunmapSplitsTheMappingAndMremapMovesIt) {
  Attribution attribution(ThpMode::madvise);
  const std::uint64_t moved = kBase + 64 * kMiB;
  attribution.call(call(CallKind::mmap, 1'000, {0, 2 * kMiB, 3, 0x22}, kBase));
  touch(attribution, kBase + kMiB, 10, 4'000);
  attribution.call(call(CallKind::munmap, 10'000, {kBase + kMiB, kMiB}, 0, 1, 5'000));
  attribution.call(call(CallKind::mremap, 20'000, {kBase, kMiB, 2 * kMiB, 1}, moved, 1, 7'000));
  touch(attribution, moved, 20, 50'000);
  touch(attribution, kBase, 1, 60'000);  // the old place is no longer mapped
  attribution.finish();
  const OriginSummary& origin = attribution.origins().at({1, kMmap});
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 30U);
  EXPECT_EQ(origin.made, 1U);
  EXPECT_EQ(origin.freed_bytes, kMiB);
  EXPECT_EQ(origin.largest_bytes, 3 * kMiB);
  EXPECT_EQ(origin.free_ns, 5'000U + 7'000U);
  EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 1U);
}

TEST(Attribution, BrkGrowthIsAMappingAndMadviseDontneedFreesPagesNotTheMapping) {
  Attribution attribution(ThpMode::madvise);
  const std::uint64_t heap = 0x550000000000ULL;
  attribution.call(call(CallKind::brk, 1'000, {0}, heap));
  attribution.call(call(CallKind::brk, 2'000, {heap + 4 * kMiB}, heap + 4 * kMiB));
  touch(attribution, heap, 64, 5'000);
  attribution.call(call(CallKind::madvise, 9'000, {heap, kMiB, 4}, 0, 1, 3'000));
  attribution.finish();
  const OriginSummary& origin = attribution.origins().at({1, static_cast<int>(CallKind::brk)});
  EXPECT_EQ(origin.made, 1U);
  EXPECT_EQ(origin.freed, 0U);
  EXPECT_EQ(origin.bytes, 4 * kMiB);
  EXPECT_EQ(origin.freed_bytes, kMiB);
  EXPECT_EQ(origin.free_ns, 3'000U);
  EXPECT_EQ(faults_of(attribution, 1, static_cast<int>(CallKind::brk), false), 64U);
}

std::uint64_t thp_faults(ThpMode mode, bool advised) {
  Attribution attribution(mode);
  attribution.call(call(CallKind::mmap, 1'000, {0, 16 * kMiB, 3, 0x22}, kBase));
  if (advised) attribution.call(call(CallKind::madvise, 2'000, {kBase, 16 * kMiB, 14}, 0));
  for (int region = 0; region < 8; ++region) {
    attribution.fault(Fault{kPid, kPid, 5'000ULL + region, kBase + region * 2 * kMiB, 2, true});
  }
  attribution.fault(Fault{kPid, kPid, 6'000, kBase + kPage, 2, true});  // a second fault in region 0: base pages
  attribution.finish();
  return faults_of(attribution, 1, kMmap, true);
}

TEST(Attribution, AWindowCountsTheFaultsOfLiveMappingsOnceWhateverComesAfter) {
  // A long trace's window ends while the mapping lives: its one-fault regions are counted then
  // (huge: advised, THP madvise), once; a later fault in such a region adds itself only.
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, 8 * kMiB, 3, 0x22}, kBase, 1));
  attribution.call(call(CallKind::madvise, 1'500, {kBase, 8 * kMiB, 14}, 0));  // MADV_HUGEPAGE
  for (std::uint64_t region = 0; region < 4; ++region) touch(attribution, kBase + region * 2 * kMiB, 1, 2'000 + region);
  attribution.settle(10'000);
  EXPECT_EQ(faults_of(attribution, 1, kMmap, true), 0U);  // not known yet
  attribution.count_live();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, true), 4U);
  touch(attribution, kBase + kPage, 1, 20'000);  // a second fault in region 0
  attribution.count_live();
  attribution.finish();
  EXPECT_EQ(faults_of(attribution, 1, kMmap, true), 4U);
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 1U);
  EXPECT_EQ(attribution.faults_seen(), 5U);
}

TEST(Attribution, OneFaultPer2MbRegionIsAHugePageOnlyWhereHugePagesWerePossible) {
  EXPECT_EQ(thp_faults(ThpMode::madvise, false), 0U);
  EXPECT_EQ(thp_faults(ThpMode::madvise, true), 7U);
  EXPECT_EQ(thp_faults(ThpMode::always, false), 7U);
  EXPECT_EQ(thp_faults(ThpMode::never, true), 0U);
}

TEST(Attribution, AForkedChildFaultsInItsParentsMappingsAndEachProgramIsCountedApart) {
  Attribution attribution(ThpMode::madvise);
  attribution.process({trace::ProcessChange::start, kPid, 0, 0, "parent"});
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase));
  attribution.process({trace::ProcessChange::fork, 8, kPid, 2'000, "parent"});
  touch(attribution, kBase, 16, 3'000, 2, 8, 8);  // copy-on-write in the child
  attribution.call(call(CallKind::munmap, 4'000, {kBase, kMiB}, 0));  // the parent lets go; the child holds it
  touch(attribution, kBase + 16 * kPage, 4, 5'000, 2, 8, 8);
  attribution.process({trace::ProcessChange::exec, 8, 0, 6'000, "child"});
  touch(attribution, kBase, 2, 7'000, 2, 8, 8);  // after exec: a new program, nothing mapped here yet
  attribution.finish();
  std::uint64_t first = 0, second = 0, outside = 0;
  for (const auto& [key, count] : attribution.faults()) {
    if (key.pid != 8) continue;
    if (key.allocation_call == kOutside) outside += count;
    (key.program == 0 ? first : second) += count;
  }
  EXPECT_EQ(faults_of(attribution, 1, kMmap, false), 20U);
  EXPECT_EQ(first, 20U);
  EXPECT_EQ(second, 2U);
  EXPECT_EQ(outside, 2U);  // an exec'd program starts with an empty address space
}

TEST(Attribution, MemoryStaysBoundedOverManyCycles) {
  Attribution attribution(ThpMode::madvise);
  std::uint64_t time = 1'000;
  for (int cycle = 0; cycle < 2000; ++cycle) {
    attribution.call(call(CallKind::mmap, time, {0, 8 * kMiB, 3, 0x22}, kBase));
    touch(attribution, kBase, 64, time + 10);
    time += 1'000;
    attribution.call(call(CallKind::munmap, time, {kBase, 8 * kMiB}, 0, 1, 10));
    time += 100;
    if (cycle % 50 == 0) attribution.settle(time);
  }
  attribution.finish();
  EXPECT_LE(attribution.most_live(), 1U);
  EXPECT_LE(attribution.most_pending(), 51U * 66U);
  EXPECT_EQ(attribution.faults().size(), 1U);
  const OriginSummary& origin = attribution.origins().at({1, kMmap});
  EXPECT_EQ(origin.freed, 2000U);
  EXPECT_EQ(origin.by_size.at(8 * kMiB).freed, 2000U);
  EXPECT_EQ(origin.by_size.at(8 * kMiB).faults_base, 2000U * 64U);
}

TEST(Attribution, AFailedCallChangesNothing) {
  Attribution attribution(ThpMode::madvise);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, static_cast<std::uint64_t>(-12)));  // -ENOMEM
  touch(attribution, kBase, 3, 2'000);
  attribution.finish();
  EXPECT_TRUE(attribution.origins().empty());
  EXPECT_EQ(faults_of(attribution, 0, kOutside, false), 3U);
}

}  // namespace
}  // namespace memcost::trace

namespace memcost::trace {
namespace {

TEST(Attribution, ABufferOutgrownAndCopiedIsCountedAsGrowthAndSameSizeChurnIsNot) {
  Attribution growing(ThpMode::never);
  std::uint64_t time = 1'000, size = kMiB, address = kBase;
  std::uint64_t previous = 0, previous_size = 0;
  for (int step = 0; step < 5; ++step, size *= 2) {
    growing.call(call(CallKind::mmap, time, {0, size, 3, 0x22}, address));
    touch(growing, address, size / kPage, time + 1);  // the copy writes the new buffer
    time += size / kPage + 10;
    if (previous) growing.call(call(CallKind::munmap, time++, {previous, previous_size}, 0, 1, 5));
    previous = address;
    previous_size = size;
    address += 2 * size;
  }
  growing.finish();
  const OriginSummary& grown = growing.origins().at({1, kMmap});
  EXPECT_EQ(grown.outgrown.freed, 4U);  // 1, 2, 4 and 8 MiB outgrown; 16 MiB kept
  EXPECT_EQ(grown.outgrown.faults_base, (1U + 2U + 4U + 8U) * 256U);
  EXPECT_EQ(grown.grown_to_bytes, 16 * kMiB);

  Attribution churning(ThpMode::never);
  time = 1'000;
  for (int frame = 0; frame < 5; ++frame) {
    churning.call(call(CallKind::mmap, time, {0, 8 * kMiB, 3, 0x22}, kBase));
    touch(churning, kBase, 16, time + 1);
    churning.call(call(CallKind::munmap, time + 100, {kBase, 8 * kMiB}, 0, 1, 50));
    time += 200;
  }
  churning.finish();
  EXPECT_EQ(churning.origins().at({1, kMmap}).outgrown.freed, 0U);
}

}  // namespace
}  // namespace memcost::trace

namespace memcost::trace {
namespace {

TEST(Attribution, AChildsExecMayArriveBeforeItsForkAndStillStartsItsSecondProgram) {
  // The fork was recorded in one CPU's buffer, the child's exec in another's, read first.
  Attribution attribution(ThpMode::never);
  attribution.process({ProcessChange::start, kPid, 0, 0, "sh"});
  attribution.process({ProcessChange::exec, 8, 0, 2'000, "prog_a"});
  attribution.process({ProcessChange::fork, 8, kPid, 1'000, "sh"});
  attribution.call(call(CallKind::mmap, 3'000, {0, kMiB, 3, 0x22}, kBase, 1, 1000, 8));
  touch(attribution, kBase, 10, 4'000, 2, 8, 8);
  attribution.finish();
  std::uint64_t second_program = 0;
  for (const auto& [key, count] : attribution.faults()) {
    if (key.pid == 8 && key.program == 1) second_program += count;
  }
  EXPECT_EQ(second_program, 10U);  // programs of pid 8: the fork (0), then prog_a (1)
}

TEST(Attribution, CpuSamplesInTheFaultHandlerGoToTheFaultTheirThreadTookLast) {
  Attribution attribution(ThpMode::never);
  attribution.call(call(CallKind::mmap, 1'000, {0, kMiB, 3, 0x22}, kBase, 1));
  attribution.cpu_sample({kPid, 9, 1'500, true, false, false});   // thread 9 has taken no fault yet
  touch(attribution, kBase, 10, 2'000, 2, kPid, kPid);              // stack 2 touches, thread kPid
  attribution.cpu_sample({kPid, kPid, 2'005, true, true, false});  // clearing a page
  attribution.cpu_sample({kPid, kPid, 2'006, true, false, false});
  attribution.cpu_sample({kPid, kPid, 2'007, true, false, true});  // perf recording the fault: the tracer's
  attribution.cpu_sample({kPid, kPid, 2'008, false, false, false}); // a system call, not a fault
  touch(attribution, kBase + kMiB / 2, 1, 3'000, 5, kPid, kPid);
  attribution.cpu_sample({kPid, kPid, 3'001, true, true, false});
  attribution.finish();
  std::uint64_t by_first = 0, by_second = 0, zeroing = 0;
  for (const auto& [key, time] : attribution.fault_time()) {
    EXPECT_EQ(key.allocation_stack, 1U);
    (key.touch_stack == 2 ? by_first : by_second) += time.samples;
    zeroing += time.zeroing;
  }
  EXPECT_EQ(by_first, 2U);
  EXPECT_EQ(by_second, 1U);
  EXPECT_EQ(zeroing, 2U);
  EXPECT_EQ(attribution.cpu_samples(), 6U);
  EXPECT_EQ(attribution.cpu_samples_unmatched(), 1U);
  EXPECT_EQ(attribution.cpu_samples_tracing(), 1U);
}

Frame native(const std::string& function) {
  Frame frame;
  frame.function = function;
  frame.module = "/usr/bin/python3.11";
  return frame;
}

TEST(PythonFrames, TheyStandWhereTheEvalLoopRuns) {
  const std::string block = python_block({{14, "/app/run.py", "filled"}, {25, "/app/run.py", "<module>"}});
  const auto at = reinterpret_cast<const std::uint8_t*>(block.data());
  ASSERT_EQ(detail::python_block_at(at, block.size()).size(), block.size());
  EXPECT_TRUE(detail::python_block_at(at, block.size() - 1).empty());  // cut short: not a block
  const std::vector<Frame> python = detail::python_frames(block);
  ASSERT_EQ(python.size(), 2U);
  EXPECT_EQ(python[1].file, "/app/run.py");  // the repeated file, from the frame before
  EXPECT_EQ(python[1].line, 25);
  EXPECT_EQ(python[0].kind, FrameKind::python);
  const std::vector<Frame> merged = detail::merge_python(
      {native("malloc"), native("PyArray_New"), native("_PyEval_EvalFrameDefault"), native("cfunction_call"),
       native("_PyEval_EvalFrameDefault"), native("Py_RunMain"), native("main")},
      python);
  std::vector<std::string> names;
  for (const Frame& frame : merged) names.push_back(frame.function);
  EXPECT_EQ(names, (std::vector<std::string>{"malloc", "PyArray_New", "filled", "<module>", "Py_RunMain", "main"}));
  // A native stack cut short before any eval loop: the Python frames go after it.
  EXPECT_EQ(detail::merge_python({native("malloc")}, python).back().function, "<module>");
}

}  // namespace
}  // namespace memcost::trace