// How long a `bigarray` run will take, estimated before it starts from three rates measured in a
// fraction of a second, so that a 32 GiB run on a big machine says at once what it will cost.
// A model, not a measurement: every row's round is its bytes over the rate of its kind (serial on
// base pages, serial on huge pages, parallel), its rounds what the adaptive rule would give a row
// that far behind the fastest (probe/rounds.hpp), plus the limit, fill, repeat and allocator runs
// priced the same way. Pure: tested in tests/cpp/run_estimate_test.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace memcost::probe {

struct MeasuredRates {
  double serial_gb_per_s = 0;       // one thread writing fresh base pages (faults and writes)
  double serial_huge_gb_per_s = 0;  // one thread writing fresh huge pages
  double parallel_gb_per_s = 0;     // every thread faulting fresh huge pages in (make_big_array zero)
  double faulted_gb_per_s = 0;      // every thread writing memory already faulted in (the limit)
  double free_gb_per_s = 0;         // munmap of written base pages (every row frees its array)
  double free_huge_gb_per_s = 0;    // munmap of written huge pages
  // Every thread writing fresh base pages (a parallel row without huge pages: 4x slower than on
  // huge pages on the 2-vCPU guest, where pricing them at the huge rate made the estimate 0.6x
  // the run). 0: not measured, priced as on huge pages.
  double parallel_base_gb_per_s = 0;
  // One thread writing the value item by item (16-byte copies, as the serial rows' value init
  // does) over fresh base pages and fresh huge pages. On the 2-vCPU guest a 4 GiB run's serial
  // value rows wrote 2.1-2.7 GB/s on THP where memset's calibration said 7.5, and pricing them at
  // memset's rate made the estimate 0.67x the run (with this rate: 0.87x).
  // 0: not measured, priced as memset.
  double serial_value_gb_per_s = 0;
  double serial_value_huge_gb_per_s = 0;
  // Every thread's MADV_POPULATE_WRITE over fresh base pages and fresh THP: on the 16-vCPU GPU host
  // the populate rows faulted 32 GiB in at 6-8 GB/s where make_big_array's touch ran at 58, and
  // pricing them at the touch's rate left 20 s of a 70 s run out. 0: not measured, priced as the touch.
  double populate_gb_per_s = 0;
  double populate_huge_gb_per_s = 0;
};

struct EstimatedRow {
  bool serial = false;          // one thread does the work
  bool huge_pages = false;      // on THP or hugetlb
  bool populate_write = false;  // every thread's MADV_POPULATE_WRITE faults it in
  bool one_thread = false;      // measured side by side with other such rows (RunShape::side_by_side)
  bool one_thread_when_zero = false;  // so for a zero array only
};

struct RunShape {
  std::size_t bytes = 0;
  std::vector<EstimatedRow> rows;
  int inits = 2;           // zero, value
  int limit_reps = 3;
  int repeat = 10;         // most iterations of the repeat scenario (0: none)
  int allocator_runs = 0;  // other allocators, each two serial rows, zero only
  bool fixed_reps = false;
  int reps = 0;            // with fixed_reps
  // One-thread rows measured at once (strategy_rounds.hpp): a batch takes as long as its slowest
  // row, and the run's first batch adds one row measured alone (the check).
  std::size_t side_by_side = 1;
  // Serial rows measured on this many bytes when the array is larger (0: whole), and whether the
  // check (one such row whole and on its part, once) was made already by the main run.
  std::size_t serial_part_bytes = 0;
  bool serial_part_checked = false;
};

struct RunEstimate {
  double seconds = 0;
  double rows_seconds = 0, fixed_seconds = 0, allocator_seconds = 0;
};

// The rounds an adaptive row that far behind the fastest gets: 1 at 15x, 2 at 5x, 3 at 3x, else 4
// (a row within 3x settles, tight, after 3 to 5).
[[nodiscard]] int expected_rounds(double times_the_fastest);
[[nodiscard]] RunEstimate estimate_run(const RunShape& shape, const MeasuredRates& rates);
// "about 6 min (rows 4.1 min, ...)": for the line printed at the start.
// `serial_part_bytes`: the part serial rows are measured on (0: none: every row on the whole array).
[[nodiscard]] std::string describe(const RunEstimate& estimate, const MeasuredRates& rates, std::size_t side_by_side = 1,
                                   std::size_t serial_part_bytes = 0);

}  // namespace memcost::probe
