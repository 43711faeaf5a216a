// Repetitions measured round by round across the rows a table ranks or compares, each round in its
// own order shuffled from a recorded seed: a slow minute of the host (memory bandwidth here drifts
// within minutes) lands on every row alike instead of on whichever rows ran then. The Python side's
// twin is memcost.stats.interleaved_order (trace --verify).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memcost::probe {

// rounds lists, each a permutation of 0 .. rows-1; the same seed gives the same lists.
[[nodiscard]] std::vector<std::vector<std::size_t>> interleaved_order(std::size_t rows, int rounds, std::uint64_t seed);

// A seed for a run that was not given one (it is recorded in the settings line either way).
[[nodiscard]] std::uint64_t fresh_seed();

// Adaptive repetitions: a row of a ranked table is repeated until one more round would tell the
// reader nothing new, at most `max_rounds` times. It has settled when
//  - tight: after `min_rounds` or more, the 95 % Student interval of its log-times' mean lies within
//    ±interval_half_width (its typical time known to about ±10 %), or
//  - far behind: even its fastest round took `far_behind` times the fastest row's median or more
//    after `min_rounds` rounds, or `far_behind_early` times after `far_behind_min_rounds`, or
//    `far_behind_single` times after its first (more rounds would only refine a rank among rows
//    no choice depends on). The fewer the rounds, the farther behind it must be: on this VM a fast
//    row's repetition takes 5-9x its usual time when its memory comes back from the host, and at
//    4 GiB a row judged 3x behind after two such rounds (make_big_array auto async: 1.02 and
//    2.18 s, against 0.27) was as fast as any in the others. One round 15x behind is beyond that
//    noise: on 16 CPUs at 32 GiB the single-threaded rows were 25-36x behind and took 17-24 s a
//    round, most of a 7-minute run (issue 41); on 2 vCPUs no row was that far behind at 4 GiB
//    (std::vector, the farthest, 13x), so there every row keeps two rounds at least, as before.
struct StoppingRule {
  int min_rounds = 3;
  int max_rounds = 5;
  double interval_half_width = 0.10;
  double far_behind = 3.0;
  int far_behind_min_rounds = 2;
  double far_behind_early = 5.0;
  double far_behind_single = 15.0;  // 0: never after one round
  // --reps N: every row N rounds, whatever its times.
  [[nodiscard]] static StoppingRule fixed(int rounds) {
    return {.min_rounds = rounds, .max_rounds = rounds, .far_behind_min_rounds = rounds, .far_behind_single = 0};
  }
};

enum class Settled { no, tight, far_behind, max_rounds };

// Whether a row with these times (seconds, one a round) has settled; `fastest_median_s` is the
// fastest row's median so far (0: unknown, so never "far behind"). Rows at max_rounds have.
[[nodiscard]] Settled settled(const std::vector<double>& seconds, double fastest_median_s, const StoppingRule& rule);
[[nodiscard]] const char* settled_name(Settled reason);
// The median of a few values (the fastest row's yardstick).
[[nodiscard]] double median_of(std::vector<double> values);

// How many one-thread rows (bigarray's NamedStrategy::one_thread) are measured side by side, each in a
// process of its own: the slowest rows of a big run on a many-core host (at 32 GiB on 16 CPUs, 15-25 s each,
// most of the run) leave every other core idle. `asked` (--side-by-side) when given; otherwise at
// most half the CPUs (two rows never share a core's two hyperthreads where there are enough cores),
// as many arrays as the budget holds, and as many as keep their writing under a third of the
// machine's limit (one_thread_gb_per_s each), so that none slows another. Pure.
struct SideBySideLimits {
  std::size_t asked = 0;
  std::size_t cpus = 1;
  std::size_t budget_bytes = 0, array_bytes = 0;
  double one_thread_gb_per_s = 0, limit_gb_per_s = 0;  // 0: not measured, not a limit
};
[[nodiscard]] std::size_t side_by_side_width(const SideBySideLimits& limits);

}  // namespace memcost::probe
