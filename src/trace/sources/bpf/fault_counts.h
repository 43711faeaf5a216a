/* The layout shared by the in-kernel fault counter (fault_counts.bpf.c) and its reader
   (trace/sources/fault_counter.cpp): one definition, C for both sides. */
#ifndef MEMCOST_TRACE_BPF_FAULT_COUNTS_H
#define MEMCOST_TRACE_BPF_FAULT_COUNTS_H

/* Faults are counted per 2 MiB region of a process's address space (x86-64's THP size), with a
   bit per 4 KiB page that faulted, so the reader can split a region between the mappings in it. */
#define MEMCOST_REGION_SHIFT 21
#define MEMCOST_PAGE_SHIFT 12
#define MEMCOST_REGION_PAGES (1u << (MEMCOST_REGION_SHIFT - MEMCOST_PAGE_SHIFT))
#define MEMCOST_REGION_WORDS (MEMCOST_REGION_PAGES / 64)

/* Generation: a process's count of calls that can take pages away (munmap, mremap, madvise that
   frees, brk, mmap MAP_FIXED, exec), raised as each enters. Within one generation an address
   belongs to one mapping, so a region's faults in it can be charged at its last_ns. */
/* A command's generation until its exec: the fork that becomes it is not counted. */
#define MEMCOST_AWAITING_EXEC 0xffffffffu

struct memcost_region_key {
  unsigned int tgid;
  unsigned int generation;
  unsigned long long region; /* address >> MEMCOST_REGION_SHIFT */
};

struct memcost_region_counts {
  unsigned long long faults;       /* every fault, a page faulting twice counts twice */
  /* CLOCK_MONOTONIC, as perf's records with use_clockid: when the last run of faults here began (a
     run: faults in a row on one CPU, with no mapping call of a traced process between them). Every
     page faulted belongs, at last_ns, to the mapping that holds it. */
  unsigned long long last_ns;
  unsigned long long pages[MEMCOST_REGION_WORDS]; /* bit i: page i of the region faulted */
  /* Time in the fault handler measured in the kernel, for one fault in `timing_one_in` chosen at
     random (timed_faults of them): from the fault's entry tracepoint (page_fault_user/kernel, as
     the handler starts) to the rss_stat tracepoint of its page count's update (after the page was
     allocated, cleared and charged; before its page-table entry is set and the handler returns).
     A timed fault that updates no count (a copy-on-write of an anonymous page, a spurious fault)
     adds 0 to the time and is not in timings_ended. */
  unsigned long long timed_faults;
  unsigned long long timings_ended;
  unsigned long long fault_ns;
  unsigned long long fault_ns_squares; /* the sum of (t / 16 ns)^2, for the estimate's error */
  unsigned int first_tid;      /* the thread of the first fault */
  unsigned int threads_differ; /* 1: another thread faulted here too */
};

/* What the counter sends to perf's BPF-output event on each CPU, each behind its kind. perf puts
   the sample's own thread, time, user registers and a copy of the user stack beside it. */
/* The bytes of a call's argument structure kept (memcost_call_faults.argument): the outer one in
   the first MEMCOST_CALL_INNER_AT, a structure it points to after. */
#define MEMCOST_CALL_ARGUMENT_BYTES 112
#define MEMCOST_CALL_INNER_AT 80

enum memcost_output_kind {
  MEMCOST_OUTPUT_TOUCH = 1,       /* struct memcost_touch_sample */
  MEMCOST_OUTPUT_CALL_FAULTS = 2, /* struct memcost_call_faults */
};

/* A touching stack's sample: the fault, and the faults it stands for. */
struct memcost_touch_sample {
  unsigned int kind;         /* MEMCOST_OUTPUT_TOUCH */
  unsigned int user;         /* 1: a fault of user code; 0: one a system call took for it */
  unsigned long long address;
  unsigned long long faults; /* the traced faults this CPU counted since its last sample, this one included */
  unsigned long long python_release; /* the number of the GIL release the thread works in (memcost_python_release_slot); 0: none */
};

/* Python threads that have released the GIL, one slot per thread id modulo the count: the map is
   mapped into each traced CPython process by the preload library (trace/preload/interposer.c).
   A thread that gives the GIL up through a hooked call (PyEval_SaveThread...) writes `release`:
   its own thread id in the upper 32 bits (a slot another thread took, their ids alike modulo the
   count, is told apart), the release's number in the process in the lower; it clears it before it
   takes the GIL back. A thread working for that release (an OpenMP thread of a parallel region
   the releasing thread opened: PyTorch's operations) writes its own id above the same number. A
   sample of a fault or call of that thread meanwhile carries the number (python_release) and
   writes the whole word into `sampled`; the releasing thread, taking the GIL back, sends its
   Python stack for a sampled release (MEMCOST_PYTHON_RESOLVES_MAGIC, preload/abi.h). Faulting
   inside an extension's call made without the GIL (a PyTorch operation filling a tensor) is then
   named at the Python line that called it. */
#define MEMCOST_PYTHON_RELEASE_SLOTS 32768u
struct memcost_python_release_slot {
  unsigned long long release;
  unsigned long long sampled;
};

/* A system call of a traced process that took faults without an exception, sent as it returns (so
   the copied stack is the call's). The kernel faults pages in on purpose inside some calls, through
   get_user_pages: MAP_POPULATE, MADV_POPULATE_*, mlock, MAP_LOCKED, a driver pinning memory in an
   ioctl. No exception, so no exception tracepoint, and no perf event: only the thread's own
   counters (min_flt, maj_flt: what rusage reads) see them. `faults` is what those counters rose
   by during the call, less the faults the exception tracepoints counted for the thread meanwhile. */
struct memcost_call_faults {
  unsigned int kind;    /* MEMCOST_OUTPUT_CALL_FAULTS */
  unsigned int syscall; /* its number (x86-64) */
  unsigned long long enter_ns; /* CLOCK_MONOTONIC; it returned at the sample's time */
  unsigned long long faults;
  unsigned long long args[6];
  long long result;
  /* Where a call names the memory it pins only inside a structure its third argument points to,
     that structure as the call entered (the driver may write over it before it returns), for the
     calls trace/attribution/faulting_syscalls.cpp reads it for: NVIDIA's pinning ioctls (type 'F';
     for NV_ESC_RM_ALLOC of an OS descriptor, the allocation parameters it points to follow at
     MEMCOST_CALL_INNER_AT) and io_uring's buffer registration (its first iovecs). argument_bytes:
     how many bytes of the outer structure were read (0: none). */
  unsigned int argument_bytes;
  unsigned int inner_bytes;
  unsigned char argument[MEMCOST_CALL_ARGUMENT_BYTES];
  unsigned long long python_release; /* as memcost_touch_sample's */
};

/* Totals kept beside the regions: what could not be counted is said, never dropped silently. */
enum memcost_fault_total {
  MEMCOST_TOTAL_NO_ROOM = 0,      /* faults not counted: the region map was full */
  MEMCOST_TOTAL_GENERATIONS = 1,  /* generation changes */
  MEMCOST_TOTAL_BUSY = 2,         /* faults not counted: their CPU's pending region was being updated */
  MEMCOST_TOTAL_IN_CALLS = 3,     /* faults taken inside system calls without an exception (memcost_call_faults) */
  MEMCOST_TOTALS = 4,
};

#endif
