// Writing a value over a big range: memset, ordinary stores, or non-temporal (streaming) stores.
//
// Ordinary stores to memory not in the cache first read each line for ownership, so a fill
// moves twice the bytes it writes; streaming stores write whole lines past the cache and do
// not. glibc's memset already streams above its own threshold; a value of varied bytes needs
// this code. Fresh memory is the exception: the kernel has just cleared each page as the fill
// faulted it, so its lines are in the cache and ordinary stores hit them, where streaming
// stores would first have to evict them. But which wins changes from machine to machine, and on
// a virtual machine from one half hour to the next (`memcost bigarray`, fill methods: fresh and
// faulted-in memory side by side). So fill_method::automatic measures: on first use in a process,
// for a big enough array, the candidates fill slices of the array itself, taking turns, and the
// fastest fills the rest and every later array of the same kind. Small arrays keep the rule.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/os.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define MEMCOST_STREAMING_STORES 1
#endif

namespace memcost::detail {
namespace {

constexpr std::size_t line_bytes = 64;

bool streams(std::size_t pattern_bytes) {
#ifdef MEMCOST_STREAMING_STORES
  return pattern_bytes != 0 && pattern_bytes <= line_bytes && (pattern_bytes & (pattern_bytes - 1)) == 0;
#else
  (void)pattern_bytes;
  return false;
#endif
}

// The cache level to stay out of; 0 when the OS does not say (then nothing streams by default).
std::size_t last_level_cache() {
  static const std::size_t bytes = os::last_level_cache_bytes().value_or(0);
  return bytes;
}

// Fill [data, data + warm + timed) on `threads` threads, each writing its share of the first
// `warm` bytes untimed, then its share of the next `timed` bytes timed: the warm part brings the
// caches to this method's steady state (stores leave dirty lines whose write-back would otherwise
// fall after the timing), so the timed part runs as the rest of the fill will. Returns the
// slowest thread's time for its timed share (thread start-up is not the method's).
std::uint64_t timed_fill_ns(unsigned char* data, std::size_t warm, std::size_t timed, std::size_t granule,
                            const void* pattern, std::size_t pattern_bytes, fill_method method, unsigned threads) {
  const std::size_t granules = timed / granule, warm_granules = warm / granule;
  threads = static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(threads, granules)));
  std::vector<std::uint64_t> took(threads, 0);
  std::vector<std::thread> workers;
  auto share = [threads, granule](std::size_t count, unsigned i) {
    return std::pair<std::size_t, std::size_t>{count * i / threads * granule, count * (i + 1) / threads * granule};
  };
  for (unsigned i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] {
      const auto [warm_first, warm_last] = share(warm_granules, i);
      fill_pattern(data + warm_first, warm_last - warm_first, pattern, pattern_bytes, method);
      const auto [first, last] = share(granules, i);
      const std::uint64_t start = measure::now_ns();
      fill_pattern(data + warm + first, last - first, pattern, pattern_bytes, method);
      took[i] = measure::now_ns() - start;
    });
  }
  for (auto& worker : workers) worker.join();
  return *std::max_element(took.begin(), took.end());
}

struct Decided {
  fill_method method;
  std::string measured;  // what was measured, for the reason given later
};

// Per process: what was measured, by kind of fill (fresh or not, a repeated byte or not, a value
// that streams or not, the page size).
std::mutex decided_mutex;
std::map<std::tuple<bool, bool, bool, std::size_t>, Decided> decided;

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::uint64_t fastest_round(const std::vector<std::uint64_t>& ns) { return *std::min_element(ns.begin(), ns.end()); }
std::uint64_t slowest_round(const std::vector<std::uint64_t>& ns) { return *std::max_element(ns.begin(), ns.end()); }

// The candidate with the fastest single round.
std::size_t quickest(const std::vector<std::vector<std::uint64_t>>& round_ns) {
  std::size_t best = 0;
  for (std::size_t k = 1; k < round_ns.size(); ++k) {
    if (fastest_round(round_ns[k]) < fastest_round(round_ns[best])) best = k;
  }
  return best;
}

}  // namespace

fill_choice choose_fill_method(fill_method asked, void* data, std::size_t bytes, const void* pattern,
                               std::size_t pattern_bytes, bool fresh, std::size_t page_bytes, unsigned threads) {
  const bool repeated = repeated_byte(pattern, pattern_bytes);
  const fill_method rule = resolve_fill_method(asked, bytes, pattern_bytes, repeated, fresh);
  if (asked != fill_method::automatic) return {rule, "asked for", 0, 0};
  std::vector<fill_method> candidates;
  if (repeated) candidates.push_back(fill_method::memset);
  candidates.push_back(fill_method::stores);
  if (streams(pattern_bytes)) candidates.push_back(fill_method::nontemporal);
  if (candidates.size() == 1) return {rule, "the only method for a value of this size", 0, 0};
  if (page_bytes >= (std::size_t{1} << 30)) {
    return {rule, "the default rule: on 1 GB pages a slice of the array cannot be fresh on its own", 0, 0};
  }
  // Each candidate, twice, in the order A B C C B A (drift in the machine's bandwidth falls on all
  // alike): a warm-up of twice the last-level cache (a victim cache fills from the levels above
  // it: once its size was not enough), then a timed slice (1/128 of the array, 32 to 64 MiB),
  // both of the array itself, written with the value as the fill would: what the measuring costs
  // is only the slower methods' extra time on them. Another method displaces the rule's only when
  // it won both rounds outright (pick_measured_fill): on this VM a lead of 15 % on the slices came
  // and went between repetitions. An array under four times what is measured keeps the rule.
  const std::size_t cache = last_level_cache();
  const std::size_t granule = std::lcm(std::max<std::size_t>(page_bytes, 4096), pattern_bytes);
  const auto whole = [granule](std::size_t bytes_wanted) { return std::max(granule, bytes_wanted / granule * granule); };
  const std::size_t warm = whole(2 * std::max(cache, std::size_t{4} << 20));
  const std::size_t timed = whole(std::clamp(bytes / 128, std::size_t{32} << 20, std::size_t{64} << 20));
  const std::size_t measured_bytes = 2 * candidates.size() * (warm + timed);
  if (cache == 0 || bytes < 4 * measured_bytes) {
    return {rule, "the default rule: an array under " + mib(4 * measured_bytes) + " is not worth measuring for" +
                      (cache ? "" : " (and the last-level cache's size is unknown)"), 0, 0};
  }
  const auto key = std::make_tuple(fresh, repeated, streams(pattern_bytes), page_bytes);
  {
    std::lock_guard<std::mutex> lock(decided_mutex);
    if (auto found = decided.find(key); found != decided.end()) {
      return {found->second.method, "measured earlier in this process: " + found->second.measured, 0, 0};
    }
  }
  std::vector<std::vector<std::uint64_t>> round_ns(candidates.size());
  auto* out = static_cast<unsigned char*>(data);
  std::size_t filled = 0;
  const std::uint64_t started = measure::now_ns();
  for (int round = 0; round < 2; ++round) {
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      const std::size_t which = round == 0 ? k : candidates.size() - 1 - k;
      round_ns[which].push_back(
          timed_fill_ns(out + filled, warm, timed, granule, pattern, pattern_bytes, candidates[which], threads));
      filled += warm + timed;
    }
  }
  const std::uint64_t took = measure::now_ns() - started;
  const std::size_t winner = pick_measured_fill(candidates, round_ns, rule), first = quickest(round_ns);
  const double winner_ns_per_byte = static_cast<double>(fastest_round(round_ns[winner])) / static_cast<double>(timed);
  const double as_winner_ns = winner_ns_per_byte * static_cast<double>(filled);
  std::ostringstream measured;
  measured.precision(3);
  const auto gb_per_s = [timed](std::uint64_t ns) { return static_cast<double>(timed) / static_cast<double>(ns); };
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    measured << (k ? ", " : "") << fill_method_name(candidates[k]) << " " << gb_per_s(slowest_round(round_ns[k]))
             << "-" << gb_per_s(fastest_round(round_ns[k])) << " GB/s";
  }
  measured << " (" << (fresh ? "fresh" : "faulted-in") << " memory, " << mib(filled) << " of an array, " << threads
           << (threads == 1 ? " thread" : " threads") << ", two rounds)";
  if (first != winner) {
    measured << "; the lead of " << fill_method_name(candidates[first]) << " is inside the rounds' spread, so the default "
             << fill_method_name(rule) << " stays";
  }
  {
    std::lock_guard<std::mutex> lock(decided_mutex);
    decided.emplace(key, Decided{candidates[winner], measured.str()});
  }
  const double extra_ns = static_cast<double>(took) - as_winner_ns;
  return {candidates[winner], "measured now: " + measured.str(), filled,
          extra_ns > 0 ? static_cast<std::uint64_t>(extra_ns) : 0};
}

std::size_t pick_measured_fill(const std::vector<fill_method>& candidates,
                               const std::vector<std::vector<std::uint64_t>>& round_ns, fill_method rule) {
  const std::size_t first = quickest(round_ns);
  const auto by_rule = std::find(candidates.begin(), candidates.end(), rule);
  if (by_rule == candidates.end()) return first;
  const auto default_index = static_cast<std::size_t>(by_rule - candidates.begin());
  return slowest_round(round_ns[first]) < fastest_round(round_ns[default_index]) ? first : default_index;
}

void forget_fill_measurements() {
  std::lock_guard<std::mutex> lock(decided_mutex);
  decided.clear();
}

fill_method resolve_fill_method(fill_method asked, std::size_t total_bytes, std::size_t pattern_bytes, bool repeated_byte,
                                bool fresh_pages) {
  switch (asked) {
    case fill_method::automatic:
      if (fresh_pages) return fill_method::stores;
      if (repeated_byte) return fill_method::memset;
      if (streams(pattern_bytes) && last_level_cache() != 0 && total_bytes > last_level_cache()) return fill_method::nontemporal;
      return fill_method::stores;
    case fill_method::memset: return repeated_byte ? fill_method::memset : fill_method::stores;
    case fill_method::nontemporal: return streams(pattern_bytes) ? fill_method::nontemporal : fill_method::stores;
    case fill_method::stores: return fill_method::stores;
  }
  return fill_method::stores;
}

const char* fill_method_name(fill_method method) {
  switch (method) {
    case fill_method::automatic: return "automatic";
    case fill_method::memset: return "memset";
    case fill_method::stores: return "stores";
    case fill_method::nontemporal: return "nontemporal";
  }
  return "";
}

void fill_pattern(void* destination, std::size_t bytes, const void* pattern, std::size_t pattern_bytes, fill_method method) {
  auto* out = static_cast<unsigned char*>(destination);
  if (method == fill_method::memset) {
    std::memset(out, *static_cast<const unsigned char*>(pattern), bytes);
    return;
  }
  // Whole lines of the pattern need a pattern that tiles a line and starts at a multiple of its size.
  if (line_bytes % pattern_bytes != 0 || reinterpret_cast<std::uintptr_t>(out) % pattern_bytes != 0) {
    for (; bytes >= pattern_bytes; out += pattern_bytes, bytes -= pattern_bytes) std::memcpy(out, pattern, pattern_bytes);
    return;
  }
  alignas(line_bytes) unsigned char line[line_bytes];
  for (std::size_t i = 0; i < line_bytes; i += pattern_bytes) std::memcpy(line + i, pattern, pattern_bytes);
  for (; bytes >= pattern_bytes && reinterpret_cast<std::uintptr_t>(out) % line_bytes != 0;
       out += pattern_bytes, bytes -= pattern_bytes) {
    std::memcpy(out, pattern, pattern_bytes);
  }
  const std::size_t lines = bytes / line_bytes;
#ifdef MEMCOST_STREAMING_STORES
  if (method == fill_method::nontemporal) {
    const auto* source = reinterpret_cast<const __m128i*>(line);
    const __m128i a = _mm_load_si128(source), b = _mm_load_si128(source + 1), c = _mm_load_si128(source + 2),
                  d = _mm_load_si128(source + 3);
    for (std::size_t i = 0; i < lines; ++i) {
      auto* target = reinterpret_cast<__m128i*>(out + i * line_bytes);
      _mm_stream_si128(target, a);
      _mm_stream_si128(target + 1, b);
      _mm_stream_si128(target + 2, c);
      _mm_stream_si128(target + 3, d);
    }
    // Streaming stores are weakly ordered: make them visible before this thread reports its part done.
    _mm_sfence();
  } else
#endif
  {
    for (std::size_t i = 0; i < lines; ++i) std::memcpy(out + i * line_bytes, line, line_bytes);
  }
  out += lines * line_bytes;
  bytes -= lines * line_bytes;
  for (; bytes >= pattern_bytes; out += pattern_bytes, bytes -= pattern_bytes) std::memcpy(out, pattern, pattern_bytes);
}

}  // namespace memcost::detail
