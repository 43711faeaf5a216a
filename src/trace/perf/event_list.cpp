// The run's perf events and their per-CPU ring buffers (event_list.hpp).
#include "trace/perf/event_list.hpp"

#include <sys/ioctl.h>

#include <algorithm>
#include <system_error>
#include <thread>

namespace memcost::trace::detail {

std::size_t lockable_buffer_pages(std::size_t asked_pages, std::size_t page_bytes, bool privileged,
                                  std::uint64_t perf_mlock_bytes, std::uint64_t memlock_bytes, long cpus) {
  if (privileged) return asked_pages;
  const std::uint64_t allowed = perf_mlock_bytes + memlock_bytes / static_cast<std::uint64_t>(std::max(cpus, 1L));
  std::size_t pages = asked_pages;
  while (pages > 8 && (pages + 1) * page_bytes > allowed) pages /= 2;  // the buffer and its header page
  return pages;
}

std::uint32_t fitting_stack_bytes(std::uint32_t asked, std::uint64_t buffer_bytes) {
  const auto fitting = static_cast<std::uint32_t>(std::min<std::uint64_t>(buffer_bytes / 2048, UINT32_MAX)) & ~7U;
  return std::max<std::uint32_t>(512, std::min(asked, fitting));
}

EventList::EventList(std::unordered_map<std::uint64_t, Event>& registry, std::vector<RingBuffer>& buffers,
                     std::size_t buffer_pages)
    : registry_(registry), buffers_(buffers), buffer_pages_(buffer_pages) {}

EventList::~EventList() {
  for (RingBuffer& buffer : buffers_) munmap(buffer.base, buffer.mapped_bytes);
  buffers_.clear();
  // Closing a tracepoint's last event takes the kernel's probe off it, which waits for an RCU
  // grace period (tracepoint_synchronize_unregister: 35-60 ms each on the 2-vCPU guest, where
  // raw_syscalls' sys_enter and sys_exit made 95 ms of every trace's end). The other events
  // close at once; the last of each tracepoint is disabled, and closed on a thread left to it,
  // while the probe reports (the process's exit waits for it).
  std::map<std::uint64_t, int> last_of_tracepoint;
  for (const auto& [fd, type, config] : fds_) {
    if (type != PERF_TYPE_TRACEPOINT) {
      close(fd);
      continue;
    }
    auto [last, fresh] = last_of_tracepoint.try_emplace(config, fd);
    if (!fresh) {
      close(last->second);
      last->second = fd;
    }
  }
  for (const auto& [config, fd] : last_of_tracepoint) {
    ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    try {
      std::thread([fd = fd] { close(fd); }).detach();
    } catch (const std::system_error&) {  // no thread to be had: closed here
      close(fd);
    }
  }
}

int EventList::add(perf_event_attr attr, pid_t target, int cpu, const std::optional<Event>& event) {
  const int fd = open_event(attr, target, cpu);
  if (fd < 0) return -1;
  fds_.push_back({fd, attr.type, attr.config});
  if (!event) return fd;
  if (auto owner = owners_.find(cpu); owner != owners_.end()) {
    if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, owner->second) != 0) {
      failure_ = errno_failure("ioctl(PERF_EVENT_IOC_SET_OUTPUT)");
      return kFailed;
    }
  } else {
    RingBuffer buffer;
    if (Failure why = map_ring_buffer(fd, buffer_pages_, page_, buffer); !why.ok()) {
      failure_ = why;
      return kFailed;
    }
    buffers_.push_back(buffer);
    owners_[cpu] = fd;
  }
  std::uint64_t id = 0;
  if (ioctl(fd, PERF_EVENT_IOC_ID, &id) != 0) {
    failure_ = errno_failure("ioctl(PERF_EVENT_IOC_ID)");
    return kFailed;
  }
  registry_[id] = *event;
  return fd;
}

int EventList::add_faults(perf_event_attr attr, pid_t target, int cpu, const std::optional<Event>& event) {
  attr.exclude_kernel = kernel_samples_ ? 0 : 1;
  const int fd = add(attr, target, cpu, event);
  if (fd != -1 || !kernel_samples_ || (errno != EACCES && errno != EPERM)) return fd;
  kernel_samples_ = false;
  attr.exclude_kernel = 1;
  return add(attr, target, cpu, event);
}

void EventList::enable() const {
  for (const Opened& opened : fds_) ioctl(opened.fd, PERF_EVENT_IOC_ENABLE, 0);
}

void EventList::disable() const {
  for (const Opened& opened : fds_) ioctl(opened.fd, PERF_EVENT_IOC_DISABLE, 0);
}

}  // namespace memcost::trace::detail
