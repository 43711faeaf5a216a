// perf_event counters for this process, each either counting or saying why not.
#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::measure {
namespace {

constexpr os::PerfEvent all_events[] = {os::PerfEvent::page_faults, os::PerfEvent::task_clock,
                                        os::PerfEvent::tlb_flush_tracepoint, os::PerfEvent::page_fault_user_tracepoint};

std::string explain(os::PerfEvent event, const os::Status& status) {
  std::string reason = status.message();
  bool tracepoint = event == os::PerfEvent::tlb_flush_tracepoint || event == os::PerfEvent::page_fault_user_tracepoint;
  if (tracepoint && std::string(status.call).rfind("tracefs", 0) == 0) {
    return "tracefs is not mounted or lacks this event: as root, `mount -t tracefs nodev /sys/kernel/tracing`";
  }
  if (status.error == 1 || status.error == 13) {  // EPERM, EACCES
    auto paranoid = os::perf_event_paranoid();
    reason += "; kernel.perf_event_paranoid is " + (paranoid ? std::to_string(*paranoid) : std::string("unknown")) +
              ": run as root or `sysctl kernel.perf_event_paranoid=1`";
  }
  return reason;
}

}  // namespace

PerfCounters::PerfCounters() {
  for (os::PerfEvent event : all_events) {
    os::PerfHandle handle = os::perf_open(event);
    counters_.push_back({os::perf_event_name(event), handle.fd, handle.status.ok() ? "" : explain(event, handle.status)});
  }
}

PerfCounters::~PerfCounters() {
  for (Counter& counter : counters_) {
    os::PerfHandle handle{counter.fd, {}};
    os::perf_close(handle);
  }
}

void PerfCounters::start() {
  for (Counter& counter : counters_) {
    if (counter.fd < 0) continue;
    // A reset is an ioctl too: disable, read the base at stop() instead.
    os::Status status = os::perf_enable({counter.fd, {}}, true);
    if (!status.ok()) counter.unavailable_reason = status.message();
  }
  base_ = read_raw();
}

void PerfCounters::stop() {
  for (Counter& counter : counters_) {
    if (counter.fd >= 0 && counter.unavailable_reason.empty()) (void)os::perf_enable({counter.fd, {}}, false);
  }
}

std::map<std::string, std::optional<std::uint64_t>> PerfCounters::read_raw() const {
  std::map<std::string, std::optional<std::uint64_t>> values;
  for (const Counter& counter : counters_) {
    values[counter.name] = counter.unavailable_reason.empty() ? os::perf_read({counter.fd, {}}) : std::nullopt;
  }
  return values;
}

std::map<std::string, std::optional<std::uint64_t>> PerfCounters::read() const {
  auto values = read_raw();
  for (auto& [name, value] : values) {
    auto base = base_.find(name);
    if (value && base != base_.end() && base->second) *value -= *base->second;
  }
  return values;
}

std::map<std::string, std::string> PerfCounters::availability() const {
  std::map<std::string, std::string> reasons;
  for (const Counter& counter : counters_) reasons[counter.name] = counter.unavailable_reason;
  return reasons;
}

std::map<std::string, std::string> perf_counter_availability() {
  std::map<std::string, std::string> reasons;
  for (os::PerfEvent event : all_events) {
    const os::Status status = os::perf_openable(event);
    reasons[os::perf_event_name(event)] = status.ok() ? "" : explain(event, status);
  }
  return reasons;
}

}  // namespace memcost::measure
