#include "probe/context.hpp"

#include <cstring>

#include "memcost/measure.hpp"
#include "os/capabilities.hpp"
#include "os/os.hpp"


namespace memcost::probe {
namespace {

json optional_value(const auto& value) { return value ? json(*value) : json(nullptr); }

json hypervisor_with_reporting() {
  auto vendor = os::hypervisor_vendor();
  json result = {{"present", vendor ? json(!vendor->empty()) : json(nullptr)},
                 {"vendor", vendor && !vendor->empty() ? json(*vendor) : json(nullptr)}};
  result["free_page_reporting"] = optional_value(os::free_page_reporting());
  return result;
}

std::string compiler() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

// The capability layer's verdict on each page kind for one page of it: what
// `memcost info` shows, so that it never decides again on its own.
json page_kind_verdicts(const os::Capabilities& offered) {
  json verdicts = json::object();
  for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp, os::PageKind::huge_2mb, os::PageKind::huge_1gb}) {
    os::Verdict verdict = os::page_kind_verdict(offered, kind, os::page_kind_bytes(kind));
    verdicts[os::page_kind_name(kind)] = {{"usable", verdict.usable},
                                          {"why_not", verdict.usable ? json(nullptr) : json(verdict.why_not)}};
  }
  return verdicts;
}

json perf_counters() {
  json result = json::object();
  for (const auto& [name, reason] : measure::perf_counter_availability()) {
    result[name] = {{"available", reason.empty()}, {"reason", reason.empty() ? json(nullptr) : json(reason)}};
  }
  return result;
}

// Under Wine every figure describes Wine on its host, not Windows: the front end labels them so.
json wine_context() {
  auto wine = os::wine();
  if (!wine) return nullptr;
  return {{"version", wine->version}, {"host_system", wine->host_system}, {"host_release", wine->host_release}};
}

json large_pages_context(const os::LargePages& pages) {
  if (!pages.offered && pages.why_not.empty()) return nullptr;  // Linux: large pages are the hugetlb pools
  return {{"offered", pages.offered},
          {"page_bytes", pages.page_bytes},
          {"privilege_held", pages.privilege_held},
          {"why_not", pages.why_not.empty() ? json(nullptr) : json(pages.why_not)}};
}

}  // namespace

json machine_context() {
  os::SystemInfo system = os::system_info();
  measure::Budget budget = measure::memory_budget();
  const os::Capabilities offered = os::capabilities();
  const os::ThpSettings& thp = offered.thp;
  auto machine = os::machine_times();

  json thp_sizes = json::array();
  for (const auto& size : thp.sizes) thp_sizes.push_back({{"size_bytes", size.size_bytes}, {"enabled", size.enabled}});
  json pools = json::array();
  for (const auto& pool : offered.hugetlb_pools) {
    pools.push_back({{"page_size_bytes", pool.page_size_bytes},
                     {"total_pages", pool.total_pages},
                     {"free_pages", pool.free_pages},
                     {"reserved_pages", pool.reserved_pages},
                     {"surplus_pages", pool.surplus_pages},
                     {"available_pages", os::hugetlb_pages_available(pool)}});
  }

  return {
      {"schema_version", schema_version},
      {"tool_version", MEMCOST_VERSION},
      {"host", system.host_name},
      {"os", {{"name", system.os_name}, {"release", system.os_release}, {"version", system.os_version}}},
      {"wine", wine_context()},
      {"cpu", {{"model", system.cpu_model}, {"logical_cpus", os::logical_cpu_count()}, {"numa_nodes", system.numa_nodes}}},
      {"hypervisor", hypervisor_with_reporting()},
      {"memory",
       {{"total_bytes", budget.total_bytes},
        {"available_bytes", budget.available_bytes},
        {"swap_total_bytes", os::memory_info().swap_total_bytes},
        {"cgroup_version", budget.cgroup_version.empty() ? json(nullptr) : json(budget.cgroup_version)},
        {"cgroup_limit_bytes", optional_value(budget.cgroup_limit_bytes)},
        {"cgroup_usage_bytes", optional_value(budget.cgroup_usage_bytes)},
        {"usable_bytes", budget.usable_bytes},
        {"budget_fraction", budget.fraction},
        {"budget_bytes", budget.budget_bytes},
        {"overcommit_mode", optional_value(os::overcommit_mode())}}},
      {"pages",
       {{"base_page_bytes", os::base_page_size()},
        {"thp",
         {{"present", thp.present},
          {"enabled", thp.present ? json(thp.enabled) : json(nullptr)},
          {"defrag", thp.present ? json(thp.defrag) : json(nullptr)},
          {"pmd_size_bytes", thp.present ? json(thp.pmd_size_bytes) : json(nullptr)},
          {"sizes", thp_sizes}}},
        {"hugetlb", pools},
        {"large_pages", large_pages_context(offered.large_pages)},
        {"verdicts", page_kind_verdicts(offered)}}},
      {"limits", {{"max_map_count", optional_value(os::max_map_count())}, {"mappings_in_probe", optional_value(os::mapping_count())}}},
      {"counters",
       {{"faults", os::process_times().faults_counted},
        {"machine_cpu", machine.has_value()},
        {"steal", machine && machine->steal_available},
        {"kernel_threads", measure::kernel_thread_cpu().has_value()},
        {"perf", perf_counters()}}},
      {"capabilities", {{"populate_write", os::populate_write_works()}, {"legacy_layout_active", os::legacy_layout_active()}}},
      {"build",
       {{"compiler", compiler()}, {"build_type", MEMCOST_BUILD_TYPE}, {"sanitized", static_cast<bool>(MEMCOST_SANITIZED)}}},
  };
}

}  // namespace memcost::probe
