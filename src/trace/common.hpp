// Small helpers the tracer's units share.
#pragma once

#include <cerrno>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include "trace/tracer.hpp"

namespace memcost::trace::detail {

inline Failure failed(const std::string& call) { return Failure{errno, call}; }

inline std::uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(now.tv_nsec);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace memcost::trace::detail
