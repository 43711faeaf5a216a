#include "probe/context.hpp"

#include <cstring>

#include "memcost/measure.hpp"
#include "os/os.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace memcost::probe {
namespace {

json optional_value(const auto& value) { return value ? json(*value) : json(nullptr); }

// CPUID leaf 1 ECX bit 31 is set by every hypervisor; leaf 0x40000000 names it.
json hypervisor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1U << 31)) == 0) return {{"present", false}, {"vendor", nullptr}};
  __cpuid(0x40000000, eax, ebx, ecx, edx);
  char signature[13] = {};
  std::memcpy(signature, &ebx, 4);
  std::memcpy(signature + 4, &ecx, 4);
  std::memcpy(signature + 8, &edx, 4);
  std::string id(signature);
  std::string vendor = id == "KVMKVMKVM" ? "KVM"
                       : id == "Microsoft Hv" ? "Microsoft Hyper-V"
                       : id == "VMwareVMware" ? "VMware"
                       : id == "XenVMMXenVMM" ? "Xen"
                       : id == "TCGTCGTCGTCG" ? "QEMU (TCG)"
                       : id;
  return {{"present", true}, {"vendor", vendor}};
#else
  return {{"present", nullptr}, {"vendor", nullptr}};
#endif
}

json hypervisor_with_reporting() {
  json result = hypervisor();
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

// Whether MADV_POPULATE_WRITE works here, tried on one page.
bool populate_write_supported() {
  os::Mapping page = os::map({os::base_page_size(), os::PageKind::base});
  if (!page.status.ok()) return false;
  bool works = os::populate_write(page.address, page.size_bytes).ok();
  (void)os::release(page.address, page.size_bytes);
  return works;
}

json perf_counters() {
  measure::PerfCounters counters;
  json result = json::object();
  for (const auto& [name, reason] : counters.availability()) {
    result[name] = {{"available", reason.empty()}, {"reason", reason.empty() ? json(nullptr) : json(reason)}};
  }
  return result;
}

}  // namespace

json machine_context() {
  os::SystemInfo system = os::system_info();
  measure::Budget budget = measure::memory_budget();
  os::ThpSettings thp = os::thp_settings();
  auto machine = os::machine_times();

  json thp_sizes = json::array();
  for (const auto& size : thp.sizes) thp_sizes.push_back({{"size_bytes", size.size_bytes}, {"enabled", size.enabled}});
  json pools = json::array();
  for (const auto& pool : os::hugetlb_pools()) {
    pools.push_back({{"page_size_bytes", pool.page_size_bytes},
                     {"total_pages", pool.total_pages},
                     {"free_pages", pool.free_pages},
                     {"reserved_pages", pool.reserved_pages},
                     {"surplus_pages", pool.surplus_pages}});
  }

  return {
      {"schema_version", schema_version},
      {"tool_version", MEMCOST_VERSION},
      {"host", system.host_name},
      {"os", {{"name", system.os_name}, {"release", system.os_release}, {"version", system.os_version}}},
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
        {"hugetlb", pools}}},
      {"limits", {{"max_map_count", optional_value(os::max_map_count())}, {"mappings_in_probe", optional_value(os::mapping_count())}}},
      {"counters",
       {{"machine_cpu", machine.has_value()},
        {"steal", machine && machine->steal_available},
        {"kernel_threads", os::kernel_thread_times().has_value()},
        {"perf", perf_counters()}}},
      {"capabilities", {{"populate_write", populate_write_supported()}, {"legacy_layout_active", os::legacy_layout_active()}}},
      {"build",
       {{"compiler", compiler()}, {"build_type", MEMCOST_BUILD_TYPE}, {"sanitized", static_cast<bool>(MEMCOST_SANITIZED)}}},
  };
}

}  // namespace memcost::probe
