// memcost::big_array<T>: a large array that is allocated and initialized at the
// speed the machine allows.
//
//   auto a = memcost::make_big_array<float>(n);                         // zero: value-initialized
//   auto b = memcost::make_big_array<int>(n, memcost::fill(7));
//   auto c = memcost::make_big_array<double>(n, memcost::generate([](std::size_t i) { return i * 0.5; }));
//   auto d = memcost::make_big_array<Item>(n, memcost::construct, {.prefault = memcost::prefault::async});
//   d.wait();  // or d.ready(i) before touching element i
//
// What it does for you:
// - Pages: `pages::automatic` climbs down a ladder — hugetlb 1 GB (arrays of
//   1 GiB or more) and 2 MB pages while the pools have room, then transparent
//   huge pages on a 2 MB-aligned range, then base pages — and reports every
//   step it skipped and why. A forced kind with `strict` fails instead.
// - No wasted zeroing: fresh OS memory is already zero, so zero-initialization
//   writes nothing and only faults the pages in (MADV_POPULATE_WRITE), in
//   parallel. A type opts into this for value-initialization through
//   `zero_is_valid` (see below); then `construct` runs no constructor at all.
// - Parallel first touch: threads fault and initialize the array in one pass,
//   taking page-aligned chunks front to back, so that a thread the host slows
//   takes fewer (`prefault::now` returns when all are done); or they work in
//   the background while the caller starts on the first parts
//   (`prefault::async`, with `ready(i)` and `wait()`).
// - What you got is read back from the OS (`report()`, `huge_fraction()`).
// Errors — sizes that overflow, more memory than is available, an empty
// hugetlb pool in strict mode, an exception from an initializer — throw
// big_array_error; nothing is leaked and nothing is left mapped.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "memcost/pinned.hpp"

namespace memcost {

enum class pages { automatic, hugetlb_1g, hugetlb_2m, thp, base };
enum class prefault { now, async, none };

// How a fill value is written; report().fill_method says which ran. Measured side by side by
// `memcost bigarray` (its "fill methods" table), which is where the automatic rule comes from.
enum class fill_method {
  // Fresh memory (faulted in by the fill itself): ordinary stores, which find each page in the
  // cache where the kernel just cleared it. Memory already faulted in (from a pool): memset when
  // every byte of the value is the same; non-temporal stores when the array is larger than the
  // last-level cache and the element's size divides 64; ordinary stores otherwise.
  automatic,
  memset,       // for a value whose bytes are all alike (any other value is written by stores)
  stores,       // ordinary stores: each cache line is read for ownership, then written
  nontemporal,  // streaming stores past the cache (x86-64, element sizes dividing 64; else stores)
};

// Which NUMA nodes the pages go to (Linux memory policy; see docs/bigarray.md).
enum class numa_placement {
  inherit,     // whatever the thread's policy is (normally: the node of the first touch)
  local,       // explicitly first-touch local, with the fill threads spread over the nodes
  interleave,  // page by page over every node
  node,        // all on `numa_node`
};

class array_pool;

struct big_array_options {
  memcost::pages pages = pages::automatic;
  // With a forced page kind: fail rather than fall back to a smaller kind.
  bool strict = false;
  // none: zero and uninitialized arrays are faulted in by their first use;
  // the other kinds of initialization write every element, so they run now.
  memcost::prefault prefault = prefault::now;
  unsigned threads = 0;  // 0: every logical CPU
  // Take the memory from this pool when it holds a piece large enough, and give it back
  // there when the array goes away: no faults and no kernel zeroing the second time.
  array_pool* pool = nullptr;
  // An array with a placement other than inherit is always mapped fresh, never pooled.
  numa_placement numa = numa_placement::inherit;
  unsigned numa_node = 0;  // for numa_placement::node
  memcost::fill_method fill_method = fill_method::automatic;
  // Pinned for a GPU (pinned.hpp): registered with the CUDA driver in one registration, made while
  // the threads fault the pages in ahead of it (the array is then made at once, whatever
  // `prefault` says), unregistered before the memory goes.
  // Without a driver or a GPU, make_big_array throws pinning_error.
  bool pinned = false;
  // With pinned: registered in chunks of this many bytes instead (rounded to whole pages), each by
  // the thread that initialized it, as soon as it did (the fastest way measured on an H100 host:
  // 32 GiB in 0.92 s, against 1.35 s in one registration). But NVIDIA's driver refuses a copy that
  // crosses from one registration into the next: for memory copied in pieces within a chunk (a
  // cache of blocks), never for an array copied whole. 0: one registration. Trivially destructible
  // element types only (others get one registration).
  std::size_t pin_chunk_bytes = 0;
};

enum class big_array_errc { bad_size, out_of_memory, pool_too_small, not_supported };

class big_array_error : public std::runtime_error {
 public:
  big_array_error(big_array_errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] big_array_errc code() const { return code_; }

 private:
  big_array_errc code_;
};

// What the array got, as the OS reported it.
struct allocation_report {
  // "hugetlb-1G", "hugetlb-2M", "thp", "base": what the kernel gave. Once the pages are faulted
  // in (after construction, or wait() with prefault::async) it is read back from the kernel
  // (`read_back`): a THP mapping the kernel backed mostly with base pages reads "base", and
  // `fallbacks` says why. Before that (prefault::none), it is the kind that was mapped.
  std::string page_kind;
  bool read_back = false;
  std::vector<std::string> fallbacks;  // each kind skipped on the way down, and why
  std::size_t mapped_bytes = 0;
  unsigned threads = 0;
  // "populate" (zero pages faulted in by MADV_POPULATE_WRITE), "touch" (zero pages faulted in by
  // one write to each), "write" (elements written), "none" (uninitialized, from a pool), "lazy"
  std::string initialization;
  // Why populate or touch: "measured now: …" (both on fresh slices of this array), "measured
  // earlier in this process: …", or the default rule (populate) and why it applied.
  std::string fault_method_reason;
  bool from_pool = false;      // the memory came from an array_pool, already faulted in
  bool pinned = false;         // registered with the GPU driver (big_array_options::pinned)
  double pin_seconds = 0;      // the driver's time to register it (begun as the fault-in began)
  std::size_t pinned_chunks = 0;  // registrations it is pinned in (pin_chunk_bytes; 1 otherwise)
  std::string fill_method;     // "memset", "stores" or "nontemporal" when elements were written with a value
  // Why that method: "asked for", "measured now: …" (the candidates' speeds on slices of this
  // array), "measured earlier in this process: …", or the default rule and why it applied.
  std::string fill_method_reason;
  std::uint64_t fill_calibration_ns = 0;  // with "measured now": what measuring added to this fill
  // With a NUMA placement: the policy the kernel holds for the array ("local", "interleave:0-1",
  // "bind:0"), and its resident bytes by node, read back once the pages are in.
  std::string numa_policy;
  std::map<unsigned, std::size_t> bytes_by_node;
};

// zero_is_valid<T>: the promise that an object of T whose bytes are all zero,
// with no constructor run, is a valid object equal to a value-initialized T{}.
// True for arithmetic types, enums, pointers and std::atomic of those. A class
// type opts in by specializing it:
//   template <> struct memcost::zero_is_valid<MyItem> : std::true_type {};
// Then make_big_array<MyItem>(n) (or `construct`) writes nothing at all. Such a
// type must be trivially destructible: no constructor ran, so none is undone.
template <class T>
struct zero_is_valid : std::bool_constant<std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_pointer_v<T> ||
                                          std::is_member_pointer_v<T>> {};
template <class T>
struct zero_is_valid<std::atomic<T>> : zero_is_valid<T> {};
template <class T>
inline constexpr bool zero_is_valid_v = zero_is_valid<T>::value;

// bytes_copyable<T>: the promise that the bytes of a T, copied into fresh
// storage, make a valid object equal to the original. True for trivially
// copyable types and std::atomic of them; a class of atomics may opt in like
// zero_is_valid (and must be trivially destructible). fill() then writes the
// value's bytes instead of calling the copy constructor for every element.
template <class T>
struct bytes_copyable : std::bool_constant<std::is_trivially_copyable_v<T>> {};
template <class T>
struct bytes_copyable<std::atomic<T>> : std::bool_constant<std::is_trivially_copyable_v<T>> {};
template <class T>
inline constexpr bool bytes_copyable_v = bytes_copyable<T>::value;

// Kinds of initialization.
struct zero_t {};
inline constexpr zero_t zero{};  // all bytes zero (needs zero_is_valid<T>)
struct construct_t {};
inline constexpr construct_t construct{};  // T() for every element, in parallel
struct uninitialized_t {};
inline constexpr uninitialized_t uninitialized{};  // faulted in, no value given (trivial T only)
template <class V>
struct fill_with {
  V value;
};
template <class V>
[[nodiscard]] fill_with<V> fill(V value) {
  return {std::move(value)};
}
template <class F>
struct generate_with {
  F function;
};
template <class F>
[[nodiscard]] generate_with<F> generate(F function) {
  return {std::move(function)};
}

// A process-wide pool that every make_big_array without its own `pool` uses once enabled (at most
// `max_bytes` held); disabling gives its memory back and stops it. Arrays made while it was enabled
// return their memory to it whenever they go (it lives as long as the process).
void enable_default_array_pool(std::size_t max_bytes);
void disable_default_array_pool();

namespace detail {

// The default pool when enabled, else null.
[[nodiscard]] array_pool* default_pool();

// The memory of an array: mapped by the page-kind ladder, released on destruction.
class mapping {
 public:
  mapping() = default;
  mapping(std::size_t bytes, const big_array_options& options, allocation_report& report);
  mapping(mapping&& other) noexcept { swap(other); }
  mapping& operator=(mapping&& other) noexcept {
    mapping moved(std::move(other));
    swap(moved);
    return *this;
  }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping();
  [[nodiscard]] void* data() const { return address_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  // Chunks handed to different threads start at multiples of this.
  [[nodiscard]] std::size_t page_bytes() const { return page_bytes_; }

 private:
  void swap(mapping& other) noexcept {
    std::swap(address_, other.address_);
    std::swap(bytes_, other.bytes_);
    std::swap(page_bytes_, other.page_bytes_);
  }
  void* address_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t page_bytes_ = 0;
};

}  // namespace detail

struct array_pool_stats {
  std::size_t hits = 0;           // arrays served from held memory
  std::size_t misses = 0;         // arrays that had to map fresh memory
  std::size_t bytes_held = 0;     // memory held now, already faulted in
  std::size_t bytes_trimmed = 0;  // memory given back to the OS, in all
  std::size_t pieces_held = 0;
  std::size_t pinned_hits = 0;    // pinned arrays served from memory held still registered (no driver call)
  std::size_t pieces_pinned = 0;  // pieces held registered with the GPU driver now
};

// A pool of the memory of released big arrays, already faulted in, with the page kind it had.
// An array made with {.pool = &pool} takes the smallest held piece that fits (of the page kind
// asked for, any kind for pages::automatic) and gives its memory back when it goes away.
// Bounded by `max_bytes`: the least recently returned pieces go back to the OS first.
// A pinned array's memory stays registered with the GPU driver while the pool holds it: the next
// pinned array takes it with no driver call (a registration costs as much as faulting the memory
// in); an unpinned array prefers unregistered memory, and is given registered memory unpinned first.
// Thread-safe. Destroying the pool (or release()) returns everything it holds to the OS; arrays
// still alive then free their memory to the OS themselves — the pool must outlive them.
class array_pool {
 public:
  explicit array_pool(std::size_t max_bytes) : max_bytes_(max_bytes) {}
  ~array_pool() { release(); }
  array_pool(const array_pool&) = delete;
  array_pool& operator=(const array_pool&) = delete;

  // Give back to the OS the least recently used pieces until at most `keep_bytes` are held.
  void trim(std::size_t keep_bytes);
  void release() { trim(0); }
  [[nodiscard]] array_pool_stats stats() const;
  [[nodiscard]] std::size_t max_bytes() const;
  // A new cap, kept from now on; what is held beyond it goes back to the OS at once.
  void set_max_bytes(std::size_t max_bytes);

  // For make_big_array and big_array: a piece of at least `bytes` that `options` accept, or none;
  // with `registration` and options.pinned, the piece's registration too, where it has one.
  bool take(std::size_t bytes, const big_array_options& options, detail::mapping& into, std::string& page_kind,
            pinned_registration* registration = nullptr);
  void give(detail::mapping&& memory, const std::string& page_kind, pinned_registration&& registration = {});

 private:
  struct piece {
    detail::mapping memory;
    std::string page_kind;
    pinned_registration registration;  // declared after the memory: unregistered before it is unmapped
  };
  void trim_locked(std::size_t keep_bytes);  // with lock_ held
  mutable std::mutex lock_;
  std::list<piece> pieces_;  // most recently returned first
  std::size_t max_bytes_;
  array_pool_stats stats_;
};

namespace detail {

// Runs work(first, last) over [0, count) elements in chunks on `threads` threads: many chunks,
// taken front to back by whichever thread is free (prefault::now waits for them all).
class fill_job {
 public:
  using work_function = std::function<void(std::size_t first, std::size_t last)>;
  // Thread t runs on cpu_sets[t % cpu_sets.size()] when cpu_sets is not empty.
  fill_job(std::size_t count, std::size_t element_bytes, std::size_t page_bytes, unsigned threads, work_function work,
           std::vector<std::vector<unsigned>> cpu_sets = {});
  ~fill_job();
  fill_job(const fill_job&) = delete;
  fill_job& operator=(const fill_job&) = delete;
  [[nodiscard]] bool ready(std::size_t index) const;
  // Blocks until every chunk is done; rethrows the first initializer exception.
  void wait();
  [[nodiscard]] unsigned threads() const { return static_cast<unsigned>(workers_.size()); }
  // Calls f(first, last) for every chunk that finished; for destroying elements.
  void for_each_done(const std::function<void(std::size_t, std::size_t)>& f) const;

 private:
  void run(const std::vector<unsigned>& cpus);
  std::vector<std::size_t> bounds_;  // chunk i is [bounds_[i], bounds_[i + 1])
  std::unique_ptr<std::atomic<bool>[]> done_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  work_function work_;
  std::vector<std::thread> workers_;
  bool joined_ = false;
};

unsigned default_threads(unsigned requested);
// Fault [address, address + bytes) in for writing without writing it.
void populate(void* address, std::size_t bytes);
[[nodiscard]] double huge_fraction(const void* address, std::size_t bytes);
// After the pages are faulted in: the page kind the kernel really gave, into `report` (and the
// NUMA policy and placement, when the array asked for one).
void read_back(allocation_report& report, const void* address, std::size_t bytes);
// The memory of a new array, into `into` and `report`: from the pool (the one in `options`, else
// the default pool; none with a NUMA placement, since pooled memory is placed already) when it
// holds a fitting piece, else mapped by the ladder and placed as asked. Leaves in options.pool the
// pool the memory goes back to. Returns whether it came from the pool.
bool acquire(std::size_t bytes, big_array_options& options, mapping& into, allocation_report& report,
             pinned_registration* registration = nullptr);
// Set the memory policy `options.numa` asks for on fresh memory; throws big_array_error when the OS refuses.
void place_on_nodes(const mapping& memory, const big_array_options& options, allocation_report& report);
// For numa_placement::local on a machine with several nodes: each node's CPUs, for the fill threads.
[[nodiscard]] std::vector<std::vector<unsigned>> fill_cpu_sets(const big_array_options& options);
// The method a fill of `total_bytes` with a value of `pattern_bytes` bytes uses when `asked` is
// asked; `fresh_pages`: the fill faults the memory in (not yet touched since it was mapped).
[[nodiscard]] fill_method resolve_fill_method(fill_method asked, std::size_t total_bytes, std::size_t pattern_bytes,
                                              bool repeated_byte, bool fresh_pages);
[[nodiscard]] const char* fill_method_name(fill_method method);
// The method an automatic fill of [data, data + bytes) uses, measured on this machine: on first
// use in the process for such a fill (fresh or faulted-in memory, the value's kind, the page
// size), when the array is big enough, the candidates fill slices of the array itself (its first
// `filled_bytes`, then written with the value) and the fastest is kept for the process. Smaller
// arrays, 1 GB pages and a method asked for keep resolve_fill_method's rule. `reason` says which.
struct fill_choice {
  fill_method method;
  std::string reason;
  std::size_t filled_bytes = 0;       // the prefix already written with the value
  std::uint64_t calibration_ns = 0;   // measuring's own cost: its time beyond the winner's on those bytes
};
[[nodiscard]] fill_choice choose_fill_method(fill_method asked, void* data, std::size_t bytes, const void* pattern,
                                             std::size_t pattern_bytes, bool fresh, std::size_t page_bytes,
                                             unsigned threads);
// From each candidate's timings of the same slice size (two or more rounds): the rule's method
// unless another beat it in every round, i.e. its slowest round was faster than the rule's fastest
// (a lead inside the rounds' spread is this machine's noise, not a difference). The index chosen.
[[nodiscard]] std::size_t pick_measured_fill(const std::vector<fill_method>& candidates,
                                             const std::vector<std::vector<std::uint64_t>>& round_ns, fill_method rule);
// The choice into the report: the method, why, and what measuring added.
inline void note_fill(allocation_report& report, const fill_choice& choice) {
  report.fill_method = fill_method_name(choice.method);
  report.fill_method_reason = choice.reason;
  report.fill_calibration_ns = choice.calibration_ns;
}
// Drop what this process measured (the next automatic fill measures again): for tests and benchmarks.
void forget_fill_measurements();

// How a fresh zero array's pages are faulted in (fault_in.cpp): MADV_POPULATE_WRITE over each
// thread's chunks, or one write to each base page.
enum class fault_method { populate, touch };
[[nodiscard]] const char* fault_method_name(fault_method method);
void fault_in(void* data, std::size_t bytes, fault_method method);
// The method for faulting [data, data + bytes) in, fresh: on first use in the process (by page
// size and threads), for an array of 1 GiB or more and `may_measure`, the two take turns on fresh
// slices of its first `faulted_bytes`, and touch is kept only if it won both rounds outright;
// otherwise, and for 1 GB pages, the rule: populate. `reason` says which.
struct fault_choice {
  fault_method method;
  std::string reason;
  std::size_t faulted_bytes = 0;  // the prefix measuring faulted in already
};
[[nodiscard]] fault_choice choose_fault_method(void* data, std::size_t bytes, std::size_t page_bytes, unsigned threads,
                                               bool may_measure);
// Drop what this process measured: for tests and benchmarks.
void forget_fault_measurements();
// Write `pattern` (pattern_bytes long) again and again over [destination, destination + bytes);
// `bytes` is a multiple of pattern_bytes. `method` comes from resolve_fill_method.
void fill_pattern(void* destination, std::size_t bytes, const void* pattern, std::size_t pattern_bytes, fill_method method);
[[nodiscard]] std::size_t checked_bytes(std::size_t count, std::size_t element_bytes);
// Whether every byte of the object is the same (then memset can write it).
[[nodiscard]] inline bool repeated_byte(const void* object, std::size_t bytes) {
  const auto* first = static_cast<const unsigned char*>(object);
  for (std::size_t i = 1; i < bytes; ++i) {
    if (first[i] != first[0]) return false;
  }
  return true;
}

}  // namespace detail

template <class T>
class big_array {
 public:
  big_array() = default;
  big_array(big_array&& other) noexcept { swap(other); }
  big_array& operator=(big_array&& other) noexcept {
    big_array moved(std::move(other));
    swap(moved);
    return *this;
  }
  big_array(const big_array&) = delete;
  big_array& operator=(const big_array&) = delete;
  ~big_array() { reset(); }

  [[nodiscard]] T* data() { return static_cast<T*>(mapping_.data()); }
  [[nodiscard]] const T* data() const { return static_cast<const T*>(mapping_.data()); }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::span<T> span() { return {data(), size_}; }
  [[nodiscard]] std::span<const T> span() const { return {data(), size_}; }
  [[nodiscard]] T& operator[](std::size_t i) { return data()[i]; }
  [[nodiscard]] const T& operator[](std::size_t i) const { return data()[i]; }
  [[nodiscard]] T* begin() { return data(); }
  [[nodiscard]] T* end() { return data() + size_; }

  // Whether element i is initialized (always true unless prefault::async is still running).
  [[nodiscard]] bool ready(std::size_t i) const { return !job_ || job_->ready(i); }
  // Waits for a background initialization; rethrows the exception an initializer threw.
  void wait() {
    if (job_) job_->wait();
    if (job_ && !report_.read_back) detail::read_back(report_, mapping_.data(), mapping_.bytes());
  }
  [[nodiscard]] const allocation_report& report() const { return report_; }
  // The page size the memory was mapped for (THP: the huge page size it asked for).
  [[nodiscard]] std::size_t page_bytes() const { return mapping_.page_bytes(); }
  // Share of the array's resident memory on huge pages, read from the OS now.
  [[nodiscard]] double huge_fraction() const { return detail::huge_fraction(mapping_.data(), mapping_.bytes()); }

 private:
  template <class U, class Init>
  friend big_array<U> make_big_array(std::size_t count, Init init, big_array_options options);

  void swap(big_array& other) noexcept {
    std::swap(mapping_, other.mapping_);
    std::swap(job_, other.job_);
    std::swap(size_, other.size_);
    std::swap(report_, other.report_);
    std::swap(constructed_, other.constructed_);
    std::swap(pool_, other.pool_);
    std::swap(pinned_, other.pinned_);
  }

  // The array registered with the GPU driver where the options ask (pinned.hpp), unless its memory
  // came from a pool still registered; on failure it is destroyed, its memory released.
  static big_array pinned_if_asked(big_array array, const big_array_options& options) {
    if (options.pinned && array.pinned_.pinned()) {
      array.note_pinned(0);  // registered when it was first made, kept so by the pool
    } else if (options.pinned && array.mapping_.data()) {
      array.pinned_ = pinned_registration(array.mapping_.data(), array.mapping_.bytes());
      array.note_pinned(array.pinned_.register_seconds());
    }
    return array;
  }

  // What the report says of a registered array: pinned, in how many registrations, and the
  // seconds it took to register (0: it came registered from a pool).
  void note_pinned(double seconds) {
    report_.pinned = true;
    report_.pin_seconds = seconds;
    report_.pinned_chunks = pinned_.chunks();
  }

  // The array registered whole, in one registration (a copy may then span all of it: the driver
  // refuses one that crosses two registrations, docs/pinned.md), begun on this thread at once while
  // the job's threads fault the pages in ahead of it, front to back: the driver's walk finds them
  // in, and faulting and registering overlap. On failure it is destroyed, its memory released.
  static big_array pinned_following(big_array array) {
    array.pinned_ = pinned_registration(array.mapping_.data(), array.mapping_.bytes());
    array.wait();
    array.note_pinned(array.pinned_.register_seconds());
    return array;
  }

  // The array registered in chunks of options.pin_chunk_bytes, each by the thread that initialized
  // it, at once (big_array_options::pin_chunk_bytes). The job runs over the chunks, not the
  // elements: it is dropped once done, so that ready() and reset() never read chunks as elements
  // (trivially destructible types: nothing to destroy).
  static big_array pinned_in_chunks(big_array array, detail::fill_job::work_function work,
                                    const big_array_options& options) {
    const std::size_t bytes = array.mapping_.bytes(), count = array.size_;
    const std::vector<registration_chunk> chunks =
        registration_chunks(bytes, options.pin_chunk_bytes, array.mapping_.page_bytes());
    const unsigned threads = detail::default_threads(options.threads);
    array.pinned_ = pinned_registration::in_parts(array.mapping_.data(), bytes, threads);
    pinned_registration* parts = &array.pinned_;
    const auto started = std::chrono::steady_clock::now();
    auto per_chunk = [&chunks, &work, parts, count](std::size_t first, std::size_t last) {
      for (std::size_t i = first; i < last; ++i) {
        // The elements that begin in this chunk: one that straddles a border is the earlier chunk's.
        const std::size_t from = (chunks[i].offset + sizeof(T) - 1) / sizeof(T);
        const std::size_t to = std::min(count, (chunks[i].offset + chunks[i].bytes + sizeof(T) - 1) / sizeof(T));
        if (from < to) work(from, to);
        parts->add(chunks[i]);
      }
    };
    array.job_ = std::make_unique<detail::fill_job>(chunks.size(), 1, 1, threads, per_chunk, detail::fill_cpu_sets(options));
    array.report_.threads = array.job_->threads();
    array.job_->wait();  // rethrows a refusal or an initializer's exception: `array` unwinds, unregistering
    detail::read_back(array.report_, array.mapping_.data(), bytes);
    array.job_.reset();
    array.note_pinned(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    return array;
  }

  void reset() noexcept {
    if (job_) {
      try {
        job_->wait();
      } catch (...) {  // the error was the caller's to see through wait(); destroy what exists
      }
      if constexpr (!std::is_trivially_destructible_v<T>) {
        if (constructed_) {
          job_->for_each_done([this](std::size_t first, std::size_t last) { std::destroy(data() + first, data() + last); });
        }
      }
    }
    job_.reset();
    // A pool keeps the memory registered; otherwise it is unpinned before it is unmapped.
    if (pool_ && mapping_.data()) pool_->give(std::move(mapping_), report_.page_kind, std::move(pinned_));
    pinned_.release();
    mapping_ = detail::mapping();
    size_ = 0;
  }

  detail::mapping mapping_;
  std::unique_ptr<detail::fill_job> job_;
  std::size_t size_ = 0;
  allocation_report report_;
  bool constructed_ = false;  // elements were constructed (not only zero pages)
  array_pool* pool_ = nullptr;  // where the memory goes back to
  pinned_registration pinned_;
};

namespace detail {

// The work that zeroes memory from the pool (it holds the last array's bytes) in user space, by
// the fill method chosen for it (measured where automatic); the choice goes into `report`.
template <class T>
fill_job::work_function zero_fill_work(T* base, std::size_t bytes, const big_array_options& options,
                                       std::size_t page_bytes, allocation_report& report) {
  static constexpr unsigned char zero_byte = 0;
  const fill_choice choice = choose_fill_method(options.fill_method, base, bytes, &zero_byte, 1, false, page_bytes,
                                                default_threads(options.threads));
  note_fill(report, choice);
  return [base, method = choice.method, done = choice.filled_bytes / sizeof(T)](std::size_t first, std::size_t last) {
    first = std::max(first, done);  // measuring wrote these already
    if (first < last) fill_pattern(base + first, (last - first) * sizeof(T), &zero_byte, 1, method);
  };
}

// The work that faults a fresh zero array in, by the method chosen for it (measured on the first
// big one of a process, unless asynchronous: the first elements are wanted at once); into `report`.
template <class T>
fill_job::work_function zero_fault_work(T* base, std::size_t bytes, const big_array_options& options,
                                        std::size_t page_bytes, allocation_report& report) {
  // A pinned array is touched, as the way `memcost pinned` measured is: its registration follows
  // the touching threads (pinned_following). On an H100 host, 32 GiB pinned so took 1.70 s, and
  // 2.65 s where the fault method was chosen on slices first (populate or touch: not recorded).
  const fault_choice choice =
      options.pinned ? fault_choice{fault_method::touch, "pinned: touched, the driver's registration following the threads"}
                     : choose_fault_method(base, bytes, page_bytes, default_threads(options.threads),
                                           options.prefault == prefault::now);
  report.initialization = fault_method_name(choice.method);
  report.fault_method_reason = choice.reason;
  return [base, method = choice.method, done = choice.faulted_bytes](std::size_t first, std::size_t last) {
    const std::size_t from = std::max(first * sizeof(T), done), to = last * sizeof(T);  // measuring faulted [0, done)
    if (from < to) fault_in(reinterpret_cast<unsigned char*>(base) + from, to - from, method);
  };
}

// The work that writes `value`'s bytes into every element (a bytes-copyable T), by the fill method
// chosen for it (`fresh`: memory no one has written yet); the choice goes into `report`.
template <class T>
fill_job::work_function value_fill_work(T* base, std::size_t bytes, const T value, const big_array_options& options,
                                        bool fresh, std::size_t page_bytes, allocation_report& report) {
  std::array<unsigned char, sizeof(T)> pattern;  // the value's bytes: what fill_pattern writes
  std::memcpy(pattern.data(), static_cast<const void*>(&value), sizeof(T));
  const fill_choice choice = choose_fill_method(options.fill_method, base, bytes, pattern.data(), sizeof(T), fresh,
                                                page_bytes, default_threads(options.threads));
  note_fill(report, choice);
  const fill_method method = choice.method;
  const std::size_t done = choice.filled_bytes / sizeof(T);  // measuring wrote these already
  if constexpr (std::is_trivially_copyable_v<T>) {
    if (method == fill_method::stores) {
      return [base, value, done](std::size_t first, std::size_t last) {
        std::fill(base + std::max(first, done), base + std::max(last, done), value);
      };
    }
  }
  return [base, pattern, method, done](std::size_t first, std::size_t last) {
    first = std::max(first, done);
    if (first < last) fill_pattern(base + first, (last - first) * sizeof(T), pattern.data(), sizeof(T), method);
  };
}

}  // namespace detail

template <class T, class Init = construct_t>
[[nodiscard]] big_array<T> make_big_array(std::size_t count, Init init = {}, big_array_options options = {}) {
  static_assert(!std::is_same_v<Init, zero_t> || zero_is_valid_v<T>,
                "memcost::zero needs zero_is_valid<T>: all-zero bytes must be a valid T");
  static_assert(!zero_is_valid_v<T> || std::is_trivially_destructible_v<T>,
                "a zero_is_valid type must be trivially destructible");
  static_assert(!bytes_copyable_v<T> || std::is_trivially_destructible_v<T>,
                "a bytes_copyable type must be trivially destructible");
  static_assert(!std::is_same_v<Init, uninitialized_t> || std::is_trivially_default_constructible_v<T>,
                "memcost::uninitialized is for trivially default-constructible types");
  big_array<T> array;
  const std::size_t bytes = detail::checked_bytes(count, sizeof(T));
  if (count == 0) return array;
  const bool from_pool = detail::acquire(bytes, options, array.mapping_, array.report_, &array.pinned_);
  array.pool_ = options.pool;
  array.size_ = count;
  T* base = array.data();

  // Fresh zero pages are already the value: fault them in, write nothing. Memory from the pool
  // holds the last array's bytes: zero it in parallel in user space (the only write it gets).
  constexpr bool zero_pages = std::is_same_v<Init, zero_t> || std::is_same_v<Init, uninitialized_t> ||
                              (std::is_same_v<Init, construct_t> && zero_is_valid_v<T>);
  typename detail::fill_job::work_function work;
  if (zero_pages && from_pool) {
    array.report_.initialization = std::is_same_v<Init, uninitialized_t> ? "none" : "write";
    if constexpr (std::is_same_v<Init, uninitialized_t>) return big_array<T>::pinned_if_asked(std::move(array), options);
    work = detail::zero_fill_work(base, bytes, options, array.mapping_.page_bytes(), array.report_);
  } else if constexpr (zero_pages) {
    if (options.prefault == prefault::none) {
      array.report_.initialization = "lazy";
      return big_array<T>::pinned_if_asked(std::move(array), options);
    }
    work = detail::zero_fault_work(base, bytes, options, array.mapping_.page_bytes(), array.report_);
  } else {
    array.report_.initialization = "write";
    array.constructed_ = !std::is_trivially_destructible_v<T>;
    if constexpr (std::is_same_v<Init, construct_t>) {
      work = [base](std::size_t first, std::size_t last) { std::uninitialized_value_construct(base + first, base + last); };
    } else if constexpr (requires { init.value; }) {
      if constexpr (bytes_copyable_v<T> && std::is_trivially_destructible_v<T>) {
        array.constructed_ = false;
        work = detail::value_fill_work(base, bytes, T(init.value), options, !from_pool, array.mapping_.page_bytes(),
                                       array.report_);
      } else {
        work = [base, value = T(init.value)](std::size_t first, std::size_t last) {
          std::uninitialized_fill(base + first, base + last, value);
        };
      }
    } else {
      work = [base, function = init.function](std::size_t first, std::size_t last) {
        // Elements constructed so far are destroyed if one throws, as std::uninitialized_* do.
        std::size_t i = first;
        try {
          for (; i < last; ++i) ::new (static_cast<void*>(base + i)) T(function(i));
        } catch (...) {
          std::destroy(base + first, base + i);
          throw;
        }
      };
    }
  }
  if constexpr (std::is_trivially_destructible_v<T>) {
    if (options.pinned && options.pin_chunk_bytes && !array.pinned_.pinned()) {
      return big_array<T>::pinned_in_chunks(std::move(array), std::move(work), options);
    }
  }
  const bool async = options.prefault == prefault::async && !options.pinned;
  array.job_ = std::make_unique<detail::fill_job>(count, sizeof(T), array.mapping_.page_bytes(),
                                                  detail::default_threads(options.threads), std::move(work),
                                                  detail::fill_cpu_sets(options));
  array.report_.threads = array.job_->threads();
  if (options.pinned && !array.pinned_.pinned()) return big_array<T>::pinned_following(std::move(array));
  if (!async) array.wait();  // on error, `array` unwinds: elements destroyed, memory released
  return big_array<T>::pinned_if_asked(std::move(array), options);
}

}  // namespace memcost
