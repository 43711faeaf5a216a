// `memcost-probe monitor`: streams what the front end's live monitor cannot read
// from /proc itself — the kernel's own count of the pages it zeroed as it handed
// them out — as one sample per interval, cumulative since the start, until
// --duration ends or the front end stops the probe.
#include <chrono>
#include <thread>

#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/experiment.hpp"

namespace memcost::probe {
namespace {

struct Settings {
  int interval_ms = 250;
  double duration_s = 0.0;  // 0: until stopped
};

Runner attach(CLI::App& command, std::shared_ptr<Settings> settings) {
  command.add_option("--interval-ms", settings->interval_ms, "milliseconds between samples")->check(CLI::Range(10, 3600000));
  command.add_option("--duration", settings->duration_s, "seconds to run (default: until stopped)")
      ->check(CLI::Range(0.0, 1e7));
  return [settings](Emitter& emitter) {
    os::ZeroingCounter counter;
    if (!counter.status().ok()) {
      throw ProbeError(exit_unsupported, "zeroing_count_unavailable",
                       "the kernel's count of zeroed pages cannot be read here (" + counter.status().message() +
                           "); it needs root or CAP_PERFMON and tracefs");
    }
    const auto start = measure::now_ns();
    const auto interval = std::chrono::milliseconds(settings->interval_ms);
    for (std::uint64_t sequence = 0;; ++sequence) {
      auto counts = counter.read();
      auto now = measure::now_ns();
      if (!counts) throw ProbeError(exit_failure, "zeroing_count_failed", "reading the zeroed-page counters failed");
      emitter.sample({{"part", "zeroing"}, {"sequence", sequence}},
                     {{"elapsed_ns", now - start},
                      {"zeroed_base_pages", counts->base_pages},
                      {"zeroed_larger_blocks", counts->larger_blocks},
                      {"method", os::ZeroingCounter::method()}});
      if (settings->duration_s > 0 && static_cast<double>(now - start) / 1e9 >= settings->duration_s) return;
      std::this_thread::sleep_for(interval);
    }
  };
}

}  // namespace

Experiment monitor_experiment() {
  return {"monitor", "The kernel's own count of pages it zeroed, streamed (for `memcost monitor`)",
          [](CLI::App& command) { return attach(command, std::make_shared<Settings>()); }};
}

}  // namespace memcost::probe
