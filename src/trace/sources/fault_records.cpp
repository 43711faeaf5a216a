// A record per fault (one in sample_period) with its stack (fault_source.hpp): what --raw and
// --sample-period need.
#include "trace/sources/fault_source.hpp"

namespace memcost::trace::detail {

void FaultRecords::sized(std::uint64_t buffer_bytes) {
  pacing_.size(buffer_bytes, run_.attaching, stack_record_bytes(run_.stack_bytes), 0);
}

Opened FaultRecords::open(pid_t target, int cpu, EventList& events) {
  perf_event_attr attr = tree_attr(run_, kFaultSampleType, events.buffer_bytes());
  attr.config = PERF_COUNT_SW_PAGE_FAULTS;
  attr.sample_period = run_.options.sample_period;
  const int fd = events.add_faults(attr, target, cpu, Event{EventKind::fault, kFaultSampleType});
  if (fd < 0) return judge_open_error(fd, events, "page faults");
  if (pacing_.on() && !pacing_.open(target, cpu, run_.command, events, failure_)) return Opened::failed;
  return Opened::ok;
}

void FaultRecords::describe(Result& result, const EventList& events) const {
  result.fault_source = events.kernel_samples() ? "perf software event page-faults, user and kernel mode"
                                                : "perf software event page-faults, user mode only (kernel-mode sampling "
                                                  "not permitted)";
}

}  // namespace memcost::trace::detail
