// tracefs: where it is, the raw_syscalls tracepoints' ids and formats.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "os/os.hpp"
#include "trace/perf/perf.hpp"

namespace memcost::trace::detail {

struct Tracefs {
  std::string root;  // where events/ lives
};

// tracefs is mounted by whoever may change the machine and journal it (the memcost front end):
// this process only finds it.
inline Failure find_tracefs(Tracefs& tracefs) {
  tracefs.root = os::perf::tracefs_root();
  if (!tracefs.root.empty()) {
    if (access((tracefs.root + "/events/raw_syscalls").c_str(), F_OK) != 0) {
      return Failure{ENOENT, "this kernel has no raw_syscalls tracepoints (CONFIG_FTRACE_SYSCALLS)", FailureKind::not_supported};
    }
    return {};
  }
  return Failure{ENOENT, "tracefs is not mounted: as root, `mount -t tracefs nodev /sys/kernel/tracing` (memcost trace "
                         "mounts it for its run)", FailureKind::not_supported};
}

struct TracepointFormat {
  std::uint64_t id = 0;
  std::map<std::string, std::uint32_t> offsets;  // of each field, by name (an array by its name alone)
};

inline Failure read_tracepoint(const Tracefs& tracefs, const std::string& name, TracepointFormat& format) {
  std::string base = tracefs.root + "/events/raw_syscalls/" + name;
  std::string id = os::read_text(base + "/id").value_or("");
  if (id.empty()) return Failure{errno ? errno : ENOENT, "read " + base + "/id"};
  format.id = std::stoull(id);
  // "\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;": the name is the last word
  // before the ';' (or the '[').
  std::istringstream lines(os::read_text(base + "/format").value_or(""));
  for (std::string line; std::getline(lines, line);) {
    const auto field = line.find("field:"), offset = line.find("offset:");
    if (field == std::string::npos || offset == std::string::npos) continue;
    std::string declaration = line.substr(field + 6, line.find(';', field) - field - 6);
    declaration = declaration.substr(0, declaration.find('['));
    format.offsets[declaration.substr(declaration.rfind(' ') + 1)] = static_cast<std::uint32_t>(std::stoul(line.substr(offset + 7)));
  }
  return {};
}

// The kernel's filter on the raw_syscalls tracepoints: the mapping calls only, or those of them
// whose entries copy their stacks (`copying_stack` true) or do not (false).
inline std::string mapping_calls_filter(std::optional<bool> copying_stack = std::nullopt) {
  std::string filter;
  for (const auto& [number, kind] : kMappingCalls) {
    if (copying_stack && calls_copy_stack(kind) != *copying_stack) continue;
    filter += (filter.empty() ? "id == " : " || id == ") + std::to_string(number);
  }
  return filter;
}

// One perf event on a raw_syscalls tracepoint: what it samples, the tracepoint, its filter.
struct CallTracepoint {
  Event event;
  TracepointFormat format;
  std::string filter;
};

// The raw_syscalls tracepoints, filtered to the mapping calls, or why they cannot be used here.
// Two tracepoints rather than one per call and direction: closing a process's last event on a
// tracepoint waits for an RCU grace period (36 ms here), and that was 0.36 s of every trace. The
// entry has two events, the calls that copy their stacks and those that do not (calls_copy_stack);
// a second event on a tracepoint adds no wait at close.
// `check_fd`: the event the check opened, for the caller to close once its own are open (then
// closing it waits for nothing).
inline Failure kernel_calls(Tracefs& tracefs, std::vector<CallTracepoint>& tracepoints, int& check_fd) {
  if (Failure why = find_tracefs(tracefs); !why.ok()) return why;
  for (bool enter : {true, false}) {
    TracepointFormat format;
    if (Failure why = read_tracepoint(tracefs, enter ? "sys_enter" : "sys_exit", format); !why.ok()) return why;
    const char* values = enter ? "args" : "ret";
    if (!format.offsets.count("id") || !format.offsets.count(values)) {
      return Failure{EINVAL, "raw_syscalls:" + std::string(enter ? "sys_enter" : "sys_exit") + " has no field id or " + values,
                     FailureKind::not_supported};
    }
    Event event{enter ? EventKind::enter : EventKind::exit, enter ? kEnterSampleType : kExitSampleType, format.offsets["id"], {}};
    for (std::uint32_t i = 0; i < (enter ? 6U : 1U); ++i) event.offsets.push_back(format.offsets[values] + i * 8);
    if (!enter) {
      tracepoints.push_back({event, format, mapping_calls_filter()});
      continue;
    }
    tracepoints.push_back({event, format, mapping_calls_filter(true)});
    event.sample_type = kEnterWithoutStackSampleType;
    tracepoints.push_back({event, format, mapping_calls_filter(false)});
  }
  // Reading them needs privilege, and the filter must take: try on this process first.
  perf_event_attr attr = base_attr(kExitSampleType, 0);
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = tracepoints.front().format.id;
  attr.enable_on_exec = 0;
  attr.inherit = 0;
  int fd = open_event(attr, 0, -1);
  if (fd < 0) return errno_failure("perf_event_open(raw_syscalls tracepoint)");
  const bool filtered = ioctl(fd, PERF_EVENT_IOC_SET_FILTER, mapping_calls_filter().c_str()) == 0;
  const int error = errno;
  if (!filtered) {
    close(fd);
    return Failure{error, "ioctl(PERF_EVENT_IOC_SET_FILTER) on raw_syscalls:sys_enter", FailureKind::not_supported};
  }
  check_fd = fd;
  return {};
}

}  // namespace memcost::trace::detail
