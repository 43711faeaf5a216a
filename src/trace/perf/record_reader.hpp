// Reading the perf ring buffers' records: mappings, forks, execs and exits first, then samples
// (faults, CPU samples and the raw_syscalls tracepoints' entries and exits, paired into timed calls),
// each delivered to the sink; stacks unwound by the Unwinder (unwinder.hpp).
#pragma once

#include <functional>

#include "trace/unwind/kernel_symbols.hpp"
#include "trace/perf/perf.hpp"
#include "trace/unwind/unwinder.hpp"

namespace memcost::trace::detail {

class RecordReader {
 public:
  RecordReader(const Options& options, Sink& sink) : options_(options), sink_(sink), unwinder_(options, sink) {}

  std::unordered_map<std::uint64_t, Event> events;  // by perf id
  std::vector<RingBuffer> buffers;
  std::uint64_t lost = 0;
  std::uint64_t malformed = 0;  // samples whose raw data is none of the in-kernel counter's records
  const KernelSymbols* kernel = nullptr;  // for classifying CPU samples
  // How full a buffer may get before `behind` is called, looked at every `check_every` samples
  // read: small buffers (no privilege to lock more) fill within a millisecond, so they are watched closely.
  double behind_at = 0.25;
  std::size_t check_every = 256;

  // Everything the buffers hold now. The records that describe the address space (mappings,
  // forks, execs) go first, from every CPU's buffer, so that a sample finds the modules it needs
  // whichever CPU recorded them; then the samples, read in place (copied only where a record
  // wraps around the end of its buffer), giving space back to the kernel as they go.
  // `behind` is called when a buffer is a quarter full while draining, so the caller can hold
  // the command until this drain ends.
  // Returns the moment up to which every record has now been delivered.
  std::uint64_t drain(bool final = false, const std::function<void()>& behind = {});

  [[nodiscard]] std::uint64_t unwind_failures() const { return unwinder_.unwind_failures(); }
  Unwinder& unwinder() { return unwinder_; }

  // The first process: its name before any record names it.
  void started(int pid, std::uint64_t time_ns, const std::string& name) {
    names_[pid] = name.substr(0, 15);
    sink_.process({ProcessChange::start, pid, 0, time_ns, names_[pid]});
  }

  // Every process of the traced tree seen so far.
  [[nodiscard]] std::vector<int> processes() const {
    std::vector<int> pids;
    for (const auto& [pid, name] : names_) pids.push_back(pid);
    return pids;
  }

  // How full the fullest buffer is, 0 to 1.
  [[nodiscard]] double fullest() const;

 private:
  static void copy_out(const std::uint8_t* data, std::size_t size, std::uint64_t from, void* out, std::size_t bytes);

  const Event* event_of(const std::uint8_t* record, std::size_t size) const;

  void handle(const std::uint8_t* record, std::size_t size);

  void sample(const Event& event, Reader& in, std::uint16_t misc);

  // A thread's calls alternate enter, exit; its records can sit in different CPUs' buffers, so
  // they are paired in time order, once every record up to `settled` has been read.
  void pair_calls(std::uint64_t settled);

  struct SyscallEvent {
    std::uint64_t time;
    int pid, tid;
    CallKind call;
    bool enter;
    std::uint32_t stack;
    std::uint64_t args[6];
  };

  const Options& options_;
  Sink& sink_;
  Unwinder unwinder_;
  std::vector<SyscallEvent> syscalls_;
  std::unordered_map<int, MappingCall> open_;
  std::unordered_map<int, std::string> names_;
  std::vector<std::uint8_t> wrapped_;
  std::size_t page_size_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
};

}  // namespace memcost::trace::detail
