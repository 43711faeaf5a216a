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
  /* Set by memcost_got_hook_find_in: the soname of the object that defines `real`. Then only the
     objects that name it among their DT_NEEDED libraries are rewritten: an object bound to
     another copy of the library (a wheel's own libgomp) keeps its own, never mixed with this one. */
  char needed[64];
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

/* The real function in the first loaded object whose path has `library` in it, from that object's
   own symbol table (its GNU hash table), with that object's soname in `needed`: for a library loaded
   with RTLD_LOCAL (dlsym(RTLD_DEFAULT) does not look there), without a call into the loader. 0 when
   none defines it. */
int memcost_got_hook_find_in(struct memcost_got_hook *hook, const char *library);

/* The dynamic loader's count of objects added so far (dl_iterate_phdr's dlpi_adds). */
unsigned long long memcost_loaded_objects(void);

/* A hook's real function was found since the last apply (a library loaded later defines it): the
   next apply walks every object again, the ones it had finished with too. */
void memcost_got_hook_forget(void);

/* What memcost_got_hook_apply decides for one slot, apart for its tests: 1 when `value` is the real
   function, or inside [code_start, code_end) (a lazily bound slot's stub); 0 otherwise. */
int memcost_got_slot_relocated(uint64_t value, uint64_t real, uint64_t code_start, uint64_t code_end);

#endif
