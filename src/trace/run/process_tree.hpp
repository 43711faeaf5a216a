// The traced processes: the tree of the command and its descendants, holding it still and
// letting it go, signals to it, and a process's own counters from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "trace/tracer.hpp"

namespace memcost::trace::detail {

// The traced tree as it is now: `root` and its descendants, by the parent each names in
// /proc/PID/stat. A process that left the tree (a daemon that re-parented itself) is not in it.
std::vector<pid_t> process_tree(pid_t root);

void signal_tree(pid_t root, int signal);

// Holds every process of the traced tree still while the tracer catches up. A process that was
// forking as the others stopped shows up in the next look at /proc: look until none is new.
class Hold {
 public:
  explicit Hold(pid_t root) : root_(root) {}
  ~Hold() { release(); }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;

  void hold();
  void release();
  [[nodiscard]] bool holding() const { return !held_.empty(); }

  std::uint64_t pauses = 0, paused_ns = 0;

 private:
  pid_t root_;
  std::vector<pid_t> held_;
  std::uint64_t since_ns_ = 0;
};

// A process attached to may end as a zombie whose parent has not reaped it yet.
bool is_zombie(pid_t pid);

struct ProcessStat {
  bool alive = false;
  std::uint64_t minor_faults = 0, major_faults = 0, user_ticks = 0, system_ticks = 0;
};

ProcessStat read_process_stat(pid_t pid);

std::uint64_t ticks_per_second();

// The anonymous and private writable mappings a process has when tracing attaches to it, each
// as a call of kind `existing`.
void report_existing_mappings(pid_t pid, std::uint64_t now_ns, Sink& sink);

}  // namespace memcost::trace::detail
