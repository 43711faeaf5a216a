// Tracing with perf events (see tracer.hpp for the contract): run() in named steps over the
// tracer's units, as perf builds its own: the workload (workload.hpp), the fault sources
// (fault_source.hpp), the other kernel events (kernel_events.hpp) in one event list
// (event_list.hpp), and the loop (loop.hpp) over the readers (record_reader, preload_reader).
#include "trace/tracer.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <optional>
#include <utility>

#include "trace/perf/event_list.hpp"
#include "trace/sources/fault_source.hpp"
#include "trace/sources/kernel_events.hpp"
#include "trace/preload/reader.hpp"
#include "trace/perf/record_reader.hpp"
#include "trace/run/loop.hpp"
#include "trace/run/workload.hpp"
#include "memcost/measure.hpp"

namespace memcost::trace {
namespace {

using namespace detail;

volatile sig_atomic_t g_stop_requested = 0;  // SIGTERM: end the command now
volatile sig_atomic_t g_interrupted = 0;     // SIGINT: the command's, passed on if it is not heeded
void on_terminate(int) { g_stop_requested = 1; }
void on_interrupt(int) { g_interrupted = 1; }

// kernel.perf_event_paranoid, or -1 (everything allowed) where the file is missing.
int perf_paranoid() { return os::perf_event_paranoid().value_or(-1); }

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
      : options_(options), sink_(sink), status_(status), run_{options, options.attach_pid > 0}, reader_(options, sink) {}

  ~Tracing() {
    for (int fd : preload_pipe_) {
      if (fd >= 0) close(fd);
    }
    if (python_releases_fd_ >= 0) close(python_releases_fd_);
  }

  // Tracepoints for the mapping calls, or else the interposer; decided by the failure's kind.
  bool choose_call_source() {
    Failure no_kernel_calls = calls_.check();
    const bool preloading = !no_kernel_calls.ok();
    if (preloading && (options_.preload_library.empty() || access(options_.preload_library.c_str(), R_OK) != 0)) {
      return fail(no_kernel_calls);
    }
    if (run_.attaching && !workload_.attach(options_.attach_pid, status_)) return false;
    if (run_.attaching && preloading) {
      return fail(Failure{no_kernel_calls.error, "attaching to a running process needs the kernel's tracepoints: " +
                                                     no_kernel_calls.message(), FailureKind::not_supported});
    }
    result_.call_source = preloading ? "LD_PRELOAD interposer (mmap, munmap, mremap, madvise; malloc, calloc, realloc, "
                                       "free of at least " + std::to_string(options_.preload_min_bytes) +
                                       " bytes), timed in user space; tracepoints unavailable: " + no_kernel_calls.message()
                                     : "perf tracepoints raw_syscalls:sys_enter and sys_exit, filtered in the kernel to "
                                       "mmap, munmap, mremap, brk and madvise";
    if (!preloading) return true;
    if (pipe2(preload_pipe_, O_CLOEXEC) != 0) return fail(errno_failure("pipe2"));
    fcntl(preload_pipe_[0], F_SETFL, O_NONBLOCK);
    preload_.emplace(preload_pipe_[0], reader_.unwinder(), sink_);
    return true;
  }

  // The command, forked and waiting at the door until the events are on it (a process attached to is already).
  bool start_workload() {
    if (!run_.attaching) {
      // The number the BPF counter's array of GIL releases will have in this process, taken now
      // (the command's environment names it) and filled once the counter is open (open_events).
      // A CPython process maps the array through pidfd_getfd, which needs the rights of a
      // tracer over this process: root, as the counter does.
      if (geteuid() == 0 && options_.python_frames && !options_.preload_library.empty()) {
        python_releases_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      if (!workload_.start(options_.command, command_environment(), options_.command_stdout_fd, preload_pipe_[1], status_)) {
        return false;
      }
      if (preload_pipe_[1] >= 0) close(std::exchange(preload_pipe_[1], -1));
    }
    run_.command = workload_.pid();
    return true;
  }

  // The fault sources chosen and the buffers sized; on each CPU, on the command (its threads and
  // children follow by inheritance) or on each thread of the process attached to: the sources'
  // events (the first owns the CPU's buffer), the cpu-clock sampler and the calls' tracepoints.
  bool open_events() {
    const std::vector<pid_t> targets = workload_.targets();
    if (targets.empty()) {
      return abandon(Failure{ESRCH, "no threads under /proc/" + std::to_string(workload_.pid()) + "/task",
                             FailureKind::no_such_process});
    }
    std::size_t pages = lockable_pages();
    sources_ = choose_fault_sources(run_, preload_ ? &*preload_ : nullptr, result_);
    for (const auto& source : sources_) pages = source->buffer_pages(pages);
    events_.emplace(reader_.events, reader_.buffers, pages);
    for (const auto& source : sources_) source->sized(events_->buffer_bytes());
    for (const auto& source : sources_) {
      if (const int slots = source->python_release_slots(); slots >= 0 && python_releases_fd_ >= 0) {
        (void)dup3(slots, python_releases_fd_, O_CLOEXEC);  // failing, the processes find /dev/null and go without
      }
    }
    cpu_.emplace(run_, result_);  // after the counter: the kernel's symbols then name its programs too
    reader_.kernel = cpu_->kernel();
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    for (int cpu = 0; cpu < cpus; ++cpu) {
      if (!open_on_cpu(targets, cpu)) return false;
    }
    calls_.close_check();  // the command's events now hold the tracepoints
    result_.buffer_bytes = events_->buffer_bytes();
    result_.stack_bytes = run_.stack_bytes;
    return true;
  }

  // The window opens: the command goes through the door (or the events are enabled on the
  // process attached to) and the loop reads until it has ended.
  bool trace_until_done() {
    // The tracer must keep up with the kernel, or records are lost: ahead of ordinary processes
    // where allowed (root). Only this process's own priority, never the command's.
    (void)setpriority(PRIO_PROCESS, 0, -10);
    if (options_.window_opened) options_.window_opened();
    started_ns_ = measure::now_ns();
    started_wall_s_ = time(nullptr) - 1;  // file times are whole seconds, and may lag the clock a tick
    reader_.started(workload_.pid(), started_ns_, workload_.name());
    if (!workload_.let_go(status_)) return false;
    if (run_.attaching && !start_watching()) return false;
    result_.started = true;

    TraceLoop loop(options_, reader_, preload_ ? &*preload_ : nullptr, sources_, sink_);
    auto stop_counting = [&] {
      for (const auto& source : sources_) source->stop_counting(*events_);
    };
    const LoopCounts counts = loop.run(workload_.pid(), workload_.exit_fd(), started_ns_,
                                       small_buffers(sources_, events_->buffer_bytes()), [&] {
      return workload_.ended(g_stop_requested, g_interrupted, options_.attach_seconds, stop_counting);
    });
    if (run_.attaching) events_->disable();  // it goes on running
    result_.pauses = counts.pauses;
    result_.paused_ns = counts.paused_ns;
    result_.kernel_stops = counts.kernel_stops;
    result_.interrupted = g_interrupted || g_stop_requested;
    result_.started_ns = started_ns_;
    result_.wall_ns = measure::now_ns() - started_ns_;
    if (options_.window_closed) options_.window_closed();
    loop.finish();
    result_.unnamed_code_stacks = reader_.unwinder().unnamed_jit_stacks();
    result_.python_blocks_refused = reader_.unwinder().python_blocks_refused();
    result_.refused_perf_maps = reader_.unwinder().refused_perf_maps();
    remove_perf_maps_asked_for();
    return true;
  }

  // How it was counted, and what the kernel accounted.
  Result collect() {
    for (const auto& source : sources_) source->describe(result_, *events_);
    result_.lost_records = reader_.lost;
    result_.malformed_records = reader_.malformed + (preload_ ? preload_->malformed_records() : 0);
    result_.malformed_bytes = preload_ ? preload_->malformed_bytes() : 0;
    result_.unwind_failures = reader_.unwind_failures();
    result_.stacks_unwound = reader_.unwinder().unwound();
    result_.stacks_unwound_by_rules = reader_.unwinder().unwound_by_rules();
    workload_.collect(result_);
    return result_;
  }

  [[nodiscard]] const Result& result() const { return result_; }

  // Interrupted before the command went through the door: it goes, and nothing was recorded.
  void abandon_before_start() {
    abandon(Failure{0, "interrupted before the command started", FailureKind::interrupted});
  }

 private:
  // What the command's environment gets: the preload library (first, with the pipe it writes
  // to; or, for Python stacks alone, after the command's own preloads, so that an allocator it
  // preloads keeps its place), the JIT runtimes' flags (kNodeOptions, kJavaOptions, CPython's
  // PYTHONPERFSUPPORT), and the
  // library's settings.
  std::vector<EnvironmentChange> command_environment() const {
    std::vector<EnvironmentChange> changes;
    if (preload_) {
      changes.push_back({"LD_PRELOAD", options_.preload_library, ':', true});
      changes.push_back({"MEMCOST_PRELOAD_FD", std::to_string(preload_pipe_[1])});
    } else if (options_.python_frames && !options_.preload_library.empty() &&
               access(options_.preload_library.c_str(), R_OK) == 0) {
      changes.push_back({"LD_PRELOAD", options_.preload_library, ':', false});
      changes.push_back({"MEMCOST_PRELOAD_FD", "", 0, false, true});
    }
    if (options_.runtime_flags) {
      changes.push_back({"NODE_OPTIONS", kNodeOptions, ' '});
      changes.push_back({"JAVA_TOOL_OPTIONS", kJavaOptions, ' '});
      // CPython 3.12+ then names every Python function in perf's map through a trampoline of its
      // own, so that a fault taken in native code (a PyTorch op) is named at the Python function
      // that called it; older versions ignore the variable. What the user set stays.
      if (getenv("PYTHONPERFSUPPORT") == nullptr) changes.push_back({"PYTHONPERFSUPPORT", "1"});
    }
    if (python_releases_fd_ >= 0) {
      changes.push_back({"MEMCOST_PYTHON_RELEASES", std::to_string(getpid()) + ":" + std::to_string(python_releases_fd_)});
    }
    changes.push_back({"MEMCOST_PRELOAD_MIN_BYTES", std::to_string(options_.preload_min_bytes)});
    changes.push_back({"MEMCOST_PRELOAD_PYTHON", options_.python_frames ? "1" : "0"});
    return changes;
  }

  // The buffer the kernel would lock for each CPU, and a copied stack that fits it (event_list.hpp).
  std::size_t lockable_pages() {
    const bool privileged = geteuid() == 0;
    rlimit memlock{};
    getrlimit(RLIMIT_MEMLOCK, &memlock);
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t pages = lockable_buffer_pages(
        options_.buffer_pages, page, privileged, os::perf_event_mlock_kb().value_or(0) * 1024,
        memlock.rlim_cur == RLIM_INFINITY ? (1ULL << 40) : memlock.rlim_cur, sysconf(_SC_NPROCESSORS_CONF));
    run_.stack_bytes = privileged ? options_.stack_bytes : fitting_stack_bytes(options_.stack_bytes, pages * page);
    return pages;
  }

  // Every event of `cpu`: on each target the sources', the sampler's and the tracepoints'; then
  // the sources' for the CPU as a whole. An offline CPU has none; a thread that ended is passed.
  bool open_on_cpu(const std::vector<pid_t>& targets, int cpu) {
    for (pid_t target : targets) {
      Opened opened = Opened::ok;
      for (const auto& source : sources_) {
        if (opened = source->open(target, cpu, *events_); opened != Opened::ok) {
          if (opened == Opened::failed) return abandon(source->failure());
          break;
        }
      }
      if (opened == Opened::offline) return true;
      if (opened == Opened::gone) continue;
      Failure why;
      if (!cpu_->open(target, cpu, *events_, why) || !calls_.open(run_, target, cpu, *events_, why)) return abandon(why);
    }
    for (const auto& source : sources_) {
      if (source->open_cpu(cpu, *events_) == Opened::failed) return abandon(source->failure());
    }
    return true;
  }

  // Attached: its events enabled and counted from now. The mappings are listed after the events
  // are enabled: one the process makes in between is both listed and recorded (its own call,
  // later, replaces the listing), where listing first left a mapping made before the enable
  // unknown and its faults unattributed.
  bool start_watching() {
    for (const auto& source : sources_) {
      if (!source->start_counting(workload_.pid())) return abandon(source->failure());
    }
    events_->enable();
    report_existing_mappings(workload_.pid(), started_ns_, sink_);
    return true;
  }

  // The perf maps that node and the JVM wrote because memcost asked (kNodeOptions, kJavaOptions),
  // now read: removed, so that /tmp does not keep one per traced process. Only a map of a process
  // of the traced tree written while it ran, and only when the user asked for none.
  void remove_perf_maps_asked_for() {
    if (run_.attaching || !options_.runtime_flags || asks_for_perf_maps(options_.command)) return;
    const auto started_s = static_cast<time_t>(started_wall_s_);
    for (int pid : reader_.processes()) {
      const std::string path = perf_map_path(pid);
      struct stat file {};
      if (stat(path.c_str(), &file) == 0 && S_ISREG(file.st_mode) && file.st_mtime >= started_s) unlink(path.c_str());
    }
  }

  bool fail(Failure why) {
    status_ = std::move(why);
    return false;
  }

  // A failure once the command exists: it goes (a process attached to is left as it was).
  bool abandon(Failure why) {
    workload_.abandon();
    return fail(std::move(why));
  }

  const Options& options_;
  Sink& sink_;
  Failure& status_;
  RunSetting run_;
  Result result_;
  RecordReader reader_;
  CallTracepoints calls_;
  int preload_pipe_[2] = {-1, -1};
  int python_releases_fd_ = -1;  // the counter's GIL releases (MEMCOST_PYTHON_RELEASES), or /dev/null until it opens
  std::optional<PreloadReader> preload_;
  Workload workload_;
  std::vector<std::unique_ptr<FaultSource>> sources_;  // before the events: the counter outlives its outputs' use
  std::optional<EventList> events_;
  std::optional<CpuSampler> cpu_;
  std::uint64_t started_ns_ = 0;
  std::int64_t started_wall_s_ = 0;  // the window's opening, wall-clock seconds (for file times)
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
  const bool set_up = tracing.choose_call_source() && tracing.start_workload() && tracing.open_events();
  // A step that failed because of the interrupt (the command waiting at the door ended by the
  // same Ctrl-C, so its events could not be opened) is the interrupt, not a failure.
  if (g_interrupted || g_stop_requested) {
    tracing.abandon_before_start();
    return tracing.result();
  }
  if (!set_up) return tracing.result();
  if (!tracing.trace_until_done()) return tracing.result();
  Result result = tracing.collect();
  if (options.traced) options.traced(result);
  return result;
}

}  // namespace memcost::trace
