// The tracing loop: read what the buffers and the preload pipe hold, hold the traced tree still
// while behind, settle the sink up to what has been delivered, and end a window every period.
// Until the workload ends; then what is left is read and delivered.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "trace/sources/fault_source.hpp"
#include "trace/preload/reader.hpp"
#include "trace/perf/record_reader.hpp"
#include "trace/run/workload.hpp"

namespace memcost::trace::detail {

struct LoopCounts {
  std::uint64_t pauses = 0, paused_ns = 0;  // the tracer's holds
  std::uint64_t kernel_stops = 0;           // the kernel's (Pacing), continued by the tracer
};

// Whether a run's buffers are small: they fill within one slow step of the reader (the sources
// say where that begins). (Pure.)
[[nodiscard]] bool small_buffers(const std::vector<std::unique_ptr<FaultSource>>& sources, std::uint64_t buffer_bytes);

class TraceLoop {
 public:
  // `preload`: the preload library's pipe, or nullptr where calls come from the tracepoints.
  TraceLoop(const Options& options, RecordReader& reader, PreloadReader* preload,
            std::vector<std::unique_ptr<FaultSource>>& sources, Sink& sink)
      : options_(options), reader_(reader), preload_(preload), sources_(sources), sink_(sink) {}

  // Reads until `ended` says the workload has ended, holding the tree of `root` still whenever a
  // buffer fills (before each slow step too, with small buffers). `root_exit_fd` (-1: none) polls
  // readable when `root` has exited: the loop then looks at `ended` at once.
  LoopCounts run(pid_t root, int root_exit_fd, std::uint64_t started_ns, bool small, const std::function<bool()>& ended);
  // After the end: everything left, read and delivered, the sink settled to the end.
  void finish();

 private:
  // The records the buffers and the preload pipe hold now, delivered; the time up to which every
  // record of both has been (the earlier: a call's pipe record can come well after the perf
  // records of other threads' events at the same moment).
  std::uint64_t read_records(Hold& hold);
  // What the sources counted outside the buffers; the moment up to which it is delivered.
  std::uint64_t deliver(std::uint64_t now_ns, bool window_end);
  [[nodiscard]] bool paced() const;
  bool stopped_by_kernel();

  const Options& options_;
  RecordReader& reader_;
  PreloadReader* preload_;
  std::vector<std::unique_ptr<FaultSource>>& sources_;
  Sink& sink_;
};

}  // namespace memcost::trace::detail
