// Linux primitives of the OS layer that only Linux has: the process status reader, against what
// the process knows of itself and of a child it made a zombie.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

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

}  // namespace
}  // namespace memcost
