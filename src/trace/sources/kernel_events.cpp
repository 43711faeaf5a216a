// The mapping calls' tracepoints and the kernel CPU-time sampler (kernel_events.hpp).
#include "trace/sources/kernel_events.hpp"

#include <sys/ioctl.h>

#include <algorithm>

namespace memcost::trace::detail {

Failure CallTracepoints::check() {
  Tracefs tracefs;
  Failure why = kernel_calls(tracefs, tracepoints_, check_fd_);
  if (!why.ok()) tracepoints_.clear();
  return why;
}

bool CallTracepoints::open(const RunSetting& run, pid_t target, int cpu, EventList& events, Failure& why) const {
  for (const auto& [event, format, filter] : tracepoints_) {
    perf_event_attr attr = base_attr(event.sample_type, std::max(run.stack_bytes, kCallStackBytes));
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.config = format.id;
    if (run.attaching) attr.enable_on_exec = 0;
    const int fd = events.add(attr, target, cpu, event);
    if (fd == EventList::kFailed) {
      why = events.failure();
      return false;
    }
    if (fd < 0 && run.attaching && errno == ESRCH) continue;
    if (fd < 0) {
      why = errno_failure("perf_event_open(raw_syscalls tracepoint)");
      return false;
    }
    if (ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter.c_str()) != 0) {
      why = errno_failure("ioctl(PERF_EVENT_IOC_SET_FILTER)");
      return false;
    }
  }
  return true;
}

void CallTracepoints::close_check() {
  if (check_fd_ >= 0) close(std::exchange(check_fd_, -1));
}

CpuSampler::CpuSampler(const RunSetting& run, Result& result) : run_(run), result_(result) {
  const int paranoid = os::perf_event_paranoid().value_or(-1);
  if (run.options.cpu_sample_period_ns == 0) {
    result_.cpu_sampling = "not asked for";
  } else if (geteuid() != 0 && paranoid > 1) {
    result_.cpu_sampling = "not permitted: kernel-mode samples need root or kernel.perf_event_paranoid <= 1 (it is " +
                           std::to_string(paranoid) + ")";
  } else if (kernel_ = std::make_unique<KernelSymbols>(); kernel_->empty()) {
    result_.cpu_sampling = "not possible: /proc/kallsyms shows no kernel addresses to this user (kernel.kptr_restrict)";
  } else {
    on_ = true;
    kernel_->read_ahead();
  }
}

void CpuSampler::turn_off(const std::string& why) {
  on_ = false;
  result_.cpu_sample_period_ns = 0;
  result_.cpu_sampling = why;
}

bool CpuSampler::open(pid_t target, int cpu, EventList& events, Failure& why) {
  if (!on_) return true;
  if (!events.kernel_samples()) {
    turn_off("not permitted: kernel-mode samples need root or kernel.perf_event_paranoid <= 1");
    return true;
  }
  perf_event_attr clock = base_attr(kCpuSampleType, 0);
  clock.type = PERF_TYPE_SOFTWARE;
  clock.config = PERF_COUNT_SW_CPU_CLOCK;
  clock.sample_period = run_.options.cpu_sample_period_ns;
  clock.exclude_user = 1;  // only time in the kernel is wanted: user-mode ticks are not recorded
  clock.exclude_callchain_user = 1;
  if (run_.attaching) clock.enable_on_exec = 0;
  const int fd = events.add(clock, target, cpu, Event{EventKind::cpu, kCpuSampleType});
  if (fd == -1 && (errno == EACCES || errno == EPERM)) {
    turn_off(std::string("not permitted: perf_event_open(cpu-clock): ") + std::strerror(errno));
    return true;
  }
  if (fd == EventList::kFailed) {
    why = events.failure();
    return false;
  }
  if (fd < 0) {
    if (run_.attaching && errno == ESRCH) return true;
    why = errno_failure("perf_event_open(cpu-clock)");
    return false;
  }
  result_.cpu_sample_period_ns = run_.options.cpu_sample_period_ns;
  result_.cpu_sampling = "perf software event cpu-clock every " + std::to_string(run_.options.cpu_sample_period_ns / 1000) +
                         " µs of each thread's CPU time, kernel mode only, with the kernel call chain; "
                         "kernel functions named in /proc/kallsyms";
  return true;
}

}  // namespace memcost::trace::detail
