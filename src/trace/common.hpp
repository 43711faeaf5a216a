// Small helpers the tracer's units share.
#pragma once

#include <cerrno>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace::detail {

inline Failure failed(const std::string& call) { return Failure{errno, call}; }

// The clock perf's records are stamped with (CLOCK_MONOTONIC: perf.hpp sets it), as measure's.
inline std::uint64_t monotonic_ns() { return measure::now_ns(); }

// A /proc or tracefs file's text, "" when it cannot be read (the OS layer's reader).
inline std::string read_text(const std::string& path) { return os::read_text(path).value_or(""); }

}  // namespace memcost::trace::detail
