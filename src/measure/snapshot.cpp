// Snapshots of this process's and the machine's CPU and fault counters.
#include <algorithm>
#include <chrono>

#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::measure {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::optional<KernelThreadCpu> kernel_thread_cpu() {
  auto family = [](std::string_view name, KernelThreadCpu& times) -> std::uint64_t* {
    if (name.rfind("kswapd", 0) == 0) return &times.kswapd_ns;
    if (name == "khugepaged") return &times.khugepaged_ns;
    if (name.rfind("kcompactd", 0) == 0) return &times.kcompactd_ns;
    if (name.rfind("kworker", 0) == 0) return &times.kworker_ns;
    return nullptr;
  };
  KernelThreadCpu times;
  auto threads = os::processes_cpu([&](std::string_view name) { return family(name, times) != nullptr; });
  if (!threads) return std::nullopt;
  for (const os::NamedCpu& thread : *threads) *family(thread.name, times) += thread.cpu_ns;
  return times;
}

Snapshot take_snapshot(SnapshotOptions options) {
  Snapshot snapshot;
  // Slow readers first, the clock last: the interval then starts as late and
  // ends (in the "after" snapshot) as early as possible around the region.
  if (options.kernel_threads) {
    snapshot.kernel_threads = kernel_thread_cpu();
  }
  if (options.other_tasks) {
    if (auto tasks = os::other_tasks_cpu()) {
      snapshot.other_tasks.emplace();
      snapshot.other_tasks->reserve(tasks->size());
      for (const auto& task : *tasks) snapshot.other_tasks->emplace_back(task.tid, task.run_ns);
    }
  }
  if (options.machine) {
    if (auto machine = os::machine_times()) {
      snapshot.machine = MachineCpu{machine->user_ns,  machine->system_ns, machine->irq_ns,         machine->softirq_ns,
                                    machine->steal_ns, machine->idle_ns,   machine->steal_available};
    }
  }
  os::ProcessTimes process = os::process_times();
  snapshot.process_user_ns = process.user_ns;
  snapshot.process_system_ns = process.system_ns;
  snapshot.minor_faults = process.minor_faults;
  snapshot.major_faults = process.major_faults;
  snapshot.rss_bytes = process.rss_bytes;
  snapshot.faults_counted = process.faults_counted;
  snapshot.wall_ns = now_ns();
  return snapshot;
}

namespace {
// Counters are monotonic; a decrease can only be a reading taken across a
// counter reset, which is reported as no change rather than a huge number.
std::uint64_t grew(std::uint64_t before, std::uint64_t after) { return after >= before ? after - before : 0; }
constexpr std::size_t kTopTasks = 3;
}  // namespace

Interval between(const Snapshot& before, const Snapshot& after) {
  Interval interval;
  interval.wall_ns = grew(before.wall_ns, after.wall_ns);
  interval.process_user_ns = grew(before.process_user_ns, after.process_user_ns);
  interval.process_system_ns = grew(before.process_system_ns, after.process_system_ns);
  interval.minor_faults = grew(before.minor_faults, after.minor_faults);
  interval.major_faults = grew(before.major_faults, after.major_faults);
  interval.faults_counted = before.faults_counted && after.faults_counted;
  interval.rss_change_bytes = static_cast<std::int64_t>(after.rss_bytes) - static_cast<std::int64_t>(before.rss_bytes);
  if (before.machine && after.machine) {
    const MachineCpu& a = *before.machine;
    const MachineCpu& b = *after.machine;
    interval.machine = MachineCpu{grew(a.user_ns, b.user_ns),       grew(a.system_ns, b.system_ns),
                                  grew(a.irq_ns, b.irq_ns),         grew(a.softirq_ns, b.softirq_ns),
                                  grew(a.steal_ns, b.steal_ns),     grew(a.idle_ns, b.idle_ns),
                                  a.steal_available && b.steal_available};
  }
  if (before.kernel_threads && after.kernel_threads) {
    const KernelThreadCpu& a = *before.kernel_threads;
    const KernelThreadCpu& b = *after.kernel_threads;
    interval.kernel_threads = KernelThreadCpu{grew(a.kswapd_ns, b.kswapd_ns), grew(a.khugepaged_ns, b.khugepaged_ns),
                                              grew(a.kcompactd_ns, b.kcompactd_ns), grew(a.kworker_ns, b.kworker_ns)};
  }
  if (before.other_tasks && after.other_tasks) {
    // Both lists are sorted by thread id: walk them together.
    std::uint64_t gained = 0;
    auto& top = interval.top_other_tasks;
    auto old_task = before.other_tasks->begin();
    for (const auto& [tid, run_ns] : *after.other_tasks) {
      while (old_task != before.other_tasks->end() && old_task->first < tid) ++old_task;
      bool seen = old_task != before.other_tasks->end() && old_task->first == tid && old_task->second <= run_ns;
      std::uint64_t task_gain = seen ? run_ns - old_task->second : run_ns;  // a new task ran only inside the window
      gained += task_gain;
      if (task_gain == 0) continue;
      if (top.size() < kTopTasks || task_gain > top.back().second) {
        if (top.size() == kTopTasks) top.pop_back();
        top.insert(std::upper_bound(top.begin(), top.end(), task_gain,
                                    [](std::uint64_t gain, const auto& entry) { return gain > entry.second; }),
                   {tid, task_gain});
      }
    }
    interval.other_tasks_ns = gained;
  }
  return interval;
}

const char* Interval::elsewhere_method() const {
  if (other_tasks_ns) return os::other_tasks_method();
  return machine ? os::machine_times_method() : "none";
}

std::optional<std::int64_t> Interval::elsewhere_ns() const {
  if (other_tasks_ns) return static_cast<std::int64_t>(*other_tasks_ns + (machine ? machine->steal_ns : 0));
  if (!machine) return std::nullopt;
  return static_cast<std::int64_t>(machine->busy_ns() + machine->steal_ns) -
         static_cast<std::int64_t>(process_user_ns + process_system_ns);
}

}  // namespace memcost::measure
