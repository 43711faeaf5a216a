// The preload interposer's records (preload_linux.c), read from its pipe as they come.
#pragma once

#include <unistd.h>

#include <cstring>
#include <vector>

#include "trace/preload_abi.h"
#include "trace/unwind.hpp"

namespace memcost::trace::detail {

using PreloadRecord = memcost_preload_header;
static_assert(static_cast<int>(CallKind::mmap) == MEMCOST_CALL_MMAP && static_cast<int>(CallKind::munmap) == MEMCOST_CALL_MUNMAP &&
              static_cast<int>(CallKind::mremap) == MEMCOST_CALL_MREMAP && static_cast<int>(CallKind::brk) == MEMCOST_CALL_BRK &&
              static_cast<int>(CallKind::madvise) == MEMCOST_CALL_MADVISE && static_cast<int>(CallKind::malloc) == MEMCOST_CALL_MALLOC &&
              static_cast<int>(CallKind::free) == MEMCOST_CALL_FREE && static_cast<int>(CallKind::realloc) == MEMCOST_CALL_REALLOC,
              "the preload library's record kinds are the tracer's call kinds");
static_assert(sizeof(PreloadRecord) == 96, "the record header's layout: no padding, the same in C and C++");

// Reads the preload library's records from its pipe as they come.
class PreloadReader {
 public:
  PreloadReader(int fd, Unwinder& recorder, Sink& sink) : fd_(fd), unwinder_(recorder), sink_(sink) {}
  void read_from(int fd) { fd_ = fd; }

  void drain() {
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
  }

 private:
  int fd_;
  Unwinder& unwinder_;
  Sink& sink_;
  std::vector<char> pending_;
};

}  // namespace memcost::trace::detail
