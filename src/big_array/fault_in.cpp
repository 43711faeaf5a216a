// Faulting a fresh zero array in: by MADV_POPULATE_WRITE over each thread's chunks ("populate"),
// or by one write to each base page ("touch"). The two do the same work in the kernel (a fresh
// page, cleared, mapped), but not with the same locking: populate faults the range in inside one
// system call that holds the process's mmap lock throughout, while a touch takes an ordinary page
// fault, which recent kernels handle under the mapping's own lock. On 2 vCPUs the two were tied;
// on 16 (issue 41: 32 GiB, THP) parallel populate took 3.7 s against 0.79 for a parallel memset
// over the same fresh memory, and make_big_array's zero path, populate, ranked fourth, 1.74x
// behind. So the choice is measured, as the fill method is (fill.cpp): on the first big zero array
// of a process, the two take turns on fresh slices of the array itself, and touch displaces
// populate only when it won both rounds outright.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::detail {
namespace {

// [data, data + bytes) faulted in by `method` on `threads` threads, each its share of whole
// granules; the slowest thread's time (thread start-up is not the method's).
std::uint64_t timed_fault_ns(unsigned char* data, std::size_t bytes, std::size_t granule, fault_method method,
                             unsigned threads) {
  const std::size_t granules = bytes / granule;
  threads = static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(threads, granules)));
  std::vector<std::uint64_t> took(threads, 0);
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] {
      const std::size_t first = granules * i / threads * granule, last = granules * (i + 1) / threads * granule;
      const std::uint64_t start = measure::now_ns();
      fault_in(data + first, last - first, method);
      took[i] = measure::now_ns() - start;
    });
  }
  for (auto& worker : workers) worker.join();
  return *std::max_element(took.begin(), took.end());
}

struct Decided {
  fault_method method;
  std::string measured;
};
// Per process, by page size and threads: what was measured.
std::mutex decided_mutex;
std::map<std::tuple<std::size_t, unsigned>, Decided> decided;

// A slice each method faults in per round: 1/64 of the array, 64 MiB to 512 MiB, whole pages.
std::size_t slice_bytes(std::size_t bytes, std::size_t granule) {
  const std::size_t wanted = std::clamp(bytes / 64, std::size_t{64} << 20, std::size_t{512} << 20);
  return std::max(granule, wanted / granule * granule);
}

}  // namespace

const char* fault_method_name(fault_method method) { return method == fault_method::touch ? "touch" : "populate"; }

void fault_in(void* data, std::size_t bytes, fault_method method) {
  if (method == fault_method::populate) {
    populate(data, bytes);
    return;
  }
  // One write to the first byte of every page the range reaches into (a page shared with a
  // neighbour's chunk is written by both, harmlessly: touch_pages keeps the contents).
  const std::uintptr_t page = os::base_page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(data) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(data) + bytes;
  if (begin < end) os::touch_pages(reinterpret_cast<void*>(begin), end - begin, page);
}

fault_choice choose_fault_method(void* data, std::size_t bytes, std::size_t page_bytes, unsigned threads, bool may_measure) {
  constexpr fault_method rule = fault_method::populate;
  const auto key = std::make_tuple(page_bytes, threads);
  {
    std::lock_guard<std::mutex> lock(decided_mutex);
    if (auto found = decided.find(key); found != decided.end()) {
      return {found->second.method, "measured earlier in this process: " + found->second.measured, 0};
    }
  }
  const std::size_t granule = std::max<std::size_t>(page_bytes, os::base_page_size());
  const std::size_t slice = slice_bytes(bytes, granule);
  if (!may_measure) return {rule, "the default rule: an asynchronous array starts at once, without measuring", 0};
  if (page_bytes >= (std::size_t{1} << 30)) return {rule, "the default rule: on 1 GB pages a slice cannot be fresh on its own", 0};
  if (bytes < 16 * slice) {
    return {rule, "the default rule: an array under " + std::to_string(16 * slice >> 20) + " MiB is not worth measuring for", 0};
  }
  // populate, touch, touch, populate: drift in the machine falls on both alike.
  constexpr fault_method order[] = {fault_method::populate, fault_method::touch, fault_method::touch, fault_method::populate};
  std::map<fault_method, std::vector<std::uint64_t>> round_ns;
  auto* out = static_cast<unsigned char*>(data);
  std::size_t faulted = 0;
  for (fault_method method : order) {
    round_ns[method].push_back(timed_fault_ns(out + faulted, slice, granule, method, threads));
    faulted += slice;
  }
  const auto& populate_ns = round_ns[fault_method::populate];
  const auto& touch_ns = round_ns[fault_method::touch];
  const bool touch_won = *std::max_element(touch_ns.begin(), touch_ns.end()) < *std::min_element(populate_ns.begin(), populate_ns.end());
  const fault_method chosen = touch_won ? fault_method::touch : rule;
  std::ostringstream measured;
  measured.precision(3);
  const auto gb_per_s = [slice](std::uint64_t ns) { return static_cast<double>(slice) / static_cast<double>(ns); };
  for (fault_method method : {fault_method::populate, fault_method::touch}) {
    const auto& ns = round_ns[method];
    measured << (method == fault_method::touch ? ", " : "") << fault_method_name(method) << " "
             << gb_per_s(*std::max_element(ns.begin(), ns.end())) << "-" << gb_per_s(*std::min_element(ns.begin(), ns.end()))
             << " GB/s";
  }
  measured << " (" << (faulted >> 20) << " MiB of fresh array, " << threads << (threads == 1 ? " thread" : " threads")
           << ", two rounds)";
  if (!touch_won) measured << "; touch did not win both rounds, so populate stays";
  {
    std::lock_guard<std::mutex> lock(decided_mutex);
    decided.emplace(key, Decided{chosen, measured.str()});
  }
  return {chosen, "measured now: " + measured.str(), faulted};
}

void forget_fault_measurements() {
  std::lock_guard<std::mutex> lock(decided_mutex);
  decided.clear();
}

}  // namespace memcost::detail
