// The functions inlined at an address, from one walk over its compile unit's debugging entries.
//
// libdw's dwarf_getscopes walks a compile unit from its root on every lookup, and naming a frame's
// inlined callers took two such walks (the scopes, then the chain of their concrete parents). In
// a big unit (CPython's eval loop in a libpython built with -g, a C++ file heavy with templates)
// that was most of the tracer's CPU. The unit is walked once, the first time a frame lands in it;
// each address is then a search.
#pragma once

#include <elfutils/libdw.h>

#include <cstdint>
#include <vector>

namespace memcost::trace::detail {

class InlineScopes {
 public:
  InlineScopes() = default;
  // Every subprogram and inlined subroutine of `unit` with its address ranges (in the unit's own
  // addresses, before the module's bias).
  explicit InlineScopes(Dwarf_Die* unit);

  // The inlined subroutines at `address`, innermost first, and last the function they are inlined
  // in (a subprogram), as the code is nested; empty where no function of the unit holds it.
  [[nodiscard]] std::vector<Dwarf_Die> at(std::uint64_t address) const;

 private:
  struct Node {
    Dwarf_Die die;
    int parent = -1;  // the nearest enclosing node, or -1
    int depth = 0;
    bool subprogram = false;
  };
  struct Range {
    std::uint64_t low = 0, high = 0;
    int node = 0;
  };
  void walk(Dwarf_Die* die, int parent, int depth);
  std::vector<Node> nodes_;
  std::vector<Range> ranges_;  // by low
};

}  // namespace memcost::trace::detail
