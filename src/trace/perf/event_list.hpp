// The perf events of one tracing run and their ring buffers (as perf's evlist): one buffer per CPU,
// owned by the first sampling event opened on that CPU; every later sampling event on the CPU writes
// into it. add() is the one place an event is opened, pointed at its CPU's owner and registered with
// the record reader by its id.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "trace/perf/perf.hpp"

namespace memcost::trace::detail {

// The ring buffer each CPU gets, in pages: what was asked, halved until the kernel would lock it.
// Without privilege the kernel locks only perf_event_mlock_kb per CPU plus this user's
// RLIMIT_MEMLOCK (shared by the CPUs); root gets what it asks. (Pure; tested on its own.)
[[nodiscard]] std::size_t lockable_buffer_pages(std::size_t asked_pages, std::size_t page_bytes, bool privileged,
                                                std::uint64_t perf_mlock_bytes, std::uint64_t memlock_bytes, long cpus);
// The user stack copied per sample: what was asked, but small enough that a buffer of `buffer_bytes`
// holds a couple of thousand samples; at least 512 bytes. (Pure.)
[[nodiscard]] std::uint32_t fitting_stack_bytes(std::uint32_t asked, std::uint64_t buffer_bytes);

class EventList {
 public:
  // `registry` and `buffers` are the record reader's: what it reads, by perf id and by CPU.
  EventList(std::unordered_map<std::uint64_t, Event>& registry, std::vector<RingBuffer>& buffers, std::size_t buffer_pages);
  ~EventList();
  EventList(const EventList&) = delete;
  EventList& operator=(const EventList&) = delete;

  static constexpr int kFailed = -2;
  // Opens `attr` on `target` (-1: every process) and `cpu`. With `event`, it samples into the CPU's
  // buffer: the first such event on a CPU owns it (mapped here, halved while the kernel refuses to
  // lock it), the others are pointed at it; and the reader knows its records by `event`. Without,
  // it records nothing (a counter). Returns its descriptor; -1 with errno as perf_event_open left
  // it, for the caller to judge (an offline CPU, a thread gone, no privilege); kFailed with
  // failure() set when its buffer could not be mapped or pointed at.
  int add(perf_event_attr attr, pid_t target, int cpu, const std::optional<Event>& event);
  // A fault event: in kernel mode too while the kernel allows it (the faults a system call takes
  // for the program, read() into a fresh buffer); once refused, user mode only from then on.
  int add_faults(perf_event_attr attr, pid_t target, int cpu, const std::optional<Event>& event);
  [[nodiscard]] bool kernel_samples() const { return kernel_samples_; }

  [[nodiscard]] bool owned(int cpu) const { return owners_.count(cpu) != 0; }
  void enable() const;
  void disable() const;
  [[nodiscard]] const Failure& failure() const { return failure_; }
  [[nodiscard]] std::size_t buffer_pages() const { return buffer_pages_; }   // as granted
  [[nodiscard]] std::size_t buffer_bytes() const { return buffer_pages_ * page_; }

 private:
  std::unordered_map<std::uint64_t, Event>& registry_;
  std::vector<RingBuffer>& buffers_;
  std::size_t buffer_pages_;
  const std::size_t page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  struct Opened {
    int fd;
    std::uint32_t type;    // perf's: PERF_TYPE_TRACEPOINT among them
    std::uint64_t config;  // a tracepoint's id
  };
  std::vector<Opened> fds_;
  std::map<int, int> owners_;  // CPU: the event that owns its buffer
  bool kernel_samples_ = true;
  Failure failure_;
};

}  // namespace memcost::trace::detail
