// perf events: opening them, their ring buffers, reading records out of them.
#pragma once

#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

#include "os/perf_linux.hpp"
#include "trace/perf/arch.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace::detail {

// The faulting instruction is in the user registers (a kernel-mode fault's sample IP is the kernel's).
inline constexpr std::uint64_t kFaultSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR |
                                           PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
// A fault counted by its record alone: which thread, when, where (the touching stacks are sampled).
inline constexpr std::uint64_t kFaultAddressSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR;
// A touching stack sent by the in-kernel counter (a BPF-output event): the fault's address and
// weight in the raw data (memcost_touch_sample), the user registers and stack copied by perf.
inline constexpr std::uint64_t kTouchSampleType =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
inline constexpr std::uint64_t kEnterSampleType =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
inline constexpr std::uint64_t kExitSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW;
// The entry of a call whose stack nothing reads (calls_copy_stack): its arguments alone.
inline constexpr std::uint64_t kEnterWithoutStackSampleType = kExitSampleType;

// CPU time in the kernel, with the kernel's call chain only (the fault it belongs to has the user stack).
inline constexpr std::uint64_t kCpuSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN;

enum class EventKind { fault, enter, exit, cpu };

struct Event {
  EventKind kind;
  std::uint64_t sample_type = 0;
  // raw_syscalls tracepoints: where the system call's number is, and its arguments (enter) or
  // result (exit), in the raw data.
  std::uint32_t number_offset = 0;
  std::vector<std::uint32_t> offsets = {};
  bool counted = true;  // faults: false when counted in the kernel, the samples being touching stacks only
  bool touch_in_raw = false;  // faults: the in-kernel counter's touching sample, its fault in the raw data
};

// The mapping calls traced, by their system call numbers on this architecture (<sys/syscall.h>).
inline constexpr std::pair<long, CallKind> kMappingCalls[] = {
    {SYS_mmap, CallKind::mmap}, {SYS_munmap, CallKind::munmap}, {SYS_mremap, CallKind::mremap},
    {SYS_brk, CallKind::brk}, {SYS_madvise, CallKind::madvise}};

// Whether a call's entry copies its stack: those that make memory or advise on it (mmap, brk,
// madvise), whose stacks are unwound (stack_names_call) or carry the preload library's link to a
// released Python stack (its madvise(NULL, 0, MADV_NORMAL), Unwinder::read_links). A munmap and an
// mremap name no site and carry no link: their entries copy no stack (820 of a traced `import
// torch`'s 3,700 calls, 32 KiB each).
inline constexpr bool calls_copy_stack(CallKind kind) { return kind != CallKind::munmap && kind != CallKind::mremap; }

inline std::optional<CallKind> mapping_call(long number) {
  for (const auto& [traced, kind] : kMappingCalls) {
    if (traced == number) return kind;
  }
  return std::nullopt;
}

// Whether the attribution keeps a call's stack, so that its sample is unwound: the stack of the
// memory a call makes (mmap, brk: its allocation site) and of advice that refuses huge pages
// (the site that did). A munmap, an mremap (its mapping keeps its site) and other advice name
// nothing with theirs (attribution.cpp); `args` as the call entered.
inline bool stack_names_call(CallKind kind, const std::uint64_t (&args)[6]) {
  switch (kind) {
    case CallKind::mmap:
    case CallKind::brk:
      return true;
    case CallKind::madvise:
      return args[2] == MADV_NOHUGEPAGE;
    default:
      return false;
  }
}

struct RingBuffer {
  int fd = -1;
  void* base = nullptr;
  std::size_t mapped_bytes = 0;
  std::size_t data_bytes = 0;
};

using os::perf::open_event;

// Without privilege the kernel lets a user lock only perf_event_mlock_kb per CPU plus
// RLIMIT_MEMLOCK: halve the buffer until it is granted (smaller ones mean more pauses).
inline Failure map_ring_buffer(int fd, std::size_t& pages, std::size_t page, RingBuffer& buffer) {
  buffer.fd = fd;
  for (;; pages /= 2) {
    buffer.data_bytes = pages * page;
    buffer.mapped_bytes = buffer.data_bytes + page;
    buffer.base = mmap(nullptr, buffer.mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (buffer.base != MAP_FAILED) return {};
    if (errno != EPERM || pages <= 8) return errno_failure("mmap(perf ring buffer)");
  }
}

inline perf_event_attr base_attr(std::uint64_t sample_type, std::uint32_t stack_bytes) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.sample_type = sample_type;
  attr.sample_period = 1;
  attr.disabled = 1;
  attr.inherit = 1;
  attr.enable_on_exec = 1;
  attr.sample_id_all = 1;
  attr.exclude_hv = 1;
  // CLOCK_MONOTONIC: the clock memcost::measure::now_ns() reads, so record times compare with it.
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  if (sample_type & PERF_SAMPLE_REGS_USER) attr.sample_regs_user = kUserRegsMask;
  if (sample_type & PERF_SAMPLE_STACK_USER) attr.sample_stack_user = stack_bytes;
  return attr;
}

// One record, read field by field; reads past its end give zeros.
struct Reader {
  const std::uint8_t* at;
  const std::uint8_t* end;
  template <typename T>
  T take() {
    T value{};
    if (at + sizeof(T) <= end) std::memcpy(&value, at, sizeof(T));
    at += sizeof(T);
    return value;
  }
  void skip(std::size_t bytes) { at += bytes; }
};


}  // namespace memcost::trace::detail
