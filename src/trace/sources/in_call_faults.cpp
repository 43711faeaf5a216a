// The faults system calls take without an exception, counted per call in the kernel (fault_source.hpp).
#include "trace/sources/fault_source.hpp"

namespace memcost::trace::detail {

std::unique_ptr<InCallFaults> InCallFaults::open(const RunSetting& run, FaultCounter& counter, PreloadReader* preload,
                                                 std::string& why_not) {
  if (!counter.count_in_calls(why_not)) return nullptr;
  if (preload) preload->call_faults_counted_in_kernel = true;
  return std::unique_ptr<InCallFaults>(new InCallFaults(run, counter));
}

void InCallFaults::describe(Result& result, const EventList&) const {
  result.fault_source += "; faults taken inside system calls without an exception (MAP_POPULATE, MADV_POPULATE_*, "
                         "mlock, a driver pinning) counted per call on raw_syscalls sys_enter and sys_exit from the "
                         "thread's own fault counters, with the call's stack, and charged to the memory it names (for "
                         "NVIDIA's pinning ioctls and io_uring's buffer registration, in the structure its argument "
                         "points to, read as it enters)";
  result.kernel_faults_in_calls = counter_.in_calls();
}

}  // namespace memcost::trace::detail
