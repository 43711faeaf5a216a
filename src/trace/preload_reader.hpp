// The preload interposer's records (preload_abi.h, written by preload_linux.c), read from its
// pipe as they come and delivered as mapping calls, their stacks symbolized by the Unwinder.
#pragma once

#include <cstdint>
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

  // Every whole record the pipe holds now, as calls to the sink (a record cut short waits).
  // Returns when it began to read (CLOCK_MONOTONIC): every call whose record was written before
  // then has been delivered. A record is written after its call returns, and the memory the
  // call made is touched only after that, but a thread can be held up between the two (a busy
  // CPU): faults are settled no later than this, or a mapping could miss its first faults.
  std::uint64_t drain();

 private:
  int fd_;
  Unwinder& unwinder_;
  Sink& sink_;
  std::vector<char> pending_;
};

}  // namespace memcost::trace::detail
