// Every fault a record of its address alone, the touching stacks sampled by a second event
// (fault_source.hpp): 40 bytes a fault where a record with the stack copied is over 2 KiB.
#include <algorithm>

#include "trace/sources/fault_source.hpp"

namespace memcost::trace::detail {

std::size_t AddressRecords::buffer_pages(std::size_t lockable) const {
  return std::min<std::size_t>(lockable, run_.options.counting_buffer_pages);
}

// A second of touching samples' room is kept beside the address records.
void AddressRecords::sized(std::uint64_t buffer_bytes) {
  pacing_.size(buffer_bytes, run_.attaching, kRecordBytes,
               std::uint64_t{run_.options.touch_samples_per_second} * stack_record_bytes(run_.stack_bytes));
}

// The touching stacks from the minor-fault event, perf choosing the period that gives so many a
// second: two events on one software event share the kernel's sample data, and a second
// page-faults event wrote no samples at all (Linux 6.18). The faults of big allocations are minor.
Opened AddressRecords::open(pid_t target, int cpu, EventList& events) {
  const std::uint64_t sample_type = kFaultSampleType | PERF_SAMPLE_PERIOD;
  perf_event_attr stacks = tree_attr(run_, sample_type, events.buffer_bytes());
  stacks.config = PERF_COUNT_SW_PAGE_FAULTS_MIN;
  stacks.freq = 1;
  stacks.sample_freq = run_.options.touch_samples_per_second;
  Event sampled{EventKind::fault, sample_type};
  sampled.counted = false;
  int fd = events.add_faults(stacks, target, cpu, sampled);
  if (fd < 0) return judge_open_error(fd, events, "page faults, touching stacks");

  perf_event_attr addresses = base_attr(kFaultAddressSampleType, 0);
  if (run_.attaching) addresses.enable_on_exec = 0;
  addresses.type = PERF_TYPE_SOFTWARE;
  addresses.config = PERF_COUNT_SW_PAGE_FAULTS;
  addresses.sample_period = 1;
  fd = events.add_faults(addresses, target, cpu, Event{EventKind::fault, kFaultAddressSampleType});
  if (fd < 0) {
    const Opened judged = judge_open_error(fd, events, "page faults, addresses");
    return judged == Opened::gone ? Opened::ok : judged;  // gone since its stack event opened
  }
  if (pacing_.on() && !pacing_.open(target, cpu, run_.command, events, failure_)) return Opened::failed;
  return Opened::ok;
}

void AddressRecords::describe(Result& result, const EventList& events) const {
  result.fault_source = std::string(events.kernel_samples() ? "perf software event page-faults, user and kernel mode"
                                                            : "perf software event page-faults, user mode only "
                                                              "(kernel-mode sampling not permitted)") +
                        ", every fault recorded by its address (no stack); touching stacks sampled by a second "
                        "page-faults event, " + std::to_string(run_.options.touch_samples_per_second) + " a second per CPU";
  result.touch_samples_per_second = run_.options.touch_samples_per_second;
}

}  // namespace memcost::trace::detail
