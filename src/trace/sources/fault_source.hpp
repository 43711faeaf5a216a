// Fault sources: the ways the tracer sees a traced program's page faults, behind one interface, one
// unit each (as perf's events are one unit each). A tracing run has a list of them; the first one's
// first event on each CPU owns that CPU's ring buffer (event_list.hpp) and carries the traced
// tree's mappings, names and forks.
//
// - CountingInKernel (counting_in_kernel.cpp): every fault counted by the BPF counter per 2 MiB
//   region (fault_counter.hpp), delivered by sweeps; perf carries only the touching stacks it samples.
// - InCallFaults (in_call_faults.cpp): the faults system calls take without an exception
//   (MAP_POPULATE, MADV_POPULATE_*, mlock, a driver pinning), counted per call by the same counter.
// - AddressRecords (address_records.cpp): a record per fault with its address alone, and a
//   second event sampling the touching stacks so many times a second.
// - FaultRecords (fault_records.cpp): a record per fault (or per sample_period faults) with its stack.
//
// Each owns its events, its buffer rule, its pacing and the sentence that says how it counted
// (Result.fault_source). A source that records every fault into a small buffer has the kernel
// stop the command every so many faults (Pacing), so that nothing is lost while the tracer is
// not running.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trace/perf/event_list.hpp"
#include "trace/sources/fault_counter.hpp"
#include "trace/preload/reader.hpp"

namespace memcost::trace::detail {

// What the sources are told of the run.
struct RunSetting {
  const Options& options;
  bool attaching = false;
  pid_t command = 0;               // the command held at the door, or the process attached to
  std::uint32_t stack_bytes = 0;   // copied per sample, as granted
};

enum class Opened { ok, offline, gone, failed };

// The event that opens a CPU's buffer for the traced tree: it also records the tree's mappings,
// names, forks and exits, and wakes the reader when 1/32 of `buffer_bytes` is written.
[[nodiscard]] perf_event_attr tree_attr(const RunSetting& run, std::uint64_t sample_type, std::uint64_t buffer_bytes);

class FaultSource {
 public:
  explicit FaultSource(const RunSetting& run) : run_(run) {}
  virtual ~FaultSource() = default;
  FaultSource(const FaultSource&) = delete;
  FaultSource& operator=(const FaultSource&) = delete;

  // Its buffer per CPU in pages, given what the kernel would lock.
  [[nodiscard]] virtual std::size_t buffer_pages(std::size_t lockable) const { return lockable; }
  // Below this a buffer fills within one slow step of the reader, which then holds the traced
  // tree before each; 0: any buffer will do.
  [[nodiscard]] virtual std::uint64_t small_buffer_bytes() const { return 0; }
  // How often the reader must look, at most, when perf's wakeup comes only at the next tick.
  [[nodiscard]] virtual int poll_ms() const { return 10; }
  // The buffers are sized: what depends on their size (pacing) is decided.
  virtual void sized(std::uint64_t buffer_bytes) { (void)buffer_bytes; }

  // Its events on `target` (the command, or one thread of the process attached to) and `cpu`.
  virtual Opened open(pid_t target, int cpu, EventList& events) = 0;
  // After every target of `cpu`: its events for the CPU as a whole.
  virtual Opened open_cpu(int cpu, EventList& events) {
    (void)cpu, (void)events;
    return Opened::ok;
  }
  // Attached: the window opens on `pid`; false with failure() set.
  virtual bool start_counting(pid_t pid) {
    (void)pid;
    return true;
  }
  // Attached: the window closes. The process goes on running, so counting stops first (the
  // in-kernel count, or the events), before the kernel's own counters are read for the cross-check.
  virtual void stop_counting(const EventList& events) { events.disable(); }

  // Pacing: whether it has the kernel stop the command, and whether it has since the last look.
  [[nodiscard]] virtual bool paces() const { return false; }
  virtual bool stopped_the_command() { return false; }

  // What it counted outside the buffers, to the sink: now and then, at a window's end
  // (`window_end`), and at the end (`last`). Returns the moment up to which all it counted is delivered.
  virtual std::uint64_t deliver(std::uint64_t now_ns, bool window_end, bool last, Sink& sink) {
    (void)now_ns, (void)window_end, (void)last, (void)sink;
    return UINT64_MAX;
  }
  // How it counted, and its totals, into the result.
  virtual void describe(Result& result, const EventList& events) const = 0;
  // The descriptor of the Python threads' GIL releases its samples read
  // (memcost_python_release_slot, bpf/fault_counts.h); -1: it reads none.
  [[nodiscard]] virtual int python_release_slots() const { return -1; }

  [[nodiscard]] const Failure& failure() const { return failure_; }

 protected:
  Opened fail(Failure why) {
    failure_ = std::move(why);
    return Opened::failed;
  }
  // perf_event_open's errno, judged: an offline CPU, a thread of an attached process gone, or a failure.
  Opened judge_open_error(int fd, const EventList& events, const char* what);

  const RunSetting& run_;
  Failure failure_;
};

// The kernel stops the command every pace_faults() faults: a page-fault counter per CPU, inherited
// by the command's threads, that signals SIGSTOP to the command's process at each overflow
// (O_ASYNC, F_SETOWN, F_SETSIG). The tracer continues it once it has read the buffers.
class Pacing {
 public:
  // Paced when a record per fault goes into a buffer of under 32 MiB (no privilege to lock more),
  // for a command (a process attached to is never stopped).
  static bool wanted(std::uint64_t buffer_bytes, bool attaching) { return !attaching && buffer_bytes < (32U << 20); }
  // A quarter of what a buffer holds, so that the faults of a few threads before the stop takes
  // effect (up to about 6,000 faults after the overflow was measured) still fit: `record_bytes`
  // a fault, after `sample_bytes` of other samples' room a second; at least 16. (Pure.)
  static std::uint64_t pace_faults(std::uint64_t buffer_bytes, std::uint64_t record_bytes, std::uint64_t sample_bytes);

  void size(std::uint64_t buffer_bytes, bool attaching, std::uint64_t record_bytes, std::uint64_t sample_bytes);
  [[nodiscard]] bool on() const { return faults_ != 0; }
  [[nodiscard]] std::uint64_t faults() const { return faults_; }
  // The counter on `target` and `cpu`, signalling `command`; false with `why` set.
  bool open(pid_t target, int cpu, pid_t command, EventList& events, Failure& why) const;
  // Whether the kernel has stopped `command` since the last look: only a stop the kernel's wait
  // reports, so that a running command is sent nothing.
  static bool stopped(pid_t command);

 private:
  std::uint64_t faults_ = 0;
};

class CountingInKernel final : public FaultSource {
 public:
  // nullptr, with `why_not`, where the counter does not load or will not take the command.
  static std::unique_ptr<CountingInKernel> open(const RunSetting& run, std::string& why_not);
  [[nodiscard]] std::size_t buffer_pages(std::size_t lockable) const override;
  [[nodiscard]] std::uint64_t small_buffer_bytes() const override { return 4U << 20; }
  Opened open(pid_t target, int cpu, EventList& events) override;
  Opened open_cpu(int cpu, EventList& events) override;
  bool start_counting(pid_t pid) override;
  void stop_counting(const EventList& events) override;
  std::uint64_t deliver(std::uint64_t now_ns, bool window_end, bool last, Sink& sink) override;
  void describe(Result& result, const EventList& events) const override;
  FaultCounter& counter() { return *counter_; }
  [[nodiscard]] int python_release_slots() const override { return counter_->python_release_slots(); }
  // A sweep every this often; the reader settles no later than the last.
  static constexpr std::uint64_t kSweepNs = 100'000'000;

 private:
  CountingInKernel(const RunSetting& run, std::unique_ptr<FaultCounter> counter);
  std::unique_ptr<FaultCounter> counter_;
  std::vector<RegionFaults> regions_;
  std::uint64_t last_sweep_ns_ = 0;
};

class InCallFaults final : public FaultSource {
 public:
  // nullptr, with `why_not`, where the kernel refuses the system-call programs. The preload
  // library's own count of the same faults is passed over from then on.
  static std::unique_ptr<InCallFaults> open(const RunSetting& run, FaultCounter& counter, PreloadReader* preload,
                                            std::string& why_not);
  Opened open(pid_t, int, EventList&) override { return Opened::ok; }  // its records go out through the counter's
  void stop_counting(const EventList&) override {}  // the counter's stop is its
  void describe(Result& result, const EventList& events) const override;

 private:
  InCallFaults(const RunSetting& run, FaultCounter& counter) : FaultSource(run), counter_(counter) {}
  FaultCounter& counter_;
};

// What the sources that write a record per fault share: a record a fault fills a buffer fast, so
// the reader looks every millisecond and the kernel paces the command where the buffers are small.
class RecordPerFault : public FaultSource {
 public:
  using FaultSource::FaultSource;
  [[nodiscard]] int poll_ms() const override { return 1; }
  [[nodiscard]] bool paces() const override { return pacing_.on(); }
  bool stopped_the_command() override { return pacing_.on() && Pacing::stopped(run_.command); }
  [[nodiscard]] const Pacing& pacing() const { return pacing_; }

 protected:
  Pacing pacing_;
};

class AddressRecords final : public RecordPerFault {
 public:
  explicit AddressRecords(const RunSetting& run) : RecordPerFault(run) {}
  [[nodiscard]] std::size_t buffer_pages(std::size_t lockable) const override;
  [[nodiscard]] std::uint64_t small_buffer_bytes() const override { return 4U << 20; }
  void sized(std::uint64_t buffer_bytes) override;
  Opened open(pid_t target, int cpu, EventList& events) override;
  void describe(Result& result, const EventList& events) const override;
  static constexpr std::uint64_t kRecordBytes = 40;  // thread, time, address, id and header
};

class FaultRecords final : public RecordPerFault {
 public:
  explicit FaultRecords(const RunSetting& run) : RecordPerFault(run) {}
  [[nodiscard]] std::uint64_t small_buffer_bytes() const override { return 32U << 20; }
  void sized(std::uint64_t buffer_bytes) override;
  Opened open(pid_t target, int cpu, EventList& events) override;
  void describe(Result& result, const EventList& events) const override;
};

// A copied stack and about 150 bytes more: a record with the user stack.
[[nodiscard]] inline std::uint64_t stack_record_bytes(std::uint32_t stack_bytes) { return stack_bytes + 150ULL; }

// The sources of a run: counted in the kernel where the counter loads (and asked for), with the
// faults inside system calls where the kernel takes those programs; else a record per fault, by
// address with sampled stacks (touch_samples_per_second) or each with its stack. Why the counter
// was not used goes into `result`.
[[nodiscard]] std::vector<std::unique_ptr<FaultSource>> choose_fault_sources(const RunSetting& run, PreloadReader* preload,
                                                                             Result& result);

}  // namespace memcost::trace::detail
