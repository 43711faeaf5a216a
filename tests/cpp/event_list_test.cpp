// The run's event list (trace/perf/event_list.hpp): its sizing rules, one ring buffer per CPU owned by
// the first sampling event, later ones pointed at it, each registered by its id; kernel samples
// given up once refused.
#include "trace/perf/event_list.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "os/os.hpp"
#include "skip_or_fail.hpp"

namespace memcost::trace::detail {
namespace {

TEST(EventListSizing, RootGetsWhatItAsksAndAUserWhatTheKernelWouldLock) {
  constexpr std::size_t kPage = 4096;
  EXPECT_EQ(lockable_buffer_pages(8192, kPage, true, 0, 0, 16), 8192U);
  // 516 KiB per CPU plus 8 MiB of RLIMIT_MEMLOCK shared by 2 CPUs: 4.5 MiB; 1024 pages and the header page fit.
  EXPECT_EQ(lockable_buffer_pages(8192, kPage, false, 516 * 1024, 8 << 20, 2), 1024U);
  // On 16 CPUs each gets a sixteenth of RLIMIT_MEMLOCK.
  EXPECT_EQ(lockable_buffer_pages(8192, kPage, false, 516 * 1024, 8 << 20, 16), 256U);
  // Never below 8 pages: the kernel's own minimum then says no.
  EXPECT_EQ(lockable_buffer_pages(8192, kPage, false, 0, 0, 2), 8U);
}

TEST(EventListSizing, TheCopiedStackFitsTheBuffer) {
  EXPECT_EQ(fitting_stack_bytes(4096, 32U << 20), 4096U);
  EXPECT_EQ(fitting_stack_bytes(4096, 4U << 20), 2048U);   // a couple of thousand samples
  EXPECT_EQ(fitting_stack_bytes(4096, 1U << 20), 512U);    // at least 512 bytes
  EXPECT_EQ(fitting_stack_bytes(4096, 1'500'000) % 8, 0U);  // whole registers
}

perf_event_attr dummy_attr(std::uint64_t sample_type) {
  perf_event_attr attr = base_attr(sample_type, 0);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.enable_on_exec = 0;
  attr.inherit = 0;
  return attr;
}

TEST(EventList, TheFirstSamplingEventOnACpuOwnsItsBufferAndTheOthersWriteIntoIt) {
  std::unordered_map<std::uint64_t, Event> registry;
  std::vector<RingBuffer> buffers;
  {
    EventList events(registry, buffers, 8);
    const Event kind{EventKind::fault, kFaultAddressSampleType};
    const int owner = events.add_faults(dummy_attr(kFaultAddressSampleType), getpid(), 0, kind);
    if (owner == -1) MEMCOST_SKIP_OR_FAIL(std::string("perf_event_open on this process: ") + std::strerror(errno));
    ASSERT_GE(owner, 0) << events.failure().message();
    EXPECT_TRUE(events.owned(0));
    ASSERT_EQ(buffers.size(), 1U);
    EXPECT_EQ(buffers[0].fd, owner);
    EXPECT_EQ(buffers[0].data_bytes, events.buffer_bytes());
    const int writer = events.add_faults(dummy_attr(kFaultAddressSampleType), getpid(), 0, kind);
    ASSERT_GE(writer, 0) << events.failure().message();
    EXPECT_EQ(buffers.size(), 1U) << "a second event on the CPU maps no buffer of its own";
    EXPECT_EQ(registry.size(), 2U) << "both are known to the reader by their ids";
    // A counter samples nothing: no buffer, not registered.
    const int counter = events.add_faults(dummy_attr(0), getpid(), 0, std::nullopt);
    ASSERT_GE(counter, 0);
    EXPECT_EQ(registry.size(), 2U);
    if (sysconf(_SC_NPROCESSORS_ONLN) > 1) {
      ASSERT_GE(events.add_faults(dummy_attr(kFaultAddressSampleType), getpid(), 1, kind), 0);
      EXPECT_EQ(buffers.size(), 2U) << "each CPU its own buffer";
    }
  }
  EXPECT_TRUE(buffers.empty()) << "the buffers go with the list";
}

TEST(EventList, KernelSamplesRefusedAreGivenUpOnceAndTheEventOpenedForUserMode) {
  const int paranoid = os::perf_event_paranoid().value_or(-1);
  if (paranoid < 2) GTEST_SKIP() << "kernel.perf_event_paranoid " << paranoid << " lets users sample the kernel";
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to become a user whom the kernel refuses";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(3);
    std::unordered_map<std::uint64_t, Event> registry;
    std::vector<RingBuffer> buffers;
    EventList events(registry, buffers, 8);
    const int fd = events.add_faults(dummy_attr(kFaultAddressSampleType), getpid(), 0, Event{EventKind::fault, kFaultAddressSampleType});
    if (fd < 0) _exit(4);
    _exit(events.kernel_samples() ? 5 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: could not become a user; 4: not opened for user mode; 5: kernel samples kept";
}

}  // namespace
}  // namespace memcost::trace::detail
