// Which kernel functions a CPU sample was in: the page-fault handler's entry points and the
// functions that clear a page, found by name in /proc/kallsyms (so no one kernel's layout is
// assumed), as address ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string_view>
#include <unordered_set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace memcost::trace::detail {

// The handler's entry on x86-64 (asm_exc_page_fault, exc_page_fault, do_user_addr_fault) and
// arm64 (el0_da, do_mem_abort, do_translation_fault, do_page_fault), and the generic core.
inline const std::unordered_set<std::string_view> kFaultFunctions = {
    "asm_exc_page_fault", "exc_page_fault",       "do_user_addr_fault", "do_page_fault",    "do_mem_abort",
    "do_translation_fault", "el0_da",             "handle_mm_fault",    "__handle_mm_fault"};
// Clearing a page the program is about to see: x86-64's clear_page_erms/_rep/_orig, the generic
// and huge-page paths (clear_huge_page before 6.9, folio_zero_user after), arm64's clear_page.
inline const std::unordered_set<std::string_view> kZeroingFunctions = {
    "clear_page",          "clear_pages",          "clear_page_erms",    "clear_page_rep",      "clear_page_orig",
    "clear_pages_erms",    "clear_pages_rep",      "clear_user_page",    "clear_user_highpage", "clear_user_highpages",
    "clear_highpage",      "clear_huge_page",      "clear_gigantic_page", "clear_subpage",      "folio_zero_user"};

// The tracer's own work in the handler: perf's (the page-fault event recording a sample, copying
// the user stack into it; every function named perf_* or __perf_*) and the BPF counter's (its
// JIT-compiled programs, bpf_prog_*, and the tracepoint glue that runs them, bpf_trace_run* and
// __bpf_trace_*): the tracer's cost, not the fault's. A sample with any of them in its chain is.
inline bool is_tracing_function(std::string_view name) {
  while (!name.empty() && name.front() == '_') name.remove_prefix(1);
  return name.rfind("perf_", 0) == 0 || name.rfind("bpf_prog_", 0) == 0 || name.rfind("bpf_trace_", 0) == 0 ||
         name.rfind("bpf_trace_run", 0) == 0;
}

// The kernel formats every symbol of /proc/kallsyms (hundreds of thousands) for a reader: 40 ms
// here, which the first question would wait for after the command has ended. read_ahead() reads
// it on a thread of its own while the events are opened and the command runs (a `trace -- true`
// asks as soon as it starts draining); without it, the first question reads it.
class KernelSymbols {
 public:
  KernelSymbols() = default;
  KernelSymbols(const KernelSymbols&) = delete;
  KernelSymbols& operator=(const KernelSymbols&) = delete;
  ~KernelSymbols() {
    if (reader_.joinable()) reader_.join();
  }
  void read_ahead() {
    if (!read_ && !reader_.joinable()) reader_ = std::thread([this] { table_ = read(); });
  }
  // Whether the addresses are hidden (kptr_restrict) or absent: the first line says.
  [[nodiscard]] bool empty() const {
    std::ifstream in("/proc/kallsyms");
    std::string line;
    return !std::getline(in, line) || std::strtoull(line.c_str(), nullptr, 16) == 0;
  }
  [[nodiscard]] bool in_fault(std::uint64_t ip) const { return inside(ranges().fault, ip); }
  [[nodiscard]] bool zeroing(std::uint64_t ip) const { return inside(ranges().zeroing, ip); }
  [[nodiscard]] bool tracing(std::uint64_t ip) const { return inside(ranges().tracing, ip); }

 private:
  using Ranges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;  // sorted, disjoint
  struct Table {
    Ranges fault, zeroing, tracing;
  };

  const Table& ranges() const {
    if (!read_) {
      if (reader_.joinable()) reader_.join();
      else table_ = read();
      read_ = true;
    }
    return table_;
  }

  static Table read() {
    Table table;
    std::ifstream in("/proc/kallsyms");
    std::vector<std::pair<std::uint64_t, int>> marks;  // start of every text symbol; 1 fault, 2 zeroing, 3 tracing, 0 other
    std::string line;
    while (std::getline(in, line)) {
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
      // A function ends where the next symbol begins.
      auto& ranges = marks[i].second == 1 ? table.fault : marks[i].second == 2 ? table.zeroing : table.tracing;
      ranges.emplace_back(marks[i].first, marks[i + 1].first);
    }
    return table;
  }

  static bool inside(const Ranges& ranges, std::uint64_t ip) {
    auto after = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(ip, UINT64_MAX));
    return after != ranges.begin() && ip < std::prev(after)->second;
  }

  mutable bool read_ = false;
  mutable Table table_;
  mutable std::thread reader_;  // read_ahead's, joined by the first question
};

}  // namespace memcost::trace::detail
