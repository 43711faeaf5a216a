// The system calls that fault pages in without an exception (see CallFaults in tracer.hpp): the
// range each works on and its name, by the traced kernel's numbers (linux_abi.hpp).
#include <string>

#include "trace/attribution/linux_abi.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace {

using namespace linux_abi;

void call_range(long syscall, const std::uint64_t (&args)[6], std::int64_t result, std::uint64_t& start,
                std::uint64_t& length) {
  start = length = 0;
  const bool failed = result < 0 && result > -4096;
  if ((syscall == kSysMmap || syscall == kSysMremap) && !failed) {
    start = static_cast<std::uint64_t>(result);
    length = syscall == kSysMmap ? args[1] : args[2];
  } else if (syscall == kSysMadvise || syscall == kSysMlock || syscall == kSysMlock2) {
    start = args[0];
    length = args[1];
  }
}

std::string syscall_name(long syscall) {
  switch (syscall) {
    case kSysMmap: return "mmap";
    case kSysIoctl: return "ioctl";
    case kSysMremap: return "mremap";
    case kSysMadvise: return "madvise";
    case kSysMlock: return "mlock";
    case kSysMlockall: return "mlockall";
    case kSysMlock2: return "mlock2";
    default: return "syscall " + std::to_string(syscall);
  }
}

}  // namespace memcost::trace
