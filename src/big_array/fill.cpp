// Writing a value over a big range: memset, ordinary stores, or non-temporal (streaming) stores.
//
// Ordinary stores to memory not in the cache first read each line for ownership, so a fill
// moves twice the bytes it writes; streaming stores write whole lines past the cache and do
// not. glibc's memset already streams above its own threshold; a value of varied bytes needs
// this code. Fresh memory is the exception: the kernel has just cleared each page as the fill
// faulted it, so its lines are in the cache and ordinary stores hit them, where streaming
// stores would first have to evict them. Measured by `memcost bigarray` (fill methods: fresh
// and faulted-in memory side by side); the rule below follows those figures.
#include <cstdint>
#include <cstring>

#include "memcost/big_array.hpp"
#include "os/os.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define MEMCOST_STREAMING_STORES 1
#endif

namespace memcost::detail {
namespace {

constexpr std::size_t line_bytes = 64;

bool streams(std::size_t pattern_bytes) {
#ifdef MEMCOST_STREAMING_STORES
  return pattern_bytes != 0 && pattern_bytes <= line_bytes && (pattern_bytes & (pattern_bytes - 1)) == 0;
#else
  (void)pattern_bytes;
  return false;
#endif
}

// The cache level to stay out of; 0 when the OS does not say (then nothing streams by default).
std::size_t last_level_cache() {
  static const std::size_t bytes = os::last_level_cache_bytes().value_or(0);
  return bytes;
}

}  // namespace

fill_method resolve_fill_method(fill_method asked, std::size_t total_bytes, std::size_t pattern_bytes, bool repeated_byte,
                                bool fresh_pages) {
  switch (asked) {
    case fill_method::automatic:
      if (fresh_pages) return fill_method::stores;
      if (repeated_byte) return fill_method::memset;
      if (streams(pattern_bytes) && last_level_cache() != 0 && total_bytes > last_level_cache()) return fill_method::nontemporal;
      return fill_method::stores;
    case fill_method::memset: return repeated_byte ? fill_method::memset : fill_method::stores;
    case fill_method::nontemporal: return streams(pattern_bytes) ? fill_method::nontemporal : fill_method::stores;
    case fill_method::stores: return fill_method::stores;
  }
  return fill_method::stores;
}

const char* fill_method_name(fill_method method) {
  switch (method) {
    case fill_method::automatic: return "automatic";
    case fill_method::memset: return "memset";
    case fill_method::stores: return "stores";
    case fill_method::nontemporal: return "nontemporal";
  }
  return "";
}

void fill_pattern(void* destination, std::size_t bytes, const void* pattern, std::size_t pattern_bytes, fill_method method) {
  auto* out = static_cast<unsigned char*>(destination);
  if (method == fill_method::memset) {
    std::memset(out, *static_cast<const unsigned char*>(pattern), bytes);
    return;
  }
  // Whole lines of the pattern need a pattern that tiles a line and starts at a multiple of its size.
  if (line_bytes % pattern_bytes != 0 || reinterpret_cast<std::uintptr_t>(out) % pattern_bytes != 0) {
    for (; bytes >= pattern_bytes; out += pattern_bytes, bytes -= pattern_bytes) std::memcpy(out, pattern, pattern_bytes);
    return;
  }
  alignas(line_bytes) unsigned char line[line_bytes];
  for (std::size_t i = 0; i < line_bytes; i += pattern_bytes) std::memcpy(line + i, pattern, pattern_bytes);
  for (; bytes >= pattern_bytes && reinterpret_cast<std::uintptr_t>(out) % line_bytes != 0;
       out += pattern_bytes, bytes -= pattern_bytes) {
    std::memcpy(out, pattern, pattern_bytes);
  }
  const std::size_t lines = bytes / line_bytes;
#ifdef MEMCOST_STREAMING_STORES
  if (method == fill_method::nontemporal) {
    const auto* source = reinterpret_cast<const __m128i*>(line);
    const __m128i a = _mm_load_si128(source), b = _mm_load_si128(source + 1), c = _mm_load_si128(source + 2),
                  d = _mm_load_si128(source + 3);
    for (std::size_t i = 0; i < lines; ++i) {
      auto* target = reinterpret_cast<__m128i*>(out + i * line_bytes);
      _mm_stream_si128(target, a);
      _mm_stream_si128(target + 1, b);
      _mm_stream_si128(target + 2, c);
      _mm_stream_si128(target + 3, d);
    }
    // Streaming stores are weakly ordered: make them visible before this thread reports its part done.
    _mm_sfence();
  } else
#endif
  {
    for (std::size_t i = 0; i < lines; ++i) std::memcpy(out + i * line_bytes, line, line_bytes);
  }
  out += lines * line_bytes;
  bytes -= lines * line_bytes;
  for (; bytes >= pattern_bytes; out += pattern_bytes, bytes -= pattern_bytes) std::memcpy(out, pattern, pattern_bytes);
}

}  // namespace memcost::detail
