// Tracing a command's memory work is Linux-only for now (perf events and libdwfl); see trace.hpp.
#include "os/trace.hpp"

namespace memcost::os::trace {

std::string Failure::message() const { return what; }

Failure supported() { return Failure{0, "memcost trace needs Linux perf events; a Windows tracer (ETW) is not built yet"}; }

Result run(const Options&, Sink&, Failure& status) {
  status = supported();
  return {};
}

}  // namespace memcost::os::trace
