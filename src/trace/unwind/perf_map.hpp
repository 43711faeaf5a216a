// JIT-compiled code named by perf's map convention: a runtime writes `/tmp/perf-PID.map`, one line
// per compiled function, "START SIZE NAME" in hexadecimal (node --perf-basic-prof, the JVM's
// -XX:+DumpPerfMapAtExit or `jcmd PID Compiler.perfmap`, CPython 3.12+ -X perf).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trace/tracer.hpp"

namespace memcost::trace {

class PerfMap {
 public:
  // Reads what was appended to the map at `path` since the last read (all of it again where the
  // file was replaced or written anew); false when there is no map, or when the file is not one to
  // trust (refused() says so). Any user can create /tmp/perf-PID.map
  // before the process does, so, as perf does, only a regular file (not a link) owned by `owner`
  // (the traced process's user) or root is read, and at most kMostBytes of it.
  bool load(const std::string& path, unsigned owner);
  [[nodiscard]] bool refused() const { return refused_; }
  static constexpr std::uintmax_t kMostBytes = 1ULL << 30;
  // Parses map text, added to what was read before (as load does, from memory: what the tests use).
  void parse(std::string_view text);

  // The name of the code at `address`; where entries overlap (code moved, or a function compiled
  // again) the one written last wins. Empty when no entry covers it.
  [[nodiscard]] std::string_view find(std::uint64_t address) const;
  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::uint64_t end = 0;
    std::size_t order = 0;  // line number: later lines win
    std::string name;
  };
  // By start. A tree, not a sorted array: lines come a few at a time while a program runs, and
  // merging each few into 40,000 sorted ones made the tracer's CPU grow with the square.
  std::multimap<std::uint64_t, Entry> entries_;
  std::uintmax_t bytes_read_ = 0;  // whole lines read, from the file's start
  std::uintmax_t inode_ = 0;
  char head_[64] = {};  // the file's first bytes as last read: a map written anew differs there
  std::size_t head_bytes_ = 0;
  bool refused_ = false;
};

// The path perf's convention gives a process's map.
[[nodiscard]] std::string perf_map_path(int pid);

// A frame for JIT-compiled code named `name` by a runtime's map: the function, and the source file
// and line where the runtime gives them. node: "JS:~f /a.js:4:24" (the marker says how it was
// compiled) and "Builtin:X"; HotSpot: "long Arrays.f(int, int)" (its return type dropped);
// CPython: "py::f:/a.py". Anything else is the name as it is.
[[nodiscard]] Frame jit_frame(std::uint64_t address, std::string_view name, const std::string& map_path);

}  // namespace memcost::trace
