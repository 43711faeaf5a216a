// The tracer's unwinder and symbol names: it never crashes on a stack it is handed (random and
// truncated stacks and registers, run under AddressSanitizer by `make test-asan`), it unwinds a real
// one, and names read as people write them (C++, Rust legacy and v0, JIT code from perf maps).
#include <gtest/gtest.h>

#include <dwarf.h>

#include "collecting_sink.hpp"
#include "python_block.hpp"
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sys/stat.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trace/unwind/perf_map.hpp"
#include "trace/unwind/symbol_names.hpp"
#include "trace/unwind/inline_scopes.hpp"
#include "trace/unwind/symbol_table.hpp"
#include "trace/unwind/unwinder.hpp"

namespace memcost::trace {
namespace {


std::vector<detail::FileMapping> code_mappings() { return detail::executable_file_mappings(getpid()); }

TEST(SymbolNames, CxxAndRustReadAsWritten) {
  EXPECT_EQ(demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"), "std::vector<int, std::allocator<int> >::push_back(int const&)");
  EXPECT_TRUE(is_rust_symbol("_ZN17growth_and_frames13render_frames17hf344594e6ef3e0d2E"));
  EXPECT_FALSE(is_rust_symbol("_ZNSt6vectorIiSaIiEE9push_backERKi"));
  EXPECT_EQ(demangle("_ZN17growth_and_frames13render_frames17hf344594e6ef3e0d2E"), "growth_and_frames::render_frames");
  EXPECT_EQ(demangle("_RNvNtCslNYArtu3iFV_5alloc5alloc7realloc"), "alloc::alloc::realloc");
  EXPECT_EQ(demangle("plain_c_function"), "plain_c_function");
  EXPECT_EQ(demangle("_ZN3bad"), "_ZN3bad");  // not a whole name: left as it is
  EXPECT_EQ(demangle(nullptr), "");
}

TEST(PerfMap, LaterEntriesWinAndRuntimesNamesAreParsed) {
  PerfMap map;
  map.parse("7f00 100 JS:~allocateFrames /srv/app/buffers.js:4:24\n"
            "0x00007f0000001000 0x0000000000000080 long Arrays.allocateBlocks(int, int)\n"
            "garbage line\n"
            "7f40 10 JS:*hot /srv/app/buffers.js:9:1\n");
  EXPECT_EQ(map.size(), 3U);
  EXPECT_EQ(map.find(0x7f00), "JS:~allocateFrames /srv/app/buffers.js:4:24");
  EXPECT_EQ(map.find(0x7f45), "JS:*hot /srv/app/buffers.js:9:1");  // written later, inside the first
  EXPECT_EQ(map.find(0x7fff), "JS:~allocateFrames /srv/app/buffers.js:4:24");
  EXPECT_EQ(map.find(0x8000), "");
  EXPECT_EQ(map.find(0x7f0000001010), "long Arrays.allocateBlocks(int, int)");

  Frame js = jit_frame(0x7f00, "JS:~allocateFrames /srv/app/buffers.js:4:24", "/tmp/perf-1.map");
  EXPECT_EQ(js.kind, FrameKind::jit);
  EXPECT_EQ(js.function, "allocateFrames");
  EXPECT_EQ(js.file, "/srv/app/buffers.js");
  EXPECT_EQ(js.line, 4);
  EXPECT_EQ(jit_frame(0, "JS:^ /a.js:1:1", "m").function, "(anonymous)");
  EXPECT_EQ(jit_frame(0, "long Arrays.allocateBlocks(int, int)", "m").function, "Arrays.allocateBlocks(int, int)");
  EXPECT_EQ(jit_frame(0, "StubRoutines (1)", "m").function, "StubRoutines (1)");
  EXPECT_EQ(jit_frame(0, "Interpreter", "m").function, "Interpreter");
  Frame python = jit_frame(0, "py::insert_rows:/srv/rows.py", "m");
  EXPECT_EQ(python.function, "insert_rows");
  EXPECT_EQ(python.file, "/srv/rows.py");
}

// /tmp/perf-PID.map can be made by anyone before the process makes it: only a regular file of the
// traced process's user, or root's, is read (as perf refuses others).
TEST(PerfMap, OnlyARegularFileOfTheProcesssUserOrRootIsRead) {
  char folder[] = "/tmp/memcost-perf-map-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  const std::string path = std::string(folder) + "/perf-1.map", link = std::string(folder) + "/perf-2.map";
  {
    std::ofstream file(path);
    file << "7f00 100 JS:~f /a.js:1:1\n";
  }
  const unsigned me = geteuid();
  PerfMap mine;
  EXPECT_TRUE(mine.load(path, me));
  EXPECT_FALSE(mine.refused());
  EXPECT_EQ(mine.find(0x7f10), "JS:~f /a.js:1:1");
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  PerfMap through_a_link;
  EXPECT_FALSE(through_a_link.load(link, me));
  EXPECT_TRUE(through_a_link.refused());
  if (me != 0) {  // the file is this user's: a process of another user (not root) may not have it
    PerfMap anothers;
    EXPECT_FALSE(anothers.load(path, me + 1));
    EXPECT_TRUE(anothers.refused());
  } else if (chown(path.c_str(), 65534, 65534) == 0) {  // as root: a file of nobody's, for a process of uid 1000
    PerfMap anothers;
    EXPECT_FALSE(anothers.load(path, 1000));
    EXPECT_TRUE(anothers.refused());
    EXPECT_TRUE(anothers.load(path, 65534));
  }
  PerfMap missing;
  EXPECT_FALSE(missing.load(std::string(folder) + "/perf-3.map", me));
  EXPECT_FALSE(missing.refused());
  unlink(link.c_str());
  unlink(path.c_str());
  rmdir(folder);
}

// A map a runtime appends to while it runs (CPython 3.12: a line per function, before it runs it):
// each load reads what was appended, a line still being written the next time; a map written anew
// (another file, or shorter, or its earlier text changed) is read again whole.
TEST(PerfMap, AppendedLinesAreReadAsTheyComeAndAMapWrittenAnewWhole) {
  char folder[] = "/tmp/memcost-perf-map-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  const std::string path = std::string(folder) + "/perf-1.map";
  const unsigned me = geteuid();
  auto append = [&](const std::string& text) {
    std::ofstream file(path, std::ios::app);
    file << text;
  };
  PerfMap map;
  append("7f00 100 py::first:/a.py\n7e00 10 py::sec");  // the second line half written
  ASSERT_TRUE(map.load(path, me));
  EXPECT_EQ(map.size(), 1U);
  EXPECT_EQ(map.find(0x7f10), "py::first:/a.py");
  EXPECT_EQ(map.find(0x7e05), "");
  append("ond:/a.py\n7f08 8 py::inner:/b.py\n");
  ASSERT_TRUE(map.load(path, me));
  EXPECT_EQ(map.size(), 3U);
  EXPECT_EQ(map.find(0x7e05), "py::second:/a.py");
  EXPECT_EQ(map.find(0x7f0a), "py::inner:/b.py");  // written later, inside the first
  EXPECT_EQ(map.find(0x7f20), "py::first:/a.py");
  ASSERT_TRUE(map.load(path, me));  // nothing new
  EXPECT_EQ(map.size(), 3U);
  {
    std::ofstream anew(path, std::ios::trunc);  // the same file written again, longer, its start changed
    anew << "6000 100 long Arrays.fill(int)\n6100 100 long Arrays.copy(int)\n6200 100 long Arrays.sum(int)\n"
            "6300 100 long Arrays.max(int)\n";
  }
  ASSERT_TRUE(map.load(path, me));
  EXPECT_EQ(map.size(), 4U);
  EXPECT_EQ(map.find(0x7f10), "");
  EXPECT_EQ(map.find(0x6110), "long Arrays.copy(int)");
  unlink(path.c_str());
  {
    std::ofstream other(path);  // another file by the same name
    other << "5000 10 JS:~g /c.js:1:1\n";
  }
  ASSERT_TRUE(map.load(path, me));
  EXPECT_EQ(map.size(), 1U);
  EXPECT_EQ(map.find(0x5004), "JS:~g /c.js:1:1");
  unlink(path.c_str());
  rmdir(folder);
}

// The map's text is the program's: random lines never crash the parser, and every entry found covers its address.
TEST(PerfMap, RandomTextNeverCrashesTheParser) {
  std::mt19937_64 random(20261127);
  const std::string alphabet = "0123456789abcdefxX :\n\t-JS~*^+py()long.,/";
  for (int round = 0; round < 2000; ++round) {
    std::string text(random() % 600, ' ');
    for (char& c : text) c = random() % 8 == 0 ? static_cast<char>(random()) : alphabet[random() % alphabet.size()];
    PerfMap map;
    map.parse(text);
    for (int probe = 0; probe < 20; ++probe) {
      const std::uint64_t address = random() % 3 == 0 ? random() : random() % 0x10000;
      const std::string_view name = map.find(address);
      if (!name.empty()) (void)jit_frame(address, name, "m");
    }
  }
}

#if defined(__x86_64__)
// Registers and stack of this very frame, copied as the kernel copies a sample's.
struct Captured {
  std::uint64_t ip = 0, sp = 0, bp = 0;
  std::vector<std::uint8_t> stack;
};

// The copy reads the stack's redzones as the kernel would: not checked by AddressSanitizer.
__attribute__((noinline, no_sanitize("address"))) Captured capture_here() {
  Captured captured;
  std::uint64_t sp = 0, bp = 0, ip = 0;
  __asm__ volatile("mov %%rsp, %0\n\tmov %%rbp, %1\n\tlea 0(%%rip), %2" : "=r"(sp), "=r"(bp), "=r"(ip));
  captured = {ip, sp, bp, std::vector<std::uint8_t>(4096)};
  const volatile std::uint8_t* stack = reinterpret_cast<const volatile std::uint8_t*>(sp);
  for (std::size_t at = 0; at < captured.stack.size(); ++at) captured.stack[at] = stack[at];
  return captured;
}

// A stand-in for CPython's eval loop (named as it is), called by a stand-in for its start-up.
extern "C" __attribute__((noinline)) void _PyEval_EvalFrameDefault_stand_in(Captured* out) {
  *out = capture_here();
  __asm__ volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
}

__attribute__((noinline)) void interpreter_start_up(Captured* out) {
  _PyEval_EvalFrameDefault_stand_in(out);
  __asm__ volatile("" ::: "memory");
}

// Captured `depth` calls further down, through a pointer (no call is inlined away).
__attribute__((noinline)) void capture_down(Captured* out, int depth, void (*next)(Captured*, int, void*)) {
  if (depth == 0) {
    *out = capture_here();
  } else {
    next(out, depth - 1, reinterpret_cast<void*>(&capture_down));
  }
  __asm__ volatile("" ::: "memory");
}

void capture_down_by_pointer(Captured* out, int depth, void* self) {
  reinterpret_cast<void (*)(Captured*, int, void (*)(Captured*, int, void*))>(self)(out, depth, &capture_down_by_pointer);
}

// Captured from inside the C library's qsort (its frames have call-frame information, no frame pointer).
Captured* qsort_capture = nullptr;
int compare_and_capture(const void* a, const void* b) {
  if (qsort_capture != nullptr) {
    *qsort_capture = capture_here();
    qsort_capture = nullptr;
  }
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

// An unwinder that knows this process's code, and the sink it sends its stacks to.
struct OwnUnwinder {
  OwnUnwinder() {
    for (const auto& mapping : code_mappings()) unwinder.add_mapping(getpid(), mapping);
  }
  Options options;
  CollectingSink sink;
  detail::Unwinder unwinder{options, sink};
};

// Unwound by the rules of its frames' addresses, a real stack gives what libdwfl gives, frame for
// frame: through this program's functions at depths 0 to 24, and through the C library's qsort.
// Most are unwound by the rules (libdwfl only where a frame's rule is not a plain one).
TEST(Unwind, ByItsFramesRulesAStackUnwindsAsLibdwflUnwindsIt) {
  OwnUnwinder own;
  std::vector<Captured> stacks;
  for (int depth = 0; depth <= 24; depth += 3) {
    Captured captured;
    capture_down(&captured, depth, &capture_down_by_pointer);
    stacks.push_back(captured);
  }
  int numbers[64];
  for (int i = 0; i < 64; ++i) numbers[i] = (i * 37) % 64;
  Captured in_qsort;
  qsort_capture = &in_qsort;
  std::qsort(numbers, 64, sizeof(int), compare_and_capture);
  stacks.push_back(in_qsort);
  for (std::size_t i = 0; i < stacks.size(); ++i) {
    const Captured& c = stacks[i];
    const auto by_rules = own.unwinder.unwound_pcs(getpid(), gettid(), c.bp, c.sp, c.ip, c.stack.data(), c.stack.size(), true);
    const auto by_libdwfl = own.unwinder.unwound_pcs(getpid(), gettid(), c.bp, c.sp, c.ip, c.stack.data(), c.stack.size(), false);
    EXPECT_EQ(by_rules, by_libdwfl) << "stack " << i;
    EXPECT_GE(by_rules.size(), 3U) << "stack " << i;
  }
  EXPECT_GE(own.unwinder.unwound_by_rules(), stacks.size() - 1);
}

TEST(Unwind, ARealStackUnwindsToItsCallers) {
  OwnUnwinder own;
  CollectingSink& sink = own.sink;
  detail::Unwinder& unwinder = own.unwinder;
  const Captured here = capture_here();
  const std::uint32_t id = unwinder.stack(getpid(), gettid(), here.bp, here.sp, here.ip, here.stack.data(), here.stack.size(), 0);
  ASSERT_NE(id, 0U);
  const auto& frames = sink.stacks.at(id);
  ASSERT_GE(frames.size(), 2U);
  EXPECT_NE(frames[0].function.find("capture_here"), std::string::npos) << frames[0].function;
}

// Lines and inlined functions are read for the program's own modules and libraries, not for the C
// library's, the loader's or the Python interpreter's (libpython, the executable, lib-dynload).
TEST(Unwind, LinesAreReadForTheProgramNotForTheCLibraryOrTheInterpreter) {
  for (const char* module : {"/usr/bin/sort", "/opt/app/libengine.so", "/tmp/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so",
                             "/home/me/python_tool", "/usr/bin/python-config-helper", "/srv/pythonic"}) {
    EXPECT_TRUE(detail::lines_wanted(module)) << module;
  }
  for (const char* module : {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
                             "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0", "/usr/lib/libpython3.12d.so",
                             "/usr/bin/python3.12", "/usr/local/bin/python3", "/opt/py/bin/python",
                             "/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so"}) {
    EXPECT_FALSE(detail::lines_wanted(module)) << module;
  }
}

#if defined(__x86_64__)
// Where Python frames take the interpreter's place (a release of the GIL, a brk where the
// preload library's marker claims the heap), the native stack ends at the innermost eval loop:
// its start-up past it is not unwound. Elsewhere the whole stack is.
TEST(Unwind, AStackWithPythonFramesEndsAtTheEvalLoop) {
  OwnUnwinder own;
  Captured here;
  interpreter_start_up(&here);
  auto sample = [&](std::uint64_t release, bool moves_break) {
    const std::uint32_t id = own.unwinder.stack(getpid(), gettid(), here.bp, here.sp, here.ip, here.stack.data(),
                                                here.stack.size(), 1000, release, moves_break);
    std::vector<std::string> names;
    for (const Frame& frame : own.sink.stacks.at(id)) names.push_back(frame.function);
    return names;
  };
  auto holds = [](const std::vector<std::string>& names, std::string_view part) {
    return std::any_of(names.begin(), names.end(), [part](const std::string& name) { return name.find(part) != std::string::npos; });
  };
  const auto whole = sample(0, false);
  EXPECT_TRUE(holds(whole, "_PyEval_EvalFrameDefault_stand_in"));
  EXPECT_TRUE(holds(whole, "interpreter_start_up"));
  for (const auto& cut : {sample(5, false), sample(0, true)}) {
    ASSERT_FALSE(cut.empty());
    EXPECT_NE(cut.back().find("_PyEval_EvalFrameDefault_stand_in"), std::string::npos) << cut.back();
    EXPECT_FALSE(holds(cut, "interpreter_start_up"));
    EXPECT_LT(cut.size(), whole.size());
  }
}
#endif

// A magic word on a copied stack that begins no block that decodes (a name that is not UTF-8, a
// length past the copy) is passed over and counted, and the block further out is the stack's.
TEST(Unwind, APythonBlockThatDoesNotDecodeIsPassedOverForOneFurtherOut) {
  OwnUnwinder own;
  const std::string good = python_block({{12, "/app/train.py", "fill"}, {30, "/app/train.py", "<module>"}});
  std::string torn = python_block({{7, "/app/train.py", "f\x99"}});
  std::vector<std::uint8_t> stack(4096, 0);
  std::memcpy(stack.data() + 64, torn.data(), torn.size());
  std::memcpy(stack.data() + 1024, good.data(), good.size());
  const std::string_view found = own.unwinder.read_links(getpid(), stack.data(), stack.size());
  EXPECT_EQ(found, good);
  EXPECT_EQ(own.unwinder.python_blocks_refused(), 1u);
  // The block that does not decode alone, no block further out: none.
  std::vector<std::uint8_t> short_copy(stack.begin(), stack.begin() + 80);
  EXPECT_TRUE(own.unwinder.read_links(getpid(), short_copy.data(), short_copy.size()).empty());
  EXPECT_EQ(own.unwinder.python_blocks_refused(), 2u);
}

// A touching sample of a thread that had released the GIL (the BPF counter read the release's
// number) gets the Python frames the thread sends when it takes the GIL back; it holds nothing
// back meanwhile, and a sample read after the frames came gets them at once.
TEST(Unwind, ATouchingSampleInAReleaseOfTheGilGetsItsPythonFramesWhenTheyCome) {
  OwnUnwinder own;
  CollectingSink& sink = own.sink;
  detail::Unwinder& unwinder = own.unwinder;
  const Captured here = capture_here();
  auto sample = [&](std::uint64_t release, std::uint64_t time_ns) {
    return unwinder.stack(getpid(), gettid(), here.bp, here.sp, here.ip, here.stack.data(), here.stack.size(), time_ns,
                          release);
  };
  auto has_line = [&sink](std::uint32_t id, int line) {
    const auto& frames = sink.stacks.at(id);
    return std::any_of(frames.begin(), frames.end(), [line](const Frame& f) { return f.kind == FrameKind::python && f.line == line; });
  };
  const std::uint32_t plain = sample(0, 1000);
  const std::uint32_t waiting = sample(21, 2000);
  EXPECT_NE(waiting, plain);
  EXPECT_EQ(sample(21, 2500), waiting);  // the same release and stack: one id
  EXPECT_EQ(unwinder.oldest_pending_python_ns(), UINT64_MAX);  // a touching sample holds nothing back
  EXPECT_FALSE(has_line(waiting, 12));
  unwinder.resolve_python(getpid(), 21, python_block({{12, "/app/train.py", "fill"}, {30, "/app/train.py", "<module>"}}));
  EXPECT_TRUE(has_line(waiting, 12));  // sent again with its frames
  EXPECT_FALSE(sink.same.count(waiting));  // named by its frames, not made another stack's alias
  EXPECT_TRUE(has_line(sample(21, 3000), 12));  // read late, after the frames came
  EXPECT_FALSE(has_line(plain, 12));
}
#endif

// An unwinder and two return addresses in this program's code, for stacks that wait for their
// Python frames (stack_of_returns with a pending block).
class WaitingForPython : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto mappings = code_mappings();
    ASSERT_FALSE(mappings.empty());
    returns = {mappings[0].start + 17, mappings[0].start + 33};
  }
  Options options;
  CollectingSink sink;
  detail::Unwinder unwinder{options, sink};
  std::vector<std::uint64_t> returns;
};

// A Python stack of a function `load_batch` at `line`, called from line 30.
std::string load_batch_at(std::uint32_t line) {
  return python_block({{line, "/app/train.py", "load_batch"}, {30, "/app/train.py", "<module>"}});
}

// A big call made while its thread had released the GIL has a stack of its own, waiting for its
// Python frames; when the thread sends them, that stack is the same as the stack with them, so
// that every call from one line is one site. Sent before the call's stack was read (another
// CPU's buffer read first), they are kept for it.
TEST_F(WaitingForPython, AStackWaitingForItsPythonFramesBecomesTheStackWithThem) {
  const std::string line_12 = load_batch_at(12);
  const std::string line_14 = load_batch_at(14);

  const std::uint32_t waiting = unwinder.stack_of_returns(getpid(), returns, pending_python_block(7), 1000);
  const std::uint32_t other = unwinder.stack_of_returns(getpid(), returns, pending_python_block(8), 2000);
  EXPECT_NE(waiting, other);  // two releases: maybe two lines
  EXPECT_EQ(unwinder.oldest_pending_python_ns(), 1000U);  // what settles stays before the first
  unwinder.resolve_python(getpid(), 7, line_12);
  EXPECT_EQ(unwinder.oldest_pending_python_ns(), 2000U);
  unwinder.resolve_python(getpid(), 8, line_14);
  EXPECT_EQ(unwinder.oldest_pending_python_ns(), UINT64_MAX);

  const std::uint32_t direct = unwinder.stack_of_returns(getpid(), returns, line_12, 3000);  // with the GIL held
  ASSERT_TRUE(sink.same.count(waiting) && sink.same.count(other));
  EXPECT_EQ(sink.same[waiting], direct);
  EXPECT_NE(sink.same[other], direct);
  auto lines = [this](std::uint32_t id) {
    std::vector<int> found;
    for (const Frame& frame : sink.stacks.at(id)) found.push_back(frame.line);
    return found;
  };
  EXPECT_EQ(lines(waiting), lines(direct));  // sent again with its frames
  const std::vector<int> other_lines = lines(sink.same[other]);
  EXPECT_NE(std::find(other_lines.begin(), other_lines.end(), 14), other_lines.end());

  unwinder.resolve_python(getpid(), 9, line_14);  // before the stack that names it
  EXPECT_EQ(unwinder.stack_of_returns(getpid(), returns, pending_python_block(9), 4000), sink.same[other]);
  unwinder.resolve_python(getpid(), 99, "");  // nothing sent: nothing kept
  EXPECT_EQ(unwinder.oldest_pending_python_ns(), UINT64_MAX);
}

// The search each stack word takes agrees with a plain scan of the ranges, at their edges and
// between them, for every count of ranges from none to 40.
TEST(Unwind, TheCodeRangeSearchAgreesWithAScan) {
  std::mt19937_64 random(7);
  for (std::size_t count = 0; count <= 40; ++count) {
    std::vector<std::uint64_t> starts, ends, probes = {0, UINT64_MAX};
    std::uint64_t at = 0x1000;
    for (std::size_t i = 0; i < count; ++i) {
      at += 1 + random() % 0x10000;  // a gap of at least one byte
      starts.push_back(at);
      at += 1 + random() % 0x10000;
      ends.push_back(at);
      for (std::uint64_t edge : {starts.back() - 1, starts.back(), ends.back() - 1, ends.back()}) probes.push_back(edge);
    }
    for (int i = 0; i < 200; ++i) probes.push_back(random() % (at + 0x20000));
    for (std::uint64_t address : probes) {
      bool scanned = false;
      for (std::size_t i = 0; i < count; ++i) scanned = scanned || (starts[i] <= address && address < ends[i]);
      EXPECT_EQ(detail::in_sorted_ranges(starts, ends, address), scanned) << count << " ranges, address " << address;
    }
  }
}

// A stack that is not unwound (a munmap's, the preload library's resolving madvise) is still read
// for the link to a release's Python stack: the stack waiting for it gets its frames.
TEST_F(WaitingForPython, ALinkOnAStackThatIsNotUnwoundResolvesItsRelease) {
  const std::uint32_t waiting = unwinder.stack_of_returns(getpid(), returns, pending_python_block(7), 1000);
  const std::string line_12 = load_batch_at(12);
  // A copied stack: a word of something else, the link (its magic and the release), the block.
  std::string copied(8, '\x5a');
  const memcost_python_pending link{MEMCOST_PYTHON_RESOLVES_MAGIC, 7};
  copied.append(reinterpret_cast<const char*>(&link), sizeof(link));
  copied += line_12;
  copied.resize((copied.size() + 7) / 8 * 8 + 64, '\0');
  unwinder.read_links(getpid(), reinterpret_cast<const std::uint8_t*>(copied.data()), 8);  // the link cut off
  EXPECT_FALSE(sink.same.count(waiting));
  unwinder.read_links(getpid(), reinterpret_cast<const std::uint8_t*>(copied.data()), copied.size());
  ASSERT_TRUE(sink.same.count(waiting));
  EXPECT_EQ(unwinder.oldest_pending_python_ns(), UINT64_MAX);
  const std::uint32_t direct = unwinder.stack_of_returns(getpid(), returns, line_12, 2000);
  EXPECT_EQ(sink.same[waiting], direct);
}

// libdwfl's view of this process, its modules reported as libdwfl finds them itself.
struct ThisProcess {
  ThisProcess() {
    static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, nullptr};
    dwfl = dwfl_begin(&callbacks);
    if (dwfl && (dwfl_linux_proc_report(dwfl, getpid()) != 0 || dwfl_report_end(dwfl, nullptr, nullptr) != 0)) {
      dwfl_end(dwfl);
      dwfl = nullptr;
    }
  }
  ~ThisProcess() {
    if (dwfl) dwfl_end(dwfl);
  }
  ThisProcess(const ThisProcess&) = delete;
  ThisProcess& operator=(const ThisProcess&) = delete;
  Dwfl* dwfl = nullptr;
};

// The sorted table names every address as libdwfl's own lookup (a walk over every symbol) does:
// the C library's code, a few thousand addresses chosen at random, and this program's.
TEST(SymbolTable, NamesAddressesAsLibdwflsLookupDoes) {
  const ThisProcess process;
  Dwfl* dwfl = process.dwfl;
  ASSERT_NE(dwfl, nullptr);
  std::mt19937_64 random(7);
  std::size_t compared = 0, named = 0;
  for (const auto& mapping : code_mappings()) {
    if (mapping.path.find("libc.so") == std::string::npos && mapping.path.find("memcost_trace_tests") == std::string::npos) {
      continue;
    }
    Dwfl_Module* module = dwfl_addrmodule(dwfl, mapping.start);
    ASSERT_NE(module, nullptr) << mapping.path;
    detail::SymbolTable table(module);
    EXPECT_GT(table.size(), 100U) << mapping.path;
    for (int i = 0; i < 3000; ++i) {
      const std::uint64_t address = mapping.start + random() % (mapping.end - mapping.start);
      const char* theirs = dwfl_module_addrname(module, address);
      const char* ours = table.name_at(address);
      EXPECT_STREQ(ours, theirs) << mapping.path << " +" << std::hex << address - mapping.start;
      ++compared;
      named += theirs != nullptr;
    }
  }
  EXPECT_GE(compared, 6000U);
  EXPECT_GT(named, compared / 2);
}

// The inlined functions at an address from one walk of the unit agree with libdw's two walks per
// address (dwarf_getscopes, then the concrete parents of its innermost scope): this program's own
// code, where it has debugging information (the RelWithDebInfo build of make test-asan).
TEST(InlineScopes, AgreeWithLibdwsScopesOnThisProgramsCode) {
  const ThisProcess process;
  Dwfl* dwfl = process.dwfl;
  ASSERT_NE(dwfl, nullptr);
  std::mt19937_64 random(11);
  std::size_t compared = 0, inlined = 0, nested = 0;  // nested: where libdw finds no scope (above)
  std::map<Dwarf_Off, detail::InlineScopes> units;
  for (const auto& mapping : code_mappings()) {
    if (mapping.path.find("memcost_trace_tests") == std::string::npos) continue;
    Dwfl_Module* module = dwfl_addrmodule(dwfl, mapping.start);
    ASSERT_NE(module, nullptr);
    for (int i = 0; i < 4000; ++i) {
      const std::uint64_t address = mapping.start + random() % (mapping.end - mapping.start);
      Dwarf_Addr bias = 0;
      Dwarf_Die* unit = dwfl_module_addrdie(module, address, &bias);
      if (unit == nullptr) continue;
      Dwarf_Die* scopes = nullptr;
      int count = dwarf_getscopes(unit, address - bias, &scopes);
      if (count > 0) {
        Dwarf_Die innermost = scopes[0];
        std::free(scopes);
        scopes = nullptr;
        count = dwarf_getscopes_die(&innermost, &scopes);
      }
      std::vector<Dwarf_Off> theirs;
      for (int k = 0; k < count; ++k) {
        const int tag = dwarf_tag(&scopes[k]);
        if (tag == DW_TAG_inlined_subroutine || tag == DW_TAG_subprogram) theirs.push_back(dwarf_dieoffset(&scopes[k]));
        if (tag == DW_TAG_subprogram) break;
      }
      std::free(scopes);
      auto [index, fresh] = units.try_emplace(dwarf_dieoffset(unit));
      if (fresh) index->second = detail::InlineScopes(unit);
      std::vector<Dwarf_Off> ours;
      for (Dwarf_Die& die : index->second.at(address - bias)) ours.push_back(dwarf_dieoffset(&die));
      if (theirs.empty() && !ours.empty()) {
        // libdw walks down only through scopes that hold the address, and so never reaches a
        // function nested in one that does not (a lambda's operator(), inside its closure type
        // inside the enclosing function): checked on its own, it must hold the address.
        Dwarf_Addr module_bias = 0;
        Dwarf* dwarf = dwfl_module_getdwarf(module, &module_bias);
        Dwarf_Die outer;
        ASSERT_NE(dwarf_offdie(dwarf, ours.back(), &outer), nullptr);
        EXPECT_EQ(dwarf_tag(&outer), DW_TAG_subprogram) << "+" << std::hex << address - mapping.start;
        EXPECT_GT(dwarf_haspc(&outer, address - bias), 0) << "+" << std::hex << address - mapping.start;
        ++nested;
        continue;
      }
      EXPECT_EQ(ours, theirs) << "+" << std::hex << address - mapping.start;
      ++compared;
      inlined += theirs.size() > 1;
    }
  }
  if (compared == 0) GTEST_SKIP() << "this build has no debugging information (make test-asan's has)";
  EXPECT_GT(inlined, 0U);
  EXPECT_LT(nested, compared / 10);  // the exception stays one
}

// Read straight from the file's symbol section, the table holds what libdwfl's symbol-by-symbol
// reading gives, symbol for symbol: every module this program maps (the C library, libstdc++,
// libdw, libelf, this program), each read the direct way.
TEST(SymbolTable, ReadDirectlyHoldsWhatLibdwflsReadingGives) {
  const ThisProcess process;
  ASSERT_NE(process.dwfl, nullptr);
  std::set<Dwfl_Module*> seen;
  std::size_t direct = 0;
  for (const auto& mapping : code_mappings()) {
    Dwfl_Module* module = dwfl_addrmodule(process.dwfl, mapping.start);
    if (module == nullptr || !seen.insert(module).second) continue;
    detail::SymbolTable ours(module);
    detail::SymbolTable theirs = detail::SymbolTable::through_libdwfl(module);
    if (theirs.size() == 0) continue;
    EXPECT_TRUE(ours.read_directly()) << mapping.path;
    direct += ours.read_directly();
    ASSERT_EQ(ours.size(), theirs.size()) << mapping.path;
    const auto our_symbols = ours.symbols(), their_symbols = theirs.symbols();
    // In order: by start, then rank, then place in the file's table.
    EXPECT_TRUE(std::is_sorted(our_symbols.begin(), our_symbols.end(), [](const auto& a, const auto& b) {
      return a.start != b.start ? a.start < b.start : a.rank != b.rank ? a.rank < b.rank : a.index < b.index;
    })) << mapping.path;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      const auto& a = our_symbols[i];
      const auto& b = their_symbols[i];
      ASSERT_TRUE(a.start == b.start && a.size == b.size && std::string_view(a.name) == b.name && a.rank == b.rank &&
                  a.index == b.index && a.section_end == b.section_end)
          << mapping.path << " symbol " << i << ": " << a.name << " against " << b.name;
    }
  }
  EXPECT_GE(direct, 3U);
}

TEST(SymbolTable, TheHoldingSymbolWinsThenTheBestBoundThenTheNearestLabelBeforeIt) {
  using Symbol = detail::SymbolTable::Symbol;
  detail::SymbolTable table({Symbol{0x1000, 0x100, "outer", 0}, Symbol{0x1000, 0x100, "outer_local", 2},
                                   Symbol{0x1040, 0, "label", 2}, Symbol{0x1200, 0x10, "small", 1},
                                   Symbol{0x1200, 0x10, "small_global", 0}, Symbol{0x1300, 0, "tail", 2}});
  EXPECT_STREQ(table.name_at(0x1000), "outer");
  EXPECT_STREQ(table.name_at(0x1080), "outer");  // inside outer, past a local label: the function
  EXPECT_STREQ(table.name_at(0x1205), "small_global");
  // Past a sized function and before the next symbol: no name (the labels before that function do not
  // reach past it), as libdwfl says; past a label with nothing sized between: the label.
  EXPECT_EQ(table.name_at(0x1250), nullptr);
  EXPECT_STREQ(table.name_at(0x1400), "tail");
  EXPECT_EQ(table.name_at(0x0fff), nullptr);
  EXPECT_EQ(detail::SymbolTable().name_at(0x1000), nullptr);
}

// A table sorts only the buckets lookups reach: each lookup names what it names in a table sorted
// whole before the first. Random symbols, crowded at a few places and sparse elsewhere, of every
// rank, sized or labels, many at one address; addresses at, between, before and past them.
TEST(SymbolTable, SortingWhereLookedUpNamesAsSortingWholeDoes) {
  using Symbol = detail::SymbolTable::Symbol;
  std::mt19937_64 random(20261128);
  for (const std::size_t count : {std::size_t{1}, std::size_t{15}, std::size_t{17}, std::size_t{3000}, std::size_t{100000}}) {
    std::vector<std::string> names(count);
    std::vector<Symbol> symbols;
    for (std::size_t i = 0; i < count; ++i) {
      names[i] = std::to_string(i);
      const std::uint64_t base = random() % 4 == 0 ? 0x7f0000000000ULL : 0x400000ULL;
      const std::uint64_t start = base + (random() % 2 ? random() % (count * 64 + 1) : random() % 256 * 16);
      const std::uint64_t size = random() % 3 == 0 ? 0 : random() % 512;
      const std::uint64_t section_end = size == 0 && random() % 2 ? start + random() % 4096 : UINT64_MAX;
      symbols.push_back({start, size, names[i].c_str(), static_cast<int>(random() % 3), static_cast<std::uint32_t>(i + 1), section_end});
    }
    detail::SymbolTable lazy(symbols), whole(symbols);
    (void)whole.symbols();  // every bucket sorted
    for (int lookup = 0; lookup < 20000; ++lookup) {
      const Symbol& near = symbols[random() % count];
      const std::uint64_t address = lookup % 7 == 0 ? random() : near.start + random() % 1024 - 512;
      const char* theirs = whole.name_at(address);
      const char* ours = lazy.name_at(address);
      ASSERT_EQ(ours == nullptr, theirs == nullptr) << count << " symbols, address " << std::hex << address;
      if (ours) {
        ASSERT_STREQ(ours, theirs) << count << " symbols, address " << std::hex << address;
      }
    }
    EXPECT_EQ(lazy.symbols().size(), count);
  }
}

// Random registers and random, truncated stacks: every call returns, none reads outside the
// copy it was given (AddressSanitizer would say), and what cannot be unwound ends the stack.
TEST(Unwind, RandomAndTruncatedStacksNeverCrashTheUnwinder) {
  Options options;
  CollectingSink sink;
  detail::Unwinder unwinder(options, sink);
  const auto mappings = code_mappings();
  for (const auto& mapping : mappings) unwinder.add_mapping(getpid(), mapping);
  std::mt19937_64 random(20261123);
  auto code_address = [&] {
    const auto& mapping = mappings[random() % mappings.size()];
    return mapping.start + random() % (mapping.end - mapping.start);
  };
  const std::uint64_t extremes[] = {0, 1, 8, 4096, UINT64_MAX, UINT64_MAX - 7, UINT64_MAX - 4095, 1ULL << 63};
  for (int round = 0; round < 3000; ++round) {
    const std::size_t bytes = random() % 5 == 0 ? random() % 64 : random() % 4097;  // often cut short, often odd
    std::vector<std::uint8_t> stack(bytes);
    for (std::size_t at = 0; at + 8 <= bytes; at += 8) {
      std::uint64_t word = 0;
      switch (random() % 4) {
        case 0: word = code_address(); break;  // looks like a return address
        case 1: word = extremes[random() % std::size(extremes)]; break;
        default: word = random(); break;
      }
      std::memcpy(stack.data() + at, &word, 8);
    }
    const std::uint64_t sp = random() % 3 == 0 ? extremes[random() % std::size(extremes)] : random();
    const std::uint64_t bp = random() % 2 == 0 ? sp + random() % 8192 : random();
    const std::uint64_t ip = random() % 4 == 0 ? random() : code_address();
    (void)unwinder.stack(getpid(), gettid(), bp, sp, ip, bytes ? stack.data() : nullptr, bytes, 0);
    // Unwound by its frames' rules or by libdwfl alone, a stack is the same, however corrupt.
    const std::uint8_t* copy = bytes ? stack.data() : nullptr;
    ASSERT_EQ(unwinder.unwound_pcs(getpid(), gettid(), bp, sp, ip, copy, bytes, true),
              unwinder.unwound_pcs(getpid(), gettid(), bp, sp, ip, copy, bytes, false)) << "round " << round;
  }
  EXPECT_GT(unwinder.unwind_failures() + sink.stacks.size(), 0U);
}

}  // namespace
}  // namespace memcost::trace
