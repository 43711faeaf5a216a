// The traced workload: a command held at the door, or a process attached to (workload.hpp).
#include "trace/run/workload.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <csignal>
#include <cstring>
#include <cstdlib>
#include <utility>

#include "memcost/measure.hpp"

namespace memcost::trace {

// (Here, with the first failures a run can have; tracer_windows.cpp has Windows's.)
std::string Failure::message() const {
  return error ? what + ": " + std::strerror(error) + " (errno " + std::to_string(error) + ")" : what;
}

}  // namespace memcost::trace

namespace memcost::trace::detail {

std::string changed_value(const EnvironmentChange& change, const char* existing) {
  if (change.separator == 0 || existing == nullptr || *existing == '\0') return change.value;
  return change.before ? change.value + change.separator + existing : std::string(existing) + change.separator + change.value;
}

Workload::~Workload() {
  for (int fd : {go_[0], go_[1], exec_error_[0], exec_error_[1], exit_fd_}) {
    if (fd >= 0) close(fd);
  }
}

bool Workload::start(const std::vector<std::string>& command, const std::vector<EnvironmentChange>& environment,
                     int stdout_fd, int inherited_fd, Failure& why) {
  // The door is a socket pair, not a pipe: a command killed while it waits (a Ctrl-C to the
  // process group during a slow set-up) has closed its end, and the tracer's send must fail, not
  // raise SIGPIPE and kill the tracer (MSG_NOSIGNAL; a pipe's write has no such flag).
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go_) != 0 || pipe2(exec_error_, O_CLOEXEC) != 0) {
    why = errno_failure("socketpair");
    return false;
  }
  const pid_t tracer = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    why = errno_failure("fork");
    return false;
  }
  if (pid_ == 0) become_the_command(tracer, command, environment, stdout_fd, inherited_fd);
  close(std::exchange(go_[0], -1));
  close(std::exchange(exec_error_[1], -1));
  program_ = command[0];
  name_ = command[0].substr(command[0].rfind('/') + 1);
  return true;
}

// In the forked child: set up, wait at the door, then exec the command (never returns).
void Workload::become_the_command(pid_t tracer, const std::vector<std::string>& command,
                                  const std::vector<EnvironmentChange>& environment, int stdout_fd, int inherited_fd) {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGQUIT, SIG_DFL);
  // A tracer that dies (killed, or crashed) takes the command with it instead of leaving it
  // running unwatched, holding the terminal.
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != tracer) _exit(126);
  if (stdout_fd >= 0 && dup2(stdout_fd, STDOUT_FILENO) < 0) _exit(126);
  if (inherited_fd >= 0 && fcntl(inherited_fd, F_SETFD, 0) != 0) _exit(126);
  for (const EnvironmentChange& change : environment) {
    if (change.unset) unsetenv(change.name.c_str());
    else setenv(change.name.c_str(), changed_value(change, getenv(change.name.c_str())).c_str(), 1);
  }
  char byte = 0;
  if (read(go_[0], &byte, 1) != 1) _exit(126);
  std::vector<char*> argv;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  // The faults this process took before it became the command (its events start at exec): the
  // kernel's count for the command includes them.
  rusage before_exec{};
  getrusage(RUSAGE_SELF, &before_exec);
  const auto faults = static_cast<std::uint64_t>(before_exec.ru_minflt + before_exec.ru_majflt);
  (void)!write(exec_error_[1], &faults, sizeof(faults));
  execvp(argv[0], argv.data());
  int error = errno;
  (void)!write(exec_error_[1], &error, sizeof(error));
  _exit(127);
}

bool Workload::attach(pid_t pid, Failure& why) {
  if (kill(pid, 0) != 0) {
    why = Failure{errno, "no process " + std::to_string(pid) + " to attach to (it may have exited)",
                  FailureKind::no_such_process};
    return false;
  }
  pid_ = pid;
  attached_ = true;
  name_ = os::task_name(pid).value_or("");
  return true;
}

int Workload::exit_fd() {
#ifdef SYS_pidfd_open
  if (!exit_fd_asked_ && pid_ > 0) exit_fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
#endif
  exit_fd_asked_ = true;
  return exit_fd_;
}

std::vector<pid_t> Workload::targets() const {
  if (!attached_) return {pid_};
  std::vector<pid_t> threads;
  for (int tid : os::thread_ids(pid_)) threads.push_back(static_cast<pid_t>(tid));
  return threads;
}

bool Workload::let_go(Failure& why) {
  started_ns_ = measure::now_ns();
  if (attached_) {
    stat_before_ = stat_last_ = read_process_stat(pid_);
    return true;
  }
  (void)!send(go_[1], "x", 1, MSG_NOSIGNAL);  // EPIPE where the command died at the door: its end says how
  close(std::exchange(go_[1], -1));
  if (read(exec_error_[0], &faults_before_exec_, sizeof(faults_before_exec_)) != static_cast<ssize_t>(sizeof(faults_before_exec_))) {
    faults_before_exec_ = 0;
  }
  int exec_errno = 0;
  if (read(exec_error_[0], &exec_errno, sizeof(exec_errno)) == static_cast<ssize_t>(sizeof(exec_errno))) {
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
    why = Failure{exec_errno, "cannot run " + program_, FailureKind::command_not_started};
    return false;
  }
  return true;
}

bool Workload::ended(bool stop_requested, bool interrupted, double attach_seconds, const std::function<void()>& stop_counting) {
  const std::uint64_t now = measure::now_ns();
  if (attached_) {
    if (now - last_stat_ns_ > 100'000'000ULL) {
      if (ProcessStat current = read_process_stat(pid_); current.alive) stat_last_ = current;
      last_stat_ns_ = now;
    }
    if (!stop_requested && kill(pid_, 0) == 0 && !is_zombie(pid_) &&
        !(attach_seconds > 0 && static_cast<double>(now - started_ns_) >= attach_seconds * 1e9)) {
      return false;
    }
    if (stop_counting) stop_counting();
    if (ProcessStat current = read_process_stat(pid_); current.alive) stat_last_ = current;
    return true;
  }
  if (stop_requested && !terminated_) {
    signal_tree(pid_, SIGTERM);
    terminated_ = true;
  }
  if (interrupted && !interrupted_at_) interrupted_at_ = now;
  static constexpr std::pair<std::uint64_t, int> kEscalation[] = {
      {1'000'000'000ULL, SIGINT}, {4'000'000'000ULL, SIGTERM}, {9'000'000'000ULL, SIGKILL}};
  if (interrupted_at_ && escalation_ < 3 && now - interrupted_at_ >= kEscalation[escalation_].first) {
    signal_tree(pid_, kEscalation[escalation_++].second);
  }
  return wait4(pid_, &wait_status_, WNOHANG, &usage_) == pid_;
}

void Workload::abandon() {
  if (attached_ || pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

void Workload::collect(Result& result) const {
  if (attached_) {
    // Not our child: its CPU and faults while watched, from /proc/PID/stat.
    result.user_ns = (stat_last_.user_ticks - stat_before_.user_ticks) * 1'000'000'000ULL / ticks_per_second();
    result.system_ns = (stat_last_.system_ticks - stat_before_.system_ticks) * 1'000'000'000ULL / ticks_per_second();
    result.minor_faults = stat_last_.minor_faults - stat_before_.minor_faults;
    result.major_faults = stat_last_.major_faults - stat_before_.major_faults;
    return;
  }
  auto ns = [](const timeval& time) {
    return static_cast<std::uint64_t>(time.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(time.tv_usec) * 1000ULL;
  };
  result.faults_before_exec = faults_before_exec_;
  result.exit_code = WIFEXITED(wait_status_) ? WEXITSTATUS(wait_status_) : 128 + WTERMSIG(wait_status_);
  result.signal = WIFSIGNALED(wait_status_) ? WTERMSIG(wait_status_) : 0;
  result.user_ns = ns(usage_.ru_utime);
  result.system_ns = ns(usage_.ru_stime);
  result.minor_faults = static_cast<std::uint64_t>(usage_.ru_minflt);
  result.major_faults = static_cast<std::uint64_t>(usage_.ru_majflt);
}

}  // namespace memcost::trace::detail
