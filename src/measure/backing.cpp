// The backing of a range: how much of it sits on huge pages, as the OS reports it.
#include <algorithm>

#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::measure {

double Backing::huge_fraction() const {
  if (resident_bytes == 0) return 0.0;
  double huge = static_cast<double>(anon_huge_bytes + hugetlb_bytes);
  return std::min(1.0, huge / static_cast<double>(resident_bytes));
}

std::optional<Backing> backing_of(const void* address, std::size_t size_bytes) {
  auto backing = os::range_backing(address, size_bytes);
  if (!backing) return std::nullopt;
  // smaps does not count hugetlb pages in Rss; count them as resident here.
  std::uint64_t resident = backing->resident_bytes + backing->hugetlb_bytes;
  return Backing{resident, backing->anon_huge_bytes, backing->hugetlb_bytes, backing->kernel_page_bytes};
}

}  // namespace memcost::measure
