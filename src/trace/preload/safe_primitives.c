/* The preload library's frame walk (safe_primitives.h). */
#define _GNU_SOURCE
#include "trace/preload/safe_primitives.h"

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <unwind.h>

/* The caller's return addresses: by call-frame information (libgcc's unwinder, as backtrace()
   does), and on through the frame-pointer chain where that ends at code without it, as perf does
   for JIT-compiled code (node's JavaScript, the JVM's compiled methods keep frame pointers). The
   chain is read with process_vm_readv, which fails instead of faulting on a bad pointer. */
#if defined(__x86_64__)
enum { FRAME_POINTER_REGISTER = 6 }; /* rbp */
#elif defined(__aarch64__)
enum { FRAME_POINTER_REGISTER = 29 }; /* x29 */
#endif

struct walk {
  uint64_t *pcs;
  uint32_t count, most, skip;
  uintptr_t frame_pointer;
};

static _Unwind_Reason_Code unwind_step(struct _Unwind_Context *context, void *argument) {
  struct walk *walk = argument;
  uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  if (walk->skip > 0) {
    --walk->skip;
  } else if (walk->count < walk->most) {
    walk->pcs[walk->count++] = ip;
  } else {
    return _URC_END_OF_STACK;
  }
  walk->frame_pointer = _Unwind_GetGR(context, FRAME_POINTER_REGISTER);
  return _URC_NO_REASON;
}

/* Not inlined: its own frame is the first the unwinder reports, and is skipped with the others. */
__attribute__((noinline)) uint32_t memcost_return_addresses(uint64_t *pcs, uint32_t most, uint32_t skip) {
  struct walk walk = {pcs, 0, most, skip, 0};
  _Unwind_Backtrace(unwind_step, &walk);
  uintptr_t frame = walk.frame_pointer;
  const pid_t self = getpid();
  while (walk.count > 0 && walk.count < most && frame != 0 && (frame & 7) == 0) {
    uintptr_t pair[2]; /* the caller's frame pointer, then the return address */
    struct iovec local = {pair, sizeof(pair)}, remote = {(void *)frame, sizeof(pair)};
    if (process_vm_readv(self, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(pair)) break;
    if (pair[1] == 0 || pair[0] <= frame || pair[0] - frame > (64u << 20)) break; /* the stack grows down */
    pcs[walk.count++] = pair[1];
    frame = pair[0];
  }
  return walk.count;
}
