#include "trace/unwind/perf_map.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string>

namespace memcost::trace {
namespace {

// One hexadecimal field, with or without "0x" (the JVM writes it, node does not).
bool hex_field(std::string_view& line, std::uint64_t& value) {
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (line.starts_with("0x") || line.starts_with("0X")) line.remove_prefix(2);
  const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), value, 16);
  if (error != std::errc() || end == line.data()) return false;
  line.remove_prefix(static_cast<std::size_t>(end - line.data()));
  return true;
}

// "file:line" or "file:line:column" at the end of `text`: the file and line, or line 0.
std::pair<std::string, int> split_location(std::string_view text) {
  auto number_after = [](std::string_view value, std::size_t colon) {
    int number = 0;
    const auto [end, error] = std::from_chars(value.data() + colon + 1, value.data() + value.size(), number);
    return error == std::errc() && end == value.data() + value.size() ? number : -1;
  };
  std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return {std::string(text), 0};
  int last = number_after(text, colon);
  if (last < 0) return {std::string(text), 0};
  std::string_view before = text.substr(0, colon);
  const std::size_t previous = before.rfind(':');
  if (previous != std::string_view::npos) {
    if (const int line = number_after(before, previous); line >= 0) return {std::string(before.substr(0, previous)), line};
  }
  return {std::string(before), last};
}

}  // namespace

std::string perf_map_path(int pid) { return "/tmp/perf-" + std::to_string(pid) + ".map"; }

bool PerfMap::load(const std::string& path, unsigned owner) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    refused_ = errno == ELOOP;  // a symbolic link
    return false;
  }
  struct stat file {};
  const bool trusted = fstat(fd, &file) == 0 && S_ISREG(file.st_mode) && (file.st_uid == owner || file.st_uid == 0) &&
                       static_cast<std::uintmax_t>(file.st_size) <= kMostBytes;
  refused_ = !trusted;
  const auto size = static_cast<std::uintmax_t>(trusted ? file.st_size : 0);
  // Read again whole where it is another file, or this one shorter or its start changed (written
  // anew); else only what was appended since (CPython 3.12 appends a line for each function it
  // runs: an `import torch` writes 40,000).
  char head[sizeof(head_)] = {};
  const std::size_t head_bytes = trusted ? static_cast<std::size_t>(std::max<ssize_t>(0, pread(fd, head, sizeof(head), 0))) : 0;
  char last = '\n';  // the end of what was read: a newline, unless the file was written anew
  if (trusted && bytes_read_ > 0 && bytes_read_ <= size && pread(fd, &last, 1, static_cast<off_t>(bytes_read_ - 1)) != 1) last = 0;
  if (trusted && (file.st_ino != inode_ || size < bytes_read_ || last != '\n' ||
                  std::string_view(head, std::min(head_bytes, head_bytes_)) != std::string_view(head_, std::min(head_bytes, head_bytes_)))) {
    entries_.clear();
    bytes_read_ = 0;
    inode_ = file.st_ino;
  }
  if (!trusted || size == bytes_read_) {
    close(fd);
    return trusted;
  }
  std::copy(head, head + head_bytes, head_);
  head_bytes_ = head_bytes;
  std::string text(static_cast<std::size_t>(size - bytes_read_), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(bytes_read_ + got));
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  // A line still being written is read whole next time.
  text.resize(got);
  const std::size_t whole = text.rfind('\n');
  if (whole == std::string::npos) return true;
  text.resize(whole + 1);
  parse(text);
  bytes_read_ += whole + 1;
  return true;
}

void PerfMap::parse(std::string_view text) {
  std::size_t order = entries_.size();
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    std::uint64_t start = 0, size = 0;
    if (!hex_field(line, start) || !hex_field(line, size) || size == 0) continue;
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty()) continue;
    entries_.emplace(start, Entry{start + size, order++, std::string(line)});
  }
}

std::string_view PerfMap::find(std::uint64_t address) const {
  // Entries starting at or below the address; the latest-written one that covers it. Compiled code
  // is small, so the scan back stops within a few entries once they end below the address.
  auto after = entries_.upper_bound(address);
  const Entry* best = nullptr;
  constexpr int kLookBack = 64;
  int looked = 0;
  for (auto it = after; it != entries_.begin() && looked < kLookBack; ++looked) {
    --it;
    if (address < it->second.end && (best == nullptr || it->second.order > best->order)) best = &it->second;
  }
  return best ? std::string_view(best->name) : std::string_view();
}

Frame jit_frame(std::uint64_t address, std::string_view name, const std::string& map_path) {
  Frame frame;
  frame.kind = FrameKind::jit;
  frame.address = address;
  frame.module = map_path;
  if (name.starts_with("JS:") || name.starts_with("LazyCompile:") || name.starts_with("Function:")) {
    // V8: "JS:~name file:line:column"; ~ interpreted, ^ baseline, + maglev, * optimized.
    name.remove_prefix(name.find(':') + 1);
    if (!name.empty() && (name.front() == '~' || name.front() == '^' || name.front() == '*' || name.front() == '+')) {
      name.remove_prefix(1);
    }
    const std::size_t space = name.rfind(' ');
    if (space != std::string_view::npos) {
      std::tie(frame.file, frame.line) = split_location(name.substr(space + 1));
      name = name.substr(0, space);
    }
    frame.function = name.empty() ? "(anonymous)" : std::string(name);
    return frame;
  }
  if (name.starts_with("py::")) {
    // CPython's trampolines: "py::function:file".
    name.remove_prefix(4);
    const std::size_t colon = name.find(':');
    frame.function = std::string(name.substr(0, colon));
    if (colon != std::string_view::npos) frame.file = std::string(name.substr(colon + 1));
    return frame;
  }
  // HotSpot: "long Arrays.allocateBlocks(int, int)": a method's return type goes, its parameters
  // stay. Its stubs ("StubRoutines (1)", "Interpreter") are left as they are.
  const std::size_t paren = name.find('(');
  const std::string_view head = name.substr(0, paren);
  const std::size_t space = head.find(' ');
  if (paren != std::string_view::npos && space != std::string_view::npos &&
      head.substr(space + 1).find('.') != std::string_view::npos && head.substr(space + 1).find(' ') == std::string_view::npos) {
    name.remove_prefix(space + 1);
  }
  frame.function = std::string(name);
  return frame;
}

}  // namespace memcost::trace
