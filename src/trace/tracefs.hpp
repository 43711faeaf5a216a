// tracefs: where it is, the syscalls tracepoints' ids and formats.
#pragma once

#include <unistd.h>

#include <utility>
#include <vector>

#include "trace/perf.hpp"

namespace memcost::trace::detail {

struct Tracefs {
  std::string root;  // where events/ lives
};

// tracefs is mounted by whoever may change the machine and journal it (the memcost front end):
// this process only finds it.
inline Failure find_tracefs(Tracefs& tracefs) {
  tracefs.root = os::perf::tracefs_root();
  if (!tracefs.root.empty()) {
    if (access((tracefs.root + "/events/syscalls").c_str(), F_OK) != 0) {
      return Failure{ENOENT, "this kernel has no syscalls tracepoints (CONFIG_FTRACE_SYSCALLS)", FailureKind::not_supported};
    }
    return {};
  }
  return Failure{ENOENT, "tracefs is not mounted: as root, `mount -t tracefs nodev /sys/kernel/tracing` (memcost trace "
                         "mounts it for its run)", FailureKind::not_supported};
}

struct TracepointFormat {
  std::uint64_t id = 0;
  std::vector<std::uint32_t> offsets;  // of the fields after __syscall_nr, in order
};

inline Failure read_tracepoint(const Tracefs& tracefs, const std::string& name, TracepointFormat& format) {
  std::string base = tracefs.root + "/events/syscalls/" + name;
  std::string id = read_text(base + "/id");
  if (id.empty()) return Failure{errno ? errno : ENOENT, "read " + base + "/id"};
  format.id = std::stoull(id);
  std::istringstream lines(read_text(base + "/format"));
  bool after_nr = false;
  for (std::string line; std::getline(lines, line);) {
    auto field = line.find("field:");
    auto offset = line.find("offset:");
    if (field == std::string::npos || offset == std::string::npos) continue;
    if (line.find("__syscall_nr") != std::string::npos) {
      after_nr = true;
      continue;
    }
    if (after_nr) format.offsets.push_back(static_cast<std::uint32_t>(std::stoul(line.substr(offset + 7))));
  }
  return {};
}

// The syscall tracepoints, or why they cannot be used here.
inline Failure kernel_calls(Tracefs& tracefs, std::vector<std::pair<Event, TracepointFormat>>& tracepoints) {
  if (Failure why = find_tracefs(tracefs); !why.ok()) return why;
  const std::pair<CallKind, const char*> calls[] = {{CallKind::mmap, "mmap"}, {CallKind::munmap, "munmap"},
                                                    {CallKind::mremap, "mremap"}, {CallKind::brk, "brk"},
                                                    {CallKind::madvise, "madvise"}};
  for (const auto& [kind, name] : calls) {
    for (bool enter : {true, false}) {
      TracepointFormat format;
      if (Failure why = read_tracepoint(tracefs, std::string(enter ? "sys_enter_" : "sys_exit_") + name, format); !why.ok()) {
        return why;
      }
      Event event{enter ? EventKind::enter : EventKind::exit, kind, enter ? kEnterSampleType : kExitSampleType, format.offsets};
      tracepoints.emplace_back(event, format);
    }
  }
  // Reading them needs privilege: try on this process first.
  perf_event_attr attr = base_attr(kExitSampleType, 0);
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = tracepoints.front().second.id;
  attr.enable_on_exec = 0;
  attr.inherit = 0;
  int fd = open_event(attr, 0, -1);
  if (fd < 0) return failed("perf_event_open(syscalls tracepoint)");
  close(fd);
  return {};
}

}  // namespace memcost::trace::detail
