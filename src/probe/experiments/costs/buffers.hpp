// The buffers the costs experiment measures: one allocation by one route (the OS, malloc, new[]),
// made, advised, written and released, each call alone so that a timer covers it alone.
#pragma once

#include <cstddef>

#include "os/os.hpp"

namespace memcost::probe::costs {

enum class Route { os, malloc, new_array };
[[nodiscard]] const char* route_name(Route route);

struct Buffer {
  unsigned char* data = nullptr;
  std::size_t size_bytes = 0;
  Route route = Route::os;
};

// The allocation itself, nothing else: this is what the alloc timer covers.
[[nodiscard]] Buffer allocate(Route route, os::PageKind kind, std::size_t size);
// malloc and new[] know nothing of page kinds: the kind's advice is applied
// to the page-aligned inside of the block they returned, before first touch.
void apply_page_kind(const Buffer& buffer, os::PageKind kind);
void release(const Buffer& buffer);
void write_all(const Buffer& buffer, int value);

}  // namespace memcost::probe::costs
