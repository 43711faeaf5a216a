// Reading the preload library's pipe (see preload_reader.hpp).
#include "trace/preload_reader.hpp"

#include <unistd.h>

#include <cstring>

#include "trace/common.hpp"
#include "trace/python_frames.hpp"

namespace memcost::trace::detail {

std::uint64_t PreloadReader::drain() {
  const std::uint64_t began_ns = monotonic_ns();
  char chunk[65536];
  while (true) {
    ssize_t got = read(fd_, chunk, sizeof(chunk));
    if (got <= 0) break;
    pending_.insert(pending_.end(), chunk, chunk + got);
  }
  std::size_t at = 0;
  while (pending_.size() - at >= sizeof(PreloadRecord)) {
    PreloadRecord record;
    std::memcpy(&record, pending_.data() + at, sizeof(record));
    if (record.size < sizeof(PreloadRecord) || pending_.size() - at < record.size) break;
    const std::size_t returns_bytes = record.frames * sizeof(std::uint64_t);
    std::vector<std::uint64_t> returns(record.frames);
    std::memcpy(returns.data(), pending_.data() + at + sizeof(PreloadRecord), returns_bytes);
    const std::string_view python = python_block_at(
        reinterpret_cast<const std::uint8_t*>(pending_.data() + at + sizeof(PreloadRecord) + returns_bytes),
        std::min<std::size_t>(record.python_bytes, record.size - std::min<std::size_t>(record.size, sizeof(PreloadRecord) + returns_bytes)));
    MappingCall call;
    call.kind = static_cast<CallKind>(record.kind);
    call.pid = static_cast<int>(record.pid);
    call.tid = static_cast<int>(record.tid);
    call.enter_ns = record.enter_ns;
    call.exit_ns = record.exit_ns;
    std::copy(std::begin(record.args), std::end(record.args), std::begin(call.args));
    call.result = record.result;
    call.stack = unwinder_.stack_of_returns(call.pid, returns, python);
    sink_.call(call);
    at += record.size;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
  return began_ns;
}

}  // namespace memcost::trace::detail
