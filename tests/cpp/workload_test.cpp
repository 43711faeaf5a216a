// The traced workload (trace/run/workload.hpp): a command held at the door until let go, its exit and
// usage, its environment, the interrupt escalation, and a process attached to.
#include "trace/run/workload.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>

namespace memcost::trace::detail {
namespace {

// Polls until the workload has ended (at most `seconds`).
bool wait_for_end(Workload& workload, bool stop_requested = false, bool interrupted = false, double seconds = 20) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (workload.ended(stop_requested, interrupted, 0, {})) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

std::string temporary_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "." + std::to_string(getpid()))).string();
}

TEST(Workload, ACommandWaitsAtTheDoorUntilLetGo) {
  const std::string marker = temporary_path("memcost-workload-ran");
  unlink(marker.c_str());
  Workload workload;
  Failure why;
  ASSERT_TRUE(workload.start({"sh", "-c", "touch " + marker}, {}, -1, -1, why)) << why.message();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  struct stat file {};
  EXPECT_NE(stat(marker.c_str(), &file), 0) << "the command ran before it was let through";
  ASSERT_TRUE(workload.let_go(why)) << why.message();
  ASSERT_TRUE(wait_for_end(workload));
  EXPECT_EQ(stat(marker.c_str(), &file), 0);
  unlink(marker.c_str());
  Result result;
  workload.collect(result);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(workload.name(), "sh");
  EXPECT_EQ(workload.targets(), std::vector<pid_t>{workload.pid()});
}

// The descriptor the tracing loop polls for the command's end: not readable while it runs, readable
// once it has exited and before it is reaped, so that the loop looks at once (it spun on its
// events' POLLHUP while an exited `import torch` tore down its address space).
TEST(Workload, ItsExitDescriptorIsReadableOnceItHasExited) {
  Workload workload;
  Failure why;
  ASSERT_TRUE(workload.start({"sh", "-c", "sleep 0.3"}, {}, -1, -1, why)) << why.message();
  const int exit_fd = workload.exit_fd();
  if (exit_fd < 0) GTEST_SKIP() << "this kernel has no pidfd_open (Linux 5.3)";
  EXPECT_EQ(workload.exit_fd(), exit_fd) << "one descriptor, kept";
  ASSERT_TRUE(workload.let_go(why)) << why.message();
  pollfd polled{exit_fd, POLLIN, 0};
  EXPECT_EQ(poll(&polled, 1, 0), 0) << "readable while the command runs";
  ASSERT_EQ(poll(&polled, 1, 10'000), 1) << "not readable within 10 s of a 0.3 s command";
  EXPECT_TRUE(polled.revents & POLLIN);
  EXPECT_TRUE(workload.ended(false, false, 0, {})) << "readable, and not yet reaped";
}

// A command killed while it waits at the door (a Ctrl-C to the whole process group during the
// tracer's set-up) has closed its end: letting it go must not kill the tracer with SIGPIPE (it did,
// found by a CI run's Ctrl-C at 4.2 s under ASan); its end says how it ended.
TEST(Workload, ACommandKilledAtTheDoorLeavesTheTracerStanding) {
  const auto previous = std::signal(SIGPIPE, SIG_DFL);  // as the probe runs: SIGPIPE would kill it
  Workload workload;
  Failure why;
  ASSERT_TRUE(workload.start({"sh", "-c", "exit 0"}, {}, -1, -1, why)) << why.message();
  ASSERT_EQ(kill(workload.pid(), SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // dead, its descriptors closed
  (void)workload.let_go(why);
  ASSERT_TRUE(wait_for_end(workload));
  Result result;
  workload.collect(result);
  EXPECT_EQ(result.signal, SIGKILL);
  std::signal(SIGPIPE, previous);
}

TEST(Workload, ItsExitStatusIsAShellsAndItsUsageTheKernels) {
  for (const auto& [script, code, signal] : {std::tuple{"exit 3", 3, 0}, std::tuple{"kill -9 $$", 137, 9}}) {
    Workload workload;
    Failure why;
    ASSERT_TRUE(workload.start({"sh", "-c", script}, {}, -1, -1, why));
    ASSERT_TRUE(workload.let_go(why));
    ASSERT_TRUE(wait_for_end(workload));
    Result result;
    workload.collect(result);
    EXPECT_EQ(result.exit_code, code) << script;
    EXPECT_EQ(result.signal, signal) << script;
    EXPECT_GT(result.minor_faults, 0U) << "an exec'd shell takes faults, and rusage counts them";
  }
}

TEST(Workload, ACommandThatCannotBeRunIsOneFailureOfItsKind) {
  Workload workload;
  Failure why;
  ASSERT_TRUE(workload.start({"/no/such/program"}, {}, -1, -1, why));
  EXPECT_FALSE(workload.let_go(why));
  EXPECT_EQ(why.kind, FailureKind::command_not_started);
  EXPECT_EQ(why.error, ENOENT);
  EXPECT_NE(why.message().find("cannot run /no/such/program"), std::string::npos) << why.message();
}

TEST(Workload, EnvironmentChangesJoinWhatIsThere) {
  EXPECT_EQ(changed_value({"X", "b", ':', false}, "a"), "a:b");
  EXPECT_EQ(changed_value({"X", "b", ':', true}, "a"), "b:a");
  EXPECT_EQ(changed_value({"X", "b", ':', true}, nullptr), "b");
  EXPECT_EQ(changed_value({"X", "b", ' ', false}, ""), "b");
  EXPECT_EQ(changed_value({"X", "b"}, "a"), "b");

  setenv("MEMCOST_TEST_JOINED", "a", 1);
  setenv("MEMCOST_TEST_GONE", "x", 1);
  Workload workload;
  Failure why;
  const std::vector<EnvironmentChange> changes = {{"MEMCOST_TEST_JOINED", "b", ':', false},
                                                  {"MEMCOST_TEST_GONE", "", 0, false, true},
                                                  {"MEMCOST_TEST_SET", "c"}};
  ASSERT_TRUE(workload.start({"sh", "-c", R"(test "$MEMCOST_TEST_JOINED" = a:b && test -z "${MEMCOST_TEST_GONE+set}" && test "$MEMCOST_TEST_SET" = c)"},
                             changes, -1, -1, why));
  ASSERT_TRUE(workload.let_go(why));
  ASSERT_TRUE(wait_for_end(workload));
  Result result;
  workload.collect(result);
  EXPECT_EQ(result.exit_code, 0) << "the command did not see its environment as changed";
  EXPECT_STREQ(getenv("MEMCOST_TEST_JOINED"), "a") << "the tracer's own environment changed";
  unsetenv("MEMCOST_TEST_JOINED");
  unsetenv("MEMCOST_TEST_GONE");
}

TEST(Workload, TheInheritedDescriptorAndStdoutReachTheCommand) {
  int inherited[2], output[2];
  ASSERT_EQ(pipe2(inherited, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(output, O_CLOEXEC), 0);
  Workload workload;
  Failure why;
  const std::string script = "echo kept >&" + std::to_string(inherited[1]) + "; echo out";
  ASSERT_TRUE(workload.start({"sh", "-c", script}, {}, output[1], inherited[1], why));
  close(inherited[1]);
  close(output[1]);
  ASSERT_TRUE(workload.let_go(why));
  ASSERT_TRUE(wait_for_end(workload));
  char text[16] = {};
  EXPECT_EQ(read(inherited[0], text, sizeof(text) - 1), 5);
  EXPECT_STREQ(text, "kept\n");
  char out[16] = {};
  EXPECT_EQ(read(output[0], out, sizeof(out) - 1), 4);
  EXPECT_STREQ(out, "out\n");
  close(inherited[0]);
  close(output[0]);
}

TEST(Workload, SigtermIsPassedOnAtOnceAndAnIgnoredCtrlCEscalates) {
  Workload terminated;
  Failure why;
  ASSERT_TRUE(terminated.start({"sleep", "30"}, {}, -1, -1, why));
  ASSERT_TRUE(terminated.let_go(why));
  ASSERT_TRUE(wait_for_end(terminated, true, false, 2)) << "SIGTERM was not passed on at once";
  Result result;
  terminated.collect(result);
  EXPECT_EQ(result.signal, SIGTERM);

  // A command that ignores SIGINT: passed on after 1 s, then SIGTERM after 3 s more.
  Workload stubborn;
  ASSERT_TRUE(stubborn.start({"sh", "-c", "trap '' INT; sleep 30 & wait"}, {}, -1, -1, why));
  ASSERT_TRUE(stubborn.let_go(why));
  const auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_for_end(stubborn, false, true, 8));
  EXPECT_GE(std::chrono::steady_clock::now() - began, std::chrono::milliseconds(3900)) << "escalated before SIGINT's 1 s and SIGTERM's 3 s";
  stubborn.collect(result);
  EXPECT_EQ(result.signal, SIGTERM);
}

TEST(Workload, AnAttachedProcessIsWatchedAndLeftRunning) {
  Workload workload;
  Failure why;
  EXPECT_FALSE(workload.attach(4'194'304 + 1, why)) << "no pid is above PID_MAX_LIMIT";
  EXPECT_EQ(why.kind, FailureKind::no_such_process);

  const pid_t sleeper = fork();
  ASSERT_GE(sleeper, 0);
  if (sleeper == 0) {
    execlp("sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Workload attached;
  ASSERT_TRUE(attached.attach(sleeper, why)) << why.message();
  EXPECT_TRUE(attached.attached());
  EXPECT_EQ(attached.name(), "sleep");
  EXPECT_EQ(attached.targets(), std::vector<pid_t>{sleeper}) << "sleep has one thread";
  ASSERT_TRUE(attached.let_go(why));
  EXPECT_FALSE(attached.ended(false, false, 0, {}));
  bool counting_stopped = false;
  EXPECT_TRUE(attached.ended(true, false, 0, [&] { counting_stopped = true; }));
  EXPECT_TRUE(counting_stopped);
  attached.abandon();
  EXPECT_EQ(kill(sleeper, 0), 0) << "a process attached to is left running";
  kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
}

}  // namespace
}  // namespace memcost::trace::detail
