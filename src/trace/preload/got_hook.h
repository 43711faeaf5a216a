/* Pointing the calls other libraries make to a named function at a replacement, by rewriting
   their global offset tables. LD_PRELOAD cannot do it for a function the executable itself
   defines: a Python built with libpython linked in (Debian's, Ubuntu's) exports
   PyEval_SaveThread and PyEval_RestoreThread from the executable, which the dynamic linker finds
   first; the extension modules (PyTorch's among them) still call them through their own tables. */
#ifndef MEMCOST_TRACE_PRELOAD_GOT_HOOK_H
#define MEMCOST_TRACE_PRELOAD_GOT_HOOK_H

#include <stdint.h>

/* One function to point elsewhere: its name, the replacement, and the real one (found by
   memcost_got_hook_find, before any slot is rewritten). */
typedef void (*memcost_function)(void); /* any function, converted back to its own type to be called */
struct memcost_got_hook {
  const char *name;
  memcost_function replacement;
  memcost_function real;
};

/* The real function's address (dlsym, RTLD_DEFAULT), or 0 when the process has none. */
int memcost_got_hook_find(struct memcost_got_hook *hook);

/* Every loaded object's slots for the hooks' functions now point at the replacements, except in
   `own` (the object that holds the replacements, by the address of any of its data). A slot is rewritten
   only when it is already relocated: it holds the real function or, bound lazily, a stub of its
   own object's code; a slot of an object still being loaded is left (the loader would add its
   base to the replacement). A read-only slot (RELRO) is made writable for the write and read-only
   again. Cheap when nothing was loaded since the last call (dl_iterate_phdr's count of objects
   added). Returns the slots rewritten now. Not to be called while the calling thread is inside
   the dynamic loader. */
int memcost_got_hook_apply(struct memcost_got_hook *hooks, int count, const void *own);

/* What memcost_got_hook_apply decides for one slot, apart for its tests: 1 when `value` is the real
   function, or inside [code_start, code_end) (a lazily bound slot's stub); 0 otherwise. */
int memcost_got_slot_relocated(uint64_t value, uint64_t real, uint64_t code_start, uint64_t code_end);

#endif
