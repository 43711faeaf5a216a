// The traced tree: found through /proc, held still and let go, its counters and its mappings.
#include "trace/run/process_tree.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "os/os.hpp"

#include <gtest/gtest.h>

#include "collecting_sink.hpp"

namespace memcost::trace {
namespace {


// A child that forks a grandchild; both sleep until killed. The grandchild's pid comes back through a pipe.
std::pair<pid_t, pid_t> child_and_grandchild() {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {-1, -1};
  const pid_t child = fork();
  if (child == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      for (;;) pause();
    }
    (void)!write(pipe_fds[1], &grandchild, sizeof(grandchild));
    for (;;) pause();
  }
  pid_t grandchild = -1;
  (void)!read(pipe_fds[0], &grandchild, sizeof(grandchild));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  return {child, grandchild};
}

char state_of(pid_t pid) {
  auto status = os::process_status(pid);
  return status ? status->state : '?';
}

bool becomes(pid_t pid, char state) {
  for (int i = 0; i < 200; ++i) {
    if (state_of(pid) == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(ProcessTree, FindsDescendantsAndHoldsThemAllStill) {
  const auto [child, grandchild] = child_and_grandchild();
  ASSERT_GT(grandchild, 0);
  const std::vector<pid_t> tree = detail::process_tree(child);
  EXPECT_EQ(tree.front(), child);
  EXPECT_NE(std::find(tree.begin(), tree.end(), grandchild), tree.end());
  {
    detail::Hold hold(child);
    hold.hold();
    EXPECT_TRUE(becomes(child, 'T'));
    EXPECT_TRUE(becomes(grandchild, 'T'));
    EXPECT_EQ(hold.pauses, 1U);
    hold.release();
    EXPECT_TRUE(becomes(grandchild, 'S'));
  }
  detail::signal_tree(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(detail::read_process_stat(child).alive);
}

TEST(ProcessTree, ReadsAProcesssCountersAndItsMappings) {
  EXPECT_TRUE(detail::read_process_stat(getpid()).alive);
  EXPECT_GT(detail::ticks_per_second(), 0U);
  constexpr std::size_t kBytes = 3 << 20;
  void* memory = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  CollectingSink sink;
  detail::report_existing_mappings(getpid(), 42, sink);
  const auto start = reinterpret_cast<std::uint64_t>(memory);
  const bool found = std::any_of(sink.calls.begin(), sink.calls.end(), [&](const MappingCall& call) {
    return call.kind == CallKind::existing && call.address() <= start && start + kBytes <= call.address() + call.length() &&
           call.exit_ns == 42;
  });
  EXPECT_TRUE(found);
  munmap(memory, kBytes);
}

}  // namespace
}  // namespace memcost::trace
