// The repeat scenario: the same array made, initialized and freed again and again, by each way a
// program would (fresh each time, a pool, a pooled std::vector, ...), each iteration set against
// a floor (one kept array filled again) measured beside it.
#pragma once

#include <cstddef>
#include <vector>

#include "probe/arguments.hpp"
#include "probe/emitter.hpp"
#include "probe/experiments/bigarray/settings.hpp"

namespace memcost::probe::bigarray {

// Each variant runs its iterations as a program would, and beside each one the floor (one kept
// array filled again) is taken: on a virtual machine the bandwidth the host gives moves within
// seconds, so each iteration is set against a floor measured beside it, and a row's ratio is the
// median of those pairs. (Taking turns between variants iteration by iteration was tried: a fresh
// array then always follows another variant's free of a whole array, and on this VM paid up to
// 12x for it. The floor frees nothing.) The floor writes by the fastest fill method, chosen once on
// the kept array.
void add_repeat_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter, std::size_t bytes,
                      const BudgetChoice& budget, unsigned threads);

}  // namespace memcost::probe::bigarray
