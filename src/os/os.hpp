// memcost OS layer: the only place that talks to the operating system.
//
// Contract (every platform):
// - The functions here make no decisions. They do the call, and report the raw
//   error (errno on Linux, GetLastError() on Windows) in a Status. Fallbacks,
//   retries, warnings and statistics belong to the portable code above.
// - Sizes and addresses must be multiples of the page size of the mapping
//   (base_page_size() for base pages and THP, the hugetlb page size for
//   hugetlb). Callers round; the OS layer does not.
// - Memory that comes back from map() or commit() reads as zero on every
//   platform: both kernels hand out zeroed pages. Nothing here writes it.
// - All functions are safe to call from several threads at once, as long as
//   the ranges they are given are disjoint (populate_write in particular).
// - Queries return what the OS says at the moment of the call. A value the OS
//   does not have is reported as absent (std::optional) rather than zero.
//
// How platforms differ:
// - Linux: reserve() maps PROT_NONE with MAP_NORESERVE; commit() turns on
//   read/write; decommit() is MADV_DONTNEED + PROT_NONE; release() is munmap.
//   The placement direction is a property of the process layout, not of the
//   call, so MapRequest::top_down is ignored; an address hint is honoured when
//   the range there is free (never MAP_FIXED: nothing existing is replaced).
// - Windows: reserve/commit/decommit/release are VirtualAlloc(MEM_RESERVE),
//   VirtualAlloc(MEM_COMMIT), VirtualFree(MEM_DECOMMIT) and
//   VirtualFree(MEM_RELEASE); top_down adds MEM_TOP_DOWN. There is no THP:
//   PageKind::thp maps base pages. Large pages (PageKind::huge_2mb) need
//   SeLockMemoryPrivilege, which enable_large_page_privilege() tries to turn
//   on; 1 GB pages are not offered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <functional>
#include <string>
#include <vector>

namespace memcost::os {

// A raw OS error: 0 means success. `call` names the failing system call.
struct Status {
  int error = 0;
  const char* call = "";
  [[nodiscard]] bool ok() const { return error == 0; }
  [[nodiscard]] std::string message() const;  // "mmap: Cannot allocate memory (errno 12)"
};

enum class PageKind {
  system,    // whatever the system gives anonymous memory: no advice, one call
  base,      // base pages; on Linux THP (and mTHP) disabled for the range
  thp,       // transparent huge pages requested for the range (MADV_HUGEPAGE)
  huge_2mb,  // hugetlb 2 MB pages (MAP_HUGETLB | MAP_HUGE_2MB), Windows large pages
  huge_1gb,  // hugetlb 1 GB pages (MAP_HUGETLB | MAP_HUGE_1GB)
};
[[nodiscard]] const char* page_kind_name(PageKind kind);  // "system", "base", "thp", "hugetlb-2M", "hugetlb-1G"
// The page size a mapping of this kind uses (base_page_size() for base and thp).
[[nodiscard]] std::size_t page_kind_bytes(PageKind kind);

struct MapRequest {
  std::size_t size_bytes = 0;
  PageKind kind = PageKind::base;
  void* address_hint = nullptr;  // a wish, not a demand: nothing mapped is ever replaced
  bool top_down = false;         // Windows MEM_TOP_DOWN; ignored on Linux (see above)
  // map(): start the mapping at a multiple of this (a power of two; 0 = any
  // page). Linux maps a larger range and unmaps the slack; Windows ignores it
  // (its allocations start at 64 KB multiples, and large pages are aligned).
  std::size_t alignment_bytes = 0;
  // Fault the range in for writing inside the call that maps it. Linux: MAP_POPULATE, so the pages
  // come before any page-kind advice does (thp's MADV_HUGEPAGE, base's MADV_NOHUGEPAGE): a caller
  // that needs the advice first maps without it and calls populate_write(). Windows:
  // populate_write() after VirtualAlloc. Where populating fails, map() fails with its error.
  bool populate = false;
};

struct Mapping {
  void* address = nullptr;
  std::size_t size_bytes = 0;
  Status status;
};

// Address space only: no access, no commit charge.
[[nodiscard]] Mapping reserve(const MapRequest& request);
[[nodiscard]] Status commit(void* address, std::size_t size_bytes);
[[nodiscard]] Status decommit(void* address, std::size_t size_bytes);
// Reserve and commit read/write memory of the requested page kind in one call.
[[nodiscard]] Mapping map(const MapRequest& request);
[[nodiscard]] Status release(void* address, std::size_t size_bytes);
// Apply the page kind's advice to memory mapped elsewhere (e.g. by malloc):
// base → no THP, thp → THP requested; hugetlb kinds cannot be applied after
// the fact (EINVAL). Windows: a no-op for base and thp.
[[nodiscard]] Status advise(void* address, std::size_t size_bytes, PageKind kind);
// Change a committed range between read/write and read-only (forces distinct
// mappings on Linux, where neighbours with different protection never merge).
[[nodiscard]] Status protect(void* address, std::size_t size_bytes, bool writable);
// Whether neighbouring mappings with the same protection become one (Linux: one VMA). Windows:
// never — every VirtualAlloc is a region of its own, so blocks are distinct without help.
[[nodiscard]] bool neighbouring_mappings_merge();

// What the calls behind MapRequest::populate and populate_write() are, for names in results:
// "MAP_POPULATE" and "MADV_POPULATE_WRITE" on Linux, "VirtualAlloc + VirtualLock" and "VirtualLock" on Windows.
[[nodiscard]] const char* populate_at_map_call();
[[nodiscard]] const char* populate_write_call();
// Fault the range in for writing without changing its contents.
// Linux: MADV_POPULATE_WRITE; when the kernel lacks it (EINVAL) the call reports
// that, and the caller may choose touch_pages(). Windows: VirtualLock then
// VirtualUnlock; beyond the working-set quota the working-set minimum is raised by
// the range for the lock and put back after.
[[nodiscard]] Status populate_write(void* address, std::size_t size_bytes);
// Write one byte per `stride_bytes` (read-modify-write of the existing value,
// so contents are unchanged). Always available.
void touch_pages(void* address, std::size_t size_bytes, std::size_t stride_bytes);

// A whole file as text (a /proc or /sys file, a perf map); absent when it cannot be opened.
[[nodiscard]] std::optional<std::string> read_text(const std::string& path);

// Windows: try to enable SeLockMemoryPrivilege. Linux: always ok.
[[nodiscard]] Status enable_large_page_privilege();
// Large pages taken from free memory when a mapping is made (Windows), rather than from a
// pool set aside beforehand (Linux hugetlb: see hugetlb_pools()).
struct LargePages {
  bool offered = false;         // the OS has them (Windows: GetLargePageMinimum() > 0); Linux: false
  std::size_t page_bytes = 0;   // GetLargePageMinimum()
  bool privilege_held = false;  // SeLockMemoryPrivilege is enabled in this process now
  // When they cannot be used: exactly what is missing, and how to grant it.
  std::string why_not;
};
// Tries to enable the privilege (once per process) and says what came of it.
[[nodiscard]] LargePages large_pages();

// Running as a Windows program under Wine (ntdll's wine_get_version): every figure then
// describes Wine on the host named here, not Windows.
struct Wine {
  std::string version;       // "8.0"
  std::string host_system;   // "Linux"
  std::string host_release;  // "6.18.44"
};
[[nodiscard]] std::optional<Wine> wine();
// Linux: whether this process runs with the legacy bottom-up mmap layout
// (personality ADDR_COMPAT_LAYOUT). Windows: always false.
[[nodiscard]] bool legacy_layout_active();
// Linux: set ADDR_COMPAT_LAYOUT for programs this process execs next.
[[nodiscard]] Status request_legacy_layout_for_exec();
// End this process (as by SIGTERM) when the process that started it dies, so a killed
// front end never leaves a probe running. Linux: PR_SET_PDEATHSIG, and an immediate exit
// when the parent is already gone. Windows: ok, nothing done (a job object would be the way).
[[nodiscard]] Status exit_with_parent();
// Everything written to stdout is flushed, and stdout then points at the null device: a reader
// of its pipe sees the end while this process finishes closing what it holds (perf's tracepoint
// events wait for an RCU grace period each). Windows: flushed only.
void release_stdout();
// The C library's allocator keeps `bytes` beyond what it needs at the top of its heap each time
// it grows the heap or gives memory back (glibc's M_TOP_PAD, default 128 KiB): memory freed and
// allocated again stays in the process instead of being returned and faulted in anew. Windows:
// nothing done.
void pad_heap(std::size_t bytes);
// The folder this process's executable is in ("" when it cannot be told).
[[nodiscard]] std::string executable_directory();
// Replace this process with a fresh run of its own executable and `argv`.
// Returns only on failure. Windows: not supported.
[[nodiscard]] Status exec_self(char** argv);

// ---- queries -------------------------------------------------------------

[[nodiscard]] std::size_t base_page_size();
// Whether a mapping can be asked to go to the top of the address space (Windows'
// MEM_TOP_DOWN). Linux: no such flag; its default layout already allocates top-down.
[[nodiscard]] bool top_down_on_request();
// The hypervisor this machine runs under, from CPUID ("KVM", "Microsoft Hyper-V", …);
// "" on bare metal; absent where it cannot be told (not x86).
[[nodiscard]] std::optional<std::string> hypervisor_vendor();
// Whether this process can find `symbol` where it would find malloc (Linux: dlsym(RTLD_DEFAULT);
// Windows: never, its heap is not replaced this way).
[[nodiscard]] bool symbol_present(const char* symbol);
// A shared library loaded at run time, for what nothing needs at build time (the CUDA driver):
// Linux dlopen(RTLD_NOW | RTLD_LOCAL), Windows LoadLibraryA. Never unloaded. `handle` null and
// `error` the loader's own words when it cannot be loaded.
struct SharedLibrary {
  void* handle = nullptr;
  std::string error;
};
[[nodiscard]] SharedLibrary load_library(const char* path);
// The address of `name` in a loaded library (dlsym, GetProcAddress); null when it has none.
[[nodiscard]] void* find_symbol(void* library, const char* name);
// Where this platform's CUDA driver lives: "libcuda.so.1" (Linux), "nvcuda.dll" (Windows).
[[nodiscard]] const char* cuda_driver_library();
// The platform's own malloc: "glibc" (Linux), "Windows heap".
[[nodiscard]] const char* native_malloc_name();
[[nodiscard]] unsigned logical_cpu_count();

struct MultiSizeThp {
  std::size_t size_bytes = 0;
  std::string enabled;  // "always", "inherit", "madvise", "never"
};
struct ThpSettings {
  bool present = false;
  std::string enabled;  // "always", "madvise", "never"
  std::string defrag;   // "always", "defer", "defer+madvise", "madvise", "never"
  std::size_t pmd_size_bytes = 0;
  std::vector<MultiSizeThp> sizes;
};
[[nodiscard]] ThpSettings thp_settings();

struct HugetlbPool {
  std::size_t page_size_bytes = 0;
  std::uint64_t total_pages = 0;
  std::uint64_t free_pages = 0;
  std::uint64_t reserved_pages = 0;
  std::uint64_t surplus_pages = 0;
};
[[nodiscard]] std::vector<HugetlbPool> hugetlb_pools();
// Set the persistent pool size (Linux: /sys/kernel/mm/hugepages/.../nr_hugepages; needs root).
[[nodiscard]] Status set_hugetlb_pool(std::size_t page_size_bytes, std::uint64_t pages);

struct MemoryInfo {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;
  std::uint64_t swap_total_bytes = 0;
  std::optional<std::uint64_t> cgroup_limit_bytes;  // absent when no limit applies
  std::optional<std::uint64_t> cgroup_usage_bytes;
  std::string cgroup_version;  // "v1", "v2" or "" (none found)
};
[[nodiscard]] MemoryInfo memory_info();

[[nodiscard]] std::optional<std::uint64_t> max_map_count();
[[nodiscard]] std::optional<int> overcommit_mode();
[[nodiscard]] std::optional<std::uint64_t> mapping_count();  // mappings in this process

struct SystemInfo {
  std::string os_name;     // "Linux", "Windows"
  std::string os_release;  // kernel release / build number
  std::string os_version;
  std::string host_name;
  std::string cpu_model;
  unsigned numa_nodes = 1;
};
[[nodiscard]] SystemInfo system_info();
// Whether a virtio balloon with free page reporting is active: the guest then
// hands free memory back to the host, which faults it in again on next use.
// Absent when it cannot be told (no sysfs, Windows).
[[nodiscard]] std::optional<bool> free_page_reporting();
// Bytes of free memory the guest has reported to its host since boot (the host took their backing
// and faults it in again on their next use). Only some kernels count it (a `reported_kib`
// parameter of the page_reporting module); absent elsewhere.
[[nodiscard]] std::optional<std::uint64_t> host_reported_bytes();

// ---- accounting ----------------------------------------------------------

struct ProcessTimes {
  std::uint64_t user_ns = 0;
  std::uint64_t system_ns = 0;
  std::uint64_t minor_faults = 0;
  std::uint64_t major_faults = 0;  // Windows: all faults are counted as minor
  std::uint64_t rss_bytes = 0;
  // False where the OS gives no fault count (Wine reports 0 for every process; a process
  // on Windows or Linux has always faulted by the time it can ask).
  bool faults_counted = true;
};
[[nodiscard]] ProcessTimes process_times();

// CPU time of the whole machine, all CPUs added together, by kind.
struct MachineTimes {
  std::uint64_t user_ns = 0;  // includes nice
  std::uint64_t system_ns = 0;
  std::uint64_t irq_ns = 0;
  std::uint64_t softirq_ns = 0;
  std::uint64_t steal_ns = 0;
  std::uint64_t idle_ns = 0;  // includes iowait
  bool steal_available = false;  // Windows has no steal counter
};
[[nodiscard]] std::optional<MachineTimes> machine_times();

// CPU time of each process on the machine whose name `wanted` accepts (Linux: the kernel's comm;
// schedstat nanoseconds where the kernel has them, else stat ticks). Absent where the OS does not
// list processes this way (Windows). Which names matter is the caller's business.
struct NamedCpu {
  std::string name;
  std::uint64_t cpu_ns = 0;
};
[[nodiscard]] std::optional<std::vector<NamedCpu>> processes_cpu(const std::function<bool(std::string_view)>& wanted);

// CPU time of every task (thread) on the machine outside this process, as the
// scheduler counts it, in nanoseconds, by thread id. Linux:
// /proc/<pid>/task/<tid>/schedstat (needs CONFIG_SCHED_INFO); far finer than
// /proc/stat's 10 ms ticks. Windows: absent.
struct TaskTime {
  int tid = 0;
  std::uint64_t run_ns = 0;
};
[[nodiscard]] std::optional<std::vector<TaskTime>> other_tasks_cpu();  // sorted by tid
// How other_tasks_cpu() and machine_times() measure, for the results: "schedstat" and
// "proc_stat" on Linux; "System process (GetProcessTimes)" and "GetSystemTimes" on Windows.
[[nodiscard]] const char* other_tasks_method();
[[nodiscard]] const char* machine_times_method();
// The kernel's memory counters by name, cumulative: Linux /proc/vmstat ("pgfault",
// "thp_fault_alloc", …); Windows the documented performance counters through PDH,
// "page_faults" (\Memory\Page Faults/sec) and "demand_zero_faults" (\Memory\Demand Zero
// Faults/sec), as raw counts. Absent where they cannot be read (memory_counters_source says why).
[[nodiscard]] std::optional<std::map<std::string, std::uint64_t>> vmstat();
// Where vmstat() reads, for messages: "/proc/vmstat", "PDH \Memory counters".
[[nodiscard]] const char* memory_counters_source();
// CPU time of the OS's own kernel process, where it has one: Windows' System process (page
// zeroing runs there). Linux: absent — its kernel threads are measure::kernel_thread_cpu().
[[nodiscard]] std::optional<std::uint64_t> kernel_process_cpu_ns();

// One process's fault and CPU counters, cumulative since it started.
struct ProcessSample {
  int pid = 0;
  std::string name;
  std::uint64_t minor_faults = 0;
  std::uint64_t major_faults = 0;
  std::uint64_t user_ns = 0;    // clock-tick resolution (10 ms)
  std::uint64_t system_ns = 0;  // clock-tick resolution (10 ms)
  std::uint64_t rss_bytes = 0;
};
struct ProcessScan {
  std::vector<ProcessSample> processes;
  std::size_t unreadable = 0;  // asked for or listed, but gone or not ours to read
};
// Every process (`pids` empty) or those named. Absent where processes cannot be listed (Windows, for now).
[[nodiscard]] std::optional<ProcessScan> scan_processes(const std::vector<int>& pids);

// One process's status line as the kernel keeps it (Linux: /proc/PID/stat, the one reader of that
// file): its name, state letter ('R', 'S', 'Z' …), parent, faults and CPU ticks (sysconf(_SC_CLK_TCK)
// a second), resident pages. Absent when the process is gone, not readable, or on Windows.
struct ProcessStatus {
  std::string name;
  char state = '?';
  int parent = 0;
  std::uint64_t minor_faults = 0, major_faults = 0;
  std::uint64_t user_ticks = 0, system_ticks = 0;
  std::uint64_t resident_pages = 0;
};
[[nodiscard]] std::optional<ProcessStatus> process_status(int pid);

// The name the kernel gives a task ("kworker/1:2-mm_percpu_wq"); absent when it is gone.
[[nodiscard]] std::optional<std::string> task_name(int tid);

// One mapping of a process's address space (Linux: a line of /proc/PID/maps, the one reader of
// that file).
struct MapEntry {
  std::uint64_t start = 0, end = 0;
  bool readable = false, writable = false, executable = false, shared = false;
  std::uint64_t offset = 0;  // into the file
  std::string path;          // the file, a name such as "[heap]", or "" (anonymous memory)
};
// The mappings of process `pid` (0: this one); empty when it is gone, not readable, or on Windows.
[[nodiscard]] std::vector<MapEntry> process_maps(int pid);
// The threads of process `pid` (Linux: /proc/PID/task); empty when it is gone or on Windows.
[[nodiscard]] std::vector<int> thread_ids(int pid);

// TLB-shootdown interrupts each CPU has received since boot (Linux: the "TLB"
// line of /proc/interrupts, readable unprivileged). Absent where the OS has no such count.
[[nodiscard]] std::optional<std::vector<std::uint64_t>> tlb_shootdowns_per_cpu();

// Runs the calling thread on one CPU only, so that a test can place work on a known CPU.
[[nodiscard]] Status pin_current_thread(unsigned cpu);

// What backs [address, address + size): read from the OS, not assumed.
struct RangeBacking {
  std::uint64_t resident_bytes = 0;
  std::uint64_t anon_huge_bytes = 0;  // on PMD-sized transparent huge pages
  std::uint64_t hugetlb_bytes = 0;    // on hugetlb / large pages
  std::size_t kernel_page_bytes = 0;  // page size of the mapping(s)
};
[[nodiscard]] std::optional<RangeBacking> range_backing(const void* address, std::size_t size_bytes);

// The size of the largest (last-level) CPU cache, in bytes; absent when the OS does not say.
// Linux: /sys/devices/system/cpu/cpu0/cache; Windows: GetLogicalProcessorInformation.
[[nodiscard]] std::optional<std::size_t> last_level_cache_bytes();

// ---- work in a child process ---------------------------------------------

// Work run in a child process of its own (Linux: fork), started at once; its answer is the string
// `work` returns. For measurements that must not share an address space with others running at
// the same time. The child runs only the calling thread: `work` must not wait on another thread of
// this process. Windows: not started, `why_not` says so.
struct Child {
  int pid = -1;
  int answer_fd = -1;
  std::string why_not;  // non-empty: no child was started
};
[[nodiscard]] Child start_child(const std::function<std::string()>& work);
[[nodiscard]] bool can_start_children();  // Linux: true; Windows: false
// Waits for the child to end: its whole answer, or nullopt with `error` saying how it ended (it
// threw, was killed by a signal, or exited without answering).
[[nodiscard]] std::optional<std::string> finish_child(Child& child, std::string& error);

// ---- NUMA memory policy ----------------------------------------------------

// Where the kernel places the pages of a range when they are first touched.
enum class MemoryPolicy {
  local,       // on the node of the CPU that touches the page first (Linux MPOL_LOCAL)
  interleave,  // round-robin over every node, page by page (MPOL_INTERLEAVE)
  bind,        // on one node only (MPOL_BIND)
};
// Set the policy of [address, address + size_bytes) before its pages are touched
// (Linux: mbind). `node` is used by bind only. Windows: not supported (it places
// memory at allocation, by VirtualAllocExNuma).
[[nodiscard]] Status set_memory_policy(void* address, std::size_t size_bytes, MemoryPolicy policy, unsigned node);
// The policy the kernel holds for the range that contains `address`, as it
// reads it back: "default", "local", "interleave:0-3", "bind:1", "preferred:0"
// (Linux: get_mempolicy with MPOL_F_ADDR). Absent where there is no such call.
[[nodiscard]] std::optional<std::string> memory_policy_of(const void* address);
// Resident bytes of the mapping(s) holding [address, address + size_bytes), by
// NUMA node (Linux: /proc/self/numa_maps, whole VMAs). Absent where unreadable.
[[nodiscard]] std::optional<std::map<unsigned, std::uint64_t>> resident_bytes_by_node(const void* address,
                                                                                      std::size_t size_bytes);
// The CPUs of one NUMA node (Linux: /sys/devices/system/node/node<N>/cpulist).
[[nodiscard]] std::vector<unsigned> cpus_of_node(unsigned node);
// Runs the calling thread on these CPUs only.
[[nodiscard]] Status pin_current_thread_to(const std::vector<unsigned>& cpus);

// ---- perf events (Linux) ---------------------------------------------------

enum class PerfEvent { page_faults, task_clock, tlb_flush_tracepoint, page_fault_user_tracepoint };
[[nodiscard]] const char* perf_event_name(PerfEvent event);
struct PerfHandle {
  int fd = -1;
  Status status;
};
// Counts for this process, all its threads (existing ones and those it creates
// later), on any CPU. The counter starts disabled.
[[nodiscard]] PerfHandle perf_open(PerfEvent event);
[[nodiscard]] Status perf_enable(const PerfHandle& handle, bool enable);
[[nodiscard]] std::optional<std::uint64_t> perf_read(const PerfHandle& handle);
void perf_close(PerfHandle& handle);
// Whether perf_open(event) would succeed, without keeping anything open: a software event is
// opened and closed at once; a tracepoint's is not opened at all (closing a process's last event
// on a tracepoint waits for an RCU grace period, 35 ms on a KVM guest, on every probe run): its id
// in tracefs and the privilege the kernel asks for tracepoints (root, or perf_event_paranoid <= -1).
[[nodiscard]] Status perf_openable(PerfEvent event);
[[nodiscard]] std::optional<int> perf_event_paranoid();
// What the kernel lets each user lock per CPU for perf's ring buffers beyond RLIMIT_MEMLOCK, KiB.
[[nodiscard]] std::optional<std::uint64_t> perf_event_mlock_kb();

// Pages the kernel zeroed as it handed them out, counted machine-wide by the
// kernel itself (Linux: the kmem:mm_page_alloc tracepoint with __GFP_ZERO in
// its flags, one counter per CPU; needs root or CAP_PERFMON). Anonymous
// faults on base pages and page tables are zeroed this way; THP faults are
// not (the kernel clears those pages itself: count them from vmstat's
// thp_fault_alloc), nor are hugetlb pages.
struct ZeroedAllocations {
  std::uint64_t base_pages = 0;     // order-0 allocations: one base page each
  std::uint64_t larger_blocks = 0;  // higher-order allocations, of 2+ pages each
};
class ZeroingCounter {
 public:
  ZeroingCounter();
  ~ZeroingCounter();
  ZeroingCounter(const ZeroingCounter&) = delete;
  ZeroingCounter& operator=(const ZeroingCounter&) = delete;
  [[nodiscard]] const Status& status() const { return status_; }  // why it cannot count, when it cannot
  [[nodiscard]] std::optional<ZeroedAllocations> read() const;    // since construction
  [[nodiscard]] static const char* method();
  // What it takes to count here, for the message when it cannot.
  [[nodiscard]] static const char* requirement();

 private:
  std::vector<int> base_fds_;
  std::vector<int> larger_fds_;
  Status status_;
};

}  // namespace memcost::os
