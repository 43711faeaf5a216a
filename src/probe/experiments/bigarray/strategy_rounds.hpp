// The ranked rows: every chosen strategy, for each initialization, measured round by round with
// the limit beside each round, each row until it has settled.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "probe/arguments.hpp"
#include "probe/emitter.hpp"
#include "probe/experiments/bigarray/settings.hpp"
#include "probe/experiments/bigarray/strategies.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe::bigarray {

// Every chosen strategy, for each initialization asked for, round by round, each round's order
// shuffled from --order-seed (probe/rounds.hpp), so that the host's slow minutes fall on every
// strategy alike. Rounds go on while any row has not settled (adaptive), or --reps times. One-thread
// rows are measured `side_by_side_rows` at a time, the run's first such batch checked against one
// of its rows measured alone (a warning and every row alone after, where it took over 10 % longer
// beside the others), unless `side_by_side_checked` (an allocator's run after a main run whose check
// held).
void add_strategy_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter,
                        const std::shared_ptr<std::vector<NamedStrategy>>& chosen, std::size_t count, unsigned threads,
                        std::size_t side_by_side_rows, bool side_by_side_checked);

}  // namespace memcost::probe::bigarray
