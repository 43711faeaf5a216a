// The fault sources (trace/sources/fault_source.hpp) and the loop (trace/run/loop.hpp): their sizing and
// pacing rules, the choice of sources, and each source tracing a real child that touches 1,024
// pages and has a system call fault 1,024 more in, through the loop as the tracer runs it.
#include "memcost/measure.hpp"
#include "trace/sources/fault_source.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include "collecting_sink.hpp"
#include "skip_or_fail.hpp"
#include "trace/run/loop.hpp"
#include "trace/run/workload.hpp"

namespace memcost::trace::detail {
namespace {

constexpr std::size_t kPages = 1024;
constexpr std::size_t kBytes = kPages * 4096;

// This test program, exec'd with MEMCOST_TEST_TOUCH set, is the traced child: base pages (no THP,
// so that a page is a fault), touched one by one, then faulted in by MADV_POPULATE_WRITE.
void *touched = nullptr, *populated = nullptr;
const bool kChild = [] {
  if (std::getenv("MEMCOST_TEST_TOUCH") == nullptr) return false;
  touched = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  populated = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (touched == MAP_FAILED || populated == MAP_FAILED) _exit(2);
  madvise(touched, kBytes, MADV_NOHUGEPAGE);
  madvise(populated, kBytes, MADV_NOHUGEPAGE);
  for (std::size_t page = 0; page < kPages; ++page) static_cast<volatile char*>(touched)[page * 4096] = 1;
  _exit(madvise(populated, kBytes, MADV_POPULATE_WRITE) == 0 ? 0 : 3);
}();

struct Traced {
  CollectingSink sink;
  Result result;
  std::vector<std::string> kinds;  // the sources, by their type
  std::uint64_t lost = 0;
  bool started = false;
};

// The child traced by the sources chosen for `options`, as the tracer does it: held at the door,
// the sources' events opened on each CPU, let go, read by the loop until it ends.
void trace_child(const Options& options, std::size_t buffer_pages, Traced& traced) {
  Workload workload;
  Failure why;
  ASSERT_TRUE(workload.start({"/proc/self/exe"}, {{"MEMCOST_TEST_TOUCH", "1"}}, -1, -1, why)) << why.message();
  RunSetting run{options, false, workload.pid(), 2048};
  RecordReader reader(options, traced.sink);
  auto sources = choose_fault_sources(run, nullptr, traced.result);
  for (const auto& source : sources) traced.kinds.push_back(typeid(*source).name());
  for (const auto& source : sources) buffer_pages = source->buffer_pages(buffer_pages);
  EventList events(reader.events, reader.buffers, buffer_pages);
  for (const auto& source : sources) source->sized(events.buffer_bytes());
  for (int cpu = 0; cpu < sysconf(_SC_NPROCESSORS_CONF); ++cpu) {
    for (const auto& source : sources) {
      const Opened opened = source->open(workload.pid(), cpu, events);
      ASSERT_NE(opened, Opened::failed) << source->failure().message();
      if (opened == Opened::offline) break;
    }
    for (const auto& source : sources) ASSERT_NE(source->open_cpu(cpu, events), Opened::failed) << source->failure().message();
  }
  reader.started(workload.pid(), measure::now_ns(), "child");
  ASSERT_TRUE(workload.let_go(why)) << why.message();
  traced.started = true;
  TraceLoop loop(options, reader, nullptr, sources, traced.sink);
  const LoopCounts counts = loop.run(workload.pid(), workload.exit_fd(), measure::now_ns(), small_buffers(sources, events.buffer_bytes()),
                                     [&] { return workload.ended(false, false, 0, {}); });
  loop.finish();
  traced.result.kernel_stops = counts.kernel_stops;
  for (const auto& source : sources) source->describe(traced.result, events);
  workload.collect(traced.result);
  traced.lost = reader.lost;
}

std::uint64_t counted_faults(const CollectingSink& sink) {
  std::uint64_t faults = 0;
  for (const Fault& fault : sink.faults) faults += fault.counted ? 1 : 0;
  for (const RegionFaults& region : sink.regions) faults += region.faults;
  return faults;
}

TEST(Pacing, AQuarterOfWhatTheBufferHoldsAfterTheSamplesRoom) {
  // 4 MiB of 40-byte records, a second of 1,000 touching samples of 1,000 bytes beside them.
  EXPECT_EQ(Pacing::pace_faults(4U << 20, 40, 1'000'000), ((4U << 20) - 1'000'000) / 40 / 4);
  // Samples that would take over half the buffer leave it half.
  EXPECT_EQ(Pacing::pace_faults(4U << 20, 40, 4'246'000), (2U << 20) / 40 / 4);
  EXPECT_EQ(Pacing::pace_faults(4096, 4246, 0), 16U) << "at least 16";
  EXPECT_TRUE(Pacing::wanted((32U << 20) - 4096, false));
  EXPECT_FALSE(Pacing::wanted(32U << 20, false)) << "a 32 MiB buffer keeps up";
  EXPECT_FALSE(Pacing::wanted(1U << 20, true)) << "a process attached to is never stopped";
}

TEST(FaultSources, TheChoiceFollowsTheOptionsAndSaysWhyNotInTheKernel) {
  Options options;
  options.count_in_kernel = false;
  RunSetting run{options, false, getpid(), 2048};
  Result result;
  auto sources = choose_fault_sources(run, nullptr, result);
  ASSERT_EQ(sources.size(), 1U);
  EXPECT_NE(dynamic_cast<AddressRecords*>(sources[0].get()), nullptr);
  EXPECT_EQ(result.kernel_counting, "not asked for");
  options.touch_samples_per_second = 0;
  sources = choose_fault_sources(run, nullptr, result);
  ASSERT_EQ(sources.size(), 1U);
  EXPECT_NE(dynamic_cast<FaultRecords*>(sources[0].get()), nullptr);
}

TEST(FaultSources, EachSourceHasItsBufferRule) {
  Options options;
  options.counting_buffer_pages = 4096;
  RunSetting run{options, false, getpid(), 2048};
  EXPECT_EQ(FaultRecords(run).buffer_pages(8192), 8192U) << "a record per fault with its stack: all it may lock";
  EXPECT_EQ(AddressRecords(run).buffer_pages(8192), 4096U) << "40-byte records: counting_buffer_pages";
  EXPECT_EQ(AddressRecords(run).buffer_pages(512), 512U);
  EXPECT_EQ(FaultRecords(run).small_buffer_bytes(), 32U << 20);
  EXPECT_EQ(AddressRecords(run).small_buffer_bytes(), 4U << 20);
  // Pacing by the record each writes per fault.
  FaultRecords records(run);
  records.sized(4U << 20);
  EXPECT_EQ(records.pacing().faults(), Pacing::pace_faults(4U << 20, stack_record_bytes(2048), 0));
  AddressRecords addresses(run);
  addresses.sized(4U << 20);
  EXPECT_EQ(addresses.pacing().faults(), Pacing::pace_faults(4U << 20, AddressRecords::kRecordBytes, 1000 * stack_record_bytes(2048)));
  addresses.sized(64U << 20);
  EXPECT_FALSE(addresses.pacing().on());
}

TEST(FaultSources, ARecordPerFaultCountsEveryFaultItsThreadTookThroughPacing) {
  Options options;
  options.count_in_kernel = false;
  options.touch_samples_per_second = 0;
  Traced traced;
  trace_child(options, 256, traced);  // 1 MiB: about 470 records of 2 KiB stacks, so the kernel paces it
  if (!traced.started) return;
  EXPECT_EQ(traced.result.exit_code, 0);
  EXPECT_EQ(traced.lost, 0U);
  EXPECT_GE(counted_faults(traced.sink), kPages) << "the touched pages";
  EXPECT_GT(traced.result.kernel_stops, 0U) << "a 1 MiB buffer is paced by the kernel";
  EXPECT_NE(traced.result.fault_source.find("page-faults"), std::string::npos);
}

TEST(FaultSources, AddressRecordsCountEveryFaultAndSampleTheStacks) {
  Options options;
  options.count_in_kernel = false;
  options.touch_samples_per_second = 1000;
  Traced traced;
  trace_child(options, 1024, traced);
  if (!traced.started) return;
  EXPECT_EQ(traced.result.exit_code, 0);
  EXPECT_EQ(traced.lost, 0U);
  EXPECT_GE(counted_faults(traced.sink), kPages);
  std::size_t samples = 0;
  for (const Fault& fault : traced.sink.faults) samples += fault.counted ? 0 : 1;
  EXPECT_GT(samples, 0U) << "touching stacks sampled";
  EXPECT_NE(traced.result.fault_source.find("every fault recorded by its address"), std::string::npos);
}

TEST(FaultSources, CountingInTheKernelWithTheFaultsInsideSystemCalls) {
  Options options;
  Traced traced;
  {
    RunSetting probe_run{options, false, getpid(), 2048};
    std::string why_not;
    if (!CountingInKernel::open(probe_run, why_not)) MEMCOST_SKIP_OR_FAIL(why_not);
  }
  trace_child(options, 1024, traced);
  if (!traced.started) return;
  ASSERT_EQ(traced.kinds.size(), 2U) << "the counter, and the faults inside system calls";
  EXPECT_EQ(traced.result.exit_code, 0);
  EXPECT_TRUE(traced.result.counted_in_kernel);
  EXPECT_GE(counted_faults(traced.sink), kPages) << "the touched pages, counted per region";
  std::uint64_t in_calls = 0;
  for (const CallFaults& call : traced.sink.faults_in_calls) {
    if (call.length == kBytes) in_calls += call.faults;
  }
  EXPECT_EQ(in_calls, kPages) << "MADV_POPULATE_WRITE faulted every page in";
  EXPECT_GE(traced.result.kernel_faults_in_calls, kPages);
  EXPECT_NE(traced.result.fault_source.find("inside system calls"), std::string::npos);
  EXPECT_EQ(traced.sink.settled, UINT64_MAX) << "the loop settles to the end";

  RunSetting run{options, false, getpid(), 2048};
  options.counting_buffer_pages = 512;
  std::string why_not;
  auto counting = CountingInKernel::open(run, why_not);
  ASSERT_NE(counting, nullptr) << why_not;
  EXPECT_EQ(counting->buffer_pages(8192), 512U) << "touching samples and calls only: counting_buffer_pages";
}

TEST(TraceLoop, BuffersAreSmallByTheSourcesRule) {
  Options options;
  RunSetting run{options, false, getpid(), 2048};
  std::vector<std::unique_ptr<FaultSource>> sources;
  sources.push_back(std::make_unique<AddressRecords>(run));
  EXPECT_TRUE(small_buffers(sources, 2U << 20));
  EXPECT_FALSE(small_buffers(sources, 8U << 20));
  sources.push_back(std::make_unique<FaultRecords>(run));
  EXPECT_TRUE(small_buffers(sources, 8U << 20)) << "the strictest source's rule";
}

}  // namespace
}  // namespace memcost::trace::detail
