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

namespace memcost::probe::bigarray {

// Every chosen strategy, for each initialization asked for, round by round, each round's order
// shuffled from --order-seed (probe/rounds.hpp), so that the host's slow minutes fall on every
// strategy alike. Rounds go on while any row has not settled (adaptive), or --reps times.
void add_strategy_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter,
                        const std::shared_ptr<std::vector<NamedStrategy>>& chosen, std::size_t count, unsigned threads);

}  // namespace memcost::probe::bigarray
