// Windows implementation of the OS layer (contract in os.hpp).
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
// windows.h first: psapi.h depends on its types.
#include <pdh.h>
#include <pdhmsg.h>
#include <psapi.h>
#include <tlhelp32.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <mutex>
#include <vector>

#include "os/os.hpp"

namespace memcost::os {
namespace {

Status failed(const char* call) { return Status{static_cast<int>(GetLastError()), call}; }
Status unsupported(const char* call) { return Status{ERROR_NOT_SUPPORTED, call}; }

std::uint64_t filetime_ns(const FILETIME& time) {
  ULARGE_INTEGER value;
  value.LowPart = time.dwLowDateTime;
  value.HighPart = time.dwHighDateTime;
  return value.QuadPart * 100ULL;  // FILETIME counts 100 ns intervals
}

DWORD allocation_type(const MapRequest& request, DWORD base) {
  DWORD type = base;
  if (request.top_down) type |= MEM_TOP_DOWN;
  if (request.kind == PageKind::huge_2mb) type |= MEM_LARGE_PAGES;
  return type;
}

}  // namespace

std::string Status::message() const {
  if (ok()) return "ok";
  char text[512] = {};
  DWORD length = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr,
                                static_cast<DWORD>(error), 0, text, sizeof(text), nullptr);
  while (length > 0 && (text[length - 1] == '\n' || text[length - 1] == '\r' || text[length - 1] == '.')) text[--length] = '\0';
  return std::string(call) + ": " + text + " (error " + std::to_string(error) + ")";
}

Mapping reserve(const MapRequest& request) {
  void* address = VirtualAlloc(request.address_hint, request.size_bytes, allocation_type(request, MEM_RESERVE) & ~static_cast<DWORD>(MEM_LARGE_PAGES), PAGE_NOACCESS);
  if (!address && request.address_hint) {
    // VirtualAlloc fails when the hinted range is taken; a hint is only a wish.
    address = VirtualAlloc(nullptr, request.size_bytes, allocation_type(request, MEM_RESERVE) & ~static_cast<DWORD>(MEM_LARGE_PAGES), PAGE_NOACCESS);
  }
  if (!address) return {nullptr, 0, failed("VirtualAlloc(MEM_RESERVE)")};
  return {address, request.size_bytes, {}};
}

Status commit(void* address, std::size_t size_bytes) {
  if (!VirtualAlloc(address, size_bytes, MEM_COMMIT, PAGE_READWRITE)) return failed("VirtualAlloc(MEM_COMMIT)");
  return {};
}

Status decommit(void* address, std::size_t size_bytes) {
  if (!VirtualFree(address, size_bytes, MEM_DECOMMIT)) return failed("VirtualFree(MEM_DECOMMIT)");
  return {};
}

Mapping map(const MapRequest& request) {
  if (request.kind == PageKind::huge_1gb) return {nullptr, 0, unsupported("VirtualAlloc(1 GB pages)")};
  DWORD type = allocation_type(request, MEM_RESERVE | MEM_COMMIT);
  void* address = VirtualAlloc(request.address_hint, request.size_bytes, type, PAGE_READWRITE);
  if (!address && request.address_hint) address = VirtualAlloc(nullptr, request.size_bytes, type, PAGE_READWRITE);
  if (!address && request.kind == PageKind::huge_2mb) {
    const DWORD error = GetLastError();
    if (error == ERROR_PRIVILEGE_NOT_HELD) {
      return {nullptr, 0, Status{static_cast<int>(error), "VirtualAlloc(MEM_LARGE_PAGES) without SeLockMemoryPrivilege"}};
    }
    if (error == ERROR_NO_SYSTEM_RESOURCES) {
      return {nullptr, 0, Status{static_cast<int>(error),
                                 "VirtualAlloc(MEM_LARGE_PAGES): not enough contiguous physical memory for large pages "
                                 "(memory is fragmented; they are easiest to get soon after boot)"}};
    }
    return {nullptr, 0, Status{static_cast<int>(error), "VirtualAlloc(MEM_LARGE_PAGES)"}};
  }
  if (!address) return {nullptr, 0, failed("VirtualAlloc(MEM_RESERVE|MEM_COMMIT)")};
  if (request.populate) {
    Status populate_failed = populate_write(address, request.size_bytes);
    if (!populate_failed.ok()) {
      VirtualFree(address, 0, MEM_RELEASE);
      return {nullptr, 0, populate_failed};
    }
  }
  return {address, request.size_bytes, {}};
}

Status advise(void*, std::size_t, PageKind kind) {
  if (kind == PageKind::huge_2mb || kind == PageKind::huge_1gb) return Status{ERROR_INVALID_PARAMETER, "advise(large pages)"};
  return {};
}

Status release(void* address, std::size_t) {
  if (!VirtualFree(address, 0, MEM_RELEASE)) return failed("VirtualFree(MEM_RELEASE)");
  return {};
}

Status protect(void* address, std::size_t size_bytes, bool writable) {
  DWORD previous = 0;
  if (!VirtualProtect(address, size_bytes, writable ? PAGE_READWRITE : PAGE_READONLY, &previous)) return failed("VirtualProtect");
  return {};
}

Status populate_write(void* address, std::size_t size_bytes) {
  // VirtualLock brings every page into the working set (demand-zero pages are
  // zeroed on the way); unlocking keeps them resident but pageable again.
  if (VirtualLock(address, size_bytes)) {
    VirtualUnlock(address, size_bytes);
    return {};
  }
  if (GetLastError() != ERROR_WORKING_SET_QUOTA) return failed("VirtualLock");
  // Locked pages count against the working-set minimum: raise it by the range, lock, put it back.
  SIZE_T minimum = 0, maximum = 0;
  if (!GetProcessWorkingSetSize(GetCurrentProcess(), &minimum, &maximum)) return failed("GetProcessWorkingSetSize");
  if (!SetProcessWorkingSetSize(GetCurrentProcess(), minimum + size_bytes, std::max(maximum, minimum + size_bytes) + size_bytes)) {
    return failed("SetProcessWorkingSetSize (raising the working set for VirtualLock)");
  }
  Status status;
  if (VirtualLock(address, size_bytes)) VirtualUnlock(address, size_bytes);
  else status = failed("VirtualLock (after raising the working set)");
  (void)SetProcessWorkingSetSize(GetCurrentProcess(), minimum, maximum);
  return status;
}

Status enable_large_page_privilege() {
  HANDLE token = nullptr;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY, &token)) return failed("OpenProcessToken");
  TOKEN_PRIVILEGES privileges{};
  privileges.PrivilegeCount = 1;
  privileges.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
  Status status;
  if (!LookupPrivilegeValueA(nullptr, "SeLockMemoryPrivilege", &privileges.Privileges[0].Luid)) {
    status = failed("LookupPrivilegeValue(SeLockMemoryPrivilege)");
  } else if (!AdjustTokenPrivileges(token, FALSE, &privileges, 0, nullptr, nullptr)) {
    status = failed("AdjustTokenPrivileges");
  } else if (GetLastError() == ERROR_NOT_ALL_ASSIGNED) {
    // The call "succeeds" but the account does not hold the privilege.
    status = Status{ERROR_NOT_ALL_ASSIGNED, "AdjustTokenPrivileges(SeLockMemoryPrivilege)"};
  }
  CloseHandle(token);
  return status;
}

namespace {

// Whether this process's token carries the privilege at all (enabled or not).
bool token_has_privilege(HANDLE token, const LUID& privilege) {
  DWORD bytes = 0;
  GetTokenInformation(token, TokenPrivileges, nullptr, 0, &bytes);
  std::vector<unsigned char> buffer(bytes);
  if (bytes == 0 || !GetTokenInformation(token, TokenPrivileges, buffer.data(), bytes, &bytes)) return false;
  const auto* list = reinterpret_cast<const TOKEN_PRIVILEGES*>(buffer.data());
  for (DWORD i = 0; i < list->PrivilegeCount; ++i) {
    const LUID& luid = list->Privileges[i].Luid;
    if (luid.LowPart == privilege.LowPart && luid.HighPart == privilege.HighPart) return true;
  }
  return false;
}

bool elevated(HANDLE token) {
  TOKEN_ELEVATION elevation{};
  DWORD bytes = 0;
  return GetTokenInformation(token, TokenElevation, &elevation, sizeof(elevation), &bytes) && elevation.TokenIsElevated;
}

constexpr const char* kGrantSteps =
    "grant it: run secpol.msc, open Local Policies > User Rights Assignment > \"Lock pages in memory\", add your "
    "account, then sign out and in again";

LargePages probe_large_pages() {
  LargePages pages;
  pages.page_bytes = GetLargePageMinimum();
  pages.offered = pages.page_bytes > 0;
  if (!pages.offered) {
    pages.why_not = "this processor or Windows offers no large pages (GetLargePageMinimum is 0)";
    return pages;
  }
  Status status = enable_large_page_privilege();
  if (status.ok()) {
    pages.privilege_held = true;
    return pages;
  }
  HANDLE token = nullptr;
  LUID privilege{};
  if (OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &token) &&
      LookupPrivilegeValueA(nullptr, "SeLockMemoryPrivilege", &privilege)) {
    const bool in_token = token_has_privilege(token, privilege);
    const bool is_elevated = elevated(token);
    if (!in_token && !is_elevated) {
      pages.why_not = std::string("SeLockMemoryPrivilege is not in this process's token: if your account holds \"Lock "
                                  "pages in memory\", run from an elevated prompt (an administrator gets it only when "
                                  "elevated); otherwise ") + kGrantSteps;
    } else if (!in_token) {
      pages.why_not = std::string("your account does not hold SeLockMemoryPrivilege; ") + kGrantSteps;
    } else {
      pages.why_not = "SeLockMemoryPrivilege is in the token but could not be enabled: " + status.message();
    }
  } else {
    pages.why_not = "the process token could not be read: " + failed("OpenProcessToken").message();
  }
  if (token) CloseHandle(token);
  return pages;
}

}  // namespace

LargePages large_pages() {
  static std::once_flag once;
  static LargePages pages;
  std::call_once(once, [] { pages = probe_large_pages(); });
  return pages;
}

std::optional<Wine> wine() {
  HMODULE ntdll = GetModuleHandleA("ntdll.dll");
  if (!ntdll) return std::nullopt;
  using VersionFunction = const char*(CDECL*)();
  using HostFunction = void(CDECL*)(const char**, const char**);
  auto version = reinterpret_cast<VersionFunction>(reinterpret_cast<void*>(GetProcAddress(ntdll, "wine_get_version")));
  if (!version) return std::nullopt;
  Wine result;
  result.version = version();
  if (auto host = reinterpret_cast<HostFunction>(reinterpret_cast<void*>(GetProcAddress(ntdll, "wine_get_host_version")))) {
    const char* system = nullptr;
    const char* release = nullptr;
    host(&system, &release);
    result.host_system = system ? system : "";
    result.host_release = release ? release : "";
  }
  return result;
}

bool neighbouring_mappings_merge() { return false; }
const char* populate_at_map_call() { return "VirtualAlloc + VirtualLock"; }
const char* populate_write_call() { return "VirtualLock"; }
bool legacy_layout_active() { return false; }
Status request_legacy_layout_for_exec() { return unsupported("personality(ADDR_COMPAT_LAYOUT)"); }
Status exit_with_parent() { return {}; }

void release_stdout() { std::fflush(stdout); }

void pad_heap(std::size_t) {}

bool can_start_children() { return false; }

Child start_child(const std::function<std::string()>&) {
  Child child;
  child.why_not = "no child processes of a running process here (Windows has no fork)";
  return child;
}

std::optional<std::string> finish_child(Child& child, std::string& error) {
  error = child.why_not;
  return std::nullopt;
}

std::string executable_directory() {
  char path[MAX_PATH];
  DWORD length = GetModuleFileNameA(nullptr, path, MAX_PATH);
  if (length == 0 || length >= MAX_PATH) return {};
  std::string file(path, length);
  return file.substr(0, file.find_last_of("\\/"));
}

Status exec_self(char**) { return unsupported("exec_self"); }

std::size_t base_page_size() {
  SYSTEM_INFO info;
  GetSystemInfo(&info);
  return info.dwPageSize;
}

unsigned logical_cpu_count() {
  DWORD count = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
  return count > 0 ? static_cast<unsigned>(count) : 1U;
}

ThpSettings thp_settings() { return {}; }

std::vector<HugetlbPool> hugetlb_pools() {
  // Windows has no pool: large pages are taken from free memory at allocation
  // time, so there are no counts to report.
  return {};
}

Status set_hugetlb_pool(std::size_t, std::uint64_t) { return unsupported("hugetlb pool"); }

MemoryInfo memory_info() {
  MemoryInfo info;
  MEMORYSTATUSEX status{};
  status.dwLength = sizeof(status);
  if (GlobalMemoryStatusEx(&status)) {
    info.total_bytes = status.ullTotalPhys;
    info.available_bytes = status.ullAvailPhys;
    info.swap_total_bytes = status.ullTotalPageFile > status.ullTotalPhys ? status.ullTotalPageFile - status.ullTotalPhys : 0;
  }
  return info;
}

std::optional<std::uint64_t> max_map_count() { return std::nullopt; }
std::optional<int> overcommit_mode() { return std::nullopt; }

std::optional<std::uint64_t> mapping_count() {
  std::uint64_t regions = 0;
  MEMORY_BASIC_INFORMATION region{};
  const char* address = nullptr;
  while (VirtualQuery(address, &region, sizeof(region)) == sizeof(region)) {
    if (region.State != MEM_FREE) ++regions;
    const char* next = static_cast<const char*>(region.BaseAddress) + region.RegionSize;
    if (next <= address) break;
    address = next;
  }
  return regions;
}

SystemInfo system_info() {
  SystemInfo info;
  info.os_name = "Windows";
  using RtlGetVersionFunction = LONG(WINAPI*)(OSVERSIONINFOW*);
  if (HMODULE ntdll = GetModuleHandleA("ntdll.dll")) {
    auto get_version = reinterpret_cast<RtlGetVersionFunction>(reinterpret_cast<void*>(GetProcAddress(ntdll, "RtlGetVersion")));
    OSVERSIONINFOW version{};
    version.dwOSVersionInfoSize = sizeof(version);
    if (get_version && get_version(&version) == 0) {
      info.os_release = std::to_string(version.dwMajorVersion) + "." + std::to_string(version.dwMinorVersion) + "." +
                        std::to_string(version.dwBuildNumber);
    }
  }
  char name[MAX_COMPUTERNAME_LENGTH + 1] = {};
  DWORD name_length = sizeof(name);
  if (GetComputerNameA(name, &name_length)) info.host_name = name;
  char model[256] = {};
  DWORD model_length = sizeof(model);
  if (RegGetValueA(HKEY_LOCAL_MACHINE, "HARDWARE\\DESCRIPTION\\System\\CentralProcessor\\0", "ProcessorNameString",
                   RRF_RT_REG_SZ, nullptr, model, &model_length) == ERROR_SUCCESS) {
    info.cpu_model = model;
  }
  ULONG highest_node = 0;
  info.numa_nodes = GetNumaHighestNodeNumber(&highest_node) ? static_cast<unsigned>(highest_node) + 1 : 1;
  return info;
}

ProcessTimes process_times() {
  ProcessTimes times;
  FILETIME created, exited, kernel, user;
  if (GetProcessTimes(GetCurrentProcess(), &created, &exited, &kernel, &user)) {
    times.user_ns = filetime_ns(user);
    times.system_ns = filetime_ns(kernel);
  }
  PROCESS_MEMORY_COUNTERS counters{};
  if (GetProcessMemoryInfo(GetCurrentProcess(), &counters, sizeof(counters))) {
    times.minor_faults = counters.PageFaultCount;
    times.faults_counted = counters.PageFaultCount > 0;
    times.rss_bytes = counters.WorkingSetSize;
  }
  return times;
}

std::optional<MachineTimes> machine_times() {
  FILETIME idle, kernel, user;
  if (!GetSystemTimes(&idle, &kernel, &user)) return std::nullopt;
  MachineTimes times;
  times.idle_ns = filetime_ns(idle);
  times.system_ns = filetime_ns(kernel) - times.idle_ns;  // kernel time includes idle time
  times.user_ns = filetime_ns(user);
  return times;
}

std::optional<std::vector<NamedCpu>> processes_cpu(const std::function<bool(std::string_view)>&) { return std::nullopt; }
std::optional<bool> free_page_reporting() { return std::nullopt; }
std::optional<std::uint64_t> host_reported_bytes() { return std::nullopt; }
bool top_down_on_request() { return true; }
namespace {
// One PDH query for the memory counters, opened once; raw values of these "/sec" counters are
// cumulative counts, which is what the monitor wants (it makes the rates itself).
struct MemoryCounters {
  PDH_HQUERY query = nullptr;
  std::vector<std::pair<std::string, PDH_HCOUNTER>> counters;
  bool ready = false;
  MemoryCounters() {
    if (PdhOpenQueryA(nullptr, 0, &query) != ERROR_SUCCESS) return;
    for (const auto& [name, path] : {std::pair<const char*, const char*>{"page_faults", "\\Memory\\Page Faults/sec"},
                                     {"demand_zero_faults", "\\Memory\\Demand Zero Faults/sec"}}) {
      PDH_HCOUNTER counter = nullptr;
      if (PdhAddEnglishCounterA(query, path, 0, &counter) != ERROR_SUCCESS) return;
      counters.emplace_back(name, counter);
    }
    ready = true;
  }
  ~MemoryCounters() {
    if (query) PdhCloseQuery(query);
  }
};
}  // namespace

std::optional<std::map<std::string, std::uint64_t>> vmstat() {
  static MemoryCounters memory;
  if (!memory.ready || PdhCollectQueryData(memory.query) != ERROR_SUCCESS) return std::nullopt;
  std::map<std::string, std::uint64_t> values;
  for (const auto& [name, counter] : memory.counters) {
    PDH_RAW_COUNTER raw{};
    if (PdhGetRawCounterValue(counter, nullptr, &raw) != ERROR_SUCCESS || raw.CStatus != PDH_CSTATUS_VALID_DATA) {
      return std::nullopt;
    }
    values[name] = static_cast<std::uint64_t>(raw.FirstValue);
  }
  return values;
}
const char* memory_counters_source() { return "PDH \\Memory counters (Page Faults/sec, Demand Zero Faults/sec)"; }

std::optional<std::uint64_t> kernel_process_cpu_ns() {
  auto system = other_tasks_cpu();
  if (!system || system->empty()) return std::nullopt;
  return system->front().run_ns;
}
std::optional<ProcessScan> scan_processes(const std::vector<int>&) { return std::nullopt; }

std::optional<ProcessStatus> process_status(int) { return std::nullopt; }
std::vector<MapEntry> process_maps(int) { return {}; }
std::vector<int> thread_ids(int) { return {}; }
namespace {
// The first process in the documented process snapshot that `wanted` accepts.
std::optional<PROCESSENTRY32> find_process(const std::function<bool(const PROCESSENTRY32&)>& wanted) {
  HANDLE snapshot = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
  if (snapshot == INVALID_HANDLE_VALUE) return std::nullopt;
  PROCESSENTRY32 entry{};
  entry.dwSize = sizeof(entry);
  std::optional<PROCESSENTRY32> found;
  for (BOOL more = Process32First(snapshot, &entry); more; more = Process32Next(snapshot, &entry)) {
    if (wanted(entry)) {
      found = entry;
      break;
    }
  }
  CloseHandle(snapshot);
  return found;
}
}  // namespace

std::optional<std::string> task_name(int pid) {
  auto process = find_process([pid](const PROCESSENTRY32& entry) { return static_cast<int>(entry.th32ProcessID) == pid; });
  if (!process) return std::nullopt;
  return std::string(process->szExeFile);
}
// Windows counts no TLB-shootdown interrupts where a program can read them.
std::optional<std::vector<std::uint64_t>> tlb_shootdowns_per_cpu() { return std::nullopt; }

Status pin_current_thread(unsigned cpu) {
  if (cpu >= 64 || SetThreadAffinityMask(GetCurrentThread(), DWORD_PTR{1} << cpu) == 0) return failed("SetThreadAffinityMask");
  return {};
}
namespace {
// The System process (the kernel's threads: page zeroing among them), found by name and
// parent (0) in the documented process snapshot, never by a fixed id.
std::optional<DWORD> system_process_id() {
  auto process = find_process([](const PROCESSENTRY32& entry) {
    return entry.th32ParentProcessID == 0 && std::string(entry.szExeFile) == "System";
  });
  if (!process) return std::nullopt;
  return process->th32ProcessID;
}
}  // namespace

std::optional<std::vector<TaskTime>> other_tasks_cpu() {
  static const std::optional<DWORD> system = system_process_id();
  if (!system) return std::nullopt;
  HANDLE process = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, *system);
  if (!process) return std::nullopt;
  FILETIME created, exited, kernel, user;
  std::optional<std::vector<TaskTime>> tasks;
  if (GetProcessTimes(process, &created, &exited, &kernel, &user)) {
    tasks = std::vector<TaskTime>{{static_cast<int>(*system), filetime_ns(kernel) + filetime_ns(user)}};
  }
  CloseHandle(process);
  return tasks;
}
const char* other_tasks_method() { return "System process (GetProcessTimes)"; }
const char* machine_times_method() { return "GetSystemTimes"; }

bool symbol_present(const char*) { return false; }

const char* native_malloc_name() { return "Windows heap"; }

SharedLibrary load_library(const char* path) {
  HMODULE module = LoadLibraryA(path);
  if (module) return {reinterpret_cast<void*>(module), {}};
  return {nullptr, "LoadLibrary: error " + std::to_string(GetLastError())};
}

void* find_symbol(void* library, const char* name) {
  return reinterpret_cast<void*>(GetProcAddress(static_cast<HMODULE>(library), name));
}

const char* cuda_driver_library() { return "nvcuda.dll"; }

std::optional<std::size_t> last_level_cache_bytes() {
  DWORD bytes = 0;
  GetLogicalProcessorInformation(nullptr, &bytes);
  std::vector<SYSTEM_LOGICAL_PROCESSOR_INFORMATION> entries(bytes / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION) + 1);
  if (!GetLogicalProcessorInformation(entries.data(), &bytes)) return std::nullopt;
  entries.resize(bytes / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION));
  std::optional<std::size_t> largest;
  BYTE largest_level = 0;
  for (const auto& entry : entries) {
    if (entry.Relationship == RelationCache && entry.Cache.Level > largest_level) {
      largest_level = entry.Cache.Level;
      largest = entry.Cache.Size;
    }
  }
  return largest;
}

// Windows places memory on a node when it is allocated (VirtualAllocExNuma), not by a policy set afterwards.
Status set_memory_policy(void*, std::size_t, MemoryPolicy, unsigned) { return Status{ERROR_NOT_SUPPORTED, "set_memory_policy"}; }
std::optional<std::string> memory_policy_of(const void*) { return std::nullopt; }
std::optional<std::map<unsigned, std::uint64_t>> resident_bytes_by_node(const void*, std::size_t) { return std::nullopt; }
std::vector<unsigned> cpus_of_node(unsigned) { return {}; }
Status pin_current_thread_to(const std::vector<unsigned>& cpus) {
  DWORD_PTR mask = 0;
  for (unsigned cpu : cpus) {
    if (cpu < 64) mask |= DWORD_PTR{1} << cpu;
  }
  if (mask == 0 || SetThreadAffinityMask(GetCurrentThread(), mask) == 0) return failed("SetThreadAffinityMask");
  return {};
}

std::optional<RangeBacking> range_backing(const void* address, std::size_t size_bytes) {
  const std::size_t page = base_page_size();
  RangeBacking backing;
  backing.kernel_page_bytes = page;
  std::vector<PSAPI_WORKING_SET_EX_INFORMATION> entries(4096);
  for (std::size_t offset = 0; offset < size_bytes;) {
    std::size_t count = std::min(entries.size(), (size_bytes - offset + page - 1) / page);
    for (std::size_t i = 0; i < count; ++i) {
      entries[i].VirtualAddress = const_cast<char*>(static_cast<const char*>(address)) + offset + i * page;
    }
    if (!QueryWorkingSetEx(GetCurrentProcess(), entries.data(), static_cast<DWORD>(count * sizeof(entries[0])))) return std::nullopt;
    for (std::size_t i = 0; i < count; ++i) {
      if (!entries[i].VirtualAttributes.Valid) continue;
      backing.resident_bytes += page;
      if (entries[i].VirtualAttributes.LargePage) backing.hugetlb_bytes += page;
    }
    offset += count * page;
  }
  if (backing.hugetlb_bytes > 0) backing.kernel_page_bytes = GetLargePageMinimum();
  return backing;
}

PerfHandle perf_open(PerfEvent) { return {-1, unsupported("Linux perf events (none on Windows)")}; }
Status perf_enable(const PerfHandle&, bool) { return unsupported("Linux perf events (none on Windows)"); }
std::optional<std::uint64_t> perf_read(const PerfHandle&) { return std::nullopt; }
void perf_close(PerfHandle& handle) { handle.fd = -1; }
Status perf_openable(PerfEvent) { return unsupported("Linux perf events (none on Windows)"); }
std::optional<int> perf_event_paranoid() { return std::nullopt; }
std::optional<std::uint64_t> perf_event_mlock_kb() { return std::nullopt; }

// Windows zeroes freed pages in the System process's zero-page thread; no documented
// counter of zeroed pages exists to read here.
ZeroingCounter::ZeroingCounter() : status_{ERROR_NOT_SUPPORTED, "a count of zeroed pages (none on Windows)"} {}
ZeroingCounter::~ZeroingCounter() = default;
std::optional<ZeroedAllocations> ZeroingCounter::read() const { return std::nullopt; }
const char* ZeroingCounter::method() { return "none"; }
const char* ZeroingCounter::requirement() {
  return "Windows has no documented count of zeroed pages; the System process's CPU time (kernel_process_ns) is where "
         "its zeroing shows";
}

}  // namespace memcost::os
