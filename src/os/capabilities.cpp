// The capability layer: portable, built on the OS layer's raw queries.
#include "os/capabilities.hpp"

#include <algorithm>

namespace memcost::os {

Capabilities capabilities() {
  Capabilities offered;
  offered.base_page_bytes = base_page_size();
  offered.thp = thp_settings();
  offered.hugetlb_pools = hugetlb_pools();
  offered.large_pages = large_pages();
  offered.top_down_on_request = top_down_on_request();
  return offered;
}

bool populate_write_works() {
  Mapping page = map({base_page_size(), PageKind::base});
  if (!page.status.ok()) return false;
  const bool works = populate_write(page.address, page.size_bytes).ok();
  (void)release(page.address, page.size_bytes);
  return works;
}

std::uint64_t hugetlb_pages_available(const HugetlbPool& pool) {
  return pool.free_pages > pool.reserved_pages ? pool.free_pages - pool.reserved_pages : 0;
}

std::optional<HugetlbPool> hugetlb_pool(const Capabilities& offered, std::size_t page_size_bytes) {
  auto pool = std::find_if(offered.hugetlb_pools.begin(), offered.hugetlb_pools.end(),
                           [&](const HugetlbPool& p) { return p.page_size_bytes == page_size_bytes; });
  if (pool == offered.hugetlb_pools.end()) return std::nullopt;
  return *pool;
}

Verdict page_kind_verdict(const Capabilities& offered, PageKind kind, std::size_t size_bytes) {
  switch (kind) {
    case PageKind::system:
    case PageKind::base: return {true, ""};
    case PageKind::thp:
      if (!offered.thp.present) return {false, "this system offers no transparent huge pages"};
      if (offered.thp.enabled == "never") return {false, "THP is 'never' here"};
      return {true, ""};
    case PageKind::huge_2mb:
    case PageKind::huge_1gb: {
      if (offered.large_pages.offered) {  // Windows: no pool to count; the privilege decides
        if (kind == PageKind::huge_1gb) return {false, "memcost maps 1 GB pages only from Linux hugetlb pools"};
        if (!offered.large_pages.privilege_held) return {false, offered.large_pages.why_not};
        return {true, ""};
      }
      const std::size_t page = page_kind_bytes(kind);
      auto pool = hugetlb_pool(offered, page);
      if (!pool) return {false, std::string("this system has no ") + page_kind_name(kind) + " pool"};
      const std::uint64_t needed = (size_bytes + page - 1) / page;
      const std::uint64_t available = hugetlb_pages_available(*pool);
      if (available >= needed) return {true, ""};
      return {false, "the pool has " + std::to_string(available) + " free pages, " + std::to_string(needed) + " needed"};
    }
  }
  return {false, "unknown page kind"};
}

}  // namespace memcost::os
