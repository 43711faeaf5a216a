// The memory budget every experiment stays inside.
#include <algorithm>
#include <cmath>

#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::measure {

Budget memory_budget(double fraction) {
  os::MemoryInfo memory = os::memory_info();
  Budget budget;
  budget.total_bytes = memory.total_bytes;
  budget.available_bytes = memory.available_bytes;
  budget.cgroup_limit_bytes = memory.cgroup_limit_bytes;
  budget.cgroup_usage_bytes = memory.cgroup_usage_bytes;
  budget.cgroup_version = memory.cgroup_version;
  budget.usable_bytes = memory.available_bytes;
  if (memory.cgroup_limit_bytes) {
    std::uint64_t used = memory.cgroup_usage_bytes.value_or(0);
    std::uint64_t room = *memory.cgroup_limit_bytes > used ? *memory.cgroup_limit_bytes - used : 0;
    budget.usable_bytes = std::min(budget.usable_bytes, room);
  }
  budget.fraction = fraction;
  budget.budget_bytes = static_cast<std::uint64_t>(std::floor(static_cast<double>(budget.usable_bytes) * fraction));
  return budget;
}

}  // namespace memcost::measure
