// The inlined functions at an address, from one walk of its unit (inline_scopes.hpp).
#include "trace/unwind/inline_scopes.hpp"

#include <dwarf.h>

#include <algorithm>

namespace memcost::trace::detail {

InlineScopes::InlineScopes(Dwarf_Die* unit) {
  if (unit == nullptr) return;
  Dwarf_Die child;
  if (dwarf_child(unit, &child) == 0) walk(&child, -1, 0);
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) {
    return a.low != b.low ? a.low < b.low : a.node < b.node;
  });
}

// Depth first over the siblings from `die` on: subprograms and inlined subroutines with code are
// nodes (their children's parent); every other entry's children belong to the enclosing node.
void InlineScopes::walk(Dwarf_Die* die, int parent, int depth) {
  Dwarf_Die current = *die;
  do {
    const int tag = dwarf_tag(&current);
    int node = parent;
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      Dwarf_Addr base = 0, low = 0, high = 0;
      bool has_code = false;
      for (std::ptrdiff_t offset = 0; (offset = dwarf_ranges(&current, offset, &base, &low, &high)) > 0;) {
        if (high <= low) continue;
        if (!has_code) {
          nodes_.push_back({current, parent, depth, tag == DW_TAG_subprogram});
          has_code = true;
        }
        ranges_.push_back({low, high, static_cast<int>(nodes_.size() - 1)});
      }
      if (has_code) node = static_cast<int>(nodes_.size() - 1);
    }
    Dwarf_Die child;
    if (dwarf_haschildren(&current) && dwarf_child(&current, &child) == 0) walk(&child, node, node == parent ? depth : depth + 1);
  } while (dwarf_siblingof(&current, &current) == 0);
}

std::vector<Dwarf_Die> InlineScopes::at(std::uint64_t address) const {
  // Nested ranges start no earlier than those holding them: among the ranges that hold the address,
  // the one that starts last is the innermost (the deepest, where two start together).
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), address,
                             [](std::uint64_t value, const Range& range) { return value < range.low; });
  int innermost = -1;
  std::uint64_t innermost_low = 0;
  while (it != ranges_.begin()) {
    --it;
    if (innermost >= 0 && it->low < innermost_low) break;
    if (address < it->high && (innermost < 0 || nodes_[it->node].depth > nodes_[innermost].depth)) {
      innermost = it->node;
      innermost_low = it->low;
    }
  }
  std::vector<Dwarf_Die> chain;
  for (int node = innermost; node >= 0; node = nodes_[node].parent) {
    chain.push_back(nodes_[node].die);
    if (nodes_[node].subprogram) break;
  }
  return chain;
}

}  // namespace memcost::trace::detail
