// The traced workload (as perf's): a command started and held at the door until its events are
// on, then let through; or a running process attached to. Its end is noticed (interrupts passed on
// as the contract in tracer.hpp says), and what the kernel accounted for it is collected.
// Policy-free about tracing: what goes into the command's environment is the caller's.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trace/run/process_tree.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace::detail {

// A change to the command's environment: `value` set (or the variable unset); or, with a
// separator, joined to what the variable holds: after it, or before it with `before`.
struct EnvironmentChange {
  std::string name;
  std::string value;
  char separator = 0;
  bool before = false;
  bool unset = false;
};
// The environment variable's value after `change`, given what it held (nullptr: not set). (Pure.)
[[nodiscard]] std::string changed_value(const EnvironmentChange& change, const char* existing);

class Workload {
 public:
  Workload() = default;
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // Forks `command` (PATH searched) with `environment` applied, its stdout `stdout_fd` (-1: this
  // process's), `inherited_fd` kept open across exec (-1: none); it waits at the door. False with `why`.
  bool start(const std::vector<std::string>& command, const std::vector<EnvironmentChange>& environment, int stdout_fd,
             int inherited_fd, Failure& why);
  // A running process instead; false with `why` (no_such_process) when there is none.
  bool attach(pid_t pid, Failure& why);

  [[nodiscard]] pid_t pid() const { return pid_; }
  // A descriptor that polls readable once the command (or the process attached to) has exited,
  // before it is reaped (pidfd_open, Linux 5.3); -1 where the kernel has none. The workload owns it.
  [[nodiscard]] int exit_fd();
  [[nodiscard]] bool attached() const { return attached_; }
  [[nodiscard]] const std::string& name() const { return name_; }  // the program's file name
  // The command, or each thread of the process attached to: what the events are opened on.
  [[nodiscard]] std::vector<pid_t> targets() const;

  // The window opens. The command goes through the door; false with `why` (command_not_started)
  // when it could not be executed. Attached: its counters are read (right before counting starts).
  bool let_go(Failure& why);
  // Polled: whether it has ended. A command: SIGTERM (`stop_requested`) passed on at once; Ctrl-C
  // (`interrupted`) not heeded passed on after 1 s, then SIGTERM after 3 s more, SIGKILL after 5 s
  // more. Attached: it ended, the time is up or a stop was requested; then `stop_counting` is
  // called before its counters are read, so that the counts and the window agree.
  bool ended(bool stop_requested, bool interrupted, double attach_seconds, const std::function<void()>& stop_counting);
  // A command started goes (killed and reaped); a process attached to is left as it was.
  void abandon();

  // What the kernel accounted: the command's exit status and rusage, or the attached process's
  // counters over the window from /proc/PID/stat.
  void collect(Result& result) const;

 private:
  [[noreturn]] void become_the_command(pid_t tracer, const std::vector<std::string>& command,
                                       const std::vector<EnvironmentChange>& environment, int stdout_fd, int inherited_fd);
  pid_t pid_ = 0;
  bool attached_ = false;
  int go_[2] = {-1, -1}, exec_error_[2] = {-1, -1};
  int exit_fd_ = -1;
  bool exit_fd_asked_ = false;
  std::uint64_t faults_before_exec_ = 0;
  std::string program_;  // as the command names it
  std::string name_;
  std::uint64_t started_ns_ = 0, last_stat_ns_ = 0;
  ProcessStat stat_before_, stat_last_;
  int wait_status_ = 0;
  rusage usage_{};
  bool terminated_ = false;
  std::uint64_t interrupted_at_ = 0;
  int escalation_ = 0;
};

}  // namespace memcost::trace::detail
