// The in-kernel fault counter: a BPF program (bpf/fault_counts.bpf.c, loaded with libbpf from a
// bpftool skeleton) counts the page faults of the traced processes per 2 MiB region and
// generation, and this reads the counts back. Nothing leaves the kernel per fault.
//
// Contract:
// - open() loads and attaches the programs, or says in one sentence why it cannot (not built
//   with BPF, not root, no BTF, a program the kernel refuses); the tracer then counts with perf.
//   It times one fault in `time_one_in`, chosen at random, in the kernel; with 0 the program that
//   ends a timing (on every page-count update of every process) is not attached at all.
// - Touching stacks: with `touch_samples_per_second`, the fault program sends about that many of
//   its faults a second on each CPU to the perf BPF-output event given for that CPU
//   (touch_output), as a memcost_touch_sample standing for the faults counted since the last.
// - trace(pid): that process is counted from now on; the processes it forks are added in the
//   kernel as they are made (a thread shares its process's counts).
// - sweep(): delivers what was counted since the last sweep as RegionFaults (only what is new
//   per region), and takes the regions of ended generations out of the kernel's map. What it
//   reads of the current generations: nothing (Sweep::ended), what is new in them (Sweep::window,
//   a window's end), or all of it, taken out too (Sweep::last, the end of the trace).
// - Faults a system call takes without an exception (get_user_pages: MAP_POPULATE,
//   MADV_POPULATE_*, mlock, a driver pinning memory), once count_in_calls() is called, are counted per call from the thread's own
//   fault counters (what rusage reads) and sent, one record per call that took any, to that CPU's
//   BPF-output event with the call's stack (memcost_call_faults); in_calls() is their total.
// - Python: a touching sample (or a call's record) of a thread that the preload library says has
//   released the GIL carries that release's number (python_release_slots()), and marks it sampled.
// - A fault the kernel's map had no room for is counted in uncounted(), never dropped silently.
// - Each CPU counts the run of faults it is taking in one region in a pending slot of its own, and
//   moves it into the regions map when a fault falls elsewhere or a mapping call intervenes;
//   sweep() first has every CPU move its slot out, so nothing counted is left behind.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "trace/tracer.hpp"

namespace memcost::trace {

enum class Sweep { ended, window, last };

// The in-kernel region map's entries for a machine of `physical_pages` 4 KiB pages (sysconf's
// count; 0 or less: unknown): twice its memory in 2 MiB regions, a power of two from 16,384 to
// 262,144 (32 to 512 GiB of regions). A sweep's read walks every bucket, however few are used.
[[nodiscard]] std::uint32_t region_map_entries(long physical_pages);

class FaultCounter {
 public:
  // nullptr with `why_not` set when the kernel side cannot run here.
  static std::unique_ptr<FaultCounter> open(std::uint32_t time_one_in, std::uint32_t touch_samples_per_second,
                                            std::string& why_not);
  ~FaultCounter();
  FaultCounter(const FaultCounter&) = delete;
  FaultCounter& operator=(const FaultCounter&) = delete;

  // False with errno set when the kernel's map refused it. `from_exec`: counted from its next
  // exec (a forked command waiting at the door), not from now.
  bool trace(int pid, bool from_exec);
  // Counts the faults system calls take without an exception, from now on (the programs on
  // raw_syscalls sys_enter and sys_exit note each call's fault counters); false with `why_not`.
  bool count_in_calls(std::string& why_not);
  // The perf BPF-output event (PERF_COUNT_SW_BPF_OUTPUT, on `cpu`, every process) the touching
  // samples of that CPU go to; false with errno set when the kernel's map refused it.
  bool touch_output(int cpu, int event_fd);
  // The BPF array of Python threads' releases of the GIL (memcost_python_release_slot), for the
  // traced processes to map; -1 when there is none. The counter owns the descriptor.
  [[nodiscard]] int python_release_slots() const;
  // No process is counted from now on (the window on a process attached to has closed).
  void stop_counting();
  // What was counted since the last sweep (see the contract for `what`).
  void sweep(Sweep what, std::vector<RegionFaults>& out);
  [[nodiscard]] std::uint64_t faults() const;     // every fault of a traced process the kernel saw (read so far)
  [[nodiscard]] std::uint64_t uncounted() const;  // of those, not counted: the region map was full
  [[nodiscard]] std::uint64_t generations() const;
  [[nodiscard]] std::uint64_t in_calls() const;  // faults taken inside system calls without an exception
  // Regions held between sweeps at most, and kernel records read (a measure of the reader's work).
  [[nodiscard]] std::size_t most_regions() const { return most_regions_; }

 private:
  struct Kernel;  // the skeleton
  explicit FaultCounter(std::unique_ptr<Kernel> kernel);
  [[nodiscard]] std::uint64_t total(unsigned which) const;
  // Each CPU's pending region (the run of faults it is counting) into the regions map.
  void move_pending_out();

  std::unique_ptr<Kernel> kernel_;
  // Per region of an open generation: what has been delivered of it already (its counts so far).
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>, RegionFaults> delivered_;
  std::size_t most_regions_ = 0;
  std::uint64_t faults_read_ = 0;  // the sum of what sweeps delivered
  std::uint64_t generations_seen_ = 0;  // generations() at the last sweep of ended ones
  std::uint64_t pending_retries_ = 0;   // moves run again: a fault program of that CPU was midway
};

// What a region's counts read from the kernel (`read`, cumulative) add to what was delivered of it
// (`delivered`, brought up to `read`): the new faults, the pages not delivered before, and the new
// fault time. False when nothing is new. (Pure; tested on its own.)
bool region_news(const RegionFaults& read, RegionFaults& delivered, RegionFaults& out);

}  // namespace memcost::trace
