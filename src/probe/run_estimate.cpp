// A `bigarray` run's duration, estimated (run_estimate.hpp).
#include "probe/run_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memcost::probe {
namespace {

// A row's round: making the array, and freeing it (on base pages a free is no small part of it:
// 0.3 s for 2 GiB on the 2-vCPU guest).
double row_seconds(const EstimatedRow& row, std::size_t bytes, bool value, const MeasuredRates& rates) {
  const double gb = static_cast<double>(bytes) / 1e9;
  const double free_s = gb / (row.huge_pages ? rates.free_huge_gb_per_s : rates.free_gb_per_s);
  if (row.serial) {
    double rate = row.huge_pages ? rates.serial_huge_gb_per_s : rates.serial_gb_per_s;
    const double value_rate = row.huge_pages ? rates.serial_value_huge_gb_per_s : rates.serial_value_gb_per_s;
    if (value && value_rate > 0) rate = value_rate;
    return gb / rate + free_s;
  }
  // In parallel a value is written after the faults: the faulted-in rate's share on top.
  const double populate = row.huge_pages ? rates.populate_huge_gb_per_s : rates.populate_gb_per_s;
  if (row.populate_write && populate > 0) return gb / populate + (value ? gb / rates.faulted_gb_per_s : 0.0) + free_s;
  const double parallel = row.huge_pages || rates.parallel_base_gb_per_s <= 0 ? rates.parallel_gb_per_s
                                                                              : rates.parallel_base_gb_per_s;
  return gb / parallel + (value ? gb / rates.faulted_gb_per_s : 0.0) + free_s;
}

// What every thread faulting huge pages in achieves, as a share of writing memory already faulted
// (the limit): 0.79 and 0.83 on the 16-vCPU GPU hosts at 32 GiB (make_big_array, 56.5 and 61.9
// GB/s against 71.2 and 75.0), 0.82 on the 2-vCPU guest at 2 GiB (22.7 against 27.7); and the
// share below which a calibration of it is not believed.
constexpr double kHugeFaultInOfWriting = 0.75;
constexpr double kImplausibleOfWriting = 0.25;

int rounds_of(const RunShape& shape, double times_the_fastest) {
  return shape.fixed_reps ? shape.reps : expected_rounds(times_the_fastest);
}

// One initialization's ranked rows: each row its rounds; one-thread rows, when measured side by
// side, in batches of RunShape::side_by_side within their page-size group, a batch as long as its
// slowest row, and (`first_init`) the check's one row alone.
// The bytes a row's repetition writes: a serial row's part when the array is larger (the times the
// fastest that decide its rounds are of the whole, scaled).
std::size_t measured_bytes(const RunShape& shape, const EstimatedRow& row) {
  return row.serial && shape.serial_part_bytes > 0 ? std::min(shape.bytes, shape.serial_part_bytes) : shape.bytes;
}

double rows_seconds(const RunShape& shape, const MeasuredRates& rates, bool value, double fastest, bool first_init) {
  double total = 0;
  std::vector<std::pair<double, int>> beside[2];  // (seconds, rounds) of one-thread rows, by page size
  bool part_check = first_init && !shape.serial_part_checked;
  for (const auto& row : shape.rows) {
    const double whole_s = row_seconds(row, shape.bytes, value, rates);
    const int rounds = rounds_of(shape, whole_s / fastest);
    const double s = row_seconds(row, measured_bytes(shape, row), value, rates);
    if (part_check && s < whole_s) {
      total += whole_s;  // the check: the run's first serial row on the whole array too, once
      part_check = false;
    }
    const bool one_thread = row.one_thread || (!value && row.one_thread_when_zero);
    if (one_thread && shape.side_by_side >= 2) beside[row.huge_pages ? 1 : 0].emplace_back(s, rounds);
    else total += rounds * s;
  }
  bool check = first_init;
  for (const auto& group : beside) {
    for (int round = 0;; ++round) {
      std::vector<double> going;
      for (const auto& [s, rounds] : group) {
        if (rounds > round) going.push_back(s);
      }
      if (going.empty()) break;
      if (check && going.size() >= 2) {
        total += going.front();
        check = false;
      }
      for (std::size_t at = 0; at < going.size(); at += shape.side_by_side) {
        const auto end = going.begin() + static_cast<std::ptrdiff_t>(std::min(going.size(), at + shape.side_by_side));
        total += *std::max_element(going.begin() + static_cast<std::ptrdiff_t>(at), end);
      }
    }
  }
  return total;
}

std::string minutes(double seconds) {
  char text[32];
  if (seconds < 90) std::snprintf(text, sizeof text, "%.0f s", seconds);
  else std::snprintf(text, sizeof text, "%.1f min", seconds / 60);
  return text;
}

}  // namespace

int expected_rounds(double times_the_fastest) {
  if (times_the_fastest >= 15) return 1;
  if (times_the_fastest >= 5) return 2;
  if (times_the_fastest >= 3) return 3;
  return 4;
}

RunEstimate estimate_run(const RunShape& shape, const MeasuredRates& measured) {
  RunEstimate estimate;
  MeasuredRates rates = measured;
  // A calibration of every thread's huge-page fault-in below kImplausibleOfWriting of the rate of
  // writing memory already in met memory its host had not backed yet: on the 16-vCPU GPU hosts the
  // small fresh arrays faulted in at 7.7 and 8.8 GB/s (0.11 and 0.12 of writing) where the run's
  // 32 GiB rows then did at 56.5 and 61.9, and the estimate was 1.5x the run. It is priced at the
  // share of writing the rows achieved instead. (On the 2-vCPU guest the calibration's share was
  // 0.37 and 0.73 in two runs, its rows' 0.82: left as measured.)
  if (rates.parallel_gb_per_s < kImplausibleOfWriting * rates.faulted_gb_per_s) {
    rates.parallel_gb_per_s = kHugeFaultInOfWriting * rates.faulted_gb_per_s;
  }
  // Huge pages are never priced slower than base pages either: a calibration that found them so
  // met a passing stall (on the 2-vCPU guest, 1.4 GB/s where the run's own rows then faulted 16, and
  // the estimate was 1.5x the run).
  rates.parallel_gb_per_s = std::max(rates.parallel_gb_per_s, rates.parallel_base_gb_per_s);
  if (rates.serial_gb_per_s <= 0 || rates.serial_huge_gb_per_s <= 0 || rates.parallel_gb_per_s <= 0 ||
      rates.faulted_gb_per_s <= 0 || rates.free_gb_per_s <= 0 || rates.free_huge_gb_per_s <= 0) {
    return estimate;
  }
  const double gb = static_cast<double>(shape.bytes) / 1e9;
  const double fresh_huge = gb / rates.parallel_gb_per_s + gb / rates.free_huge_gb_per_s;  // made, faulted, freed
  for (int init = 0; init < shape.inits; ++init) {
    const bool value = init == 1;
    double fastest = 0;
    for (const auto& row : shape.rows) {
      const double s = row_seconds(row, shape.bytes, value, rates);
      fastest = fastest == 0 ? s : std::min(fastest, s);
    }
    estimate.rows_seconds += rows_seconds(shape, rates, value, fastest, init == 0);
    // Each round: the limit beside the rows (1 GiB at most, two fills) and a huge-page warm-up.
    const double limit_gb = std::min(gb, 1.073741824);
    estimate.fixed_seconds += rounds_of(shape, 1.0) * (2 * limit_gb / rates.faulted_gb_per_s + fresh_huge);
  }
  // The limit, and four fill methods on fresh and on faulted-in memory, limit_reps times.
  estimate.fixed_seconds += shape.limit_reps * (fresh_huge + gb / rates.faulted_gb_per_s +
                                                4 * (fresh_huge + gb / rates.faulted_gb_per_s));
  if (shape.repeat > 0) {
    // Six variants, each iteration beside a floor: two fresh (parallel), two serial (adaptive: far
    // behind after two or three), two reusing memory (at the limit), and the floors at the limit.
    const double floor = gb / rates.faulted_gb_per_s;
    const double serial = gb / rates.serial_gb_per_s + gb / rates.free_gb_per_s;
    // A serial variant stops after 2 iterations at 15 times its floor, 3 otherwise (repeat.cpp).
    const int fast_iterations = std::min(shape.repeat, 4), slow_iterations = std::min(shape.repeat, serial >= 15 * floor ? 2 : 3);
    // Each serial iteration on --serial-part's bytes where the array is larger.
    const double serial_measured = serial * static_cast<double>(measured_bytes(shape, {.serial = true})) / static_cast<double>(shape.bytes);
    estimate.fixed_seconds += fast_iterations * (fresh_huge + floor) + 2 * slow_iterations * (serial_measured + floor) +
                              3 * fast_iterations * (floor + floor);
  }
  // Each allocator: malloc + memset and calloc + first touch, zero only, serial on base pages.
  const EstimatedRow serial{.serial = true};
  double fastest_zero = 0;
  for (const auto& row : shape.rows) {
    const double s = row_seconds(row, shape.bytes, false, rates);
    fastest_zero = fastest_zero == 0 ? s : std::min(fastest_zero, s);
  }
  if (fastest_zero > 0) {
    const double whole_s = row_seconds(serial, shape.bytes, false, rates);
    const double s = row_seconds(serial, measured_bytes(shape, serial), false, rates);
    // Its two rows side by side where one-thread rows are: one row's time a round.
    const int rows_at_a_time = shape.side_by_side >= 2 ? 2 : 1;
    estimate.allocator_seconds = shape.allocator_runs * (2 / rows_at_a_time) * rounds_of(shape, whole_s / fastest_zero) * s;
  }
  estimate.seconds = estimate.rows_seconds + estimate.fixed_seconds + estimate.allocator_seconds;
  return estimate;
}

std::string describe(const RunEstimate& estimate, const MeasuredRates& rates, std::size_t side_by_side,
                     std::size_t serial_part_bytes) {
  char rates_text[400];
  std::snprintf(rates_text, sizeof rates_text,
                "one thread %.1f GB/s on base pages and %.1f on huge pages (a value item by item %.1f and %.1f), every "
                "thread %.1f faulting (%.1f on base pages, %.1f and %.1f populating) and %.1f writing, freeing %.1f and %.1f",
                rates.serial_gb_per_s, rates.serial_huge_gb_per_s, rates.serial_value_gb_per_s,
                rates.serial_value_huge_gb_per_s, rates.parallel_gb_per_s, rates.parallel_base_gb_per_s,
                rates.populate_gb_per_s, rates.populate_huge_gb_per_s, rates.faulted_gb_per_s, rates.free_gb_per_s,
                rates.free_huge_gb_per_s);
  const std::string beside =
      side_by_side >= 2 ? ", one-thread rows " + std::to_string(side_by_side) + " side by side" : std::string();
  char part_size[32];
  std::snprintf(part_size, sizeof part_size, "%g %s",
                static_cast<double>(serial_part_bytes) / (serial_part_bytes >= (1ULL << 30) ? 1073741824.0 : 1048576.0),
                serial_part_bytes >= (1ULL << 30) ? "GiB" : "MiB");
  const std::string part = serial_part_bytes > 0 ? std::string(", one thread's rows on ") + part_size + " of the array"
                                                 : std::string();
  return "about " + minutes(estimate.seconds) + " (the ranked rows " + minutes(estimate.rows_seconds) +
         ", the limit, fills and repeat scenario " + minutes(estimate.fixed_seconds) +
         (estimate.allocator_seconds > 0 ? ", the other allocators " + minutes(estimate.allocator_seconds) : "") +
         "): a model from rates measured just now (" + rates_text + "), each row's rounds as the adaptive rule would give them" +
         beside + part;
}

}  // namespace memcost::probe
