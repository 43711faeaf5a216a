// `memcost-probe costs`: what a large allocation costs, phase by phase, per page
// kind and allocation route, including the CPU time charged outside the process.
//
// Each repetition of a case (page kind × route × size):
//   1. an untouched alloc + free pair, timed call by call (what a naive timer sees);
//   2. a fresh allocation, a first write over all of it (faults + zeroing +
//      the write), a second write (the write alone), the free of the touched
//      buffer, then a settle window; the whole machine's CPU time is read
//      around 2. so that work done elsewhere can be charged to it.
// Also: reallocating vs reusing a buffer per frame, and first touch with 1..N threads.
// Raw numbers only; medians and per-MB figures are computed by `memcost costs`.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/capabilities.hpp"
#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe {
namespace {

enum class Route { os, malloc, new_array };
const char* route_name(Route route) {
  switch (route) {
    case Route::os: return "os";
    case Route::malloc: return "malloc";
    case Route::new_array: return "new";
  }
  return "?";
}

struct Buffer {
  unsigned char* data = nullptr;
  std::size_t size_bytes = 0;
  Route route = Route::os;
};

[[noreturn]] void out_of_memory(std::size_t size) {
  throw ProbeError(exit_not_enough_memory, "out_of_memory",
                   "allocating " + human_size(size) + " failed; ask for smaller --sizes or free memory");
}

// The allocation itself, nothing else: this is what the alloc timer covers.
Buffer allocate(Route route, os::PageKind kind, std::size_t size) {
  Buffer buffer{nullptr, size, route};
  switch (route) {
    case Route::os: {
      os::Mapping mapping = os::map({size, kind});
      if (!mapping.status.ok()) {
        throw ProbeError(exit_unsupported, "map_failed",
                         std::string(os::page_kind_name(kind)) + " mapping of " + human_size(size) + " failed: " +
                             mapping.status.message());
      }
      buffer.data = static_cast<unsigned char*>(mapping.address);
      break;
    }
    case Route::malloc: buffer.data = static_cast<unsigned char*>(std::malloc(size)); break;
    case Route::new_array: buffer.data = new (std::nothrow) unsigned char[size]; break;
  }
  if (!buffer.data) out_of_memory(size);
  return buffer;
}

// malloc and new[] know nothing of page kinds: the kind's advice is applied
// to the page-aligned inside of the block they returned, before first touch.
void apply_page_kind(const Buffer& buffer, os::PageKind kind) {
  if (buffer.route == Route::os) return;
  const std::uintptr_t page = os::base_page_size();
  auto begin = (reinterpret_cast<std::uintptr_t>(buffer.data) + page - 1) & ~(page - 1);
  auto end = (reinterpret_cast<std::uintptr_t>(buffer.data) + buffer.size_bytes) & ~(page - 1);
  if (end > begin) (void)os::advise(reinterpret_cast<void*>(begin), end - begin, kind);
}

void release(const Buffer& buffer) {
  switch (buffer.route) {
    case Route::os: (void)os::release(buffer.data, buffer.size_bytes); break;
    case Route::malloc: std::free(buffer.data); break;
    case Route::new_array: delete[] buffer.data; break;
  }
}

void write_all(const Buffer& buffer, int value) {
  std::memset(buffer.data, value, buffer.size_bytes);
  measure::keep_writes(buffer.data);
}

void sleep_ms(int milliseconds) { std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds)); }

// CPU time the rest of the machine spends per nanosecond while the probe
// sleeps, split as the windows are: other tasks (schedstat, nanoseconds) and
// steal (/proc/stat ticks). Each is the median of five windows, so that one
// burst of background work does not become the baseline of a whole case.
struct IdleRates {
  double elsewhere = 0.0;  // all of it, by the interval's own method
  double tasks = 0.0;
  double steal = 0.0;
};

IdleRates idle_elsewhere_rates(int total_ms) {
  std::vector<double> all, tasks, steal;
  for (int window = 0; window < 5; ++window) {
    auto before = measure::take_snapshot({.machine = true, .kernel_threads = false, .other_tasks = true});
    sleep_ms(std::max(total_ms / 5, 1));
    auto interval = measure::between(before, measure::take_snapshot({.machine = true, .kernel_threads = false, .other_tasks = true}));
    auto elsewhere = interval.elsewhere_ns();
    if (!elsewhere || interval.wall_ns == 0) return {};
    auto wall = static_cast<double>(interval.wall_ns);
    all.push_back(static_cast<double>(std::max<std::int64_t>(*elsewhere, 0)) / wall);
    tasks.push_back(static_cast<double>(interval.other_tasks_ns.value_or(0)) / wall);
    steal.push_back(interval.machine ? static_cast<double>(interval.machine->steal_ns) / wall : 0.0);
  }
  auto median = [](std::vector<double>& values) {
    std::nth_element(values.begin(), values.begin() + 2, values.end());
    return values[2];
  };
  return {median(all), median(tasks), median(steal)};
}

// The tasks that took the most CPU time in a window, by name: who "elsewhere" was.
json top_tasks(const measure::Interval& window) {
  json tasks = json::array();
  for (const auto& [tid, run_ns] : window.top_other_tasks) {
    tasks.push_back({{"name", os::task_name(tid).value_or("(exited)")}, {"ns", run_ns}});
  }
  return tasks;
}

constexpr std::size_t MiB = std::size_t{1} << 20;

// Every flag, typed: CLI11 parses, checks and converts; the runner handles no strings.
struct Settings {
  std::vector<std::size_t> sizes = {8 * MiB, 32 * MiB, 128 * MiB, 1024 * MiB};
  std::vector<os::PageKind> pages = {os::PageKind::base, os::PageKind::thp, os::PageKind::huge_2mb, os::PageKind::huge_1gb};
  std::vector<Route> routes = {Route::os, Route::malloc, Route::new_array};
  std::vector<std::string> parts = {"rows", "reuse", "threads", "idle", "shootdowns"};
  std::string budget;
  int reps = 9;
  int warmup = 2;
  int settle_ms = 20;
  int baseline_ms = 250;
  int frames = 200;
  std::size_t frame_size = 8 * MiB;
  std::size_t threads_size = 256 * MiB;
  std::string order = "blocks";
  std::uint64_t order_seed = probe::fresh_seed();  // --order rounds: each round's order of the cases
  std::size_t idle_size = 256 * MiB;
  double idle_seconds = 4.0;
  int idle_reps = 3;
  bool sizes_given = false;
};

// The time charged elsewhere over a cycle's window, raw and less the idle baseline, with its parts.
json elsewhere_metrics(const measure::Interval& window, const IdleRates& idle) {
  json metrics;
  auto elsewhere_raw = window.elsewhere_ns();
  const auto wall = static_cast<double>(window.wall_ns);
  if (!elsewhere_raw) {
    metrics["elsewhere_ns"] = nullptr;
    return metrics;
  }
  const double baseline = idle.elsewhere * wall;
  const double net = static_cast<double>(*elsewhere_raw) - baseline;
  metrics["elsewhere_raw_ns"] = *elsewhere_raw;
  metrics["elsewhere_method"] = window.elsewhere_method();
  metrics["elsewhere_baseline_ns"] = baseline;
  // Tick-granular machine counters can undershoot the process's own CPU time.
  metrics["elsewhere_ns"] = std::max(net, 0.0);
  metrics["elsewhere_clamped"] = net < 0.0;
  // The parts apart, raw and with their own idle baselines: schedstat is
  // nanosecond-exact per window, steal comes in 10 ms ticks and is only
  // meaningful summed over many windows.
  if (window.other_tasks_ns) {
    metrics["elsewhere_tasks_ns"] = *window.other_tasks_ns;
    metrics["elsewhere_tasks_baseline_ns"] = idle.tasks * wall;
    metrics["elsewhere_top_tasks"] = top_tasks(window);
  }
  if (window.machine) {
    metrics["elsewhere_steal_ns"] = window.machine->steal_ns;
    metrics["elsewhere_steal_baseline_ns"] = idle.steal * wall;
  }
  return metrics;
}

// What backed the buffer while it was written, read back from the kernel.
json backing_metrics(const std::optional<measure::Backing>& backing) {
  if (!backing) return {{"huge_fraction", nullptr}};
  return {{"resident_bytes", backing->resident_bytes},     {"anon_huge_bytes", backing->anon_huge_bytes},
          {"hugetlb_bytes", backing->hugetlb_bytes},       {"kernel_page_bytes", backing->kernel_page_bytes},
          {"huge_fraction", backing->huge_fraction()}};
}

json cycle_metrics(Route route, os::PageKind kind, std::size_t size, const Settings& settings, const IdleRates& idle) {
  // 1. The untouched pair.
  auto t0 = measure::now_ns();
  Buffer untouched = allocate(route, kind, size);
  auto t1 = measure::now_ns();
  release(untouched);
  auto t2 = measure::now_ns();

  // 2. The touched cycle, inside a window where the whole machine is watched.
  auto window_start = measure::take_snapshot({.machine = true, .kernel_threads = true, .other_tasks = true});
  auto t3 = measure::now_ns();
  Buffer buffer = allocate(route, kind, size);
  auto t4 = measure::now_ns();
  apply_page_kind(buffer, kind);
  auto before_first = measure::take_snapshot({.machine = false});
  auto t5 = measure::now_ns();
  write_all(buffer, 1);
  auto t6 = measure::now_ns();
  auto first = measure::between(before_first, measure::take_snapshot({.machine = false}));
  auto t7 = measure::now_ns();
  write_all(buffer, 2);
  auto t8 = measure::now_ns();
  auto backing = measure::backing_of(buffer.data, size);
  auto t9 = measure::now_ns();
  release(buffer);
  auto t10 = measure::now_ns();
  sleep_ms(settings.settle_ms);
  auto window = measure::between(window_start, measure::take_snapshot({.machine = true, .kernel_threads = true, .other_tasks = true}));

  json metrics = {
      {"alloc_ns", t1 - t0},
      {"free_ns", t2 - t1},
      {"touched_alloc_ns", t4 - t3},
      {"first_touch_ns", t6 - t5},
      {"second_touch_ns", t8 - t7},
      {"free_after_touch_ns", t10 - t9},
      {"first_touch_minor_faults", fault_count(first.faults_counted, first.minor_faults)},
      {"first_touch_major_faults", fault_count(first.faults_counted, first.major_faults)},
      {"first_touch_system_ns", first.process_system_ns},
      {"first_touch_user_ns", first.process_user_ns},
      {"window_ns", window.wall_ns},
      {"process_cpu_ns", window.process_user_ns + window.process_system_ns},
  };
  if (window.machine) {
    metrics["machine_busy_ns"] = window.machine->busy_ns();
    metrics["machine_steal_ns"] = window.machine->steal_ns;
  }
  metrics.update(elsewhere_metrics(window, idle));
  metrics["kernel_threads_ns"] = window.kernel_threads ? json(window.kernel_threads->total_ns()) : json(nullptr);
  metrics.update(backing_metrics(backing));
  return metrics;
}

std::string size_list(const std::vector<std::size_t>& sizes) {
  std::string text;
  for (std::size_t size : sizes) text += (text.empty() ? "" : ", ") + human_size(size);
  return text;
}

// The sizes a page kind can be measured at here; one warning for the rest.
std::vector<std::size_t> usable_sizes(const os::Capabilities& offered, os::PageKind kind,
                                      const std::vector<std::size_t>& sizes, Emitter& emitter) {
  const std::string name = os::page_kind_name(kind);
  const bool hugetlb = kind == os::PageKind::huge_2mb || kind == os::PageKind::huge_1gb;
  const std::size_t page = os::page_kind_bytes(kind);
  const std::string flag = kind == os::PageKind::huge_2mb ? "2M" : "1G";
  std::vector<std::size_t> usable, unaligned, too_big;
  std::string why_not;
  for (std::size_t size : sizes) {
    os::Verdict verdict = os::page_kind_verdict(offered, kind, size);
    if (hugetlb && size % page != 0) unaligned.push_back(size);
    else if (verdict.usable) usable.push_back(size);
    else {
      too_big.push_back(size);
      why_not = verdict.why_not;
    }
  }
  if (!unaligned.empty()) {
    emitter.warning("page_kind_unavailable", name + " rows need sizes that are multiples of " + human_size(page) + "; skipped " +
                                                 size_list(unaligned));
  }
  if (too_big.empty()) return usable;
  if (!hugetlb || !os::hugetlb_pool(offered, page)) {
    std::string hint = kind == os::PageKind::thp && offered.thp.present
                           ? "; as root, `echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` to measure it"
                           : "";
    emitter.warning("page_kind_unavailable", name + " rows skipped: " + why_not + hint);
    return usable;
  }
  std::size_t largest = *std::max_element(too_big.begin(), too_big.end());
  emitter.warning("hugetlb_pool_too_small",
                  name + " pool has " + std::to_string(os::hugetlb_pages_available(*os::hugetlb_pool(offered, page))) +
                      " free pages, too few for " + size_list(too_big) + ": run `memcost hugepages reserve " +
                      flag_size(largest) + " --size " + flag + "` as root");
  return usable;
}

struct Touch {
  std::uint64_t first_ns = 0;
  std::uint64_t second_ns = 0;
  json faults;
  std::uint64_t system_ns = 0;
};

Touch map_touch_release(os::PageKind kind, std::size_t size) {
  Buffer buffer = allocate(Route::os, kind, size);
  auto before = measure::take_snapshot({.machine = false});
  auto t0 = measure::now_ns();
  write_all(buffer, 1);
  auto t1 = measure::now_ns();
  auto first = measure::between(before, measure::take_snapshot({.machine = false}));
  auto t2 = measure::now_ns();
  write_all(buffer, 2);
  auto t3 = measure::now_ns();
  release(buffer);
  return {t1 - t0, t3 - t2, fault_count(first.faults_counted, first.minor_faults), first.process_system_ns};
}

// Memory reused at once against memory that sat free for a while. On a VM
// that hands free memory back to the host (virtio-balloon free page
// reporting), the second kind faults in the host as well as in the guest.
void plan_idle_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, os::PageKind kind) {
  const std::size_t size = settings.idle_size;
  for (int rep = 0; rep < settings.idle_reps; ++rep) {
    plan.push_back({std::string("idle ") + os::page_kind_name(kind), [=, &emitter, &settings] {
    (void)map_touch_release(kind, size);  // makes the next mapping reuse just-freed memory
    Touch hot = map_touch_release(kind, size);
    std::this_thread::sleep_for(std::chrono::duration<double>(settings.idle_seconds));
    Touch cold = map_touch_release(kind, size);
    emitter.sample({{"part", "idle"}, {"page", os::page_kind_name(kind)}, {"size_bytes", size}, {"rep", rep},
                    {"idle_seconds", settings.idle_seconds}},
                   {{"hot_first_touch_ns", hot.first_ns}, {"hot_second_touch_ns", hot.second_ns},
                    {"hot_faults", hot.faults}, {"hot_system_ns", hot.system_ns},
                    {"cold_first_touch_ns", cold.first_ns}, {"cold_second_touch_ns", cold.second_ns},
                    {"cold_faults", cold.faults}, {"cold_system_ns", cold.system_ns}});
    }});
  }
}

void plan_threads_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps) {
  const std::size_t size = settings.threads_size;
  unsigned cpus = os::logical_cpu_count();
  std::vector<unsigned> counts;
  for (unsigned n = 1; n < cpus; n *= 2) counts.push_back(n);
  counts.push_back(cpus);
  for (unsigned threads : counts) {
    for (int rep = -settings.warmup; rep < reps; ++rep) {
      plan.push_back({"threads " + std::to_string(threads), [=, &emitter] {
      Buffer buffer = allocate(Route::os, os::PageKind::base, size);
      std::barrier sync(static_cast<std::ptrdiff_t>(threads) + 1);
      std::vector<std::thread> workers;
      std::size_t chunk = (size / threads + 4095) & ~std::size_t{4095};
      for (unsigned i = 0; i < threads; ++i) {
        workers.emplace_back([&, i] {
          std::size_t begin = std::min(size, i * chunk);
          std::size_t length = std::min(size, begin + chunk) - begin;
          for (int value : {1, 2}) {
            sync.arrive_and_wait();  // start
            std::memset(buffer.data + begin, value, length);
            measure::keep_writes(buffer.data);
            sync.arrive_and_wait();  // done
          }
        });
      }
      std::uint64_t elapsed[2] = {};
      auto before = measure::take_snapshot({.machine = false});
      measure::Interval first_faults;
      for (int pass = 0; pass < 2; ++pass) {
        auto start = measure::now_ns();
        sync.arrive_and_wait();
        sync.arrive_and_wait();
        elapsed[pass] = measure::now_ns() - start;
        if (pass == 0) first_faults = measure::between(before, measure::take_snapshot({.machine = false}));
      }
      for (auto& worker : workers) worker.join();
      release(buffer);
      emitter.sample({{"part", "threads"}, {"threads", threads}, {"size_bytes", size}, {"rep", rep}, {"warmup", rep < 0}},
                     {{"first_touch_ns", elapsed[0]},
                      {"second_touch_ns", elapsed[1]},
                      {"first_touch_minor_faults", fault_count(first_faults.faults_counted, first_faults.minor_faults)}});
      }});
    }
  }
}

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

// A frame's buffer made by make_big_array from a pool (base pages, like the other routes), and
// given back to it at the end of the frame: the reuse a program gets without keeping the buffer.
void pool_frames(const Settings& settings, std::size_t frame_size, json& frame_ns, json& frame_faults) {
  array_pool pool(2 * frame_size);
  for (int frame = 0; frame < settings.frames; ++frame) {
    auto before = measure::take_snapshot({.machine = false});
    auto frame_start = measure::now_ns();
    {
      auto buffer = make_big_array<unsigned char>(frame_size, uninitialized, {.pages = pages::base, .threads = 1, .pool = &pool});
      std::memset(buffer.data(), frame & 0xff, frame_size);
      measure::keep_writes(buffer.data());
    }
    frame_ns.push_back(measure::now_ns() - frame_start);
    auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
    frame_faults.push_back(fault_count(interval.faults_counted, interval.minor_faults));
  }
}

void plan_reuse_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps) {
  const std::size_t frame_size = settings.frame_size;
  // Reallocating through an array_pool: the buffer comes back faulted in every frame after the first.
  for (int rep = 0; rep < reps; ++rep) {
    plan.push_back({"reuse pool reallocate", [=, &emitter, &settings] {
      json frame_ns = json::array(), frame_faults = json::array();
      auto start = measure::now_ns();
      pool_frames(settings, frame_size, frame_ns, frame_faults);
      auto total = measure::now_ns() - start;
      emitter.sample({{"part", "reuse"}, {"route", "pool"}, {"mode", "reallocate"}, {"frame_bytes", frame_size}, {"rep", rep}},
                     {{"frames", settings.frames}, {"total_ns", total}, {"frame_ns", frame_ns}, {"frame_minor_faults", frame_faults}});
    }});
  }
  for (Route route : {Route::malloc, Route::os}) {
    for (int rep = 0; rep < reps; ++rep) {
      for (const char* mode : {"reallocate", "reuse"}) {
        plan.push_back({std::string("reuse ") + route_name(route) + " " + mode, [=, &emitter, &settings] {
        bool reuse = std::strcmp(mode, "reuse") == 0;
        json frame_ns = json::array();
        json frame_faults = json::array();
        auto start = measure::now_ns();
        Buffer kept;
        if (reuse) kept = allocate(route, os::PageKind::base, frame_size);
        for (int frame = 0; frame < settings.frames; ++frame) {
          auto before = measure::take_snapshot({.machine = false});
          auto frame_start = measure::now_ns();
          Buffer buffer = reuse ? kept : allocate(route, os::PageKind::base, frame_size);
          write_all(buffer, frame & 0xff);
          if (!reuse) release(buffer);
          auto frame_end = measure::now_ns();
          frame_ns.push_back(frame_end - frame_start);
          auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
    frame_faults.push_back(fault_count(interval.faults_counted, interval.minor_faults));
        }
        if (reuse) release(kept);
        auto total = measure::now_ns() - start;
        // The process-wide glibc state (its mmap threshold) carries over from
        // one rep to the next: `sequence` records the order.
        emitter.sample({{"part", "reuse"}, {"route", route_name(route)}, {"mode", mode}, {"frame_bytes", frame_size}, {"rep", rep}},
                       {{"frames", settings.frames}, {"total_ns", total}, {"frame_ns", frame_ns}, {"frame_minor_faults", frame_faults}});
        }});
      }
    }
  }
}

// 1. Parse: every flag typed and checked by CLI11.
void declare(CLI::App& command, Settings& s) {
  add_sizes_option(command, "--sizes", s.sizes, "8M,32M,128M,1G", "buffer sizes (sizes over the budget are left out unless named)");
  add_page_kinds_option(command, "--pages", s.pages, "page kinds: base,thp,hugetlb-2M,hugetlb-1G");
  command.add_option("--routes", s.routes, "allocation routes: os,malloc,new")
      ->delimiter(',')
      ->transform(named<Route>({{"os", Route::os}, {"malloc", Route::malloc}, {"new", Route::new_array}}, "route"))
      ->default_str("os,malloc,new");
  add_names_option(command, "--parts", s.parts, {"rows", "reuse", "threads", "idle", "shootdowns"},
                   "what to measure: rows,reuse,threads,idle,shootdowns");
  command.add_option("--reps", s.reps, "measured repetitions per case (reuse: at most 3; threads and shootdowns: at most 5)")
      ->check(CLI::Range(1, 1000));
  command.add_option("--warmup", s.warmup, "unmeasured repetitions first")->check(CLI::Range(0, 100));
  command.add_option("--settle-ms", s.settle_ms, "window after the free in which work elsewhere is still charged")
      ->check(CLI::Range(0, 10000));
  command.add_option("--baseline-ms", s.baseline_ms, "idle window measuring the machine's background CPU use")
      ->check(CLI::Range(10, 10000));
  command.add_option("--frames", s.frames, "frames in the reuse-vs-reallocate test")->check(CLI::Range(1, 100000));
  add_size_option(command, "--frame-size", s.frame_size, "8M", "buffer size per frame");
  add_size_option(command, "--threads-size", s.threads_size, "256M", "buffer size for the threads and shootdowns parts");
  command.add_option("--order", s.order, "blocks (each case's repetitions back to back) or rounds (every case once "
                     "a round, in an order shuffled each round from --order-seed)")
      ->check(CLI::IsMember({"blocks", "rounds"}));
  command.add_option("--order-seed", s.order_seed, "seed of the cases' order in each round with --order rounds (default: a "
                     "new one, recorded in the settings line)")->capture_default_str();
  add_size_option(command, "--idle-size", s.idle_size, "256M", "buffer size for the idle test");
  command.add_option("--idle-seconds", s.idle_seconds, "how long memory stays free in the idle test")
      ->check(CLI::Range(0.0, 600.0));
  command.add_option("--idle-reps", s.idle_reps, "repetitions of the idle test")->check(CLI::Range(1, 100));
  command.add_option("--budget", s.budget, "memory budget (default 80% of available memory)");
}

struct Case {
  os::PageKind kind;
  Route route;
  std::size_t size;
};

// The rows' cases this machine can run: sizes within the budget, page kinds it offers.
std::vector<Case> row_cases(const Settings& s, const BudgetChoice& budget, const os::Capabilities& offered, Emitter& emitter) {
  // Default sizes shrink to the budget; sizes the user asked for do not.
  std::vector<std::size_t> fitting;
  for (std::size_t size : s.sizes) {
    if (size <= budget.budget_bytes) fitting.push_back(size);
    else if (s.sizes_given) require_within_budget(size, budget, "--sizes " + human_size(size));
    else emitter.warning("size_over_budget", human_size(size) + " is over the memory budget of " + human_size(budget.budget_bytes) + " and was left out");
  }
  std::vector<Case> cases;
  bool said_routes = false;
  for (os::PageKind kind : s.pages) {
    for (std::size_t size : usable_sizes(offered, kind, fitting, emitter)) {
      for (Route route : s.routes) {
        bool hugetlb = kind == os::PageKind::huge_2mb || kind == os::PageKind::huge_1gb;
        if (hugetlb && route != Route::os) {
          if (!said_routes) {
            emitter.warning("route_not_applicable",
                            "hugetlb rows use the os route only: malloc and new[] cannot put a block on hugetlb pages "
                            "after the fact (glibc can do it process-wide with GLIBC_TUNABLES=glibc.malloc.hugetlb=2)");
          }
          said_routes = true;
          continue;
        }
        cases.push_back({kind, route, size});
      }
    }
  }
  return cases;
}

// blocks: each case's warm-ups and repetitions back to back, so that the
// measured repetitions reuse memory freed a moment ago (the steady cost).
// rounds: every case once per round, each round in its own order shuffled
// from --order-seed (probe/rounds.hpp, as bigarray's ranked rows), so that
// drift over the run spreads over all cases; on a VM that hands free memory
// back to the host, the repetitions then also pay the host's faults (see the
// idle part), which is why blocks stay the default.
// The idle baseline is measured again before each block (or round).
void plan_rows(std::vector<Step>& plan, Emitter& emitter, const Settings& s, const std::vector<Case>& cases) {
  const bool rounds = s.order == "rounds";
  const std::size_t outer = rounds ? static_cast<std::size_t>(s.reps + s.warmup) : cases.size();
  const std::size_t inner = rounds ? cases.size() : static_cast<std::size_t>(s.reps + s.warmup);
  auto idle = std::make_shared<IdleRates>();
  const auto shuffled = rounds ? probe::interleaved_order(cases.size(), static_cast<int>(outer), s.order_seed)
                               : std::vector<std::vector<std::size_t>>{};
  std::size_t sequence = 0;
  for (std::size_t i = 0; i < outer; ++i) {
    for (std::size_t j = 0; j < inner; ++j) {
      const Case c = cases[rounds ? shuffled[i][j] : i];
      const int rep = static_cast<int>(rounds ? i : j) - s.warmup;
      const bool new_block = j == 0;
      plan.push_back({std::string(os::page_kind_name(c.kind)) + " " + route_name(c.route) + " " + human_size(c.size),
                      [=, &emitter, &s] {
                        if (new_block) *idle = idle_elsewhere_rates(s.baseline_ms);
                        json metrics = cycle_metrics(c.route, c.kind, c.size, s, *idle);
                        metrics["idle_elsewhere_rate"] = idle->elsewhere;
                        emitter.sample({{"part", "rows"},
                                        {"page", os::page_kind_name(c.kind)},
                                        {"route", route_name(c.route)},
                                        {"size_bytes", c.size},
                                        {"rep", rep},
                                        {"warmup", rep < 0},
                                        {"sequence", sequence}},
                                       metrics);
                      }});
      ++sequence;
    }
  }
}

// 2. Plan: check the settings against the budget and the machine, and list every step.
std::vector<Step> plan(Settings& s, Emitter& emitter) {
  auto wants = [&](const char* part) { return std::find(s.parts.begin(), s.parts.end(), part) != s.parts.end(); };
  const BudgetChoice budget = choose_budget(s.budget);
  if (wants("reuse")) require_within_budget(s.frame_size, budget, "--frame-size");
  if (wants("threads") || wants("shootdowns")) require_within_budget(s.threads_size, budget, "--threads-size");
  if (wants("idle")) require_within_budget(s.idle_size, budget, "--idle-size");
  const bool shootdowns = wants("shootdowns") && os::logical_cpu_count() > 1;
  if (wants("shootdowns") && !shootdowns) {
    emitter.warning("shootdowns_need_two_cpus", "the shootdowns part needs a second CPU to send interrupts to; skipped");
  }
  const os::Capabilities offered = os::capabilities();
  const std::vector<Case> cases = wants("rows") ? row_cases(s, budget, offered, emitter) : std::vector<Case>{};

  // Documented caps: the reuse part repeats at most 3 times, threads and shootdowns at most 5.
  const int reuse_reps = std::min(s.reps, 3);
  const int thread_reps = std::min(s.reps, 5);
  std::vector<Step> steps;
  // Reuse first: glibc's mmap threshold moves after the first free of a large
  // block, and this part is the one that shows it.
  if (wants("reuse")) plan_reuse_part(steps, emitter, s, reuse_reps);
  plan_rows(steps, emitter, s, cases);
  if (wants("threads")) plan_threads_part(steps, emitter, s, thread_reps);
  if (shootdowns) plan_shootdowns_part(steps, emitter, s, thread_reps);
  if (wants("idle")) {
    for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp}) {
      if (std::find(s.pages.begin(), s.pages.end(), kind) != s.pages.end() &&
          os::page_kind_verdict(offered, kind, s.idle_size).usable) {
        plan_idle_part(steps, emitter, s, kind);
      }
    }
  }
  return steps;
}

// 3. Run: the plan, step by step, progress counted from its length.
Runner attach(CLI::App& command, std::shared_ptr<Settings> settings) {
  declare(command, *settings);
  return [settings, &command](Emitter& emitter) {
    settings->sizes_given = command.count("--sizes") > 0;
    run_plan(emitter, plan(*settings, emitter));
  };
}

}  // namespace

Experiment costs_experiment() {
  return {"costs", "Per-MB cost of a large allocation: faults, zeroing, free, work elsewhere",
          [](CLI::App& command) { return attach(command, std::make_shared<Settings>()); }};
}

}  // namespace memcost::probe
