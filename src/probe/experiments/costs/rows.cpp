// The costs experiment's rows (parts.hpp): each case (page kind × route × size) allocated,
// written twice and freed, phase by phase, with the CPU time charged outside the process in a window
// around it, less the machine's idle baseline.
#include "probe/experiments/costs/parts.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "memcost/measure.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe::costs {
namespace {

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

}  // namespace

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

}  // namespace memcost::probe::costs
