// The costs experiment's buffers (buffers.hpp).
#include "probe/experiments/costs/buffers.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "memcost/measure.hpp"
#include "probe/arguments.hpp"
#include "probe/emitter.hpp"

namespace memcost::probe::costs {
namespace {

[[noreturn]] void out_of_memory(std::size_t size) {
  throw ProbeError(exit_not_enough_memory, "out_of_memory",
                   "allocating " + human_size(size) + " failed; ask for smaller --sizes or free memory");
}

}  // namespace

const char* route_name(Route route) {
  switch (route) {
    case Route::os: return "os";
    case Route::malloc: return "malloc";
    case Route::new_array: return "new";
  }
  return "?";
}


Buffer allocate(Route route, os::PageKind kind, std::size_t size) {
  Buffer buffer{nullptr, size, route};
  switch (route) {
    case Route::os: {
      os::Mapping mapping = os::map({size, kind});
      if (!mapping.status.ok()) {
        throw ProbeError(exit_unsupported, "map_failed",
                         std::string(os::page_kind_name(kind)) + " mapping of " + human_size(size) + " failed: " +
                             mapping.status.message());
      }
      buffer.data = static_cast<unsigned char*>(mapping.address);
      break;
    }
    case Route::malloc: buffer.data = static_cast<unsigned char*>(std::malloc(size)); break;
    case Route::new_array: buffer.data = new (std::nothrow) unsigned char[size]; break;
  }
  if (!buffer.data) out_of_memory(size);
  return buffer;
}

void apply_page_kind(const Buffer& buffer, os::PageKind kind) {
  if (buffer.route == Route::os) return;
  const std::uintptr_t page = os::base_page_size();
  auto begin = (reinterpret_cast<std::uintptr_t>(buffer.data) + page - 1) & ~(page - 1);
  auto end = (reinterpret_cast<std::uintptr_t>(buffer.data) + buffer.size_bytes) & ~(page - 1);
  if (end > begin) (void)os::advise(reinterpret_cast<void*>(begin), end - begin, kind);
}

void release(const Buffer& buffer) {
  switch (buffer.route) {
    case Route::os: (void)os::release(buffer.data, buffer.size_bytes); break;
    case Route::malloc: std::free(buffer.data); break;
    case Route::new_array: delete[] buffer.data; break;
  }
}

void write_all(const Buffer& buffer, int value) {
  std::memset(buffer.data, value, buffer.size_bytes);
  measure::keep_writes(buffer.data);
}

}  // namespace memcost::probe::costs
