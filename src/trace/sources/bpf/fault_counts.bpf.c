// The in-kernel side of `memcost trace`: page faults of the traced processes counted per region
// and generation (fault_counts.h), so that nothing leaves the kernel per fault. Attached by
// trace/sources/fault_counter.cpp; what it needs is a BTF kernel with the x86 exceptions tracepoints
// (tp_btf/page_fault_user, page_fault_kernel) and raw syscall tracepoints.
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "fault_counts.h"

char LICENSE[] SEC("license") = "GPL";

// Only the fields read, relocated against the running kernel's BTF (CO-RE).
struct mm_struct;

struct task_struct {
  int pid;
  int tgid;
  int pagefault_disabled;
  struct mm_struct* mm;
  unsigned long min_flt;  // the thread's faults, as the kernel accounts them (rusage)
  unsigned long maj_flt;
} __attribute__((preserve_access_index));

struct pt_regs {
  unsigned long di;
  unsigned long si;
  unsigned long dx;
  unsigned long r10;
  unsigned long r8;
  unsigned long r9;
  unsigned long orig_ax;
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
  __uint(max_entries, 262144);  // at most: the reader sizes it to the machine (region_map_entries)
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

// The region being faulted on each CPU, counted here (no lookup, no clock read, no atomic) until
// a fault of another process, region or epoch moves it into `regions`, or the reader's sweep does
// (move_pending_out). A fault storm takes up to 512 faults a region in a row on one CPU: one hash
// update and one clock read for all of them instead of one each.
struct pending_region {
  struct memcost_region_key key;
  struct memcost_region_counts counts;  // last_ns: when this CPU's run of faults here began
  __u64 epoch;                          // `epoch` when it began
  __u32 held;                           // 1: key and counts hold faults not yet in `regions`
  __u32 busy;                           // 1: a program on this CPU is updating it
  // The fault being timed on this CPU: when its entry program ended (0: none), and its thread.
  // Its time is added to this region when its page count is updated (on_page_count); a fault of
  // another thread on this CPU meanwhile (the first slept), a sweep, or a system call of the
  // thread (its fault is over) ends the timing unrecorded.
  __u64 fault_started_ns;
  __u32 fault_tid;
  // Touching stacks (touch_sample): faults until this CPU's next sample, the mean of that gap now,
  // the traced faults counted since the last sample, and when it was taken.
  __u32 touch_countdown;
  __u32 touch_gap;
  __u64 faults_since_touch;
  __u64 last_touch_ns;
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct pending_region);
} pending SEC(".maps");

// The system call each thread of a traced process is in (memcost_call_faults): its entry, the
// thread's fault counters then, and the faults the exception tracepoints counted for it since.
struct call_state {
  __u64 enter_ns;
  __u64 faults_at_enter;
  __u64 exception_faults;
  __u64 args[6];
  __u32 syscall;
  __u32 open;  // 1 between its entry and its return
  __u32 argument_bytes, inner_bytes;                 // memcost_call_faults.argument, read as it entered
  unsigned char argument[MEMCOST_CALL_ARGUMENT_BYTES];
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct call_state);
} calls SEC(".maps");

// One perf BPF-output event per CPU (the reader's), writing into that CPU's ring buffer.
struct {
  __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, sizeof(__u32));
} touch_samples SEC(".maps");

// Python threads' releases of the GIL (memcost_python_release_slot), written by the preload library
// in each traced CPython process, which maps this array into its memory.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, MEMCOST_PYTHON_RELEASE_SLOTS);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct memcost_python_release_slot);
} python_releases SEC(".maps");

// Raised by every call that changes a traced process's mappings (a new generation as it enters, a
// new mapping as it returns) and by the reader when it stops counting. A pending region begun in
// an earlier epoch is moved out before the next fault is counted, so its time stamp is never
// older than a mapping its pages are in, and its generation is never one that has ended.
__u64 epoch = 0;

// One fault in this many, chosen at random, is timed (0: none). Set by the reader; 16 by default:
// timing every fault cost the fault storm 8.6 % of its untraced time here, two clock reads and
// the page-count program's work in each fault (docs/trace.md, Counting in the kernel).
__u32 timing_one_in = 16;

// A touching stack is sampled on each CPU about this often (0: none). Set by the reader from
// --touch-samples-per-second. Perf's own sampler on the page-fault event cost every fault of the
// traced process tens of nanoseconds more (a watched service lost 4 % more of its throughput).
__u64 touch_ns_apart = 0;

// Whether the faults system calls take without an exception are counted (the in-call faults unit
// of the tracer turns it on, FaultCounter::count_in_calls): then a traced thread's every call
// notes its fault counters in task storage.
__u32 counting_calls = 0;

// x86-64 user addresses end below this (TASK_SIZE_MAX with 4-level paging; 5-level is larger,
// and kernel addresses begin far above either).
#define USER_ADDRESS_END 0x00ff000000000000ULL

static __always_inline void add_total(__u32 which, __u64 amount) {
  __u64* total = bpf_map_lookup_elem(&totals, &which);
  if (total) *total += amount;
}

// The pending region's faults into `regions` (merged where another CPU made the entry meanwhile).
static __always_inline void move_out(struct pending_region* here) {
  here->fault_started_ns = 0;
  if (!here->held) return;
  here->held = 0;
  if (bpf_map_update_elem(&regions, &here->key, &here->counts, BPF_NOEXIST) == 0) return;
  struct memcost_region_counts* counts = bpf_map_lookup_elem(&regions, &here->key);
  if (!counts) {
    add_total(MEMCOST_TOTAL_NO_ROOM, here->counts.faults);
    return;
  }
  for (int word = 0; word < MEMCOST_REGION_WORDS; ++word) {
    if (here->counts.pages[word]) __sync_fetch_and_or(&counts->pages[word], here->counts.pages[word]);
  }
  __sync_fetch_and_add(&counts->faults, here->counts.faults);
  if (here->counts.timed_faults) {
    __sync_fetch_and_add(&counts->timed_faults, here->counts.timed_faults);
    __sync_fetch_and_add(&counts->timings_ended, here->counts.timings_ended);
    __sync_fetch_and_add(&counts->fault_ns, here->counts.fault_ns);
    __sync_fetch_and_add(&counts->fault_ns_squares, here->counts.fault_ns_squares);
  }
  if (here->counts.threads_differ || counts->first_tid != here->counts.first_tid) counts->threads_differ = 1;
  // The latest of any CPU's is all the reader needs; a race only picks one of them.
  if (here->counts.last_ns > counts->last_ns) counts->last_ns = here->counts.last_ns;
}

// The number of the release of the GIL the current thread is in or works for, marked sampled (the
// releasing thread then sends its Python stack when it takes the GIL back); 0: none, or its slot
// is another thread's.
static __always_inline __u64 sampled_python_release(void) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u32 index = tid & (MEMCOST_PYTHON_RELEASE_SLOTS - 1);
  struct memcost_python_release_slot* slot = bpf_map_lookup_elem(&python_releases, &index);
  if (!slot) return 0;
  __u64 word = slot->release;
  if ((__u32)(word >> 32) != tid || (__u32)word == 0) return 0;
  slot->sampled = word;
  return (__u32)word;
}

// This fault's touching stack, sent to perf, which copies the user registers and stack into the
// CPU's ring buffer beside the data. The gap to the next sample follows the rate just seen, so
// that samples come about touch_ns_apart apart however fast the faults come; it is drawn at
// random around its mean, so that a program's own period cannot alias with it. Each sample
// stands for the faults counted since the one before (its weight), which sum to every fault.
static __always_inline void touch_sample(void* ctx, struct pending_region* here, unsigned long address, __u32 user) {
  __u64 now = bpf_ktime_get_ns();
  __u64 gap = here->touch_gap ? here->touch_gap : 1;
  __u64 elapsed = here->last_touch_ns && now > here->last_touch_ns ? now - here->last_touch_ns : touch_ns_apart;
  __u64 next = elapsed ? gap * touch_ns_apart / elapsed : gap * 2;
  if (next > gap * 2) next = gap * 2;  // perf's frequency mode moves as gently
  if (next < gap / 2) next = gap / 2;
  if (next < 1) next = 1;
  if (next > (1u << 24)) next = 1u << 24;
  struct memcost_touch_sample sample = {
      .kind = MEMCOST_OUTPUT_TOUCH, .user = user, .address = address, .faults = here->faults_since_touch,
      .python_release = sampled_python_release()};
  bpf_perf_event_output(ctx, &touch_samples, BPF_F_CURRENT_CPU, &sample, sizeof(sample));
  here->faults_since_touch = 0;
  here->last_touch_ns = now;
  here->touch_gap = (__u32)next;
  here->touch_countdown = (__u32)(next / 2 + bpf_get_prandom_u32() % next + 1);
}

static __always_inline int count_fault(void* ctx, unsigned long address, __u32 user) {
  if (address >= USER_ADDRESS_END) return 0;
  // With page faults disabled (a copy that may fail: perf copying a user stack for a sample past
  // the stack's end) the handler gives up at once: not a fault the program took, nor one the
  // kernel's own count (rusage) or perf's page-faults event includes.
  if (bpf_get_current_task_btf()->pagefault_disabled) return 0;
  __u32 zero = 0;
  struct pending_region* here = bpf_map_lookup_elem(&pending, &zero);
  if (!here) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = (__u32)(pid_tgid >> 32), tid = (__u32)pid_tgid;
  if (here->busy) {
    // Never expected (tracepoint programs do not nest on a CPU), but said rather than dropped.
    __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
    if (generation && *generation != MEMCOST_AWAITING_EXEC) add_total(MEMCOST_TOTAL_BUSY, 1);
    return 0;
  }
  __u64 region = address >> MEMCOST_REGION_SHIFT;
  here->busy = 1;
  asm volatile("" ::: "memory");  // busy is set before anything else is written (the sweep reads it)
  if (!here->held || here->key.tgid != tgid || here->key.region != region || here->epoch != epoch) {
    // The epoch is read before the generation: a change between them is caught at the next fault.
    __u64 now_epoch = epoch;
    __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
    if (!generation || *generation == MEMCOST_AWAITING_EXEC) {
      asm volatile("" ::: "memory");
      here->busy = 0;
      return 0;
    }
    move_out(here);
    here->key.tgid = tgid;
    here->key.generation = *generation;
    here->key.region = region;
    here->counts.faults = 0;
    here->counts.timed_faults = 0;
    here->counts.timings_ended = 0;
    here->counts.fault_ns = 0;
    here->counts.fault_ns_squares = 0;
    for (int word = 0; word < MEMCOST_REGION_WORDS; ++word) here->counts.pages[word] = 0;
    here->counts.last_ns = bpf_ktime_get_ns();
    here->counts.first_tid = tid;
    here->counts.threads_differ = 0;
    here->epoch = now_epoch;
    here->held = 1;
  }
  __u32 page = (__u32)(address >> MEMCOST_PAGE_SHIFT) & (MEMCOST_REGION_PAGES - 1);
  here->counts.pages[(page / 64) & (MEMCOST_REGION_WORDS - 1)] |= 1ULL << (page % 64);
  here->counts.faults += 1;
  if (here->counts.first_tid != tid) here->counts.threads_differ = 1;
  if (!user) {
    // Counted here: not to be counted again as one the system call took without an exception.
    struct call_state* call = bpf_task_storage_get(&calls, bpf_get_current_task_btf(), 0, 0);
    if (call && call->open) call->exception_faults += 1;
  }
  here->faults_since_touch += 1;
  if (touch_ns_apart) {
    if (here->touch_countdown <= 1) touch_sample(ctx, here, address, user);
    else here->touch_countdown -= 1;
  }
  __u32 one_in = timing_one_in;
  if (one_in && bpf_get_prandom_u32() % one_in == 0) {
    here->counts.timed_faults += 1;
    here->fault_tid = tid;
    // Read last, so that this program's own work is not in the fault's time.
    here->fault_started_ns = bpf_ktime_get_ns();
  } else {
    here->fault_started_ns = 0;  // an earlier fault's timing that found no page count ends here
  }
  asm volatile("" ::: "memory");
  here->busy = 0;
  return 0;
}

// The page count of the process was updated (tp_btf/rss_stat fires at every change of a
// process's RSS counters): inside a fault being timed on this CPU, by its thread and on its own
// address space, the fault's time so far is added to its region. Other updates (a zap by
// munmap or at exit, reclaim of another process) are not a fault's and change nothing.
SEC("tp_btf/rss_stat")
int BPF_PROG(on_page_count, struct mm_struct* mm, int member) {
  __u32 zero = 0;
  struct pending_region* here = bpf_map_lookup_elem(&pending, &zero);
  if (!here || !here->fault_started_ns) return 0;
  if (here->fault_tid != (__u32)bpf_get_current_pid_tgid()) return 0;
  if (mm != bpf_get_current_task_btf()->mm) return 0;
  if (here->busy) return 0;
  __u64 now = bpf_ktime_get_ns();
  here->busy = 1;
  asm volatile("" ::: "memory");
  if (here->held && here->fault_started_ns && now > here->fault_started_ns) {
    __u64 took = now - here->fault_started_ns;
    here->counts.fault_ns += took;
    here->counts.fault_ns_squares += (took >> 4) * (took >> 4);
    here->counts.timings_ended += 1;
  }
  here->fault_started_ns = 0;
  asm volatile("" ::: "memory");
  here->busy = 0;
  return 0;
}

// Run by the reader on each CPU (BPF_PROG_TEST_RUN, BPF_F_TEST_RUN_ON_CPU) before each sweep: that
// CPU's pending region into `regions`. It arrives by interrupt, so it can find a fault program of
// its CPU midway: it then returns 1, and the reader runs it again.
SEC("raw_tp")
int move_pending_out(void* context) {
  __u32 zero = 0;
  struct pending_region* here = bpf_map_lookup_elem(&pending, &zero);
  if (!here) return 0;
  if (here->busy) return 1;
  move_out(here);
  return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_user_fault, unsigned long address, struct pt_regs* regs, unsigned long error_code) {
  return count_fault(ctx, address, 1);
}

// A fault taken inside a system call for the process (read() into a fresh buffer).
SEC("tp_btf/page_fault_kernel")
int BPF_PROG(on_kernel_fault, unsigned long address, struct pt_regs* regs, unsigned long error_code) {
  return count_fault(ctx, address, 0);
}

static __always_inline void next_generation(__u32 tgid) {
  __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
  if (!generation || *generation == MEMCOST_AWAITING_EXEC) return;
  __sync_fetch_and_add(generation, 1);
  __sync_fetch_and_add(&epoch, 1);
  add_total(MEMCOST_TOTAL_GENERATIONS, 1);
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

#define NR_IOCTL 16
#define NR_IO_URING_REGISTER 427
#define NV_IOCTL_TYPE 'F'
#define NV_ESC_RM_ALLOC 0x2b
#define NV01_MEMORY_SYSTEM_OS_DESCRIPTOR 0x71
#define IORING_REGISTER_BUFFERS 0
#define IORING_REGISTER_USE_REGISTERED_RING (1u << 31)

// The structure a call names its memory in, where its arguments name none themselves
// (memcost_call_faults.argument): an NVIDIA ioctl's parameters (type 'F', as many bytes as its
// size says, 80 at most) and, for an OS descriptor's allocation, the parameters they point to;
// io_uring's buffer registration, its first four iovecs. Read as the call enters: the driver
// writes its own pointers over them before it returns.
static __always_inline void read_argument(struct call_state* call, long id) {
  const void* at = (const void*)call->args[2];
  if (id == NR_IOCTL) {
    __u64 command = call->args[1];
    if (((command >> 8) & 0xff) != NV_IOCTL_TYPE) return;
    __u32 size = (command >> 16) & 0x3fff;
    if (size >= 80) {
      if (bpf_probe_read_user(call->argument, 80, at) == 0) call->argument_bytes = 80;
    } else if (size >= 56) {
      if (bpf_probe_read_user(call->argument, 56, at) == 0) call->argument_bytes = 56;
    } else if (size >= 32) {
      if (bpf_probe_read_user(call->argument, 32, at) == 0) call->argument_bytes = 32;
    }
    if ((command & 0xff) == NV_ESC_RM_ALLOC && call->argument_bytes >= 32) {
      __u32 object_class = 0;
      __u64 inner = 0;
      __builtin_memcpy(&object_class, call->argument + 12, sizeof(object_class));  // NVOS21/64: hClass
      __builtin_memcpy(&inner, call->argument + 16, sizeof(inner));                // pAllocParms
      if (object_class == NV01_MEMORY_SYSTEM_OS_DESCRIPTOR &&
          bpf_probe_read_user(call->argument + MEMCOST_CALL_INNER_AT, 32, (const void*)inner) == 0) {
        call->inner_bytes = 32;
      }
    }
  } else if (id == NR_IO_URING_REGISTER && (call->args[1] & ~(__u64)IORING_REGISTER_USE_REGISTERED_RING) == IORING_REGISTER_BUFFERS) {
    __u64 count = call->args[3];
    if (count >= 4) {
      if (bpf_probe_read_user(call->argument, 64, at) == 0) call->argument_bytes = 64;
    } else if (count == 3) {
      if (bpf_probe_read_user(call->argument, 48, at) == 0) call->argument_bytes = 48;
    } else if (count == 2) {
      if (bpf_probe_read_user(call->argument, 32, at) == 0) call->argument_bytes = 32;
    } else if (count == 1) {
      if (bpf_probe_read_user(call->argument, 16, at) == 0) call->argument_bytes = 16;
    }
  }
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_syscall, struct pt_regs* regs, long id) {
  // A thread making a system call has finished its fault: a page count it updates in the call
  // (munmap's zap, MAP_POPULATE, mlock) is not the fault's, which made none (on_page_count).
  __u32 zero = 0;
  struct pending_region* here = bpf_map_lookup_elem(&pending, &zero);
  if (here && here->fault_started_ns && here->fault_tid == (__u32)bpf_get_current_pid_tgid()) here->fault_started_ns = 0;
  __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
  if (!generation || *generation == MEMCOST_AWAITING_EXEC) return 0;
  // Every call of a traced thread: any of them may fault pages in without an exception.
  struct task_struct* task = bpf_get_current_task_btf();
  struct call_state* call = counting_calls ? bpf_task_storage_get(&calls, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE) : 0;
  if (call) {
    // Registers are read by direct loads (tp_btf hands a typed pointer), not by a helper call each
    // (BPF_CORE_READ): 200,000 `stat` calls took 0.541 s traced with those calls and 0.502 s without,
    // against 0.326 s untraced (2-vCPU guest, medians of 8 interleaved runs).
    call->faults_at_enter = task->min_flt + task->maj_flt;
    call->exception_faults = 0;
    call->syscall = (__u32)id;
    call->args[0] = regs->di;
    call->args[1] = regs->si;
    call->args[2] = regs->dx;
    call->args[3] = regs->r10;
    call->args[4] = regs->r8;
    call->args[5] = regs->r9;
    call->open = 1;
    call->argument_bytes = call->inner_bytes = 0;
    if (id == NR_IOCTL || id == NR_IO_URING_REGISTER) read_argument(call, id);
    call->enter_ns = bpf_ktime_get_ns();
  }
  if (id != NR_MUNMAP && id != NR_MREMAP && id != NR_BRK && id != NR_MADVISE && id != NR_MMAP) return 0;
  if (id == NR_MMAP && !(regs->r10 & MAP_FIXED_FLAG)) return 0;
  if (id == NR_MADVISE) {
    unsigned long advice = regs->dx;
    if (advice != MADV_DONTNEED_ADVICE && advice != MADV_FREE_ADVICE && advice != MADV_REMOVE_ADVICE) return 0;
  }
  next_generation(tgid);
  return 0;
}

// The faults a traced thread's call took without an exception, sent with the call's stack.
static __always_inline void call_returned(void* ctx, long ret) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct call_state* call = bpf_task_storage_get(&calls, task, 0, 0);
  if (!call || !call->open) return;
  call->open = 0;
  __u64 risen = task->min_flt + task->maj_flt - call->faults_at_enter;
  if (risen <= call->exception_faults) return;
  struct memcost_call_faults record = {.kind = MEMCOST_OUTPUT_CALL_FAULTS, .syscall = call->syscall,
                                       .enter_ns = call->enter_ns, .faults = risen - call->exception_faults,
                                       .result = ret};
  for (int i = 0; i < 6; ++i) record.args[i] = call->args[i];
  record.argument_bytes = call->argument_bytes;
  record.inner_bytes = call->inner_bytes;
  if (call->argument_bytes || call->inner_bytes) __builtin_memcpy(record.argument, call->argument, sizeof(record.argument));
  record.python_release = sampled_python_release();
  add_total(MEMCOST_TOTAL_IN_CALLS, record.faults);
  bpf_perf_event_output(ctx, &touch_samples, BPF_F_CURRENT_CPU, &record, sizeof(record));
}

// A call that made a mapping has returned: pending regions begun before are moved out, so none is
// stamped earlier than a mapping its pages are in (a region's faults are charged at its stamp).
SEC("tp_btf/sys_exit")
int BPF_PROG(on_syscall_exit, struct pt_regs* regs, long ret) {
  call_returned(ctx, ret);
  long id = regs->orig_ax;
  if (id != NR_MMAP && id != NR_BRK && id != NR_MREMAP) return 0;
  __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  __u32* generation = bpf_map_lookup_elem(&generations, &tgid);
  if (generation && *generation != MEMCOST_AWAITING_EXEC) __sync_fetch_and_add(&epoch, 1);
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
  if (task->pid == task->tgid) next_generation((__u32)task->tgid);
  return 0;
}

// A new process of a traced one is traced (a new thread shares its process's generation).
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct* parent, struct task_struct* child) {
  __u32 parent_tgid = (__u32)parent->tgid;
  __u32 child_tgid = (__u32)child->tgid;
  __u32* parent_generation = bpf_map_lookup_elem(&generations, &parent_tgid);
  if (child_tgid == parent_tgid || !parent_generation || *parent_generation == MEMCOST_AWAITING_EXEC) return 0;
  __u32 first = 0;
  bpf_map_update_elem(&generations, &child_tgid, &first, BPF_ANY);
  return 0;
}
