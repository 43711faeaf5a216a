// big_array on NUMA machines: the memory policy of an array, and where its pages went.
#include "memcost/big_array.hpp"
#include "os/os.hpp"

namespace memcost::detail {

void place_on_nodes(const mapping& memory, const big_array_options& options, allocation_report& report) {
  if (options.numa == numa_placement::inherit) return;
  const os::MemoryPolicy policy = options.numa == numa_placement::interleave ? os::MemoryPolicy::interleave
                                  : options.numa == numa_placement::node     ? os::MemoryPolicy::bind
                                                                             : os::MemoryPolicy::local;
  const unsigned nodes = os::system_info().numa_nodes;
  if (options.numa == numa_placement::node && options.numa_node >= nodes) {
    throw big_array_error(big_array_errc::not_supported, "NUMA node " + std::to_string(options.numa_node) +
                                                             " does not exist: this machine has " + std::to_string(nodes) +
                                                             (nodes == 1 ? " node (0)" : " nodes (0-" + std::to_string(nodes - 1) + ")"));
  }
  os::Status status = os::set_memory_policy(memory.data(), memory.bytes(), policy, options.numa_node);
  if (!status.ok()) {
    throw big_array_error(big_array_errc::not_supported, "the NUMA placement could not be set: " + status.message());
  }
  report.numa_policy = os::memory_policy_of(memory.data()).value_or("unknown");
}

std::vector<std::vector<unsigned>> fill_cpu_sets(const big_array_options& options) {
  std::vector<std::vector<unsigned>> sets;
  if (options.numa != numa_placement::local) return sets;
  const unsigned nodes = os::system_info().numa_nodes;
  if (nodes < 2) return sets;  // one node: every CPU is local already
  for (unsigned node = 0; node < nodes; ++node) {
    auto cpus = os::cpus_of_node(node);
    if (!cpus.empty()) sets.push_back(std::move(cpus));
  }
  return sets;
}

}  // namespace memcost::detail
