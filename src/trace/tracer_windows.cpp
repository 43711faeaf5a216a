// Tracing a command's memory work is Linux-only for now (perf events and libdwfl); see trace.hpp.
#include "trace/attribution/raw.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace {

std::string Failure::message() const { return what; }

Failure supported() { return Failure{0, "memcost trace needs Linux perf events; a Windows tracer (ETW) is not built yet",
                 FailureKind::not_supported}; }

Result run(const Options&, Sink&, Failure& status) {
  status = supported();
  return {};
}

// Raw records come only from the Linux tracer (and need zlib, which the Windows build lacks).
RawWriter::RawWriter(const std::string& path, Sink& next) : next_(next), path_(path) {
  error_ = "raw trace records need the Linux tracer";
}
RawWriter::~RawWriter() = default;
void RawWriter::close() {}
void RawWriter::call(const MappingCall&) {}
void RawWriter::fault(const Fault&) {}
void RawWriter::process(const ProcessEvent&) {}
void RawWriter::put(const void*, std::size_t) {}

bool replay(const std::string&, Sink&, std::string& error) {
  error = "re-aggregating raw trace records needs the Linux probe";
  return false;
}

}  // namespace memcost::trace
