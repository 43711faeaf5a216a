// The preload interposer's records (preload/abi.h, written by interposer.c), read from its
// pipe as they come and delivered as mapping calls, their stacks symbolized by the Unwinder.
#pragma once

#include <cstdint>
#include <vector>

#include "trace/preload/abi.h"
#include "trace/unwind/unwinder.hpp"

namespace memcost::trace::detail {

using PreloadRecord = memcost_preload_header;
static_assert(static_cast<int>(CallKind::mmap) == MEMCOST_CALL_MMAP && static_cast<int>(CallKind::munmap) == MEMCOST_CALL_MUNMAP &&
              static_cast<int>(CallKind::mremap) == MEMCOST_CALL_MREMAP && static_cast<int>(CallKind::brk) == MEMCOST_CALL_BRK &&
              static_cast<int>(CallKind::madvise) == MEMCOST_CALL_MADVISE && static_cast<int>(CallKind::malloc) == MEMCOST_CALL_MALLOC &&
              static_cast<int>(CallKind::free) == MEMCOST_CALL_FREE && static_cast<int>(CallKind::realloc) == MEMCOST_CALL_REALLOC,
              "the preload library's record kinds are the tracer's call kinds");
static_assert(sizeof(PreloadRecord) == 96, "the record header's layout: no padding, the same in C and C++");

static_assert(MEMCOST_PRELOAD_MAX_RECORD_BYTES <= 4096, "a record is one atomic write to a pipe (PIPE_BUF)");

// Whether a record's header describes a record of the format (preload/abi.h): its kind, its size
// exactly its parts, each within its bounds. The bytes come from the traced program, which can
// write anything into the descriptor it inherits: nothing else of a header is trusted.
[[nodiscard]] bool well_formed(const PreloadRecord& header);

// Reads the preload library's records from its pipe as they come.
class PreloadReader {
 public:
  // `fd`: the read end of the library's pipe, non-blocking (the caller's to close).
  PreloadReader(int fd, Unwinder& unwinder, Sink& sink) : fd_(fd), unwinder_(unwinder), sink_(sink) {}
  // The faults inside system calls are counted in the kernel (fault_counter.hpp): the library's own
  // count of them (MEMCOST_CALL_FAULTS_IN_CALL) is passed over, not counted twice.
  bool call_faults_counted_in_kernel = false;

  // Every whole record the pipe holds now, as calls to the sink (a record cut short waits).
  // Returns when it began to read (CLOCK_MONOTONIC): every call whose record was written before
  // then has been delivered. A record is written after its call returns, and the memory the
  // call made is touched only after that, but a thread can be held up between the two (a busy
  // CPU): faults are settled no later than this, or a mapping could miss its first faults.
  // Bytes that are no record of the format (something else wrote into the pipe) are passed over
  // to the next well-formed header and counted; with `final`, so is a record left cut short.
  std::uint64_t drain(bool final = false);

  // Runs of bytes passed over (each a malformed record, or garbage between records), and their bytes.
  [[nodiscard]] std::uint64_t malformed_records() const { return malformed_records_; }
  [[nodiscard]] std::uint64_t malformed_bytes() const { return malformed_bytes_; }

 private:
  int fd_;
  Unwinder& unwinder_;
  Sink& sink_;
  std::vector<char> pending_;
  std::uint64_t malformed_records_ = 0, malformed_bytes_ = 0;
};

}  // namespace memcost::trace::detail
