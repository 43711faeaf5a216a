// Helpers shared by the C++ tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "os/capabilities.hpp"
#include "os/os.hpp"

namespace memcost::test {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Under AddressSanitizer its own allocator maps memory at will, so counts of
// mappings say nothing there; LeakSanitizer checks for leaks instead.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool mappings_are_countable = false;
#else
constexpr bool mappings_are_countable = true;
#endif

// A mapping that is released when the test ends, whatever happens.
struct ScopedMapping {
  os::Mapping mapping;
  explicit ScopedMapping(const os::MapRequest& request) : mapping(os::map(request)) {}
  explicit ScopedMapping(os::Mapping existing) : mapping(existing) {}
  ~ScopedMapping() {
    if (mapping.address) (void)os::release(mapping.address, mapping.size_bytes);
  }
  ScopedMapping(const ScopedMapping&) = delete;
  ScopedMapping& operator=(const ScopedMapping&) = delete;
  [[nodiscard]] char* bytes() const { return static_cast<char*>(mapping.address); }
};

// A THP-sized range aligned to 2 MB inside a larger base-page reservation, so
// that the kernel can back it with PMD huge pages.
struct AlignedThpRange {
  ScopedMapping outer;
  char* begin = nullptr;
  std::size_t size_bytes = 0;
  explicit AlignedThpRange(std::size_t size)
      : outer(os::MapRequest{size + 2 * MiB, os::PageKind::base}), size_bytes(size) {
    auto address = reinterpret_cast<std::uintptr_t>(outer.bytes());
    begin = reinterpret_cast<char*>((address + 2 * MiB - 1) & ~(std::uintptr_t{2 * MiB} - 1));
  }
};

inline bool thp_usable() {
  return os::page_kind_verdict(os::capabilities(), os::PageKind::thp, 2 * MiB).usable;
}

}  // namespace memcost::test
