// A module's symbols, sorted once (symbol_table.hpp).
#include "trace/unwind/symbol_table.hpp"

#include <gelf.h>

#include <algorithm>
#include <unordered_map>

namespace memcost::trace::detail {

SymbolTable::SymbolTable(Dwfl_Module* module) {
  const int count = module ? dwfl_module_getsymtab(module) : -1;
  if (count <= 0) return;
  symbols_.reserve(static_cast<std::size_t>(count));
  std::unordered_map<GElf_Word, std::uint64_t> section_ends;  // by section index, in the process
  for (int i = 1; i < count; ++i) {
    GElf_Sym symbol;
    GElf_Addr address = 0;
    GElf_Word section = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name = dwfl_module_getsym_info(module, i, &symbol, &address, &section, &elf, &bias);
    const int type = GELF_ST_TYPE(symbol.st_info);
    if (name == nullptr || *name == '\0' || symbol.st_shndx == SHN_UNDEF || address == 0 ||
        (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE)) {
      continue;
    }
    const int binding = GELF_ST_BIND(symbol.st_info);
    std::uint64_t section_end = UINT64_MAX;
    if (symbol.st_size == 0 && elf != nullptr) {
      auto [end, fresh] = section_ends.try_emplace(section, UINT64_MAX);
      GElf_Shdr header;
      if (fresh && gelf_getshdr(elf_getscn(elf, section), &header) != nullptr) end->second = header.sh_addr + header.sh_size + bias;
      section_end = end->second;
    }
    symbols_.push_back({address, symbol.st_size, name, binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2,
                        static_cast<std::uint32_t>(i), section_end});
  }
  sort();
}

SymbolTable::SymbolTable(std::vector<Symbol> symbols) : symbols_(std::move(symbols)) { sort(); }

void SymbolTable::sort() {
  std::sort(symbols_.begin(), symbols_.end(), [](const Symbol& a, const Symbol& b) {
    return a.start != b.start ? a.start < b.start : a.rank != b.rank ? a.rank < b.rank : a.index < b.index;
  });
}

const char* SymbolTable::name_at(std::uint64_t address) const {
  // Back from the nearest symbol at or before the address. Starts descend, and within one start the
  // ranks descend too, so the last match seen at a start is its best-ranked one.
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), address,
                             [](std::uint64_t value, const Symbol& symbol) { return value < symbol.start; });
  const Symbol* sized = nullptr;     // the nearest symbol whose extent holds the address
  const Symbol* sizeless = nullptr;  // the nearest one without an extent, where none holds it
  bool passed_sized = false;
  for (std::size_t scanned = 0; it != symbols_.begin(); ++scanned) {
    --it;
    if (sized && it->start < sized->start) break;
    if (it->size > 0 && address < it->start + it->size) sized = &*it;
    else if (it->size == 0 && !passed_sized && address < it->section_end && (!sizeless || it->start == sizeless->start)) {
      sizeless = &*it;
    }
    // A sized symbol that ends before the address rules out the labels before it (libdwfl's rule:
    // the address is past that function, not inside some earlier label's code).
    else if (it->size > 0 && (!sizeless || it->start != sizeless->start)) passed_sized = true;
    // An outer symbol holding the address is looked for a little further back (a function's local
    // labels lie inside it), not through the whole table.
    if (!sized && sizeless && (it->start < sizeless->start) && scanned > kLookBack) break;
    if (scanned > kLookBackAtMost) break;
  }
  const Symbol* found = sized ? sized : sizeless;
  return found ? found->name : nullptr;
}

}  // namespace memcost::trace::detail
