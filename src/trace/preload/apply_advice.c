/* Advice applied inside the command, for `memcost trace --verify` (the contract: apply_advice.h).
   The call path is matched as the trace named it: return addresses as offsets into their modules
   (dladdr's base is the module's lowest mapping, as libdwfl's is), the runtime's own libraries left
   out on both sides. Everything here runs inside an allocator call: no malloc, the kernel and
   glibc's own entry points only. */
#define _GNU_SOURCE
#include "trace/preload/apply_advice.h"

#include "trace/preload/first_touch.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *pointer);

enum { MAX_ADVICE = 64, KEPT_PER_ADVICE = 2, MAX_OUTSTANDING = 1024, STACK_FRAMES = 24 };
static const size_t HUGE_BYTES = MEMCOST_HUGE_PAGE_BYTES;

enum action { HUGE, REUSE, POPULATE, NONE };

struct kept {
  void *pointer;
  size_t size;
  int prot; /* mmap's; -1: a malloc block */
};

struct advice {
  int id;
  enum action action;
  size_t min_bytes;
  int threads;
  uint32_t frames;
  uint64_t module[MEMCOST_APPLY_MAX_FRAMES]; /* FNV-1a of the module's file name */
  uint64_t offset[MEMCOST_APPLY_MAX_FRAMES];
  uint64_t times;
  int reported_pid;
  int overridden_pid; /* the process that last reported skipping the program's own call against it */
  struct kept kept[KEPT_PER_ADVICE];
};

/* A block handed out under reuse advice (when it is freed whole, it is kept instead), or under
   huge-page advice (the program's own MADV_NOHUGEPAGE on it is skipped: memcost_apply_madvise). */
struct outstanding {
  void *pointer;
  size_t size;
  int prot;
  int advice;
};

static struct advice advice[MAX_ADVICE];
static int advice_count;
static size_t smallest = SIZE_MAX;
static char report_path[512];
static struct outstanding outstanding[MAX_OUTSTANDING];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static MEMCOST_THREAD_LOCAL int applying; /* an advice's own calls (threads, dladdr) go straight through */
static uint64_t executable_name;

static uint64_t name_hash(const char *name, size_t length) {
  uint64_t hash = 1469598103934665603ULL;
  for (size_t i = 0; i < length; ++i) hash = (hash ^ (unsigned char)name[i]) * 1099511628211ULL;
  return hash;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* The runtime's own code, left out of call paths: the same list as memcost's (experiments/verify.py). */
static int runtime_module(const char *name) {
  static const char *prefixes[] = {"libc.so", "libc-", "ld-linux", "ld64.so", "libmemcost-preload", "libstdc++",
                                   "libgcc_s", "libpthread"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); ++i) {
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  }
  return 0;
}

static void append_report(const char *line, int length) { memcost_append_report(report_path, line, length); }

static void parse(char *text) {
  for (char *line = strtok(text, "\n"); line && advice_count < MAX_ADVICE; line = strtok(NULL, "\n")) {
    struct advice *a = &advice[advice_count];
    char action[16], *rest = NULL;
    int consumed = 0;
    if (sscanf(line, "%d %15s %zu %d %n", &a->id, action, &a->min_bytes, &a->threads, &consumed) != 4) continue;
    a->action = strcmp(action, "huge") == 0       ? HUGE
                : strcmp(action, "reuse") == 0    ? REUSE
                : strcmp(action, "populate") == 0 ? POPULATE
                : strcmp(action, "none") == 0     ? NONE
                                                  : (enum action)-1;
    if ((int)a->action < 0) continue;
    for (char *frame = strtok_r(line + consumed, " ", &rest); frame && a->frames < MEMCOST_APPLY_MAX_FRAMES;
         frame = strtok_r(NULL, " ", &rest)) {
      char *colon = strrchr(frame, ':');
      if (!colon) break;
      a->module[a->frames] = name_hash(frame, (size_t)(colon - frame));
      a->offset[a->frames++] = strtoull(colon + 1, NULL, 16);
    }
    if (a->frames == 0) continue;
    if (a->min_bytes < smallest) smallest = a->min_bytes;
    ++advice_count;
  }
}

static void report_counts(void) {
  char line[96];
  for (int i = 0; i < advice_count; ++i) {
    if (advice[i].times) append_report(line, snprintf(line, sizeof(line), "count %d %d %llu\n", advice[i].id,
                                                      (int)getpid(), (unsigned long long)advice[i].times));
  }
}

void memcost_apply_start(void) {
  const char *path = getenv("MEMCOST_APPLY_FILE");
  const char *report = getenv("MEMCOST_APPLY_REPORT");
  if (!path) return;
  if (report) snprintf(report_path, sizeof(report_path), "%s", report);
  static char text[1 << 16];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t length = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (length <= 0) return;
  text[length] = '\0';
  char executable[512];
  ssize_t named = readlink("/proc/self/exe", executable, sizeof(executable) - 1);
  if (named > 0) {
    executable[named] = '\0';
    const char *name = base_name(executable);
    executable_name = name_hash(name, strlen(name));
  }
  parse(text);
  if (advice_count) atexit(report_counts);
}

size_t memcost_apply_min_bytes(void) { return smallest; }

/* A module's file name as the trace knows it: the file itself, not the link it was opened by
   (liblzma.so.5 is liblzma.so.5.4.1), resolved once per module. */
enum { NAMED_MODULES = 128 };
static struct {
  uintptr_t base;
  uint64_t name;
} named[NAMED_MODULES];
static pthread_mutex_t named_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t module_name(const Dl_info *info) {
  const char *name = base_name(info->dli_fname);
  /* The executable's name is argv[0] to dladdr (a link, a relative path): /proc/self/exe's is its file. */
  if (!strstr(name, ".so") && executable_name) return executable_name;
  uintptr_t base = (uintptr_t)info->dli_fbase;
  uint64_t found = 0;
  pthread_mutex_lock(&named_lock);
  for (int i = 0; i < NAMED_MODULES && named[i].base; ++i) {
    if (named[i].base == base) found = named[i].name;
  }
  pthread_mutex_unlock(&named_lock);
  if (found) return found;
  char resolved[PATH_MAX];
  if (realpath(info->dli_fname, resolved)) name = base_name(resolved);
  found = name_hash(name, strlen(name));
  pthread_mutex_lock(&named_lock);
  for (int i = 0; i < NAMED_MODULES; ++i) {
    if (!named[i].base || named[i].base == base) {
      named[i].base = base, named[i].name = found;
      break;
    }
  }
  pthread_mutex_unlock(&named_lock);
  return found;
}

/* The advice whose call path this call's return addresses begin with (-1: none). */
static int matching(size_t bytes) {
  uint64_t pcs[STACK_FRAMES], module[MEMCOST_APPLY_MAX_FRAMES], offset[MEMCOST_APPLY_MAX_FRAMES];
  uint32_t count = memcost_return_addresses(pcs, STACK_FRAMES, 0), kept = 0;
  for (uint32_t i = 0; i < count && kept < MEMCOST_APPLY_MAX_FRAMES; ++i) {
    Dl_info info;
    if (!dladdr((void *)(uintptr_t)(pcs[i] - 1), &info) || !info.dli_fname) {
      module[kept] = 0, offset[kept++] = pcs[i];
      continue;
    }
    if (runtime_module(base_name(info.dli_fname))) continue;
    const uint64_t name = module_name(&info), at = pcs[i] - (uint64_t)(uintptr_t)info.dli_fbase;
    if (kept > 0 && module[kept - 1] == name && offset[kept - 1] == at) continue; /* recursion: once, as the trace keys it */
    module[kept] = name, offset[kept++] = at;
  }
  for (int a = 0; a < advice_count; ++a) {
    if (bytes < advice[a].min_bytes || advice[a].frames > kept) continue;
    uint32_t same = 0;
    while (same < advice[a].frames && advice[a].module[same] == module[same] && advice[a].offset[same] == offset[same]) ++same;
    if (same == advice[a].frames) return a;
  }
  return -1;
}

static void applied(int a) {
  __atomic_add_fetch(&advice[a].times, 1, __ATOMIC_RELAXED);
  int pid = (int)getpid();
  if (__atomic_exchange_n(&advice[a].reported_pid, pid, __ATOMIC_RELAXED) == pid) return;
  char line[64];
  append_report(line, snprintf(line, sizeof(line), "applied %d %d\n", advice[a].id, pid));
}

/* The advice for this call, or -1. `none` is matched like the others and does nothing: the runs
   without advice pay for the same search, so that the advice is the only difference. */
static int advice_for(size_t bytes) {
  if (applying || advice_count == 0 || bytes < smallest) return -1;
  applying = 1;
  int a = matching(bytes);
  applying = 0;
  if (a >= 0 && advice[a].action == NONE) {
    applied(a);
    return -1;
  }
  return a;
}

/* Reuse: a kept block of this size (and protection) for advice a, cleared, or NULL. */
static void *take_kept(int a, size_t size, int prot) {
  void *found = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < KEPT_PER_ADVICE && !found; ++i) {
    struct kept *k = &advice[a].kept[i];
    if (k->pointer && k->size == size && k->prot == prot) found = k->pointer, k->pointer = NULL;
  }
  pthread_mutex_unlock(&lock);
  /* Fresh memory reads as zeros, as mmap promises and calloc relies on: the clearing is part of
     what reuse costs, and is measured with it. */
  if (found) memset(found, 0, size);
  return found;
}

static void hand_out(void *pointer, size_t size, int prot, int a) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_OUTSTANDING; ++i) {
    if (!outstanding[i].pointer) {
      outstanding[i] = (struct outstanding){pointer, size, prot, a};
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

/* A block coming back: kept for its advice when it comes back whole and there is room (1), else
   let go (0). A range that covers only part of a block, or more than it, ends the block's
   advice: the program has done something else with that memory. */
static int keep(void *pointer, size_t size, int whole) {
  int kept = 0;
  uintptr_t start = (uintptr_t)pointer, end = start + size;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_OUTSTANDING; ++i) {
    struct outstanding *o = &outstanding[i];
    if (!o->pointer) continue;
    uintptr_t first = (uintptr_t)o->pointer, last = first + o->size;
    int same = o->pointer == pointer && (!size || o->size == size);
    if (!same && !(size && start < last && first < end)) continue;
    for (int k = 0; same && whole && advice[o->advice].action == REUSE && k < KEPT_PER_ADVICE && !kept; ++k) {
      struct kept *slot = &advice[o->advice].kept[k];
      if (!slot->pointer) *slot = (struct kept){o->pointer, o->size, o->prot}, kept = 1;
    }
    o->pointer = NULL;
  }
  pthread_mutex_unlock(&lock);
  return kept;
}

/* First touch on `threads` threads; the threads' own calls (pthread_create's) go straight through. */
static void populate(void *pointer, size_t size, int threads) {
  applying = 1;
  memcost_populate_parallel(pointer, size, threads);
  applying = 0;
}

void *memcost_apply_mmap(size_t length, int prot, int flags) {
  int a = advice_for(length);
  if (a < 0) return NULL;
  void *result = NULL;
  if (advice[a].action == REUSE) {
    result = take_kept(a, length, prot);
    if (!result) {
      long mapped = syscall(SYS_mmap, NULL, length, prot, flags, -1, 0);
      if (mapped < 0 && mapped > -4096) return NULL;
      result = (void *)mapped;
    }
    hand_out(result, length, prot, a);
  } else if (advice[a].action == HUGE) {
    /* As make_big_array does: a 2 MiB-aligned range, the slack unmapped, huge pages asked for. */
    result = memcost_map_huge_aligned(length, prot, flags);
    if (!result) return NULL;
    hand_out(result, length, prot, a);
  } else {
    long mapped = syscall(SYS_mmap, NULL, length, prot, flags, -1, 0);
    if (mapped < 0 && mapped > -4096) return NULL;
    result = (void *)mapped;
    populate(result, length, advice[a].threads);
  }
  applied(a);
  return result;
}

int memcost_apply_munmap(void *address, size_t length) {
  if (advice_count == 0) return 0;
  return keep(address, length, 1);
}

void *memcost_apply_malloc(size_t size, int zero) {
  int a = advice_for(size);
  if (a < 0) return NULL;
  void *result = advice[a].action == REUSE ? take_kept(a, size, -1) : NULL;
  /* Huge pages for malloc: the block starts on a 2 MiB boundary, as make_big_array's do. calloc
     keeps glibc's block (it knows when fresh memory needs no clearing) and gets its inside. */
  if (!result && advice[a].action == HUGE && !zero) result = __libc_memalign(HUGE_BYTES, size);
  if (!result) result = zero ? __libc_calloc(1, size) : __libc_malloc(size);
  if (!result) return NULL;
  if (advice[a].action == REUSE || advice[a].action == HUGE) hand_out(result, size, -1, a);
  if (advice[a].action == HUGE) memcost_advise_huge_inside(result, size);
  if (advice[a].action == POPULATE) populate(result, size, advice[a].threads);
  applied(a);
  return result;
}

int memcost_apply_free(void *pointer) {
  if (advice_count == 0 || !pointer) return 0;
  return keep(pointer, 0, 1);
}

void memcost_apply_forget(void *pointer) {
  if (advice_count && pointer) (void)keep(pointer, 0, 0);
}

int memcost_apply_madvise(void *address, size_t length, int advice_value) {
  if (advice_count == 0 || advice_value != MADV_NOHUGEPAGE) return 0;
  uintptr_t start = (uintptr_t)address, end = start + length;
  int a = -1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_OUTSTANDING && a < 0; ++i) {
    const struct outstanding *o = &outstanding[i];
    uintptr_t first = (uintptr_t)o->pointer, last = first + o->size;
    if (o->pointer && advice[o->advice].action == HUGE && start < last && first < end) a = o->advice;
  }
  pthread_mutex_unlock(&lock);
  if (a < 0) return 0;
  int pid = (int)getpid();
  if (__atomic_exchange_n(&advice[a].overridden_pid, pid, __ATOMIC_RELAXED) != pid) {
    char line[64];
    append_report(line, snprintf(line, sizeof(line), "overridden %d %d\n", advice[a].id, pid));
  }
  return 1;
}
