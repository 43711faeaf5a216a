// The costs experiment's parts beside its rows, each in a file of its own: memory reused at once
// against memory left idle (idle.cpp), first touch with 1..N threads (threads.cpp), the TLB
// shootdowns a free sends to other CPUs (shootdowns.cpp), and reusing a buffer against
// reallocating it per frame (reuse.cpp); the rows themselves (rows.cpp). Each adds its steps.
#pragma once

#include <vector>

#include "os/capabilities.hpp"
#include "probe/arguments.hpp"
#include "probe/emitter.hpp"
#include "probe/experiments/costs/settings.hpp"

namespace memcost::probe::costs {

struct Case {
  os::PageKind kind;
  Route route;
  std::size_t size;
};

// The rows' cases this machine can run: sizes within the budget, page kinds it offers.
std::vector<Case> row_cases(const Settings& s, const BudgetChoice& budget, const os::Capabilities& offered, Emitter& emitter);
// blocks: each case's warm-ups and repetitions back to back, so that the
// measured repetitions reuse memory freed a moment ago (the steady cost).
// rounds: every case once per round, each round in its own order shuffled
// from --order-seed (probe/rounds.hpp, as bigarray's ranked rows), so that
// drift over the run spreads over all cases; on a VM that hands free memory
// back to the host, the repetitions then also pay the host's faults (see the
// idle part), which is why blocks stay the default.
// The idle baseline is measured again before each block (or round).
void plan_rows(std::vector<Step>& plan, Emitter& emitter, const Settings& s, const std::vector<Case>& cases);

// Memory reused at once against memory that sat free for a while. On a VM
// that hands free memory back to the host (virtio-balloon free page
// reporting), the second kind faults in the host as well as in the guest.
void plan_idle_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, os::PageKind kind);
// First touch of one buffer by 1, 2, 4, ... N threads at once, and its second touch.
void plan_threads_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps);
// A written buffer freed alone and while threads that wrote it run on the other CPUs.
void plan_shootdowns_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps);
// A buffer per frame: reallocated (through malloc, the OS, an array_pool) or kept and reused.
void plan_reuse_part(std::vector<Step>& plan, Emitter& emitter, const Settings& settings, int reps);

}  // namespace memcost::probe::costs
