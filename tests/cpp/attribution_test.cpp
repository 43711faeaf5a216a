// Streaming attribution on hand-made records: every number here is known.
#include "trace/attribution.hpp"

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

TEST(Attribution, APartialMunmapSplitsTheMappingAndMremapMovesIt) {
  Attribution attribution(ThpMode::madvise);
  const std::uint64_t moved = kBase + 64 * kMiB;
  attribution.call(call(CallKind::mmap, 1'000, {0, 2 * kMiB, 3, 0x22}, kBase));
  touch(attribution, kBase + kMiB, 10, 5'000);
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
    attribution.call(call(CallKind::munmap, time, {kBase, 8 * kMiB}, 0));
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
    if (previous) growing.call(call(CallKind::munmap, time++, {previous, previous_size}, 0));
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
    churning.call(call(CallKind::munmap, time + 100, {kBase, 8 * kMiB}, 0));
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

}  // namespace
}  // namespace memcost::trace
