// `memcost-probe trace -- COMMAND ...`: runs a command under perf events and streams what its
// memory cost the OS: every mapping call (with its call stack and measured duration) and every
// page fault (with its address and call stack). Statistics are the Python side's.
//
// Records (all `sample` lines, told apart by case.record):
//   stack  — one unwound, symbolized call stack, once, before anything refers to its id;
//   call   — one mapping call: mmap, munmap, mremap, brk or madvise;
//   faults — a batch of page faults, as parallel arrays;
//   process — a process of the traced tree started, forked, exec'd or exited, with its name;
//   run    — last: the command's exit, CPU and fault counts, what was lost, how it was measured.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "memcost/measure.hpp"
#include "os/trace.hpp"
#include "probe/experiment.hpp"

namespace memcost::probe {
namespace {

// Faults are kept and written after the command ends (in lines of kFaultLine): writing while it
// runs would let a slow reader of stdout stall the probe until the kernel's ring buffer overflows.
// Past kFaultsKept they are written at once, so memory stays bounded (about 48 bytes a fault).
constexpr std::size_t kFaultLine = 65536;
constexpr std::size_t kFaultsKept = std::size_t{4} << 20;

struct Settings {
  std::vector<std::string> command;
  std::uint64_t sample_period = 1;
  std::uint32_t stack_bytes = 4096;
  std::uint32_t buffer_pages = 0;  // 0: sized to the machine
  int command_stdout_fd = -1;
  int attach_pid = 0;
  double attach_seconds = 0;
};

class JsonSink : public os::trace::Sink {
 public:
  explicit JsonSink(Emitter& emitter) : emitter_(emitter) {}

  void stack(std::uint32_t id, const std::vector<os::trace::Frame>& frames) override {
    json list = json::array();
    for (const auto& frame : frames) {
      list.push_back({{"address", frame.address}, {"function", frame.function}, {"file", frame.file},
                      {"line", frame.line}, {"module", frame.module}, {"module_offset", frame.module_offset}});
    }
    emitter_.sample({{"record", "stack"}}, {{"stack", id}, {"frames", std::move(list)}});
  }

  void call(const os::trace::MappingCall& call) override {
    json args = json::array();
    for (std::uint64_t value : call.args) args.push_back(value);
    emitter_.sample({{"record", "call"}, {"call", os::trace::call_name(call.kind)}},
                    {{"pid", call.pid}, {"tid", call.tid}, {"enter_ns", call.enter_ns}, {"exit_ns", call.exit_ns},
                     {"args", std::move(args)}, {"result", call.result}, {"stack", call.stack}});
    ++calls_;
  }

  void fault(const os::trace::Fault& fault) override {
    pid_.push_back(fault.pid);
    tid_.push_back(fault.tid);
    time_.push_back(fault.time_ns);
    address_.push_back(fault.address);
    stack_.push_back(fault.stack);
    user_.push_back(fault.user_mode);
    ++faults_;
    if (time_.size() >= kFaultsKept) flush();
  }

  void process(const os::trace::ProcessEvent& event) override {
    emitter_.sample({{"record", "process"}, {"change", os::trace::change_name(event.change)}},
                    {{"pid", event.pid}, {"parent", event.parent}, {"time_ns", event.time_ns}, {"name", event.name}});
  }

  void flush() {
    for (std::size_t from = 0; from < time_.size(); from += kFaultLine) {
      const std::size_t to = std::min(time_.size(), from + kFaultLine);
      auto part = [from, to](const auto& column) { return json(std::vector(column.begin() + from, column.begin() + to)); };
      emitter_.sample({{"record", "faults"}}, {{"pid", part(pid_)}, {"tid", part(tid_)}, {"time_ns", part(time_)},
                                               {"address", part(address_)}, {"stack", part(stack_)},
                                               {"user_mode", part(user_)}});
    }
    pid_.clear();
    tid_.clear();
    time_.clear();
    address_.clear();
    stack_.clear();
    user_.clear();
  }

  [[nodiscard]] std::uint64_t faults() const { return faults_; }
  [[nodiscard]] std::uint64_t calls() const { return calls_; }

 private:
  Emitter& emitter_;
  std::vector<int> pid_, tid_;
  std::vector<std::uint64_t> time_, address_;
  std::vector<std::uint32_t> stack_;
  std::vector<bool> user_;
  std::uint64_t faults_ = 0, calls_ = 0;
};

}  // namespace

Experiment trace_experiment() {
  return {"trace", "Run a command and record its mapping calls and page faults with call stacks (Linux, root)",
          [](CLI::App& command) -> Runner {
            auto settings = std::make_shared<Settings>();
            command.add_option("--sample-period", settings->sample_period, "one fault sample per N faults (default 1: every fault)")
                ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30));
            command.add_option("--stack-bytes", settings->stack_bytes, "user stack copied per sample for unwinding (default 4096)")
                ->check(CLI::Range(std::uint32_t{512}, std::uint32_t{65528}));
            command.add_option("--buffer-pages", settings->buffer_pages, "ring buffer pages per CPU, a power of two (default: 128 MiB per CPU, 512 MiB in all at most)")
                ->check(CLI::IsMember({8U, 16U, 32U, 64U, 128U, 256U, 512U, 1024U, 2048U, 4096U, 8192U, 16384U, 32768U}));
            command.add_option("--command-stdout-fd", settings->command_stdout_fd,
                               "give the command this open descriptor as its stdout (default: the probe's own)")
                ->check(CLI::Range(0, 1 << 20));
            command.add_option("--attach", settings->attach_pid, "trace this running process instead of a command")
                ->check(CLI::Range(1, 1 << 30));
            command.add_option("--attach-seconds", settings->attach_seconds,
                               "with --attach: stop after this many seconds (default: when it exits, or on Ctrl-C)")
                ->check(CLI::Range(0.0, 1e7));
            command.add_option("command", settings->command, "the command and its arguments, after --");
            return [settings](Emitter& emitter) {
              if (auto why = os::trace::supported(); !why.ok()) throw ProbeError(exit_unsupported, "not_supported_here", why.message());
              if (settings->command.empty() == (settings->attach_pid == 0)) {
                throw ProbeError(exit_bad_arguments, "bad_arguments", "give either a command after -- or --attach PID");
              }
              if (settings->stack_bytes % 8 != 0) {
                throw ProbeError(exit_bad_arguments, "bad_arguments", "--stack-bytes must be a multiple of 8");
              }
              os::trace::Options options;
              options.command = settings->command;
              options.attach_pid = settings->attach_pid;
              options.attach_seconds = settings->attach_seconds;
              options.sample_period = settings->sample_period;
              options.stack_bytes = settings->stack_bytes;
              // Every fault sample carries a copy of the user stack: at period 1 a program faulting as
              // fast as it can fills 32 MiB in tens of milliseconds (measured: 128 MiB per CPU lost
              // nothing where 32 MiB lost 11 %).
              const std::uint64_t cpus = std::max<std::uint64_t>(1, os::logical_cpu_count());
              std::uint32_t pages = 32768;
              while (pages > 64 && std::uint64_t{pages} * os::base_page_size() * cpus > (512ULL << 20)) pages /= 2;
              options.buffer_pages = settings->buffer_pages ? settings->buffer_pages : pages;
              options.command_stdout_fd = settings->command_stdout_fd;
              // The preload library lives beside the probe (the build folder, or memcost/_bin).
              options.preload_library = os::executable_directory() + "/libmemcost-preload.so";
              JsonSink sink(emitter);
              os::trace::Failure failure;
              const measure::SnapshotOptions everyone{true, false, true};
              measure::Snapshot before, after;
              options.window_opened = [&] { before = measure::take_snapshot(everyone); };
              options.window_closed = [&] { after = measure::take_snapshot(everyone); };
              os::trace::Result result = os::trace::run(options, sink, failure);
              if (!failure.ok()) {
                const bool denied = failure.error == EACCES || failure.error == EPERM;
                if (!result.started && failure.what.rfind("cannot run", 0) == 0) {
                  throw ProbeError(exit_failure, "command_not_started", failure.message() + "; check the command's name and PATH");
                }
                if (failure.what.rfind("no process", 0) == 0) {
                  throw ProbeError(exit_failure, "no_such_process", failure.message());
                }
                throw ProbeError(exit_unsupported, denied ? "not_permitted" : "not_supported_here",
                                 "cannot trace: " + failure.message() +
                                     (denied ? "; memcost trace needs root, or `sysctl kernel.perf_event_paranoid=-1` "
                                               "and a mounted tracefs"
                                             : ""));
              }
              sink.flush();
              measure::Interval interval = measure::between(before, after);
              std::optional<std::int64_t> elsewhere = interval.elsewhere_ns();
              // A process attached to ran beside the probe all along: it is the subject, not "elsewhere".
              if (elsewhere && settings->attach_pid) *elsewhere -= static_cast<std::int64_t>(result.user_ns + result.system_ns);
              emitter.sample(
                  {{"record", "run"}},
                  {{"exit_code", result.exit_code}, {"signal", result.signal}, {"wall_ns", result.wall_ns},
                   {"user_ns", result.user_ns}, {"system_ns", result.system_ns},
                   {"rusage_minor_faults", result.minor_faults}, {"rusage_major_faults", result.major_faults},
                   {"faults_before_exec", result.faults_before_exec},
                   {"sampled_faults", sink.faults()}, {"calls", sink.calls()}, {"sample_period", settings->sample_period},
                   {"lost_records", result.lost_records}, {"unwind_failures", result.unwind_failures},
                   {"pauses", result.pauses}, {"paused_ns", result.paused_ns}, {"buffer_bytes", result.buffer_bytes},
                   {"stack_bytes", result.stack_bytes},
                   {"tracer_user_ns", interval.process_user_ns}, {"tracer_system_ns", interval.process_system_ns},
                   {"elsewhere_ns", elsewhere ? json(*elsewhere) : json(nullptr)},
                   {"elsewhere_method", interval.elsewhere_method()},
                   {"fault_source", result.fault_source}, {"call_source", result.call_source},
                   {"attached_pid", settings->attach_pid},
                   {"interrupted", result.interrupted}});
              if (result.lost_records) {
                emitter.warning("events_lost", std::to_string(result.lost_records) +
                                                   " records were lost (ring buffer full): pass a larger --buffer-pages or a "
                                                   "--sample-period above 1");
              }
            };
          }};
}

}  // namespace memcost::probe
