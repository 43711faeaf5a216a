// The ranked rows, round by round (strategy_rounds.hpp).
#include "probe/experiments/bigarray/strategy_rounds.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <set>
#include <string>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/experiments/bigarray/machine_limit.hpp"
#include "probe/experiments/bigarray/work_item.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe::bigarray {
namespace {

// One strategy's repetition as measured: its metrics, or why the strategy could not do its work.
struct Measured {
  json metrics;  // null when the strategy failed
  std::string failure;
};

// One strategy's repetition, measured once: allocate and initialize, check, free. `beside`: the
// rows measured at once, this one included (each in a process of its own: measure_side_by_side).
Measured measure_strategy_once(const NamedStrategy& strategy, std::size_t count, unsigned threads, bool zero_init,
                               std::size_t beside = 1) {
  StrategyInputs inputs{count, threads, zero_init};
  const MachineEvents events_before = machine_events();
  auto before = measure::take_snapshot({.machine = false});
  BuiltArray made = strategy.make(inputs);
  auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
  const json events = events_between(events_before, machine_events());
  if (!made.failure.empty()) return {nullptr, made.failure};
  bool ok = verified(made.items, count, zero_init);
  auto backing = measure::backing_of(made.items, count * sizeof(WorkItem));
  auto free_start = measure::now_ns();
  made.release();
  double free_s = static_cast<double>(measure::now_ns() - free_start) / 1e9;
  json metrics = {{"elapsed_s", static_cast<double>(interval.wall_ns) / 1e9},
                  {"free_s", free_s},
                  {"minor_faults", fault_count(interval.faults_counted, interval.minor_faults)},
                  {"system_s", static_cast<double>(interval.process_system_ns) / 1e9},
                  {"user_s", static_cast<double>(interval.process_user_ns) / 1e9},
                  {"huge_fraction", backing ? json(backing->huge_fraction()) : json(nullptr)},
                  {"verified", ok},
                  {"page_kind", made.page_kind},
                  {"malloc", malloc_implementation()},
                  {"events", events},
                  {"side_by_side", beside}};
  if (made.first_percent_s >= 0) metrics["first_percent_s"] = made.first_percent_s;
  if (!made.auto_choice.empty()) {
    metrics["auto_choice"] = made.auto_choice;
    metrics["auto_fallbacks"] = made.fallbacks;
    metrics["auto_initialization"] = made.initialization;
    metrics["auto_initialization_reason"] = made.initialization_reason;
  }
  return {metrics, ""};
}

void warn_failed_once(Emitter& emitter, const std::string& name, const std::string& failure, std::set<std::string>& failed) {
  if (failed.insert(name).second) {
    emitter.warning("strategy_failed", name + " failed and is left out of the ranking: " + failure);
  }
}

json strategy_case(const Settings& s, const NamedStrategy& strategy, std::size_t count, unsigned threads, bool zero_init,
                   int rep) {
  return {{"part", "strategy"}, {"strategy", strategy.name}, {"family", strategy.family},
          {"allocator", strategy.family == "libc" ? s.label : ""}, {"init", zero_init ? "zero" : "value"},
          {"size_bytes", count * sizeof(WorkItem)}, {"rep", rep}, {"threads", threads}};
}

// Whether the VM handed 64 MiB or more to its host while the repetition ran.
bool raced_host_reporting(const json& metrics) {
  const auto events = metrics.find("events");
  if (events == metrics.end() || !events->is_object()) return false;
  const auto reported = events->find("host_reported_bytes");
  return reported != events->end() && reported->is_number() && reported->get<std::uint64_t>() >= host_reporting_race_bytes;
}

// One strategy's repetition, reported; its seconds (none when the strategy failed). Taken again
// (twice at most) when the VM handed 64 MiB or more to its host while it ran, as the fill table's
// fills are: the host's work lands on whichever rows run then, and the ranks would follow the host.
// What was thrown away is kept in the sample. Only a repetition shorter than half the reporting
// period is taken again: the kernel reports freed memory in bursts every 2 s
// (PAGE_REPORTING_DELAY) while any waits, so a longer one overlaps a burst whenever memory was
// freed before it, and so would each retake (at 4 GiB, 43 of 240 repetitions raced three times
// running and the retakes took half the run); it is kept, marked, and counted in the notes.
constexpr double kRetakeBelowS = 1.0;

// A serial row on a part (Settings::serial_part): a row that writes the array from one thread
// (NamedStrategy::serial_writes) takes time in proportion to the bytes, at about one thread's rate
// whatever the size (its faults and writes one after the other), and at 32 GiB on 16 CPUs such rows
// took 15-25 s a repetition, more than half of a 9-minute run (2026-11-27). Above the part's size
// each repetition writes the array's first `count` elements instead, and its times and faults are
// scaled to the whole (the sample keeps what was measured: measured_bytes and scaled_by). Checked,
// not assumed: the run's first serial row is measured on the whole array (its repetition of that
// round) and on its part, once; where the scaled part is more than kPartOffAtMost away from the
// whole, every serial row is measured whole from then on. The check looks for a time that does not
// grow with the bytes (reclaim, compaction, a host that backs a big array differently), not for a
// repetition's noise: two repetitions of one serial row there differed by up to 1.24x (mmap +
// memset [thp], 9.5 and 7.7 s), and these rows are far behind the fastest (15-30x) where 15 %
// changes no rank.
struct SerialPart {
  std::size_t count = 0;  // elements a serial row writes; 0: the whole array
  bool checked = false;
  [[nodiscard]] std::size_t of(const NamedStrategy& row, std::size_t whole) const {
    return row.serial_writes && count > 0 && count < whole ? count : whole;
  }
};
constexpr double kPartOffAtMost = 1.15;

// The metrics of a repetition on `measured` of the array's `count` elements, marked as such.
void mark_part(json& metrics, std::size_t measured, std::size_t count) {
  if (measured >= count) return;
  metrics["measured_bytes"] = measured * sizeof(WorkItem);
  metrics["scaled_by"] = static_cast<double>(count) / static_cast<double>(measured);
}

// One repetition of `strategy` on `measured` elements of a `count`-element array: its seconds,
// scaled to the whole array (the adaptive rule judges rows by their whole array's time).
std::optional<double> measure_strategy(Emitter& emitter, const Settings& s, const NamedStrategy& strategy, std::size_t count,
                                       std::size_t measured_count, unsigned threads, bool zero_init, int rep,
                                       std::set<std::string>& failed) {
  json metrics, raced = json::array();
  bool overlap_kept = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Measured measured = measure_strategy_once(strategy, measured_count, threads, zero_init);
    if (measured.metrics.is_null()) {
      warn_failed_once(emitter, strategy.name, measured.failure, failed);
      return std::nullopt;
    }
    metrics = std::move(measured.metrics);
    if (!raced_host_reporting(metrics)) break;
    if (metrics["elapsed_s"].get<double>() >= kRetakeBelowS) {
      overlap_kept = true;
      break;
    }
    // Its faults too: a retake can find memory the allocator kept from the try (tcmalloc does).
    raced.push_back({{"elapsed_s", metrics["elapsed_s"]},
                     {"minor_faults", metrics["minor_faults"]},
                     {"host_reported_bytes", metrics["events"]["host_reported_bytes"]}});
  }
  metrics["raced_with_host_reporting"] = std::move(raced);
  metrics["host_reporting_overlap_kept"] = overlap_kept;
  mark_part(metrics, measured_count, count);
  const double seconds = metrics["elapsed_s"].get<double>() * static_cast<double>(count) / static_cast<double>(measured_count);
  emitter.sample(strategy_case(s, strategy, count, threads, zero_init, rep), metrics);
  return seconds;
}

// One-thread rows measured side by side, each in a child process of its own, started together:
// each counts its own faults and CPU, and no row's mapping calls wait on another's address space
// (two threads of one process here touching 1 GiB each took 1.4-3.9 s where two processes took
// 1.4-1.7, one alone 1.1-1.3). The results in the rows' order; a child that died is a failure
// saying how.
std::vector<Measured> measure_side_by_side(const std::vector<const NamedStrategy*>& rows, std::size_t count, bool zero_init) {
  std::vector<os::Child> children;
  for (const NamedStrategy* row : rows) {
    children.push_back(os::start_child([row, count, zero_init, beside = rows.size()] {
      Measured measured;
      try {
        measured = measure_strategy_once(*row, count, 1, zero_init, beside);
      } catch (const std::exception& error) {  // out of memory, say: this row's failure, not the run's
        measured = {nullptr, error.what()};
      }
      return json{{"metrics", measured.metrics}, {"failure", measured.failure}}.dump();
    }));
  }
  std::vector<Measured> results;
  for (os::Child& child : children) {
    std::string error;
    const auto answer = os::finish_child(child, error);
    const json parsed = answer ? json::parse(*answer, nullptr, false) : json();
    if (!parsed.is_object() || !parsed.contains("metrics") || !parsed.contains("failure")) {
      results.push_back({nullptr, "its process beside the others " + (answer ? "answered nothing readable" : error)});
      continue;
    }
    results.push_back({parsed["metrics"], parsed["failure"].get<std::string>()});
  }
  return results;
}

// The rows of one initialization as their rounds go: each row's seconds so far, and whether it has
// settled (probe/rounds.hpp: adaptive repetitions; with --reps N every row runs N rounds).
struct RowsInRounds {
  std::vector<std::vector<double>> seconds;  // by strategy index
  std::vector<Settled> settled;
  std::vector<bool> failed;
};

// The fastest row's median so far: --fastest-s when given (an allocator's run is set against the
// main run's fastest), else the lowest median of this run's rows.
double fastest_median_s(const RowsInRounds& rows, double given) {
  if (given > 0) return given;
  double fastest = 0;
  for (const auto& seconds : rows.seconds) {
    if (seconds.empty()) continue;
    const double median = median_of(seconds);
    if (fastest == 0 || median < fastest) fastest = median;
  }
  return fastest;
}

// Settles the rows whose rounds so far say enough, each said in a sample of its own once; true while
// any row still goes on.
bool settle_rows(Emitter& emitter, RowsInRounds& rows, const std::vector<NamedStrategy>& chosen, const std::string& init,
                 const std::string& label, const StoppingRule& rule, double given_fastest_s) {
  const double fastest = fastest_median_s(rows, given_fastest_s);
  bool going = false;
  for (std::size_t index = 0; index < chosen.size(); ++index) {
    if (rows.failed[index] || rows.settled[index] != Settled::no) continue;
    const Settled now = settled(rows.seconds[index], fastest, rule);
    if (now == Settled::no) {
      going = true;
      continue;
    }
    rows.settled[index] = now;
    emitter.sample({{"part", "settled"}, {"strategy", chosen[index].name},
                    {"allocator", chosen[index].family == "libc" ? label : ""}, {"init", init},
                    {"rounds", rows.seconds[index].size()}},
                   {{"reason", settled_name(now)}, {"fastest_median_s", fastest}});
  }
  return going;
}

// A round's order with the rows that ask for huge pages together, after the base-page rows in even
// rounds and before them in odd ones, each group in the round's shuffled order. Here a huge-page
// allocation right after a base-page row freed its array gets memory the host must fault in again:
// 4 GiB on THP took 0.42-0.80 s after 4 GiB of base pages were freed, 0.19-0.20 s after another THP
// allocation (one process, alternating, nothing between). Mixed at random, a THP row followed a
// base-page row in about two rounds of three, and adaptive repetitions stopped `make_big_array auto`
// as far behind after three such rounds. Grouped, the group is preceded by an unmeasured huge-page
// allocation of the array's size (warm_up_huge_pages) in every round, so every huge-page row follows
// one: with it only at the crossing of even rounds, the group's first row still read 0.26-0.30 s
// against 0.20-0.21 for the rest (4 GiB), and a row first in four rounds of five ranked behind.
std::vector<std::size_t> grouped_by_page_size(const std::vector<NamedStrategy>& chosen, const std::vector<std::size_t>& order,
                                              bool base_first) {
  std::vector<std::size_t> grouped;
  for (bool huge : {!base_first, base_first}) {
    for (std::size_t index : order) {
      if (chosen[index].huge_pages == huge) grouped.push_back(index);
    }
  }
  return grouped;
}

// The first huge-page row of a round (chosen.size() when there is none).
std::size_t first_huge_row(const std::vector<NamedStrategy>& chosen, const std::vector<std::size_t>& order) {
  for (std::size_t index : order) {
    if (chosen[index].huge_pages) return index;
  }
  return chosen.size();
}

bool any_going(const RowsInRounds& rows, const std::vector<NamedStrategy>& chosen, bool huge) {
  for (std::size_t index = 0; index < chosen.size(); ++index) {
    if (chosen[index].huge_pages == huge && !rows.failed[index] && rows.settled[index] == Settled::no) return true;
  }
  return false;
}

// An array of `bytes` on huge pages (the library's ladder), faulted in on every thread and freed,
// unmeasured: what a huge-page row right after another finds.
void warm_up_huge_pages(std::size_t bytes, unsigned threads) {
  auto warm = make_big_array<unsigned char>(bytes, zero, {.threads = threads});
  measure::keep_writes(warm.data());
}

// One-thread rows measured side by side: at most `width` at once, and only while the run's check
// holds (measure_batch).
struct SideBySide {
  std::size_t width = 1;
  bool checked = false;  // the run's first batch of two or more was checked against one row alone
  bool alone = false;    // the check failed: every row alone from then on
};

// A row measured beside others may take this much longer than alone before the run stops measuring
// rows side by side: a single repetition's noise on a quiet host is a few per cent.
constexpr double kBesideSlowerAtMost = 1.10;

// The probe's test hook (tests/python/e2e/test_bigarray.py): with MEMCOST_INJECT_FAILURE containing
// a check's name ("side_by_side_check", "serial_part_check") that check fails whatever it measured.
bool check_failure_injected(const char* check) {
  const char* failing = std::getenv("MEMCOST_INJECT_FAILURE");
  return failing && std::strstr(failing, check);
}

// The part's check (SerialPart), on the first serial row still going in this batch, if the run has
// not made it: that row's repetition of this round on the whole array, then once on its part. The
// row is taken out of `going` (measured this round).
void check_serial_part(Emitter& emitter, const Settings& s, const std::vector<NamedStrategy>& chosen,
                       std::vector<std::size_t>& going, RowsInRounds& rows, SerialPart& part, std::size_t count,
                       unsigned threads, bool zero_init, int rep, std::set<std::string>& failed) {
  const auto at = std::ranges::find_if(going, [&](std::size_t index) { return part.of(chosen[index], count) < count; });
  if (part.checked || at == going.end()) return;
  const std::size_t index = *at;
  going.erase(at);
  part.checked = true;
  const auto whole_s = measure_strategy(emitter, s, chosen[index], count, count, threads, zero_init, rep, failed);
  if (!whole_s) {
    rows.failed[index] = true;
    part.checked = false;  // the next serial row makes the check
    return;
  }
  rows.seconds[index].push_back(*whole_s);
  const Measured on_part = measure_strategy_once(chosen[index], part.count, threads, zero_init);
  const double scale = static_cast<double>(count) / static_cast<double>(part.count);
  const double scaled_s = on_part.metrics.is_null() ? 0 : on_part.metrics["elapsed_s"].get<double>() * scale;
  const bool keep = scaled_s > 0 && std::max(*whole_s / scaled_s, scaled_s / *whole_s) <= kPartOffAtMost &&
                    !check_failure_injected("serial_part_check");
  emitter.sample({{"part", "serial_part_check"}, {"strategy", chosen[index].name}, {"init", zero_init ? "zero" : "value"},
                  {"rep", rep}},
                 {{"whole_s", *whole_s}, {"part_s", on_part.metrics.is_null() ? json(nullptr) : on_part.metrics["elapsed_s"]},
                  {"measured_bytes", part.count * sizeof(WorkItem)}, {"scaled_by", scale}, {"scaled_s", scaled_s},
                  {"kept", keep}, {"within", kPartOffAtMost}});
  if (!keep) {
    const std::size_t part_bytes = part.count * sizeof(WorkItem);
    part.count = 0;
    char ratio[16];
    std::snprintf(ratio, sizeof ratio, "%.2f", scaled_s > 0 ? scaled_s / *whole_s : 0.0);
    emitter.warning("serial_part_off", chosen[index].name + " on " + human_size(part_bytes) +
                                           " of the array, scaled, came to " + ratio +
                                           "x its time on the whole: every one-thread row is measured on the whole array "
                                           "from here");
  }
}

// A batch of one-thread rows of one round: those still going, measured side by side. The run's
// first such batch of two or more is checked: its first row is measured alone first (a repetition
// like any), then beside the others; if beside took more than kBesideSlowerAtMost times alone, the
// rows slowed one another: the batch's side-by-side times are not kept (they stay in the check's
// sample), its other rows are measured again, alone, and every row is alone from then on.
void measure_batch(Emitter& emitter, const Settings& s, const std::vector<NamedStrategy>& chosen,
                   const std::vector<std::size_t>& batch, RowsInRounds& rows, SideBySide& side_by_side, SerialPart& part,
                   std::size_t count, unsigned threads, bool zero_init, int rep, std::set<std::string>& failed) {
  std::vector<std::size_t> going;
  for (std::size_t index : batch) {
    if (!rows.failed[index] && rows.settled[index] == Settled::no) going.push_back(index);
  }
  check_serial_part(emitter, s, chosen, going, rows, part, count, threads, zero_init, rep, failed);
  auto alone = [&](std::size_t index) {
    auto seconds = measure_strategy(emitter, s, chosen[index], count, part.of(chosen[index], count), threads, zero_init,
                                    rep, failed);
    if (seconds) rows.seconds[index].push_back(*seconds);
    else rows.failed[index] = true;
    return seconds;
  };
  if (going.size() < 2 || side_by_side.alone) {
    for (std::size_t index : going) (void)alone(index);
    return;
  }
  std::optional<double> alone_s;
  if (!side_by_side.checked) {
    alone_s = alone(going.front());
    if (!alone_s) return;  // failed, said once; the rest of the batch goes on in the next round
  }
  std::vector<const NamedStrategy*> strategies;
  for (std::size_t index : going) strategies.push_back(&chosen[index]);
  // One-thread rows write serially: all on the part, or all whole.
  const std::size_t measured = part.of(chosen[going.front()], count);
  const double scale = static_cast<double>(count) / static_cast<double>(measured);
  std::vector<Measured> results = measure_side_by_side(strategies, measured, zero_init);
  bool keep = true;
  if (!side_by_side.checked) {
    side_by_side.checked = true;
    const double beside_s =
        results.front().metrics.is_null() ? 0 : results.front().metrics["elapsed_s"].get<double>() * scale;
    keep = beside_s > 0 && beside_s <= kBesideSlowerAtMost * *alone_s && !check_failure_injected("side_by_side_check");
    json names = json::array(), seconds = json::array();
    for (std::size_t i = 0; i < going.size(); ++i) {
      names.push_back(chosen[going[i]].name);
      seconds.push_back(results[i].metrics.is_null() ? json(nullptr) : results[i].metrics["elapsed_s"]);
    }
    emitter.sample({{"part", "side_by_side_check"}, {"strategy", chosen[going.front()].name},
                    {"init", zero_init ? "zero" : "value"}, {"rep", rep}},
                   {{"alone_s", *alone_s}, {"beside_s", beside_s}, {"rows", names}, {"rows_elapsed_s", seconds},
                    {"kept", keep}});
    if (!keep) {
      side_by_side.alone = true;
      char ratio[16];
      std::snprintf(ratio, sizeof ratio, "%.2f", beside_s > 0 ? beside_s / *alone_s : 0.0);
      const std::size_t others = going.size() - 1;
      emitter.warning("side_by_side_slower", chosen[going.front()].name + " took " + ratio + "x as long beside " +
                                                 std::to_string(others) + " other one-thread row" + (others > 1 ? "s" : "") +
                                                 " as alone: every row is measured alone from here");
      for (std::size_t i = 1; i < going.size(); ++i) (void)alone(going[i]);  // this round's, again, alone
      return;
    }
  }
  for (std::size_t i = 0; i < going.size(); ++i) {
    const std::size_t index = going[i];
    if (alone_s && i == 0) continue;  // its repetition this round was the one measured alone
    if (results[i].metrics.is_null()) {
      warn_failed_once(emitter, chosen[index].name, results[i].failure, failed);
      rows.failed[index] = true;
      continue;
    }
    results[i].metrics["raced_with_host_reporting"] = json::array();  // side by side, nothing is taken again
    results[i].metrics["host_reporting_overlap_kept"] = raced_host_reporting(results[i].metrics);
    mark_part(results[i].metrics, measured, count);
    rows.seconds[index].push_back(results[i].metrics["elapsed_s"].get<double>() * scale);
    emitter.sample(strategy_case(s, chosen[index], count, threads, zero_init, rep), results[i].metrics);
  }
}

// A round's steps: each row on its own, except one-thread rows, gathered `width` at a time within
// their page-size group, each batch where its first row falls.
std::vector<std::vector<std::size_t>> batches_of_round(const std::vector<NamedStrategy>& chosen,
                                                        const std::vector<std::size_t>& grouped, std::size_t width,
                                                        bool zero_init) {
  std::vector<std::vector<std::size_t>> batches;
  std::vector<bool> placed(chosen.size(), false);
  for (std::size_t at = 0; at < grouped.size(); ++at) {
    const std::size_t index = grouped[at];
    if (placed[index]) continue;
    std::vector<std::size_t> batch{index};
    placed[index] = true;
    for (std::size_t next = at + 1; chosen[index].one_thread_for(zero_init) && next < grouped.size() && batch.size() < width;
         ++next) {
      const NamedStrategy& other = chosen[grouped[next]];
      if (other.one_thread_for(zero_init) && other.huge_pages == chosen[index].huge_pages && !placed[grouped[next]]) {
        batch.push_back(grouped[next]);
        placed[grouped[next]] = true;
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace

// Every chosen strategy, for each initialization asked for, round by round, each round's order
// shuffled from --order-seed (probe/rounds.hpp), so that the host's slow minutes fall on every
// strategy alike. Rounds go on while any row has not settled (adaptive), or --reps times.
void add_strategy_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter,
                        const std::shared_ptr<std::vector<NamedStrategy>>& chosen, std::size_t count, unsigned threads,
                        std::size_t side_by_side_rows, bool side_by_side_checked) {
  auto failed = std::make_shared<std::set<std::string>>();  // strategies already reported as failed
  auto side_by_side = std::make_shared<SideBySide>(SideBySide{.width = std::max<std::size_t>(1, side_by_side_rows), .checked = side_by_side_checked});
  auto part = std::make_shared<SerialPart>(
      SerialPart{.count = serial_part_of(s, count * sizeof(WorkItem)) / sizeof(WorkItem), .checked = s.serial_part_checked});
  const StoppingRule rule = s.reps > 0 ? StoppingRule::fixed(s.reps) : StoppingRule{};
  const auto order = probe::interleaved_order(chosen->size(), rule.max_rounds, s.order_seed);
  for (const std::string& init : s.inits) {
    const bool zero_init = init == "zero";
    auto rows = std::make_shared<RowsInRounds>(RowsInRounds{std::vector<std::vector<double>>(chosen->size()),
                                                            std::vector<Settled>(chosen->size(), Settled::no),
                                                            std::vector<bool>(chosen->size(), false)});
    for (int rep = 0; rep < rule.max_rounds; ++rep) {
      // The limit again, in every round beside its rows (an allocator's run too): a row's share
      // of the limit is taken against the bandwidth the host gave in the same minute. First, what
      // the rounds before settled: a round only runs the rows still going.
      steps.push_back({"limit (round " + std::to_string(rep + 1) + ")",
                       [&emitter, &s, &init, rep, threads, count, rows, chosen, rule] {
        if (!settle_rows(emitter, *rows, *chosen, init, s.label, rule, s.fastest_s)) return;
        emitter.sample({{"part", "round_limit"}, {"label", s.label}, {"init", init}, {"rep", rep}, {"threads", threads}},
                       round_limit(std::min(count * sizeof(WorkItem), kRoundLimitBytes), threads, init == "zero"));
      }});
      const auto& round_order = order[static_cast<std::size_t>(rep)];
      const auto grouped = grouped_by_page_size(*chosen, round_order, rep % 2 == 0);
      for (auto& batch : batches_of_round(*chosen, grouped, side_by_side->width, zero_init)) {
        if ((*chosen)[batch.front()].huge_pages && batch.front() == first_huge_row(*chosen, grouped)) {
          steps.push_back({"huge-page warm-up (round " + std::to_string(rep + 1) + ")", [rows, chosen, count, threads] {
            if (!any_going(*rows, *chosen, true) || !any_going(*rows, *chosen, false)) return;
            warm_up_huge_pages(count * sizeof(WorkItem), threads);
          }});
        }
        std::string label;
        for (std::size_t index : batch) label += (label.empty() ? "" : " | ") + (*chosen)[index].name;
        steps.push_back({label + (zero_init ? " (zero)" : " (value)"),
                         [&emitter, &s, chosen, failed, batch, count, threads, zero_init, rep, rows, side_by_side, part] {
                           measure_batch(emitter, s, *chosen, batch, *rows, *side_by_side, *part, count, threads, zero_init,
                                         rep, *failed);
                         }});
      }
    }
    steps.push_back({"settled (" + init + ")", [&emitter, &s, &init, rows, chosen, rule] {
      (void)settle_rows(emitter, *rows, *chosen, init, s.label, rule, s.fastest_s);
    }});
  }
}

}  // namespace memcost::probe::bigarray
