// What the fault sources share (fault_source.hpp): the tree's event, judging an open's error,
// pacing, and the choice of sources for a run.
#include "trace/sources/fault_source.hpp"

#include <fcntl.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>

namespace memcost::trace::detail {

perf_event_attr tree_attr(const RunSetting& run, std::uint64_t sample_type, std::uint64_t buffer_bytes) {
  perf_event_attr attr = base_attr(sample_type, run.stack_bytes);
  if (run.attaching) attr.enable_on_exec = 0;  // enabled as the window opens
  attr.type = PERF_TYPE_SOFTWARE;
  attr.mmap = 1;
  attr.mmap2 = 1;
  attr.comm = 1;
  attr.comm_exec = 1;
  attr.task = 1;
  attr.watermark = 1;
  attr.wakeup_watermark = static_cast<std::uint32_t>(buffer_bytes / 32);
  return attr;
}

Opened FaultSource::judge_open_error(int fd, const EventList& events, const char* what) {
  if (fd == EventList::kFailed) return fail(events.failure());
  if (errno == ENODEV) return Opened::offline;
  if (run_.attaching && errno == ESRCH) return Opened::gone;
  return fail(errno_failure(std::string("perf_event_open(") + what + ")"));
}

std::uint64_t Pacing::pace_faults(std::uint64_t buffer_bytes, std::uint64_t record_bytes, std::uint64_t sample_bytes) {
  const std::uint64_t room = buffer_bytes > 2 * sample_bytes ? buffer_bytes - sample_bytes : buffer_bytes / 2;
  return std::max<std::uint64_t>(16, room / std::max<std::uint64_t>(record_bytes, 1) / 4);
}

void Pacing::size(std::uint64_t buffer_bytes, bool attaching, std::uint64_t record_bytes, std::uint64_t sample_bytes) {
  faults_ = wanted(buffer_bytes, attaching) ? pace_faults(buffer_bytes, record_bytes, sample_bytes) : 0;
}

// (The fault event itself cannot signal: with an owner, perf signals at every sample, not at its
// wakeup mark.) A child process the command forks is held by the tracer as before: its counters
// signal the command.
bool Pacing::open(pid_t target, int cpu, pid_t command, EventList& events, Failure& why) const {
  perf_event_attr attr = base_attr(0, 0);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_PAGE_FAULTS;
  attr.sample_period = faults_;
  attr.exclude_kernel = events.kernel_samples() ? 0 : 1;
  const int fd = events.add(attr, target, cpu, std::nullopt);
  if (fd < 0) return errno == ENODEV;  // an offline CPU
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETOWN, command) != 0 || fcntl(fd, F_SETSIG, SIGSTOP) != 0 ||
      fcntl(fd, F_SETFL, flags | O_ASYNC) != 0) {
    why = errno_failure("fcntl(page-fault counter, O_ASYNC, F_SETSIG SIGSTOP)");
    return false;
  }
  return true;
}

bool Pacing::stopped(pid_t command) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(command), &info, WSTOPPED | WNOHANG) == 0 && info.si_pid == command &&
         info.si_code == CLD_STOPPED;
}

std::vector<std::unique_ptr<FaultSource>> choose_fault_sources(const RunSetting& run, PreloadReader* preload,
                                                               Result& result) {
  std::vector<std::unique_ptr<FaultSource>> sources;
  // Not with --raw, whose point is every fault's record.
  if (!run.options.count_in_kernel) {
    result.kernel_counting = "not asked for";
  } else if (auto counting = CountingInKernel::open(run, result.kernel_counting)) {
    std::string why_not;
    auto in_calls = InCallFaults::open(run, counting->counter(), preload, why_not);
    if (!in_calls) result.kernel_counting = "the faults inside system calls: " + why_not;
    sources.push_back(std::move(counting));
    if (in_calls) sources.push_back(std::move(in_calls));
    return sources;
  }
  // Every fault a record: its address alone with the touching stacks sampled, or (0 a second)
  // each with its stack, as --raw and --sample-period need.
  if (run.options.touch_samples_per_second > 0) sources.push_back(std::make_unique<AddressRecords>(run));
  else sources.push_back(std::make_unique<FaultRecords>(run));
  return sources;
}

}  // namespace memcost::trace::detail
