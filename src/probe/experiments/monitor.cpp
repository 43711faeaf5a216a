// `memcost-probe monitor`: the samples behind `memcost monitor`, streamed. Every
// --interval-ms one `sample` with the machine's cumulative counters — /proc/vmstat,
// CPU time by kind, the memory-management kernel threads, TLB shootdowns, each watched process —
// its levels (hugetlb pools, THP mode)
// and, where the kernel lets the probe count them, the pages it zeroed as it handed
// them out. The front end turns consecutive samples into rates; the probe only reads.
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/experiment.hpp"

namespace memcost::probe {
namespace {

struct Settings {
  int interval_ms = 1000;
  double duration_s = 0.0;  // 0: until stopped
  std::vector<int> pids;    // empty: every process
  bool processes = true;
};

json machine_cpu() {
  auto cpu = os::machine_times();
  if (!cpu) return nullptr;
  return {{"user_ns", cpu->user_ns},     {"system_ns", cpu->system_ns}, {"irq_ns", cpu->irq_ns},
          {"softirq_ns", cpu->softirq_ns}, {"idle_ns", cpu->idle_ns},
          {"steal_ns", cpu->steal_available ? json(cpu->steal_ns) : json(nullptr)}};
}

json kernel_threads() {
  auto threads = measure::kernel_thread_cpu();
  if (!threads) return nullptr;
  return {{"kswapd", threads->kswapd_ns}, {"khugepaged", threads->khugepaged_ns},
          {"kcompactd", threads->kcompactd_ns}, {"kworker", threads->kworker_ns}};
}

Runner attach(CLI::App& command, std::shared_ptr<Settings> settings) {
  command.add_option("--interval-ms", settings->interval_ms, "milliseconds between samples")->check(CLI::Range(10, 3600000));
  command.add_option("--duration", settings->duration_s, "seconds to run (default: until stopped)")
      ->check(CLI::Range(0.0, 1e7));
  command.add_option("--pid", settings->pids, "only these processes (repeatable; default every process)")
      ->check(CLI::Range(1, 1 << 30));
  command.add_flag("!--no-processes", settings->processes, "no per-process counters");
  return [settings](Emitter& emitter) {
    const Settings& s = *settings;
    os::ZeroingCounter zeroing;
    if (!zeroing.status().ok()) {
      emitter.warning("zeroing_count_unavailable",
                      "the kernel's count of zeroed pages cannot be read here (" + zeroing.status().message() + "); " +
                          os::ZeroingCounter::requirement());
    }
    if (!os::vmstat()) {
      throw ProbeError(exit_unsupported, "not_supported_here",
                       std::string("this system's memory counters cannot be read (") + os::memory_counters_source() +
                           "): there is nothing to monitor here");
    }
    const auto start = measure::now_ns();
    for (std::uint64_t sequence = 0;; ++sequence) {
      json metrics = {{"vmstat", os::vmstat().value_or(std::map<std::string, std::uint64_t>{})},
                      {"cpu", machine_cpu()},
                      {"kernel_threads_ns", kernel_threads()}};
      if (auto kernel = os::kernel_process_cpu_ns()) metrics["kernel_process_ns"] = *kernel;  // Windows: System
      if (s.processes) {
        auto scan = os::scan_processes(s.pids);
        json processes = json::array();
        if (scan) {
          for (const auto& p : scan->processes) {
            processes.push_back({{"pid", p.pid}, {"name", p.name}, {"minor_faults", p.minor_faults},
                                 {"major_faults", p.major_faults}, {"user_ns", p.user_ns}, {"system_ns", p.system_ns},
                                 {"rss_bytes", p.rss_bytes}});
          }
        }
        metrics["processes"] = processes;
        metrics["unreadable_processes"] = scan ? scan->unreadable : 0;
      }
      // Levels, read each time as someone may change them while it runs.
      json pools = json::array();
      for (const auto& pool : os::hugetlb_pools()) {
        pools.push_back({{"page_size_bytes", pool.page_size_bytes}, {"total_pages", pool.total_pages},
                         {"free_pages", pool.free_pages}, {"reserved_pages", pool.reserved_pages},
                         {"surplus_pages", pool.surplus_pages}});
      }
      metrics["hugetlb"] = std::move(pools);
      if (const os::ThpSettings thp = os::thp_settings(); thp.present) {
        metrics["thp"] = {{"enabled", thp.enabled}, {"defrag", thp.defrag}};
      }
      if (auto tlb = os::tlb_shootdowns_per_cpu()) {
        std::uint64_t total = 0;
        for (std::uint64_t count : *tlb) total += count;
        metrics["tlb_shootdowns"] = total;
      }
      if (auto reported = os::host_reported_bytes()) metrics["host_reported_bytes"] = *reported;
      if (auto zeroed = zeroing.read()) {
        metrics["zeroed_base_pages"] = zeroed->base_pages;
        metrics["zeroed_larger_blocks"] = zeroed->larger_blocks;
        metrics["zeroing_method"] = os::ZeroingCounter::method();
      }
      const auto now = measure::now_ns();
      metrics["elapsed_ns"] = now - start;
      emitter.sample({{"part", "monitor"}, {"sequence", sequence}}, metrics);
      if (s.duration_s > 0 && static_cast<double>(now - start) / 1e9 >= s.duration_s) return;
      // Sample on a fixed grid, so that reading /proc does not stretch the intervals.
      const auto next = start + (sequence + 1) * static_cast<std::uint64_t>(s.interval_ms) * 1'000'000ULL;
      const auto after = measure::now_ns();
      if (next > after) std::this_thread::sleep_for(std::chrono::nanoseconds(next - after));
    }
  };
}

}  // namespace

Experiment monitor_experiment() {
  return {"monitor", "Stream the machine's memory counters for `memcost monitor` (Linux: /proc/vmstat; Windows: PDH)",
          [](CLI::App& command) { return attach(command, std::make_shared<Settings>()); }};
}

}  // namespace memcost::probe
