// `memcost-probe hugepages`: read or set a hugetlb pool. Setting needs root;
// the kernel may grant fewer pages than asked when memory is fragmented, so
// the pool is read back and reported as it is.
#include <algorithm>
#include <memory>

#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"

namespace memcost::probe {
namespace {

struct Settings {
  std::string page_size = "2M";
  long long set_pages = -1;
};

json pool_json(std::size_t page_size) {
  for (const auto& pool : os::hugetlb_pools()) {
    if (pool.page_size_bytes == page_size) {
      return {{"page_size_bytes", pool.page_size_bytes}, {"total_pages", pool.total_pages}, {"free_pages", pool.free_pages},
              {"reserved_pages", pool.reserved_pages}, {"surplus_pages", pool.surplus_pages}};
    }
  }
  throw ProbeError(exit_unsupported, "no_such_pool", "this kernel has no hugetlb pool of " + human_size(page_size) + " pages");
}

}  // namespace

Experiment hugepages_experiment() {
  return {"hugepages", "Read or set the size of a hugetlb pool (setting needs root)", [](CLI::App& command) -> Runner {
            auto settings = std::make_shared<Settings>();
            command.add_option("--page-size", settings->page_size, "pool page size: 2M or 1G");
            command.add_option("--set-pages", settings->set_pages, "set the pool to this many pages")->check(CLI::Range(0LL, 1LL << 40));
            return [settings](Emitter& emitter) {
              std::size_t page_size = parse_size(settings->page_size, "--page-size");
              json before = pool_json(page_size);
              if (settings->set_pages >= 0) {
                auto pages = static_cast<std::uint64_t>(settings->set_pages);
                os::Status status = os::set_hugetlb_pool(page_size, pages);
                if (!status.ok()) {
                  bool denied = status.error == 1 || status.error == 13;  // EPERM, EACCES
                  throw ProbeError(denied ? exit_unsupported : exit_failure, denied ? "not_permitted" : "pool_not_set",
                                   "cannot set the " + human_size(page_size) + " hugetlb pool: " + status.message() +
                                       (denied ? "; run as root" : ""));
                }
              }
              emitter.sample({{"page_size_bytes", page_size}, {"set_pages", settings->set_pages >= 0 ? json(settings->set_pages) : json(nullptr)}},
                             {{"before", before}, {"after", pool_json(page_size)}});
            };
          }};
}

}  // namespace memcost::probe
