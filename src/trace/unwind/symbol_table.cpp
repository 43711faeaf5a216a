// A module's symbols, bucketed once and sorted where looked up (symbol_table.hpp).
#include "trace/unwind/symbol_table.hpp"

#include <gelf.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>
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
  std::vector<std::uint32_t> kept;
  if (!read_section(module, count, kept)) {
    file_ = {};
    read_through_libdwfl(module, count);
    kept = listed_ids();
  }
  into_buckets(kept);
}

SymbolTable SymbolTable::through_libdwfl(Dwfl_Module* module) {
  SymbolTable table;
  const int count = module ? dwfl_module_getsymtab(module) : -1;
  if (count <= 0) return table;
  table.read_through_libdwfl(module, count);
  table.into_buckets(table.listed_ids());
  return table;
}

bool SymbolTable::read_section(Dwfl_Module* module, int count, std::vector<std::uint32_t>& kept) {
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
  std::size_t section_count = 0;
  if (elf_getshdrnum(elf, &section_count) != 0) return false;
  std::vector<Section> sections(section_count);
  for (std::size_t i = 0; i < section_count; ++i) {
    GElf_Shdr header;
    if (gelf_getshdr(elf_getscn(elf, i), &header) == nullptr) continue;
    sections[i] = {(header.sh_flags & SHF_ALLOC) != 0, header.sh_addr + header.sh_size + bias};
  }
  file_ = {in_file, static_cast<const char*>(names->d_buf), bias, std::move(sections)};
  kept.reserve(static_cast<std::size_t>(count));
  for (int i = 1; i < count; ++i) {
    const GElf_Sym& symbol = in_file[i];
    // The name is not read here: PyTorch's string table is 78 MB, and only the names of the
    // addresses samples hit are read (name_at). One that is empty there names nothing.
    if (!is_code(symbol) || symbol.st_name == 0 || symbol.st_name >= names->d_size) continue;
    // An extended section index is left to libdwfl.
    if (symbol.st_shndx == SHN_XINDEX) return false;
    if (symbol.st_shndx < SHN_LORESERVE && symbol.st_shndx >= section_count) continue;
    if (start_of(static_cast<std::uint32_t>(i)) == 0) continue;
    kept.push_back(static_cast<std::uint32_t>(i));
  }
  return true;
}

// libdwfl's address: biased in a section the process maps, as is (SHN_ABS, a section it does not
// map) elsewhere.
std::uint64_t SymbolTable::start_of(std::uint32_t id) const {
  if (file_.symbols == nullptr) return listed_[id].start;
  const GElf_Sym& symbol = file_.symbols[id];
  const bool in_section = symbol.st_shndx < SHN_LORESERVE;
  return symbol.st_value + (in_section && file_.sections[symbol.st_shndx].allocated ? file_.bias : 0);
}

SymbolTable::Symbol SymbolTable::symbol(std::uint32_t id) const {
  if (file_.symbols == nullptr) return listed_[id];
  const GElf_Sym& symbol = file_.symbols[id];
  const Section* section = symbol.st_shndx < SHN_LORESERVE ? &file_.sections[symbol.st_shndx] : nullptr;
  // libdwfl gives a label in an unmapped section no section, whose end is then unknown.
  const std::uint64_t section_end = symbol.st_size == 0 && section && section->allocated ? section->end : UINT64_MAX;
  return {start_of(id), symbol.st_size, file_.strings + symbol.st_name, rank_of(symbol.st_info), id, section_end};
}

void SymbolTable::read_through_libdwfl(Dwfl_Module* module, int count) {
  listed_.reserve(static_cast<std::size_t>(count));
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
    listed_.push_back({address, symbol.st_size, name, rank_of(symbol.st_info), static_cast<std::uint32_t>(i), section_end});
  }
}

SymbolTable::SymbolTable(std::vector<Symbol> symbols) : listed_(std::move(symbols)) { into_buckets(listed_ids()); }

std::vector<std::uint32_t> SymbolTable::listed_ids() const {
  std::vector<std::uint32_t> ids(listed_.size());
  std::iota(ids.begin(), ids.end(), std::uint32_t{0});
  return ids;
}

std::size_t SymbolTable::bucket_of(std::uint64_t address) const {
  const std::size_t buckets = bucket_starts_.size() - 1;
  return static_cast<std::size_t>(std::min<std::uint64_t>((address - lowest_start_) >> bucket_shift_, buckets - 1));
}

void SymbolTable::into_buckets(const std::vector<std::uint32_t>& ids) {
  if (ids.empty()) return;
  std::uint64_t low = UINT64_MAX, high = 0;
  for (const std::uint32_t id : ids) {
    const std::uint64_t start = start_of(id);
    low = std::min(low, start);
    high = std::max(high, start);
  }
  const std::size_t buckets = std::bit_ceil(std::max<std::size_t>(1, ids.size() / kBucketSymbols));
  lowest_start_ = low;
  const std::uint64_t span = high - low;
  bucket_shift_ = 0;
  while (bucket_shift_ < 63 && (span >> bucket_shift_) >= buckets) ++bucket_shift_;
  bucket_starts_.assign(buckets + 1, 0);
  for (const std::uint32_t id : ids) ++bucket_starts_[bucket_of(start_of(id)) + 1];
  for (std::size_t bucket = 0; bucket < buckets; ++bucket) bucket_starts_[bucket + 1] += bucket_starts_[bucket];
  std::vector<std::size_t> next(bucket_starts_.begin(), bucket_starts_.end() - 1);
  order_.resize(ids.size());
  for (const std::uint32_t id : ids) order_[next[bucket_of(start_of(id))]++] = id;
  bucket_sorted_.assign(buckets, false);
}

void SymbolTable::sort_bucket(std::size_t bucket) {
  if (bucket_sorted_[bucket]) return;
  bucket_sorted_[bucket] = true;
  std::sort(order_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket]),
            order_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket + 1]), [this](std::uint32_t left, std::uint32_t right) {
              const Symbol a = symbol(left), b = symbol(right);
              return a.start != b.start ? a.start < b.start : a.rank != b.rank ? a.rank < b.rank : a.index < b.index;
            });
}

std::vector<SymbolTable::Symbol> SymbolTable::symbols() {
  for (std::size_t bucket = 0; bucket < bucket_sorted_.size(); ++bucket) sort_bucket(bucket);
  std::vector<Symbol> sorted;
  sorted.reserve(order_.size());
  for (const std::uint32_t id : order_) sorted.push_back(symbol(id));
  return sorted;
}

const char* SymbolTable::name_at(std::uint64_t address) {
  if (order_.empty() || address < lowest_start_) return nullptr;
  // Back from the nearest symbol at or before the address. Starts descend, and within one start the
  // ranks descend too, so the last match seen at a start is its best-ranked one. Every symbol in a
  // later bucket starts after the address, every one in an earlier bucket before its own bucket.
  std::size_t bucket = bucket_of(address);
  sort_bucket(bucket);
  std::size_t at = static_cast<std::size_t>(
      std::upper_bound(order_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket]),
                       order_.begin() + static_cast<std::ptrdiff_t>(bucket_starts_[bucket + 1]), address,
                       [this](std::uint64_t value, std::uint32_t id) { return value < start_of(id); }) -
      order_.begin());
  std::optional<Symbol> sized;     // the nearest symbol whose extent holds the address
  std::optional<Symbol> sizeless;  // the nearest one without an extent, where none holds it
  bool passed_sized = false;
  for (std::size_t scanned = 0; at > 0; ++scanned) {
    --at;
    while (at < bucket_starts_[bucket]) sort_bucket(--bucket);  // into an earlier bucket: sorted first
    const Symbol it = symbol(order_[at]);
    if (sized && it.start < sized->start) break;
    if (it.size > 0 && address < it.start + it.size) sized = it;
    else if (it.size == 0 && !passed_sized && address < it.section_end && (!sizeless || it.start == sizeless->start)) {
      sizeless = it;
    }
    // A sized symbol that ends before the address rules out the labels before it (libdwfl's rule:
    // the address is past that function, not inside some earlier label's code).
    else if (it.size > 0 && (!sizeless || it.start != sizeless->start)) passed_sized = true;
    // An outer symbol holding the address is looked for a little further back (a function's local
    // labels lie inside it), not through the whole table.
    if (!sized && sizeless && (it.start < sizeless->start) && scanned > kLookBack) break;
    if (scanned > kLookBackAtMost) break;
  }
  const std::optional<Symbol>& found = sized ? sized : sizeless;
  return found && *found->name != '\0' ? found->name : nullptr;
}

}  // namespace memcost::trace::detail
