// Faults counted in the kernel by the BPF counter (fault_source.hpp, fault_counter.hpp): perf carries
// only the touching stacks the counter samples; the counts come out of the kernel by sweeps.
#include <algorithm>

#include "trace/sources/fault_source.hpp"

namespace memcost::trace::detail {

std::unique_ptr<CountingInKernel> CountingInKernel::open(const RunSetting& run, std::string& why_not) {
  auto counter = FaultCounter::open(run.options.fault_timing_one_in, run.options.touch_samples_per_second, why_not);
  if (!counter) return nullptr;
  // A process attached to is counted from the window's opening (start_counting), with its events.
  if (!run.attaching && !counter->trace(run.command, true)) {
    why_not = std::string("the in-kernel counter would not take the process: ") + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<CountingInKernel>(new CountingInKernel(run, std::move(counter)));
}

CountingInKernel::CountingInKernel(const RunSetting& run, std::unique_ptr<FaultCounter> counter)
    : FaultSource(run), counter_(std::move(counter)) {}

// The buffers carry only touching samples, CPU samples and calls: smaller (a 128 MiB buffer took
// 22 ms to map, and its memory is locked for the whole trace).
std::size_t CountingInKernel::buffer_pages(std::size_t lockable) const {
  return std::min<std::size_t>(lockable, run_.options.counting_buffer_pages);
}

// A dummy event (it samples nothing): it carries the target's mappings, names and forks, and owns
// the buffer the counter's touching samples go to (open_cpu).
Opened CountingInKernel::open(pid_t target, int cpu, EventList& events) {
  const std::uint64_t sample_type = kFaultSampleType | PERF_SAMPLE_PERIOD;
  perf_event_attr attr = tree_attr(run_, sample_type, events.buffer_bytes());
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.sample_period = run_.options.sample_period;
  Event event{EventKind::fault, sample_type};
  event.counted = false;
  const int fd = events.add_faults(attr, target, cpu, event);
  return fd >= 0 ? Opened::ok : judge_open_error(fd, events, "dummy, the traced tree's records");
}

// The BPF-output event of `cpu`, every process's (the counter sends only the traced ones' faults):
// perf copies the user registers and stack of the fault's thread beside what the program sends.
Opened CountingInKernel::open_cpu(int cpu, EventList& events) {
  if (!events.owned(cpu)) return Opened::ok;  // an offline CPU
  perf_event_attr attr = base_attr(kTouchSampleType, run_.stack_bytes);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_BPF_OUTPUT;
  attr.disabled = 0;  // only the counter decides what is sent
  attr.inherit = 0;
  attr.enable_on_exec = 0;
  Event event{EventKind::fault, kTouchSampleType};
  event.counted = false;
  event.touch_in_raw = true;
  const int fd = events.add(attr, -1, cpu, event);
  if (fd < 0) return fd == EventList::kFailed ? fail(events.failure()) : fail(errno_failure("perf_event_open(bpf-output, touching samples)"));
  if (!counter_->touch_output(cpu, fd)) return fail(errno_failure("adding the touching samples' event to the counter"));
  return Opened::ok;
}

bool CountingInKernel::start_counting(pid_t pid) {
  if (counter_->trace(pid, false)) return true;
  failure_ = errno_failure("adding the process to the in-kernel counter");
  return false;
}

// The in-kernel count stops before the events, which take an interprocessor call each to disable:
// a mapping made meanwhile would be missed while its faults were still counted.
void CountingInKernel::stop_counting(const EventList&) { counter_->stop_counting(); }

// A window's end takes what is new in the open generations too, so that it holds its own faults;
// a region of a generation that ends after the last sweep comes only at the next.
std::uint64_t CountingInKernel::deliver(std::uint64_t now_ns, bool window_end, bool last, Sink& sink) {
  if (!last && !window_end && now_ns - last_sweep_ns_ < kSweepNs) return last_sweep_ns_;
  regions_.clear();
  counter_->sweep(last ? Sweep::last : window_end ? Sweep::window : Sweep::ended, regions_);
  for (const RegionFaults& region : regions_) sink.region_faults(region);
  last_sweep_ns_ = last ? UINT64_MAX : now_ns;
  return last_sweep_ns_;
}

void CountingInKernel::describe(Result& result, const EventList&) const {
  result.fault_source = "BPF programs on the tracepoints exceptions:page_fault_user and page_fault_kernel, every "
                        "fault counted in the kernel per 2 MiB region; touching stacks sampled by the same "
                        "programs, about " + std::to_string(run_.options.touch_samples_per_second) +
                        " a second per CPU, copied by perf's bpf-output event";
  result.counted_in_kernel = true;
  result.kernel_faults = counter_->faults();
  result.kernel_faults_uncounted = counter_->uncounted();
  result.touch_samples_per_second = run_.options.touch_samples_per_second;
  result.fault_timing_one_in = run_.options.fault_timing_one_in;
}

}  // namespace memcost::trace::detail
