#include "trace/unwind/symbol_names.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

// libiberty's headers declare basename() differently from glibc's <string.h>; this says glibc's stands.
#define HAVE_DECL_BASENAME 1
#include <libiberty/demangle.h>

namespace memcost::trace {

bool is_rust_symbol(std::string_view name) {
  if (name.starts_with("_R")) return true;
  constexpr std::size_t kHashTail = 20;  // "17h" + 16 hex digits + "E"
  if (!name.starts_with("_ZN") || name.size() <= kHashTail || !name.ends_with("E")) return false;
  const std::string_view tail = name.substr(name.size() - kHashTail);
  return tail.starts_with("17h") &&
         std::all_of(tail.begin() + 3, tail.end() - 1, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

std::string demangle(const char* name) {
  if (name == nullptr) return {};
  using Owned = std::unique_ptr<char, void (*)(void*)>;
  if (is_rust_symbol(name)) {
    // binutils' Rust demangler (legacy and v0); without DMGL_VERBOSE it leaves out the legacy hash.
    Owned readable(cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_RUST), std::free);
    if (readable) return readable.get();
  }
  int status = 0;
  Owned readable(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && readable ? std::string(readable.get()) : std::string(name);
}

}  // namespace memcost::trace
