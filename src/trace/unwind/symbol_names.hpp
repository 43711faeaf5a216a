// Symbol names as people read them: C++ (Itanium ABI) and Rust (legacy and v0 mangling) demangled.
#pragma once

#include <string>
#include <string_view>

namespace memcost::trace {

// True for a Rust symbol: v0 (`_R…`) or legacy (an Itanium-style path ending in `17h` and a 16-digit hash).
[[nodiscard]] bool is_rust_symbol(std::string_view name);

// The readable name: Rust's without the legacy hash, C++'s with its parameters; a name that is not
// mangled, or that neither demangler reads, is returned as it is. nullptr gives "".
[[nodiscard]] std::string demangle(const char* name);

}  // namespace memcost::trace
