// The machine's limit (a parallel memset over memory already faulted in), the fill methods side
// by side, and what the machine did while a measurement ran: the yardsticks the bigarray
// experiment sets its rows against.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "probe/emitter.hpp"
#include "probe/experiments/bigarray/settings.hpp"
#include "probe/rounds.hpp"
#include "probe/arguments.hpp"

namespace memcost::probe::bigarray {

// The machine's limit: a parallel memset, one part per thread.
void parallel_memset(void* data, std::size_t bytes, unsigned threads, int byte);

// What the machine did while one repetition ran, for explaining one that took far longer than
// the others: compaction stalls, THP fallbacks, pages reclaimed (vmstat) and steal time.
struct MachineEvents {
  std::map<std::string, std::uint64_t> vmstat;
  std::optional<std::uint64_t> steal_ns;
  std::optional<std::uint64_t> host_reported_bytes;
};

MachineEvents machine_events();
// What grew between two readings: compaction stalls, THP fallbacks, reclaimed pages, steal, memory
// handed to the host.
json events_between(const MachineEvents& before, const MachineEvents& after);

// Memory handed to the host during a fill beyond which the fill is taken again: a few MiB go now
// and then with no visible effect; a burst of hundreds of MiB cut a fresh fill from 10 to 3.9 GB/s.
constexpr std::uint64_t host_reporting_race_bytes = std::uint64_t{64} << 20;

// The limit measured in a strategy round: the faster of a parallel memset and parallel streaming
// stores (the two that lead on this machine) over memory faulted in once, writing what the round's
// rows write: zeros for zero-initialization (this machine writes zeros 2-2.5x as fast as any other
// byte, docs/bigarray.md), the work item's value otherwise. 1 GiB at most: far past any cache, and
// a round should not pay for a second copy of a big array.
constexpr std::size_t kRoundLimitBytes = std::size_t{1} << 30;
json round_limit(std::size_t bytes, unsigned threads, bool zeros);

// The machine's limit, and the fill methods side by side on fresh and faulted-in memory.
void add_limit_and_fill_steps(std::vector<Step>& steps, const Settings& s, Emitter& emitter, std::size_t bytes,
                              unsigned threads);

}  // namespace memcost::probe::bigarray
