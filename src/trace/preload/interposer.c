/* libmemcost-preload.so, loaded into a dynamically linked command with LD_PRELOAD. Three jobs:

   1. Reporting (MEMCOST_PRELOAD_FD set): what `memcost trace` uses instead of the kernel's syscall
      tracepoints when it may not read them (not root). It reports every mmap, munmap, mremap and
      madvise, the faults that mmap, madvise, mlock, mlock2, mlockall and ioctl took inside the
      kernel without an exception (MAP_POPULATE, MADV_POPULATE_*, a driver pinning: no perf
      event sees those), and every malloc, calloc, realloc, aligned allocation and free of at least
      MEMCOST_PRELOAD_MIN_BYTES (glibc's malloc makes its own mmap and brk calls internally, where
      no interposer can see them), each with its measured duration, its return addresses and the
      Python stack, as one binary record per write() to the descriptor in MEMCOST_PRELOAD_FD (a
      pipe to the probe; a write of at most PIPE_BUF bytes is atomic).
   2. Python stacks (both modes, unless MEMCOST_PRELOAD_PYTHON=0): in a CPython process, a big
      malloc-family call (or an extension's big anonymous mmap) made by a thread holding the GIL
      writes the Python stack (file, line,
      function per frame, by CPython's public frame API) into a block on this C stack frame for
      the length of the call, behind a magic word. As root the kernel's tracepoints copy the
      stack into each mmap's sample, and the tracer finds the block there: no pipe, no join.
   3. Applying advice (MEMCOST_APPLY_FILE set): `memcost trace --verify` runs the command again
      with advice applied to the call paths the trace named (apply_advice.c).

   It calls the kernel and glibc's own allocator entry points directly (syscall(), __libc_*), so
   the interposers cannot recurse into themselves. Layouts: see preload/abi.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *pointer);

#include "trace/preload/abi.h"
#include "trace/preload/apply_advice.h"
#include "trace/preload/block_table.h"
#include "trace/preload/got_hook.h"
#include "trace/preload/safe_primitives.h"
#include "trace/sources/bpf/fault_counts.h"

enum { MAX_FRAMES = MEMCOST_PRELOAD_MAX_FRAMES, SKIPPED_FRAMES = 2 };
enum { PYTHON_FILE_BYTES = 120, PYTHON_FUNCTION_BYTES = 80 };
/* The Python stack (preload/abi.h), with room for its frames. */
struct python_block {
  struct memcost_python_header header;
  char data[MEMCOST_PYTHON_BLOCK_BYTES];
};

_Static_assert(offsetof(struct python_block, data) == sizeof(struct memcost_python_header), "frames follow the header");

struct record {
  struct memcost_preload_header header;
  uint64_t pcs[MAX_FRAMES];
  char python[sizeof(struct python_block)];
};
_Static_assert(offsetof(struct record, pcs) == sizeof(struct memcost_preload_header), "return addresses follow the header");

static int out_fd = -1;
static size_t min_bytes = 64 * 1024;
static MEMCOST_THREAD_LOCAL int inside; /* the unwinder may allocate the first time it runs */

/* CPython's public API, found in the process when it is a Python interpreter (3.9 to 3.13). */
typedef struct object object;
struct allocator { /* PyMemAllocatorEx */
  void *context;
  void *(*malloc)(void *context, size_t size);
  void *(*calloc)(void *context, size_t count, size_t size);
  void *(*realloc)(void *context, void *pointer, size_t size);
  void (*free)(void *context, void *pointer);
};
enum { PYMEM_DOMAIN_MEM = 1, PYMEM_DOMAIN_OBJ = 2 };
static struct {
  int (*is_initialized)(void);
  int (*gil_held)(void);
  void *(*this_thread)(void);
  object *(*thread_frame)(void *);
  object *(*frame_back)(object *);
  object *(*frame_code)(object *);
  int (*frame_line)(object *);
  object *(*attribute)(object *, object *);
  object *(*string)(const char *);
  const char *(*utf8)(object *, ssize_t *);
  void (*decref)(object *);
  void (*error_fetch)(object **, object **, object **);
  void (*error_restore)(object *, object *, object *);
  int (*gc_disable)(void); /* 3.10+; before that, frames are objects already and walking them allocates nothing */
  int (*gc_enable)(void);
  void (*get_allocator)(int domain, struct allocator *allocator);
  void (*set_allocator)(int domain, struct allocator *allocator);
} py;
static int python_ready;
/* MEMCOST_PYTHON_RELEASES: where the tracer's array of GIL releases is (map_release_slots). */
static int releases_tracer_pid, releases_tracer_fd = -1;
static uint64_t now_ns(void);
static void emit(uint32_t kind, uint64_t enter_ns, uint64_t exit_ns, uint64_t a0, uint64_t a1, uint64_t a2,
                 uint64_t a3, int64_t result, const struct python_block *python);

/* The interpreter's own object (libpython, or the executable that links it in): its addresses, for
   telling its own mmap calls (pymalloc's arenas, made inside its allocator, where walking the
   frames corrupted it) from an extension's (Python's mmap module). */
static uintptr_t interpreter_start, interpreter_end;
static int find_interpreter(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  uintptr_t start = UINTPTR_MAX, end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type != PT_LOAD) continue;
    const uintptr_t at = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    if (at < start) start = at;
    if (at + info->dlpi_phdr[i].p_memsz > end) end = at + info->dlpi_phdr[i].p_memsz;
  }
  const uintptr_t known = (uintptr_t)py.is_initialized;
  if (known < start || known >= end) return 0;
  interpreter_start = start, interpreter_end = end;
  return 1;
}

static void find_python(void) {
  void **slots[] = {(void **)&py.is_initialized, (void **)&py.gil_held, (void **)&py.this_thread,
                    (void **)&py.thread_frame, (void **)&py.frame_back, (void **)&py.frame_code,
                    (void **)&py.frame_line, (void **)&py.attribute, (void **)&py.string, (void **)&py.utf8, (void **)&py.decref,
                    (void **)&py.error_fetch, (void **)&py.error_restore};
  const char *names[] = {"Py_IsInitialized", "PyGILState_Check", "PyGILState_GetThisThreadState",
                         "PyThreadState_GetFrame", "PyFrame_GetBack", "PyFrame_GetCode", "PyFrame_GetLineNumber",
                         "PyObject_GetAttr", "PyUnicode_FromString", "PyUnicode_AsUTF8AndSize", "Py_DecRef", "PyErr_Fetch",
                         "PyErr_Restore"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    if (!(*slots[i] = dlsym(RTLD_DEFAULT, names[i]))) return;
  }
  *(void **)&py.gc_disable = dlsym(RTLD_DEFAULT, "PyGC_Disable");
  *(void **)&py.gc_enable = dlsym(RTLD_DEFAULT, "PyGC_Enable");
  *(void **)&py.get_allocator = dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
  *(void **)&py.set_allocator = dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
  if (!py.get_allocator || !py.set_allocator) return;
  python_ready = 1;
  dl_iterate_phdr(find_interpreter, NULL);
}

static void forked_child(void);

__attribute__((constructor)) static void start(void) {
  const char *fd = getenv("MEMCOST_PRELOAD_FD");
  const char *bytes = getenv("MEMCOST_PRELOAD_MIN_BYTES");
  const char *python = getenv("MEMCOST_PRELOAD_PYTHON");
  if (fd) out_fd = atoi(fd);
  if (bytes) min_bytes = strtoull(bytes, NULL, 10);
  const char *releases_at = getenv("MEMCOST_PYTHON_RELEASES");
  if (releases_at && strchr(releases_at, ':')) {
    releases_tracer_pid = atoi(releases_at);
    releases_tracer_fd = atoi(strchr(releases_at, ':') + 1);
  }
  if (!python || strcmp(python, "0") != 0) find_python();
  memcost_apply_start();
  (void)pthread_atfork(NULL, NULL, forked_child);
}

/* A long name keeps its end, where a path has the file's name, from a character's first byte on:
   cut inside one, a name was not UTF-8, and the tracer drops a block with such a name. */
static const char *tail(const char *name, ssize_t length, size_t most, uint16_t *bytes) {
  size_t kept = length < 0 ? 0 : (size_t)length;
  if (kept > most) name += kept - most, kept = most;
  while (kept > 0 && ((unsigned char)*name & 0xC0) == 0x80) ++name, --kept; /* a continuation byte */
  *bytes = (uint16_t)kept;
  return name;
}

/* While the frames are walked, CPython's allocator is not entered at all: a call may come from
   inside it (pymalloc growing its arena table, or its radix tree a node, calls calloc or realloc),
   and pymalloc may not be entered again there. What the walk allocates (3.11+ makes frame objects
   on demand) comes from glibc's malloc; what survives the walk is freed later by CPython's free,
   which hands a block that is not in its arenas to glibc. What the walk frees goes back to glibc
   only if the walk allocated it; a block from before the walk that the walk lets go of (an
   attribute lookup's cache dropping the name it held, that name's last reference) is left
   allocated, and one is never grown (that realloc fails): handing either to pymalloc in the middle
   of its own work corrupted its pools (traced `import torch` died in pymalloc_alloc in 3 of
   about 50 runs made four at once, CPython 3.11.7; before the walk allocated from glibc, one in
   ten alone). Set with the GIL held (python_stack's callers), so no other thread uses the
   object domains meanwhile. Where a hook wraps CPython's allocator (its debug allocator, -X dev,
   tracemalloc: their context is not null) the walk is not made: the hook would be handed a block
   it did not allocate. */
static struct allocator python_objects, python_memory; /* CPython's, while swapped out */
enum { WALK_BLOCKS = 512 };
static void *walk_blocks[WALK_BLOCKS]; /* the GIL holder's walk alone uses them */
static int walk_block_count;
static void *walk_block(void *pointer) {
  if (pointer && walk_block_count < WALK_BLOCKS) walk_blocks[walk_block_count++] = pointer;
  return pointer;
}
static int walk_block_gone(void *pointer) {
  for (int i = 0; i < walk_block_count; ++i) {
    if (walk_blocks[i] == pointer) {
      walk_blocks[i] = walk_blocks[--walk_block_count];
      return 1;
    }
  }
  return 0;
}
static void *walk_malloc(void *context, size_t size) { (void)context; return walk_block(__libc_malloc(size ? size : 1)); }
static void *walk_calloc(void *context, size_t count, size_t size) {
  (void)context;
  return walk_block(__libc_calloc(count ? count : 1, size ? size : 1));
}
static void *walk_realloc(void *context, void *pointer, size_t size) {
  if (!pointer) return walk_malloc(context, size);
  if (!walk_block_gone(pointer)) return NULL;
  void *moved = __libc_realloc(pointer, size ? size : 1);
  (void)walk_block(moved ? moved : pointer);
  return moved;
}
static void walk_free(void *context, void *pointer) {
  (void)context;
  if (pointer && walk_block_gone(pointer)) __libc_free(pointer);
}

static int allocate_outside_python(int outside) {
  if (outside) {
    py.get_allocator(PYMEM_DOMAIN_OBJ, &python_objects);
    py.get_allocator(PYMEM_DOMAIN_MEM, &python_memory);
    if (python_objects.context || python_memory.context) return 0;
    struct allocator walking = {NULL, walk_malloc, walk_calloc, walk_realloc, walk_free}; /* copied by CPython */
    walk_block_count = 0;
    py.set_allocator(PYMEM_DOMAIN_OBJ, &walking);
    py.set_allocator(PYMEM_DOMAIN_MEM, &walking);
  } else {
    walk_block_count = 0; /* what is left is Python's now: its free hands it to glibc (not pymalloc's) */
    py.set_allocator(PYMEM_DOMAIN_OBJ, &python_objects);
    py.set_allocator(PYMEM_DOMAIN_MEM, &python_memory);
  }
  return 1;
}

/* The calling thread's Python stack into `block`, if this is a Python interpreter and the thread
   holds the GIL (only then may it read its frames); else block->header.magic stays 0. Run before the
   allocator is entered: CPython's own calls below may allocate (3.11+ makes frame objects on
   demand), with the garbage collector held off so that none runs inside someone's malloc. */
static void python_stack(struct python_block *block) {
  block->header.magic = 0;
  block->header.bytes = block->header.frames = 0;
  if (!python_ready || inside || !py.is_initialized() || !py.gil_held()) return;
  void *thread = py.this_thread();
  if (!thread) return;
  inside = 1;
  object *type, *value, *traceback;
  py.error_fetch(&type, &value, &traceback);
  int collecting = py.gc_disable ? py.gc_disable() : 0;
  const int walking = allocate_outside_python(1);
  /* The attributes' names are made once and kept: a name made for each walk missed the type's
     attribute cache every time, and each miss let go of the name the cache held. */
  static object *filename_key, *function_key;
  if (walking && !filename_key) filename_key = py.string("co_filename");
  if (walking && !function_key) function_key = py.string("co_name");
  object *frame = walking && filename_key && function_key ? py.thread_frame(thread) : NULL;
  const char *previous_file = NULL; /* in the block */
  uint16_t previous_file_bytes = 0;
  while (frame) {
    object *code = py.frame_code(frame);
    object *file = code ? py.attribute(code, filename_key) : NULL;
    object *function = code ? py.attribute(code, function_key) : NULL;
    ssize_t file_length = 0, function_length = 0;
    const char *file_name = file ? py.utf8(file, &file_length) : NULL;
    const char *function_name = function ? py.utf8(function, &function_length) : NULL;
    size_t need = sizeof(struct memcost_python_entry) + PYTHON_FILE_BYTES + PYTHON_FUNCTION_BYTES;
    int full = block->header.bytes + need > MEMCOST_PYTHON_BLOCK_BYTES;
    if (!full && file_name && function_name) {
      char *at = block->data + block->header.bytes;
      uint16_t file_bytes = 0, function_bytes = 0;
      const char *file_kept = tail(file_name, file_length, PYTHON_FILE_BYTES, &file_bytes);
      const char *function_kept = tail(function_name, function_length, PYTHON_FUNCTION_BYTES, &function_bytes);
      int same = previous_file && previous_file_bytes == file_bytes && memcmp(previous_file, file_kept, file_bytes) == 0;
      struct memcost_python_entry entry = {(uint32_t)py.frame_line(frame), same ? (uint16_t)MEMCOST_PYTHON_SAME_FILE : file_bytes,
                                           function_bytes};
      if (same) file_bytes = 0;
      char *names = at + sizeof(entry);
      memcpy(at, &entry, sizeof(entry));
      memcpy(names, file_kept, file_bytes);
      memcpy(names + file_bytes, function_kept, function_bytes);
      if (!same) previous_file = names, previous_file_bytes = file_bytes;
      block->header.bytes += (uint32_t)(sizeof(entry) + file_bytes + function_bytes);
      ++block->header.frames;
    }
    if (function) py.decref(function);
    if (file) py.decref(file);
    if (code) py.decref(code);
    object *back = full ? NULL : py.frame_back(frame);
    py.decref(frame);
    frame = back;
  }
  if (walking) (void)allocate_outside_python(0);
  if (collecting && py.gc_enable) py.gc_enable();
  py.error_restore(type, value, traceback);
  inside = 0;
  /* Published last, and kept in memory for the kernel to copy: the allocator is an opaque call. */
  if (block->header.frames) block->header.magic = MEMCOST_PYTHON_MAGIC;
  __asm__ volatile("" : : "r"(block) : "memory");
}

/* The block is dead once the call returns: a stale one must not be found in a later stack. */
static void python_stack_done(struct python_block *block) {
  block->header.magic = 0;
  __asm__ volatile("" : : "r"(block) : "memory");
}

/* A thread's releases of the GIL (see MEMCOST_PYTHON_PENDING_MAGIC in preload/abi.h). The
   extension modules' calls that give the GIL up (PyEval_SaveThread, PyEval_ReleaseThread,
   PyGILState_Release) and take it back (PyEval_RestoreThread, PyEval_AcquireThread,
   PyGILState_Ensure) are pointed here by rewriting their offset tables (got_hook.h) as soon as a
   small or big call finds an object loaded since the last time. Both kinds are needed: PyTorch's
   fill_ gives the GIL up with PyEval_SaveThread and, inside, takes it back for a moment with
   PyEval_AcquireThread. A release made inside the interpreter itself, whose end no hook sees,
   leaves its big calls waiting for a stack that does not come (the tracer gives up after a
   second); the thread's next release through a hook starts afresh. The first release after an
   object was hooked began unseen, but ends through the hook, and is resolved there. */
static void *save_thread(void);
static void restore_thread(void *state);
static void release_thread(void *state);
static void acquire_thread(void *state);
static int ensure_gil(void);
static void release_gil(int state);
static void parallel(void (*work)(void *), void *data, unsigned threads, unsigned flags);
enum { SAVE_THREAD, RESTORE_THREAD, RELEASE_THREAD, ACQUIRE_THREAD, ENSURE_GIL, RELEASE_GIL, PARALLEL, RELEASE_HOOKS };
static struct memcost_got_hook release_hooks[RELEASE_HOOKS] = {
    [SAVE_THREAD] = {"PyEval_SaveThread", (memcost_function)save_thread, NULL},
    [RESTORE_THREAD] = {"PyEval_RestoreThread", (memcost_function)restore_thread, NULL},
    [RELEASE_THREAD] = {"PyEval_ReleaseThread", (memcost_function)release_thread, NULL},
    [ACQUIRE_THREAD] = {"PyEval_AcquireThread", (memcost_function)acquire_thread, NULL},
    [ENSURE_GIL] = {"PyGILState_Ensure", (memcost_function)ensure_gil, NULL},
    [RELEASE_GIL] = {"PyGILState_Release", (memcost_function)release_gil, NULL},
    [PARALLEL] = {"GOMP_parallel", (memcost_function)parallel, NULL}};
static int release_hooks_found;
static uint32_t releases;                            /* numbers given out, process-wide */
static MEMCOST_THREAD_LOCAL uint64_t pending_release; /* a big call named this release (0: none) */
static MEMCOST_THREAD_LOCAL uint64_t this_release;    /* the release the thread is in (0: it holds the GIL, or unseen) */
static MEMCOST_THREAD_LOCAL uint32_t own_tid;
static MEMCOST_THREAD_LOCAL uint64_t sampled_elsewhere; /* this release, sampled in a thread working for it */

/* The tracer's BPF array of releases (bpf/fault_counts.h, memcost_python_release_slot), mapped
   from the descriptor MEMCOST_PYTHON_RELEASES names in the tracer ("pid:fd"), taken with
   pidfd_getfd: a descriptor passed down would be closed by any launcher that closes what it does
   not know (Python's subprocess does). NULL: none (not root, no counter, a kernel before 5.6). */
static struct memcost_python_release_slot *release_slots;
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

static void map_release_slots(void) {
  const int number = releases_tracer_fd;
  releases_tracer_fd = -1; /* tried once */
  if (number < 0) return;
  const int tracer = (int)syscall(SYS_pidfd_open, releases_tracer_pid, 0);
  if (tracer < 0) return;
  const int fd = (int)syscall(SYS_pidfd_getfd, tracer, number, 0);
  (void)syscall(SYS_close, tracer);
  if (fd < 0) return;
  /* The number is the tracer's /dev/null where its counter did not open: only a BPF map is mapped. */
  char link[64] = {0}, path[40] = "/proc/self/fd/", digits[16];
  int count = 0;
  for (unsigned value = (unsigned)fd; count == 0 || value; value /= 10) digits[count++] = (char)('0' + value % 10);
  for (size_t at = strlen(path); count > 0; ++at) path[at] = digits[--count];
  const long length = syscall(SYS_readlinkat, AT_FDCWD, path, link, sizeof(link) - 1); /* arm64 has no readlink */
  void *slots = MAP_FAILED;
  if (length > 0 && strncmp(link, "anon_inode:bpf-map", 18) == 0) {
    slots = (void *)syscall(SYS_mmap, NULL, (size_t)MEMCOST_PYTHON_RELEASE_SLOTS * sizeof(*release_slots),
                            PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  (void)syscall(SYS_close, fd);
  if (slots != MAP_FAILED && (uintptr_t)slots < (uintptr_t)-4096) release_slots = slots;
}

/* The calling thread's slot, and the word it writes there for a release: its own id above the
   release's number (bpf/fault_counts.h). */
static struct memcost_python_release_slot *release_slot(void) {
  if (!own_tid) own_tid = (uint32_t)syscall(SYS_gettid);
  return &release_slots[own_tid & (MEMCOST_PYTHON_RELEASE_SLOTS - 1)];
}
static uint64_t slot_word(uint64_t release) { return (uint64_t)own_tid << 32 | release; }

/* A forked child's thread has an id of its own (the slot it writes is its own, not its parent's
   thread's: the array is shared), and is in no release. */
static void forked_child(void) {
  own_tid = 0;
  this_release = pending_release = sampled_elsewhere = 0;
}

/* A new release's number: a process-wide count, never 0. */
static uint64_t new_release(void) {
  uint32_t count = __atomic_add_fetch(&releases, 1, __ATOMIC_RELAXED);
  if (!count) count = __atomic_add_fetch(&releases, 1, __ATOMIC_RELAXED);
  return count;
}

/* The thread has just given the GIL up through a hook: a release begins, its number in the slot. */
static void release_began(void) {
  pending_release = 0;
  sampled_elsewhere = 0;
  this_release = new_release();
  if (!release_slots) return;
  struct memcost_python_release_slot *slot = release_slot(); /* knows the thread's id from here on */
  __atomic_store_n(&slot->release, slot_word(this_release), __ATOMIC_RELAXED);
}

/* The thread is about to take the GIL back: its slot is cleared first, so that what it faults
   from then on is not the release's. Returns whether a sample of its faults meanwhile (the BPF
   counter's) marked the release sampled. */
static int release_ending(void) {
  if (!release_slots || !this_release) return 0;
  const int elsewhere = sampled_elsewhere == this_release;
  struct memcost_python_release_slot *slot = release_slot();
  const uint64_t word = slot_word(this_release);
  if (__atomic_load_n(&slot->release, __ATOMIC_RELAXED) != word) return elsewhere;
  __atomic_store_n(&slot->release, 0, __ATOMIC_RELAXED);
  return elsewhere || __atomic_load_n(&slot->sampled, __ATOMIC_RELAXED) == word;
}

/* The GIL is held again, and the Python frames are those it was released at: sent once for the
   big calls that named this release (the same number, or one of its own where the release began
   unseen) or for the samples that did. */
static void release_ended(int sampled) {
  const uint64_t release = pending_release ? pending_release : sampled ? this_release : 0;
  this_release = 0;
  if (!release) return;
  pending_release = 0;
  struct {
    struct memcost_python_pending link;
    struct python_block block;
  } resolves;
  python_stack(&resolves.block);
  if (resolves.block.header.magic == MEMCOST_PYTHON_MAGIC) {
    resolves.link.magic = MEMCOST_PYTHON_RESOLVES_MAGIC;
    resolves.link.release = release;
    __asm__ volatile("" : : "r"(&resolves) : "memory");
    if (out_fd >= 0) {
      const uint64_t now = now_ns();
      emit(MEMCOST_CALL_PYTHON_RESOLVES, now, now, release, 0, 0, 0, 0, &resolves.block);
    } else {
      const int saved_errno = errno;
      (void)syscall(SYS_madvise, NULL, 0, MADV_NORMAL); /* does nothing: its copied stack carries the link */
      errno = saved_errno;
    }
    resolves.link.magic = 0;
  }
  python_stack_done(&resolves.block);
}

static void *save_thread(void) {
  void *state = ((void *(*)(void))release_hooks[SAVE_THREAD].real)();
  release_began();
  return state;
}

static void release_thread(void *state) {
  ((void (*)(void *))release_hooks[RELEASE_THREAD].real)(state);
  release_began();
}

static void restore_thread(void *state) {
  const int sampled = release_ending();
  ((void (*)(void *))release_hooks[RESTORE_THREAD].real)(state);
  release_ended(sampled);
}

static void acquire_thread(void *state) {
  const int sampled = release_ending();
  ((void (*)(void *))release_hooks[ACQUIRE_THREAD].real)(state);
  release_ended(sampled);
}

/* PyGILState_Ensure ends a release only where the thread was in one (it may hold the GIL already). */
static int ensure_gil(void) {
  const int in_release = this_release != 0;
  const int sampled = in_release ? release_ending() : 0;
  const int state = ((int (*)(void))release_hooks[ENSURE_GIL].real)();
  if (in_release) release_ended(sampled);
  return state;
}

/* A parallel region (libgomp's GOMP_parallel: `#pragma omp parallel`, PyTorch's at::parallel_for)
   opened by a thread in a release: every thread of the team works for that release, its slot
   says so for the length of its part, and a sample of any of them has the releasing thread send
   its Python stack. The team's other threads never hold the GIL (this_release 0 there). */
struct parallel_work {
  void (*work)(void *);
  void *data;
  uint64_t release;
  int sampled;
};

static void parallel_part(void *argument) {
  struct parallel_work *part = argument;
  struct memcost_python_release_slot *slot = this_release ? NULL : release_slot();
  const uint64_t word = slot ? slot_word(part->release) : 0;
  if (slot) __atomic_store_n(&slot->release, word, __ATOMIC_RELAXED);
  part->work(part->data);
  if (slot && __atomic_load_n(&slot->release, __ATOMIC_RELAXED) == word) {
    __atomic_store_n(&slot->release, 0, __ATOMIC_RELAXED);
    if (__atomic_load_n(&slot->sampled, __ATOMIC_RELAXED) == word) __atomic_store_n(&part->sampled, 1, __ATOMIC_RELAXED);
  }
}

static void parallel(void (*work)(void *), void *data, unsigned threads, unsigned flags) {
  void (*real)(void (*)(void *), void *, unsigned, unsigned) =
      (void (*)(void (*)(void *), void *, unsigned, unsigned))release_hooks[PARALLEL].real;
  if (!release_slots || !this_release) {
    real(work, data, threads, flags);
    return;
  }
  struct parallel_work part = {work, data, this_release, 0};
  real(parallel_part, &part, threads, flags); /* returns when the team has ended */
  if (__atomic_load_n(&part.sampled, __ATOMIC_RELAXED)) sampled_elsewhere = part.release;
}

/* PyGILState_Release gives the GIL up only where its Ensure took it, and ends the thread's state
   where Ensure made it (a thread foreign to Python): a release begins only in a thread that still
   has a state and no longer holds the GIL. */
static void release_gil(int state) {
  ((void (*)(int))release_hooks[RELEASE_GIL].real)(state);
  if (!py.gil_held() && py.this_thread()) release_began();
}

/* libgomp's GOMP_parallel, once a library that uses it is loaded: found in the first libgomp the
   process loaded, in its own table (PyTorch loads its own with RTLD_LOCAL, where dlsym does not
   look), and hooked only in the objects that need that copy (got_hook.h, `needed`). Looked for
   as the other hooks are applied, when the loader has added objects since the last look; no call
   into the loader (this may run inside it, in an allocation it makes). */
static unsigned long long parallel_sought_at = ~0ULL; /* memcost_loaded_objects() at the last look */
static void find_parallel(void) {
  const unsigned long long loaded = memcost_loaded_objects();
  if (loaded == parallel_sought_at) return;
  parallel_sought_at = loaded;
  if (memcost_got_hook_find_in(&release_hooks[PARALLEL], "/libgomp")) {
    memcost_got_hook_forget(); /* the objects walked without it are walked again */
  }
}

static void hook_gil_releases(void) {
  if (!python_ready || inside || !py.is_initialized()) return;
  inside = 1;  /* dlsym may allocate */
  if (!release_hooks_found) {
    /* Saving and restoring are required; the others are hooked where the interpreter has them.
       GOMP_parallel never by dlsym: only in the libgomp it names (find_parallel). */
    for (int hook = 0; hook < PARALLEL; ++hook) (void)memcost_got_hook_find(&release_hooks[hook]);
    release_hooks_found = release_hooks[SAVE_THREAD].real && release_hooks[RESTORE_THREAD].real ? 1 : -1;
    if (release_hooks_found > 0) map_release_slots();
  }
  if (release_hooks_found > 0 && release_slots && !release_hooks[PARALLEL].real) find_parallel();
  if (release_hooks_found > 0) (void)memcost_got_hook_apply(release_hooks, RELEASE_HOOKS, &releases);
  inside = 0;
}

/* The block for a big call: the Python stack where the thread holds the GIL; where it has released
   it, a pending block naming the release. */
static void python_stack_or_pending(struct python_block *block) {
  python_stack(block);
  hook_gil_releases();
  if (release_hooks_found <= 0 || inside || block->header.magic == MEMCOST_PYTHON_MAGIC) return;
  if (py.gil_held() || !py.this_thread()) return;
  if (!pending_release) pending_release = this_release ? this_release : new_release();
  struct memcost_python_pending pending = {MEMCOST_PYTHON_PENDING_MAGIC, pending_release};
  memcpy(&block->header, &pending, sizeof(pending));
  __asm__ volatile("" : : "r"(block) : "memory");
}

static uint64_t now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}


static void emit(uint32_t kind, uint64_t enter_ns, uint64_t exit_ns, uint64_t a0, uint64_t a1, uint64_t a2,
                 uint64_t a3, int64_t result, const struct python_block *python) {
  if (out_fd < 0 || inside) return;
  inside = 1;
  int saved_errno = errno;
  struct record r;
  struct memcost_preload_header *h = &r.header;
  h->frames = memcost_return_addresses(r.pcs, MAX_FRAMES, SKIPPED_FRAMES + 1);
  h->kind = kind;
  h->pid = (uint32_t)getpid();
  h->tid = (uint32_t)syscall(SYS_gettid);
  h->enter_ns = enter_ns;
  h->exit_ns = exit_ns;
  h->args[0] = a0, h->args[1] = a1, h->args[2] = a2, h->args[3] = a3, h->args[4] = 0, h->args[5] = 0;
  h->result = result;
  h->python_bytes = !python                                          ? 0
                    : python->header.magic == MEMCOST_PYTHON_MAGIC        ? (uint32_t)sizeof(struct memcost_python_header) + python->header.bytes
                    : python->header.magic == MEMCOST_PYTHON_PENDING_MAGIC ? (uint32_t)sizeof(struct memcost_python_pending)
                                                                          : 0;
  size_t pcs_end = offsetof(struct record, pcs) + h->frames * sizeof(uint64_t);
  if (h->python_bytes) memcpy((char *)&r + pcs_end, python, h->python_bytes);
  h->size = (uint32_t)(pcs_end + h->python_bytes);
  ssize_t ignored = write(out_fd, &r, h->size);
  (void)ignored;
  errno = saved_errno;
  inside = 0;
}

static long checked(long result) {
  if (result < 0 && result > -4096) {
    errno = (int)-result;
    return -1;
  }
  return result;
}

/* The calling thread's faults so far, as the kernel accounts them (what rusage reads): they rise
   inside a system call that faults pages in without an exception. Reporting only (0 otherwise). */
static uint64_t thread_faults(void) {
  struct rusage usage;
  if (out_fd < 0 || syscall(SYS_getrusage, RUSAGE_THREAD, &usage) != 0) return 0;
  return (uint64_t)usage.ru_minflt + (uint64_t)usage.ru_majflt;
}

/* The faults a call took, if any (the thread's count read right after it returned: the reporting
   itself faults), reported with its stack: the call is their touching site. */
static void faults_taken(long number, uint64_t before, uint64_t after, uint64_t enter, uint64_t exit, uint64_t start,
                         uint64_t length, long result) {
  if (after > before) emit(MEMCOST_CALL_FAULTS_IN_CALL, enter, exit, (uint64_t)number, start, length, after - before, result, NULL);
}

/* Whether fd is a character device (a driver's file: /dev/nvidiactl, /dev/zero). */
static int device_file(int fd) {
  struct stat status;
  return fstat(fd, &status) == 0 && S_ISCHR(status.st_mode);
}

void *mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
  if (!address && fd == -1 && (flags & (MAP_ANONYMOUS | MAP_PRIVATE | MAP_SHARED | MAP_FIXED)) == (MAP_ANONYMOUS | MAP_PRIVATE)
      && length >= memcost_apply_min_bytes()) {
    void *advised = memcost_apply_mmap(length, prot, flags);
    if (advised) return advised;
  }
  /* A big anonymous mapping an extension asks for in a Python process (Python's mmap module,
     which releases the GIL around the call) carries the Python stack, as a big malloc-family call
     does: the line that asked for it is its site. So does a big shared mapping of a character
     device: a driver's memory (PyTorch gives the GIL up around cudaHostAlloc, whose mapping was
     named without its line on an H100 host; whether the driver maps it so is not yet seen). Not
     the interpreter's own (pymalloc's arenas are mapped
     inside its allocator, which a walk of the frames may not enter), nor the loader's (regular
     files, or fixed). */
  struct python_block python;
  python.header.magic = 0;
  const uintptr_t caller = (uintptr_t)__builtin_return_address(0);
  const int from_python = python_ready && !address && !(flags & MAP_FIXED) && length >= min_bytes &&
                          (caller < interpreter_start || caller >= interpreter_end) &&
                          (fd == -1 || ((flags & MAP_SHARED) && device_file(fd)));
  if (from_python) python_stack_or_pending(&python);
  const int faults_in = (flags & (MAP_POPULATE | MAP_LOCKED)) != 0;
  uint64_t before = faults_in ? thread_faults() : 0;
  uint64_t enter = now_ns();
  long result = syscall(SYS_mmap, address, length, prot, flags, fd, offset);
  uint64_t exit = now_ns(), after = faults_in ? thread_faults() : 0;
  if (length >= min_bytes) emit(MEMCOST_CALL_MMAP, enter, exit, (uint64_t)(uintptr_t)address, length, (uint64_t)prot,
                                (uint64_t)flags, result, from_python ? &python : NULL);
  if (checked(result) != -1) faults_taken(SYS_mmap, before, after, enter, exit, (uint64_t)result, length, result);
  if (from_python) python_stack_done(&python);
  return (void *)checked(result);
}

void *mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset)
    __attribute__((alias("mmap")));

int munmap(void *address, size_t length) {
  if (memcost_apply_munmap(address, length)) return 0; /* kept for the advice's next call */
  uint64_t enter = now_ns();
  long result = syscall(SYS_munmap, address, length);
  if (length >= min_bytes) emit(MEMCOST_CALL_MUNMAP, enter, now_ns(), (uint64_t)(uintptr_t)address, length, 0, 0, result, NULL);
  return (int)checked(result);
}

void *mremap(void *address, size_t old_length, size_t new_length, int flags, ...) {
  void *new_address = NULL;
  if (flags & MREMAP_FIXED) {
    __builtin_va_list extra;
    __builtin_va_start(extra, flags);
    new_address = __builtin_va_arg(extra, void *);
    __builtin_va_end(extra);
  }
  memcost_apply_forget(address);
  uint64_t enter = now_ns();
  long result = syscall(SYS_mremap, address, old_length, new_length, flags, new_address);
  emit(MEMCOST_CALL_MREMAP, enter, now_ns(), (uint64_t)(uintptr_t)address, old_length, new_length, (uint64_t)flags, result, NULL);
  return (void *)checked(result);
}

int madvise(void *address, size_t length, int advice) {
  if (memcost_apply_madvise(address, length, advice)) return 0;  /* --verify: huge-page advice wins */
  uint64_t before = thread_faults();
  uint64_t enter = now_ns();
  long result = syscall(SYS_madvise, address, length, advice);
  uint64_t exit = now_ns(), after = thread_faults();
  if (length >= min_bytes) emit(MEMCOST_CALL_MADVISE, enter, exit, (uint64_t)(uintptr_t)address, length, (uint64_t)advice, 0, result, NULL);
  faults_taken(SYS_madvise, before, after, enter, exit, (uint64_t)(uintptr_t)address, length, result);
  return (int)checked(result);
}

int mlock(const void *address, size_t length) {
  uint64_t before = thread_faults(), enter = now_ns();
  long result = syscall(SYS_mlock, address, length);
  faults_taken(SYS_mlock, before, thread_faults(), enter, now_ns(), (uint64_t)(uintptr_t)address, length, result);
  return (int)checked(result);
}

int mlock2(const void *address, size_t length, unsigned int flags) {
  uint64_t before = thread_faults(), enter = now_ns();
  long result = syscall(SYS_mlock2, address, length, flags);
  faults_taken(SYS_mlock2, before, thread_faults(), enter, now_ns(), (uint64_t)(uintptr_t)address, length, result);
  return (int)checked(result);
}

int mlockall(int flags) {
  uint64_t before = thread_faults(), enter = now_ns();
  long result = syscall(SYS_mlockall, flags);
  faults_taken(SYS_mlockall, before, thread_faults(), enter, now_ns(), 0, 0, result);
  return (int)checked(result);
}

/* A driver pins memory in an ioctl (CUDA's cudaHostAlloc and cudaHostRegister): the range is the
   driver's to know, so the faults are reported without one. The argument is passed as the one
   pointer-sized word every ioctl takes. */
int ioctl(int fd, unsigned long request, ...) {
  va_list rest;
  va_start(rest, request);
  void *argument = va_arg(rest, void *);
  va_end(rest);
  if (out_fd < 0) return (int)checked(syscall(SYS_ioctl, fd, request, argument));  /* the kernel counts (root) */
  uint64_t before = thread_faults(), enter = now_ns();
  long result = syscall(SYS_ioctl, fd, request, argument);
  faults_taken(SYS_ioctl, before, thread_faults(), enter, now_ns(), 0, 0, result);
  return (int)checked(result);
}

/* Heap growth by many small allocations (sqlite's page cache, a dict resized again and again):
   no single call is big, but the calls that moved the break grew the heap. In a Python process
   each small malloc-family call compares the break (sbrk(0): glibc keeps it, no system call)
   before and after; a call that moved it is followed at once by a marker that carries the Python
   stack, before the caller can touch the new memory: as root a brk(0) system call, whose
   tracepoint sample copies this frame's block; when reporting, a brk record with the block. The
   tracer charges the heap grown since the process's last marker to the marker's stack
   (src/trace/attribution/attribution.cpp). A thread that grows the heap while it has released the
   GIL (sqlite runs its queries without it) cannot read its frames: in a release an extension made
   through a hooked call, its marker carries a pending block naming the release, whose Python stack
   the thread sends when it takes the GIL back (release_ended), as a big call's; in a release
   no hook saw (the interpreter's own), the stack of its last marker made with the GIL held.
   Every CHECK_HOOKS_EVERY small calls, a module loaded since is hooked before it can release the
   GIL much. (The stack was read again at most once a millisecond while small calls ran, for the
   releases: about 2,000 walks in a traced `import torch`, 0.07-0.1 s of its 2 s.) */
enum { CHECK_HOOKS_EVERY = 64 };
static MEMCOST_THREAD_LOCAL struct python_block last_python; /* magic 0: none yet */
static MEMCOST_THREAD_LOCAL uint32_t small_calls;

static void hook_now_and_then(void) {
  if (++small_calls % CHECK_HOOKS_EVERY != 0 || inside || !py.is_initialized()) return;
  hook_gil_releases();
}

static void heap_grew(void *before, void *after) {
  struct python_block python;
  python_stack(&python); /* exact where the GIL is held */
  if (python.header.magic == MEMCOST_PYTHON_MAGIC) {
    memcpy(&last_python, &python, sizeof(struct memcost_python_header) + python.header.bytes);
  } else if (this_release && release_hooks_found > 0 && !inside) {
    if (!pending_release) pending_release = this_release;
    struct memcost_python_pending pending = {MEMCOST_PYTHON_PENDING_MAGIC, pending_release};
    memcpy(&python.header, &pending, sizeof(pending));
    __asm__ volatile("" : : "r"(&python) : "memory");
  } else if (last_python.header.magic == MEMCOST_PYTHON_MAGIC) {
    memcpy(&python, &last_python, sizeof(struct memcost_python_header) + last_python.header.bytes);
  }
  const int named = python.header.magic == MEMCOST_PYTHON_MAGIC || python.header.magic == MEMCOST_PYTHON_PENDING_MAGIC;
  if (out_fd >= 0) {
    uint64_t now = now_ns();
    /* The growth itself (no interposer sees glibc's own brk): arg 1 is the break before it. */
    emit(MEMCOST_CALL_BRK, now, now, (uint64_t)(uintptr_t)after, (uint64_t)(uintptr_t)before, 0, 0,
         (int64_t)(uintptr_t)after, NULL);
    if (named) emit(MEMCOST_CALL_BRK, now, now, 0, 0, 0, 0, (int64_t)(uintptr_t)after, &python);
  } else if (named) {
    (void)syscall(SYS_brk, 0);
  }
  python_stack_done(&python);
}

/* A small call: straight through, but a Python process watches the break (above). */
#define SMALL_CALL(call)                                    \
  do {                                                      \
    if (!python_ready || inside) return (call);             \
    hook_now_and_then();                                    \
    void *before = sbrk(0);                                 \
    void *result = (call);                                  \
    void *after = sbrk(0);                                  \
    if (after != before) heap_grew(before, after);          \
    return result;                                          \
  } while (0)

/* The malloc family: big calls carry the Python stack (in this frame, for as long as the call
   runs) and, when reporting, are reported; small ones go straight through. */
#define BIG_CALL(call, report)        \
  do {                                \
    struct python_block python;       \
    python_stack_or_pending(&python); \
    uint64_t enter = now_ns();        \
    void *result = (call);            \
    if (out_fd >= 0) report;          \
    python_stack_done(&python);       \
    return result;                    \
  } while (0)

static void allocated(void *pointer, size_t size, uint64_t enter, const struct python_block *python) {
  if (pointer && !inside) {
    memcost_block_remember(pointer);
    emit(MEMCOST_CALL_MALLOC, enter, now_ns(), 0, size, 0, 0, (int64_t)(uintptr_t)pointer, python);
  }
}

void *malloc(size_t size) {
  void *advised = size >= memcost_apply_min_bytes() ? memcost_apply_malloc(size, 0) : NULL;
  if (advised) return advised;
  if (size < min_bytes) SMALL_CALL(__libc_malloc(size));
  BIG_CALL(__libc_malloc(size), allocated(result, size, enter, &python));
}

void *calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes) || bytes < min_bytes) SMALL_CALL(__libc_calloc(count, size));
  void *advised = bytes >= memcost_apply_min_bytes() ? memcost_apply_malloc(bytes, 1) : NULL;
  if (advised) return advised;
  BIG_CALL(__libc_calloc(count, size), allocated(result, bytes, enter, &python));
}

void *memalign(size_t alignment, size_t size) {
  if (size < min_bytes) SMALL_CALL(__libc_memalign(alignment, size));
  BIG_CALL(__libc_memalign(alignment, size), allocated(result, size, enter, &python));
}

void *aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }

int posix_memalign(void **out, size_t alignment, size_t size) {
  void *pointer = memalign(alignment, size);
  if (!pointer) return ENOMEM;
  *out = pointer;
  return 0;
}

void free(void *pointer) {
  if (memcost_apply_free(pointer)) return; /* kept for the advice's next call */
  if (out_fd >= 0 && pointer && memcost_block_forget(pointer)) {
    uint64_t enter = now_ns();
    __libc_free(pointer);
    emit(MEMCOST_CALL_FREE, enter, now_ns(), (uint64_t)(uintptr_t)pointer, 0, 0, 0, 0, NULL);
    return;
  }
  __libc_free(pointer);
}

static void reallocated(void *old, size_t size, int tracked, void *result, uint64_t enter,
                        const struct python_block *python) {
  if (result && size >= min_bytes) memcost_block_remember(result);
  else if (!result && tracked) memcost_block_remember(old); /* failed: the old block stays */
  emit(MEMCOST_CALL_REALLOC, enter, now_ns(), (uint64_t)(uintptr_t)old, 0, size, (uint64_t)tracked,
       (int64_t)(uintptr_t)result, python);
}

void *realloc(void *pointer, size_t size) {
  memcost_apply_forget(pointer);
  int tracked = out_fd >= 0 && pointer && memcost_block_forget(pointer);
  if (!tracked && size < min_bytes) SMALL_CALL(__libc_realloc(pointer, size));
  BIG_CALL(__libc_realloc(pointer, size), reallocated(pointer, size, tracked, result, enter, &python));
}
