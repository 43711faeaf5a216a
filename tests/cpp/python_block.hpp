// Python blocks as interposer.c writes them (preload/abi.h), for the tests of their readers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "trace/unwind/python_frames.hpp"

namespace memcost::trace {

// A Python block as interposer.c writes it: header, then line, file bytes (or 0xFFFF: the
// previous file), function bytes, names.
inline std::string python_block(const std::vector<std::tuple<std::uint32_t, std::string, std::string>>& frames) {
  std::string body;
  std::string previous;
  for (const auto& [line, file, function] : frames) {
    const bool same = file == previous;
    const std::uint16_t file_field = same ? 0xFFFF : static_cast<std::uint16_t>(file.size());
    const auto function_bytes = static_cast<std::uint16_t>(function.size());
    body.append(reinterpret_cast<const char*>(&line), 4);
    body.append(reinterpret_cast<const char*>(&file_field), 2);
    body.append(reinterpret_cast<const char*>(&function_bytes), 2);
    if (!same) body += file;
    body += function;
    previous = file;
  }
  std::string block(16, '\0');
  const std::uint64_t magic = detail::kPythonMagic;
  const auto bytes = static_cast<std::uint32_t>(body.size());
  const auto count = static_cast<std::uint32_t>(frames.size());
  std::memcpy(block.data(), &magic, 8);
  std::memcpy(block.data() + 8, &bytes, 4);
  std::memcpy(block.data() + 12, &count, 4);
  return block + body;
}

// A pending block: a big call's while its thread had released the GIL, naming the release.
inline std::string pending_python_block(std::uint64_t release) {
  const memcost_python_pending pending{detail::kPythonPendingMagic, release};
  return std::string(reinterpret_cast<const char*>(&pending), sizeof(pending));
}

}  // namespace memcost::trace
