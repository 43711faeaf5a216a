// What a test needs of the machine (perf events, tracepoints, BPF, a hugetlb pool) but does not
// find: skipped with the reason, except where `make test` runs as root and sets
// MEMCOST_REQUIRE_TRACING, so that those paths are always exercised in CI: there it fails.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

#define MEMCOST_SKIP_OR_FAIL(reason)                                  \
  do {                                                                \
    if (std::getenv("MEMCOST_REQUIRE_TRACING") != nullptr) {          \
      FAIL() << (reason);                                             \
    }                                                                 \
    GTEST_SKIP() << (reason);                                         \
  } while (0)
