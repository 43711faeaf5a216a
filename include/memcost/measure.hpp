// memcost measurement primitives: clocks, CPU accounting for this process and
// for the whole machine, fault counters, perf counters and the backing of a range.
//
// Everything here reads counters; nothing allocates inside a timed region.
// Take a snapshot before and after the region, outside it, and subtract.
// A counter the OS does not have is std::nullopt, never a zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace memcost::measure {

// Monotonic clock in nanoseconds (std::chrono::steady_clock).
[[nodiscard]] std::uint64_t now_ns();

// Keeps the compiler from dropping writes to memory that nothing reads before
// it is freed (as Google Benchmark's DoNotOptimize does): the writes are what is measured.
inline void keep_writes(const void* pointer) {
#if defined(__GNUC__) || defined(__clang__)
  asm volatile("" : : "g"(pointer) : "memory");
#else
  static_cast<void>(*static_cast<const volatile char*>(pointer));
#endif
}

// CPU time of the memory-management kernel threads (Linux), by family.
struct KernelThreadCpu {
  std::uint64_t kswapd_ns = 0;
  std::uint64_t khugepaged_ns = 0;
  std::uint64_t kcompactd_ns = 0;
  std::uint64_t kworker_ns = 0;
  [[nodiscard]] std::uint64_t total_ns() const { return kswapd_ns + khugepaged_ns + kcompactd_ns + kworker_ns; }
};
// The kernel's memory-management threads' CPU time now, by family (kswapd*, khugepaged,
// kcompactd*, kworker*: the work a program's memory makes the kernel do elsewhere); absent where
// the OS does not list them (Windows).
[[nodiscard]] std::optional<KernelThreadCpu> kernel_thread_cpu();

// All CPUs of the machine added together.
struct MachineCpu {
  std::uint64_t user_ns = 0;
  std::uint64_t system_ns = 0;
  std::uint64_t irq_ns = 0;
  std::uint64_t softirq_ns = 0;
  std::uint64_t steal_ns = 0;
  std::uint64_t idle_ns = 0;
  bool steal_available = false;
  // Time some CPU spent on anything but idling; steal is counted separately.
  [[nodiscard]] std::uint64_t busy_ns() const { return user_ns + system_ns + irq_ns + softirq_ns; }
};

struct Snapshot {
  std::uint64_t wall_ns = 0;
  std::uint64_t process_user_ns = 0;
  std::uint64_t process_system_ns = 0;
  std::uint64_t minor_faults = 0;
  std::uint64_t major_faults = 0;
  std::uint64_t rss_bytes = 0;
  bool faults_counted = true;  // false where the OS counts no faults (Wine): the counts are then 0, not measured
  std::optional<MachineCpu> machine;
  std::optional<KernelThreadCpu> kernel_threads;
  // CPU of every task outside this process: (thread id, run ns), sorted by id.
  std::optional<std::vector<std::pair<int, std::uint64_t>>> other_tasks;
};

struct SnapshotOptions {
  bool machine = true;
  // Scanning /proc for kernel threads or for every task costs about a
  // millisecond: only when asked.
  bool kernel_threads = false;
  bool other_tasks = false;
};
[[nodiscard]] Snapshot take_snapshot(SnapshotOptions options = {});

// What happened between two snapshots. Differences of counters that were
// absent in either snapshot stay absent.
struct Interval {
  std::uint64_t wall_ns = 0;
  std::uint64_t process_user_ns = 0;
  std::uint64_t process_system_ns = 0;
  std::uint64_t minor_faults = 0;
  std::uint64_t major_faults = 0;
  std::int64_t rss_change_bytes = 0;
  bool faults_counted = true;  // both snapshots had a fault count
  std::optional<MachineCpu> machine;
  std::optional<KernelThreadCpu> kernel_threads;
  // Run time other tasks gained: growth of those seen in both snapshots plus
  // all of those that appeared; tasks that exited in between take their
  // share with them.
  std::optional<std::uint64_t> other_tasks_ns;
  // The tasks that gained the most run time, largest first: (thread id, ns); at most three.
  std::vector<std::pair<int, std::uint64_t>> top_other_tasks;
  // CPU time spent outside this process: other tasks (kernel threads
  // included) plus steal (the hypervisor taking the CPU away).
  // Precise method, when both snapshots read other tasks: the scheduler's
  // nanosecond run times of every other task, plus steal. Fallback: busy
  // CPU of the whole machine (/proc/stat) minus this process's CPU, which is
  // only good to a 10 ms tick per CPU and can come out negative; it is
  // reported as measured and the caller decides how to treat it.
  [[nodiscard]] std::optional<std::int64_t> elsewhere_ns() const;
  [[nodiscard]] const char* elsewhere_method() const;  // "schedstat", "proc_stat" or "none"
};
[[nodiscard]] Interval between(const Snapshot& before, const Snapshot& after);

// Why each of PerfCounters' counters would be unavailable (empty string when it would work),
// decided without keeping any open (os::perf_openable): what the context line reports.
[[nodiscard]] std::map<std::string, std::string> perf_counter_availability();

// Linux perf_event software counters and tracepoints for this process and its threads.
class PerfCounters {
 public:
  // Names: "page_faults", "task_clock", "tlb:tlb_flush", "exceptions:page_fault_user".
  PerfCounters();
  ~PerfCounters();
  PerfCounters(const PerfCounters&) = delete;
  PerfCounters(PerfCounters&&) = delete;
  PerfCounters& operator=(const PerfCounters&) = delete;
  PerfCounters& operator=(PerfCounters&&) = delete;

  void start();
  void stop();
  // Counts since start(); an unavailable counter has no value.
  [[nodiscard]] std::map<std::string, std::optional<std::uint64_t>> read() const;
  // Why each unavailable counter is unavailable (empty string when it works).
  [[nodiscard]] std::map<std::string, std::string> availability() const;

 private:
  struct Counter {
    std::string name;
    int fd = -1;
    std::string unavailable_reason;
  };
  [[nodiscard]] std::map<std::string, std::optional<std::uint64_t>> read_raw() const;
  std::vector<Counter> counters_;
  std::map<std::string, std::optional<std::uint64_t>> base_;
};

// How [address, address + size) is backed, read from the OS (smaps on Linux,
// QueryWorkingSetEx on Windows) — the whole mappings that overlap the range.
struct Backing {
  std::uint64_t resident_bytes = 0;
  std::uint64_t anon_huge_bytes = 0;
  std::uint64_t hugetlb_bytes = 0;
  std::size_t kernel_page_bytes = 0;
  // Fraction of the resident bytes that sit on huge pages of either kind.
  [[nodiscard]] double huge_fraction() const;
};
[[nodiscard]] std::optional<Backing> backing_of(const void* address, std::size_t size_bytes);

// The memory memcost allows itself: a fraction (80 % by default) of what is
// available now, where "available" is MemAvailable lowered to the room left
// under a cgroup limit when one applies.
struct Budget {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;
  std::optional<std::uint64_t> cgroup_limit_bytes;
  std::optional<std::uint64_t> cgroup_usage_bytes;
  std::string cgroup_version;
  std::uint64_t usable_bytes = 0;  // min(available, cgroup limit - usage)
  double fraction = 0.8;
  std::uint64_t budget_bytes = 0;
};
inline constexpr double default_budget_fraction = 0.8;
[[nodiscard]] Budget memory_budget(double fraction = default_budget_fraction);

}  // namespace memcost::measure
