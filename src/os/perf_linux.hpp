// perf events and tracefs, the primitives (Linux only): opening an event, and where tracefs is.
// Shared by the OS layer's counters (PerfCounters, ZeroingCounter in os_linux.cpp) and the tracer
// (src/trace/). Calls only, no policy: what to open, and what to do when it fails, is the caller's.
#pragma once

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace memcost::os::perf {

// perf_event_open(2), close-on-exec: a command the probe starts inherits none of its events.
inline int open_event(perf_event_attr& attr, pid_t pid, int cpu) {
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

// Where tracefs's events/ directory is (its usual mount, or under debugfs); "" when neither is mounted.
inline std::string tracefs_root() {
  for (const char* root : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
    if (access((std::string(root) + "/events").c_str(), F_OK) == 0) return root;
  }
  return {};
}

}  // namespace memcost::os::perf
