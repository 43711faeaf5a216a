// The in-kernel fault counter's reader (see fault_counter.hpp for the contract).
#include "trace/sources/fault_counter.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "trace/sources/bpf/fault_counts.h"

#if MEMCOST_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "fault_counts.skel.h"
#endif

namespace memcost::trace {

static_assert(sizeof(RegionFaults::pages) == sizeof(memcost_region_counts::pages), "one bit per page of a region");
static_assert(kRegionBytes == 1ULL << MEMCOST_REGION_SHIFT && kRegionPageBytes == 1ULL << MEMCOST_PAGE_SHIFT);

// The region map's size, from the machine's memory: a sweep's batch read walks every bucket of the
// hash, however few regions it holds, and at a fixed 262,144 that walk was 6 % of the tracer's CPU
// on a traced `import torch` (about 1 ms a sweep, 2-vCPU guest). A region is 2 MiB of touched
// memory, held while its generation lives and taken out at the first sweep after it ends: twice
// the machine's memory in regions leaves room for memory freed and touched again before then.
// Past that (or past 512 GiB of regions, on a host with more memory) the faults are counted as not
// counted (MEMCOST_TOTAL_NO_ROOM) and said.
std::uint32_t region_map_entries(long physical_pages) {
  constexpr std::uint64_t kFewest = 16384, kMost = 262144;  // 32 GiB and 512 GiB of regions
  const std::uint64_t memory_regions =
      physical_pages > 0 ? static_cast<std::uint64_t>(physical_pages) / MEMCOST_REGION_PAGES : kFewest;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(std::bit_ceil(memory_regions) * 2, kFewest, kMost));
}

bool region_news(const RegionFaults& read, RegionFaults& delivered, RegionFaults& out) {
  // A fault's time arrives after its count (at its page-count update): a read can bring time alone.
  if (read.faults <= delivered.faults && read.timings_ended <= delivered.timings_ended) return false;
  // Each counter only grows: what is new is the difference, and `delivered` moves up to `read`.
  auto news = [](std::uint64_t now, std::uint64_t& before) {
    const std::uint64_t added = now > before ? now - before : 0;
    before = std::max(before, now);
    return added;
  };
  out.faults = news(read.faults, delivered.faults);
  out.timed_faults = news(read.timed_faults, delivered.timed_faults);
  out.timings_ended = news(read.timings_ended, delivered.timings_ended);
  out.fault_ns = news(read.fault_ns, delivered.fault_ns);
  out.fault_ns_squares = news(read.fault_ns_squares, delivered.fault_ns_squares);
  for (unsigned i = 0; i < MEMCOST_REGION_WORDS; ++i) {
    out.pages[i] = read.pages[i] & ~delivered.pages[i];
    delivered.pages[i] |= read.pages[i];
  }
  return true;
}

#if MEMCOST_HAVE_BPF

struct FaultCounter::Kernel {
  fault_counts* skeleton = nullptr;
  std::vector<memcost_region_key> keys, ended_keys;  // a sweep's, kept for the next
  std::vector<memcost_region_counts> values;
  ~Kernel() { fault_counts__destroy(skeleton); }
};

namespace {

// Regions read and deleted this many to a system call: a sweep read them key by key before, two
// calls a region (9,600 calls on a traced `import torch`, a fifth of the tracer's kernel time).
constexpr std::uint32_t kRegionBatch = 1024;

// Every region's key and counts into `keys` and `values`; false where the kernel would not say
// (then nothing is delivered this sweep, and the regions wait for the next).
bool read_every_region(int map_fd, std::vector<memcost_region_key>& keys, std::vector<memcost_region_counts>& values) {
  keys.clear();
  values.clear();
  std::uint32_t batch = kRegionBatch;
  std::uint32_t position = 0, next = 0;  // where a hash map's batch ends: its bucket
  bool first = true;
  while (true) {
    const std::size_t have = keys.size();
    keys.resize(have + batch);
    values.resize(have + batch);
    std::uint32_t count = batch;
    const int failed = bpf_map_lookup_batch(map_fd, first ? nullptr : &position, &next, keys.data() + have,
                                            values.data() + have, &count, nullptr);
    keys.resize(have + (failed == 0 || failed == -ENOENT ? count : 0));
    values.resize(keys.size());
    if (failed == -ENOSPC && count == 0) {  // one bucket holds more than a batch: a larger one
      batch *= 2;
      continue;
    }
    if (failed == -ENOENT) return true;  // the map's end
    if (failed != 0) return false;
    first = false;
    position = next;
  }
}

// Every traced process's generation (the generations map, a hash of a few entries) into `out`.
void read_generations(int map_fd, std::map<std::uint32_t, std::uint32_t>& out) {
  std::uint32_t key = 0, next = 0, generation = 0;
  const std::uint32_t* at = nullptr;
  while (bpf_map_get_next_key(map_fd, at, &next) == 0) {
    // A process still before its exec has counted nothing: every region found after is current.
    if (bpf_map_lookup_elem(map_fd, &next, &generation) == 0) out[next] = generation == MEMCOST_AWAITING_EXEC ? 0 : generation;
    key = next;
    at = &key;
  }
}

// Takes `keys` out of the map (each read before, and not found only if already gone).
void delete_regions(int map_fd, const std::vector<memcost_region_key>& keys) {
  for (std::size_t done = 0; done < keys.size();) {
    auto count = static_cast<std::uint32_t>(std::min<std::size_t>(keys.size() - done, kRegionBatch));
    const int failed = bpf_map_delete_batch(map_fd, keys.data() + done, &count, nullptr);
    done += count;
    if (failed != 0) {
      // The batch stopped at a key it could not delete: that one alone, then on.
      if (done < keys.size()) bpf_map_delete_elem(map_fd, &keys[done]);
      ++done;
    }
  }
}

// libbpf prints its own diagnostics to stderr by default; the reason is given in one sentence instead.
int quiet(enum libbpf_print_level, const char*, va_list) { return 0; }

}  // namespace

std::unique_ptr<FaultCounter> FaultCounter::open(std::uint32_t time_one_in, std::uint32_t touch_samples_per_second,
                                                 std::string& why_not) {
  if (geteuid() != 0) {
    why_not = "counting in the kernel needs root (BPF programs)";
    return nullptr;
  }
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    why_not = "counting in the kernel needs the kernel's BTF (/sys/kernel/btf/vmlinux is missing)";
    return nullptr;
  }
  if (sysconf(_SC_PAGESIZE) != static_cast<long>(kRegionPageBytes)) {
    why_not = "counting in the kernel is built for 4 KiB pages";
    return nullptr;
  }
  libbpf_set_print(quiet);
  auto kernel = std::make_unique<Kernel>();
  kernel->skeleton = fault_counts__open();
  if (kernel->skeleton == nullptr) {
    why_not = std::string("the kernel refused memcost's BPF programs: ") + std::strerror(errno);
    return nullptr;
  }
  bpf_map__set_max_entries(kernel->skeleton->maps.regions, region_map_entries(sysconf(_SC_PHYS_PAGES)));
  if (fault_counts__load(kernel->skeleton) != 0) {
    why_not = std::string("the kernel refused memcost's BPF programs: ") + std::strerror(errno);
    return nullptr;
  }
  // The pending regions' mover is run by the reader on each CPU, never attached.
  bpf_program__set_autoattach(kernel->skeleton->progs.move_pending_out, false);
  // Not timing, the page-count program would only cost every fault on the machine a call (the
  // fault storm's system time was 6 % more with it attached and nothing timed than without it).
  kernel->skeleton->data->timing_one_in = time_one_in;
  kernel->skeleton->bss->touch_ns_apart = touch_samples_per_second ? 1'000'000'000ULL / touch_samples_per_second : 0;
  if (time_one_in == 0) bpf_program__set_autoattach(kernel->skeleton->progs.on_page_count, false);
  if (fault_counts__attach(kernel->skeleton) != 0) {
    why_not = std::string("the kernel would not attach memcost's BPF programs to the page-fault tracepoints: ") +
              std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<FaultCounter>(new FaultCounter(std::move(kernel)));
}

FaultCounter::FaultCounter(std::unique_ptr<Kernel> kernel) : kernel_(std::move(kernel)) {}
FaultCounter::~FaultCounter() = default;

bool FaultCounter::trace(int pid, bool from_exec) {
  const auto key = static_cast<std::uint32_t>(pid);
  const std::uint32_t generation = from_exec ? MEMCOST_AWAITING_EXEC : 0;
  return bpf_map__update_elem(kernel_->skeleton->maps.generations, &key, sizeof(key), &generation, sizeof(generation),
                              BPF_ANY) == 0;
}

bool FaultCounter::count_in_calls(std::string& why_not) {
  if (kernel_->skeleton->bss == nullptr) {  // a kernel without mmap-able BPF arrays
    why_not = "the BPF counter's settings cannot be written on this kernel";
    return false;
  }
  __atomic_store_n(&kernel_->skeleton->bss->counting_calls, 1U, __ATOMIC_SEQ_CST);
  return true;
}

bool FaultCounter::touch_output(int cpu, int event_fd) {
  const auto key = static_cast<std::uint32_t>(cpu);
  const auto fd = static_cast<std::uint32_t>(event_fd);
  return bpf_map__update_elem(kernel_->skeleton->maps.touch_samples, &key, sizeof(key), &fd, sizeof(fd), BPF_ANY) == 0;
}

int FaultCounter::python_release_slots() const { return bpf_map__fd(kernel_->skeleton->maps.python_releases); }

void FaultCounter::stop_counting() {
  bpf_map* generations = kernel_->skeleton->maps.generations;
  std::uint32_t key = 0;
  while (bpf_map__get_next_key(generations, nullptr, &key, sizeof(key)) == 0) {
    if (bpf_map__delete_elem(generations, &key, sizeof(key), 0) != 0) break;
  }
  // A CPU's pending region is counted on without a look at `generations` until the epoch moves.
  __atomic_fetch_add(&kernel_->skeleton->bss->epoch, 1, __ATOMIC_SEQ_CST);
}

void FaultCounter::move_pending_out() {
  const int program = bpf_program__fd(kernel_->skeleton->progs.move_pending_out);
  const int cpus = libbpf_num_possible_cpus();
  for (int cpu = 0; cpu < cpus; ++cpu) {
    // A fault program of that CPU found midway (return value 1) is done within microseconds.
    for (int attempt = 0; attempt < 1000; ++attempt) {
      LIBBPF_OPTS(bpf_test_run_opts, run, .flags = BPF_F_TEST_RUN_ON_CPU, .cpu = static_cast<std::uint32_t>(cpu));
      if (bpf_prog_test_run_opts(program, &run) != 0) break;  // ENXIO: that CPU is offline (and idle)
      if (run.retval == 0) break;
      ++pending_retries_;
    }
  }
}

void FaultCounter::sweep(Sweep what, std::vector<RegionFaults>& out) {
  // No generation ended since the last look: nothing to take out, and walking every region (a
  // program that touched 64 GiB has 32,768) would be work for nothing.
  if (what == Sweep::ended) {
    const std::uint64_t ended = generations();
    if (ended == generations_seen_) return;
    generations_seen_ = ended;
  }
  bpf_map* regions = kernel_->skeleton->maps.regions;
  bpf_map* generations = kernel_->skeleton->maps.generations;
  // Each traced process's generation, read before the pending runs are moved out: a region of an
  // earlier generation is then complete once they are (no CPU starts a run of a generation that has
  // ended). Read after the regions instead, a generation that ended between the two reads had a
  // CPU's run, begun after the move, merged into a region already read and then deleted with it:
  // 37 and 41 faults lost in CI, on a program that maps, touches and unmaps in a loop.
  std::map<std::uint32_t, std::uint32_t> current;  // tgid -> its generation before the move
  read_generations(bpf_map__fd(generations), current);
  move_pending_out();
  std::vector<memcost_region_key>& keys = kernel_->keys;
  std::vector<memcost_region_counts>& values = kernel_->values;
  if (!read_every_region(bpf_map__fd(regions), keys, values)) return;
  most_regions_ = std::max(most_regions_, keys.size());
  for (const memcost_region_key& region : keys) {
    if (current.count(region.tgid)) continue;
    // Not traced before the move: a process forked since (its regions are all current), or one no
    // longer traced (its regions have all ended).
    std::uint32_t generation = 0;
    const bool traced =
        bpf_map__lookup_elem(generations, &region.tgid, sizeof(region.tgid), &generation, sizeof(generation), 0) == 0;
    current[region.tgid] = traced ? 0 : UINT32_MAX;
  }
  std::vector<memcost_region_key>& ended_keys = kernel_->ended_keys;
  ended_keys.clear();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const memcost_region_key& region = keys[i];
    const memcost_region_counts& counts = values[i];
    // Ended: its process has moved on to a later generation (so no fault can come into it any
    // more), or the trace is over.
    const bool ended = what == Sweep::last || region.generation < current[region.tgid];
    if (!ended && what == Sweep::ended) continue;
    // An ended region is taken out after its read without losing a fault: only a CPU's pending
    // region adds to a region, move_pending_out has just moved every CPU's out, and a CPU that
    // counts again starts a pending region of the process's generation now (the epoch moved with
    // the generation).
    if (ended) ended_keys.push_back(region);
    const auto id = std::make_tuple(region.tgid, region.generation, static_cast<std::uint64_t>(region.region));
    auto found = delivered_.find(id);
    RegionFaults none;
    RegionFaults& delivered = found == delivered_.end() ? none : found->second;
    RegionFaults counted;
    counted.faults = counts.faults;
    counted.timed_faults = counts.timed_faults;
    counted.timings_ended = counts.timings_ended;
    counted.fault_ns = counts.fault_ns;
    counted.fault_ns_squares = counts.fault_ns_squares;
    std::memcpy(counted.pages, counts.pages, sizeof(counted.pages));
    RegionFaults news;
    if (region_news(counted, delivered, news)) {
      news.pid = static_cast<int>(region.tgid);
      news.last_ns = counts.last_ns;
      news.start = region.region << MEMCOST_REGION_SHIFT;
      news.first_tid = static_cast<int>(counts.first_tid);
      news.one_thread = counts.threads_differ == 0;
      faults_read_ += news.faults;
      out.push_back(news);
    }
    if (ended) {
      if (found != delivered_.end()) delivered_.erase(found);
    } else if (found == delivered_.end()) {
      delivered_.emplace(id, delivered);
    }
  }
  delete_regions(bpf_map__fd(regions), ended_keys);
}

std::uint64_t FaultCounter::total(unsigned which) const {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return 0;
  std::vector<std::uint64_t> per_cpu(static_cast<std::size_t>(cpus));
  const std::uint32_t key = which;
  if (bpf_map__lookup_elem(kernel_->skeleton->maps.totals, &key, sizeof(key), per_cpu.data(),
                           per_cpu.size() * sizeof(std::uint64_t), 0) != 0) {
    return 0;
  }
  std::uint64_t sum = 0;
  for (std::uint64_t value : per_cpu) sum += value;
  return sum;
}

#else  // built without libbpf, clang and bpftool (a cross-build, or a machine without them)

struct FaultCounter::Kernel {};

std::unique_ptr<FaultCounter> FaultCounter::open(std::uint32_t, std::uint32_t, std::string& why_not) {
  why_not = "this memcost was built without BPF (libbpf-dev, clang and bpftool were not found)";
  return nullptr;
}
FaultCounter::FaultCounter(std::unique_ptr<Kernel> kernel) : kernel_(std::move(kernel)) {}
FaultCounter::~FaultCounter() = default;
bool FaultCounter::trace(int, bool) { return false; }
bool FaultCounter::count_in_calls(std::string& why_not) {
  why_not = "this memcost was built without BPF";
  return false;
}
bool FaultCounter::touch_output(int, int) { return false; }
int FaultCounter::python_release_slots() const { return -1; }
void FaultCounter::stop_counting() {}
void FaultCounter::move_pending_out() {}
void FaultCounter::sweep(Sweep, std::vector<RegionFaults>&) {}
std::uint64_t FaultCounter::total(unsigned) const { return 0; }

#endif

std::uint64_t FaultCounter::faults() const { return faults_read_ + uncounted(); }
std::uint64_t FaultCounter::uncounted() const { return total(MEMCOST_TOTAL_NO_ROOM) + total(MEMCOST_TOTAL_BUSY); }
std::uint64_t FaultCounter::generations() const { return total(MEMCOST_TOTAL_GENERATIONS); }
std::uint64_t FaultCounter::in_calls() const { return total(MEMCOST_TOTAL_IN_CALLS); }

}  // namespace memcost::trace
