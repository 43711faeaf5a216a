#include "kernel_symbols.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "os/os.hpp"

namespace memcost::trace::detail {

bool is_tracing_function(std::string_view name) {
  while (!name.empty() && name.front() == '_') name.remove_prefix(1);
  return name.rfind("perf_", 0) == 0 || name.rfind("bpf_trace_", 0) == 0;
}

KernelTable kernel_table_from(std::istream& kallsyms) {
  KernelTable table;
  std::vector<std::pair<std::uint64_t, int>> marks;  // start of every text symbol; 1 fault, 2 zeroing, 3 tracing, 0 other
  std::string line;
  while (std::getline(kallsyms, line)) {
    const auto first = line.find(' ');
    if (first == std::string::npos || first + 3 > line.size()) continue;
    const char type = line[first + 1];
    if (type != 't' && type != 'T') continue;
    const std::uint64_t address = std::strtoull(line.c_str(), nullptr, 16);
    if (address == 0) continue;  // hidden
    std::string_view name(line);
    name.remove_prefix(first + 3);
    name = name.substr(0, name.find('\t'));  // "\t[module]"
    const int kind = kFaultFunctions.count(name) ? 1 : kZeroingFunctions.count(name) ? 2 : is_tracing_function(name) ? 3 : 0;
    marks.emplace_back(address, kind);
  }
  std::sort(marks.begin(), marks.end());
  for (std::size_t i = 0; i + 1 < marks.size(); ++i) {
    if (marks[i].second == 0) continue;
    auto& ranges = marks[i].second == 1 ? table.fault : marks[i].second == 2 ? table.zeroing : table.tracing;
    ranges.emplace_back(marks[i].first, marks[i + 1].first);
  }
  return table;
}

namespace {

constexpr std::string_view kCacheHeader = "memcost kernel ranges 1 ";

// This boot and kernel: "<boot id> <release>", empty where either cannot be read.
std::string this_boot() {
  auto id = os::read_text("/proc/sys/kernel/random/boot_id");
  auto release = os::read_text("/proc/sys/kernel/osrelease");
  if (!id || !release) return {};
  auto trimmed = [](std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  };
  return trimmed(*id) + " " + trimmed(*release);
}

const std::filesystem::path kCacheFolder = "/run/memcost";

}  // namespace

std::string kernel_table_text(const KernelTable& table, std::string_view boot) {
  std::ostringstream out;
  out << kCacheHeader << boot << '\n' << std::hex;
  for (const auto& [kind, ranges] : {std::pair{'f', &table.fault}, std::pair{'z', &table.zeroing}, std::pair{'t', &table.tracing}})
    for (const auto& [start, end] : *ranges) out << kind << ' ' << start << ' ' << end << '\n';
  return out.str();
}

std::optional<KernelTable> kernel_table_parse(std::istream& text, std::string_view boot) {
  std::string line;
  if (!std::getline(text, line) || line != std::string(kCacheHeader) + std::string(boot)) return std::nullopt;
  KernelTable table;
  while (std::getline(text, line)) {
    char kind = 0;
    unsigned long long start = 0, end = 0;
    char extra = 0;
    if (std::sscanf(line.c_str(), "%c %llx %llx %c", &kind, &start, &end, &extra) != 3 || start >= end) return std::nullopt;
    KernelRanges* ranges = kind == 'f' ? &table.fault : kind == 'z' ? &table.zeroing : kind == 't' ? &table.tracing : nullptr;
    if (ranges == nullptr || (!ranges->empty() && ranges->back().second > start)) return std::nullopt;  // sorted, disjoint
    ranges->emplace_back(start, end);
  }
  return table;
}

bool KernelSymbols::empty() const {
  std::ifstream in("/proc/kallsyms");
  std::string line;
  return !std::getline(in, line) || std::strtoull(line.c_str(), nullptr, 16) == 0;
}

KernelTable KernelSymbols::read() {
  // Only root keeps the table: /run/memcost is root's (memcost's journal lives there too), and a
  // file another user could write must not decide which samples count as faults.
  const std::string boot = geteuid() == 0 ? this_boot() : std::string();
  const auto cache = kCacheFolder / "kernel-ranges";
  if (!boot.empty()) {
    std::ifstream kept(cache);
    if (auto table = kept ? kernel_table_parse(kept, boot) : std::nullopt) return *table;
  }
  std::ifstream in("/proc/kallsyms");
  KernelTable table = kernel_table_from(in);
  if (!boot.empty() && !table.fault.empty()) {
    // Written whole under another name, then renamed: a reader sees the old file or the new one.
    std::error_code ignored;
    std::filesystem::create_directories(kCacheFolder, ignored);
    const auto partial = cache.string() + "." + std::to_string(getpid());
    {
      std::ofstream out(partial, std::ios::trunc);
      out << kernel_table_text(table, boot);
    }
    std::filesystem::rename(partial, cache, ignored);
    if (ignored) std::filesystem::remove(partial, ignored);
  }
  return table;
}

}  // namespace memcost::trace::detail
