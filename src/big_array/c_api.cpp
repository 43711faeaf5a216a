// The C API (memcost.h) over the big_array machinery.
#include <cstring>
#include <type_traits>

#include "memcost/big_array.hpp"
#include "memcost/memcost.h"

struct memcost_pool {
  explicit memcost_pool(std::size_t max_bytes) : pool(max_bytes) {}
  memcost::array_pool pool;
};

struct memcost_array {
  memcost::detail::mapping memory;
  std::unique_ptr<memcost::detail::fill_job> job;
  std::size_t count = 0;
  memcost::allocation_report report;
  std::string fallbacks;
  memcost::array_pool* pool = nullptr;  // where the memory goes back on destroy
  memcost::pinned_registration pinned;
  ~memcost_array() {
    if (job) {
      try {
        job->wait();
      } catch (...) {  // no initializer of ours throws; nothing to report from a destructor
      }
    }
    job.reset();
    pinned.release();  // unpinned before the memory is pooled or unmapped
    if (pool && memory.data()) pool->give(std::move(memory), report.page_kind);
  }
};

namespace {

thread_local std::string last_error;

memcost_status status_of(memcost::big_array_errc code) {
  switch (code) {
    case memcost::big_array_errc::bad_size: return MEMCOST_ERROR_BAD_SIZE;
    case memcost::big_array_errc::pool_too_small: return MEMCOST_ERROR_POOL_TOO_SMALL;
    case memcost::big_array_errc::not_supported: return MEMCOST_ERROR_NOT_SUPPORTED;
    default: return MEMCOST_ERROR_OUT_OF_MEMORY;
  }
}

// A C caller may store any integer in an enum field; C++ may not load an
// out-of-range value through the enum type, so the raw integer is read.
template <class Enum>
long long raw_value(const Enum& field) {
  std::underlying_type_t<Enum> value;
  std::memcpy(&value, &field, sizeof value);
  return static_cast<long long>(value);
}

bool to_options(const memcost_options* in, memcost::big_array_options& out) {
  if (!in) return true;
  const long long page_choice = raw_value(in->pages), prefault_choice = raw_value(in->prefault),
                  numa_choice = raw_value(in->numa);
  if (page_choice < MEMCOST_PAGES_AUTO || page_choice > MEMCOST_PAGES_BASE || prefault_choice < MEMCOST_PREFAULT_NOW ||
      prefault_choice > MEMCOST_PREFAULT_NONE || numa_choice < MEMCOST_NUMA_INHERIT || numa_choice > MEMCOST_NUMA_NODE) {
    return false;
  }
  static constexpr memcost::numa_placement placements[] = {memcost::numa_placement::inherit, memcost::numa_placement::local,
                                                           memcost::numa_placement::interleave, memcost::numa_placement::node};
  static constexpr memcost::pages kinds[] = {memcost::pages::automatic, memcost::pages::hugetlb_1g, memcost::pages::hugetlb_2m,
                                             memcost::pages::thp, memcost::pages::base};
  static constexpr memcost::prefault modes[] = {memcost::prefault::now, memcost::prefault::async, memcost::prefault::none};
  out.pages = kinds[page_choice];
  out.strict = in->strict != 0;
  out.prefault = modes[prefault_choice];
  out.threads = in->threads;
  out.numa = placements[numa_choice];
  out.numa_node = in->numa_node;
  out.pool = in->pool ? &in->pool->pool : nullptr;
  out.pinned = in->pinned != 0;
  return true;
}

// The array, pinned for a GPU where the options ask, handed to the caller.
memcost_status hand_over(std::unique_ptr<memcost_array> result, const memcost::big_array_options& settings,
                         memcost_array** array) {
  if (settings.pinned) {
    result->pinned = memcost::pinned_registration(result->memory.data(), result->memory.bytes());
    result->report.pinned = true;
  }
  *array = result.release();
  return MEMCOST_OK;
}

// `value` null: zero pages, faulted in; otherwise every element copied from it.
memcost_status create(std::size_t count, std::size_t element_size, const void* value, const memcost_options* options,
                      memcost_array** array) {
  memcost::big_array_options settings;
  if (!array || !to_options(options, settings)) {
    last_error = "a null pointer or an unknown option value";
    return MEMCOST_ERROR_BAD_ARGUMENT;
  }
  *array = nullptr;
  if (count == 0 || element_size == 0) {
    last_error = "count and element size must be at least 1";
    return MEMCOST_ERROR_BAD_SIZE;
  }
  try {
    auto result = std::make_unique<memcost_array>();
    std::size_t bytes = memcost::detail::checked_bytes(count, element_size);
    const bool from_pool = memcost::detail::acquire(bytes, settings, result->memory, result->report);
    result->pool = settings.pool;
    result->count = count;
    for (const auto& step : result->report.fallbacks) result->fallbacks += step + "\n";
    auto* base = static_cast<unsigned char*>(result->memory.data());
    memcost::detail::fill_job::work_function work;
    if (!value && !from_pool) {
      if (settings.prefault == memcost::prefault::none) return hand_over(std::move(result), settings, array);
      work = [base, element_size](std::size_t first, std::size_t last) {
        memcost::detail::populate(base + first * element_size, (last - first) * element_size);
      };
    } else {
      // A value, or zero over pooled memory that holds the last array's bytes: written in parallel.
      std::string pattern = value ? std::string(static_cast<const char*>(value), element_size) : std::string(1, '\0');
      const memcost::detail::fill_choice choice = memcost::detail::choose_fill_method(
          memcost::fill_method::automatic, base, bytes, pattern.data(), pattern.size(), !from_pool,
          result->memory.page_bytes(), memcost::detail::default_threads(settings.threads));
      memcost::detail::note_fill(result->report, choice);
      work = [base, element_size, pattern, method = choice.method,
              done = choice.filled_bytes / element_size](std::size_t first, std::size_t last) {
        first = std::max(first, done);  // measuring wrote these already
        if (first < last) {
          memcost::detail::fill_pattern(base + first * element_size, (last - first) * element_size, pattern.data(),
                                        pattern.size(), method);
        }
      };
    }
    bool async = settings.prefault == memcost::prefault::async && !settings.pinned;
    result->job = std::make_unique<memcost::detail::fill_job>(count, element_size, result->memory.page_bytes(),
                                                              memcost::detail::default_threads(settings.threads),
                                                              std::move(work), memcost::detail::fill_cpu_sets(settings));
    if (!async) {
      result->job->wait();
      if (!result->report.numa_policy.empty()) {
        memcost::detail::read_back(result->report, result->memory.data(), result->memory.bytes());
      }
    }
    return hand_over(std::move(result), settings, array);
  } catch (const memcost::pinning_error& error) {
    last_error = error.what();
    return MEMCOST_ERROR_NO_GPU;
  } catch (const memcost::big_array_error& error) {
    last_error = error.what();
    return status_of(error.code());
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return MEMCOST_ERROR_OUT_OF_MEMORY;
  }
}

}  // namespace

extern "C" {

void memcost_options_init(memcost_options* options) {
  if (options) *options = memcost_options{MEMCOST_PAGES_AUTO, 0, MEMCOST_PREFAULT_NOW, 0, nullptr, MEMCOST_NUMA_INHERIT, 0, 0};
}

memcost_pool* memcost_pool_create(size_t max_bytes) { return new (std::nothrow) memcost_pool(max_bytes); }
void memcost_pool_trim(memcost_pool* pool, size_t keep_bytes) {
  if (pool) pool->pool.trim(keep_bytes);
}
memcost_pool_stats memcost_pool_get_stats(const memcost_pool* pool) {
  if (!pool) return memcost_pool_stats{0, 0, 0, 0, 0};
  auto stats = pool->pool.stats();
  return memcost_pool_stats{stats.hits, stats.misses, stats.bytes_held, stats.bytes_trimmed, stats.pieces_held};
}
void memcost_pool_destroy(memcost_pool* pool) { delete pool; }

memcost_status memcost_array_create_zeroed(size_t count, size_t element_size, const memcost_options* options,
                                           memcost_array** array) {
  return create(count, element_size, nullptr, options, array);
}

memcost_status memcost_array_create_filled(size_t count, size_t element_size, const void* value,
                                           const memcost_options* options, memcost_array** array) {
  if (!value) {
    last_error = "value is a null pointer";
    return MEMCOST_ERROR_BAD_ARGUMENT;
  }
  return create(count, element_size, value, options, array);
}

void* memcost_array_data(const memcost_array* array) { return array ? array->memory.data() : nullptr; }
size_t memcost_array_count(const memcost_array* array) { return array ? array->count : 0; }
int memcost_array_ready(const memcost_array* array, size_t index) {
  return array && index < array->count && (!array->job || array->job->ready(index)) ? 1 : 0;
}
void memcost_array_wait(memcost_array* array) {
  if (array && array->job) array->job->wait();
}
const char* memcost_array_page_kind(const memcost_array* array) { return array ? array->report.page_kind.c_str() : ""; }
double memcost_array_huge_fraction(const memcost_array* array) {
  return array ? memcost::detail::huge_fraction(array->memory.data(), array->memory.bytes()) : 0.0;
}
const char* memcost_array_numa_policy(const memcost_array* array) { return array ? array->report.numa_policy.c_str() : ""; }
const char* memcost_array_fallbacks(const memcost_array* array) { return array ? array->fallbacks.c_str() : ""; }
void memcost_array_destroy(memcost_array* array) { delete array; }
const char* memcost_last_error(void) { return last_error.c_str(); }

}  // extern "C"
