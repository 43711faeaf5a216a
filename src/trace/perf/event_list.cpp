// The run's perf events and their per-CPU ring buffers (event_list.hpp).
#include "trace/perf/event_list.hpp"

#include <sys/ioctl.h>

#include <algorithm>

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
  for (int fd : fds_) close(fd);
}

int EventList::add(perf_event_attr attr, pid_t target, int cpu, const std::optional<Event>& event) {
  const int fd = open_event(attr, target, cpu);
  if (fd < 0) return -1;
  fds_.push_back(fd);
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
  for (int fd : fds_) ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
}

void EventList::disable() const {
  for (int fd : fds_) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
}

}  // namespace memcost::trace::detail
