// Tracing with perf events (see tracer.hpp for the contract): run() in named steps over the
// tracer's units: perf.hpp, tracefs.hpp, unwind.hpp, record_reader, fault_counter, preload_reader, process_tree.
#include "trace/tracer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <csignal>
#include <utility>

#include "trace/fault_counter.hpp"
#include "trace/perf.hpp"
#include "trace/preload_reader.hpp"
#include "trace/process_tree.hpp"
#include "trace/record_reader.hpp"
#include "trace/tracefs.hpp"

namespace memcost::trace {
namespace {

using namespace detail;

volatile sig_atomic_t g_stop_requested = 0;  // SIGTERM: end the command now
volatile sig_atomic_t g_interrupted = 0;     // SIGINT: the command's, passed on if it is not heeded
void on_terminate(int) { g_stop_requested = 1; }
void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

std::string Failure::message() const {
  return error ? what + ": " + std::strerror(error) + " (errno " + std::to_string(error) + ")" : what;
}

namespace {

// kernel.perf_event_paranoid, or -1 (everything allowed) where the file is missing.
int perf_paranoid() { return os::perf_event_paranoid().value_or(-1); }

}  // namespace

namespace {

// What JIT runtimes need for their compiled functions to be named (docs/trace.md, "JIT-compiled
// code"): node writes /tmp/perf-PID.map as it compiles, and gives interpreted functions a copy of
// the interpreter's entry each, so that they have an address of their own in the map; the JVM
// writes its map at exit, and keeps frame pointers in compiled code so that its frames unwind.
// --perf-basic-prof-only-functions, not --perf-basic-prof: the latter also has V8 write an
// isolate-*-v8.log into the command's working folder, which no NODE_OPTIONS switch turns off.
constexpr const char* kNodeOptions = "--perf-basic-prof-only-functions --interpreted-frames-native-stack";
constexpr const char* kJavaOptions = "-XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:+PreserveFramePointer";

// Whether the command or its environment asks a runtime for perf's map itself (node's
// --perf-basic-prof or --perf-prof, the JVM's PerfMap switches, CPython's -X perf or
// PYTHONPERFSUPPORT): then the maps are the user's, and stay.
bool asks_for_perf_maps(const std::vector<std::string>& command) {
  auto asks = [](std::string_view words) {
    return words.find("perf-basic-prof") != std::string_view::npos || words.find("perf-prof") != std::string_view::npos ||
           words.find("PerfMap") != std::string_view::npos || words == "perf";
  };
  for (const char* name : {"NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"}) {
    const char* value = getenv(name);
    if (value && asks(value)) return true;
  }
  const char* python = getenv("PYTHONPERFSUPPORT");
  if (python && *python && std::string_view(python) != "0") return true;
  for (const std::string& word : command) {
    if (asks(word)) return true;
  }
  return false;
}

// `words` added after what the variable holds (the user's own settings come first and stay).
void append_to_environment(const char* name, const char* words) {
  const char* existing = getenv(name);
  setenv(name, existing && *existing ? (std::string(existing) + " " + words).c_str() : words, 1);
}

}  // namespace

Failure supported() {
  // Above 2 (a Debian patch) users may not use perf events at all.
  if (geteuid() != 0 && perf_paranoid() > 2) {
    return Failure{0,
                   "kernel.perf_event_paranoid " + std::to_string(perf_paranoid()) +
                       " denies perf events to users: run memcost trace with sudo, or as root `sysctl "
                       "kernel.perf_event_paranoid=2` (user-mode faults, calls through LD_PRELOAD) or -1 (everything)",
                   FailureKind::not_supported};
  }
  return {};
}

namespace {

// One tracing run, in the steps run() names. Each step returns false with `status` set when it
// cannot go on; what was set up is undone by the destructors and abandon().
class Tracing {
 public:
  Tracing(const Options& options, Sink& sink, Failure& status)
      : options_(options), sink_(sink), status_(status), attaching_(options.attach_pid > 0),
        reader_(options, sink), preload_(-1, reader_.unwinder(), sink) {}

  ~Tracing() {
    for (int fd : {preload_pipe_[0], preload_pipe_[1], go_[1], exec_error_[0], check_fd_}) {
      if (fd >= 0) close(fd);
    }
  }

  // Tracepoints for the mapping calls, or else the interposer; decided by the failure's kind.
  bool choose_call_source() {
    Tracefs tracefs;
    Failure no_kernel_calls = kernel_calls(tracefs, tracepoints_, check_fd_);
    preloading_ = !no_kernel_calls.ok();
    if (preloading_ && (options_.preload_library.empty() || access(options_.preload_library.c_str(), R_OK) != 0)) {
      return fail(no_kernel_calls);
    }
    if (attaching_ && kill(options_.attach_pid, 0) != 0) {
      return fail(Failure{errno, "no process " + std::to_string(options_.attach_pid) + " to attach to (it may have exited)",
                          FailureKind::no_such_process});
    }
    if (attaching_ && preloading_) {
      return fail(Failure{no_kernel_calls.error, "attaching to a running process needs the kernel's tracepoints: " +
                                                     no_kernel_calls.message(), FailureKind::not_supported});
    }
    if (preloading_) tracepoints_.clear();
    result_.call_source = preloading_ ? "LD_PRELOAD interposer (mmap, munmap, mremap, madvise; malloc, calloc, realloc, "
                                        "free of at least " + std::to_string(options_.preload_min_bytes) +
                                        " bytes), timed in user space; tracepoints unavailable: " + no_kernel_calls.message()
                                      : "perf tracepoints raw_syscalls:sys_enter and sys_exit, filtered in the kernel to "
                                        "mmap, munmap, mremap, brk and madvise";
    if (preloading_ && pipe2(preload_pipe_, O_CLOEXEC) != 0) return fail(failed("pipe2"));
    return true;
  }

  // The command, forked and waiting at the door until the events are on it; or the process attached to.
  bool start_command() {
    if (attaching_) {
      child_ = options_.attach_pid;
      return true;
    }
    if (pipe2(go_, O_CLOEXEC) != 0 || pipe2(exec_error_, O_CLOEXEC) != 0) return fail(failed("pipe2"));
    const pid_t tracer = getpid();
    child_ = fork();
    if (child_ < 0) return fail(failed("fork"));
    if (child_ == 0) become_the_command(tracer);
    close(std::exchange(go_[0], -1));
    close(std::exchange(exec_error_[1], -1));
    if (preloading_) {
      close(std::exchange(preload_pipe_[1], -1));
      fcntl(preload_pipe_[0], F_SETFL, O_NONBLOCK);
      preload_.read_from(preload_pipe_[0]);
    }
    return true;
  }

  // A page-fault event per CPU on the command (its threads and children follow by inheritance)
  // or on each thread of the process attached to, owning that CPU's ring buffer; the cpu-clock
  // sampler and the syscall tracepoints write into the same buffer.
  bool open_events() {
    std::vector<pid_t> targets = target_threads();
    if (targets.empty()) {
      return abandon(Failure{ESRCH, "no threads under /proc/" + std::to_string(child_) + "/task",
                             FailureKind::no_such_process});
    }
    size_buffers();
    descriptors_.buffers = &reader_.buffers;
    count_in_kernel();  // first: the kernel's symbols, read next, then name its programs too
    // Without the in-kernel counter, every fault is a record: its address alone, the touching stacks
    // sampled (touch_samples_per_second), or (0) each with its stack, as --raw and --sample-period need.
    counts_by_address_ = !counter_ && options_.touch_samples_per_second > 0;
    if (counter_ || counts_by_address_) buffer_pages_ = std::min<std::size_t>(buffer_pages_, options_.counting_buffer_pages);
    // A record per fault into a small buffer (no privilege to lock more): the kernel stops the
    // command itself every so many faults (open_pacing_event), not only the tracer.
    stop_by_kernel_ = !counter_ && !attaching_ && buffer_pages_ * page_ < (32U << 20);
    // A quarter of what a buffer holds, so that the faults of a few threads before the stop takes
    // effect (it comes late: up to about 6,000 faults after the overflow was measured) still fit.
    // A record is 40 bytes with address records, after a second of touching samples' room; with a
    // stack per fault, the copied stack and about 150 bytes more.
    const std::uint64_t record_bytes = counts_by_address_ ? 40 : stack_bytes_ + 150;
    const std::uint64_t sample_bytes = counts_by_address_ ? std::uint64_t{options_.touch_samples_per_second} * (stack_bytes_ + 150) : 0;
    const std::uint64_t room = buffer_pages_ * page_ > 2 * sample_bytes ? buffer_pages_ * page_ - sample_bytes : buffer_pages_ * page_ / 2;
    pace_faults_ = std::max<std::uint64_t>(16, room / record_bytes / 4);
    choose_cpu_sampling();
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    for (int cpu = 0; cpu < cpus; ++cpu) {
      int owner_fd = -1;  // the first event on this CPU owns its ring buffer; the others write into it
      for (pid_t target : targets) {
        const int fault_fd = open_fault_event(target, cpu, owner_fd);
        if (fault_fd == kOffline) break;
        if (fault_fd == kGone) continue;
        if (fault_fd < 0) return false;
        if (stop_by_kernel_ && !open_pacing_event(target, cpu)) return false;
        if (cpu_sampling_ && !open_cpu_clock(target, cpu, owner_fd)) return false;
        if (!open_tracepoints(target, cpu, owner_fd)) return false;
      }
      if (counter_ && owner_fd >= 0 && !open_touch_output(cpu, owner_fd)) return false;
    }
    if (check_fd_ >= 0) close(std::exchange(check_fd_, -1));  // the command's events now hold the tracepoints
    return true;
  }

  // The records the buffers and the preload pipe hold now, delivered; returns the time up to which
  // every record of both has been (the earlier of the two: a call's pipe record can come well after
  // the perf records of other threads' events at the same moment).
  std::uint64_t read_records(Hold& hold) {
    const std::uint64_t settled = reader_.drain(false, [&] { hold.hold(); });
    return preloading_ ? std::min(settled, preload_.drain()) : settled;
  }

  // The window opens: the command goes through the door (or the events are enabled on the
  // process attached to) and the tracer reads until it has ended, holding the traced tree still
  // whenever a buffer fills.
  bool trace_until_done() {
    // The tracer must keep up with the kernel, or records are lost: ahead of ordinary processes
    // where allowed (root). Only this process's own priority, never the command's.
    (void)setpriority(PRIO_PROCESS, 0, -10);
    if (options_.window_opened) options_.window_opened();
    started_ns_ = monotonic_ns();
    started_wall_s_ = time(nullptr) - 1;  // file times are whole seconds, and may lag the clock a tick
    if (!(attaching_ ? start_watching() : let_the_command_through())) return false;
    result_.started = true;

    std::vector<pollfd> polls;
    for (const RingBuffer& buffer : reader_.buffers) polls.push_back({buffer.fd, POLLIN, 0});
    Hold hold(child_);
    // A small buffer (no privilege to lock more) overflows within one slow step: hold before each.
    // A large one only once it is filling; counting in the kernel, 16 MiB is large (no record per fault).
    const bool small_buffers = buffer_pages_ * page_ < (counter_ || counts_by_address_ ? (4U << 20) : (32U << 20));
    if (small_buffers) {
      reader_.behind_at = 1.0 / 8;
      reader_.check_every = 64;
    }
    reader_.unwinder().before_slow_work = [&] {
      if (small_buffers || reader_.fullest() > 1.0 / 16) hold.hold();
    };
    std::uint64_t period_started = started_ns_;
    while (true) {
      // perf may deliver its wakeup only at the next tick: look every millisecond as well; counting
      // in the kernel, the buffers carry only samples and calls, and every 10 ms is enough.
      poll(polls.data(), polls.size(), counter_ ? 10 : 1);
      // Stopped by the kernel (open_pacing_event): continued once what it wrote before the stop
      // has been read, below. Looked at before the tracer's own hold, whose stop it would report.
      const bool stopped = stop_by_kernel_ && stopped_by_kernel();
      // Behind the kernel (a buffer a quarter full): hold the traced tree still while catching
      // up, rather than lose records. It is told nothing.
      if (reader_.fullest() > reader_.behind_at) hold.hold();
      std::uint64_t settled = read_records(hold);
      const std::uint64_t now = monotonic_ns();
      const bool period_ended = options_.period_ns && options_.period_ended && now - period_started >= options_.period_ns;
      if (counter_) {
        // A window's end takes what is new in the open generations too, so that it holds its own faults.
        if (period_ended) sweep_counts(Sweep::window);
        else if (now - last_sweep_ns_ >= kSweepNs) sweep_counts(Sweep::ended);
        settled = std::min(settled, last_sweep_ns_);
      }
      sink_.settle(settled);
      // A stop that came while the buffers were read (the kernel's, or the tracer's own hold from
      // inside the read): what was written up to it is read too before the command goes on, so that
      // a buffer never starts the next quarter with the last one unread.
      const bool stopped_while_reading = stop_by_kernel_ && !stopped && (hold.holding() || stopped_by_kernel());
      if (stopped_while_reading) sink_.settle(read_records(hold));
      const bool kernel_stopped = stopped || (stopped_while_reading && !hold.holding());
      hold.release();
      if (kernel_stopped) {
        kill(child_, SIGCONT);
        ++result_.kernel_stops;
      }
      if (period_ended) {
        period_started += (now - period_started) / options_.period_ns * options_.period_ns;  // on the grid, none doubled
        reader_.unwinder().name_jit_frames();
        options_.period_ended();
      }
      if (attaching_ ? watch_ended() : command_ended()) break;
    }
    reader_.unwinder().before_slow_work = nullptr;
    result_.pauses = hold.pauses;
    result_.paused_ns = hold.paused_ns;
    result_.interrupted = g_interrupted || g_stop_requested;
    result_.wall_ns = monotonic_ns() - started_ns_;
    if (options_.window_closed) options_.window_closed();
    reader_.drain(true);
    if (preloading_) preload_.drain(true);
    sweep_counts(Sweep::last);
    reader_.unwinder().name_jit_frames();  // a map written at exit is there now
    result_.unnamed_code_stacks = reader_.unwinder().unnamed_jit_stacks();
    result_.refused_perf_maps = reader_.unwinder().refused_perf_maps();
    remove_perf_maps_asked_for();
    sink_.settle(UINT64_MAX);
    return true;
  }

  // The perf maps that node and the JVM wrote because memcost asked (kNodeOptions, kJavaOptions),
  // now read: removed, so that /tmp does not keep one per traced process. Only a map of a process
  // of the traced tree written while it ran, and only when the user asked for none.
  void remove_perf_maps_asked_for() {
    if (attaching_ || !options_.runtime_flags || asks_for_perf_maps(options_.command)) return;
    const auto started_s = static_cast<time_t>(started_wall_s_);
    for (int pid : reader_.processes()) {
      const std::string path = perf_map_path(pid);
      struct stat file {};
      if (stat(path.c_str(), &file) == 0 && S_ISREG(file.st_mode) && file.st_mtime >= started_s) unlink(path.c_str());
    }
  }

  // What the kernel accounted: the command's exit and rusage, or the attached process's /proc counters.
  Result collect() {
    result_.fault_source = kernel_faults_ ? "perf software event page-faults, user and kernel mode"
                                          : "perf software event page-faults, user mode only (kernel-mode sampling not "
                                            "permitted)";
    result_.lost_records = reader_.lost;
    result_.malformed_records = reader_.malformed + preload_.malformed_records();
    result_.malformed_bytes = preload_.malformed_bytes();
    if (counts_by_address_) {
      result_.fault_source += ", every fault recorded by its address (no stack); touching stacks sampled by a second "
                              "page-faults event, " + std::to_string(options_.touch_samples_per_second) + " a second per CPU";
      result_.touch_samples_per_second = options_.touch_samples_per_second;
    }
    if (counter_) {
      result_.fault_source = "BPF programs on the tracepoints exceptions:page_fault_user and page_fault_kernel, every "
                             "fault counted in the kernel per 2 MiB region; touching stacks sampled by the same "
                             "programs, about " + std::to_string(options_.touch_samples_per_second) +
                             " a second per CPU, copied by perf's bpf-output event; faults taken inside system calls "
                             "without an exception (MAP_POPULATE, MADV_POPULATE_*, mlock, a driver pinning) counted per "
                             "call on raw_syscalls sys_enter and sys_exit from the thread's own fault counters, with "
                             "the call's stack";
      result_.kernel_faults = counter_->faults();
      result_.kernel_faults_uncounted = counter_->uncounted();
      result_.kernel_faults_in_calls = counter_->in_calls();
    }
    result_.unwind_failures = reader_.unwind_failures();
    if (attaching_) {
      // Not our child: its CPU and faults while watched, from /proc/PID/stat.
      result_.user_ns = (stat_last_.user_ticks - stat_before_.user_ticks) * 1'000'000'000ULL / ticks_per_second();
      result_.system_ns = (stat_last_.system_ticks - stat_before_.system_ticks) * 1'000'000'000ULL / ticks_per_second();
      result_.minor_faults = stat_last_.minor_faults - stat_before_.minor_faults;
      result_.major_faults = stat_last_.major_faults - stat_before_.major_faults;
      return result_;
    }
    auto ns = [](const timeval& time) {
      return static_cast<std::uint64_t>(time.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(time.tv_usec) * 1000ULL;
    };
    result_.exit_code = WIFEXITED(wait_status_) ? WEXITSTATUS(wait_status_) : 128 + WTERMSIG(wait_status_);
    result_.signal = WIFSIGNALED(wait_status_) ? WTERMSIG(wait_status_) : 0;
    result_.user_ns = ns(usage_.ru_utime);
    result_.system_ns = ns(usage_.ru_stime);
    result_.minor_faults = static_cast<std::uint64_t>(usage_.ru_minflt);
    result_.major_faults = static_cast<std::uint64_t>(usage_.ru_majflt);
    return result_;
  }

  [[nodiscard]] const Result& result() const { return result_; }

  // Interrupted before the command went through the door: it goes, and nothing was recorded.
  void abandon_before_start() {
    abandon(Failure{0, "interrupted before the command started", FailureKind::interrupted});
  }

 private:
  static constexpr int kOffline = -2, kGone = -3;  // open_fault_event: an offline CPU, a thread that ended

  // The command, or each thread of the process attached to.
  std::vector<pid_t> target_threads() const {
    if (!attaching_) return {child_};
    std::vector<pid_t> targets;
    if (DIR* tasks = opendir(("/proc/" + std::to_string(child_) + "/task").c_str())) {
      while (dirent* entry = readdir(tasks)) {
        if (entry->d_name[0] != '.') targets.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
      }
      closedir(tasks);
    }
    return targets;
  }

  // Attached: the process's counters and mappings as the window opens, its events enabled. The
  // mappings are listed after the events are enabled: one the process makes in between is both
  // listed and recorded (its own call, later, replaces the listing), where listing first left a
  // mapping made before the enable unknown and its faults unattributed.
  bool start_watching() {
    reader_.started(child_, started_ns_, os::task_name(child_).value_or(""));
    // The kernel's own counters (the cross-check of the count) read right before counting starts:
    // the faults a busy process takes between the two are in one and not the other.
    stat_before_ = stat_last_ = read_process_stat(child_);
    if (counter_ && !counter_->trace(child_, false)) return abandon(failed("adding the process to the in-kernel counter"));
    for (int fd : descriptors_.fds) ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    report_existing_mappings(child_, started_ns_, sink_);
    return true;
  }

  // The command goes through the door; false with status_ set when it could not be executed.
  bool let_the_command_through() {
    reader_.started(child_, started_ns_, options_.command[0].substr(options_.command[0].rfind('/') + 1));
    (void)!write(go_[1], "x", 1);
    close(std::exchange(go_[1], -1));
    if (read(exec_error_[0], &result_.faults_before_exec, sizeof(result_.faults_before_exec)) !=
        static_cast<ssize_t>(sizeof(result_.faults_before_exec))) {
      result_.faults_before_exec = 0;
    }
    int exec_errno = 0;
    if (read(exec_error_[0], &exec_errno, sizeof(exec_errno)) == static_cast<ssize_t>(sizeof(exec_errno))) {
      waitpid(child_, nullptr, 0);
      return fail(Failure{exec_errno, "cannot run " + options_.command[0], FailureKind::command_not_started});
    }
    return true;
  }

  // Fault time sampling, where kernel samples and kernel symbols are allowed; result_ says which.
  void choose_cpu_sampling() {
    cpu_sampling_ = options_.cpu_sample_period_ns > 0;
    if (!cpu_sampling_) {
      result_.cpu_sampling = "not asked for";
    } else if (geteuid() != 0 && perf_paranoid() > 1) {
      cpu_sampling_ = false;
      result_.cpu_sampling = "not permitted: kernel-mode samples need root or kernel.perf_event_paranoid <= 1 (it is " +
                             std::to_string(perf_paranoid()) + ")";
    } else if (kernel_ = std::make_unique<KernelSymbols>(); kernel_->empty()) {
      cpu_sampling_ = false;
      result_.cpu_sampling = "not possible: /proc/kallsyms shows no kernel addresses to this user (kernel.kptr_restrict)";
    }
    reader_.kernel = kernel_.get();
  }

  // The in-kernel counter, where it loads: then perf samples only the touching stacks. Not with
  // --raw, whose point is every fault's record.
  void count_in_kernel() {
    if (!options_.count_in_kernel) {
      result_.kernel_counting = "not asked for";
      return;
    }
    std::string why_not;
    counter_ = FaultCounter::open(options_.fault_timing_one_in, options_.touch_samples_per_second, why_not);
    // A process attached to is counted from the window's opening (trace_until_done), with its events.
    if (counter_ && !attaching_ && !counter_->trace(child_, true)) {
      why_not = std::string("the in-kernel counter would not take the process: ") + std::strerror(errno);
      counter_.reset();
    }
    result_.counted_in_kernel = counter_ != nullptr;
    preload_.call_faults_counted_in_kernel = counter_ != nullptr;
    result_.kernel_counting = why_not;
    if (counter_) {
      result_.touch_samples_per_second = options_.touch_samples_per_second;
      result_.fault_timing_one_in = options_.fault_timing_one_in;
    }
  }

  // A tracer that cannot lock large buffers cannot keep up with a fault storm on its own: while it
  // is not running (two busy threads on two CPUs, no priority without privilege) a 4 MiB buffer
  // filled and 6 % of a million faults were lost, though it held the command whenever it ran.
  // So the kernel stops the command itself: a page-fault counter per CPU, inherited by the
  // command's threads, that overflows every `pace_faults_` faults and signals its owner (fcntl
  // O_ASYNC, F_SETOWN, F_SETSIG): SIGSTOP to the command's process, all its threads. The tracer
  // continues it once it has read the buffers (the trace loop). (The fault event itself cannot
  // signal: with an owner, perf signals at every sample, not at its wakeup mark.) A child process
  // the command forks is stopped by the tracer as before: its counters signal the command.
  bool open_pacing_event(pid_t target, int cpu) {
    perf_event_attr attr = base_attr(0, 0);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_PAGE_FAULTS;
    attr.sample_period = pace_faults_;
    attr.exclude_kernel = kernel_faults_ ? 0 : 1;
    const int fd = open_event(attr, target, cpu);
    if (fd < 0) return errno == ENODEV;  // an offline CPU
    descriptors_.fds.push_back(fd);
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETOWN, child_) != 0 || fcntl(fd, F_SETSIG, SIGSTOP) != 0 ||
        fcntl(fd, F_SETFL, flags | O_ASYNC) != 0) {
      return abandon(failed("fcntl(page-fault counter, O_ASYNC, F_SETSIG SIGSTOP)"));
    }
    return true;
  }

  // Whether the kernel has stopped the command (open_pacing_event) since the last look. Only a stop
  // the kernel's wait reports, so that a command running is sent nothing (a SIGCONT handler of its
  // own is not called for nothing). The caller reads the buffers, then continues it.
  bool stopped_by_kernel() {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(child_), &info, WSTOPPED | WNOHANG) == 0 && info.si_pid == child_ &&
           info.si_code == CLD_STOPPED;
  }

  // The page-fault event on `target` and `cpu`; the first on a CPU owns its ring buffer
  // (`owner_fd`, set here). Counting in the kernel, a dummy event in its place (it samples
  // nothing): it carries the target's mappings, names and forks, and owns the buffer the
  // counter's touching samples go to (open_touch_output). kOffline, kGone, or -1 with status_ set.
  int open_fault_event(pid_t target, int cpu, int& owner_fd) {
    const bool sampled = counter_ || counts_by_address_;
    const std::uint64_t sample_type = kFaultSampleType | (sampled ? PERF_SAMPLE_PERIOD : 0);
    perf_event_attr attr = base_attr(sample_type, stack_bytes_);
    if (attaching_) attr.enable_on_exec = 0;  // enabled as the window opens
    attr.type = PERF_TYPE_SOFTWARE;
    // Beside the address records' page-faults event, the stacks come from the minor-fault event: two
    // events on one software event share the kernel's sample data, and the second then wrote no
    // samples at all (Linux 6.18). The faults of big allocations are minor faults.
    attr.config = counter_ ? PERF_COUNT_SW_DUMMY
                           : counts_by_address_ ? PERF_COUNT_SW_PAGE_FAULTS_MIN : PERF_COUNT_SW_PAGE_FAULTS;
    if (counts_by_address_) {
      // The counts are the address records' (open_address_event); perf picks the period that
      // gives this many stacks a second.
      attr.freq = 1;
      attr.sample_freq = options_.touch_samples_per_second;
    } else {
      attr.sample_period = options_.sample_period;
    }
    attr.mmap = 1;
    attr.mmap2 = 1;
    attr.comm = 1;
    attr.comm_exec = 1;
    attr.task = 1;
    attr.watermark = 1;
    attr.wakeup_watermark = static_cast<std::uint32_t>(buffer_pages_ * page_ / 32);
    attr.exclude_kernel = kernel_faults_ ? 0 : 1;
    int fault_fd = open_event(attr, target, cpu);
    if (fault_fd < 0 && kernel_faults_ && (errno == EACCES || errno == EPERM)) {
      // Not allowed to sample in kernel mode: the faults a system call takes for the command
      // (read() into a fresh buffer) are not seen; its own are.
      kernel_faults_ = false;
      attr.exclude_kernel = 1;
      fault_fd = open_event(attr, target, cpu);
    }
    if (fault_fd < 0) {
      if (errno == ENODEV) return kOffline;
      if (attaching_ && errno == ESRCH) return kGone;
      abandon(failed("perf_event_open(page faults)"));
      return -1;
    }
    descriptors_.fds.push_back(fault_fd);
    if (owner_fd >= 0) {
      if (ioctl(fault_fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) {
        abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
        return -1;
      }
    } else {
      owner_fd = fault_fd;
      RingBuffer buffer;
      if (Failure why = map_ring_buffer(fault_fd, buffer_pages_, page_, buffer); !why.ok()) {
        abandon(why);
        return -1;
      }
      reader_.buffers.push_back(buffer);
      result_.buffer_bytes = buffer.data_bytes;
      result_.stack_bytes = stack_bytes_;
    }
    std::uint64_t id = 0;
    ioctl(fault_fd, PERF_EVENT_IOC_ID, &id);
    Event event{EventKind::fault, sample_type};
    event.counted = !sampled;
    reader_.events[id] = event;
    if (counts_by_address_ && !open_address_event(target, cpu, owner_fd, attr.exclude_kernel != 0)) return -1;
    if (cpu_sampling_ && !kernel_faults_) {
      cpu_sampling_ = false;
      result_.cpu_sample_period_ns = 0;
      result_.cpu_sampling = "not permitted: kernel-mode samples need root or kernel.perf_event_paranoid <= 1";
    }
    return fault_fd;
  }

  // The in-kernel counter's touching samples on `cpu` (a perf BPF-output event, every process: the
  // counter sends only the traced ones' faults), into that CPU's ring buffer; false with status_ set.
  // perf copies the user registers and stack of the fault's thread beside what the program sends.
  bool open_touch_output(int cpu, int owner_fd) {
    perf_event_attr attr = base_attr(kTouchSampleType, stack_bytes_);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_BPF_OUTPUT;
    attr.disabled = 0;  // every process's: only the counter decides what is sent
    attr.inherit = 0;
    attr.enable_on_exec = 0;
    const int fd = open_event(attr, -1, cpu);
    if (fd < 0) return abandon(failed("perf_event_open(bpf-output, touching samples)"));
    descriptors_.fds.push_back(fd);
    if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
    if (!counter_->touch_output(cpu, fd)) return abandon(failed("adding the touching samples' event to the counter"));
    std::uint64_t id = 0;
    ioctl(fd, PERF_EVENT_IOC_ID, &id);
    Event event{EventKind::fault, kTouchSampleType};
    event.counted = false;
    event.touch_in_raw = true;
    reader_.events[id] = event;
    return true;
  }

  // Every fault's record without a stack (counts_by_address_): its thread, time and address, 40
  // bytes where a record with the stack copied is over 2 KiB, into the same buffer. What the
  // attribution needs to charge each fault to its mapping; the touching stacks are sampled.
  bool open_address_event(pid_t target, int cpu, int owner_fd, bool user_only) {
    perf_event_attr attr = base_attr(kFaultAddressSampleType, 0);
    if (attaching_) attr.enable_on_exec = 0;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_PAGE_FAULTS;
    attr.sample_period = 1;
    attr.exclude_kernel = user_only ? 1 : 0;
    const int fd = open_event(attr, target, cpu);
    if (fd < 0) {
      if (attaching_ && errno == ESRCH) return true;  // gone since its stack event opened
      return abandon(failed("perf_event_open(page faults, addresses)"));
    }
    descriptors_.fds.push_back(fd);
    if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
    std::uint64_t id = 0;
    ioctl(fd, PERF_EVENT_IOC_ID, &id);
    reader_.events[id] = Event{EventKind::fault, kFaultAddressSampleType};
    return true;
  }

  // The cpu-clock sampler of kernel time on `target` and `cpu`; false with status_ set.
  bool open_cpu_clock(pid_t target, int cpu, int owner_fd) {
    perf_event_attr clock = base_attr(kCpuSampleType, 0);
    clock.type = PERF_TYPE_SOFTWARE;
    clock.config = PERF_COUNT_SW_CPU_CLOCK;
    clock.sample_period = options_.cpu_sample_period_ns;
    clock.exclude_user = 1;  // only time in the kernel is wanted: user-mode ticks are not recorded
    clock.exclude_callchain_user = 1;
    if (attaching_) clock.enable_on_exec = 0;
    const int fd = open_event(clock, target, cpu);
    if (fd < 0 && (errno == EACCES || errno == EPERM)) {
      cpu_sampling_ = false;
      result_.cpu_sample_period_ns = 0;
      result_.cpu_sampling = std::string("not permitted: perf_event_open(cpu-clock): ") + std::strerror(errno);
      return true;
    }
    if (fd < 0) return (attaching_ && errno == ESRCH) || abandon(failed("perf_event_open(cpu-clock)"));
    descriptors_.fds.push_back(fd);
    if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
    std::uint64_t id = 0;
    ioctl(fd, PERF_EVENT_IOC_ID, &id);
    reader_.events[id] = Event{EventKind::cpu, kCpuSampleType};
    result_.cpu_sample_period_ns = options_.cpu_sample_period_ns;
    result_.cpu_sampling = "perf software event cpu-clock every " + std::to_string(options_.cpu_sample_period_ns / 1000) +
                           " µs of each thread's CPU time, kernel mode only, with the kernel call chain; "
                           "kernel functions named in /proc/kallsyms";
    return true;
  }

  // The raw_syscalls tracepoints, filtered to the mapping calls, on `target` and `cpu`; false with status_ set.
  bool open_tracepoints(pid_t target, int cpu, int owner_fd) {
    const std::string filter = mapping_calls_filter();
    for (const auto& [event, format] : tracepoints_) {
      perf_event_attr tp = base_attr(event.sample_type, stack_bytes_);
      tp.type = PERF_TYPE_TRACEPOINT;
      tp.config = format.id;
      if (attaching_) tp.enable_on_exec = 0;
      const int fd = open_event(tp, target, cpu);
      if (fd < 0) {
        if (attaching_ && errno == ESRCH) continue;
        return abandon(failed("perf_event_open(raw_syscalls tracepoint)"));
      }
      descriptors_.fds.push_back(fd);
      if (ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter.c_str()) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_FILTER)"));
      if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
      std::uint64_t id = 0;
      ioctl(fd, PERF_EVENT_IOC_ID, &id);
      reader_.events[id] = event;
    }
    return true;
  }

  // What the in-kernel counter holds of ended generations (all of it at the end), to the sink;
  // the moment up to which every region is now delivered.
  // Every kSweepNs, at a window's end and at the end (`what`); the tracer settles no later than
  // the last sweep, for a region of a generation that ends after it comes only at the next.
  void sweep_counts(Sweep what) {
    if (!counter_) return;
    const std::uint64_t swept_at = monotonic_ns();
    regions_.clear();
    counter_->sweep(what, regions_);
    for (const RegionFaults& region : regions_) sink_.region_faults(region);
    last_sweep_ns_ = what == Sweep::last ? UINT64_MAX : swept_at;
  }
  static constexpr std::uint64_t kSweepNs = 100'000'000;

  // In the forked child: set up, wait at the door, then exec the command (never returns).
  [[noreturn]] void become_the_command(pid_t tracer) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGQUIT, SIG_DFL);
    // A tracer that dies (killed, or crashed) takes the command with it instead of leaving it
    // running unwatched, holding the terminal.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != tracer) _exit(126);
    if (options_.command_stdout_fd >= 0 && dup2(options_.command_stdout_fd, STDOUT_FILENO) < 0) _exit(126);
    const char* existing = getenv("LD_PRELOAD");
    const std::string others = existing && *existing ? existing : "";
    if (preloading_) {
      // The write end stays open across exec, for the library in the command and its children.
      if (fcntl(preload_pipe_[1], F_SETFD, 0) != 0) _exit(126);
      setenv("LD_PRELOAD", (options_.preload_library + (others.empty() ? "" : ":" + others)).c_str(), 1);
      setenv("MEMCOST_PRELOAD_FD", std::to_string(preload_pipe_[1]).c_str(), 1);
    } else if (options_.python_frames && !options_.preload_library.empty() &&
               access(options_.preload_library.c_str(), R_OK) == 0) {
      // For Python stacks alone, after the command's own preloads: an allocator it preloads keeps
      // its place (and a Python run under it goes without Python frames).
      setenv("LD_PRELOAD", ((others.empty() ? "" : others + ":") + options_.preload_library).c_str(), 1);
      unsetenv("MEMCOST_PRELOAD_FD");
    }
    if (options_.runtime_flags) {
      append_to_environment("NODE_OPTIONS", kNodeOptions);
      append_to_environment("JAVA_TOOL_OPTIONS", kJavaOptions);
    }
    setenv("MEMCOST_PRELOAD_MIN_BYTES", std::to_string(options_.preload_min_bytes).c_str(), 1);
    setenv("MEMCOST_PRELOAD_PYTHON", options_.python_frames ? "1" : "0", 1);
    char byte = 0;
    if (read(go_[0], &byte, 1) != 1) _exit(126);
    std::vector<char*> argv;
    for (const std::string& word : options_.command) argv.push_back(const_cast<char*>(word.c_str()));
    argv.push_back(nullptr);
    // The faults this process took before it became the command (its events start at exec):
    // the kernel's count for the command includes them.
    rusage before_exec{};
    getrusage(RUSAGE_SELF, &before_exec);
    const std::uint64_t faults = static_cast<std::uint64_t>(before_exec.ru_minflt + before_exec.ru_majflt);
    (void)!write(exec_error_[1], &faults, sizeof(faults));
    execvp(argv[0], argv.data());
    int error = errno;
    (void)!write(exec_error_[1], &error, sizeof(error));
    _exit(127);
  }

  // Without privilege the kernel locks only perf_event_mlock_kb per CPU plus RLIMIT_MEMLOCK for
  // this user: smaller buffers, and a copied stack small enough for a couple of thousand samples.
  void size_buffers() {
    buffer_pages_ = options_.buffer_pages;
    stack_bytes_ = options_.stack_bytes;
    if (geteuid() == 0) return;
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    rlimit memlock{};
    getrlimit(RLIMIT_MEMLOCK, &memlock);
    const std::uint64_t allowed = std::stoull("0" + read_text("/proc/sys/kernel/perf_event_mlock_kb")) * 1024 +
                                  (memlock.rlim_cur == RLIM_INFINITY ? (1ULL << 40) : memlock.rlim_cur) /
                                      static_cast<std::uint64_t>(std::max(cpus, 1L));
    while (buffer_pages_ > 8 && (buffer_pages_ + 1) * page_ > allowed) buffer_pages_ /= 2;
    const auto fitting = static_cast<std::uint32_t>(buffer_pages_ * page_ / 2048) & ~7U;
    stack_bytes_ = std::max<std::uint32_t>(512, std::min(stack_bytes_, fitting));
  }

  // The command's end, and what an interrupt asks: SIGTERM passed on at once; Ctrl-C not heeded
  // passed on (it may have reached this process alone), then firmer.
  bool command_ended() {
    const std::uint64_t now = monotonic_ns();
    if (g_stop_requested && !terminated_) {
      signal_tree(child_, SIGTERM);
      terminated_ = true;
    }
    if (g_interrupted && !interrupted_at_) interrupted_at_ = now;
    static constexpr std::pair<std::uint64_t, int> kEscalation[] = {
        {1'000'000'000ULL, SIGINT}, {4'000'000'000ULL, SIGTERM}, {9'000'000'000ULL, SIGKILL}};
    if (interrupted_at_ && escalation_ < 3 && now - interrupted_at_ >= kEscalation[escalation_].first) {
      signal_tree(child_, kEscalation[escalation_++].second);
    }
    return wait4(child_, &wait_status_, WNOHANG, &usage_) == child_;
  }

  // The attached process's end, the time being up, or a request to stop; its counters now and then.
  bool watch_ended() {
    const std::uint64_t now = monotonic_ns();
    if (now - last_stat_ns_ > 100'000'000ULL) {
      if (ProcessStat current = read_process_stat(child_); current.alive) stat_last_ = current;
      last_stat_ns_ = now;
    }
    if (g_stop_requested || kill(child_, 0) != 0 || is_zombie(child_) ||
        (options_.attach_seconds > 0 && static_cast<double>(now - started_ns_) >= options_.attach_seconds * 1e9)) {
      // It goes on running: stop the events first, so the counts and the window agree; the
      // in-kernel count before the mapping calls' events, which take an interprocessor call each
      // to disable: a mapping made meanwhile would be missed while its faults were still counted.
      // The kernel's counters (the cross-check) read right after the count stops, as at the start.
      if (counter_) counter_->stop_counting();
      else stop_events();
      if (ProcessStat current = read_process_stat(child_); current.alive) stat_last_ = current;
      if (counter_) stop_events();
      return true;
    }
    return false;
  }

  void stop_events() {
    for (int fd : descriptors_.fds) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  }

  bool fail(Failure why) {
    status_ = std::move(why);
    return false;
  }

  // A failure once the command exists: it goes (a process attached to is left as it was).
  bool abandon(Failure why) {
    if (!attaching_ && child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    return fail(std::move(why));
  }

  const Options& options_;
  Sink& sink_;
  Failure& status_;
  const bool attaching_;
  bool counts_by_address_ = false;  // every fault a record of its address, touching stacks sampled (open_address_event)
  bool stop_by_kernel_ = false;  // the kernel stops the command every pace_faults_ faults (open_pacing_event)
  std::uint64_t pace_faults_ = 0;
  Result result_;
  bool preloading_ = false;
  bool kernel_faults_ = true;
  bool cpu_sampling_ = false;
  std::unique_ptr<KernelSymbols> kernel_;
  std::vector<std::pair<Event, TracepointFormat>> tracepoints_;
  int check_fd_ = -1;  // kernel_calls' event on this process, closed once the command's are open
  std::unique_ptr<FaultCounter> counter_;
  std::vector<RegionFaults> regions_;
  std::uint64_t last_sweep_ns_ = 0;
  int preload_pipe_[2] = {-1, -1}, go_[2] = {-1, -1}, exec_error_[2] = {-1, -1};
  pid_t child_ = 0;
  std::int64_t started_wall_s_ = 0;  // the window's opening, wall-clock seconds (for file times)
  const std::size_t page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t buffer_pages_ = 0;
  std::uint32_t stack_bytes_ = 0;
  RecordReader reader_;
  PreloadReader preload_;
  Descriptors descriptors_;
  std::uint64_t started_ns_ = 0, last_stat_ns_ = 0;
  ProcessStat stat_before_, stat_last_;
  int wait_status_ = 0;
  rusage usage_{};
  bool terminated_ = false;
  std::uint64_t interrupted_at_ = 0;
  int escalation_ = 0;
};

// Ctrl-C and SIGTERM, caught for the length of the run (see the contract for what they mean).
class Interrupts {
 public:
  explicit Interrupts(bool attaching) {
    g_stop_requested = 0;
    g_interrupted = 0;
    struct sigaction interrupt {}, terminate {};
    interrupt.sa_handler = on_interrupt;
    terminate.sa_handler = on_terminate;
    // Attached to a running process, Ctrl-C ends the tracing, which leaves it running.
    sigaction(SIGINT, attaching ? &terminate : &interrupt, &old_int_);
    sigaction(SIGTERM, &terminate, &old_term_);
  }
  ~Interrupts() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace

Result run(const Options& options, Sink& sink, Failure& status) {
  // Caught from the start: a terminal's Ctrl-C reaches the whole process group at any moment, and
  // during set-up (tracefs, events, the command waiting at the door) it means "stop, nothing yet".
  Interrupts interrupts(options.attach_pid > 0);
  Tracing tracing(options, sink, status);
  const bool set_up = tracing.choose_call_source() && tracing.start_command() && tracing.open_events();
  // A step that failed because of the interrupt (the command waiting at the door ended by the
  // same Ctrl-C, so its events could not be opened) is the interrupt, not a failure.
  if (g_interrupted || g_stop_requested) {
    tracing.abandon_before_start();
    return tracing.result();
  }
  if (!set_up) return tracing.result();
  if (!tracing.trace_until_done()) return tracing.result();
  return tracing.collect();
}

}  // namespace memcost::trace
