// The preload library's records read from a pipe, written here as preload_linux.c lays them out
// (preload_abi.h): a call, its return addresses and its Python block.
#include "trace/preload_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "collecting_sink.hpp"

namespace memcost::trace {
namespace {


// A malloc record with two return addresses and a Python block of one frame (f at a.py:3).
std::vector<char> malloc_record() {
  const std::uint32_t line = 3;
  const std::uint16_t file_bytes = 4, function_bytes = 1;
  std::vector<char> python(sizeof(memcost_python_header) + 8 + 5);
  char* frame = python.data() + sizeof(memcost_python_header);
  std::memcpy(frame, &line, 4);
  std::memcpy(frame + 4, &file_bytes, 2);
  std::memcpy(frame + 6, &function_bytes, 2);
  std::memcpy(frame + 8, "a.pyf", 5);
  memcost_python_header python_header{MEMCOST_PYTHON_MAGIC, static_cast<std::uint32_t>(python.size() - sizeof(memcost_python_header)), 1};
  std::memcpy(python.data(), &python_header, sizeof(python_header));

  const std::uint64_t returns[2] = {0x401000, 0x402000};
  memcost_preload_header header{};
  header.kind = MEMCOST_CALL_MALLOC;
  header.pid = 77;
  header.tid = 78;
  header.enter_ns = 1'000;
  header.exit_ns = 2'000;
  header.args[1] = 64 << 20;
  header.result = 0x7f0000000000;
  header.frames = 2;
  header.python_bytes = static_cast<std::uint32_t>(python.size());
  header.size = static_cast<std::uint32_t>(sizeof(header) + sizeof(returns) + python.size());
  std::vector<char> record(header.size);
  std::memcpy(record.data(), &header, sizeof(header));
  std::memcpy(record.data() + sizeof(header), returns, sizeof(returns));
  std::memcpy(record.data() + sizeof(header) + sizeof(returns), python.data(), python.size());
  return record;
}

// A pipe, as the tracer has it from the preload library, and its reader.
class PreloadReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(pipe2(fds, O_NONBLOCK), 0); }
  void TearDown() override {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2] = {-1, -1};
  Options options;
  CollectingSink sink;
  detail::Unwinder unwinder{options, sink};
  detail::PreloadReader reader{-1, unwinder, sink};
};

TEST_F(PreloadReaderTest, ARecordBecomesACallWithItsPythonFrames) {
  reader.read_from(fds[0]);
  const std::vector<char> record = malloc_record();
  // The first part alone: the record waits for the rest.
  ASSERT_EQ(write(fds[1], record.data(), 40), 40);
  reader.drain();
  EXPECT_TRUE(sink.calls.empty());
  ASSERT_EQ(write(fds[1], record.data() + 40, record.size() - 40), static_cast<ssize_t>(record.size() - 40));
  reader.drain();
  ASSERT_EQ(sink.calls.size(), 1U);
  const MappingCall& call = sink.calls[0];
  EXPECT_EQ(call.kind, CallKind::malloc);
  EXPECT_EQ(call.pid, 77);
  EXPECT_EQ(call.tid, 78);
  EXPECT_EQ(call.enter_ns, 1'000U);
  EXPECT_EQ(call.exit_ns, 2'000U);
  EXPECT_EQ(call.args[1], 64U << 20);
  EXPECT_EQ(call.result, 0x7f0000000000);
  ASSERT_NE(call.stack, 0U);
  const auto& frames = sink.stacks.at(call.stack);
  const bool python = std::any_of(frames.begin(), frames.end(), [](const Frame& frame) {
    return frame.kind == FrameKind::python && frame.function == "f" && frame.file == "a.py" && frame.line == 3;
  });
  EXPECT_TRUE(python) << frames.size();
}

// The tracer settles faults no later than the moment the pipe was last read from: a record written
// before drain() began is delivered by it, one written after is not, and the time says which.
TEST_F(PreloadReaderTest, DrainSaysUpToWhenEveryRecordWasDelivered) {
  reader.read_from(fds[0]);
  const std::vector<char> record = malloc_record();
  ASSERT_EQ(write(fds[1], record.data(), record.size()), static_cast<ssize_t>(record.size()));
  const std::uint64_t written_ns = detail::monotonic_ns();
  const std::uint64_t began_ns = reader.drain();
  const std::uint64_t returned_ns = detail::monotonic_ns();
  EXPECT_EQ(sink.calls.size(), 1U);
  EXPECT_GE(began_ns, written_ns);
  EXPECT_LE(began_ns, returned_ns);
  // An empty pipe: nothing delivered, and the time still moves on.
  EXPECT_GE(reader.drain(), began_ns);
  EXPECT_EQ(sink.calls.size(), 1U);
}

}  // namespace
}  // namespace memcost::trace
