// A module's symbols, read once and sorted where samples hit, for naming the addresses they hit.
//
// libdwfl's dwfl_module_addrname walks every symbol of the module on every lookup (elfutils'
// dwfl_module_addrsym.c): on a program that loads PyTorch, whose libtorch_cpu.so has hundreds of
// thousands of symbols, naming a few thousand distinct addresses took 18-48 s of the tracer's CPU.
// perf and samply read a file's symbols once, sort them, and search: so does this. A table is made
// the first time a sample lands in its module, and only then: a module no sample touches costs
// nothing but its report to libdwfl.
#pragma once

#include <elfutils/libdwfl.h>
#include <gelf.h>

#include <cstddef>
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
  // Not const: the symbols near `address` are sorted the first time one is asked for there.
  [[nodiscard]] const char* name_at(std::uint64_t address);
  [[nodiscard]] std::size_t size() const { return order_.size(); }

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
  [[nodiscard]] bool read_directly() const { return file_.symbols != nullptr; }
  [[nodiscard]] std::vector<Symbol> symbols();

 private:
  // A section's flags and end, read once rather than once a symbol (libdwfl's cost).
  struct Section {
    bool allocated = true;
    std::uint64_t end = UINT64_MAX;
  };
  // The file's symbol section, read in place, where it was read directly: a symbol is made from
  // its entry only where a lookup needs it. A table of its own (40 bytes a symbol, 25 MB for
  // libtorch_cpu.so's 622,000) was a seventh of the tracer's CPU on a traced `import torch`, in
  // faulting its pages in and moving its entries into buckets.
  struct FileSymbols {
    const GElf_Sym* symbols = nullptr;
    const char* strings = nullptr;
    std::uint64_t bias = 0;
    std::vector<Section> sections;
  };
  // Straight from the symbol section libdwfl chose, each section's header read once: false where
  // the file is not one this reads (a relocatable object, a merged second table, an extended
  // section index), and libdwfl is asked symbol by symbol instead. `kept`: the code symbols' places.
  bool read_section(Dwfl_Module* module, int count, std::vector<std::uint32_t>& kept);
  void read_through_libdwfl(Dwfl_Module* module, int count);
  // Every symbol of listed_, by its place there: the ids of a table not read directly.
  [[nodiscard]] std::vector<std::uint32_t> listed_ids() const;
  // Symbol `id`: its place in the file's table where read directly, else in listed_.
  [[nodiscard]] Symbol symbol(std::uint32_t id) const;
  [[nodiscard]] std::uint64_t start_of(std::uint32_t id) const;
  // The symbols' ids into buckets of about kBucketSymbols by start, by counting: each bucket is
  // sorted when a lookup first needs it (sort_bucket). Sorting the whole table was half the cost of
  // naming a traced `import torch`'s frames, whose libtorch_cpu.so has 622,000 symbols and whose
  // samples touch a few hundred places in it.
  void into_buckets(const std::vector<std::uint32_t>& ids);
  [[nodiscard]] std::size_t bucket_of(std::uint64_t address) const;
  void sort_bucket(std::size_t bucket);
  static constexpr std::size_t kBucketSymbols = 16;
  static constexpr std::size_t kLookBack = 64, kLookBackAtMost = 4096;
  FileSymbols file_;
  std::vector<Symbol> listed_;  // where not read directly
  std::vector<std::uint32_t> order_;  // ids by bucket; within a sorted bucket by start, then rank, then index
  std::vector<std::size_t> bucket_starts_;  // bucket b is order_[bucket_starts_[b], bucket_starts_[b + 1])
  std::vector<bool> bucket_sorted_;
  std::uint64_t lowest_start_ = 0;
  unsigned bucket_shift_ = 0;  // an address's bucket: (address - lowest_start_) >> bucket_shift_
};

}  // namespace memcost::trace::detail
