// Linux primitives of the OS layer that only Linux has: the process status reader, against what
// the process knows of itself and of a child it made a zombie.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <atomic>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "os/os.hpp"

namespace memcost {
namespace {

TEST(ProcessStatus, ReadsThisProcessAsItKnowsItself) {
  auto status = os::process_status(getpid());
  ASSERT_TRUE(status.has_value());
  std::string comm;
  std::getline(std::ifstream("/proc/self/comm"), comm);
  EXPECT_EQ(status->name, comm);
  EXPECT_EQ(status->parent, getppid());
  EXPECT_EQ(status->state, 'R');  // it is running: it is reading its own status
  EXPECT_GT(status->minor_faults, 0U);
  EXPECT_GT(status->resident_pages, 0U);
}

TEST(ProcessStatus, SeesAZombieAndNothingOnceItIsGone) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Not reaped yet: a zombie, parented here.
  std::optional<os::ProcessStatus> status;
  for (int tries = 0; tries < 1000 && !(status && status->state == 'Z'); ++tries) {
    status = os::process_status(child);
    usleep(1000);
  }
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->state, 'Z');
  EXPECT_EQ(status->parent, getpid());
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(os::process_status(child).has_value());
}

TEST(ProcessMaps, ListsAnAnonymousMappingAndTheProgramsFile) {
  constexpr std::size_t kBytes = 3 * 4096;
  void* made = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(made, MAP_FAILED);
  const auto start = reinterpret_cast<std::uint64_t>(made);
  bool anonymous = false, program = false;
  char exe[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", exe, sizeof(exe) - 1), 0);
  for (const os::MapEntry& entry : os::process_maps(getpid())) {
    if (entry.start <= start && start + kBytes <= entry.end) {
      anonymous = entry.readable && entry.writable && !entry.executable && !entry.shared && entry.path.empty();
    }
    if (entry.executable && entry.path == exe) program = true;
  }
  munmap(made, kBytes);
  EXPECT_TRUE(anonymous) << "the mapping just made, readable and writable, private, no file";
  EXPECT_TRUE(program) << "the test's own code, from " << exe;
  EXPECT_EQ(os::process_maps(0).empty(), false) << "0 is this process";
  EXPECT_TRUE(os::process_maps(4'194'304 + 1).empty()) << "no such process";
}

TEST(PerfEventMlock, TheKernelsAllowanceIsReadAsKiB) {
  const auto allowed = os::perf_event_mlock_kb();
  ASSERT_TRUE(allowed.has_value()) << "Linux keeps /proc/sys/kernel/perf_event_mlock_kb";
  std::ifstream file("/proc/sys/kernel/perf_event_mlock_kb");
  std::uint64_t direct = 0;
  file >> direct;
  EXPECT_EQ(*allowed, direct);
}

TEST(ThreadIds, ListsEveryThreadOfAProcess) {
  std::atomic<int> tid{0};
  std::atomic<bool> done{false};
  std::thread other([&] {
    tid = static_cast<int>(gettid());
    while (!done) usleep(1000);
  });
  while (tid == 0) usleep(100);
  const std::vector<int> threads = os::thread_ids(getpid());
  done = true;
  other.join();
  EXPECT_NE(std::find(threads.begin(), threads.end(), getpid()), threads.end());
  EXPECT_NE(std::find(threads.begin(), threads.end(), tid.load()), threads.end());
  EXPECT_TRUE(os::thread_ids(4'194'304 + 1).empty());
}

}  // namespace
}  // namespace memcost

// What was written before release_stdout() reaches the reader, which then sees the pipe's end
// while the writer is still running (the probe closing its perf events); the writer's later
// output goes nowhere.
TEST(ReleaseStdout, TheReaderSeesTheEndBeforeTheWriterEnds) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    std::fputs("all said\n", stdout);  // buffered: release_stdout flushes it
    memcost::os::release_stdout();
    std::fputs("said to nobody\n", stdout);
    std::fflush(stdout);
    usleep(500 * 1000);
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string read_text;
  char buffer[64];
  for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) read_text.append(buffer, static_cast<std::size_t>(got));
  close(pipe_fds[0]);
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, WNOHANG), 0);  // the end came while the child still ran
  EXPECT_EQ(read_text, "all said\n");
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
// With the heap padded, memory freed at the heap's top stays in the process (its releasable top
// holds the pad) instead of going back to the kernel; without, glibc keeps its default 128 KiB.
// In a child, so that this process's allocator keeps its own settings. (AddressSanitizer's
// allocator is not glibc's.)
TEST(PadHeap, FreedMemoryAtTheTopStaysInTheProcess) {
  constexpr std::size_t kPad = std::size_t{32} << 20;
  auto top_kept_after_a_block = [](bool padded) {
    const pid_t child = fork();
    if (child == 0) {
      if (padded) memcost::os::pad_heap(kPad);
      std::vector<void*> blocks;
      for (int i = 0; i < 64; ++i) blocks.push_back(std::malloc(64 << 10));  // under the mmap threshold: the heap
      for (void* block : blocks) std::free(block);
      _exit(mallinfo2().keepcost >= kPad / 2 ? 1 : 0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 1;
  };
  EXPECT_TRUE(top_kept_after_a_block(true));
  EXPECT_FALSE(top_kept_after_a_block(false));
}
#endif

// Work in a child of its own: its answer comes back whole (larger than a pipe holds), its memory
// is not the parent's, and a child that threw or was killed says how it ended.
TEST(Child, AnswersWholeInItsOwnAddressSpaceAndSaysHowItEnded) {
  int in_parent = 1;
  memcost::os::Child child = memcost::os::start_child([&in_parent] {
    in_parent = 2;  // the child's copy
    return std::string(1 << 20, 'x');
  });
  ASSERT_TRUE(child.why_not.empty()) << child.why_not;
  std::string error;
  const auto answer = memcost::os::finish_child(child, error);
  ASSERT_TRUE(answer.has_value()) << error;
  EXPECT_EQ(answer->size(), std::size_t{1} << 20);
  EXPECT_EQ(in_parent, 1);

  memcost::os::Child thrower = memcost::os::start_child([]() -> std::string { throw std::runtime_error("no"); });
  EXPECT_FALSE(memcost::os::finish_child(thrower, error).has_value());
  EXPECT_EQ(error, "its work threw");

  memcost::os::Child killed = memcost::os::start_child([]() -> std::string {
    raise(SIGKILL);
    return "never";
  });
  EXPECT_FALSE(memcost::os::finish_child(killed, error).has_value());
  EXPECT_EQ(error.rfind("killed by signal 9", 0), 0U) << error;
}
