// The Python stacks the preload library captures (interposer.c, python_stack()): finding its
// block in a copied user stack, decoding it, and merging its frames into the native stack.
#pragma once

#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "trace/preload/abi.h"
#include "trace/tracer.hpp"

namespace memcost::trace::detail {

inline constexpr std::uint64_t kPythonMagic = MEMCOST_PYTHON_MAGIC;
inline constexpr std::size_t kPythonHeaderBytes = sizeof(memcost_python_header);  // magic, bytes, frames
inline constexpr std::size_t kPythonMostBytes = MEMCOST_PYTHON_BLOCK_BYTES;
inline constexpr std::uint16_t kPythonSameFile = MEMCOST_PYTHON_SAME_FILE;  // the file of the frame before
static_assert(kPythonHeaderBytes == 16, "magic, bytes and frames, without padding");
static_assert(sizeof(memcost_python_entry) == 8, "line, file bytes and function bytes, without padding");

// A big call made while its thread had released the GIL carries a pending block (the release's
// number); the thread sends its stack for that release when it takes the GIL back (abi.h).
inline constexpr std::uint64_t kPythonPendingMagic = MEMCOST_PYTHON_PENDING_MAGIC;
inline constexpr std::uint64_t kPythonResolvesMagic = MEMCOST_PYTHON_RESOLVES_MAGIC;
static_assert(sizeof(memcost_python_pending) == kPythonHeaderBytes, "a pending block is as long as a header");

// The release a pending block names; 0 for any other block.
inline std::uint64_t pending_release(std::string_view block) {
  memcost_python_pending pending{};
  if (block.size() != sizeof(pending)) return 0;
  std::memcpy(&pending, block.data(), sizeof(pending));
  return pending.magic == kPythonPendingMagic ? pending.release : 0;
}

// The block as it starts at `at` (header and frames, or a pending block), or empty when there is
// none or it does not fit in `available`.
inline std::string_view python_block_at(const std::uint8_t* at, std::size_t available) {
  if (available < kPythonHeaderBytes) return {};
  memcost_python_header header{};
  std::memcpy(&header, at, sizeof(header));
  if (header.magic == kPythonPendingMagic) return {reinterpret_cast<const char*>(at), sizeof(memcost_python_pending)};
  if (header.magic != kPythonMagic || header.bytes > kPythonMostBytes || kPythonHeaderBytes + header.bytes > available) return {};
  const std::uint32_t bytes = header.bytes;
  return {reinterpret_cast<const char*>(at), kPythonHeaderBytes + bytes};
}

// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF). The preload library writes CPython's own UTF-8 of each name, cut at a character's
// start: a block with bytes that are not UTF-8 in a name is not as it wrote it.
inline bool valid_utf8(std::string_view text) {
  const auto* at = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = at + text.size();
  while (at < end) {
    const unsigned char lead = *at;
    if (lead < 0x80) {
      ++at;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // overlong
      if (lead == 0xED) high = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;   // overlong
      if (lead == 0xF4) high = 0x8F;  // past U+10FFFF
    } else {
      return false;  // a continuation byte, 0xC0, 0xC1 or 0xF5 and above
    }
    if (static_cast<std::size_t>(end - at) < length || at[1] < low || at[1] > high) return false;
    for (std::size_t i = 2; i < length; ++i) {
      if ((at[i] & 0xC0) != 0x80) return false;
    }
    at += length;
  }
  return true;
}

// Walks a block's frames, innermost first, calling `each(line, same, file, function)` (`same`: the
// frame's file is the frame before's, and `file` is empty); false, having called it for some frames or none, when the block does
// not decode exactly or a name in it is not UTF-8 (the probe sends names as JSON text).
template <typename Each>
bool walk_python_block(std::string_view block, Each&& each) {
  if (block.size() < kPythonHeaderBytes) return false;
  memcost_python_header header{};
  std::memcpy(&header, block.data(), sizeof(header));
  if (header.magic != kPythonMagic) return false;  // a pending block: no frames yet
  std::size_t at = kPythonHeaderBytes;
  for (std::uint32_t i = 0; i < header.frames; ++i) {
    memcost_python_entry entry{};
    if (at + sizeof(entry) > block.size()) return false;
    std::memcpy(&entry, block.data() + at, sizeof(entry));
    at += sizeof(entry);
    std::uint16_t file_bytes = entry.file_bytes;
    const std::uint16_t function_bytes = entry.function_bytes;
    const bool same = file_bytes == kPythonSameFile;
    if (same) file_bytes = 0;
    if (at + file_bytes + function_bytes > block.size() || (same && i == 0)) return false;
    const std::string_view file = block.substr(at, file_bytes), function = block.substr(at + file_bytes, function_bytes);
    if (!valid_utf8(file) || !valid_utf8(function)) return false;
    each(static_cast<int>(entry.line), same, file, function);
    at += file_bytes + function_bytes;
  }
  return at == block.size();
}

// Whether a block with frames decodes (walk_python_block), without making them.
inline bool python_block_decodes(std::string_view block) {
  return walk_python_block(block, [](int, bool, std::string_view, std::string_view) {});
}

// The frames of a block, innermost first; none when it does not decode (walk_python_block).
inline std::vector<Frame> python_frames(std::string_view block) {
  std::vector<Frame> frames;
  const bool whole = walk_python_block(block, [&frames](int line, bool same, std::string_view file,
                                                            std::string_view function) {
    Frame frame;
    frame.kind = FrameKind::python;
    frame.file = same ? frames.back().file : std::string(file);
    frame.function = std::string(function);
    frame.line = line;
    frame.module = frame.file;  // a Python frame's "module" is its source file
    frames.push_back(std::move(frame));
  });
  return whole ? frames : std::vector<Frame>{};
}

// CPython's eval loop: the native function that runs Python frames (3.11+: _PyEval_EvalFrameDefault;
// 2.7: PyEval_EvalFrameEx).
inline bool interpreter_loop(std::string_view function) {
  return function.starts_with("_PyEval_EvalFrame") || function == "PyEval_EvalFrameEx";
}

// The Python frames stand where the interpreter runs them: in place of the eval loop's native
// frames. The frames inside the innermost eval loop (the C code the Python line called) stay,
// then the Python frames, then the native frames outside the outermost eval loop. The native
// frames between two eval loops (a C function that called back into Python) are left out: the
// public frame API does not say which eval loop runs which Python frame. A stack cut short before
// any eval loop gets the Python frames at its end.
inline std::vector<Frame> merge_python(std::vector<Frame> native, std::vector<Frame> python) {
  if (python.empty()) return native;
  auto is_eval_loop = [](const Frame& frame) { return interpreter_loop(frame.function); };
  std::size_t innermost = native.size(), outermost = native.size();
  for (std::size_t i = 0; i < native.size(); ++i) {
    if (!is_eval_loop(native[i])) continue;
    if (innermost == native.size()) innermost = i;
    outermost = i;
  }
  // Moved, not copied: a stack's frames hold three strings each, and every new stack is merged.
  auto from = [&](std::size_t at) { return std::make_move_iterator(native.begin() + static_cast<std::ptrdiff_t>(at)); };
  std::vector<Frame> merged(from(0), from(innermost));
  merged.insert(merged.end(), std::make_move_iterator(python.begin()), std::make_move_iterator(python.end()));
  if (outermost < native.size()) merged.insert(merged.end(), from(outermost + 1), from(native.size()));
  return merged;
}

}  // namespace memcost::trace::detail
