// The perf ring-buffer reader on hand-made records in a buffer laid out as the kernel's: every
// field known, and records that wrap around the buffer's end.
#include "trace/perf/record_reader.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "collecting_sink.hpp"
#include "trace/sources/tracefs.hpp"

namespace memcost::trace {
namespace {


constexpr std::size_t kPage = 4096;
constexpr std::size_t kData = 4096;  // the data area: a power of two, as the kernel's
constexpr std::uint64_t kFaultId = 11, kEnterId = 12, kExitId = 13;

// A ring buffer in ordinary memory: the control page, then the data, written at `head`.
class FakeBuffer {
 public:
  explicit FakeBuffer(std::uint64_t start) : memory_(kPage + kData) {
    meta()->data_tail = start;
    meta()->data_head = start;
  }
  perf_event_mmap_page* meta() { return reinterpret_cast<perf_event_mmap_page*>(memory_.data()); }
  detail::RingBuffer ring() { return {-1, memory_.data(), memory_.size(), kData}; }

  // One record: header then the words given, as little-endian u64s.
  void put(std::uint32_t type, std::uint16_t misc, const std::vector<std::uint64_t>& words) {
    perf_event_header header{type, misc, static_cast<std::uint16_t>(sizeof(header) + words.size() * 8)};
    bytes(&header, sizeof(header));
    for (std::uint64_t word : words) bytes(&word, 8);
  }

 private:
  void bytes(const void* from, std::size_t size) {
    const auto* source = static_cast<const std::uint8_t*>(from);
    for (std::size_t i = 0; i < size; ++i) memory_[kPage + (meta()->data_head + i) % kData] = source[i];
    meta()->data_head += size;
  }
  std::vector<std::uint8_t> memory_;
};

std::uint64_t pid_tid(std::uint32_t pid, std::uint32_t tid) { return pid | (std::uint64_t{tid} << 32); }

// A raw_syscalls tracepoint's raw data: u32 size, then common fields (8 bytes), the system call's
// number (id, 8), then the fields (u64 each), padded so that the whole stays 8-byte aligned.
std::vector<std::uint64_t> raw(long number, const std::vector<std::uint64_t>& fields) {
  const std::uint32_t size = 4 + 16 + static_cast<std::uint32_t>(fields.size()) * 8;  // + 4 bytes of padding
  std::vector<std::uint8_t> bytes(4 + size, 0);
  std::memcpy(bytes.data(), &size, 4);
  std::memcpy(bytes.data() + 4 + 8, &number, 8);
  for (std::size_t i = 0; i < fields.size(); ++i) std::memcpy(bytes.data() + 4 + 16 + i * 8, &fields[i], 8);
  std::vector<std::uint64_t> words(bytes.size() / 8);
  std::memcpy(words.data(), bytes.data(), words.size() * 8);
  return words;
}

TEST(RecordReader, ReadsFaultsCallsAndLostRecordsAcrossTheBuffersEnd) {
  Options options;
  CollectingSink sink;
  detail::RecordReader reader(options, sink);
  constexpr std::uint64_t kFaultType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR;
  reader.events[kFaultId] = detail::Event{detail::EventKind::fault, kFaultType};
  reader.events[kEnterId] = detail::Event{detail::EventKind::enter, detail::kExitSampleType, 8, {16, 24}};
  reader.events[kExitId] = detail::Event{detail::EventKind::exit, detail::kExitSampleType, 8, {16}};
  FakeBuffer buffer(kData - 100);  // the third record straddles the end; the rest follow from the start
  for (std::uint64_t i = 0; i < 40; ++i) {
    buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, {kFaultId, pid_tid(7, 8), 1'000 + i, 0x7f0000000000 + i * 4096});
  }
  std::vector<std::uint64_t> enter = {kEnterId, pid_tid(7, 8), 2'000};
  for (std::uint64_t word : raw(SYS_munmap, {0x7f0000000000, 1 << 20})) enter.push_back(word);
  buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, enter);
  std::vector<std::uint64_t> exit = {kExitId, pid_tid(7, 8), 2'500};
  for (std::uint64_t word : raw(SYS_munmap, {0})) exit.push_back(word);
  buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, exit);
  // Another system call (were the kernel's filter not there) is no mapping call.
  std::vector<std::uint64_t> other = {kEnterId, pid_tid(7, 8), 2'600};
  for (std::uint64_t word : raw(SYS_read, {3, 0x7f0000000000})) other.push_back(word);
  buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, other);
  // LOST: the event's id and how many, then sample_id_all's pid/tid, time and identifier.
  buffer.put(PERF_RECORD_LOST, 0, {kFaultId, 5, pid_tid(7, 8), 3'000, kFaultId});
  reader.buffers.push_back(buffer.ring());

  reader.drain(true);

  ASSERT_EQ(sink.faults.size(), 40U);
  for (std::uint64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(sink.faults[i].address, 0x7f0000000000 + i * 4096) << i;
    EXPECT_EQ(sink.faults[i].time_ns, 1'000 + i);
    EXPECT_EQ(sink.faults[i].pid, 7);
    EXPECT_EQ(sink.faults[i].tid, 8);
    EXPECT_TRUE(sink.faults[i].user_mode);
    EXPECT_EQ(sink.faults[i].period, 1U);
  }
  ASSERT_EQ(sink.calls.size(), 1U);
  EXPECT_EQ(sink.calls[0].kind, CallKind::munmap);
  EXPECT_EQ(sink.calls[0].address(), 0x7f0000000000U);
  EXPECT_EQ(sink.calls[0].length(), 1U << 20);
  EXPECT_EQ(sink.calls[0].enter_ns, 2'000U);
  EXPECT_EQ(sink.calls[0].exit_ns, 2'500U);
  EXPECT_EQ(sink.calls[0].result, 0);
  EXPECT_EQ(reader.lost, 5U);
  EXPECT_EQ(buffer.meta()->data_tail, buffer.meta()->data_head);  // the space is given back
}

// A call's stack is unwound where the attribution keeps it (the memory it makes, advice that
// refuses huge pages); a munmap's, an mremap's or other advice's is only read for links to Python
// stacks (Unwinder::read_links), and the call carries none.
TEST(RecordReader, OnlyTheCallsWhoseStacksAreKeptAreUnwound) {
  Options options;
  CollectingSink sink;
  detail::RecordReader reader(options, sink);
  reader.events[kEnterId] = detail::Event{detail::EventKind::enter, detail::kEnterSampleType, 8, {16, 24, 32}};
  reader.events[kExitId] = detail::Event{detail::EventKind::exit, detail::kExitSampleType, 8, {16}};
  FakeBuffer buffer(0);
  struct Made {
    long number;
    std::uint64_t third;  // mmap's protection, madvise's advice
  };
  const std::vector<Made> calls = {{SYS_mmap, PROT_READ}, {SYS_munmap, 0}, {SYS_mremap, 1 << 21},
                                   {SYS_madvise, MADV_NORMAL}, {SYS_madvise, MADV_NOHUGEPAGE}, {SYS_brk, 0}};
  std::uint64_t time = 1'000;
  for (const Made& made : calls) {
    std::vector<std::uint64_t> enter = {kEnterId, pid_tid(getpid(), gettid()), time};
    for (std::uint64_t word : raw(made.number, {0x7f0000000000, 1 << 20, made.third})) enter.push_back(word);
    // The registers (bp, sp, ip), then a copy of 16 bytes of stack and its dynamic size.
    for (std::uint64_t word : {std::uint64_t{PERF_SAMPLE_REGS_ABI_64}, std::uint64_t{0}, std::uint64_t{0x7ffc0000},
                               std::uint64_t{0x1000}, std::uint64_t{16}, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{16}}) {
      enter.push_back(word);
    }
    buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, enter);
    std::vector<std::uint64_t> exit = {kExitId, pid_tid(getpid(), gettid()), time + 100};
    for (std::uint64_t word : raw(made.number, {0x7f0000000000})) exit.push_back(word);
    buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, exit);
    time += 1'000;
  }
  reader.buffers.push_back(buffer.ring());
  reader.drain(true);
  ASSERT_EQ(sink.calls.size(), calls.size());
  EXPECT_NE(sink.calls[0].stack, 0U);  // mmap: its allocation site
  EXPECT_EQ(sink.calls[1].stack, 0U);  // munmap
  EXPECT_EQ(sink.calls[2].stack, 0U);  // mremap: the mapping keeps its site
  EXPECT_EQ(sink.calls[3].stack, 0U);  // madvise(MADV_NORMAL): the preload library's link, if any
  EXPECT_NE(sink.calls[4].stack, 0U);  // madvise(MADV_NOHUGEPAGE): the site that refused huge pages
  EXPECT_NE(sink.calls[5].stack, 0U);  // brk: the heap's growth, or the preload library's marker
}

// The entry's two events (tracefs.hpp, kernel_calls): together they take every mapping call once,
// and a call whose stack anything reads (stack_names_call; madvise's link to a released Python
// stack) is among those that copy it.
std::set<long> calls_in(const std::string& filter) {
  std::set<long> numbers;
  std::istringstream words(filter);
  for (std::string word; words >> word;) {
    if (word != "id" && word != "==" && word != "||") numbers.insert(std::stol(word));
  }
  return numbers;
}

TEST(CallTracepoints, TheEntrysTwoEventsTakeEachCallOnceAndCopyEveryStackThatIsRead) {
  const std::set<long> copying = calls_in(detail::mapping_calls_filter(true));
  const std::set<long> not_copying = calls_in(detail::mapping_calls_filter(false));
  const std::set<long> all = calls_in(detail::mapping_calls_filter());
  EXPECT_EQ(all.size(), std::size(detail::kMappingCalls));
  std::set<long> both = copying;
  both.insert(not_copying.begin(), not_copying.end());
  EXPECT_EQ(both, all);
  EXPECT_EQ(both.size(), copying.size() + not_copying.size());  // none in both
  EXPECT_EQ(not_copying, (std::set<long>{SYS_munmap, SYS_mremap}));
  for (const auto& [number, kind] : detail::kMappingCalls) {
    for (std::uint64_t advice : {MADV_NORMAL, MADV_NOHUGEPAGE, MADV_HUGEPAGE, MADV_DONTNEED}) {
      const std::uint64_t args[6] = {0x7f0000000000, 1 << 20, advice, 0, 0, 0};
      EXPECT_TRUE(!detail::stack_names_call(kind, args) || copying.count(number)) << number << " " << advice;
    }
  }
  EXPECT_TRUE(copying.count(SYS_madvise));  // the preload library's madvise(NULL, 0, MADV_NORMAL) carries its link
}

TEST(RecordReader, TouchingSamplesCarryTheirPeriod) {
  // Counting in the kernel, perf's fault event samples touching stacks in frequency mode: each
  // sample says how many faults it stands for.
  Options options;
  CollectingSink sink;
  detail::RecordReader reader(options, sink);
  constexpr std::uint64_t kType =
      PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_PERIOD;
  detail::Event event{detail::EventKind::fault, kType};
  event.counted = false;
  reader.events[kFaultId] = event;
  FakeBuffer buffer(0);
  buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL, {kFaultId, pid_tid(7, 9), 5'000, 0x1000, 377});
  reader.buffers.push_back(buffer.ring());
  reader.drain(true);
  ASSERT_EQ(sink.faults.size(), 1U);
  EXPECT_FALSE(sink.faults[0].counted);
  EXPECT_EQ(sink.faults[0].period, 377U);
  EXPECT_FALSE(sink.faults[0].user_mode);  // taken inside a system call
}

TEST(RecordReader, ACallWhoseEntryCameBeforeTracingIsDropped) {
  Options options;
  CollectingSink sink;
  detail::RecordReader reader(options, sink);
  reader.events[kExitId] = detail::Event{detail::EventKind::exit, detail::kExitSampleType, 8, {16}};
  FakeBuffer buffer(0);
  std::vector<std::uint64_t> exit = {kExitId, pid_tid(7, 8), 2'500};
  for (std::uint64_t word : raw(SYS_munmap, {0})) exit.push_back(word);
  buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, exit);
  reader.buffers.push_back(buffer.ring());
  reader.drain(true);
  EXPECT_TRUE(sink.calls.empty());
}

TEST(RecordReader, ThirtyTwoBitProgramsCallsArePassedOver) {
  // ia32's call 11 is execve, not munmap: a call whose user registers are 32-bit is not ours.
  Options options;
  CollectingSink sink;
  detail::RecordReader reader(options, sink);
  reader.events[kEnterId] = detail::Event{detail::EventKind::enter, detail::kEnterSampleType, 8, {16, 24}};
  reader.events[kExitId] = detail::Event{detail::EventKind::exit, detail::kExitSampleType, 8, {16}};
  FakeBuffer buffer(0);
  for (std::uint64_t abi : {std::uint64_t{PERF_SAMPLE_REGS_ABI_32}, std::uint64_t{PERF_SAMPLE_REGS_ABI_64}}) {
    std::vector<std::uint64_t> enter = {kEnterId, pid_tid(7, 8), 2'000 + abi * 1'000};
    for (std::uint64_t word : raw(SYS_munmap, {0x7f0000000000, 1 << 20})) enter.push_back(word);
    for (std::uint64_t word : {abi, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{0x1000}, std::uint64_t{0}}) {
      enter.push_back(word);  // the registers (bp, sp, ip), then an empty copy of the stack
    }
    buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, enter);
    std::vector<std::uint64_t> exit = {kExitId, pid_tid(7, 8), 2'500 + abi * 1'000};
    for (std::uint64_t word : raw(SYS_munmap, {0})) exit.push_back(word);
    buffer.put(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, exit);
  }
  reader.buffers.push_back(buffer.ring());
  reader.drain(true);
  ASSERT_EQ(sink.calls.size(), 1U);  // the 64-bit one
  EXPECT_EQ(sink.calls[0].enter_ns, 2'000U + PERF_SAMPLE_REGS_ABI_64 * 1'000);
}

}  // namespace
}  // namespace memcost::trace
