// A module's symbols, read once and sorted, for naming the addresses samples hit.
//
// libdwfl's dwfl_module_addrname walks every symbol of the module on every lookup (elfutils'
// dwfl_module_addrsym.c): on a program that loads PyTorch, whose libtorch_cpu.so has hundreds of
// thousands of symbols, naming a few thousand distinct addresses took 18-48 s of the tracer's CPU.
// perf and samply read a file's symbols once, sort them, and search: so does this. A table is made
// the first time a sample lands in its module, and only then: a module no sample touches costs
// nothing but its report to libdwfl.
#pragma once

#include <elfutils/libdwfl.h>

#include <cstdint>
#include <vector>

namespace memcost::trace::detail {

class SymbolTable {
 public:
  SymbolTable() = default;
  // Every function symbol of `module` (its .symtab where libdwfl finds one, else .dynsym), at its
  // address in the process, sorted.
  explicit SymbolTable(Dwfl_Module* module);

  // The symbol `address` falls in: the one whose [start, start + size) holds it, else the nearest
  // one before it that has no size (assembly labels); a global symbol before a weak one before a
  // local one at the same address. nullptr where none does. The name lives as long as the module.
  [[nodiscard]] const char* name_at(std::uint64_t address) const;
  [[nodiscard]] std::size_t size() const { return symbols_.size(); }

  struct Symbol {
    std::uint64_t start = 0, size = 0;
    const char* name = nullptr;
    int rank = 0;        // 0 global, 1 weak, 2 local: the lower wins at one address
    std::uint32_t index = 0;  // the symbol's place in its table: the earlier wins a tie, as in libdwfl
    std::uint64_t section_end = UINT64_MAX;  // a label without a size names no address past its section
  };
  // The same rule over these symbols: for tests.
  explicit SymbolTable(std::vector<Symbol> symbols);
  // For tests: the table read through libdwfl alone, to hold the direct reading to; which way
  // this one was read; its symbols, sorted.
  static SymbolTable through_libdwfl(Dwfl_Module* module);
  [[nodiscard]] bool read_directly() const { return read_directly_; }
  [[nodiscard]] const std::vector<Symbol>& symbols() const { return symbols_; }

 private:
  // Straight from the symbol section libdwfl chose, each section's header read once: false where
  // the file is not one this reads (a relocatable object, a merged second table, an extended
  // section index), and libdwfl is asked symbol by symbol instead.
  bool read_section(Dwfl_Module* module, int count);
  void read_through_libdwfl(Dwfl_Module* module, int count);
  void sort();
  static constexpr std::size_t kLookBack = 64, kLookBackAtMost = 4096;
  std::vector<Symbol> symbols_;  // by start, then rank
  bool read_directly_ = false;
};

}  // namespace memcost::trace::detail
