// Streaming attribution (see attribution.hpp for the contract).
#include "trace/attribution/attribution.hpp"

#include <algorithm>
#include <utility>

#include "trace/attribution/linux_abi.hpp"

namespace memcost::trace {
namespace {

using namespace linux_abi;

bool failed(const trace::MappingCall& call) {
  const auto result = call.result;
  return result < 0 && result > -4096;
}

std::uint64_t duration(const trace::MappingCall& call) {
  return call.exit_ns > call.enter_ns ? call.exit_ns - call.enter_ns : 0;
}

// When a call's change to the address space is applied. A mapping is known only once its call has
// returned; a removal (munmap, free) is applied from its entry: the memory may be gone, and mapped
// again by another thread, before the removing thread reads the clock on its way out (a thread
// preempted there made whole 64 MiB buffers of node lose their site: the new buffer's malloc came
// first by exit time, and the late free took it away).
std::uint64_t takes_effect_ns(const trace::MappingCall& call) {
  return call.kind == CallKind::munmap || call.kind == CallKind::free ? call.enter_ns : call.exit_ns;
}

}  // namespace

void Attribution::stack(std::uint32_t id, const std::vector<trace::Frame>& frames) {
  if (stacks) stacks->stack(id, frames);
}

void Attribution::call(const trace::MappingCall& call) {
  ++calls_seen_;
  pending_calls_.push_back(call);
  most_pending_ = std::max(most_pending_, pending_calls_.size() + pending_faults_.size());
}

void Attribution::fault(const trace::Fault& fault) {
  ++(fault.counted ? faults_seen_ : touch_samples_seen_);
  pending_faults_.push_back(fault);
  most_pending_ = std::max(most_pending_, pending_calls_.size() + pending_faults_.size());
}

void Attribution::cpu_sample(const trace::CpuSample& sample) {
  pending_samples_.push_back(sample);
  most_pending_ = std::max(most_pending_, pending_calls_.size() + pending_faults_.size() + pending_samples_.size());
}

void Attribution::region_faults(const trace::RegionFaults& counts) {
  faults_seen_ += counts.faults;
  pending_regions_.push_back(counts);
  most_pending_ = std::max(most_pending_, pending_calls_.size() + pending_faults_.size() + pending_regions_.size());
}

void Attribution::call_faults(const trace::CallFaults& faults) {
  faults_seen_ += faults.faults;
  faults_in_calls_ += faults.faults;
  CallFaultsSummary& summary = calls_faulting_[{faults.stack, faults.syscall}];
  ++summary.calls;
  summary.faults += faults.faults;
  summary.call_ns += faults.exit_ns > faults.enter_ns ? faults.exit_ns - faults.enter_ns : 0;
  pending_call_faults_.push_back(faults);
  most_pending_ = std::max(most_pending_, pending_calls_.size() + pending_faults_.size() + pending_call_faults_.size());
}

void Attribution::process(const trace::ProcessEvent& event) {
  if (stacks) stacks->process(event);
  if (event.change == trace::ProcessChange::exit) return;
  // Each start, fork and exec begins a program of this pid, in time order. A fork and the child's
  // exec can come from two CPUs' buffers in either order: insert by time, not by arrival.
  auto& programs = programs_[event.pid];
  programs.insert(std::upper_bound(programs.begin(), programs.end(), event.time_ns), event.time_ns);
  if (event.change != trace::ProcessChange::start) pending_forks_.push_back(event);
}

std::uint32_t Attribution::program_of(int pid, std::uint64_t time_ns) const {
  auto found = programs_.find(pid);
  if (found == programs_.end()) return 0;
  const auto& begins = found->second;
  auto after = std::upper_bound(begins.begin(), begins.end(), time_ns);
  return after == begins.begin() ? 0 : static_cast<std::uint32_t>(after - begins.begin() - 1);
}

void Attribution::settle(std::uint64_t until_ns) {
  std::stable_sort(pending_calls_.begin(), pending_calls_.end(),
                   [](const auto& a, const auto& b) { return takes_effect_ns(a) < takes_effect_ns(b); });
  std::stable_sort(pending_faults_.begin(), pending_faults_.end(),
                   [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(pending_forks_.begin(), pending_forks_.end(),
                   [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(pending_samples_.begin(), pending_samples_.end(),
                   [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(pending_regions_.begin(), pending_regions_.end(),
                   [](const auto& a, const auto& b) { return a.last_ns < b.last_ns; });
  std::stable_sort(pending_call_faults_.begin(), pending_call_faults_.end(),
                   [](const auto& a, const auto& b) { return a.exit_ns < b.exit_ns; });
  std::size_t calls = 0, faults = 0, forks = 0, samples = 0, regions = 0, in_calls = 0;
  // Faults, regions' counts, calls' faults and CPU samples before `time_ns`, in time order between them.
  auto faults_before = [&](std::uint64_t time_ns) {
    while (true) {
      const std::uint64_t fault_at = faults < pending_faults_.size() ? pending_faults_[faults].time_ns : UINT64_MAX;
      const std::uint64_t sample_at = samples < pending_samples_.size() ? pending_samples_[samples].time_ns : UINT64_MAX;
      const std::uint64_t region_at = regions < pending_regions_.size() ? pending_regions_[regions].last_ns : UINT64_MAX;
      const std::uint64_t in_call_at =
          in_calls < pending_call_faults_.size() ? pending_call_faults_[in_calls].exit_ns : UINT64_MAX;
      if (std::min({fault_at, sample_at, region_at, in_call_at}) >= time_ns) break;
      if (in_call_at <= std::min({fault_at, sample_at, region_at})) charge(pending_call_faults_[in_calls++]);
      else if (region_at <= std::min(fault_at, sample_at)) charge(pending_regions_[regions++]);
      else if (fault_at <= sample_at) charge(pending_faults_[faults++]);
      else charge(pending_samples_[samples++]);
    }
  };
  while (true) {
    const std::uint64_t call_at = calls < pending_calls_.size() ? takes_effect_ns(pending_calls_[calls]) : UINT64_MAX;
    const std::uint64_t fork_at = forks < pending_forks_.size() ? pending_forks_[forks].time_ns : UINT64_MAX;
    if (calls == pending_calls_.size() && forks == pending_forks_.size()) break;
    const std::uint64_t next = std::min(call_at, fork_at);
    if (next > until_ns) break;
    faults_before(next);
    if (fork_at <= call_at) {
      const auto& event = pending_forks_[forks++];
      if (event.change == trace::ProcessChange::fork) {
        // The child starts with every mapping its parent has: both now hold each piece.
        Space& child = spaces_[event.pid];
        child = spaces_[event.parent];
        for (const auto& [start, piece] : child.pieces) live_[piece.mapping].live_bytes += piece.end - start;
      } else {
        // An exec'd program starts with an empty address space: the old one's mappings end here.
        auto space = spaces_.find(event.pid);
        if (space == spaces_.end()) continue;
        for (const auto& [start, piece] : space->second.pieces) release(piece.mapping, piece.end - start, false);
        spaces_.erase(space);
      }
    } else {
      trace::MappingCall& call = pending_calls_[calls++];
      if (auto same = same_stacks_.find(call.stack); same != same_stacks_.end()) call.stack = same->second;
      apply(call);
    }
  }
  faults_before(until_ns == UINT64_MAX ? UINT64_MAX : until_ns + 1);
  if (until_ns == UINT64_MAX) {
    for (; faults < pending_faults_.size(); ++faults) charge(pending_faults_[faults]);
    for (; samples < pending_samples_.size(); ++samples) charge(pending_samples_[samples]);
    for (; regions < pending_regions_.size(); ++regions) charge(pending_regions_[regions]);
    for (; in_calls < pending_call_faults_.size(); ++in_calls) charge(pending_call_faults_[in_calls]);
  }
  pending_calls_.erase(pending_calls_.begin(), pending_calls_.begin() + static_cast<std::ptrdiff_t>(calls));
  pending_faults_.erase(pending_faults_.begin(), pending_faults_.begin() + static_cast<std::ptrdiff_t>(faults));
  pending_forks_.erase(pending_forks_.begin(), pending_forks_.begin() + static_cast<std::ptrdiff_t>(forks));
  pending_samples_.erase(pending_samples_.begin(), pending_samples_.begin() + static_cast<std::ptrdiff_t>(samples));
  pending_regions_.erase(pending_regions_.begin(), pending_regions_.begin() + static_cast<std::ptrdiff_t>(regions));
  pending_call_faults_.erase(pending_call_faults_.begin(),
                             pending_call_faults_.begin() + static_cast<std::ptrdiff_t>(in_calls));
  if (stacks) stacks->settle(until_ns);
}

void Attribution::finish() {
  settle(UINT64_MAX);
  // Faults of a mapping call whose own record never came (lost): outside.
  for (const trace::CallFaults& faults : std::exchange(awaiting_mapping_, {})) {
    faults_[{0, kOutside, faults.stack, faults.pid, program_of(faults.pid, faults.exit_ns), false}] += faults.faults;
  }
  std::vector<std::uint64_t> ids;
  ids.reserve(live_.size());
  for (const auto& [id, mapping] : live_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (std::uint64_t id : ids) retire(id);
  spaces_.clear();
}

Attribution::TracedMapping* Attribution::mapping_at(int pid, std::uint64_t address) {
  auto space = spaces_.find(pid);
  if (space == spaces_.end()) return nullptr;
  auto& pieces = space->second.pieces;
  auto after = pieces.upper_bound(address);
  if (after == pieces.begin()) return nullptr;
  auto piece = std::prev(after);
  return address < piece->second.end ? &live_[piece->second.mapping] : nullptr;
}

void Attribution::add_faults(TracedMapping& mapping, std::uint64_t region_number, const FaultKey& key, std::uint64_t count) {
  Region& region = mapping.regions[region_number];
  if (region.faults == 0 && count == 1) {
    // Its kind is known only when the mapping ends: one fault in the region may be a huge page.
    region = {1, key.touch_stack, key.pid, key.program};
    return;
  }
  if (region.faults == 1 && !region.counted) {  // more faults: the first was a base page too
    ++faults_[{key.allocation_stack, key.allocation_call, region.first_touch, region.pid, region.program, false}];
    ++mapping.faults_base;
    region.counted = true;
  }
  region.faults += static_cast<std::uint32_t>(count);
  mapping.faults_base += count;
  faults_[key] += count;
}

void Attribution::charge(const trace::Fault& fault) {
  const std::uint32_t program = program_of(fault.pid, fault.time_ns);
  FaultKey key{0, kOutside, fault.stack, fault.pid, program, false};
  TracedMapping* mapping = mapping_at(fault.pid, fault.address);
  if (mapping) {
    key.allocation_stack = mapping->origin.stack;
    key.allocation_call = mapping->origin.call;
  }
  last_fault_[fault.tid] = key;
  if (!fault.counted) {  // a touching stack only: the fault is in the kernel's counts
    TouchSamples& touch = touch_samples_[key];
    ++touch.samples;
    touch.faults += fault.period;
    return;
  }
  if (!mapping) {
    ++faults_[key];
    return;
  }
  if (mapping->first_tid == 0) mapping->first_tid = fault.tid;
  else if (mapping->first_tid != fault.tid) mapping->one_thread = false;
  add_faults(*mapping, fault.address / huge_bytes_, key, 1);
}

// A region's faults, split between the mappings live in it at its last fault by the pages each
// holds (within one generation a page stays in one mapping). A page that faulted more than once
// gives its extra faults to the first mapping with pages here.
void Attribution::charge(const trace::RegionFaults& counts) {
  const std::uint32_t program = program_of(counts.pid, counts.last_ns);
  constexpr std::uint64_t kPages = trace::kRegionBytes / trace::kRegionPageBytes;
  std::uint64_t pages_faulted = 0;
  for (std::uint64_t word : counts.pages) pages_faulted += static_cast<std::uint64_t>(__builtin_popcountll(word));
  std::uint64_t extra = counts.faults > pages_faulted ? counts.faults - pages_faulted : 0;
  std::uint64_t outside = 0;
  for (std::uint64_t page = 0; page < kPages;) {
    if (!(counts.pages[page / 64] >> (page % 64) & 1)) {
      ++page;
      continue;
    }
    const std::uint64_t address = counts.start + page * trace::kRegionPageBytes;
    TracedMapping* mapping = mapping_at(counts.pid, address);
    // The pages from here that fall in the same mapping (or in none).
    std::uint64_t end_page = kPages;
    if (auto space = spaces_.find(counts.pid); space != spaces_.end()) {
      auto after = space->second.pieces.upper_bound(address);
      std::uint64_t limit = after == space->second.pieces.end() ? UINT64_MAX : after->first;
      if (mapping) limit = std::min(limit, std::prev(after)->second.end);
      if (limit < counts.start + trace::kRegionBytes) end_page = (limit - counts.start + trace::kRegionPageBytes - 1) / trace::kRegionPageBytes;
    }
    std::uint64_t pages = 0;
    for (; page < end_page; ++page) pages += counts.pages[page / 64] >> (page % 64) & 1;
    if (!mapping) {
      outside += pages;
      continue;
    }
    if (mapping->first_tid == 0) mapping->first_tid = counts.first_tid;
    if (!counts.one_thread || mapping->first_tid != counts.first_tid) mapping->one_thread = false;
    const FaultKey key{mapping->origin.stack, mapping->origin.call, 0, counts.pid, program, false};
    const std::uint64_t here = pages + std::exchange(extra, 0);
    add_faults(*mapping, counts.start / huge_bytes_, key, here);
    charge_time(counts, key, static_cast<double>(here) / static_cast<double>(counts.faults));
  }
  const FaultKey outside_key{0, kOutside, 0, counts.pid, program, false};
  if (outside + extra > 0) {
    faults_[outside_key] += outside + extra;
    charge_time(counts, outside_key, static_cast<double>(outside + extra) / static_cast<double>(counts.faults));
  }
  if (counts.faults == 0 && counts.timings_ended > 0) {
    // Time alone: a timed fault's page count was updated after its region was read. Its fault is
    // charged already; its time goes to the mapping at the region's start, or outside.
    const TracedMapping* mapping = mapping_at(counts.pid, counts.start);
    charge_time(counts, mapping ? FaultKey{mapping->origin.stack, mapping->origin.call, 0, counts.pid, program, false}
                                : outside_key, 1.0);
  }
}

void Attribution::charge(const trace::CallFaults& call) {
  const std::uint32_t program = program_of(call.pid, call.exit_ns);
  // The bytes of each live mapping's 2 MiB regions inside the call's range: the kernel faulted in
  // the pages there that were not yet present, so each region gets its share by size.
  struct Part {
    TracedMapping* mapping;
    std::uint64_t region, bytes;
  };
  std::vector<Part> parts;
  std::uint64_t covered = 0;
  const auto space = spaces_.find(call.pid);
  const auto cover = [&](std::uint64_t start, std::uint64_t length) {
    const std::uint64_t end = start + length;
    if (space == spaces_.end() || length == 0 || end <= start) return;
    auto& pieces = space->second.pieces;
    auto first = pieces.upper_bound(start);
    if (first != pieces.begin()) --first;
    for (auto it = first; it != pieces.end() && it->first < end; ++it) {
      const Piece& piece = it->second;
      if (piece.end <= start) continue;
      const std::uint64_t from = std::max(it->first, start), to = std::min(piece.end, end);
      for (std::uint64_t at = from; at < to;) {
        const std::uint64_t region_end = std::min(to, (at / huge_bytes_ + 1) * huge_bytes_);
        parts.push_back({&live_[piece.mapping], at / huge_bytes_, region_end - at});
        covered += region_end - at;
        at = region_end;
      }
    }
  };
  cover(call.start, call.length);
  for (const trace::CallFaults::Range& range : call.further) cover(range.start, range.length);
  if (parts.empty() && makes_its_range(call) && awaiting_mapping_.size() < kAwaitingMappingKept) {
    // The mapping this call made and faulted in (MAP_POPULATE): its own record of the same return
    // can come a few microseconds later (another program on the same tracepoint). Charged when it
    // is applied (apply), or outside at the end.
    awaiting_mapping_.push_back(call);
    return;
  }
  if (parts.empty()) {
    faults_[{0, kOutside, call.stack, call.pid, program, false}] += call.faults;
    return;
  }
  // Whole faults in proportion to the bytes, the ones left over to the parts met first.
  std::uint64_t given = 0;
  std::vector<std::uint64_t> shares(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) given += shares[i] = call.faults * parts[i].bytes / covered;
  for (std::size_t i = 0; given < call.faults; i = (i + 1) % parts.size(), ++given) ++shares[i];
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (shares[i] == 0) continue;
    TracedMapping& mapping = *parts[i].mapping;
    if (mapping.first_tid == 0) mapping.first_tid = call.tid;
    if (mapping.first_tid != call.tid) mapping.one_thread = false;
    add_faults(mapping, parts[i].region, {mapping.origin.stack, mapping.origin.call, call.stack, call.pid, program, false},
               shares[i]);
  }
}

void Attribution::charge_time(const trace::RegionFaults& counts, const FaultKey& key, double share) {
  if (counts.timed_faults == 0 && counts.timings_ended == 0) return;
  FaultTime& time = fault_time_[key];
  time.timed_faults += share * static_cast<double>(counts.timed_faults);
  time.timings_ended += share * static_cast<double>(counts.timings_ended);
  time.kernel_ns += share * static_cast<double>(counts.fault_ns);
  time.kernel_ns_squares += share * static_cast<double>(counts.fault_ns_squares);
}

// A sample in the fault handler belongs to the fault its thread took last (the page-fault event
// fires as the handler starts, before any of the handler's time can be sampled).
void Attribution::charge(const trace::CpuSample& sample) {
  ++cpu_samples_;
  if (!sample.in_fault) return;
  if (sample.tracing) {
    ++cpu_samples_tracing_;
    return;
  }
  auto last = last_fault_.find(sample.tid);
  if (last == last_fault_.end()) {
    ++cpu_samples_unmatched_;
    return;
  }
  FaultTime& time = fault_time_[last->second];
  ++time.samples;
  time.zeroing += sample.zeroing ? 1 : 0;
}

std::uint64_t Attribution::make(int pid, std::uint64_t start, std::uint64_t length, const trace::MappingCall& call,
                                 bool anonymous) {
  Space& space = spaces_[pid];
  for (const auto& [displaced, bytes] : cut(space, start, start + length)) release(displaced, bytes, false);
  const std::uint64_t id = next_id_++;
  TracedMapping& mapping = live_[id];
  mapping.origin = {call.stack, static_cast<int>(call.kind)};
  mapping.length = mapping.live_bytes = length;
  mapping.map_ns = duration(call);
  mapping.made_ns = call.kind == CallKind::existing ? 0 : call.exit_ns;
  mapping.anonymous = anonymous;
  space.pieces[start] = {start + length, id};
  OriginSummary& origin = origins_[mapping.origin];
  ++origin.made;
  origin.bytes += length;
  origin.file_backed = origin.file_backed || !anonymous;
  newest_[mapping.origin] = id;
  most_live_ = std::max(most_live_, live_.size());
  return id;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> Attribution::overlaps(Space& space, std::uint64_t start,
                                                                            std::uint64_t end, std::uint64_t made_by_ns) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> found;
  auto at = space.pieces.upper_bound(start);
  if (at != space.pieces.begin()) --at;
  for (; at != space.pieces.end() && at->first < end; ++at) {
    if (at->second.end <= start || live_[at->second.mapping].made_ns > made_by_ns) continue;
    found.emplace_back(at->second.mapping, std::min(end, at->second.end) - std::max(start, at->first));
  }
  return found;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> Attribution::cut(Space& space, std::uint64_t start,
                                                                       std::uint64_t end, std::uint64_t made_by_ns) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> removed;
  auto at = space.pieces.upper_bound(start);
  if (at != space.pieces.begin()) --at;
  while (at != space.pieces.end() && at->first < end) {
    const std::uint64_t piece_start = at->first;
    const Piece piece = at->second;
    if (piece.end <= start || live_[piece.mapping].made_ns > made_by_ns) {
      ++at;
      continue;
    }
    removed.emplace_back(piece.mapping, std::min(end, piece.end) - std::max(start, piece_start));
    at = space.pieces.erase(at);
    if (piece_start < start) space.pieces[piece_start] = {start, piece.mapping};
    if (piece.end > end) at = space.pieces.emplace(end, Piece{piece.end, piece.mapping}).first;
  }
  return removed;
}

void Attribution::free_range(Space& space, std::uint64_t start, std::uint64_t length, const trace::MappingCall& call,
                             bool whole) {
  // A removal recorded late (its thread preempted before it wrote the record) leaves alone what
  // another thread mapped there after it began.
  auto removed = whole ? cut(space, start, start + length, call.enter_ns)
                       : overlaps(space, start, start + length, call.enter_ns);
  std::uint64_t total = 0;
  for (const auto& [id, bytes] : removed) total += bytes;
  for (const auto& [id, bytes] : removed) {
    TracedMapping& mapping = live_[id];
    origins_[mapping.origin].freed_bytes += bytes;
    mapping.free_ns += duration(call) * bytes / std::max<std::uint64_t>(total, 1);
    if (whole) release(id, bytes, true);
  }
}

std::uint64_t Attribution::block_at(Space& space, std::uint64_t start) {
  auto found = space.pieces.find(start);
  return found == space.pieces.end() ? 0 : found->second.mapping;
}

// mmap and mremap: the range a call's faults fell in is the mapping the call itself returned.
bool Attribution::makes_its_range(const trace::CallFaults& call) {
  return call.length > 0 && (call.syscall == linux_abi::kSysMmap || call.syscall == linux_abi::kSysMremap);
}

void Attribution::apply(const trace::MappingCall& call) {
  apply_to_space(call);
  if (awaiting_mapping_.empty() || failed(call) || (call.kind != CallKind::mmap && call.kind != CallKind::mremap)) return;
  // The faults of the call that made this mapping, which came before it.
  const auto result = static_cast<std::uint64_t>(call.result);
  for (auto it = awaiting_mapping_.begin(); it != awaiting_mapping_.end(); ++it) {
    if (it->pid == call.pid && it->tid == call.tid && it->start == result) {
      const trace::CallFaults faults = *it;
      awaiting_mapping_.erase(it);
      charge(faults);
      return;
    }
  }
}

void Attribution::apply_to_space(const trace::MappingCall& call) {
  if (failed(call)) return;
  Space& space = spaces_[call.pid];
  const auto result = static_cast<std::uint64_t>(call.result);
  switch (call.kind) {
    case CallKind::mmap:
    case CallKind::existing:
      make(call.pid, result, call.length(), call, (call.mmap_flags() & kMapAnonymous) != 0);
      break;
    case CallKind::malloc:  // the interposer: a big block from malloc, calloc or an aligned allocation
      make(call.pid, result, call.length(), call, true);
      break;
    case CallKind::free:
      if (std::uint64_t block = block_at(space, call.address()); block && live_[block].made_ns <= call.enter_ns) {
        free_range(space, call.address(), live_[block].length, call, true);
      }
      break;
    case CallKind::realloc: {
      if (result == 0) break;  // failed: the old block stays
      const std::uint64_t block = call.address() ? block_at(space, call.address()) : 0;
      if (block == 0) {
        trace::MappingCall made = call;
        made.kind = CallKind::malloc;
        make(call.pid, result, call.new_length(), made, true);
        break;
      }
      TracedMapping& mapping = live_[block];
      cut(space, call.address(), call.address() + mapping.length);
      for (const auto& [displaced, bytes] : cut(space, result, result + call.new_length())) {
        if (displaced != block) release(displaced, bytes, false);
      }
      mapping.length = mapping.live_bytes = call.new_length();
      mapping.free_ns += duration(call);
      space.pieces[result] = {result + call.new_length(), block};
      break;
    }
    case CallKind::munmap:
      free_range(space, call.address(), call.length(), call, true);
      break;
    case CallKind::mremap: {
      auto moved = cut(space, call.address(), call.address() + call.length());
      if (moved.empty()) break;
      const std::uint64_t id = moved.front().first;
      TracedMapping& mapping = live_[id];
      std::uint64_t removed = 0;
      for (const auto& [piece, bytes] : moved) removed += piece == id ? bytes : 0;
      mapping.length += call.new_length() > call.length() ? call.new_length() - call.length() : 0;
      mapping.free_ns += duration(call);
      mapping.live_bytes = mapping.live_bytes - std::min(mapping.live_bytes, removed) + call.new_length();
      for (const auto& [displaced, bytes] : cut(space, result, result + call.new_length())) release(displaced, bytes, false);
      space.pieces[result] = {result + call.new_length(), id};
      break;
    }
    case CallKind::brk:
      apply_brk(space, call);
      break;
    case CallKind::madvise:
      if (call.advice() == kMadvDontneed || call.advice() == kMadvFree || call.advice() == kMadvRemove) {
        free_range(space, call.address(), call.length(), call, false);
      } else if (call.advice() == kMadvHugepage || call.advice() == kMadvNohugepage) {
        for (const auto& [id, bytes] : overlaps(space, call.address(), call.address() + call.length())) {
          (call.advice() == kMadvHugepage ? live_[id].huge_advised : live_[id].huge_refused) = true;
          if (call.advice() == kMadvNohugepage) live_[id].huge_refused_by = call.stack;
        }
      }
      break;
  }
}

// brk(addr): the break moves to the result. The preload library's records give the break before
// the call (break_before(); it sees no first brk(0) of glibc's); a brk(0) once the break is known asks
// and changes nothing: from the preload library, it is a marker (see interposer.c).
void Attribution::apply_brk(Space& space, const trace::MappingCall& call) {
  const auto result = static_cast<std::uint64_t>(call.result);
  if (space.brk_end == 0) space.brk_end = call.break_before() ? call.break_before() : result;
  if (result > space.brk_end) {
    space.unclaimed_heap.push_back(make(call.pid, space.brk_end, result - space.brk_end, call, true));
    if (space.unclaimed_heap.size() > kUnclaimedHeapKept) space.unclaimed_heap.erase(space.unclaimed_heap.begin());
  } else if (result < space.brk_end) {
    free_range(space, result, space.brk_end - result, call, true);
  } else if (call.address() == 0) {
    claim_heap(space, call);
  }
  space.brk_end = result;
}

void Attribution::claim_heap(Space& space, const trace::MappingCall& marker) {
  const OriginKey to{marker.stack, static_cast<int>(trace::CallKind::brk)};
  for (std::uint64_t id : space.unclaimed_heap) {
    auto found = live_.find(id);
    if (found == live_.end() || found->second.origin == to) continue;
    TracedMapping& mapping = found->second;
    if (auto from = origins_.find(mapping.origin); from != origins_.end()) {
      from->second.made -= std::min<std::uint64_t>(from->second.made, 1);
      from->second.bytes -= std::min(from->second.bytes, mapping.length);
    }
    if (auto newest = newest_.find(mapping.origin); newest != newest_.end() && newest->second == id) newest_.erase(newest);
    mapping.origin = to;
    OriginSummary& into = origins_[to];
    ++into.made;
    into.bytes += mapping.length;
    newest_[to] = id;
  }
  space.unclaimed_heap.clear();
}

void Attribution::release(std::uint64_t id, std::uint64_t bytes, bool freed) {
  auto found = live_.find(id);
  if (found == live_.end()) return;
  TracedMapping& mapping = found->second;
  mapping.live_bytes -= std::min(mapping.live_bytes, bytes);
  if (mapping.live_bytes > 0) return;
  mapping.freed = mapping.freed || freed;
  retire(id);
}

void Attribution::count_single_faults(TracedMapping& mapping) {
  const bool huge_possible = thp_ == ThpMode::always || (thp_ == ThpMode::madvise && mapping.huge_advised);
  const bool huge = huge_possible && !mapping.huge_refused && mapping.length >= huge_bytes_;
  for (auto& [number, region] : mapping.regions) {
    if (region.faults != 1 || region.counted) continue;
    region.counted = true;
    ++faults_[{mapping.origin.stack, mapping.origin.call, region.first_touch, region.pid, region.program, huge}];
    ++(huge ? mapping.faults_thp : mapping.faults_base);
  }
}

void Attribution::count_live() {
  for (auto& [id, mapping] : live_) count_single_faults(mapping);
}

void Attribution::retire(std::uint64_t id) {
  auto found = live_.find(id);
  if (found == live_.end()) return;
  TracedMapping& mapping = found->second;
  count_single_faults(mapping);
  OriginSummary& origin = origins_[mapping.origin];
  origin.map_ns += mapping.map_ns;
  origin.free_ns += mapping.free_ns;
  origin.huge_advised = origin.huge_advised || mapping.huge_advised;
  if (mapping.huge_refused_by) origin.huge_refused_by = mapping.huge_refused_by;
  auto count_into = [&mapping](SizeSummary& into) {
    ++into.freed;
    into.faults_base += mapping.faults_base;
    into.faults_thp += mapping.faults_thp;
    into.free_ns += mapping.free_ns;
    into.map_ns += mapping.map_ns;
  };
  if (mapping.freed) {
    // Outgrown: the same origin made a larger mapping after this one, and it is still live.
    auto newest = newest_.find(mapping.origin);
    auto successor = newest == newest_.end() || newest->second == id ? live_.end() : live_.find(newest->second);
    if (successor != live_.end() && successor->second.length > mapping.length &&
        successor->second.made_ns >= mapping.made_ns) {
      count_into(origin.outgrown);
      origin.grown_to_bytes = std::max(origin.grown_to_bytes, successor->second.length);
    }
    ++origin.freed;
    const bool room = origin.by_size.size() < kMaxSizes || origin.by_size.count(mapping.length);
    count_into(origin.by_size[room ? mapping.length : 0]);  // 0: the sizes past kMaxSizes
  }
  if (mapping.length > origin.largest_bytes) {
    origin.largest_bytes = mapping.length;
    origin.largest_faults_base = mapping.faults_base;
    origin.largest_faults_thp = mapping.faults_thp;
    origin.largest_one_thread = mapping.one_thread;
  }
  if (auto newest = newest_.find(mapping.origin); newest != newest_.end() && newest->second == id) newest_.erase(newest);
  live_.erase(found);
}

}  // namespace memcost::trace
