// What this machine offers for memory, read once into one struct, and the one
// rule that decides whether a page kind can hold a given size and why not.
// The probe, big_array and `memcost info` (through the probe's context line)
// all decide with page_kind_verdict: no caller reads pools or THP modes itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "os/os.hpp"

namespace memcost::os {

struct Capabilities {
  std::size_t base_page_bytes = 0;
  ThpSettings thp;
  std::vector<HugetlbPool> hugetlb_pools;
  LargePages large_pages;  // Windows' large pages (no pool: taken at allocation, with a privilege)
  // A placement can be requested top-down (Windows' MEM_TOP_DOWN).
  bool top_down_on_request = false;
};

// Reads everything now: a few sysfs files, cheap enough for every big allocation.
[[nodiscard]] Capabilities capabilities();
// Whether populate_write() works here, tried on one page (MADV_POPULATE_WRITE on Linux 5.14+,
// VirtualLock on Windows): a mapping made and released, so asked for apart, once per run.
[[nodiscard]] bool populate_write_works();

// Pages of a hugetlb pool that a new mapping may take: free minus those
// already promised to existing mappings, never below zero.
[[nodiscard]] std::uint64_t hugetlb_pages_available(const HugetlbPool& pool);
[[nodiscard]] std::optional<HugetlbPool> hugetlb_pool(const Capabilities& offered, std::size_t page_size_bytes);

struct Verdict {
  bool usable = false;
  std::string why_not;  // "THP is 'never' here", "the pool has 0 free pages, 4 needed"; empty when usable
};
// Whether a mapping of `kind` of `size_bytes` (rounded up to the kind's page) can be made here now.
[[nodiscard]] Verdict page_kind_verdict(const Capabilities& offered, PageKind kind, std::size_t size_bytes);

}  // namespace memcost::os
