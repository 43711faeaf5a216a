// `--raw`: records written, then replayed, come back field for field; a file that is not one is refused.
#include "trace/attribution/raw.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "collecting_sink.hpp"

namespace memcost::trace {
namespace {


std::string temporary_path(const char* name) {
  return (testing::TempDir() + "/" + name + "-" + std::to_string(getpid()));
}

TEST(Raw, RecordsWrittenAreReplayedAsTheyWere) {
  const std::string path = temporary_path("raw.gz");
  CollectingSink passed_on;
  MappingCall call;
  call.kind = CallKind::mremap;
  call.pid = 5;
  call.tid = 6;
  call.enter_ns = 100;
  call.exit_ns = 250;
  for (int i = 0; i < 6; ++i) call.args[i] = 1000 + static_cast<std::uint64_t>(i);
  call.result = -12;
  call.stack = 9;
  {
    RawWriter writer(path, passed_on);
    ASSERT_TRUE(writer.error().empty()) << writer.error();
    writer.process({ProcessChange::fork, 5, 4, 50, "child"});
    writer.call(call);
    for (std::uint64_t i = 0; i < 1000; ++i) writer.fault({5, 6, 300 + i, 0x7f0000000000 + i * 4096, 3, i % 2 == 0});
    writer.close();
    ASSERT_TRUE(writer.error().empty()) << writer.error();
  }
  EXPECT_EQ(passed_on.faults.size(), 1000U);  // the writer passes everything on as it writes

  CollectingSink replayed;
  std::string error;
  ASSERT_TRUE(replay(path, replayed, error)) << error;
  ASSERT_EQ(replayed.processes.size(), 1U);
  EXPECT_EQ(replayed.processes[0].change, ProcessChange::fork);
  EXPECT_EQ(replayed.processes[0].parent, 4);
  EXPECT_EQ(replayed.processes[0].name, "child");
  ASSERT_EQ(replayed.calls.size(), 1U);
  const MappingCall& back = replayed.calls[0];
  EXPECT_EQ(back.kind, CallKind::mremap);
  EXPECT_EQ(back.exit_ns, 250U);
  EXPECT_EQ(back.args[5], 1005U);
  EXPECT_EQ(back.result, -12);
  EXPECT_EQ(back.stack, 9U);
  ASSERT_EQ(replayed.faults.size(), 1000U);
  for (std::size_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(replayed.faults[i].address, 0x7f0000000000 + i * 4096);
    EXPECT_EQ(replayed.faults[i].user_mode, i % 2 == 0);
  }
  EXPECT_EQ(replayed.settled, UINT64_MAX);
  std::remove(path.c_str());
}

TEST(Raw, AFileThatIsNotOneIsRefusedWithAReason) {
  const std::string path = temporary_path("not-raw");
  std::ofstream(path) << "hello\n";
  CollectingSink replayed;
  std::string error;
  EXPECT_FALSE(replay(path, replayed, error));
  EXPECT_FALSE(error.empty());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace memcost::trace
