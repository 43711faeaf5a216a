// Streaming attribution: each page fault is charged, as the records arrive, to the mapping live
// at its address at its moment, and counted per (allocation stack, touching stack, process,
// page kind). Memory grows with live mappings, distinct stacks and processes, never with the
// number of faults: a fault is a counter increment once its moment has settled.
//
// Contract:
// - Calls (in time order of their return, as the tracer pairs them) and faults (in any order)
//   are held until settle(t) says every record up to t has been delivered; then they are replayed
//   in time order, a fault before a call that returned after it.
// - A call that failed changes nothing. mmap (and a big malloc, and a mapping found at attach)
//   makes a mapping; munmap, free, brk shrinking and madvise(DONTNEED/FREE/REMOVE) free what they
//   cover (madvise frees pages, not the mapping); mremap moves and resizes; brk growth is a
//   mapping; madvise(HUGEPAGE/NOHUGEPAGE) marks what it covers. A forked child starts with its
//   parent's mappings; an exec'd program with none.
// - Page kind: a THP-sized (2 MB on x86-64) region of a mapping at least that large that took
//   exactly one fault was mapped whole, by a huge page, where huge pages were possible (THP always, or madvise and advised);
//   every other fault is a base page. A region's kind is known when its mapping ends (or at
//   finish()): faults are counted into the aggregate then.
// - Allocation origins (stack and call kind) keep lifetime summaries: mappings made and freed,
//   bytes, measured call time, and per size of freed mapping how many and what they cost.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/tracer.hpp"

namespace memcost::trace {


// Where huge pages could back anonymous memory: the machine's THP mode.
enum class ThpMode { absent, never, madvise, always };

// A call kind beyond the tracer's: the fault fell in no traced mapping.
inline constexpr int kOutside = -1;

struct FaultKey {
  std::uint32_t allocation_stack = 0;  // 0 with call kOutside
  int allocation_call = kOutside;      // CallKind of the origin, or kOutside
  std::uint32_t touch_stack = 0;
  int pid = 0;
  std::uint32_t program = 0;  // which program the pid ran: 0 the first, 1 after its first exec, ...
  bool huge = false;
  bool operator==(const FaultKey&) const = default;
};

// The columns of a FaultKey as the probe's fault records name them, in this order (docs/probe.md,
// "trace"); the front end reads them by these names (records.py's FAULT_KEY, held to this list by
// tests/python/unit/test_fault_key.py). `huge` is last: the records that leave it out drop it.
inline constexpr std::array<const char*, 6> kFaultKeyColumns = {"allocation_stack", "allocation_call", "touch_stack",
                                                                 "pid", "program", "huge"};

struct FaultKeyHash {
  std::size_t operator()(const FaultKey& key) const {
    std::uint64_t h = key.allocation_stack * 0x9E3779B97F4A7C15ULL;
    h ^= (static_cast<std::uint64_t>(key.touch_stack) << 20) ^ static_cast<std::uint64_t>(key.allocation_call + 7);
    h ^= (static_cast<std::uint64_t>(key.pid) << 32) ^ (static_cast<std::uint64_t>(key.program) << 8) ^ key.huge;
    return static_cast<std::size_t>(h * 0xBF58476D1CE4E5B9ULL);
  }
};

// What the freed mappings of one size, from one origin, cost.
struct SizeSummary {
  std::uint64_t freed = 0;
  std::uint64_t faults_base = 0, faults_thp = 0;
  std::uint64_t free_ns = 0, map_ns = 0;
};

struct OriginKey {
  std::uint32_t stack = 0;
  int call = 0;
  auto operator<=>(const OriginKey&) const = default;
};

struct OriginSummary {
  std::uint64_t made = 0, freed = 0;
  std::uint64_t bytes = 0, freed_bytes = 0;
  std::uint64_t map_ns = 0, free_ns = 0;
  bool huge_advised = false;
  // A mapping of a file or a device (a library the loader maps, a driver's memory that
  // cudaHostAlloc maps): huge pages cannot be asked for it.
  bool file_backed = false;
  // The stack of a madvise(MADV_NOHUGEPAGE) of the program's own on this origin's memory (0: none):
  // huge-page advice for it is undone by that call.
  std::uint32_t huge_refused_by = 0;
  std::map<std::uint64_t, SizeSummary> by_size;  // freed mappings by length; past kMaxSizes, 0 holds the rest
  // The largest mapping: its length, faults and whether one thread faulted it all.
  std::uint64_t largest_bytes = 0, largest_faults_base = 0, largest_faults_thp = 0;
  bool largest_one_thread = true;
  // Growth: a mapping freed while a larger one from the same origin, made after it, was live — a
  // buffer outgrown and copied (a std::vector's doubling). What the outgrown ones cost.
  SizeSummary outgrown;
  std::uint64_t grown_to_bytes = 0;  // the largest mapping that replaced an outgrown one
};

// Touching stacks sampled while the faults themselves are counted in the kernel: the samples,
// and the faults they stand for (the sum of their periods, an estimate).
struct TouchSamples {
  std::uint64_t samples = 0;
  std::uint64_t faults = 0;
};

// Fault time charged to a fault's key (huge always false: a region's page kind is decided later,
// and time is reported per site, not per kind): CPU samples taken in the fault handler, and,
// counting in the kernel, the faults timed there (RegionFaults). A region's timed faults are
// shared between the mappings in it by their faults there, so the shares are fractions.
struct FaultTime {
  std::uint64_t samples = 0;
  std::uint64_t zeroing = 0;  // of those, in page clearing
  double timed_faults = 0, timings_ended = 0, kernel_ns = 0, kernel_ns_squares = 0;
};

// The system calls that took faults without an exception (trace::CallFaults), per call stack and
// system call: how many, their faults, and their time from entry to return.
struct CallFaultsSummary {
  std::uint64_t calls = 0, faults = 0, call_ns = 0;
};

class Attribution : public trace::Sink {
 public:
  static constexpr std::size_t kMaxSizes = 256;
  // `huge_bytes`: the THP (PMD) size, the region a single fault of a huge page covers.
  explicit Attribution(ThpMode thp, std::uint64_t huge_bytes = 2ULL << 20) : thp_(thp), huge_bytes_(huge_bytes) {}

  // Stacks and processes pass straight through to it (stacks are interned by the unwinder
  // already), and so does each settle, once the records before it are replayed.
  trace::Sink* stacks = nullptr;

  void stack(std::uint32_t id, const std::vector<trace::Frame>& frames) override;
  void call(const trace::MappingCall& call) override;
  void fault(const trace::Fault& fault) override;
  void process(const trace::ProcessEvent& event) override;
  void cpu_sample(const trace::CpuSample& sample) override;
  void region_faults(const trace::RegionFaults& counts) override;
  // Charged to the live mappings in its range, in proportion to the bytes of each 2 MiB region
  // there (none: outside), touched by the call's stack; as it returns.
  void call_faults(const trace::CallFaults& faults) override;
  void same_stack(std::uint32_t alias, std::uint32_t stack) override { same_stacks_[alias] = stack; }

  // Every record with a time up to `until_ns` has been delivered: replay them.
  void settle(std::uint64_t until_ns) override;
  // The end: replay everything, and count the faults of the mappings still live.
  void finish();
  // A window's end in a long trace: count the faults of live mappings whose page kind is not yet
  // known, by what is known now (a region's first fault is counted once, whatever comes later),
  // so that a window holds the faults it saw, not only those of mappings that ended in it.
  void count_live();

  [[nodiscard]] const std::unordered_map<FaultKey, std::uint64_t, FaultKeyHash>& faults() const { return faults_; }
  [[nodiscard]] const std::map<OriginKey, OriginSummary>& origins() const { return origins_; }
  [[nodiscard]] const std::unordered_map<FaultKey, FaultTime, FaultKeyHash>& fault_time() const { return fault_time_; }
  // Empty unless faults were counted in the kernel (their keys' touching stacks are 0 then).
  [[nodiscard]] const std::unordered_map<FaultKey, TouchSamples, FaultKeyHash>& touch_samples() const {
    return touch_samples_;
  }
  [[nodiscard]] std::uint64_t cpu_samples() const { return cpu_samples_; }
  [[nodiscard]] std::uint64_t cpu_samples_unmatched() const { return cpu_samples_unmatched_; }
  // In the fault handler but in perf, recording the fault for the tracer: not the fault's time.
  [[nodiscard]] std::uint64_t cpu_samples_tracing() const { return cpu_samples_tracing_; }
  [[nodiscard]] std::uint64_t faults_seen() const { return faults_seen_; }  // counted, one by one, by region or by call
  [[nodiscard]] std::uint64_t faults_in_calls() const { return faults_in_calls_; }  // of those, by call
  [[nodiscard]] const std::map<std::pair<std::uint32_t, long>, CallFaultsSummary>& calls_faulting() const {
    return calls_faulting_;
  }
  [[nodiscard]] std::uint64_t touch_samples_seen() const { return touch_samples_seen_; }
  [[nodiscard]] std::uint64_t calls_seen() const { return calls_seen_; }
  // The most records held at once waiting for their moment to settle, and live mappings at once.
  [[nodiscard]] std::size_t most_pending() const { return most_pending_; }
  [[nodiscard]] std::size_t most_live() const { return most_live_; }

 private:
  struct Region {
    std::uint32_t faults = 0;
    std::uint32_t first_touch = 0;  // the first fault's touching stack
    int pid = 0;
    std::uint32_t program = 0;
    bool counted = false;  // its first fault is in the counts already (count_live)
  };
  struct TracedMapping {
    OriginKey origin;
    std::uint64_t length = 0;
    std::uint64_t live_bytes = 0;
    std::uint64_t map_ns = 0, free_ns = 0;
    bool anonymous = true, huge_advised = false, huge_refused = false;
    std::uint32_t huge_refused_by = 0;  // the MADV_NOHUGEPAGE call's stack
    std::unordered_map<std::uint64_t, Region> regions;  // by 2 MB region number
    std::uint64_t faults_base = 0, faults_thp = 0;
    int first_tid = 0;
    bool one_thread = true;
    bool freed = false;
    std::uint64_t made_ns = 0;  // its call's exit (0: it was there when the trace began)
  };
  struct Piece {
    std::uint64_t end;
    std::uint64_t mapping;
  };
  struct Space {
    std::map<std::uint64_t, Piece> pieces;  // by start; disjoint
    std::uint64_t brk_end = 0;              // 0: no brk seen yet
    // The heap grown since the last marker of the preload library (a brk(0) carrying the Python
    // stack of the call that grew it), newest last; a process without markers keeps the newest few.
    std::vector<std::uint64_t> unclaimed_heap;
  };
  static constexpr std::size_t kUnclaimedHeapKept = 64;

  void apply(const trace::MappingCall& call);
  void apply_to_space(const trace::MappingCall& call);
  static bool makes_its_range(const trace::CallFaults& call);
  void apply_brk(Space& space, const trace::MappingCall& call);
  // A marker: the heap grown since the last one was made by the marker's stack (its Python frames).
  void claim_heap(Space& space, const trace::MappingCall& marker);
  void charge(const trace::Fault& fault);
  void charge(const trace::CpuSample& sample);
  void charge(const trace::RegionFaults& counts);
  void charge(const trace::CallFaults& call);
  // `share` of a region's timed faults and their time, to `key`.
  void charge_time(const trace::RegionFaults& counts, const FaultKey& key, double share);
  // `count` faults in one region of `mapping`, keyed by `key` (whose huge is false); a region's
  // first single fault waits for its page kind (count_single_faults).
  void add_faults(TracedMapping& mapping, std::uint64_t region_number, const FaultKey& key, std::uint64_t count);
  // The live mapping piece at `address` of `pid`'s space, or nullptr.
  TracedMapping* mapping_at(int pid, std::uint64_t address);
  std::uint64_t make(int pid, std::uint64_t start, std::uint64_t length, const trace::MappingCall& call, bool anonymous);
  // Cut [start, end) out of the space; per mapping touched, the bytes removed. Only the pieces of
  // mappings made by `made_by_ns` (a removal cannot remove what was made after it began).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> cut(Space& space, std::uint64_t start, std::uint64_t end,
                                                           std::uint64_t made_by_ns = UINT64_MAX);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> overlaps(Space& space, std::uint64_t start, std::uint64_t end,
                                                                std::uint64_t made_by_ns = UINT64_MAX);
  void free_range(Space& space, std::uint64_t start, std::uint64_t length, const trace::MappingCall& call, bool whole);
  std::uint64_t block_at(Space& space, std::uint64_t start);  // the mapping a live piece starts at, or 0
  // A live piece of `id`, `bytes` long, is gone (freed, displaced, or its process exec'd); the
  // mapping ends when none is left, `freed` saying whether a free ended it.
  void release(std::uint64_t id, std::uint64_t bytes, bool freed);
  void retire(std::uint64_t id);
  void count_single_faults(TracedMapping& mapping);  // the regions with one fault, by the mapping's page kind
  std::uint32_t program_of(int pid, std::uint64_t time_ns) const;

  ThpMode thp_;
  std::uint64_t huge_bytes_;
  std::vector<trace::MappingCall> pending_calls_;  // in order of takes_effect_ns
  std::unordered_map<std::uint32_t, std::uint32_t> same_stacks_;  // same_stack(): alias -> stack
  std::vector<trace::Fault> pending_faults_;
  std::vector<trace::ProcessEvent> pending_forks_;  // forks and execs: they change address spaces
  std::vector<trace::CpuSample> pending_samples_;
  std::vector<trace::RegionFaults> pending_regions_;  // charged at their last fault's moment
  std::vector<trace::CallFaults> pending_call_faults_;  // charged as their call returned
  std::vector<trace::CallFaults> awaiting_mapping_;     // charged once the mapping their call made is applied
  static constexpr std::size_t kAwaitingMappingKept = 1024;
  std::map<std::pair<std::uint32_t, long>, CallFaultsSummary> calls_faulting_;
  std::unordered_map<FaultKey, TouchSamples, FaultKeyHash> touch_samples_;
  std::unordered_map<int, FaultKey> last_fault_;  // per thread
  std::unordered_map<FaultKey, FaultTime, FaultKeyHash> fault_time_;
  std::uint64_t cpu_samples_ = 0, cpu_samples_unmatched_ = 0, cpu_samples_tracing_ = 0;
  std::unordered_map<int, Space> spaces_;
  std::unordered_map<std::uint64_t, TracedMapping> live_;
  std::map<OriginKey, std::uint64_t> newest_;  // per origin, the mapping it made last
  std::uint64_t next_id_ = 1;
  std::unordered_map<int, std::vector<std::uint64_t>> programs_;  // pid -> when each program began
  std::unordered_map<FaultKey, std::uint64_t, FaultKeyHash> faults_;
  std::map<OriginKey, OriginSummary> origins_;
  std::uint64_t faults_seen_ = 0, touch_samples_seen_ = 0, calls_seen_ = 0, faults_in_calls_ = 0;
  std::size_t most_pending_ = 0, most_live_ = 0;
};

}  // namespace memcost::trace
