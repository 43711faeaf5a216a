/* Rewriting other objects' global offset table slots for named functions (see got_hook.h). */
#define _GNU_SOURCE
#include "trace/preload/got_hook.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__)
#define SLOT_JUMP R_X86_64_JUMP_SLOT
#define SLOT_DATA R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define SLOT_JUMP R_AARCH64_JUMP_SLOT
#define SLOT_DATA R_AARCH64_GLOB_DAT
#else
#error "got_hook.c knows the relocations of x86-64 and arm64"
#endif

int memcost_got_hook_find(struct memcost_got_hook *hook) {
  *(void **)&hook->real = dlsym(RTLD_DEFAULT, hook->name); /* POSIX's way to a function from dlsym */
  return hook->real != NULL;
}

int memcost_got_slot_relocated(uint64_t value, uint64_t real, uint64_t code_start, uint64_t code_end) {
  return value == real || (value >= code_start && value < code_end);
}

struct walk {
  struct memcost_got_hook *hooks;
  int count;
  uintptr_t own;
  int rewritten;
  int unrelocated; /* slots of an object the loader has not finished: to be tried again */
  unsigned long long adds; /* the loader's count of objects added, as this walk found it */
};

/* A pointer the dynamic section holds: glibc adds the load address in place on x86-64 and arm64;
   a loader that does not (musl) leaves the file's own address, below it. */
static uintptr_t dynamic_pointer(ElfW(Addr) value, ElfW(Addr) base) { return value < base ? value + base : value; }

/* What an object's dynamic section says, read once for both its offset tables (visit) and its own
   symbols (symbol_in). */
struct dynamic_tables {
  const ElfW(Dyn) *entries;
  const ElfW(Sym) *symbols;
  const char *names;
  const uint32_t *gnu_hash;
  const char *soname;                      /* NULL: none */
  const ElfW(Rela) *jump, *data;           /* the PLT's relocations (when they are RELA), the others */
  size_t jump_bytes, data_bytes;
  size_t relative_count;                   /* DT_RELACOUNT: the data table's leading R_*_RELATIVE entries */
};

/* 0 when the object has no dynamic section, or no symbols or names in it. */
static int read_dynamic(const struct dl_phdr_info *info, struct dynamic_tables *tables) {
  memset(tables, 0, sizeof(*tables));
  const ElfW(Addr) base = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) tables->entries = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
  }
  if (!tables->entries) return 0;
  int jump_rela = 1, has_soname = 0;
  size_t soname_at = 0;
  for (const ElfW(Dyn) *entry = tables->entries; entry->d_tag != DT_NULL; ++entry) {
    switch (entry->d_tag) {
      case DT_SYMTAB: tables->symbols = (const ElfW(Sym) *)dynamic_pointer(entry->d_un.d_ptr, base); break;
      case DT_STRTAB: tables->names = (const char *)dynamic_pointer(entry->d_un.d_ptr, base); break;
      case DT_GNU_HASH: tables->gnu_hash = (const uint32_t *)dynamic_pointer(entry->d_un.d_ptr, base); break;
      case DT_SONAME: soname_at = entry->d_un.d_val, has_soname = 1; break;
      case DT_JMPREL: tables->jump = (const ElfW(Rela) *)dynamic_pointer(entry->d_un.d_ptr, base); break;
      case DT_PLTRELSZ: tables->jump_bytes = entry->d_un.d_val; break;
      case DT_PLTREL: jump_rela = entry->d_un.d_val == DT_RELA; break;
      case DT_RELA: tables->data = (const ElfW(Rela) *)dynamic_pointer(entry->d_un.d_ptr, base); break;
      case DT_RELASZ: tables->data_bytes = entry->d_un.d_val; break;
      case DT_RELACOUNT: tables->relative_count = entry->d_un.d_val; break;
      default: break;
    }
  }
  if (!tables->symbols || !tables->names) return 0;
  if (!jump_rela) tables->jump = NULL;
  if (has_soname) tables->soname = tables->names + soname_at;
  return 1;
}

/* The symbols of one object that name a hook's function, by index in its symbol table: a
   relocation is matched by its index, not by comparing its symbol's name with each hook's (a name
   read for each of libtorch_cpu.so's 96,000 symbol relocations). */
enum { MOST_WANTED = 64 };
struct wanted {
  uint32_t index[MOST_WANTED];
  int hook[MOST_WANTED];
  int count;
  int by_name; /* the object's symbols could not be listed (no GNU hash table): names are compared */
};

static void rewrite_slot(struct walk *walk, struct memcost_got_hook *hook, uintptr_t *slot, uintptr_t code_start,
                         uintptr_t code_end, uintptr_t relro_start, uintptr_t relro_end) {
  if ((uintptr_t)slot >= relro_start && (uintptr_t)slot < relro_end) return; /* read-only once relocated */
  const uintptr_t value = __atomic_load_n(slot, __ATOMIC_SEQ_CST);
  if (value == (uintptr_t)hook->replacement) return;
  if (!memcost_got_slot_relocated(value, (uintptr_t)hook->real, code_start, code_end)) {
    ++walk->unrelocated;
    return;
  }
  __atomic_store_n(slot, (uintptr_t)hook->replacement, __ATOMIC_SEQ_CST);
  ++walk->rewritten;
}

static void rewrite_table(struct walk *walk, const struct wanted *wanted, const ElfW(Rela) *table, size_t entries,
                          const ElfW(Sym) *symbols, const char *names, ElfW(Addr) base, uintptr_t code_start,
                          uintptr_t code_end, uintptr_t relro_start, uintptr_t relro_end, unsigned allowed) {
  for (size_t i = 0; i < entries; ++i) {
    const unsigned type = (unsigned)ELF64_R_TYPE(table[i].r_info);
    if (type != SLOT_JUMP && type != SLOT_DATA) continue;
    const uint32_t index = (uint32_t)ELF64_R_SYM(table[i].r_info);
    uintptr_t *slot = (uintptr_t *)(base + table[i].r_offset);
    if (!wanted->by_name) {
      for (int w = 0; w < wanted->count; ++w) {
        if (wanted->index[w] == index) {
          rewrite_slot(walk, &walk->hooks[wanted->hook[w]], slot, code_start, code_end, relro_start, relro_end);
        }
      }
      continue;
    }
    const char *name = names + symbols[index].st_name;
    for (int h = 0; h < walk->count; ++h) {
      if (!(allowed & (1u << h)) || strcmp(name, walk->hooks[h].name) != 0) continue; /* allowed: its real is known */
      rewrite_slot(walk, &walk->hooks[h], slot, code_start, code_end, relro_start, relro_end);
    }
  }
}

/* The symbol in one loaded object, through its GNU hash table (what every linker of the last 15
   years writes; an object with only the older SysV table is not searched). */
static uint32_t gnu_hash(const char *name) {
  uint32_t hash = 5381;
  for (; *name; ++name) hash = hash * 33 + (unsigned char)*name;
  return hash;
}

/* The next symbol named `name` in the object's GNU hash table after index `after` (0: from the
   start of its chain), or 0 when there is none (a name can have several versions). */
static uint32_t hashed_symbol(const struct dynamic_tables *tables, const char *name, uint32_t after) {
  const uint32_t *table = tables->gnu_hash;
  if (!table || table[0] == 0) return 0;
  const uint32_t buckets = table[0], first = table[1], bloom_words = table[2];
  const uint32_t *bucket = (const uint32_t *)((const ElfW(Addr) *)(table + 4) + bloom_words);
  const uint32_t *chain = bucket + buckets;
  const uint32_t hash = gnu_hash(name);
  if (after != 0 && (chain[after - first] & 1)) return 0; /* `after` ended its chain */
  for (uint32_t index = after != 0 ? after + 1 : bucket[hash % buckets]; index >= first; ++index) {
    const uint32_t entry = chain[index - first];
    if ((entry | 1) == (hash | 1) && strcmp(tables->names + tables->symbols[index].st_name, name) == 0) return index;
    if (entry & 1) return 0;
  }
  return 0;
}

/* The hooks' symbols in one object (struct wanted). With a GNU hash table, the symbols before its
   first hashed one are those the object does not define (the linker sorts them first); the ones it
   defines are found through the table. */
static void find_wanted(const struct dynamic_tables *tables, const struct memcost_got_hook *hooks, int count,
                        unsigned allowed, struct wanted *wanted) {
  wanted->count = 0;
  const uint32_t *table = tables->gnu_hash;
  wanted->by_name = !table || table[0] == 0;
  if (wanted->by_name) return;
  for (uint32_t index = 1; index < table[1]; ++index) { /* table[1]: its first hashed symbol */
    const char *name = tables->names + tables->symbols[index].st_name;
    for (int h = 0; h < count; ++h) {
      if (!(allowed & (1u << h)) || name[0] != hooks[h].name[0] || strcmp(name, hooks[h].name) != 0) continue;
      if (wanted->count == MOST_WANTED) {
        wanted->by_name = 1;
        return;
      }
      wanted->index[wanted->count] = index, wanted->hook[wanted->count++] = h;
    }
  }
  for (int h = 0; h < count; ++h) {
    if (!(allowed & (1u << h))) continue;
    for (uint32_t index = hashed_symbol(tables, hooks[h].name, 0); index; index = hashed_symbol(tables, hooks[h].name, index)) {
      if (wanted->count == MOST_WANTED) {
        wanted->by_name = 1;
        return;
      }
      wanted->index[wanted->count] = index, wanted->hook[wanted->count++] = h;
    }
  }
}

/* The objects walked already, by load address: each is walked until its slots were all found
   relocated (or it was tried MOST_TRIES times), then never again. */
enum { MOST_OBJECTS = 4096, MOST_TRIES = 8 };
static struct {
  uintptr_t base;
  int tries, done;
} objects[MOST_OBJECTS];
static int object_count;

static int *tries_of(uintptr_t base, int **done) {
  for (int i = 0; i < object_count; ++i) {
    if (objects[i].base == base) return *done = &objects[i].done, &objects[i].tries;
  }
  if (object_count == MOST_OBJECTS) return NULL;
  objects[object_count].base = base;
  objects[object_count].tries = objects[object_count].done = 0; /* a slot used before memcost_got_hook_forget */
  *done = &objects[object_count].done;
  return &objects[object_count++].tries;
}

static int visit(struct dl_phdr_info *info, size_t size, void *data) {
  struct walk *walk = data;
  if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) walk->adds = info->dlpi_adds;
  const ElfW(Addr) base = info->dlpi_addr;
  uintptr_t code_start = 0, code_end = 0, relro_start = 0, relro_end = 0, dynamic = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *header = &info->dlpi_phdr[i];
    const uintptr_t start = base + header->p_vaddr, end = start + header->p_memsz;
    if (header->p_type == PT_LOAD && walk->own >= start && walk->own < end) return 0; /* the replacements' own */
    if (header->p_type == PT_GNU_RELRO) relro_start = start, relro_end = end;
    if (header->p_type == PT_LOAD && (header->p_flags & PF_X) && code_end == 0) code_start = start, code_end = end;
    if (header->p_type == PT_DYNAMIC) dynamic = start;
  }
  /* An object finished with is passed before its dynamic section is read: each load of a library
     walks every object loaded (an `import torch` loads about 400, a hundred at a time). */
  if (code_end == 0 || dynamic == 0) return 0;
  int *done = NULL, *tries = tries_of(dynamic, &done);
  if (!tries || *done) return 0;
  struct dynamic_tables tables;
  if (!read_dynamic(info, &tables)) return 0;
  /* A hook bound to one library's copy is for the objects that need that copy only. */
  unsigned allowed = 0;
  for (int h = 0; h < walk->count && h < 32; ++h) {
    /* `needed` is read once `real` is seen published (memcost_got_hook_find_in writes it first). */
    if (!__atomic_load_n((void **)&walk->hooks[h].real, __ATOMIC_ACQUIRE)) continue;
    int needs = walk->hooks[h].needed[0] == '\0';
    for (const ElfW(Dyn) *entry = tables.entries; !needs && entry->d_tag != DT_NULL; ++entry) {
      needs = entry->d_tag == DT_NEEDED && strcmp(tables.names + entry->d_un.d_val, walk->hooks[h].needed) == 0;
    }
    if (needs) allowed |= 1u << h;
  }
  struct wanted wanted;
  find_wanted(&tables, walk->hooks, walk->count, allowed, &wanted);
  const int unrelocated = walk->unrelocated;
  if (tables.jump && (wanted.by_name || wanted.count > 0)) {
    rewrite_table(walk, &wanted, tables.jump, tables.jump_bytes / sizeof(ElfW(Rela)), tables.symbols, tables.names,
                  base, code_start, code_end, relro_start, relro_end, allowed);
  }
  /* The data table's relative relocations come first, and name no symbol. */
  const size_t data_entries = tables.data_bytes / sizeof(ElfW(Rela));
  if (tables.data && (wanted.by_name || wanted.count > 0) && tables.relative_count < data_entries) {
    rewrite_table(walk, &wanted, tables.data + tables.relative_count, data_entries - tables.relative_count,
                  tables.symbols, tables.names, base, code_start, code_end, relro_start, relro_end, allowed);
  }
  if (walk->unrelocated == unrelocated || ++*tries >= MOST_TRIES) *done = 1;
  return 0;
}

static pthread_mutex_t applying = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long applied_adds = ~0ULL;

static int count_adds(struct dl_phdr_info *info, size_t size, void *data) {
  if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) *(unsigned long long *)data = info->dlpi_adds;
  return 1; /* the first object says it */
}

static void *symbol_in(const struct dl_phdr_info *info, const char *name, const char **soname) {
  struct dynamic_tables tables;
  if (!read_dynamic(info, &tables) || !tables.soname) return NULL;
  *soname = tables.soname;
  for (uint32_t index = hashed_symbol(&tables, name, 0); index; index = hashed_symbol(&tables, name, index)) {
    const ElfW(Sym) *symbol = &tables.symbols[index];
    if (symbol->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(symbol->st_info) == STT_FUNC) {
      return (void *)(info->dlpi_addr + symbol->st_value);
    }
  }
  return NULL;
}

struct search {
  const char *name, *library, *soname;
  void *found;
};

static int search_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct search *search = data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, search->library)) return 0;
  search->found = symbol_in(info, search->name, &search->soname);
  return search->found != NULL;
}

int memcost_got_hook_find_in(struct memcost_got_hook *hook, const char *library) {
  struct search search = {hook->name, library, NULL, NULL};
  dl_iterate_phdr(search_object, &search);
  if (!search.found || strlen(search.soname) >= sizeof(hook->needed)) return 0;
  strcpy(hook->needed, search.soname);
  /* Published after `needed`: another thread's apply may read the hook meanwhile. */
  __atomic_store_n((void **)&hook->real, search.found, __ATOMIC_RELEASE);
  return 1;
}

unsigned long long memcost_loaded_objects(void) {
  unsigned long long adds = 0;
  dl_iterate_phdr(count_adds, &adds);
  return adds;
}

void memcost_got_hook_forget(void) {
  pthread_mutex_lock(&applying);
  object_count = 0;
  __atomic_store_n(&applied_adds, ~0ULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&applying);
}

int memcost_got_hook_apply(struct memcost_got_hook *hooks, int count, const void *own) {
  const unsigned long long adds = memcost_loaded_objects();
  if (__atomic_load_n(&applied_adds, __ATOMIC_ACQUIRE) == adds && adds != 0) return 0;
  if (pthread_mutex_trylock(&applying) != 0) return 0; /* another thread is at it */
  struct walk walk = {hooks, count, (uintptr_t)own, 0, 0, 0};
  dl_iterate_phdr(visit, &walk);
  /* An object some of whose slots the loader had not yet relocated is walked again next time. */
  if (walk.unrelocated == 0) __atomic_store_n(&applied_adds, walk.adds, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&applying);
  return walk.rewritten;
}
