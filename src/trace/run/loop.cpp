// The tracing loop (loop.hpp).
#include "trace/run/loop.hpp"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include "memcost/measure.hpp"

namespace memcost::trace::detail {

bool small_buffers(const std::vector<std::unique_ptr<FaultSource>>& sources, std::uint64_t buffer_bytes) {
  std::uint64_t small = 0;
  for (const auto& source : sources) small = std::max(small, source->small_buffer_bytes());
  return buffer_bytes < small;
}

std::uint64_t TraceLoop::read_records(Hold& hold) {
  const std::uint64_t settled = reader_.drain(false, [&] { hold.hold(); });
  return preload_ ? std::min(settled, preload_->drain()) : settled;
}

std::uint64_t TraceLoop::deliver(std::uint64_t now_ns, bool window_end) {
  std::uint64_t delivered = UINT64_MAX;
  for (auto& source : sources_) delivered = std::min(delivered, source->deliver(now_ns, window_end, false, sink_));
  return delivered;
}

bool TraceLoop::paced() const {
  return std::any_of(sources_.begin(), sources_.end(), [](const auto& source) { return source->paces(); });
}

bool TraceLoop::stopped_by_kernel() {
  return std::any_of(sources_.begin(), sources_.end(), [](const auto& source) { return source->stopped_the_command(); });
}

LoopCounts TraceLoop::run(pid_t root, int root_exit_fd, std::uint64_t started_ns, bool small,
                          const std::function<bool()>& ended) {
  std::vector<pollfd> polls;
  for (const RingBuffer& buffer : reader_.buffers) polls.push_back({buffer.fd, POLLIN, 0});
  if (root_exit_fd >= 0) polls.push_back({root_exit_fd, POLLIN, 0});
  int poll_ms = 10;
  for (const auto& source : sources_) poll_ms = std::min(poll_ms, source->poll_ms());
  Hold hold(root);
  if (small) {
    reader_.behind_at = 1.0 / 8;
    reader_.check_every = 64;
  }
  // The first unwind through a module (its CFI, its symbols: PyTorch's largest table reads in
  // about 0.1 s here) holds the command only where the buffers are already as full as the loop
  // itself would not let them get: it did at 1/16, 35-40 times an `import torch`.
  reader_.unwinder().before_slow_work = [&] {
    if (small || reader_.fullest() > reader_.behind_at) hold.hold();
  };
  const bool pacing = paced();
  LoopCounts counts;
  std::uint64_t period_started = started_ns;
  while (true) {
    // perf may deliver its wakeup only at the next tick: look every so often as well.
    poll(polls.data(), polls.size(), poll_ms);
    // A buffer whose event's task has exited says POLLHUP at every poll from then on: polled
    // further, it made the loop spin until the command was reaped, 650 turns while a traced
    // `import torch` tore down its address space. Its records are still read every turn.
    for (pollfd& polled : polls) {
      if (polled.revents & POLLHUP) polled.fd = -1;
    }
    // Stopped by the kernel (Pacing): continued once what it wrote before the stop has been read,
    // below. Looked at before the tracer's own hold, whose stop it would report.
    const bool stopped = pacing && stopped_by_kernel();
    // Behind the kernel (a buffer a quarter full): hold the traced tree still while catching up,
    // rather than lose records. It is told nothing.
    if (reader_.fullest() > reader_.behind_at) hold.hold();
    std::uint64_t settled = read_records(hold);
    const std::uint64_t now = measure::now_ns();
    const bool period_ended = options_.period_ns && options_.period_ended && now - period_started >= options_.period_ns;
    settled = std::min({settled, deliver(now, period_ended), reader_.unwinder().oldest_pending_python_ns()});
    sink_.settle(settled);
    // A stop that came while the buffers were read (the kernel's, or the tracer's own hold from
    // inside the read): what was written up to it is read too before the command goes on, so that
    // a buffer never starts the next quarter with the last one unread.
    const bool stopped_while_reading = pacing && !stopped && (hold.holding() || stopped_by_kernel());
    if (stopped_while_reading) sink_.settle(std::min(read_records(hold), reader_.unwinder().oldest_pending_python_ns()));
    const bool kernel_stopped = stopped || (stopped_while_reading && !hold.holding());
    hold.release();
    if (kernel_stopped) {
      kill(root, SIGCONT);
      ++counts.kernel_stops;
    }
    if (period_ended) {
      period_started += (now - period_started) / options_.period_ns * options_.period_ns;  // on the grid, none doubled
      reader_.unwinder().name_jit_frames();
      options_.period_ended();
    }
    if (ended()) break;
  }
  reader_.unwinder().before_slow_work = nullptr;
  counts.pauses = hold.pauses;
  counts.paused_ns = hold.paused_ns;
  return counts;
}

void TraceLoop::finish() {
  reader_.drain(true);
  if (preload_) preload_->drain(true);
  for (auto& source : sources_) source->deliver(measure::now_ns(), false, true, sink_);
  reader_.unwinder().name_jit_frames();  // a map written at exit is there now
  sink_.settle(UINT64_MAX);
}

}  // namespace memcost::trace::detail
