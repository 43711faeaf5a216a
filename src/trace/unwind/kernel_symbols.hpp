// Which kernel functions a CPU sample was in: the page-fault handler's entry points and the
// functions that clear a page, found by name in /proc/kallsyms (so no one kernel's layout is
// assumed), as address ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <istream>
#include <optional>
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
// the user stack into it; every function named perf_* or __perf_*) and the BPF counter's glue that
// runs its programs (bpf_trace_run*, __bpf_trace_*): the tracer's cost, not the fault's. A sample
// with any of them in its chain is. The JIT-compiled programs themselves (bpf_prog_<tag>, a new
// address at every load) are not listed: the glue that ran them is in the same chain, and the
// ranges below stay those of the boot, so they can be kept (KernelSymbols::read).
bool is_tracing_function(std::string_view name);

// Sorted, disjoint address ranges [start, end).
using KernelRanges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

struct KernelTable {
  KernelRanges fault, zeroing, tracing;
  bool operator==(const KernelTable&) const = default;
};

// The ranges from /proc/kallsyms's text ("address type name[\t[module]]" lines): a function ends
// where the next symbol begins.
KernelTable kernel_table_from(std::istream& kallsyms);

// The table as a cache file's text, and back: "memcost kernel ranges 1 <boot id> <release>", then
// one "f|z|t start end" line per range (hex). nullopt where the header names another boot or
// kernel, or a line is malformed (the file is then read again from /proc/kallsyms).
std::string kernel_table_text(const KernelTable& table, std::string_view boot);
std::optional<KernelTable> kernel_table_parse(std::istream& text, std::string_view boot);

// The kernel formats every symbol of /proc/kallsyms (hundreds of thousands) for a reader: 60-100 ms
// of CPU on the 2-vCPU guest, paid by every `trace` (a `trace -- true` asks as soon as it starts
// draining). Kernel text does not move within a boot, so the table is kept per boot, as root, in
// /run/memcost (a tmpfs, empty after a reboot), keyed by the boot's id and the kernel's release.
// read_ahead() reads it on a thread of its own while the events are opened and the command runs;
// without it, the first question reads it.
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
  [[nodiscard]] bool empty() const;
  [[nodiscard]] bool in_fault(std::uint64_t ip) const { return inside(ranges().fault, ip); }
  [[nodiscard]] bool zeroing(std::uint64_t ip) const { return inside(ranges().zeroing, ip); }
  [[nodiscard]] bool tracing(std::uint64_t ip) const { return inside(ranges().tracing, ip); }

 private:
  const KernelTable& ranges() const {
    if (!read_) {
      if (reader_.joinable()) reader_.join();
      else table_ = read();
      read_ = true;
    }
    return table_;
  }

  static KernelTable read();

  static bool inside(const KernelRanges& ranges, std::uint64_t ip) {
    auto after = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(ip, UINT64_MAX));
    return after != ranges.begin() && ip < std::prev(after)->second;
  }

  mutable bool read_ = false;
  mutable KernelTable table_;
  mutable std::thread reader_;  // read_ahead's, joined by the first question
};

}  // namespace memcost::trace::detail
