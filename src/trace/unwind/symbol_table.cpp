// A module's symbols, bucketed once and sorted where looked up (symbol_table.hpp).
#include "trace/unwind/symbol_table.hpp"

#include <gelf.h>

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace memcost::trace::detail {

namespace {

int rank_of(unsigned char info) {
  const int binding = GELF_ST_BIND(info);
  return binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2;
}

bool is_code(const GElf_Sym& symbol) {
  const int type = GELF_ST_TYPE(symbol.st_info);
  return symbol.st_shndx != SHN_UNDEF && (type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE);
}

}  // namespace

SymbolTable::SymbolTable(Dwfl_Module* module) {
  const int count = module ? dwfl_module_getsymtab(module) : -1;
  if (count <= 0) return;
  read_directly_ = read_section(module, count);
  if (!read_directly_) read_through_libdwfl(module, count);
  into_buckets();
}

SymbolTable SymbolTable::through_libdwfl(Dwfl_Module* module) {
  SymbolTable table;
  const int count = module ? dwfl_module_getsymtab(module) : -1;
  if (count <= 0) return table;
  table.read_through_libdwfl(module, count);
  table.into_buckets();
  return table;
}

bool SymbolTable::read_section(Dwfl_Module* module, int count) {
  // The file and bias libdwfl took its symbols from, told by its first symbol.
  GElf_Sym first;
  GElf_Word first_section = 0;
  GElf_Addr first_address = 0;
  Elf* elf = nullptr;
  Dwarf_Addr bias = 0;
  if (dwfl_module_getsym_info(module, 1, &first, &first_address, &first_section, &elf, &bias) == nullptr || elf == nullptr) {
    return false;
  }
  GElf_Ehdr file_header;
  if (gelf_getehdr(elf, &file_header) == nullptr || file_header.e_type == ET_REL) return false;
  // libdwfl takes .symtab where the file has one, else .dynsym. Its count must be this section's
  // alone: a second table it merged (MiniDebugInfo's) is left to libdwfl.
  Elf_Scn* table = nullptr;
  for (const Elf64_Word wanted : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr && table == nullptr; section = elf_nextscn(elf, section)) {
      GElf_Shdr header;
      if (gelf_getshdr(section, &header) != nullptr && header.sh_type == wanted) table = section;
    }
    if (table != nullptr) break;
  }
  GElf_Shdr table_header;
  if (table == nullptr || gelf_getshdr(table, &table_header) == nullptr || table_header.sh_entsize == 0 ||
      table_header.sh_size / table_header.sh_entsize != static_cast<std::uint64_t>(count)) {
    return false;
  }
  Elf_Data* data = elf_getdata(table, nullptr);
  Elf_Data* names = elf_getdata(elf_getscn(elf, table_header.sh_link), nullptr);
  // Every name must end inside the string table: its last byte is the terminator then.
  if (data == nullptr || names == nullptr || names->d_buf == nullptr || names->d_size == 0 ||
      static_cast<const char*>(names->d_buf)[names->d_size - 1] != '\0') {
    return false;
  }
  // A 64-bit file's symbols are read in place, as libelf gives them in this machine's byte order
  // (GElf_Sym is Elf64_Sym): gelf_getsym's copy of each was a third of reading PyTorch's table. A
  // 32-bit file is left to libdwfl.
  if (gelf_getclass(elf) != ELFCLASS64 || data->d_type != ELF_T_SYM || data->d_buf == nullptr ||
      data->d_size / sizeof(GElf_Sym) < static_cast<std::size_t>(count)) {
    return false;
  }
  const auto* in_file = static_cast<const GElf_Sym*>(data->d_buf);
  const char* strings = static_cast<const char*>(names->d_buf);
  // Each section's flags and end, read once rather than once a symbol (libdwfl's cost).
  std::size_t section_count = 0;
  if (elf_getshdrnum(elf, &section_count) != 0) return false;
  struct Section {
    bool allocated = true;
    std::uint64_t end = UINT64_MAX;
  };
  std::vector<Section> sections(section_count);
  for (std::size_t i = 0; i < section_count; ++i) {
    GElf_Shdr header;
    if (gelf_getshdr(elf_getscn(elf, i), &header) == nullptr) continue;
    sections[i] = {(header.sh_flags & SHF_ALLOC) != 0, header.sh_addr + header.sh_size + bias};
  }
  symbols_.reserve(static_cast<std::size_t>(count));
  for (int i = 1; i < count; ++i) {
    const GElf_Sym& symbol = in_file[i];
    // The name is not read here: PyTorch's string table is 78 MB, and only the names of the
    // addresses samples hit are read (name_at). One that is empty there names nothing.
    if (!is_code(symbol) || symbol.st_name == 0 || symbol.st_name >= names->d_size) continue;
    // libdwfl's address: biased in a section the process maps, as is (SHN_ABS, a section it does
    // not map) elsewhere. An extended section index is left to libdwfl.
    if (symbol.st_shndx == SHN_XINDEX) return symbols_.clear(), false;
    const bool in_section = symbol.st_shndx < SHN_LORESERVE;
    if (in_section && symbol.st_shndx >= section_count) continue;
    const Section* section = in_section ? &sections[symbol.st_shndx] : nullptr;
    const std::uint64_t address = symbol.st_value + (section && section->allocated ? bias : 0);
    if (address == 0) continue;
    // libdwfl gives a label in an unmapped section no section, whose end is then unknown.
    const std::uint64_t section_end =
        symbol.st_size == 0 && section && section->allocated ? section->end : UINT64_MAX;
    symbols_.push_back({address, symbol.st_size, strings + symbol.st_name, rank_of(symbol.st_info),
                        static_cast<std::uint32_t>(i), section_end});
  }
  return true;
}

void SymbolTable::read_through_libdwfl(Dwfl_Module* module, int count) {
  symbols_.reserve(static_cast<std::size_t>(count));
  std::unordered_map<GElf_Word, std::uint64_t> section_ends;  // by section index, in the process
  for (int i = 1; i < count; ++i) {
    GElf_Sym symbol;
    GElf_Addr address = 0;
    GElf_Word section = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name = dwfl_module_getsym_info(module, i, &symbol, &address, &section, &elf, &bias);
    if (name == nullptr || *name == '\0' || address == 0 || !is_code(symbol)) continue;
    std::uint64_t section_end = UINT64_MAX;
    if (symbol.st_size == 0 && elf != nullptr) {
      auto [end, fresh] = section_ends.try_emplace(section, UINT64_MAX);
      GElf_Shdr header;
      if (fresh && gelf_getshdr(elf_getscn(elf, section), &header) != nullptr) end->second = header.sh_addr + header.sh_size + bias;
      section_end = end->second;
    }
    symbols_.push_back({address, symbol.st_size, name, rank_of(symbol.st_info), static_cast<std::uint32_t>(i), section_end});
  }
}

SymbolTable::SymbolTable(std::vector<Symbol> symbols) : symbols_(std::move(symbols)) { into_buckets(); }

std::size_t SymbolTable::bucket_of(std::uint64_t address) const {
  const std::size_t buckets = bucket_starts_.size() - 1;
  return static_cast<std::size_t>(std::min<std::uint64_t>((address - lowest_start_) >> bucket_shift_, buckets - 1));
}

void SymbolTable::into_buckets() {
  if (symbols_.empty()) return;
  const auto [low, high] = std::minmax_element(symbols_.begin(), symbols_.end(),
                                               [](const Symbol& a, const Symbol& b) { return a.start < b.start; });
  const std::size_t buckets = std::bit_ceil(std::max<std::size_t>(1, symbols_.size() / kBucketSymbols));
  lowest_start_ = low->start;
  const std::uint64_t span = high->start - low->start;
  bucket_shift_ = 0;
  while (bucket_shift_ < 63 && (span >> bucket_shift_) >= buckets) ++bucket_shift_;
  bucket_starts_.assign(buckets + 1, 0);
  for (const Symbol& symbol : symbols_) ++bucket_starts_[bucket_of(symbol.start) + 1];
  for (std::size_t bucket = 0; bucket < buckets; ++bucket) bucket_starts_[bucket + 1] += bucket_starts_[bucket];
  // Each symbol swapped into its bucket, in place: a second table (25 MB for libtorch_cpu.so) was
  // a tenth of the probe's CPU on a traced `import torch` in faulting its pages in and unmapping them.
  std::vector<std::size_t> next(bucket_starts_.begin(), bucket_starts_.end() - 1);
  for (std::size_t bucket = 0; bucket < buckets; ++bucket) {
    while (next[bucket] < bucket_starts_[bucket + 1]) {
      const std::size_t belongs = bucket_of(symbols_[next[bucket]].start);
      if (belongs == bucket) ++next[bucket];
      else std::swap(symbols_[next[bucket]], symbols_[next[belongs]++]);
    }
  }
  bucket_sorted_.assign(buckets, false);
}

void SymbolTable::sort_bucket(std::size_t bucket) {
  if (bucket_sorted_[bucket]) return;
  bucket_sorted_[bucket] = true;
  std::sort(symbols_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket]),
            symbols_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket + 1]), [](const Symbol& a, const Symbol& b) {
              return a.start != b.start ? a.start < b.start : a.rank != b.rank ? a.rank < b.rank : a.index < b.index;
            });
}

const std::vector<SymbolTable::Symbol>& SymbolTable::symbols() {
  for (std::size_t bucket = 0; bucket < bucket_sorted_.size(); ++bucket) sort_bucket(bucket);
  return symbols_;
}

const char* SymbolTable::name_at(std::uint64_t address) {
  if (symbols_.empty() || address < lowest_start_) return nullptr;
  // Back from the nearest symbol at or before the address. Starts descend, and within one start the
  // ranks descend too, so the last match seen at a start is its best-ranked one. Every symbol in a
  // later bucket starts after the address, every one in an earlier bucket before its own bucket.
  std::size_t bucket = bucket_of(address);
  sort_bucket(bucket);
  std::size_t at = static_cast<std::size_t>(
      std::upper_bound(symbols_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket]),
                       symbols_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket + 1]), address,
                       [](std::uint64_t value, const Symbol& symbol) { return value < symbol.start; }) -
      symbols_.begin());
  const Symbol* sized = nullptr;     // the nearest symbol whose extent holds the address
  const Symbol* sizeless = nullptr;  // the nearest one without an extent, where none holds it
  bool passed_sized = false;
  for (std::size_t scanned = 0; at > 0; ++scanned) {
    --at;
    while (at < bucket_starts_[bucket]) sort_bucket(--bucket);  // into an earlier bucket: sorted first
    const Symbol* it = &symbols_[at];
    if (sized && it->start < sized->start) break;
    if (it->size > 0 && address < it->start + it->size) sized = it;
    else if (it->size == 0 && !passed_sized && address < it->section_end && (!sizeless || it->start == sizeless->start)) {
      sizeless = it;
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
  return found && *found->name != '\0' ? found->name : nullptr;
}

}  // namespace memcost::trace::detail
