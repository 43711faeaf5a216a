// Tracing a command's memory work (src/trace/: one file per unit; this is the contract): its mapping calls and page faults, each with the user call
// stack, from the kernel's perf events. Linux only (tracer_linux.cpp); tracer_windows.cpp says so.
//
// Contract:
// - run() starts `command` (PATH searched) stopped at the door, opens the events on it and on
//   every thread and child it will make (inherit), lets it run, and returns when it has exited.
//   Its stdin, stdout and stderr are the caller's; its exit status is returned unchanged.
//   Or it attaches to `attach_pid`: events on each of its threads (and what they start later),
//   the mappings it already has reported as `existing`, until it exits, the time is up, or this
//   process gets SIGINT or SIGTERM; the process is left running.
// - Page faults: with count_in_kernel, where the BPF counter loads (fault_counter.hpp), every
//   fault is counted in the kernel and delivered as RegionFaults, and the kernel's software
//   page-fault event samples only the touching stacks (Fault.counted false, with its period).
//   Otherwise, with touch_samples_per_second, a page-fault event records every fault's address
//   (no stack: Fault.stack 0) and the minor-fault event samples the touching stacks; with 0, the
//   page-fault event records every fault (sample_period 1, unless told otherwise) with its stack. Faults taken
//   in kernel mode on the command's behalf (read() into a fresh buffer) are included where the
//   caller may see kernel samples.
// - Mapping calls (mmap, munmap, mremap, brk, madvise): the raw_syscalls tracepoints filtered to
//   them, entry and exit, so each call's duration is measured. They need tracefs and the right
//   to read tracepoints (root or perf_event_paranoid -1). Without them, a dynamically linked command gets the
//   preload library (`preload_library`, LD_PRELOAD) instead, which reports mmap, munmap, mremap
//   and madvise and the big malloc, calloc, realloc and free calls, timed in user space; and
//   faults are then sampled in user mode only.
// - Call stacks: the user stack (stack_bytes from the stack pointer) and registers are copied
//   into each sample and unwound with DWARF call-frame information by elfutils' libdwfl, as
//   `perf --call-graph dwarf` does, so code without frame pointers unwinds; symbols, files and
//   lines come from libdwfl too, with the chain of functions inlined at each address. Identical
//   stacks are delivered once, with an id.
// - Python: in a CPython process the preload library (also loaded as root, for this alone) puts
//   the Python stack of each big malloc-family call on the C stack for the call's length; the
//   tracer finds it in the copied stack (or the interposer's record) and puts its frames where
//   the interpreter's eval loop is in the native stack (python_frames.hpp).
// - Nothing is lost silently: when a buffer is a quarter full, or before slow work (a module's
//   debug information) while one is filling, every process of the traced tree is held (SIGSTOP,
//   then SIGCONT) while the tracer catches up: the command and all its descendants, found through
//   /proc as well as the records, so a child forked a moment ago is held too. Records the kernel
//   still dropped are counted.
// - Fault time, where the kernel allows kernel samples and shows its symbols: a cpu-clock event
//   samples the traced tree's CPU time in kernel mode every cpu_sample_period_ns, with the kernel
//   call chain; each sample says whether it was in the page-fault handler and in page clearing,
//   by the kernel's own function names (kernel_symbols.hpp). The caller charges it to the fault
//   the thread took last.
// - Processes: every fork, exec and exit in the traced tree is reported with the program's name.
// - Interrupts: SIGTERM to this process is passed to the traced tree at once. SIGINT (Ctrl-C) is
//   the command's: a terminal sends it to the whole group; if the command is still running a
//   second later (SIGINT went to this process alone, or the command ignores it) it is passed on,
//   then SIGTERM after 3 s more, then SIGKILL after 5 s more. Result.interrupted says it came.
#pragma once

#include <array>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "os/os.hpp"

namespace memcost::trace {

// Why tracing could not start: what was tried, and the errno it got (0: none).
// What kind of failure, so that callers decide by kind, never by the message's words.
enum class FailureKind {
  none,
  command_not_started,  // the command could not be executed (its name, PATH, permissions)
  no_such_process,      // --attach: no such process, or it has no threads left
  not_supported,        // this system cannot trace (no perf events, tracepoints, tracefs; not Linux)
  system,               // a system call failed (the errno says which)
  interrupted,          // SIGINT or SIGTERM came before the command started: nothing was recorded
};

struct Failure {
  int error = 0;
  std::string what;
  FailureKind kind = FailureKind::system;
  [[nodiscard]] bool ok() const { return what.empty(); }
  [[nodiscard]] bool denied() const { return error == EACCES || error == EPERM; }
  [[nodiscard]] std::string message() const;
};

// A system call that failed just now: errno, and the call in words.
inline Failure errno_failure(const std::string& call) { return Failure{errno, call}; }

struct Result;

struct Options {
  std::vector<std::string> command;
  int attach_pid = 0;                    // instead of a command: a running process (needs tracepoints)
  double attach_seconds = 0;             // how long to watch it (0: until it exits or SIGINT/SIGTERM)
  std::uint64_t sample_period = 1;       // one fault sample per this many faults (counting with perf)
  // Count every fault in the kernel (fault_counter.hpp) where it can. Either way, sample the touching
  // stacks `touch_samples_per_second` times a second per CPU (0: a stack with every fault, by perf).
  bool count_in_kernel = true;
  std::uint32_t touch_samples_per_second = 1000;
  // Counting in the kernel: one fault in this many, chosen at random, is timed there (0: none).
  std::uint32_t fault_timing_one_in = 16;
  std::uint32_t stack_bytes = 4096;      // user stack copied per sample
  std::uint32_t buffer_pages = 8192;     // per CPU ring buffer, a power of two (32 MiB)
  // Counting in the kernel the buffers carry only touching samples, CPU samples and calls: smaller
  // (a 128 MiB buffer took 22 ms to map, and its memory is locked for the whole trace).
  std::uint32_t counting_buffer_pages = 4096;
  std::uint32_t max_frames = 48;
  int command_stdout_fd = -1;            // the command's stdout (-1: this process's own)
  std::string preload_library;           // used when tracepoints cannot be read; empty: none
  // Called as the traced window opens (the command is let through the door, or attached to) and
  // as it closes, so that the caller can measure the rest of the machine over exactly that time.
  std::function<void()> window_opened, window_closed;
  // Called with the result of a trace that ran, before run() lets go of what it holds (the
  // unwinder's modules and tables, the events: 10 ms after a traced `import torch`), so that what
  // the caller makes of the result goes out first. run() returns the same result after.
  std::function<void(const Result&)> traced;
  // Every `period_ns` of tracing, once the records up to then are delivered: `period_ended` (a
  // long trace's windows; 0: none).
  std::uint64_t period_ns = 0;
  std::function<void()> period_ended;
  std::uint64_t preload_min_bytes = 64 * 1024;  // smaller allocations are not reported by it
  bool python_frames = true;  // the preload library's Python stacks (also loaded as root for them)
  // JIT runtimes asked, through their environment, for a perf map and frames that unwind:
  // NODE_OPTIONS and JAVA_TOOL_OPTIONS get kNodeOptions and kJavaOptions (tracer_linux.cpp).
  bool runtime_flags = true;
  // CPU time sampled in the kernel with kernel call chains, to measure fault time (0: not sampled).
  // Needs kernel samples (root, or perf_event_paranoid <= 1) and kernel symbol addresses.
  std::uint64_t cpu_sample_period_ns = 0;
};

// native: a machine-code function; inlined: a function the compiler inlined at that instruction
// (the frame after it is its caller, at the call's line); python: a Python function's frame
// (file, line and function from CPython; no address or module offset).
// jit: code a runtime compiled, named from its perf map (module: the map's path; no module offset).
enum class FrameKind { native = 0, inlined = 1, python = 2, jit = 3 };
[[nodiscard]] inline const char* frame_kind_name(FrameKind kind) {
  static constexpr const char* names[] = {"native", "inlined", "python", "jit"};
  return names[static_cast<int>(kind)];
}

struct Frame {
  FrameKind kind = FrameKind::native;
  std::uint64_t address = 0;   // the instruction (a return address minus one above the first frame)
  std::string function;        // demangled; empty when unknown
  std::string file;            // source file where debug information has it
  int line = 0;
  std::string module;          // the mapped file
  std::uint64_t module_offset = 0;  // address minus where the module was loaded (stable across runs)
};

// The numbers are the preload library's record kinds (interposer.c).
// `existing`: a mapping a process already had when tracing attached to it (from /proc/PID/maps).
enum class CallKind { mmap = 0, munmap = 1, mremap = 2, brk = 3, madvise = 4, malloc = 5, free = 6, realloc = 7, existing = 8 };
[[nodiscard]] inline const char* call_name(CallKind kind) {
  static constexpr const char* names[] = {"mmap", "munmap", "mremap", "brk", "madvise", "malloc", "free", "realloc",
                                          "existing"};
  return names[static_cast<int>(kind)];
}

struct MappingCall {
  CallKind kind = CallKind::mmap;
  int pid = 0;
  int tid = 0;
  std::uint64_t enter_ns = 0;  // CLOCK_MONOTONIC
  std::uint64_t exit_ns = 0;
  // The arguments as captured, in the order of the call's C declaration: mmap(addr, length, prot,
  // flags, fd, offset), munmap(addr, length), mremap(old_address, old_size, new_size, flags,
  // new_address), madvise(addr, length, advice), brk(addr); from the preload library also
  // malloc(-, size), free(ptr), realloc(ptr, -, size) and brk(addr, the break before the call);
  // existing: (start, length, -, flags). Read by name, below, not by position.
  std::uint64_t args[6] = {};
  std::int64_t result = 0;     // the raw return value (-errno on failure)
  std::uint32_t stack = 0;     // 0: no stack could be unwound

  // mmap, munmap, madvise, brk: the address asked; mremap: the old address; free, realloc: the
  // block; existing: the mapping's start.
  [[nodiscard]] std::uint64_t address() const { return args[0]; }
  // mmap, munmap, madvise, existing: the length; mremap: the old size; malloc: the size.
  [[nodiscard]] std::uint64_t length() const { return args[1]; }
  [[nodiscard]] std::uint64_t mmap_flags() const { return args[3]; }  // mmap, existing
  [[nodiscard]] std::uint64_t advice() const { return args[2]; }      // madvise
  [[nodiscard]] std::uint64_t new_length() const { return args[2]; }  // mremap, realloc: the size after
  [[nodiscard]] std::uint64_t break_before() const { return args[1]; }  // brk from the preload library (0: unknown)
};

struct Fault {
  int pid = 0;
  int tid = 0;
  std::uint64_t time_ns = 0;
  std::uint64_t address = 0;
  std::uint32_t stack = 0;
  bool user_mode = true;  // taken by user code (false: inside a system call)
  // false: a sample of the touching stack only, standing for `period` faults of its thread; the
  // faults themselves are counted in the kernel and delivered as RegionFaults.
  bool counted = true;
  std::uint64_t period = 1;
};

// The faults one process took in one region of its address space (kRegionBytes, aligned) within
// one generation (no page of the region was taken away between the first and the last), counted
// in the kernel (fault_counter.hpp): what is new since the region was last delivered.
inline constexpr std::uint64_t kRegionBytes = 2ULL << 20;
inline constexpr std::uint64_t kRegionPageBytes = 4096;
struct RegionFaults {
  int pid = 0;
  std::uint64_t last_ns = 0;  // CLOCK_MONOTONIC: when the region's last run of faults began
  std::uint64_t start = 0;    // the region's first address
  std::uint64_t faults = 0;   // a page that faulted twice counts twice
  std::uint64_t pages[kRegionBytes / kRegionPageBytes / 64] = {};  // bit i: page i faulted
  int first_tid = 0;
  bool one_thread = true;  // every fault by first_tid
  // Fault time measured in the kernel for one fault in N chosen at random (fault_counts.h): how many
  // were timed, how many of those updated a page count (the end of their timing), their time in the
  // handler from its entry tracepoint to that update, and the sum of (t / 16 ns)^2 for the error.
  std::uint64_t timed_faults = 0;
  std::uint64_t timings_ended = 0;
  std::uint64_t fault_ns = 0;
  std::uint64_t fault_ns_squares = 0;
};

// The faults one system call took without an exception: the kernel faulting pages in on purpose
// (get_user_pages: MAP_POPULATE, MADV_POPULATE_*, mlock, MAP_LOCKED, a driver pinning memory in an
// ioctl), which no exception tracepoint and no perf event sees. Counted from the thread's own fault
// counters across the call: in the kernel (fault_counter.hpp), or by the preload library with
// getrusage(RUSAGE_THREAD). The call's stack is the touching site.
struct CallFaults {
  int pid = 0;
  int tid = 0;
  std::uint64_t enter_ns = 0;  // CLOCK_MONOTONIC
  std::uint64_t exit_ns = 0;
  long syscall = -1;           // its number (x86-64)
  std::uint64_t start = 0;     // the range it works on (length 0: unknown: mlockall, an ioctl of an unknown driver)
  std::uint64_t length = 0;
  std::uint64_t faults = 0;
  std::uint32_t stack = 0;
  // Further ranges, where a call names several (io_uring's buffer registration): length 0 where none.
  struct Range {
    std::uint64_t start = 0, length = 0;
  };
  std::array<Range, 3> further{};
};

// The range a call that faults pages in works on, set in `call` (x86-64): mmap and mremap the
// mapping they return; madvise, mlock and mlock2 their arguments; an NVIDIA driver's pinning ioctl
// the memory its parameters name (an OS descriptor: cudaHostRegister, and cudaHostAlloc's memory
// where the driver pins memory it mapped), read from `argument`, the structure its third argument
// points to as it entered, and `inner`, the one that points to in turn; io_uring's buffer
// registration the iovecs in `argument`. None for the others. Bytes from the traced process:
// every length is checked before it is read.
void set_call_range(CallFaults& call, const std::uint64_t (&args)[6], std::int64_t result,
                    std::span<const std::uint8_t> argument = {}, std::span<const std::uint8_t> inner = {});
[[nodiscard]] std::string syscall_name(long syscall);

// One sample of CPU time (cpu-clock, every cpu_sample_period_ns of a thread's CPU time) taken in
// the kernel, classified by the kernel's call chain: inside the page-fault handler, and there
// inside page clearing (zeroing a page before the program sees it) or inside perf recording the
// fault for this tracer (its own cost, not the fault's).
struct CpuSample {
  int pid = 0;
  int tid = 0;
  std::uint64_t time_ns = 0;
  bool in_fault = false;
  bool zeroing = false;
  bool tracing = false;
};

// A process of the traced tree: the command as it starts (or the process attached to), a child
// it forked, a program it exec'd (the same pid, a new name), and its end.
enum class ProcessChange { start = 0, fork = 1, exec = 2, exit = 3 };
[[nodiscard]] inline const char* change_name(ProcessChange change) {
  static constexpr const char* names[] = {"start", "fork", "exec", "exit"};
  return names[static_cast<int>(change)];
}

struct ProcessEvent {
  ProcessChange change = ProcessChange::start;
  int pid = 0;
  int parent = 0;            // the forking process (fork), else 0
  std::uint64_t time_ns = 0;  // CLOCK_MONOTONIC
  std::string name;          // the kernel's comm: the program's file name, at most 15 bytes
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void stack(std::uint32_t id, const std::vector<Frame>& frames) = 0;
  virtual void call(const MappingCall& call) = 0;
  virtual void fault(const Fault& fault) = 0;
  virtual void process(const ProcessEvent& event) = 0;
  virtual void cpu_sample(const CpuSample& sample) { (void)sample; }
  virtual void region_faults(const RegionFaults& counts) { (void)counts; }
  virtual void call_faults(const CallFaults& faults) { (void)faults; }
  // Every call and fault up to this moment (CLOCK_MONOTONIC) has been delivered; UINT64_MAX at the end.
  virtual void settle(std::uint64_t until_ns) { (void)until_ns; }
  // Stack `alias` is `stack`: a big call made while its thread had released the GIL got a stack of
  // its own until the thread sent its Python frames, and is the same site as the stack with them
  // (sent before the call settles, unless the thread never took the GIL back).
  virtual void same_stack(std::uint32_t alias, std::uint32_t stack) { (void)alias, (void)stack; }
};

struct Result {
  bool started = false;
  int exit_code = 0;          // as a shell reports it: 128 + signal when killed
  int signal = 0;
  std::uint64_t wall_ns = 0;
  std::uint64_t started_ns = 0;  // CLOCK_MONOTONIC when the command went through the door (wall_ns from here)
  std::uint64_t user_ns = 0;  // the command and its waited-for children
  std::uint64_t system_ns = 0;
  std::uint64_t minor_faults = 0;  // the kernel's own count (rusage), to check the samples against
  std::uint64_t major_faults = 0;
  std::uint64_t faults_before_exec = 0;  // of those, taken by memcost's fork before it became the command
  std::uint64_t lost_records = 0;
  // Records that were not of their format, dropped: bytes in the preload pipe that are no record
  // (the command wrote into the descriptor it inherits), or counter samples of an unknown kind.
  std::uint64_t malformed_records = 0;
  std::uint64_t malformed_bytes = 0;
  std::uint64_t buffer_bytes = 0;  // per CPU, as granted
  std::uint32_t stack_bytes = 0;   // copied per sample, as used (less than asked without privilege)
  std::uint64_t pauses = 0;     // times the command was held (SIGSTOP) while the tracer caught up
  std::uint64_t paused_ns = 0;  // included in wall_ns
  std::uint64_t kernel_stops = 0;  // times the kernel stopped the command at half a buffer, and the tracer continued it
  std::uint64_t unwind_failures = 0;
  std::uint64_t stacks_unwound = 0;           // copied stacks unwound, by rules or by libdwfl (not found in its memo)
  std::uint64_t stacks_unwound_by_rules = 0;  // of those, unwound by their frames' cached rules, without libdwfl
  std::uint64_t unnamed_code_stacks = 0;  // stacks with code in no module and no perf map entry (JIT code unnamed)
  std::uint64_t python_blocks_refused = 0;  // Python blocks on copied stacks that did not decode (Unwinder)
  std::uint64_t refused_perf_maps = 0;    // processes whose /tmp/perf-PID.map was not theirs or root's: not read
  bool interrupted = false;     // SIGINT or SIGTERM reached this process while tracing
  std::string call_source;      // how mapping calls were seen
  std::string fault_source;     // how faults were seen
  bool counted_in_kernel = false;  // faults counted by the BPF counter; the perf samples are touching stacks only
  std::string kernel_counting;     // why faults were not counted in the kernel, when they were not
  std::uint64_t kernel_faults = 0;           // every fault the in-kernel counter saw
  std::uint64_t kernel_faults_uncounted = 0;  // of those, not counted: its region map was full
  std::uint64_t kernel_faults_in_calls = 0;   // taken inside system calls without an exception (populate, mlock, pinning)
  std::uint64_t touch_samples_per_second = 0;  // asked of perf per CPU (0: a stack with every fault)
  std::uint32_t fault_timing_one_in = 0;       // faults timed in the kernel: one in this many (0: none)
  std::uint64_t cpu_sample_period_ns = 0;  // as used; 0: fault time not sampled (cpu_sampling says why)
  std::string cpu_sampling;     // how fault time was sampled, or why it was not
};

// Whether this build can trace at all; the reason when not.
[[nodiscard]] Failure supported();
// Run and trace; a failure before the command started is in `failure`.
[[nodiscard]] Result run(const Options& options, Sink& sink, Failure& failure);

}  // namespace memcost::trace
