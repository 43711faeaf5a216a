// Linux implementation of the OS layer (contract in os.hpp).
#include "os/os.hpp"
#include "os/perf_linux.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>
#include <linux/mempolicy.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif

namespace memcost::os {
namespace {

Status failed(const char* call) { return Status{errno, call}; }

std::optional<std::uint64_t> read_number(const std::string& path) {
  auto text = read_text(path);
  if (!text) return std::nullopt;
  try {
    return std::stoull(*text);
  } catch (...) {
    return std::nullopt;
  }
}

// sysfs selectors look like "always [madvise] never": the bracketed word is in force.
std::string selected_word(const std::string& text) {
  auto open = text.find('[');
  auto close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return text.substr(open + 1, close - open - 1);
}

std::vector<std::string> list_directory(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
    }
    closedir(dir);
  }
  return names;
}

// /proc/meminfo style: "Name:   12345 kB".
std::optional<std::uint64_t> meminfo_kib(const std::string& text, const std::string& name) {
  auto at = text.find(name + ":");
  if (at == std::string::npos) return std::nullopt;
  return std::stoull(text.substr(at + name.size() + 1));
}

std::uint64_t ticks_to_ns(std::uint64_t ticks) {
  static const std::uint64_t ns_per_tick = 1'000'000'000ULL / static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK));
  return ticks * ns_per_tick;
}

int mmap_flags(const MapRequest& request) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (request.kind == PageKind::huge_2mb) flags |= MAP_HUGETLB | MAP_HUGE_2MB;
  if (request.kind == PageKind::huge_1gb) flags |= MAP_HUGETLB | MAP_HUGE_1GB;
  if (request.populate) flags |= MAP_POPULATE;
  return flags;
}

Status advise_page_kind(void* address, std::size_t size_bytes, PageKind kind) {
  if (kind == PageKind::base && madvise(address, size_bytes, MADV_NOHUGEPAGE) != 0) return failed("madvise(MADV_NOHUGEPAGE)");
  if (kind == PageKind::thp && madvise(address, size_bytes, MADV_HUGEPAGE) != 0) return failed("madvise(MADV_HUGEPAGE)");
  return {};
}

// The cgroup (v2 unified, or v1 memory controller) directory this process lives in.
struct CgroupMemoryFiles {
  std::string version;
  std::string limit_path;
  std::string usage_path;
};
std::optional<CgroupMemoryFiles> cgroup_memory_files() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::optional<std::string> unified_path;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (controllers == "memory") {
      return CgroupMemoryFiles{"v1", "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes",
                               "/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes"};
    }
    if (controllers.empty() && line.rfind("0:", 0) == 0) unified_path = path;
  }
  if (unified_path) {
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      std::string dir = std::string(root) + *unified_path;
      if (access((dir + "/memory.max").c_str(), R_OK) == 0) {
        return CgroupMemoryFiles{"v2", dir + "/memory.max", dir + "/memory.current"};
      }
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> tracepoint_id(const char* category, const char* name) {
  const std::string root = perf::tracefs_root();
  if (root.empty()) return std::nullopt;
  return read_number(root + "/events/" + category + "/" + name + "/id");
}

}  // namespace

std::string Status::message() const {
  if (ok()) return "ok";
  return std::string(call) + ": " + std::strerror(error) + " (errno " + std::to_string(error) + ")";
}

Mapping reserve(const MapRequest& request) {
  void* address = mmap(request.address_hint, request.size_bytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (address == MAP_FAILED) return {nullptr, 0, failed("mmap(PROT_NONE)")};
  return {address, request.size_bytes, {}};
}

Status commit(void* address, std::size_t size_bytes) {
  if (mprotect(address, size_bytes, PROT_READ | PROT_WRITE) != 0) return failed("mprotect");
  return {};
}

Status decommit(void* address, std::size_t size_bytes) {
  if (madvise(address, size_bytes, MADV_DONTNEED) != 0) return failed("madvise(MADV_DONTNEED)");
  if (mprotect(address, size_bytes, PROT_NONE) != 0) return failed("mprotect");
  return {};
}

Mapping map(const MapRequest& request) {
  const std::size_t slack = request.alignment_bytes > base_page_size() ? request.alignment_bytes : 0;
  void* mapped = mmap(request.address_hint, request.size_bytes + slack, PROT_READ | PROT_WRITE, mmap_flags(request), -1, 0);
  if (mapped == MAP_FAILED) return {nullptr, 0, failed("mmap")};
  void* address = mapped;
  if (slack) {
    auto start = reinterpret_cast<std::uintptr_t>(mapped);
    auto aligned = (start + slack - 1) & ~(std::uintptr_t{slack} - 1);
    if (aligned > start) munmap(mapped, aligned - start);
    if (std::size_t tail = start + slack - aligned) munmap(reinterpret_cast<void*>(aligned + request.size_bytes), tail);
    address = reinterpret_cast<void*>(aligned);
  }
  Status advised = advise_page_kind(address, request.size_bytes, request.kind);
  if (!advised.ok()) {
    munmap(address, request.size_bytes);
    return {nullptr, 0, advised};
  }
  return {address, request.size_bytes, {}};
}

Status advise(void* address, std::size_t size_bytes, PageKind kind) {
  if (kind == PageKind::huge_2mb || kind == PageKind::huge_1gb) return Status{EINVAL, "madvise(hugetlb)"};
  return advise_page_kind(address, size_bytes, kind);
}

Status release(void* address, std::size_t size_bytes) {
  if (munmap(address, size_bytes) != 0) return failed("munmap");
  return {};
}

Status protect(void* address, std::size_t size_bytes, bool writable) {
  if (mprotect(address, size_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ) != 0) return failed("mprotect");
  return {};
}

Status populate_write(void* address, std::size_t size_bytes) {
  if (madvise(address, size_bytes, MADV_POPULATE_WRITE) != 0) return failed("madvise(MADV_POPULATE_WRITE)");
  return {};
}

Status enable_large_page_privilege() { return {}; }

bool legacy_layout_active() {
  int persona = personality(0xffffffff);
  return persona != -1 && (persona & ADDR_COMPAT_LAYOUT) != 0;
}

Status request_legacy_layout_for_exec() {
  int persona = personality(0xffffffff);
  if (persona == -1 || personality(static_cast<unsigned long>(persona) | ADDR_COMPAT_LAYOUT) == -1) return failed("personality");
  return {};
}

Status exit_with_parent() {
  const pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return failed("prctl(PR_SET_PDEATHSIG)");
  // The parent may have died before the request took effect: then we were re-parented already.
  if (getppid() != parent) raise(SIGTERM);
  return {};
}

void release_stdout() {
  std::fflush(stdout);
  const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) return;
  dup2(null, STDOUT_FILENO);
  close(null);
}

void pad_heap(std::size_t bytes) {
#if defined(__GLIBC__)
  (void)mallopt(M_TOP_PAD, static_cast<int>(std::min<std::size_t>(bytes, std::numeric_limits<int>::max())));
#else
  (void)bytes;
#endif
}

bool can_start_children() { return true; }

Child start_child(const std::function<std::string()>& work) {
  Child child;
  int answer[2];
  if (pipe2(answer, O_CLOEXEC) != 0) {
    child.why_not = std::string("pipe: ") + std::strerror(errno);
    return child;
  }
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    child.why_not = std::string("fork: ") + std::strerror(errno);
    close(answer[0]);
    close(answer[1]);
    return child;
  }
  if (pid == 0) {
    close(answer[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a child outlives no parent killed mid-measure
    if (getppid() != parent) _exit(4);  // the parent died before the line above
    int status = 0;
    try {
      const std::string text = work();
      for (std::size_t written = 0; written < text.size();) {
        const ssize_t n = write(answer[1], text.data() + written, text.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          status = 3;
          break;
        }
        written += static_cast<std::size_t>(n);
      }
    } catch (...) {
      status = 2;
    }
    _exit(status);  // not exit: the parent's atexit handlers and buffers are the parent's
  }
  close(answer[1]);
  child.pid = pid;
  child.answer_fd = answer[0];
  return child;
}

std::optional<std::string> finish_child(Child& child, std::string& error) {
  if (child.pid < 0) {
    error = child.why_not.empty() ? "no child was started" : child.why_not;
    return std::nullopt;
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(child.answer_fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(child.answer_fd);
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  child.pid = -1;
  child.answer_fd = -1;
  if (WIFSIGNALED(status)) {
    error = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    return std::nullopt;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error = WEXITSTATUS(status) == 2 ? "its work threw" : "exited with status " + std::to_string(WEXITSTATUS(status));
    return std::nullopt;
  }
  return text;
}

std::string executable_directory() {
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return {};
  std::string file(path, static_cast<std::size_t>(length));
  return file.substr(0, file.find_last_of('/'));
}

Status exec_self(char** argv) {
  execv("/proc/self/exe", argv);
  return failed("execv(/proc/self/exe)");
}

std::size_t base_page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

unsigned logical_cpu_count() {
  long count = sysconf(_SC_NPROCESSORS_ONLN);
  return count > 0 ? static_cast<unsigned>(count) : 1U;
}

ThpSettings thp_settings() {
  const std::string root = "/sys/kernel/mm/transparent_hugepage";
  ThpSettings settings;
  auto enabled = read_text(root + "/enabled");
  if (!enabled) return settings;
  settings.present = true;
  settings.enabled = selected_word(*enabled);
  settings.defrag = selected_word(read_text(root + "/defrag").value_or(""));
  settings.pmd_size_bytes = read_number(root + "/hpage_pmd_size").value_or(0);
  for (const auto& name : list_directory(root)) {
    // "hugepages-64kB"
    if (name.rfind("hugepages-", 0) != 0) continue;
    // Some sizes exist for shmem only and have no "enabled" file for anonymous memory.
    auto enabled_size = read_text(root + "/" + name + "/enabled");
    if (!enabled_size) continue;
    settings.sizes.push_back({std::stoull(name.substr(10)) * 1024, selected_word(*enabled_size)});
  }
  std::sort(settings.sizes.begin(), settings.sizes.end(),
            [](const MultiSizeThp& a, const MultiSizeThp& b) { return a.size_bytes < b.size_bytes; });
  return settings;
}

std::vector<HugetlbPool> hugetlb_pools() {
  const std::string root = "/sys/kernel/mm/hugepages";
  std::vector<HugetlbPool> pools;
  for (const auto& name : list_directory(root)) {
    if (name.rfind("hugepages-", 0) != 0) continue;
    std::string dir = root + "/" + name + "/";
    HugetlbPool pool;
    pool.page_size_bytes = std::stoull(name.substr(10)) * 1024;
    pool.total_pages = read_number(dir + "nr_hugepages").value_or(0);
    pool.free_pages = read_number(dir + "free_hugepages").value_or(0);
    pool.reserved_pages = read_number(dir + "resv_hugepages").value_or(0);
    pool.surplus_pages = read_number(dir + "surplus_hugepages").value_or(0);
    pools.push_back(pool);
  }
  std::sort(pools.begin(), pools.end(),
            [](const HugetlbPool& a, const HugetlbPool& b) { return a.page_size_bytes < b.page_size_bytes; });
  return pools;
}

Status set_hugetlb_pool(std::size_t page_size_bytes, std::uint64_t pages) {
  std::string path = "/sys/kernel/mm/hugepages/hugepages-" + std::to_string(page_size_bytes / 1024) + "kB/nr_hugepages";
  std::ofstream out(path);
  if (!out) return failed("open(nr_hugepages)");
  out << pages << '\n';
  out.flush();
  if (!out) return failed("write(nr_hugepages)");
  return {};
}

MemoryInfo memory_info() {
  MemoryInfo info;
  std::string meminfo = read_text("/proc/meminfo").value_or("");
  info.total_bytes = meminfo_kib(meminfo, "MemTotal").value_or(0) * 1024;
  info.available_bytes = meminfo_kib(meminfo, "MemAvailable").value_or(0) * 1024;
  info.swap_total_bytes = meminfo_kib(meminfo, "SwapTotal").value_or(0) * 1024;
  if (auto files = cgroup_memory_files()) {
    info.cgroup_version = files->version;
    // v2 writes "max" and v1 a number near 2^63 when there is no limit.
    auto limit = read_number(files->limit_path);
    if (limit && *limit < (std::uint64_t{1} << 62)) info.cgroup_limit_bytes = limit;
    info.cgroup_usage_bytes = read_number(files->usage_path);
  }
  return info;
}

std::optional<std::uint64_t> max_map_count() { return read_number("/proc/sys/vm/max_map_count"); }

std::optional<int> overcommit_mode() {
  auto mode = read_number("/proc/sys/vm/overcommit_memory");
  if (!mode) return std::nullopt;
  return static_cast<int>(*mode);
}

std::vector<MapEntry> process_maps(int pid) {
  std::vector<MapEntry> entries;
  std::istringstream maps(read_text(pid == 0 ? "/proc/self/maps" : "/proc/" + std::to_string(pid) + "/maps").value_or(""));
  for (std::string line; std::getline(maps, line);) {
    // start-end perms offset device inode [path]
    MapEntry entry;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %n", &entry.start, &entry.end, perms, &entry.offset, &path_at) < 4 ||
        std::strlen(perms) < 4) {
      continue;
    }
    entry.readable = perms[0] == 'r';
    entry.writable = perms[1] == 'w';
    entry.executable = perms[2] == 'x';
    entry.shared = perms[3] == 's';
    if (path_at > 0 && static_cast<std::size_t>(path_at) < line.size()) entry.path = line.substr(static_cast<std::size_t>(path_at));
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<int> thread_ids(int pid) {
  std::vector<int> threads;
  for (const auto& task : list_directory("/proc/" + std::to_string(pid) + "/task")) {
    if (std::isdigit(static_cast<unsigned char>(task[0]))) threads.push_back(std::stoi(task));
  }
  return threads;
}

std::optional<std::uint64_t> mapping_count() {
  const std::size_t mappings = process_maps(0).size();
  if (mappings == 0) return std::nullopt;  // a running process has its code mapped: /proc is not readable
  return mappings;
}

SystemInfo system_info() {
  SystemInfo info;
  utsname names{};
  if (uname(&names) == 0) {
    info.os_name = names.sysname;
    info.os_release = names.release;
    info.os_version = names.version;
    info.host_name = names.nodename;
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      info.cpu_model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  unsigned nodes = 0;
  for (const auto& name : list_directory("/sys/devices/system/node")) {
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(static_cast<unsigned char>(name[4]))) ++nodes;
  }
  info.numa_nodes = nodes > 0 ? nodes : 1;
  return info;
}

std::optional<bool> free_page_reporting() {
  const std::string root = "/sys/bus/virtio/devices";
  if (access(root.c_str(), R_OK) != 0) return std::nullopt;
  constexpr std::size_t balloon_feature_reporting = 5;  // VIRTIO_BALLOON_F_REPORTING
  for (const auto& device : list_directory(root)) {
    // "device" holds the virtio device id; 5 is the memory balloon.
    auto id = read_text(root + "/" + device + "/device");
    if (!id || std::stoul(*id, nullptr, 16) != 5) continue;
    // "features" is one character per feature bit, lowest bit first.
    auto features = read_text(root + "/" + device + "/features").value_or("");
    if (features.size() > balloon_feature_reporting && features[balloon_feature_reporting] == '1') return true;
  }
  return false;
}

std::optional<std::uint64_t> host_reported_bytes() {
  auto kib = read_number("/sys/module/page_reporting/parameters/reported_kib");
  return kib ? std::optional<std::uint64_t>(*kib * 1024) : std::nullopt;
}

ProcessTimes process_times() {
  ProcessTimes times;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    auto ns = [](const timeval& tv) {
      return static_cast<std::uint64_t>(tv.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(tv.tv_usec) * 1000ULL;
    };
    times.user_ns = ns(usage.ru_utime);
    times.system_ns = ns(usage.ru_stime);
    times.minor_faults = static_cast<std::uint64_t>(usage.ru_minflt);
    times.major_faults = static_cast<std::uint64_t>(usage.ru_majflt);
  }
  // statm's second field: resident pages.
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) times.rss_bytes = resident_pages * base_page_size();
  return times;
}

std::optional<MachineTimes> machine_times() {
  std::ifstream in("/proc/stat");
  std::string label;
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq) || label != "cpu") return std::nullopt;
  MachineTimes times;
  times.steal_available = static_cast<bool>(in >> steal);
  times.user_ns = ticks_to_ns(user + nice);
  times.system_ns = ticks_to_ns(system);
  times.idle_ns = ticks_to_ns(idle + iowait);
  times.irq_ns = ticks_to_ns(irq);
  times.softirq_ns = ticks_to_ns(softirq);
  times.steal_ns = ticks_to_ns(steal);
  return times;
}

std::optional<std::vector<NamedCpu>> processes_cpu(const std::function<bool(std::string_view)>& wanted) {
  DIR* proc = opendir("/proc");
  if (!proc) return std::nullopt;
  std::vector<NamedCpu> found;
  while (dirent* entry = readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(entry->d_name[0]))) continue;
    auto status = process_status(std::atoi(entry->d_name));
    if (!status || !wanted(status->name)) continue;  // ended between readdir and open, or not asked for
    // schedstat's run time is in nanoseconds; stat's utime + stime only in ticks.
    auto run_ns = read_number(std::string("/proc/") + entry->d_name + "/schedstat");
    found.push_back({status->name, run_ns ? *run_ns : ticks_to_ns(status->user_ticks + status->system_ticks)});
  }
  closedir(proc);
  return found;
}

std::optional<ProcessStatus> process_status(int pid) {
  // A small read with no stream: the tracer looks at every process this way each time it holds
  // the traced tree still.
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[1024];
  const ssize_t got = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (got <= 0) return std::nullopt;
  text[got] = 0;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'.
  const char* open_paren = std::strchr(text, '(');
  const char* close_paren = std::strrchr(text, ')');
  if (open_paren == nullptr || close_paren == nullptr || close_paren < open_paren) return std::nullopt;
  ProcessStatus status;
  status.name.assign(open_paren + 1, close_paren);
  // After the name: state(3) ppid(4) pgrp session tty tpgid flags minflt(10) cminflt majflt(12)
  // cmajflt utime(14) stime(15) cutime cstime priority nice threads itrealvalue starttime vsize rss(24).
  unsigned long long minor = 0, major = 0, user = 0, system = 0, resident = 0;
  const int read_fields = std::sscanf(close_paren + 1,
                                      " %c %d %*d %*d %*d %*d %*u %llu %*u %llu %*u %llu %llu %*d %*d %*d %*d %*d %*d %*u "
                                      "%*u %llu",
                                      &status.state, &status.parent, &minor, &major, &user, &system, &resident);
  if (read_fields < 2) return std::nullopt;
  status.minor_faults = minor;
  status.major_faults = major;
  status.user_ticks = user;
  status.system_ticks = system;
  status.resident_pages = resident;
  return status;
}

std::optional<std::vector<TaskTime>> other_tasks_cpu() {
  const std::string self = std::to_string(getpid());
  DIR* proc = opendir("/proc");
  if (!proc) return std::nullopt;
  std::vector<TaskTime> tasks;
  while (dirent* entry = readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(entry->d_name[0])) || self == entry->d_name) continue;
    for (int task : thread_ids(std::atoi(entry->d_name))) {
      // schedstat: "run-time-ns wait-time-ns timeslices"; gone if the task just exited.
      const std::string path = std::string("/proc/") + entry->d_name + "/task/" + std::to_string(task) + "/schedstat";
      if (auto run_ns = read_number(path)) tasks.push_back({task, *run_ns});
    }
  }
  closedir(proc);
  if (tasks.empty()) return std::nullopt;
  std::sort(tasks.begin(), tasks.end(), [](const TaskTime& a, const TaskTime& b) { return a.tid < b.tid; });
  return tasks;
}

bool top_down_on_request() { return false; }

std::optional<std::map<std::string, std::uint64_t>> vmstat() {
  std::ifstream file("/proc/vmstat");
  if (!file) return std::nullopt;
  std::map<std::string, std::uint64_t> counters;
  std::string name;
  std::uint64_t value = 0;
  while (file >> name >> value) counters[name] = value;
  return counters;
}

namespace {
std::optional<ProcessSample> process_sample(int pid) {
  auto status = process_status(pid);
  if (!status) return std::nullopt;
  ProcessSample sample;
  sample.pid = pid;
  sample.name = status->name;
  sample.minor_faults = status->minor_faults;
  sample.major_faults = status->major_faults;
  sample.user_ns = ticks_to_ns(status->user_ticks);
  sample.system_ns = ticks_to_ns(status->system_ticks);
  sample.rss_bytes = status->resident_pages * base_page_size();
  return sample;
}
}  // namespace

std::optional<ProcessScan> scan_processes(const std::vector<int>& pids) {
  ProcessScan scan;
  std::vector<int> wanted = pids;
  if (wanted.empty()) {
    DIR* proc = opendir("/proc");
    if (!proc) return std::nullopt;
    while (dirent* entry = readdir(proc)) {
      if (std::isdigit(static_cast<unsigned char>(entry->d_name[0]))) wanted.push_back(std::atoi(entry->d_name));
    }
    closedir(proc);
  }
  for (int pid : wanted) {
    if (auto sample = process_sample(pid)) scan.processes.push_back(std::move(*sample));
    else ++scan.unreadable;
  }
  return scan;
}

std::optional<std::string> task_name(int tid) {
  std::ifstream file("/proc/" + std::to_string(tid) + "/comm");
  std::string name;
  if (!file || !std::getline(file, name)) return std::nullopt;
  return name;
}

bool symbol_present(const char* symbol) { return dlsym(RTLD_DEFAULT, symbol) != nullptr; }

const char* native_malloc_name() { return "glibc"; }

SharedLibrary load_library(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle) return {handle, {}};
  const char* error = dlerror();
  return {nullptr, error ? error : "unknown"};
}

void* find_symbol(void* library, const char* name) { return dlsym(library, name); }

const char* cuda_driver_library() { return "libcuda.so.1"; }

std::optional<std::vector<std::uint64_t>> tlb_shootdowns_per_cpu() {
  std::ifstream interrupts("/proc/interrupts");
  std::string line;
  // The header names the CPUs that are online; the TLB line has one count per column.
  if (!interrupts || !std::getline(interrupts, line)) return std::nullopt;
  std::size_t cpus = 0;
  std::istringstream header(line);
  for (std::string word; header >> word;) cpus += word.rfind("CPU", 0) == 0;
  while (std::getline(interrupts, line)) {
    std::istringstream fields(line);
    std::string label;
    fields >> label;
    if (label != "TLB:") continue;
    std::vector<std::uint64_t> counts;
    std::uint64_t count = 0;
    while (counts.size() < cpus && fields >> count) counts.push_back(count);
    if (counts.size() != cpus) return std::nullopt;
    return counts;
  }
  return std::nullopt;
}

Status pin_current_thread(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) return failed("sched_setaffinity");
  return {};
}

std::optional<RangeBacking> range_backing(const void* address, std::size_t size_bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return std::nullopt;
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const auto end = begin + size_bytes;
  RangeBacking backing;
  bool inside = false;
  std::string line;
  while (std::getline(smaps, line)) {
    // A VMA header starts with "start-end perms ..."; its fields follow as "Name:   value kB".
    auto dash = line.find('-');
    auto space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space && std::isxdigit(static_cast<unsigned char>(line[0]))) {
      auto vma_begin = std::stoull(line.substr(0, dash), nullptr, 16);
      auto vma_end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      // smaps counts whole VMAs; callers pass ranges that are whole mappings.
      inside = vma_begin < end && vma_end > begin;
      continue;
    }
    if (!inside) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::uint64_t kib = 0;
    try {
      kib = std::stoull(line.substr(colon + 1));
    } catch (...) {
      continue;  // VmFlags and other non-numeric fields
    }
    if (name == "Rss") backing.resident_bytes += kib * 1024;
    else if (name == "AnonHugePages") backing.anon_huge_bytes += kib * 1024;
    else if (name == "Private_Hugetlb" || name == "Shared_Hugetlb") backing.hugetlb_bytes += kib * 1024;
    else if (name == "KernelPageSize") backing.kernel_page_bytes = std::max<std::size_t>(backing.kernel_page_bytes, kib * 1024);
  }
  return backing;
}

bool neighbouring_mappings_merge() { return true; }
const char* memory_counters_source() { return "/proc/vmstat"; }
std::optional<std::uint64_t> kernel_process_cpu_ns() { return std::nullopt; }
const char* populate_at_map_call() { return "MAP_POPULATE"; }
const char* populate_write_call() { return "MADV_POPULATE_WRITE"; }
LargePages large_pages() { return {}; }  // Linux's large pages are the hugetlb pools
std::optional<Wine> wine() { return std::nullopt; }
const char* other_tasks_method() { return "schedstat"; }
const char* machine_times_method() { return "proc_stat"; }

std::optional<std::size_t> last_level_cache_bytes() {
  const std::string root = "/sys/devices/system/cpu/cpu0/cache";
  std::optional<std::size_t> largest;
  int largest_level = 0;
  for (const auto& index : list_directory(root)) {
    if (index.rfind("index", 0) != 0) continue;
    auto level = read_number(root + "/" + index + "/level");
    auto size = read_text(root + "/" + index + "/size");  // "32768K"
    if (!level || !size || size->empty()) continue;
    std::size_t bytes = 0;
    try {
      bytes = std::stoull(*size);
    } catch (...) {
      continue;
    }
    if (size->find('K') != std::string::npos) bytes <<= 10;
    else if (size->find('M') != std::string::npos) bytes <<= 20;
    if (static_cast<int>(*level) > largest_level) {
      largest_level = static_cast<int>(*level);
      largest = bytes;
    }
  }
  return largest;
}

namespace {
// Node masks hold this many bits: enough for every machine Linux supports today.
constexpr unsigned long max_nodes = 1024;
constexpr std::size_t mask_words = max_nodes / (8 * sizeof(unsigned long));

std::string node_list(const unsigned long* mask) {
  std::string text;
  for (unsigned node = 0; node < max_nodes;) {
    if (!(mask[node / 64] & (1UL << (node % 64)))) {
      ++node;
      continue;
    }
    unsigned last = node;
    while (last + 1 < max_nodes && (mask[(last + 1) / 64] & (1UL << ((last + 1) % 64)))) ++last;
    text += (text.empty() ? "" : ",") + std::to_string(node) + (last > node ? "-" + std::to_string(last) : "");
    node = last + 1;
  }
  return text;
}

std::vector<unsigned> parse_cpu_list(const std::string& text) {  // "0-3,8,10-11"
  std::vector<unsigned> cpus;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    try {
      auto dash = part.find('-');
      unsigned first = static_cast<unsigned>(std::stoul(part.substr(0, dash)));
      unsigned last = dash == std::string::npos ? first : static_cast<unsigned>(std::stoul(part.substr(dash + 1)));
      for (unsigned cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    } catch (...) {
    }
  }
  return cpus;
}
}  // namespace

Status set_memory_policy(void* address, std::size_t size_bytes, MemoryPolicy policy, unsigned node) {
  unsigned long mask[mask_words] = {};
  int mode = MPOL_LOCAL;
  if (policy == MemoryPolicy::interleave) {
    mode = MPOL_INTERLEAVE;
    const unsigned nodes = system_info().numa_nodes;
    for (unsigned n = 0; n < nodes && n < max_nodes; ++n) mask[n / 64] |= 1UL << (n % 64);
  } else if (policy == MemoryPolicy::bind) {
    if (node >= max_nodes) return Status{EINVAL, "mbind"};
    mode = MPOL_BIND;
    mask[node / 64] |= 1UL << (node % 64);
  }
  const bool masked = policy != MemoryPolicy::local;
  if (syscall(SYS_mbind, address, size_bytes, mode, masked ? mask : nullptr, masked ? max_nodes + 1 : 0, 0U) != 0) {
    return failed("mbind");
  }
  return {};
}

std::optional<std::string> memory_policy_of(const void* address) {
  int mode = 0;
  unsigned long mask[mask_words] = {};
  if (syscall(SYS_get_mempolicy, &mode, mask, max_nodes + 1, address, MPOL_F_ADDR) != 0) return std::nullopt;
  switch (mode & ~(MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES)) {
    case MPOL_DEFAULT: return "default";
    case MPOL_LOCAL: return "local";
    case MPOL_INTERLEAVE: return "interleave:" + node_list(mask);
    case MPOL_BIND: return "bind:" + node_list(mask);
    case MPOL_PREFERRED: return "preferred:" + node_list(mask);
    default: return "mode " + std::to_string(mode) + ":" + node_list(mask);
  }
}

std::optional<std::map<unsigned, std::uint64_t>> resident_bytes_by_node(const void* address, std::size_t size_bytes) {
  std::ifstream numa_maps("/proc/self/numa_maps");
  if (!numa_maps) return std::nullopt;
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const auto end = begin + size_bytes;
  std::map<unsigned, std::uint64_t> bytes;
  std::string line;
  // "7f1c00000000 interleave:0-1 anon=262144 dirty=262144 N0=131072 N1=131072 kernelpagesize_kB=4"
  // One line per VMA, keyed by its start; a VMA ends where the next line's starts (or is the last).
  while (std::getline(numa_maps, line)) {
    std::stringstream fields(line);
    std::string start_text;
    fields >> start_text;
    std::uintptr_t vma_start = 0;
    try {
      vma_start = std::stoull(start_text, nullptr, 16);
    } catch (...) {
      continue;
    }
    if (vma_start < begin || vma_start >= end) continue;  // VMAs of the range start inside it
    std::uint64_t page_bytes = base_page_size();
    std::map<unsigned, std::uint64_t> pages;
    std::string field;
    while (fields >> field) {
      if (field.size() > 1 && field[0] == 'N' && std::isdigit(static_cast<unsigned char>(field[1]))) {
        auto equals = field.find('=');
        if (equals == std::string::npos) continue;
        pages[static_cast<unsigned>(std::stoul(field.substr(1, equals - 1)))] += std::stoull(field.substr(equals + 1));
      } else if (field.rfind("kernelpagesize_kB=", 0) == 0) {
        page_bytes = std::stoull(field.substr(18)) * 1024;
      }
    }
    for (auto [node, count] : pages) bytes[node] += count * page_bytes;
  }
  return bytes;
}

std::vector<unsigned> cpus_of_node(unsigned node) {
  auto text = read_text("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
  return text ? parse_cpu_list(*text) : std::vector<unsigned>{};
}

Status pin_current_thread_to(const std::vector<unsigned>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned cpu : cpus) {
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) return failed("sched_setaffinity");
  return {};
}

namespace {

// The tracefs id of a tracepoint event (perf_open, perf_openable); absent where tracefs lacks it.
std::optional<std::uint64_t> event_tracepoint_id(PerfEvent event) {
  return event == PerfEvent::tlb_flush_tracepoint ? tracepoint_id("tlb", "tlb_flush")
                                                  : tracepoint_id("exceptions", "page_fault_user");
}

}  // namespace

PerfHandle perf_open(PerfEvent event) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.disabled = 1;
  attr.inherit = 1;
  attr.exclude_hv = 1;
  switch (event) {
    case PerfEvent::page_faults:
      attr.type = PERF_TYPE_SOFTWARE;
      attr.config = PERF_COUNT_SW_PAGE_FAULTS;
      break;
    case PerfEvent::task_clock:
      attr.type = PERF_TYPE_SOFTWARE;
      attr.config = PERF_COUNT_SW_TASK_CLOCK;
      break;
    case PerfEvent::tlb_flush_tracepoint:
    case PerfEvent::page_fault_user_tracepoint: {
      auto id = event_tracepoint_id(event);
      if (!id) return {-1, Status{ENOENT, "tracefs events/<tracepoint>/id"}};
      attr.type = PERF_TYPE_TRACEPOINT;
      attr.config = *id;
      break;
    }
  }
  int fd = perf::open_event(attr, 0, -1);
  if (fd < 0) return {-1, failed("perf_event_open")};
  return {fd, {}};
}

Status perf_enable(const PerfHandle& handle, bool enable) {
  if (ioctl(handle.fd, enable ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0) != 0) return failed("ioctl(perf)");
  return {};
}

std::optional<std::uint64_t> perf_read(const PerfHandle& handle) {
  std::uint64_t value = 0;
  if (handle.fd < 0 || ::read(handle.fd, &value, sizeof(value)) != static_cast<ssize_t>(sizeof(value))) return std::nullopt;
  return value;
}

void perf_close(PerfHandle& handle) {
  if (handle.fd >= 0) close(handle.fd);
  handle.fd = -1;
}

Status perf_openable(PerfEvent event) {
  if (event == PerfEvent::tlb_flush_tracepoint || event == PerfEvent::page_fault_user_tracepoint) {
    if (!event_tracepoint_id(event)) return Status{ENOENT, "tracefs events/<tracepoint>/id"};
    auto paranoid = perf_event_paranoid();
    if (geteuid() != 0 && paranoid && *paranoid > -1) return Status{EACCES, "perf_event_open"};
    return {};
  }
  PerfHandle handle = perf_open(event);
  perf_close(handle);
  return handle.status;
}

std::optional<int> perf_event_paranoid() {
  auto text = read_text("/proc/sys/kernel/perf_event_paranoid");
  if (!text) return std::nullopt;
  return std::stoi(*text);
}

std::optional<std::uint64_t> perf_event_mlock_kb() {
  auto text = read_text("/proc/sys/kernel/perf_event_mlock_kb");
  if (!text || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0]))) return std::nullopt;
  return std::stoull(*text);
}

namespace {

// The bit of __GFP_ZERO on this kernel, read from the tracepoint's own format
// description (it names every flag with its bit), not assumed.
std::optional<unsigned> gfp_zero_bit() {
  std::ifstream file(perf::tracefs_root() + "/events/kmem/mm_page_alloc/format");
  if (!file) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto name = text.find("\"__GFP_ZERO\"");
  if (name == std::string::npos) return std::nullopt;
  auto shift = text.rfind("<< (", name);
  if (shift == std::string::npos) return std::nullopt;
  return static_cast<unsigned>(std::strtoul(text.c_str() + shift + 4, nullptr, 10));
}

Status open_filtered_counters(std::uint64_t id, const std::string& filter, std::vector<int>& fds) {
  for (unsigned cpu = 0; cpu < logical_cpu_count(); ++cpu) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.config = id;
    int fd = perf::open_event(attr, -1, static_cast<int>(cpu));
    if (fd < 0) return failed("perf_event_open(kmem:mm_page_alloc, all tasks)");
    fds.push_back(fd);
    if (ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter.c_str()) != 0) {
      return failed("ioctl(PERF_EVENT_IOC_SET_FILTER)");
    }
  }
  return {};
}

std::optional<std::uint64_t> sum_counters(const std::vector<int>& fds) {
  std::uint64_t total = 0;
  for (int fd : fds) {
    std::uint64_t value = 0;
    if (::read(fd, &value, sizeof(value)) != static_cast<ssize_t>(sizeof(value))) return std::nullopt;
    total += value;
  }
  return total;
}

}  // namespace

ZeroingCounter::ZeroingCounter() {
  auto id = tracepoint_id("kmem", "mm_page_alloc");
  if (!id) {
    status_ = Status{ENOENT, "tracefs events/kmem/mm_page_alloc (mount tracefs at /sys/kernel/tracing)"};
    return;
  }
  auto bit = gfp_zero_bit();
  if (!bit) {
    status_ = Status{ENOENT, "the __GFP_ZERO flag in events/kmem/mm_page_alloc/format"};
    return;
  }
  const std::string zeroed = "gfp_flags & " + std::to_string(1UL << *bit);
  status_ = open_filtered_counters(*id, zeroed + " && order == 0", base_fds_);
  if (status_.ok()) status_ = open_filtered_counters(*id, zeroed + " && order > 0", larger_fds_);
}

ZeroingCounter::~ZeroingCounter() {
  for (int fd : base_fds_) close(fd);
  for (int fd : larger_fds_) close(fd);
}

std::optional<ZeroedAllocations> ZeroingCounter::read() const {
  if (!status_.ok()) return std::nullopt;
  auto base = sum_counters(base_fds_);
  auto larger = sum_counters(larger_fds_);
  if (!base || !larger) return std::nullopt;
  return ZeroedAllocations{*base, *larger};
}

const char* ZeroingCounter::method() { return "tracepoint kmem:mm_page_alloc, gfp_flags & __GFP_ZERO"; }
const char* ZeroingCounter::requirement() { return "it needs root or CAP_PERFMON and tracefs"; }

}  // namespace memcost::os
