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
// The parts, one file each beside this one (parts.hpp); here the flags and the plan.
#include <algorithm>
#include <memory>

#include "os/capabilities.hpp"
#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"
#include "probe/experiments/costs/parts.hpp"

namespace memcost::probe {
namespace costs {
namespace {

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
}  // namespace costs

Experiment costs_experiment() {
  return {"costs", "Per-MB cost of a large allocation: faults, zeroing, free, work elsewhere",
          [](CLI::App& command) { return costs::attach(command, std::make_shared<costs::Settings>()); }};
}

}  // namespace memcost::probe
