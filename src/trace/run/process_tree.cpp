// The traced processes (see process_tree.hpp).
#include "trace/run/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <sstream>
#include <string>
#include <vector>

#include "os/os.hpp"
#include "memcost/measure.hpp"
#include "trace/attribution/linux_abi.hpp"

namespace memcost::trace::detail {

// The traced tree as it is now: `root` and its descendants, by the parent each names in
// /proc/PID/stat. A process that left the tree (a daemon that re-parented itself) is not in it.
std::vector<pid_t> process_tree(pid_t root) {
  std::unordered_map<pid_t, std::vector<pid_t>> children;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
      const int pid = std::atoi(entry->d_name);
      if (auto status = os::process_status(pid); status && status->parent > 0) {
        children[status->parent].push_back(static_cast<pid_t>(pid));
      }
    }
    closedir(proc);
  }
  std::vector<pid_t> tree{root};
  for (std::size_t at = 0; at < tree.size(); ++at) {
    auto found = children.find(tree[at]);
    if (found != children.end()) tree.insert(tree.end(), found->second.begin(), found->second.end());
  }
  return tree;
}

void signal_tree(pid_t root, int signal) {
  for (pid_t pid : process_tree(root)) kill(pid, signal);
}

void Hold::hold() {
  if (!held_.empty()) return;
  // The root first, at once: looking through /proc for the rest takes a millisecond or more, in
  // which a small buffer can fill.
  if (kill(root_, SIGSTOP) == 0) held_.push_back(root_);
  for (int round = 0; round < 16; ++round) {
    bool added = false;
    for (pid_t pid : process_tree(root_)) {
      if (std::find(held_.begin(), held_.end(), pid) == held_.end() && kill(pid, SIGSTOP) == 0) {
        held_.push_back(pid);
        added = true;
      }
    }
    if (!added) break;
  }
  if (!held_.empty()) {
    since_ns_ = measure::now_ns();
    ++pauses;
  }
}

void Hold::release() {
  if (held_.empty()) return;
  for (pid_t pid : held_) kill(pid, SIGCONT);
  held_.clear();
  paused_ns += measure::now_ns() - since_ns_;
}

bool is_zombie(pid_t pid) {
  auto status = os::process_status(pid);
  return status && status->state == 'Z';
}

ProcessStat read_process_stat(pid_t pid) {
  ProcessStat stat;
  if (auto status = os::process_status(pid)) {
    stat = {true, status->minor_faults, status->major_faults, status->user_ticks, status->system_ticks};
  }
  return stat;
}

std::uint64_t ticks_per_second() { return static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK)); }

void report_existing_mappings(pid_t pid, std::uint64_t now_ns, Sink& sink) {
  for (const os::MapEntry& entry : os::process_maps(pid)) {
    if (!entry.writable || entry.path.starts_with('/')) continue;
    const std::uint64_t start = entry.start, end = entry.end;
    MappingCall call;
    call.kind = CallKind::existing;
    call.pid = pid;
    call.tid = pid;
    call.enter_ns = call.exit_ns = now_ns;
    call.args[0] = start;
    call.args[1] = end - start;
    call.args[3] = linux_abi::kMapPrivate | linux_abi::kMapAnonymous;
    call.result = static_cast<std::int64_t>(start);
    sink.call(call);
  }
}

}  // namespace memcost::trace::detail
