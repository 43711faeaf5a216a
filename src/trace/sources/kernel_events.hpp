// The events of a run beside the fault sources (fault_source.hpp): the mapping calls' tracepoints,
// and the sampler of kernel CPU time that measures fault time. Each opens on one target and CPU
// into that CPU's buffer (event_list.hpp).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "trace/sources/fault_source.hpp"
#include "trace/unwind/kernel_symbols.hpp"
#include "trace/sources/tracefs.hpp"

namespace memcost::trace::detail {

// The raw_syscalls tracepoints, filtered in the kernel to the mapping calls, entry and exit (the
// entry as two events: the calls that copy their stacks, and those that do not, calls_copy_stack).
class CallTracepoints {
 public:
  // The check that they can be read here (tracefs::kernel_calls); why not, when they cannot.
  Failure check();
  [[nodiscard]] bool on() const { return !tracepoints_.empty(); }
  void clear() { tracepoints_.clear(); }
  bool open(const RunSetting& run, pid_t target, int cpu, EventList& events, Failure& why) const;
  // The command's events now hold the tracepoints: the check's own event goes (closing a
  // tracepoint's last event waits for an RCU grace period; then closing it waits for nothing).
  void close_check();
  ~CallTracepoints() { close_check(); }

 private:
  std::vector<CallTracepoint> tracepoints_;
  int check_fd_ = -1;
};

// The user stack an mmap's, a brk's or a madvise's sample copies: deeper than a fault's. A call is
// made once per allocation, not once per page, and the code that allocates for a Python program
// (PyTorch's dispatcher, 10-30 KiB of C++ frames between c10::alloc_cpu and the interpreter)
// hides the Python functions that asked for the memory below 4 KiB.
inline constexpr std::uint32_t kCallStackBytes = 32768;

// Fault time, where the kernel allows kernel samples and shows its symbols: a cpu-clock event
// samples the traced tree's CPU time in kernel mode every cpu_sample_period_ns, with the kernel
// call chain, classified by the kernel's own function names (kernel_symbols.hpp).
class CpuSampler {
 public:
  // Decided from the options and what this user may do; why not goes into `result`.
  CpuSampler(const RunSetting& run, Result& result);
  [[nodiscard]] bool on() const { return on_; }
  [[nodiscard]] const KernelSymbols* kernel() const { return kernel_.get(); }
  // Its event on `target` and `cpu`; false with `why` set. Refused kernel samples turn it off,
  // with the reason in the result.
  bool open(pid_t target, int cpu, EventList& events, Failure& why);

 private:
  void turn_off(const std::string& why);
  const RunSetting& run_;
  Result& result_;
  bool on_ = false;
  std::unique_ptr<KernelSymbols> kernel_;
};

}  // namespace memcost::trace::detail
