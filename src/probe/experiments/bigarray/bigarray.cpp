// `memcost-probe bigarray`: allocate and initialize one big array of 16-byte
// work items by every common strategy, against the machine's limit (a
// parallel memset over memory that is already faulted in).
//
// Each strategy is timed from the allocation to the last element written,
// then checked (sampled elements), then freed (timed on its own). The parts, one file each beside
// this one: the strategies (strategies.cpp), the machine's limit and the fill methods
// (machine_limit.cpp), the repeat scenario (repeat.cpp) and the ranked rows' rounds
// (strategy_rounds.cpp). Here: the flags, the run's estimate and the plan.
#include <algorithm>
#include <cstring>
#include <memory>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"
#include "probe/experiments/bigarray/machine_limit.hpp"
#include "probe/experiments/bigarray/repeat.hpp"
#include "probe/experiments/bigarray/settings.hpp"
#include "probe/experiments/bigarray/strategies.hpp"
#include "probe/experiments/bigarray/strategy_rounds.hpp"
#include "probe/experiments/bigarray/work_item.hpp"
#include "probe/run_estimate.hpp"

namespace memcost::probe {
namespace bigarray {
namespace {

// 1. Parse: every flag typed and checked by CLI11.
void declare(CLI::App& command, Settings& s) {
  add_size_option(command, "--size", s.size, "1G", "array size (capped by the budget unless given)");
  command.add_option("--strategies", s.strategies_filter, "only the strategies whose names contain one of these")
      ->delimiter(',');
  add_names_option(command, "--inits", s.inits, {"zero", "value"}, "zero, value");
  command.add_option("--reps", s.reps, "repetitions per strategy (0, the default: adaptive, at most 5 rounds, a row stopping "
                     "once its time is known within ±10 % (3 rounds at least) or its fastest round is 3x the fastest "
                     "row's median (5x after 2 rounds, 15x after 1); N: N rounds for every row)")
      ->check(CLI::Range(0, 100));
  command.add_option("--fastest-s", s.fastest_s, "the fastest row's median seconds in the main run, against which an "
                     "allocator's run judges a row far behind (adaptive repetitions)")->check(CLI::NonNegativeNumber);
  command.add_option("--limit-reps", s.limit_reps, "repetitions of the limit measurement")->check(CLI::Range(1, 100));
  command.add_option("--threads", s.threads, "threads for parallel strategies (default 0: all CPUs)");
  command.add_option("--label", s.label, "the allocator the libc strategies run on (for the rows)");
  command.add_flag("--libc-only", s.libc_only, "only the strategies that go through malloc/new (for other allocators)");
  command.add_option("--allocator-runs", s.allocator_runs, "runs under other allocators that will follow this one "
                     "(for the run's estimate, printed at the start)")->check(CLI::Range(0, 100));
  command.add_option("--side-by-side", s.side_by_side, "one-thread rows measured at once, each in a process of its own "
                     "(0, the default: at most half the CPUs, as many arrays as the budget holds, their writing under a "
                     "third of the machine's limit; checked against one row measured alone; 1: every row alone)")
      ->check(CLI::Range(0, 64))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // an allocator's run: the front end's value last
  command.add_flag("--side-by-side-checked", s.side_by_side_checked, "the main run's side-by-side check held: an "
                   "allocator's run measures its rows side by side without a check of its own");
  add_size_option(command, "--serial-part", s.serial_part, "8G",
                  "rows that write the array from one thread are measured on this much of it when it is larger, their "
                  "times scaled to the whole; checked once against one such row measured whole (0: every row whole; "
                  "at least 64M)", true)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command.add_flag("--serial-part-checked", s.serial_part_checked, "the main run's check of the serial rows' part held: "
                   "an allocator's run measures them on a part without a check of its own");
  command.add_option("--repeat", s.repeat, "iterations of the repeat scenario: allocate, initialize, free (0: none)")
      ->check(CLI::Range(0, 1000));
  command.add_option("--budget", s.budget, "memory budget (default 80% of available memory)");
  command.add_option("--order-seed", s.order_seed, "seed of the order the strategies and the fill methods run in, shuffled each round "
                     "(default: a new one, recorded in the settings line)")->capture_default_str();
}

// The rates the run's estimate is made from (probe/run_estimate.hpp), measured in a fraction of a
// second: one thread writing fresh base pages and fresh THP (128 MiB each), every thread faulting
// 256 MiB and 768 MiB in as make_big_array does, then writing the larger again.
MeasuredRates calibrate_once(unsigned threads) {
  // The parallel sizes stay under 1 GiB: make_big_array measures populate against touch on a
  // process's first zero array of 1 GiB or more, and that is the rows' to pay.
  constexpr std::size_t serial_bytes = std::size_t{128} << 20, small_parallel_bytes = std::size_t{256} << 20,
                        parallel_bytes = std::size_t{768} << 20;
  MeasuredRates rates;
  for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp}) {
    os::MapRequest request{serial_bytes, kind};
    request.alignment_bytes = std::size_t{2} << 20;
    os::Mapping mapping = os::map(request);
    if (!mapping.status.ok()) return {};
    const std::uint64_t start = measure::now_ns();
    std::memset(mapping.address, 0x11, serial_bytes);
    measure::keep_writes(mapping.address);
    const double gb_per_s = static_cast<double>(serial_bytes) / static_cast<double>(measure::now_ns() - start);
    (kind == os::PageKind::base ? rates.serial_gb_per_s : rates.serial_huge_gb_per_s) = gb_per_s;
    const std::uint64_t freeing = measure::now_ns();
    (void)os::release(mapping.address, mapping.size_bytes);
    (kind == os::PageKind::base ? rates.free_gb_per_s : rates.free_huge_gb_per_s) =
        static_cast<double>(serial_bytes) / static_cast<double>(measure::now_ns() - freeing);
    // The value, item by item, as a serial row's value init writes it.
    os::Mapping items = os::map(request);
    if (!items.status.ok()) return {};
    const std::uint64_t writing = measure::now_ns();
    std::uninitialized_fill_n(static_cast<bigarray::WorkItem*>(items.address), serial_bytes / sizeof(bigarray::WorkItem),
                              bigarray::value_item);
    measure::keep_writes(items.address);
    (kind == os::PageKind::base ? rates.serial_value_gb_per_s : rates.serial_value_huge_gb_per_s) =
        static_cast<double>(serial_bytes) / static_cast<double>(measure::now_ns() - writing);
    (void)os::release(items.address, items.size_bytes);
  }
  // Every thread faulting in: an array of each size, the rate from the difference, so that what
  // making an array costs whatever its size (threads started, the page ladder's calls) is not
  // taken for a slow rate. On the 16-vCPU GPU host one 512 MiB array gave 6.8 GB/s, the 32 GiB rows
  // 58, and the estimate was 3.4x the run.
  auto fault_in_ns = [threads](std::size_t bytes) {
    const std::uint64_t start = measure::now_ns();
    auto array = make_big_array<unsigned char>(bytes, zero, {.threads = threads});
    return static_cast<double>(measure::now_ns() - start);
  };
  const double small_ns = fault_in_ns(small_parallel_bytes);
  std::uint64_t start = measure::now_ns();
  auto array = make_big_array<unsigned char>(parallel_bytes, zero, {.threads = threads});
  const double large_ns = static_cast<double>(measure::now_ns() - start);
  rates.parallel_gb_per_s = large_ns > small_ns
                                ? static_cast<double>(parallel_bytes - small_parallel_bytes) / (large_ns - small_ns)
                                : static_cast<double>(parallel_bytes) / large_ns;
  start = measure::now_ns();
  parallel_memset(array.data(), parallel_bytes, threads, 0x11);
  rates.faulted_gb_per_s = static_cast<double>(parallel_bytes) / static_cast<double>(measure::now_ns() - start);
  // Every thread writing fresh base pages, as the parallel rows without huge pages do.
  os::Mapping base = os::map(os::MapRequest{small_parallel_bytes, os::PageKind::base});
  if (!base.status.ok()) return {};
  start = measure::now_ns();
  parallel_memset(static_cast<unsigned char*>(base.address), small_parallel_bytes, threads, 0x11);
  rates.parallel_base_gb_per_s = static_cast<double>(small_parallel_bytes) / static_cast<double>(measure::now_ns() - start);
  (void)os::release(base.address, base.size_bytes);
  // Every thread's MADV_POPULATE_WRITE, as the populate rows fault in; 0 where the kernel refuses it.
  for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp}) {
    os::MapRequest request{small_parallel_bytes, kind};
    request.alignment_bytes = std::size_t{2} << 20;
    os::Mapping populated = os::map(request);
    if (!populated.status.ok()) return {};
    start = measure::now_ns();
    const bool refused = !populate_on_every_thread(populated.address, small_parallel_bytes, std::size_t{2} << 20, threads).empty();
    const double gb_per_s = static_cast<double>(small_parallel_bytes) / static_cast<double>(measure::now_ns() - start);
    (kind == os::PageKind::base ? rates.populate_gb_per_s : rates.populate_huge_gb_per_s) = refused ? 0 : gb_per_s;
    (void)os::release(populated.address, populated.size_bytes);
  }
  return rates;
}

// Twice, each rate the faster: at a probe's start the guest's memory may not be backed by the host
// yet (its first touch here ran 18x slower than the run's own rows, and the estimate was 2.8x the
// run); the second time takes memory the first just freed.
MeasuredRates calibrate(unsigned threads) {
  const MeasuredRates first = calibrate_once(threads), second = calibrate_once(threads);
  return {std::max(first.serial_gb_per_s, second.serial_gb_per_s), std::max(first.serial_huge_gb_per_s, second.serial_huge_gb_per_s),
          std::max(first.parallel_gb_per_s, second.parallel_gb_per_s), std::max(first.faulted_gb_per_s, second.faulted_gb_per_s),
          std::max(first.free_gb_per_s, second.free_gb_per_s), std::max(first.free_huge_gb_per_s, second.free_huge_gb_per_s),
          std::max(first.parallel_base_gb_per_s, second.parallel_base_gb_per_s),
          std::max(first.serial_value_gb_per_s, second.serial_value_gb_per_s),
          std::max(first.serial_value_huge_gb_per_s, second.serial_value_huge_gb_per_s),
          std::max(first.populate_gb_per_s, second.populate_gb_per_s),
          std::max(first.populate_huge_gb_per_s, second.populate_huge_gb_per_s)};
}

// The run's estimate, said before it starts (a warning, printed at once) and kept (a sample).
void say_estimate(const Settings& s, Emitter& emitter, const std::vector<NamedStrategy>& chosen, std::size_t bytes,
                  unsigned threads, const MeasuredRates& rates, std::size_t side_by_side) {
  RunShape shape{.bytes = bytes, .rows = {}, .inits = static_cast<int>(s.inits.size()), .limit_reps = s.limit_reps,
                 .repeat = s.repeat, .allocator_runs = s.allocator_runs, .fixed_reps = s.reps > 0, .reps = s.reps,
                 .side_by_side = side_by_side, .serial_part_bytes = serial_part_of(s, bytes), .serial_part_checked = s.serial_part_checked};
  for (const NamedStrategy& strategy : chosen) {
    shape.rows.push_back({.serial = strategy.serial_writes,
                          .huge_pages = strategy.huge_pages,
                          .populate_write = strategy.populate_write,
                          .one_thread = strategy.one_thread,
                          .one_thread_when_zero = strategy.one_thread_when_zero});
  }
  const RunEstimate estimate = estimate_run(shape, rates);
  if (estimate.seconds <= 0) return;
  emitter.warning("estimate", describe(estimate, rates, side_by_side, shape.serial_part_bytes));
  emitter.sample({{"part", "estimate"}, {"size_bytes", bytes}, {"threads", threads}},
                 {{"seconds", estimate.seconds}, {"rows_seconds", estimate.rows_seconds},
                  {"fixed_seconds", estimate.fixed_seconds}, {"allocator_seconds", estimate.allocator_seconds},
                  {"serial_gb_per_s", rates.serial_gb_per_s}, {"serial_huge_gb_per_s", rates.serial_huge_gb_per_s},
                  {"parallel_gb_per_s", rates.parallel_gb_per_s}, {"faulted_gb_per_s", rates.faulted_gb_per_s},
                  {"free_gb_per_s", rates.free_gb_per_s}, {"free_huge_gb_per_s", rates.free_huge_gb_per_s},
                  {"parallel_base_gb_per_s", rates.parallel_base_gb_per_s},
                  {"serial_value_gb_per_s", rates.serial_value_gb_per_s},
                  {"serial_value_huge_gb_per_s", rates.serial_value_huge_gb_per_s},
                  {"populate_gb_per_s", rates.populate_gb_per_s}, {"populate_huge_gb_per_s", rates.populate_huge_gb_per_s},
                  {"side_by_side", side_by_side}});
}

std::vector<Step> plan(const Settings& s, bool size_given, Emitter& emitter) {
  const BudgetChoice budget = choose_budget(s.budget);
  const std::size_t bytes = size_within_budget(s.size, size_given, budget, emitter, "measuring");
  const unsigned threads = s.threads ? s.threads : os::logical_cpu_count();
  const std::size_t count = bytes / sizeof(WorkItem);
  if (count == 0) throw ProbeError(exit_bad_arguments, "bad_arguments", "--size must hold at least one 16-byte item");
  // Below glibc's largest mmap threshold (32 MiB) malloc serves a freed block again from memory it
  // keeps: a part that small would time that, not what the whole array's rows do.
  if (s.serial_part > 0 && s.serial_part < (std::size_t{64} << 20)) {
    throw ProbeError(exit_bad_arguments, "bad_arguments", "--serial-part must be 0 (every row on the whole array) or at least 64M");
  }
  const auto chosen = chosen_strategies(s, usable_page_kinds(bytes, emitter));
  // An allocator's run neither estimates (the main run's estimate counted it) nor calibrates.
  const MeasuredRates rates = s.libc_only ? MeasuredRates{} : calibrate(threads);
  // Rows side by side run in child processes: where there are none (Windows), every row alone.
  const std::size_t side_by_side = !os::can_start_children() ? 1 : side_by_side_width(
      {.asked = s.side_by_side, .cpus = os::logical_cpu_count(), .budget_bytes = budget.budget_bytes, .array_bytes = bytes,
       .one_thread_gb_per_s = std::max(rates.serial_huge_gb_per_s, rates.serial_gb_per_s),
       .limit_gb_per_s = rates.faulted_gb_per_s});
  emitter.sample({{"part", "side_by_side"}, {"asked", s.side_by_side}, {"cpus", os::logical_cpu_count()}},
                 {{"rows", side_by_side}, {"checked_by_main_run", s.side_by_side_checked}});
  if (!s.libc_only) say_estimate(s, emitter, *chosen, bytes, threads, rates, side_by_side);
  std::vector<Step> steps;
  add_limit_and_fill_steps(steps, s, emitter, bytes, threads);
  add_repeat_steps(steps, s, emitter, bytes, budget, threads);
  add_strategy_steps(steps, s, emitter, chosen, count, threads, side_by_side, s.side_by_side_checked);
  return steps;
}

// 3. Run: the plan, step by step, progress counted from its length.
Runner attach(CLI::App& command, std::shared_ptr<Settings> settings) {
  declare(command, *settings);
  return [settings, &command](Emitter& emitter) {
    run_plan(emitter, plan(*settings, command.count("--size") > 0, emitter));
  };
}

}  // namespace
}  // namespace bigarray

Experiment bigarray_experiment() {
  return {"bigarray", "Allocate and initialize one big array by every common strategy, against the machine's limit",
          [](CLI::App& command) { return bigarray::attach(command, std::make_shared<bigarray::Settings>()); }};
}

}  // namespace memcost::probe

