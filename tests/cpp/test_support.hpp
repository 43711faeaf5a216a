// Helpers shared by the C++ tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "memcost/measure.hpp"
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

// The minor faults this process takes while `work` runs; nullopt where the OS counts none (Wine).
template <class Work>
std::optional<std::uint64_t> faults_during(Work&& work) {
  auto before = measure::take_snapshot({.machine = false});
  work();
  auto interval = measure::between(before, measure::take_snapshot({.machine = false}));
  if (!interval.faults_counted) return std::nullopt;
  return interval.minor_faults;
}

// Memory handed out again against the same size fresh on base pages: the fresh one takes a fault per
// page, the reused one fewer than a sixteenth of that. Not zero: AddressSanitizer's own bookkeeping
// for the fill's threads takes 49-73 faults here (none without it).
inline void expect_reuse_takes_far_fewer_faults(std::optional<std::uint64_t> fresh, std::optional<std::uint64_t> reused,
                                                std::size_t bytes) {
  if (!fresh || !reused) return;  // not counted here
  EXPECT_GE(*fresh, bytes / 4096) << "fresh memory on base pages takes a fault per page";
  EXPECT_LT(*reused, *fresh / 16) << "the fresh memory took " << *fresh;
}

inline bool thp_usable() {
  return os::page_kind_verdict(os::capabilities(), os::PageKind::thp, 2 * MiB).usable;
}

}  // namespace memcost::test
