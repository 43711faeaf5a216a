// `memcost-probe scaling`: how the cost of one allocation grows with the number
// of allocations already outstanding.
//
// One sweep per case and repetition: allocate blocks one by one up to the
// largest count, timing every call; at each count of --counts, the running
// total is the time it took to allocate that many. Then free every block,
// newest first, timing every call: the free total for n is the sum over the
// last n frees, made with n, n-1, ..., 1 blocks outstanding. Per-call times
// are also summed in bins of consecutive calls, so that the cost of the next
// call at n (the marginal cost) is known along the whole sweep.
#include <algorithm>
#include <cmath>
#include <memory>

#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"

namespace memcost::probe {
namespace {

constexpr std::size_t bins_per_sweep = 128;
// Mappings the probe itself needs besides the sweep (libraries, stacks, heap).
constexpr std::uint64_t mapping_headroom = 200;
// Where bottom-up placement starts: far above the heap and the executable,
// far below the top-down mmap area.
constexpr std::uintptr_t bottom_up_start = std::uintptr_t{1} << 40;

std::vector<std::size_t> default_counts();

// Every flag, typed: CLI11 parses, checks and converts; the runner handles no strings.
struct Settings {
  std::vector<std::size_t> counts;  // empty: 4000, 8000, ..., 64000
  std::vector<std::size_t> block_sizes = {64 << 10, 264752, 1 << 20};
  std::vector<std::string> placements;  // empty: this platform's default set
  std::vector<std::string> shapes = {"mergeable", "distinct"};
  std::vector<std::string> commits = {"reserve", "commit"};
  std::string budget;
  int reps = 2;
  std::string preset;  // a seed's sweep, replayed exactly (apply_preset)
};

struct Case {
  std::size_t block_size = 0;
  std::string placement;  // "default", "top-down", "bottom-up", "legacy"
  bool distinct = false;
  bool commit = false;
};

std::vector<std::size_t> default_counts() {
  std::vector<std::size_t> counts;
  for (std::size_t step = 1; step <= 16; ++step) counts.push_back(step * 4000);
  return counts;
}

// One allocation, as the case asks for it. Only this call is timed.
os::Mapping allocate(const Case& c, void* hint) {
  os::MapRequest request{c.block_size, os::PageKind::system, hint, c.placement == "top-down"};
  return c.commit ? os::map(request) : os::reserve(request);
}

// The running total of `times` at each count the sweep checks, for the first `reached` calls.
json running_totals(const std::vector<std::uint64_t>& times, std::size_t reached, const std::vector<std::size_t>& counts) {
  json totals = json::array();
  std::uint64_t running = 0;
  std::size_t checkpoint = 0;
  for (std::size_t i = 0; i < reached && checkpoint < counts.size(); ++i) {
    running += times[i];
    if (i + 1 == counts[checkpoint]) {
      totals.push_back(running);
      ++checkpoint;
    }
  }
  return totals;
}

// The sums of `times` over consecutive bins of `bin` calls, whole bins only.
json bin_sums(const std::vector<std::uint64_t>& times, std::size_t reached, std::size_t bin) {
  json sums = json::array();
  for (std::size_t start = 0; start + bin <= reached; start += bin) {
    std::uint64_t sum = 0;
    for (std::size_t i = start; i < start + bin; ++i) sum += times[i];
    sums.push_back(sum);
  }
  return sums;
}

json sweep(const Case& c, const std::vector<std::size_t>& counts, bool read_mappings, Emitter& emitter) {
  const std::size_t max_count = counts.back();
  const std::size_t page = os::base_page_size();
  std::vector<os::Mapping> blocks;
  blocks.reserve(max_count);
  std::vector<std::uint64_t> alloc_ns(max_count, 0), free_ns(max_count, 0);
  json alloc_totals = json::array(), mappings = json::array();
  std::uint64_t running = 0, touch_ns = 0, hint_misses = 0;
  std::uintptr_t cursor = bottom_up_start;
  std::size_t next_checkpoint = 0;
  std::string failure, protect_failure;

  for (std::size_t i = 0; i < max_count; ++i) {
    void* hint = c.placement == "bottom-up" ? reinterpret_cast<void*>(cursor) : nullptr;
    auto t0 = measure::now_ns();
    os::Mapping block = allocate(c, hint);
    auto t1 = measure::now_ns();
    if (!block.status.ok()) {
      failure = block.status.message();
      break;
    }
    alloc_ns[i] = t1 - t0;
    running += t1 - t0;
    blocks.push_back(block);
    if (hint) {
      if (block.address != hint) ++hint_misses;
      // The kernel maps whole pages; a one-page gap keeps distinct blocks from
      // touching, while mergeable ones abut.
      std::size_t mapped = (c.block_size + page - 1) / page * page;
      cursor = reinterpret_cast<std::uintptr_t>(block.address) + mapped + (c.distinct ? page : 0);
    }
    if (c.commit) {
      auto t2 = measure::now_ns();
      os::touch_pages(block.address, 1, page);
      touch_ns += measure::now_ns() - t2;
    }
    if (c.distinct && i % 2 == 1 && os::neighbouring_mappings_merge()) {
      // Neighbours with different protection never merge into one mapping.
      os::Status status = os::protect(block.address, c.block_size, false);
      if (!status.ok() && protect_failure.empty()) protect_failure = status.message();
    }
    if (i + 1 == counts[next_checkpoint]) {
      alloc_totals.push_back(running);
      if (read_mappings) mappings.push_back(os::mapping_count().value_or(0));
      ++next_checkpoint;
    }
  }
  const std::size_t reached = blocks.size();
  for (std::size_t i = reached; i-- > 0;) {
    auto t0 = measure::now_ns();
    (void)os::release(blocks[i].address, blocks[i].size_bytes);
    free_ns[i] = measure::now_ns() - t0;
  }
  if (!failure.empty()) {
    emitter.warning("allocation_failed", "a " + human_size(c.block_size) + " " + (c.commit ? "committed" : "reserved") +
                                             " block failed after " + std::to_string(reached) + " blocks (" + failure +
                                             "); this case's sweep stops there");
  }
  if (!protect_failure.empty()) {
    emitter.warning("distinct_shape_failed", "the distinct shape could not make every other block read-only (" + protect_failure +
                                                 "): its blocks may have merged, so it measured the mergeable shape");
  }

  const std::size_t bin = std::max<std::size_t>(1, max_count / bins_per_sweep);
  return {{"counts", json(std::vector<std::size_t>(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(alloc_totals.size())))},
          {"alloc_total_ns", alloc_totals},
          {"free_total_ns", running_totals(free_ns, reached, counts)},
          {"mappings", read_mappings ? mappings : json(nullptr)},
          {"bin_calls", bin},
          {"alloc_bin_ns", bin_sums(alloc_ns, reached, bin)},
          {"free_bin_ns", bin_sums(free_ns, reached, bin)},
          {"touch_ns", touch_ns},
          {"hint_misses", hint_misses},
          {"reached", reached}};
}

// The seeds' sweeps by name. Placements: Windows asks for MEM_TOP_DOWN or not; on Linux the
// default layout is the top-down one and bottom-up is address hints from a low start.
void apply_preset(Settings& s, const CLI::App& command) {
  if (s.preset.empty()) return;
  for (const char* flag : {"--counts", "--block-sizes", "--placements", "--shapes", "--commits"}) {
    if (command.count(flag) > 0) {
      throw ProbeError(exit_bad_arguments, "bad_arguments",
                       std::string("--preset ") + s.preset + " sets " + flag + " itself: leave " + flag + " out");
    }
  }
  const bool windows_top_down = os::top_down_on_request();
  s.placements = windows_top_down ? std::vector<std::string>{"top-down", "default"} : std::vector<std::string>{"default", "bottom-up"};
  s.shapes = {"mergeable"};
  s.commits = {"commit"};  // MEM_COMMIT | MEM_RESERVE in both articles
  s.counts.clear();
  if (s.preset == "dawson2011") {
    // 64 KB blocks, 1,000 to 64,000 of them outstanding (shared/seeds/000).
    s.block_sizes = {64 << 10};
    for (std::size_t n = 1000; n <= 64000; n += 1000) s.counts.push_back(n);
  } else {
    // 264,752-byte blocks (where FastMM4 starts allocating from the top), 1 to 6,000 (shared/seeds/002).
    s.block_sizes = {264752};
    s.counts.push_back(1);
    for (std::size_t n = 100; n <= 6000; n += 100) s.counts.push_back(n);
  }
}

// 1. Parse: every flag typed and checked by CLI11.
void declare(CLI::App& command, Settings& s) {
  command.add_option("--counts", s.counts, "outstanding counts (default 4000,8000,...,64000)")
      ->delimiter(',')->check(CLI::Range(std::size_t{1}, std::size_t{999'999'999}))->default_str("4000,8000,...,64000");
  add_sizes_option(command, "--block-sizes", s.block_sizes, "64K,264752,1M", "block sizes");
  add_names_option(command, "--placements", s.placements, {"default", "top-down", "bottom-up", "legacy"},
                   "default, top-down (Windows), bottom-up (address hints), legacy (needs --legacy-layout); "
                   "default: this platform's set");
  add_names_option(command, "--shapes", s.shapes, {"mergeable", "distinct"}, "mergeable, distinct");
  add_names_option(command, "--commits", s.commits, {"reserve", "commit"},
                   "reserve (address space only), commit (and touch a byte per block)");
  command.add_option("--reps", s.reps, "sweeps per case")->check(CLI::Range(1, 100));
  command.add_option("--budget", s.budget, "memory budget (default 80% of available memory)");
  command.add_option("--preset", s.preset,
                     "a seed's sweep exactly: dawson2011 (64 KB blocks, 1,000..64,000, top-down and not), "
                     "fastmm2019 (264,752-byte blocks, 1..6,000, top vs bottom)")
      ->check(CLI::IsMember({"dawson2011", "fastmm2019"}));
}

// 2. Plan: the counts and placements this machine allows, the budget checked, one step per sweep.
std::vector<Step> plan(const Settings& s, Emitter& emitter) {
  const bool top_down_on_request = os::top_down_on_request();
  BudgetChoice budget = choose_budget(s.budget);

  std::vector<std::size_t> counts = s.counts.empty() ? default_counts() : s.counts;
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  std::vector<std::string> placements = s.placements;
  if (placements.empty()) {
    placements = os::legacy_layout_active() ? std::vector<std::string>{"legacy"}
                 : top_down_on_request      ? std::vector<std::string>{"default", "top-down"}
                                            : std::vector<std::string>{"default", "bottom-up"};
  }
  for (const auto& placement : placements) {
    if (placement == "legacy" && !os::legacy_layout_active()) {
      throw ProbeError(exit_unsupported, "legacy_layout_inactive",
                       "placement 'legacy' needs the legacy mmap layout: run the probe with --legacy-layout");
    }
    if (placement == "top-down" && !top_down_on_request) {
      throw ProbeError(exit_unsupported, "not_supported_here",
                       "placement 'top-down' is Windows' MEM_TOP_DOWN; Linux's default placement is already top-down");
    }
  }

  // Each block can be one mapping: stay below the kernel's limit.
  if (auto limit = os::max_map_count()) {
    std::uint64_t in_use = os::mapping_count().value_or(0);
    std::uint64_t room = *limit > in_use + mapping_headroom ? *limit - in_use - mapping_headroom : 0;
    if (counts.back() > room) {
      emitter.warning("capped_by_max_map_count",
                      "counts above " + std::to_string(room) + " were capped: vm.max_map_count is " + std::to_string(*limit) +
                          " and every distinct block is one mapping; as root, `sysctl vm.max_map_count=N` raises it");
      while (!counts.empty() && counts.back() > room) counts.pop_back();
      if (counts.empty() || counts.back() < room) counts.push_back(static_cast<std::size_t>(room));
    }
  }
  // Committed blocks are touched once: one base page each is resident at the end.
  if (std::find(s.commits.begin(), s.commits.end(), "commit") != s.commits.end()) {
    // The kernel accounts a committed block whole, touched or not.
    std::size_t largest_block = *std::max_element(s.block_sizes.begin(), s.block_sizes.end());
    require_within_budget(largest_block, budget, "--block-sizes " + human_size(largest_block) + " committed");
    require_within_budget(counts.back() * os::base_page_size(), budget, "--counts " + std::to_string(counts.back()) + " committed blocks");
  }

  std::vector<Step> steps;
  for (int rep = 0; rep < s.reps; ++rep) {
    for (std::size_t block : s.block_sizes) {
      for (const auto& placement : placements) {
        for (const auto& shape : s.shapes) {
          for (const auto& commit : s.commits) {
            const Case c{block, placement, shape == "distinct", commit == "commit"};
            steps.push_back({human_size(c.block_size) + " " + c.placement, [c, counts, rep, &emitter] {
              json metrics = sweep(c, counts, rep == 0, emitter);
              emitter.sample({{"block_size_bytes", c.block_size},
                              {"placement", c.placement},
                              {"shape", c.distinct ? "distinct" : "mergeable"},
                              {"commit", c.commit ? "commit" : "reserve"},
                              {"rep", rep}},
                             metrics);
            }});
          }
        }
      }
    }
  }
  return steps;
}

// 3. Run: the plan, step by step, progress counted from its length.
Runner attach(CLI::App& command, std::shared_ptr<Settings> settings) {
  declare(command, *settings);
  return [settings, &command](Emitter& emitter) {
    apply_preset(*settings, command);
    run_plan(emitter, plan(*settings, emitter));
  };
}

}  // namespace

Experiment scaling_experiment() {
  return {"scaling", "How allocation cost grows with the number of outstanding allocations",
          [](CLI::App& command) { return attach(command, std::make_shared<Settings>()); }};
}

}  // namespace memcost::probe
