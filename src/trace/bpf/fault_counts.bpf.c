// The in-kernel side of `memcost trace`: page faults of the traced processes counted per region
// and generation (fault_counts.h), so that nothing leaves the kernel per fault. Attached by
// trace/fault_counter.cpp; what it needs is a BTF kernel with the x86 exceptions tracepoints
// (tp_btf/page_fault_user, page_fault_kernel) and raw syscall tracepoints.
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "fault_counts.h"

char LICENSE[] SEC("license") = "GPL";

// Only the fields read, relocated against the running kernel's BTF (CO-RE).
struct task_struct {
  int pid;
  int tgid;
  int pagefault_disabled;
} __attribute__((preserve_access_index));

struct pt_regs {
  unsigned long di;
  unsigned long si;
  unsigned long dx;
  unsigned long r10;
} __attribute__((preserve_access_index));

// The traced processes (tgid) and each one's generation. The reader adds the first; forks add theirs.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, __u32);
} generations SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 262144);  // 512 GiB of touched regions between two sweeps
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct memcost_region_key);
  __type(value, struct memcost_region_counts);
} regions SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, MEMCOST_TOTALS);
  __type(key, __u32);
  __type(value, __u64);
} totals SEC(".maps");

// x86-64 user addresses end below this (TASK_SIZE_MAX with 4-level paging; 5-level is larger,
// and kernel addresses begin far above either).
#define USER_ADDRESS_END 0x00ff000000000000ULL

static __always_inline void add_total(__u32 which) {
  __u64* total = bpf_map_lookup_elem(&totals, &which);
  if (total) *total += 1;
}

static __always_inline int count_fault(unsigned long address) {
  if (address >= USER_ADDRESS_END) return 0;
  // With page faults disabled (a copy that may fail: perf copying a user stack for a sample past
  // the stack's end) the handler gives up at once: not a fault the program took, nor one the
  // kernel's own count (rusage) or perf's page-faults event includes.
  if (bpf_get_current_task_btf()->pagefault_disabled) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = (__u32)(pid_tgid >> 32), tid = (__u32)pid_tgid;
  __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
  if (!generation || *generation == MEMCOST_AWAITING_EXEC) return 0;
  struct memcost_region_key key = {tgid, *generation, address >> MEMCOST_REGION_SHIFT};
  __u64 now = bpf_ktime_get_ns();
  struct memcost_region_counts* counts = bpf_map_lookup_elem(&regions, &key);
  if (!counts) {
    struct memcost_region_counts fresh = {};
    fresh.first_ns = now;
    fresh.first_tid = tid;
    bpf_map_update_elem(&regions, &key, &fresh, BPF_NOEXIST);  // another CPU may have made it meanwhile
    counts = bpf_map_lookup_elem(&regions, &key);
    if (!counts) {
      add_total(MEMCOST_TOTAL_NO_ROOM);
      return 0;
    }
  }
  __u32 page = (__u32)(address >> MEMCOST_PAGE_SHIFT) & (MEMCOST_REGION_PAGES - 1);
  __sync_fetch_and_or(&counts->pages[(page / 64) & (MEMCOST_REGION_WORDS - 1)], 1ULL << (page % 64));
  __sync_fetch_and_add(&counts->faults, 1);
  if (counts->first_tid != tid) counts->threads_differ = 1;
  counts->last_ns = now;  // the latest of any CPU's is all the reader needs; a race only picks one
  return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_user_fault, unsigned long address, struct pt_regs* regs, unsigned long error_code) {
  return count_fault(address);
}

// A fault taken inside a system call for the process (read() into a fresh buffer).
SEC("tp_btf/page_fault_kernel")
int BPF_PROG(on_kernel_fault, unsigned long address, struct pt_regs* regs, unsigned long error_code) {
  return count_fault(address);
}

static __always_inline void next_generation(__u32 tgid) {
  __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
  if (!generation || *generation == MEMCOST_AWAITING_EXEC) return;
  __sync_fetch_and_add(generation, 1);
  add_total(MEMCOST_TOTAL_GENERATIONS);
}

// x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl); madvise's and mmap's
// flag values as <sys/mman.h> has them.
#define NR_MMAP 9
#define NR_MUNMAP 11
#define NR_BRK 12
#define NR_MREMAP 25
#define NR_MADVISE 28
#define MAP_FIXED_FLAG 0x10
#define MADV_DONTNEED_ADVICE 4
#define MADV_FREE_ADVICE 8
#define MADV_REMOVE_ADVICE 9

SEC("tp_btf/sys_enter")
int BPF_PROG(on_syscall, struct pt_regs* regs, long id) {
  if (id != NR_MUNMAP && id != NR_MREMAP && id != NR_BRK && id != NR_MADVISE && id != NR_MMAP) return 0;
  __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  if (id == NR_MMAP && !(BPF_CORE_READ(regs, r10) & MAP_FIXED_FLAG)) return 0;
  if (id == NR_MADVISE) {
    unsigned long advice = BPF_CORE_READ(regs, dx);
    if (advice != MADV_DONTNEED_ADVICE && advice != MADV_FREE_ADVICE && advice != MADV_REMOVE_ADVICE) return 0;
  }
  next_generation(tgid);
  return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct* task, int old_pid, void* binprm) {
  __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
  if (generation && *generation == MEMCOST_AWAITING_EXEC) *generation = 0;  // the command begins
  else next_generation(tgid);
  return 0;
}

// A process's end (its leader's): its regions' generation ends, so the reader takes them out at
// its next sweep instead of holding them to the end of the trace.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct* task) {
  if (BPF_CORE_READ(task, pid) == BPF_CORE_READ(task, tgid)) next_generation((__u32)BPF_CORE_READ(task, tgid));
  return 0;
}

// A new process of a traced one is traced (a new thread shares its process's generation).
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct* parent, struct task_struct* child) {
  __u32 parent_tgid = (__u32)BPF_CORE_READ(parent, tgid);
  __u32 child_tgid = (__u32)BPF_CORE_READ(child, tgid);
  __u32* parent_generation = bpf_map_lookup_elem(&generations, &parent_tgid);
  if (child_tgid == parent_tgid || !parent_generation || *parent_generation == MEMCOST_AWAITING_EXEC) return 0;
  __u32 first = 0;
  bpf_map_update_elem(&generations, &child_tgid, &first, BPF_ANY);
  return 0;
}
