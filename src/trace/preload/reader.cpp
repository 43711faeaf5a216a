// Reading the preload library's pipe (see preload/reader.hpp).
#include "trace/preload/reader.hpp"

#include <unistd.h>

#include <cstring>

#include "memcost/measure.hpp"
#include "trace/unwind/python_frames.hpp"

namespace memcost::trace::detail {

bool well_formed(const PreloadRecord& header) {
  const bool call = header.kind <= MEMCOST_CALL_REALLOC || header.kind == MEMCOST_CALL_FAULTS_IN_CALL ||
                    header.kind == MEMCOST_CALL_PYTHON_RESOLVES;
  const bool python = header.python_bytes == 0 || (header.python_bytes >= sizeof(memcost_python_header) &&
                                                    header.python_bytes <= sizeof(memcost_python_header) + MEMCOST_PYTHON_BLOCK_BYTES);
  constexpr std::uint32_t kPidMaxLimit = 4u << 20;  // the kernel's PID_MAX_LIMIT on 64-bit: no pid is larger
  const bool process = header.pid > 0 && header.pid <= kPidMaxLimit && header.tid > 0 && header.tid <= kPidMaxLimit;
  return call && python && process && header.frames <= MEMCOST_PRELOAD_MAX_FRAMES &&
         header.size <= MEMCOST_PRELOAD_MAX_RECORD_BYTES &&
         header.size == sizeof(PreloadRecord) + std::uint64_t{header.frames} * sizeof(std::uint64_t) + header.python_bytes;
}

std::uint64_t PreloadReader::drain(bool final) {
  const std::uint64_t began_ns = measure::now_ns();
  char chunk[65536];
  while (true) {
    ssize_t got = read(fd_, chunk, sizeof(chunk));
    if (got <= 0) break;
    pending_.insert(pending_.end(), chunk, chunk + got);
  }
  std::size_t at = 0;
  bool passing_over = false;  // within a run of bytes that are no record
  while (pending_.size() - at >= sizeof(PreloadRecord)) {
    PreloadRecord record;
    std::memcpy(&record, pending_.data() + at, sizeof(record));
    if (!well_formed(record)) {
      // Records are whole writes: the next one starts somewhere after this byte.
      if (!passing_over) ++malformed_records_;
      passing_over = true;
      ++malformed_bytes_;
      ++at;
      continue;
    }
    if (pending_.size() - at < record.size) break;  // the rest of it is still to come
    passing_over = false;
    if (record.kind == MEMCOST_CALL_FAULTS_IN_CALL && call_faults_counted_in_kernel) {
      at += record.size;  // counted in the kernel already
      continue;
    }
    const char* returns_at = pending_.data() + at + sizeof(PreloadRecord);
    std::vector<std::uint64_t> returns(record.frames);
    std::memcpy(returns.data(), returns_at, returns.size() * sizeof(std::uint64_t));
    const std::string_view python = python_block_at(
        reinterpret_cast<const std::uint8_t*>(returns_at + returns.size() * sizeof(std::uint64_t)), record.python_bytes);
    if (record.kind == MEMCOST_CALL_PYTHON_RESOLVES) {
      unwinder_.resolve_python(static_cast<int>(record.pid), record.args[0], python);
      at += record.size;
      continue;
    }
    const std::uint32_t stack = unwinder_.stack_of_returns(static_cast<int>(record.pid), returns, python, record.enter_ns);
    if (record.kind == MEMCOST_CALL_FAULTS_IN_CALL) {
      sink_.call_faults(CallFaults{static_cast<int>(record.pid), static_cast<int>(record.tid), record.enter_ns,
                                  record.exit_ns, static_cast<long>(record.args[0]), record.args[1], record.args[2],
                                  record.args[3], stack});
    } else {
      MappingCall call;
      call.kind = static_cast<CallKind>(record.kind);
      call.pid = static_cast<int>(record.pid);
      call.tid = static_cast<int>(record.tid);
      call.enter_ns = record.enter_ns;
      call.exit_ns = record.exit_ns;
      std::copy(std::begin(record.args), std::end(record.args), std::begin(call.args));
      call.result = record.result;
      call.stack = stack;
      sink_.call(call);
    }
    at += record.size;
  }
  if (final && at < pending_.size()) {  // a record cut short, or bytes too few to be one
    if (!passing_over) ++malformed_records_;
    malformed_bytes_ += pending_.size() - at;
    at = pending_.size();
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
  return began_ns;
}

}  // namespace memcost::trace::detail
