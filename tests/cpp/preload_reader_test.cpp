// The preload library's records read from a pipe, written here as interposer.c lays them out
// (preload/abi.h): a call, its return addresses and its Python block.
#include "memcost/measure.hpp"
#include "trace/preload/reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <map>
#include <random>

#include "trace/unwind/python_frames.hpp"

#include <gtest/gtest.h>

#include "collecting_sink.hpp"
#include "python_block.hpp"

namespace memcost::trace {
namespace {


// A malloc record with two return addresses and a Python block of one frame (f at a.py:3).
std::vector<char> malloc_record() {
  const memcost_python_entry entry{3, 4, 1};
  std::vector<char> python(sizeof(memcost_python_header) + sizeof(entry) + 5);
  char* frame = python.data() + sizeof(memcost_python_header);
  std::memcpy(frame, &entry, sizeof(entry));
  std::memcpy(frame + sizeof(entry), "a.pyf", 5);
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
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { EXPECT_EQ(pipe2(fds, O_NONBLOCK), 0); }
  ~Pipe() {
    close(fds[0]);
    close(fds[1]);
  }
};
class PreloadReaderTest : public ::testing::Test {
 protected:
  Pipe pipe;
  int* fds = pipe.fds;
  Options options;
  CollectingSink sink;
  detail::Unwinder unwinder{options, sink};
  detail::PreloadReader reader{pipe.fds[0], unwinder, sink};
};

TEST_F(PreloadReaderTest, ARecordBecomesACallWithItsPythonFrames) {
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
  EXPECT_EQ(call.length(), 64U << 20);
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
  const std::vector<char> record = malloc_record();
  ASSERT_EQ(write(fds[1], record.data(), record.size()), static_cast<ssize_t>(record.size()));
  const std::uint64_t written_ns = measure::now_ns();
  const std::uint64_t began_ns = reader.drain();
  const std::uint64_t returned_ns = measure::now_ns();
  EXPECT_EQ(sink.calls.size(), 1U);
  EXPECT_GE(began_ns, written_ns);
  EXPECT_LE(began_ns, returned_ns);
  // An empty pipe: nothing delivered, and the time still moves on.
  EXPECT_GE(reader.drain(), began_ns);
  EXPECT_EQ(sink.calls.size(), 1U);
}

// The faults a call took without an exception: a record of their own kind, its range in args.
TEST_F(PreloadReaderTest, AFaultsInACallRecordBecomesCallFaults) {
  std::vector<char> record = malloc_record();
  memcost_preload_header header{};
  std::memcpy(&header, record.data(), sizeof(header));
  header.kind = MEMCOST_CALL_FAULTS_IN_CALL;
  header.args[0] = 28, header.args[1] = 0x7f0000000000, header.args[2] = 64 << 20, header.args[3] = 16384;
  std::memcpy(record.data(), &header, sizeof(header));
  ASSERT_EQ(write(fds[1], record.data(), record.size()), static_cast<ssize_t>(record.size()));
  reader.drain();
  ASSERT_EQ(sink.faults_in_calls.size(), 1U);
  const CallFaults& faults = sink.faults_in_calls[0];
  EXPECT_EQ(faults.syscall, 28);
  EXPECT_EQ(faults.start, 0x7f0000000000U);
  EXPECT_EQ(faults.length, 64U << 20);
  EXPECT_EQ(faults.faults, 16384U);
  EXPECT_NE(faults.stack, 0U);
  EXPECT_TRUE(sink.calls.empty());
  // Counted in the kernel, the library's own count of them is passed over.
  reader.call_faults_counted_in_kernel = true;
  ASSERT_EQ(write(fds[1], record.data(), record.size()), static_cast<ssize_t>(record.size()));
  reader.drain();
  EXPECT_EQ(sink.faults_in_calls.size(), 1U);
}

// What the traced program can write into its descriptor: a header that claims more frames than a
// record holds, a size beyond any record, bytes that are no header at all. Each run of them is
// dropped and counted; the records before and after are read whole.
TEST_F(PreloadReaderTest, MalformedBytesAreDroppedCountedAndTheRecordsAroundThemRead) {
  const std::vector<char> record = malloc_record();
  memcost_preload_header lie{};
  std::memcpy(&lie, record.data(), sizeof(lie));
  lie.frames = 1'000'000;  // the old reader copied frames x 8 bytes from a buffer this long
  lie.size = static_cast<std::uint32_t>(sizeof(lie) + 8'000'000);
  std::vector<char> bytes(record);
  bytes.insert(bytes.end(), reinterpret_cast<const char*>(&lie), reinterpret_cast<const char*>(&lie) + sizeof(lie));
  bytes.insert(bytes.end(), record.begin(), record.end());
  for (int i = 0; i < 333; ++i) bytes.push_back(static_cast<char>(i * 7));
  bytes.insert(bytes.end(), record.begin(), record.end());
  ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(write(fds[1], "cut", 3), 3);  // and a tail too short to be anything
  reader.drain();
  EXPECT_EQ(sink.calls.size(), 3U);
  EXPECT_EQ(reader.malformed_records(), 2U);
  EXPECT_EQ(reader.malformed_bytes(), sizeof(lie) + 333U);
  reader.drain(true);  // the end: what is left is counted too
  EXPECT_EQ(reader.malformed_records(), 3U);
  EXPECT_EQ(reader.malformed_bytes(), sizeof(lie) + 333U + 3U);
  for (const MappingCall& call : sink.calls) EXPECT_EQ(call.pid, 77);
}

// Random bytes, records with random bytes changed, records cut anywhere, read in random pieces:
// every drain returns, nothing is read outside its bytes (AddressSanitizer in make test-asan), and
// every call delivered came from a header of the format.
TEST_F(PreloadReaderTest, RandomAndCorruptedRecordsNeverCrashTheReader) {
  const std::vector<char> record = malloc_record();
  std::mt19937_64 random(20261125);
  for (int round = 0; round < 3000; ++round) {
    std::vector<char> bytes;
    switch (random() % 4) {
      case 0: bytes.resize(random() % 400); for (char& byte : bytes) byte = static_cast<char>(random()); break;
      case 1: bytes = record; for (int flips = 1 + random() % 4; flips > 0; --flips) bytes[random() % bytes.size()] = static_cast<char>(random()); break;
      case 2: bytes.assign(record.begin(), record.begin() + static_cast<std::ptrdiff_t>(random() % record.size())); break;
      default: bytes = record; break;
    }
    for (std::size_t at = 0; at < bytes.size();) {
      const std::size_t piece = std::min<std::size_t>(bytes.size() - at, 1 + random() % 200);
      ASSERT_EQ(write(fds[1], bytes.data() + at, piece), static_cast<ssize_t>(piece));
      at += piece;
      if (random() % 3 == 0) reader.drain();
    }
  }
  reader.drain(true);
  EXPECT_GT(sink.calls.size(), 500U);  // the untouched records (a quarter) come through, mostly
  EXPECT_GT(reader.malformed_records(), 0U);
  for (const MappingCall& call : sink.calls) {
    EXPECT_LE(static_cast<int>(call.kind), MEMCOST_CALL_REALLOC);
    EXPECT_GT(call.pid, 0);
  }
}

// A Python block is found by its magic word in a copied stack, whose other bytes are the program's:
// random and corrupted blocks decode to frames inside their bytes, or to none.
TEST(PythonFrames, RandomAndCorruptedBlocksNeverDecodeOutsideTheirBytes) {
  std::mt19937_64 random(20261126);
  std::vector<std::uint8_t> bytes;
  for (int round = 0; round < 20000; ++round) {
    bytes.assign(16 + random() % 600, 0);
    for (std::uint8_t& byte : bytes) byte = static_cast<std::uint8_t>(random() % 4 == 0 ? random() % 3 : random());
    // A stack, or a pending one (its frames to come; what follows the magic is the release).
    const std::uint64_t magic = random() % 4 == 0 ? MEMCOST_PYTHON_PENDING_MAGIC : MEMCOST_PYTHON_MAGIC;
    const memcost_python_header header{magic,
                                       static_cast<std::uint32_t>(random() % 3 == 0 ? bytes.size() - 16 : random() % 5000),
                                       static_cast<std::uint32_t>(random() % 40)};
    std::memcpy(bytes.data(), &header, sizeof(header));
    const std::size_t available = bytes.size() - random() % 8;
    const std::string_view block = detail::python_block_at(bytes.data(), available);
    ASSERT_LE(block.size(), available);
    if (magic == MEMCOST_PYTHON_PENDING_MAGIC && available >= sizeof(memcost_python_pending)) {
      ASSERT_EQ(block.size(), sizeof(memcost_python_pending));
      ASSERT_TRUE(detail::python_frames(block).empty());
      ASSERT_EQ(detail::pending_release(block), header.bytes | std::uint64_t{header.frames} << 32);
    }
    for (const Frame& frame : detail::python_frames(block)) {
      ASSERT_LE(frame.file.size() + frame.function.size(), block.size());
      ASSERT_TRUE(detail::valid_utf8(frame.file) && detail::valid_utf8(frame.function));
    }
  }
}

// A block's names are CPython's UTF-8 of them: a block with a name that is not UTF-8 is not as the
// preload library wrote it (a traced `import torch` ended with the json library's "invalid UTF-8
// byte" in 3 of 10 runs), and none of its frames is taken.
TEST(PythonFrames, ABlockWithANameThatIsNotUtf8DecodesToNoFrames) {
  const std::string good = python_block({{3, "caf\xc3\xa9.py", "r\xc3\xa9sum\xc3\xa9"}, {9, "main.py", "<module>"}});
  const std::vector<Frame> frames = detail::python_frames(good);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].file, "caf\xc3\xa9.py");
  EXPECT_EQ(frames[0].function, "r\xc3\xa9sum\xc3\xa9");
  for (const std::string bad : {"\x99" "f", "f\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80"}) {
    EXPECT_TRUE(detail::python_frames(python_block({{3, "a.py", bad}, {9, "main.py", "<module>"}})).empty()) << bad;
    EXPECT_TRUE(detail::python_frames(python_block({{3, "a.py", "f"}, {9, bad + ".py", "<module>"}})).empty()) << bad;
  }
  // A character cut between a frame's file and its function is two names that are not UTF-8.
  EXPECT_TRUE(detail::python_frames(python_block({{3, "caf\xc3", "\xa9"}})).empty());
}

TEST(PythonFrames, Utf8IsCheckedByRfc3629) {
  EXPECT_TRUE(detail::valid_utf8(""));
  EXPECT_TRUE(detail::valid_utf8("plain ascii"));
  EXPECT_TRUE(detail::valid_utf8("\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xef\xbf\xbd \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(detail::valid_utf8("\x80"));              // a continuation byte first
  EXPECT_FALSE(detail::valid_utf8("\xc1\xbf"));          // overlong
  EXPECT_FALSE(detail::valid_utf8("\xe0\x9f\xbf"));      // overlong
  EXPECT_FALSE(detail::valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(detail::valid_utf8("\xe2\x82"));          // cut short
  EXPECT_FALSE(detail::valid_utf8("\xe2\x28\xa1"));      // a second byte that continues nothing
  EXPECT_FALSE(detail::valid_utf8("\xf0\x8f\xbf\xbf"));  // overlong
  EXPECT_FALSE(detail::valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(detail::valid_utf8("\xff"));
}

}  // namespace
}  // namespace memcost::trace
