// The costs experiment's shootdowns part (parts.hpp).
#include "probe/experiments/costs/parts.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "memcost/measure.hpp"

namespace memcost::probe::costs {
namespace {

// Gaps between a spinning thread's clock reads longer than this are time its
// CPU spent elsewhere (an interrupt, a TLB shootdown); shorter ones are the loop.
constexpr std::uint64_t kGapThresholdNs = 500;
// Single-page unmaps that calibrate the cost of one shootdown on a receiving CPU.
constexpr int kCalibrationUnmaps = 400;

// Threads that spin on other CPUs and, while asked to, note every gap in their clock reads.
struct Spinners {
  std::atomic<bool> stop{false};
  std::atomic<bool> recording{false};
  std::atomic<unsigned> ready{0};
  std::mutex gaps_lock;
  std::vector<std::uint64_t> gaps_ns;
};

std::optional<std::uint64_t> total_of(const std::optional<std::vector<std::uint64_t>>& counts, std::size_t first_cpu = 0) {
  if (!counts) return std::nullopt;
  std::uint64_t total = 0;
  for (std::size_t cpu = first_cpu; cpu < counts->size(); ++cpu) total += (*counts)[cpu];
  return total;
}

json per_cpu_growth(const std::optional<std::vector<std::uint64_t>>& before,
                    const std::optional<std::vector<std::uint64_t>>& after) {
  if (!before || !after || before->size() != after->size()) return nullptr;
  json growth = json::array();
  for (std::size_t cpu = 0; cpu < before->size(); ++cpu) growth.push_back((*after)[cpu] - (*before)[cpu]);
  return growth;
}

// What one shootdown costs the CPU that receives it: the owner unmaps one
// written page at a time while the spinners run (each unmap interrupts them
// once); the median gap they saw is the cost of one. The median, because the
// hypervisor also takes whole milliseconds now and then, which a sum would keep.
json calibrate_one_shootdown(Spinners& spinners) {
  const std::size_t page = os::base_page_size();
  auto before = os::tlb_shootdowns_per_cpu();
  spinners.recording = true;
  for (int i = 0; i < kCalibrationUnmaps; ++i) {
    os::Mapping mapping = os::map({page, os::PageKind::base});
    if (!mapping.status.ok()) break;
    static_cast<volatile unsigned char*>(mapping.address)[0] = 1;
    (void)os::release(mapping.address, page);
  }
  spinners.recording = false;
  auto after = os::tlb_shootdowns_per_cpu();
  std::vector<std::uint64_t> gaps;
  {
    std::lock_guard lock(spinners.gaps_lock);
    gaps.swap(spinners.gaps_ns);
  }
  json result = {{"calibration_unmaps", kCalibrationUnmaps}, {"calibration_gaps", gaps.size()}};
  auto received_before = total_of(before, 1);
  auto received_after = total_of(after, 1);
  result["calibration_shootdowns"] = received_before && received_after ? json(*received_after - *received_before) : json(nullptr);
  if (!gaps.empty()) {
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
    result["remote_ns_per_shootdown"] = gaps[gaps.size() / 2];
  } else {
    result["remote_ns_per_shootdown"] = nullptr;
  }
  return result;
}

// One free of a written buffer: alone ("single": no other thread of the
// process exists), or while threads that wrote parts of it still run on the
// other CPUs ("threads"). Unmapping then has to flush those CPUs' TLBs: the
// kernel interrupts them and waits. Counted from /proc/interrupts; what the
// interrupts cost the other CPUs is their count × the calibrated cost of one.
json shootdown_cycle(bool with_threads, std::size_t size, unsigned cpus) {
  json metrics;
  std::thread owner([&] {
    (void)os::pin_current_thread(0);
    // Opened before the writer threads exist, so that they inherit the counters: a shootdown's
    // flush runs in whatever task the receiving CPU was running — here, a writer.
    measure::PerfCounters counters;
    Buffer buffer = allocate(Route::os, os::PageKind::base, size);
    const unsigned others = with_threads ? cpus - 1 : 0;
    const std::size_t share = (size / (others + 1) + 4095) & ~std::size_t{4095};
    Spinners spinners;
    spinners.gaps_ns.reserve(64 * kCalibrationUnmaps);
    std::vector<std::thread> workers;
    for (unsigned i = 1; i <= others; ++i) {
      workers.emplace_back([&, i] {
        (void)os::pin_current_thread(i);
        std::size_t begin = std::min(size, i * share);
        std::memset(buffer.data + begin, 1, std::min(size, begin + share) - begin);
        measure::keep_writes(buffer.data);
        spinners.ready.fetch_add(1);
        std::uint64_t last = measure::now_ns();
        while (!spinners.stop.load(std::memory_order_relaxed)) {
          std::uint64_t now = measure::now_ns();
          if (now - last > kGapThresholdNs && spinners.recording.load(std::memory_order_relaxed)) {
            std::lock_guard lock(spinners.gaps_lock);
            if (spinners.gaps_ns.size() < spinners.gaps_ns.capacity()) spinners.gaps_ns.push_back(now - last);
          }
          last = now;
        }
      });
    }
    std::memset(buffer.data, 1, std::min(size, share));
    measure::keep_writes(buffer.data);
    while (spinners.ready.load() < others) std::this_thread::yield();

    auto interrupts_before = os::tlb_shootdowns_per_cpu();
    counters.start();
    auto t0 = measure::now_ns();
    release(buffer);
    auto t1 = measure::now_ns();
    counters.stop();
    auto interrupts_after = os::tlb_shootdowns_per_cpu();
    auto flushes = counters.read().at(os::perf_event_name(os::PerfEvent::tlb_flush_tracepoint));
    json calibration = others ? calibrate_one_shootdown(spinners) : json::object();
    spinners.stop = true;
    for (auto& worker : workers) worker.join();

    auto before_total = total_of(interrupts_before);
    auto after_total = total_of(interrupts_after);
    metrics = {{"free_after_touch_ns", t1 - t0},
               {"tlb_shootdowns", before_total && after_total ? json(*after_total - *before_total) : json(nullptr)},
               {"tlb_shootdowns_per_cpu", per_cpu_growth(interrupts_before, interrupts_after)}};
    // tlb:tlb_flush in the process's own threads, every reason (local flushes too); where tracepoints are allowed.
    if (flushes) metrics["tlb_flush_events"] = *flushes;
    metrics.update(calibration);
  });
  owner.join();
  return metrics;
}

}  // namespace

void plan_shootdowns_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps) {
  const std::size_t size = settings.threads_size;
  const unsigned cpus = os::logical_cpu_count();
  for (const char* mode : {"single", "threads"}) {
    const bool with_threads = std::strcmp(mode, "threads") == 0;
    for (int rep = -settings.warmup; rep < reps; ++rep) {
      plan.push_back({std::string("shootdowns ") + mode, [=, &emitter] {
        json metrics = shootdown_cycle(with_threads, size, cpus);
        emitter.sample({{"part", "shootdowns"}, {"mode", mode}, {"threads", with_threads ? cpus : 1u},
                        {"size_bytes", size}, {"rep", rep}, {"warmup", rep < 0}},
                       metrics);
      }});
    }
  }
}

}  // namespace memcost::probe::costs
