// The machine description: the `context` line every probe run starts with.
#pragma once

#include "probe/emitter.hpp"

namespace memcost::probe {

inline constexpr int schema_version = 1;

[[nodiscard]] json machine_context();

}  // namespace memcost::probe
