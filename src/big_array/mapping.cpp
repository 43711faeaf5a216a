// The page-kind ladder of big_array: which memory an array gets, and why.
#include <algorithm>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/capabilities.hpp"
#include "os/os.hpp"

namespace memcost::detail {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

os::PageKind os_kind(pages kind) {
  switch (kind) {
    case pages::hugetlb_1g: return os::PageKind::huge_1gb;
    case pages::hugetlb_2m: return os::PageKind::huge_2mb;
    case pages::thp: return os::PageKind::thp;
    default: return os::PageKind::base;
  }
}

std::size_t round_up(std::size_t bytes, std::size_t unit) { return (bytes + unit - 1) / unit * unit; }

// The kinds to try, best first: automatic climbs down from the largest pages
// worth having at this size; a forced kind falls back unless strict.
std::vector<pages> ladder(std::size_t bytes, const big_array_options& options) {
  const std::vector<pages> all = {pages::hugetlb_1g, pages::hugetlb_2m, pages::thp, pages::base};
  std::vector<pages> kinds;
  if (options.pages == pages::automatic) {
    // Below one huge page, the huge page would mostly be waste.
    if (bytes >= 1024 * MiB) kinds.push_back(pages::hugetlb_1g);
    if (bytes >= 2 * MiB) kinds.insert(kinds.end(), {pages::hugetlb_2m, pages::thp});
    kinds.push_back(pages::base);
    return kinds;
  }
  auto forced = std::find(all.begin(), all.end(), options.pages);
  kinds.assign(forced, options.strict ? forced + 1 : all.end());
  return kinds;
}

// Why this kind cannot hold `bytes` here, or "" if it may.
std::string unavailable(const os::Capabilities& offered, pages kind, std::size_t bytes) {
  os::Verdict verdict = os::page_kind_verdict(offered, os_kind(kind), bytes);
  return verdict.usable ? "" : std::string(os::page_kind_name(os_kind(kind))) + ": " + verdict.why_not;
}

}  // namespace

std::size_t checked_bytes(std::size_t count, std::size_t element_bytes) {
  if (element_bytes != 0 && count > SIZE_MAX / element_bytes) {
    throw big_array_error(big_array_errc::bad_size, std::to_string(count) + " elements of " + std::to_string(element_bytes) +
                                                        " bytes overflow the address space");
  }
  return count * element_bytes;
}

mapping::mapping(std::size_t bytes, const big_array_options& options, allocation_report& report) {
  // mmap would succeed and the first touches would summon the OOM killer: refuse early.
  std::uint64_t usable = measure::memory_budget(1.0).usable_bytes;
  if (bytes > usable) {
    throw big_array_error(big_array_errc::out_of_memory, "an array of " + std::to_string(bytes) + " bytes does not fit in the " +
                                                             std::to_string(usable) + " bytes of memory available");
  }
  std::string last_error;
  const os::Capabilities offered = os::capabilities();
  for (pages kind : ladder(bytes, options)) {
    std::string reason = unavailable(offered, kind, bytes);
    if (reason.empty()) {
      const os::PageKind os_page = os_kind(kind);
      const std::size_t page = os::page_kind_bytes(os_page);
      const std::size_t mapped_bytes = round_up(bytes, page);
      os::MapRequest request{mapped_bytes, os_page};
      if (kind == pages::thp) request.alignment_bytes = std::max<std::size_t>(offered.thp.pmd_size_bytes, page);
      os::Mapping result = os::map(request);
      if (result.status.ok()) {
        address_ = result.address;
        bytes_ = mapped_bytes;
        page_bytes_ = kind == pages::thp ? request.alignment_bytes : page;
        report.page_kind = os::page_kind_name(os_page);
        report.mapped_bytes = mapped_bytes;
        return;
      }
      reason = std::string(os::page_kind_name(os_page)) + ": " + result.status.message();
    }
    report.fallbacks.push_back(reason);
    last_error = reason;
  }
  bool hugetlb = options.pages == pages::hugetlb_1g || options.pages == pages::hugetlb_2m;
  if (options.strict && hugetlb) throw big_array_error(big_array_errc::pool_too_small, last_error);
  if (options.strict && options.pages == pages::thp) throw big_array_error(big_array_errc::not_supported, last_error);
  throw big_array_error(big_array_errc::out_of_memory, "no memory for " + std::to_string(bytes) + " bytes: " + last_error);
}

mapping::~mapping() {
  if (address_) (void)os::release(address_, bytes_);
}

void populate(void* address, std::size_t bytes) {
  // madvise wants a page-aligned start; a neighbour chunk may fault the shared
  // page too, which is harmless.
  const std::uintptr_t page = os::base_page_size();
  auto begin = reinterpret_cast<std::uintptr_t>(address) & ~(page - 1);
  auto end = reinterpret_cast<std::uintptr_t>(address) + bytes;
  if (end <= begin) return;
  if (!os::populate_write(reinterpret_cast<void*>(begin), end - begin).ok()) {
    os::touch_pages(reinterpret_cast<void*>(begin), end - begin, page);
  }
}

double huge_fraction(const void* address, std::size_t bytes) {
  if (!address) return 0.0;
  auto backing = measure::backing_of(address, bytes);
  return backing ? backing->huge_fraction() : 0.0;
}

void read_back(allocation_report& report, const void* address, std::size_t bytes) {
  report.read_back = true;
  if (!report.numa_policy.empty()) {
    report.numa_policy = os::memory_policy_of(address).value_or("unknown");
    report.bytes_by_node.clear();
    for (auto [node, resident] : os::resident_bytes_by_node(address, bytes).value_or(std::map<unsigned, std::uint64_t>{})) {
      report.bytes_by_node[node] = static_cast<std::size_t>(resident);
    }
  }
  if (report.page_kind != os::page_kind_name(os::PageKind::thp)) return;  // hugetlb is all or nothing; base is base
  const double fraction = huge_fraction(address, bytes);
  if (fraction >= 0.5) return;
  report.fallbacks.push_back("thp: mapped for transparent huge pages, but the kernel backed only " +
                             std::to_string(static_cast<int>(fraction * 100)) +
                             "% of the array with them (THP disabled for this process or system, or no free 2 MB blocks)");
  report.page_kind = os::page_kind_name(os::PageKind::base);
}

unsigned default_threads(unsigned requested) { return requested ? requested : os::logical_cpu_count(); }

}  // namespace memcost::detail
