// `memcost-probe trace -- COMMAND ...`: runs a command under perf events and reports what its
// memory cost the OS, attributed as the records stream (src/trace/attribution/attribution.hpp): the probe's
// memory and its output grow with distinct stacks, sites and processes, not with faults.
// Statistics and advice are the Python side's.
//
// Records (all `sample` lines, told apart by case.record):
//   stack       — one unwound, symbolized call stack, once, before anything refers to its id: its
//                 frames by id, each frame sent once, with the first stack that holds it;
//   process     — a process of the traced tree started, forked, exec'd or exited, with its name;
//   faults      — the fault counts per (allocation stack and call, touching stack, process,
//                 program, page kind), as parallel arrays; counted in the kernel, their touching
//                 stacks are 0 and the next record has them;
//   touch_samples — counted in the kernel only: per (allocation stack and call, touching stack,
//                 process, program) the touching stacks sampled and the faults they stand for;
//   call_faults — per system call that took faults without an exception (MAP_POPULATE, mlock,
//                 MADV_POPULATE_*, a driver pinning) and its stack: calls, faults, time in them;
//   allocations — per allocation origin (stack and call): mappings made and freed, bytes,
//                 measured call time, the largest mapping, the freed mappings by size;
//   run         — last: the command's exit, CPU and fault counts, what was lost, how it was measured.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "memcost/measure.hpp"
#include "os/os.hpp"
#include "trace/tracer.hpp"
#include "probe/experiment.hpp"
#include "trace/attribution/attribution.hpp"
#include "trace/attribution/raw.hpp"

namespace memcost::probe {
namespace {

constexpr std::size_t kFaultLine = 65536;  // entries per `faults` line

struct Settings {
  std::vector<std::string> command;
  std::uint64_t sample_period = 1;
  std::uint32_t stack_bytes = 4096;
  std::uint32_t buffer_pages = 0;  // 0: sized to the machine
  int command_stdout_fd = -1;
  int attach_pid = 0;
  double attach_seconds = 0;
  std::string raw_file;     // also keep every raw record here (gzip)
  std::string replay;       // instead of tracing: re-aggregate this raw file
  std::string thp_mode;     // with --replay: the traced machine's THP mode (default: this one's)
  bool no_python_frames = false;
  bool no_runtime_flags = false;
  std::uint32_t cpu_sample_us = 4000;  // 0: no fault time sampling (docs/trace.md, Time: why 4 ms)
  std::uint32_t time_faults_one_in = 16;  // docs/trace.md, Counting in the kernel: why 16
  std::string fault_counting = "kernel";  // kernel (BPF, where it loads) or perf (a record per fault)
  std::uint32_t touch_samples_per_second = 1000;
  double window_seconds = 0;          // 0: one aggregate at the end only
};

// A frame as a key: every field, so that two frames are one only where everything shown is the
// same (FrameEqual). Hashed by its numbers and its names' lengths, which nearly always tell frames
// apart (a native frame by its address, a Python frame by its line and names): hashing the names
// themselves, three strings a frame for every frame of every stack, was most of this sink's time.
struct FrameHash {
  std::size_t operator()(const trace::Frame& frame) const noexcept {
    std::uint64_t hash = static_cast<std::uint64_t>(frame.kind);
    for (std::uint64_t part : {frame.address, frame.module_offset, static_cast<std::uint64_t>(frame.line),
                               static_cast<std::uint64_t>(frame.function.size()) << 32 | frame.file.size(),
                               static_cast<std::uint64_t>(frame.module.size())}) {
      hash = (hash ^ part) * 0x9e3779b97f4a7c15ULL;
      hash ^= hash >> 29;
    }
    return static_cast<std::size_t>(hash);
  }
};
struct FrameEqual {
  bool operator()(const trace::Frame& a, const trace::Frame& b) const noexcept {
    return std::tie(a.kind, a.address, a.line, a.module_offset, a.function, a.file, a.module) ==
           std::tie(b.kind, b.address, b.line, b.module_offset, b.function, b.file, b.module);
  }
};

// Stacks and processes go out as they come: few, and the aggregate refers to them. A stack is its
// frames' ids, each frame sent once with the first stack that holds it: stacks share most of their
// frames (a PyTorch import: 133,544 frames in 4,710 stacks, 30 MB of JSON sent whole).
class JsonSink : public trace::Sink {
 public:
  explicit JsonSink(Emitter& emitter) : emitter_(emitter) {}

  // Written as text, not built as a json tree and dumped: the tree's nodes (an ordered map of eight
  // keys a frame) were most of the 12 % of the tracer's CPU that stack lines took on a traced
  // `import torch`. Strings are escaped by the json library, as every other line's (json_text).
  void stack(std::uint32_t id, const std::vector<trace::Frame>& frames) override {
    std::string& text = stack_text_;
    text.assign(R"({"stack":)");
    append_number(text, id);
    text += R"(,"frame_ids":[)";
    new_frames_.clear();
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const auto [found, added] = frame_ids_.try_emplace(frames[i], static_cast<std::uint32_t>(frame_ids_.size()));
      if (added) new_frames_.emplace_back(i, found->second);
      if (i > 0) text += ',';
      append_number(text, found->second);
    }
    text += R"(],"new_frames":[)";
    for (std::size_t n = 0; n < new_frames_.size(); ++n) {
      const trace::Frame& frame = frames[new_frames_[n].first];
      text += n > 0 ? R"(,{"id":)" : R"({"id":)";
      append_number(text, new_frames_[n].second);
      text += R"(,"kind":")";
      text += trace::frame_kind_name(frame.kind);
      text += R"(","address":)";
      append_number(text, frame.address);
      text += R"(,"function":)";
      text += json_text(frame.function);
      text += R"(,"file":)";
      text += json_text(frame.file);
      text += R"(,"line":)";
      append_number(text, frame.line);
      text += R"(,"module":)";
      text += json_text(frame.module);
      text += R"(,"module_offset":)";
      append_number(text, frame.module_offset);
      text += '}';
    }
    text += "]}";
    emitter_.sample_text("stack", text);
  }

  void process(const trace::ProcessEvent& event) override {
    emitter_.sample({{"record", "process"}, {"change", trace::change_name(event.change)}},
                    {{"pid", event.pid}, {"parent", event.parent}, {"time_ns", event.time_ns}, {"name", event.name}});
  }

  void call(const trace::MappingCall&) override {}
  void fault(const trace::Fault&) override {}
  // Once a loop's records are replayed, the lines held go out together, at most every
  // kFlushEveryNs: the loop turns about 500 times a second while a program loads its libraries.
  void settle(std::uint64_t) override {
    const std::uint64_t now = measure::now_ns();
    if (now - flushed_ns_ < kFlushEveryNs) return;
    emitter_.flush();
    flushed_ns_ = now;
  }

 private:
  static constexpr std::uint64_t kFlushEveryNs = 50'000'000;
  Emitter& emitter_;
  std::uint64_t flushed_ns_ = 0;
  std::unordered_map<trace::Frame, std::uint32_t, FrameHash, FrameEqual> frame_ids_;
  std::string stack_text_;               // a stack line, reused
  std::vector<std::pair<std::size_t, std::uint32_t>> new_frames_;  // its frames sent for the first time: index, id

  template <typename Number>
  static void append_number(std::string& text, Number value) {
    char digits[24];
    const auto written = std::to_chars(digits, digits + sizeof(digits), value);
    text.append(digits, written.ptr);
  }
};

const char* origin_name(int call) {
  return call == trace::kOutside ? "" : trace::call_name(static_cast<trace::CallKind>(call));
}

json size_summary(const trace::SizeSummary& size) {
  return {{"freed", size.freed}, {"faults_base", size.faults_base}, {"faults_thp", size.faults_thp},
          {"free_ns", size.free_ns}, {"map_ns", size.map_ns}};
}

std::uint64_t unix_time_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

json case_of(const char* record, const json& window) {
  json tags = {{"record", record}};
  tags.update(window);
  return tags;
}

// A fault key's values, column by column as trace::kFaultKeyColumns names them.
std::array<json, trace::kFaultKeyColumns.size()> fault_key_values(const trace::FaultKey& key) {
  return {key.allocation_stack, origin_name(key.allocation_call), key.touch_stack, key.pid, key.program, key.huge};
}

// Counters keyed by fault key as parallel arrays, kFaultLine keys a record, largest first: the
// key's columns (all but `huge` unless with_huge), then each of `values` (a name and what it takes
// from a counter).
template <typename Counter>
void emit_by_fault_key(Emitter& emitter, const char* record, const json& window,
                       std::vector<std::pair<trace::FaultKey, Counter>> rows, bool with_huge,
                       const std::vector<std::pair<const char*, json (*)(const Counter&)>>& values) {
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    return values.front().second(a.second).template get<double>() > values.front().second(b.second).template get<double>();
  });
  const std::size_t key_columns = trace::kFaultKeyColumns.size() - (with_huge ? 0 : 1);
  for (std::size_t from = 0; from < rows.size(); from += kFaultLine) {
    json metrics = json::object();
    for (std::size_t column = 0; column < key_columns; ++column) metrics[trace::kFaultKeyColumns[column]] = json::array();
    for (const auto& [name, value] : values) metrics[name] = json::array();
    for (std::size_t i = from; i < std::min(rows.size(), from + kFaultLine); ++i) {
      const auto& [key, counter] = rows[i];
      const auto key_values = fault_key_values(key);
      for (std::size_t column = 0; column < key_columns; ++column) {
        metrics[trace::kFaultKeyColumns[column]].push_back(key_values[column]);
      }
      for (const auto& [name, value] : values) metrics[name].push_back(value(counter));
    }
    emitter.sample(case_of(record, window), std::move(metrics));
  }
}

// The counters so far; `window` (empty, or {"window": N}) tags a long trace's window's copy.
void emit_aggregate(Emitter& emitter, const trace::Attribution& attribution, const json& window = json::object()) {
  using Count = std::uint64_t;
  emit_by_fault_key<Count>(emitter, "faults", window, {attribution.faults().begin(), attribution.faults().end()}, true,
                           {{"faults", [](const Count& count) { return json(count); }}});
  emit_by_fault_key<trace::TouchSamples>(
      emitter, "touch_samples", window, {attribution.touch_samples().begin(), attribution.touch_samples().end()}, false,
      {{"samples", [](const trace::TouchSamples& touch) { return json(touch.samples); }},
       {"faults", [](const trace::TouchSamples& touch) { return json(touch.faults); }}});
  emit_by_fault_key<trace::FaultTime>(
      emitter, "fault_time", window, {attribution.fault_time().begin(), attribution.fault_time().end()}, false,
      {{"samples", [](const trace::FaultTime& time) { return json(time.samples); }},
       {"zeroing_samples", [](const trace::FaultTime& time) { return json(time.zeroing); }},
       {"timed_faults", [](const trace::FaultTime& time) { return json(time.timed_faults); }},
       {"timings_ended", [](const trace::FaultTime& time) { return json(time.timings_ended); }},
       {"kernel_ns", [](const trace::FaultTime& time) { return json(time.kernel_ns); }},
       {"kernel_ns_squares", [](const trace::FaultTime& time) { return json(time.kernel_ns_squares); }}});
  for (const auto& [key, summary] : attribution.calls_faulting()) {
    json tags = case_of("call_faults", window);
    tags["call"] = trace::syscall_name(key.second);
    emitter.sample(std::move(tags), {{"stack", key.first}, {"calls", summary.calls}, {"faults", summary.faults},
                                     {"call_ns", summary.call_ns}});
  }
  for (const auto& [origin, summary] : attribution.origins()) {
    json sizes = json::array();
    for (const auto& [bytes, size] : summary.by_size) {
      json entry = size_summary(size);
      entry["bytes"] = bytes;
      sizes.push_back(std::move(entry));
    }
    json tags = case_of("allocations", window);
    tags["call"] = origin_name(origin.call);
    emitter.sample(std::move(tags),
                   {{"stack", origin.stack}, {"made", summary.made}, {"freed", summary.freed}, {"bytes", summary.bytes},
                    {"freed_bytes", summary.freed_bytes}, {"map_ns", summary.map_ns}, {"free_ns", summary.free_ns},
                    {"huge_advised", summary.huge_advised}, {"huge_refused_by", summary.huge_refused_by},
                    {"file_backed", summary.file_backed},
                    {"largest_bytes", summary.largest_bytes},
                    {"largest_faults_base", summary.largest_faults_base},
                    {"largest_faults_thp", summary.largest_faults_thp},
                    {"largest_one_thread", summary.largest_one_thread}, {"freed_by_size", std::move(sizes)},
                    {"outgrown", size_summary(summary.outgrown)},
                    {"grown_to_bytes", summary.grown_to_bytes}});
  }
}

// The machine's THP mode, as the attribution decides page kinds by it and the run record says.
std::string thp_mode_name() {
  const os::ThpSettings thp = os::thp_settings();
  return thp.present ? thp.enabled : "absent";
}

// The THP (PMD) size, which is also the region the attribution infers page kinds by.
std::uint64_t huge_page_bytes() {
  const os::ThpSettings thp = os::thp_settings();
  return thp.pmd_size_bytes ? thp.pmd_size_bytes : 2ULL << 20;
}

trace::ThpMode thp_mode(const std::string& name) {
  if (name == "always") return trace::ThpMode::always;
  if (name == "madvise") return trace::ThpMode::madvise;
  return name == "never" ? trace::ThpMode::never : trace::ThpMode::absent;
}

void add_trace_options(CLI::App& command, Settings& settings) {
  command.add_option("--sample-period", settings.sample_period, "one fault sample per N faults (default 1: every fault)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30));
  command.add_option("--stack-bytes", settings.stack_bytes, "user stack copied per fault sample for unwinding (default 4096; an mmap, brk or madvise sample copies 32 KiB at least)")
      ->check(CLI::Range(std::uint32_t{512}, std::uint32_t{65528}));
  command.add_option("--buffer-pages", settings.buffer_pages, "ring buffer pages per CPU, a power of two (default: 128 MiB per CPU, 512 MiB in all at most; counting in the kernel 16 MiB per CPU)")
      ->check(CLI::IsMember({8U, 16U, 32U, 64U, 128U, 256U, 512U, 1024U, 2048U, 4096U, 8192U, 16384U, 32768U}));
  command.add_option("--command-stdout-fd", settings.command_stdout_fd,
                     "give the command this open descriptor as its stdout (default: the probe's own)")
      ->check(CLI::Range(0, 1 << 20));
  command.add_option("--attach", settings.attach_pid, "trace this running process instead of a command")
      ->check(CLI::Range(1, 1 << 30));
  command.add_option("--attach-seconds", settings.attach_seconds,
                     "with --attach: stop after this many seconds (default: when it exits, or on Ctrl-C)")
      ->check(CLI::Range(0.0, 1e7));
  command.add_option("--raw-file", settings.raw_file, "also write every raw record to this file (gzip)");
  command.add_option("--replay", settings.replay,
                     "instead of tracing: re-aggregate a --raw-file (faults and allocations records only)");
  command.add_option("--thp-mode", settings.thp_mode, "with --replay: the traced machine's THP mode")
      ->check(CLI::IsMember({"always", "madvise", "never", "absent"}));
  command.add_option("--cpu-sample-us", settings.cpu_sample_us,
                     "sample CPU time in the kernel every this many µs of a thread's CPU time, to measure "
                     "fault time (default 4000; 0: off; needs root or perf_event_paranoid <= 1)")
      ->check(CLI::Range(0U, 1000000U));
  command.add_option("--fault-counting", settings.fault_counting,
                     "kernel: count every fault in the kernel (BPF, as root) and sample the touching stacks; perf: "
                     "a perf record of every fault's address, and the touching stacks sampled (default kernel, and "
                     "perf where BPF cannot load; --raw-file, --sample-period above 1 and --touch-samples-per-second 0 "
                     "record a stack with every fault, by perf)")
      ->check(CLI::IsMember({"kernel", "perf"}));
  command.add_option("--time-faults-one-in", settings.time_faults_one_in,
                     "counting in the kernel: time one fault in N, chosen at random, in the kernel, from the "
                     "handler's entry to its page-count update (default 16; 1: every fault; 0: none)")
      ->check(CLI::Range(0U, 1U << 20));
  command.add_option("--touch-samples-per-second", settings.touch_samples_per_second,
                     "touching stacks sampled per second per CPU, every fault being counted apart (default 1000; "
                     "0: a stack with every fault, recorded by perf)")
      ->check(CLI::Range(0U, 100000U));
  command.add_option("--window-seconds", settings.window_seconds,
                     "also emit the counters so far every this many seconds, tagged with the window's number "
                     "(a long trace's windows; 0: at the end only)")
      ->check(CLI::Range(0.0, 1e7));
  command.add_flag("--no-runtime-flags", settings.no_runtime_flags,
                   "do not ask node and the JVM for perf maps through NODE_OPTIONS and JAVA_TOOL_OPTIONS (their "
                   "JIT-compiled functions then go unnamed)");
  command.add_flag("--no-python-frames", settings.no_python_frames,
                   "do not load the preload library into a command for its Python stacks (as root) nor take them (without)");
  command.add_option("command", settings.command, "the command and its arguments, after --");
}

// `--replay FILE`: a --raw-file attributed again, as when it was traced.
void replay_raw_file(const Settings& settings, Emitter& emitter) {
  trace::Attribution attribution(thp_mode(settings.thp_mode.empty() ? thp_mode_name() : settings.thp_mode),
                                 huge_page_bytes());
  std::string error;
  if (!trace::replay(settings.replay, attribution, error)) throw ProbeError(exit_failure, "bad_raw_file", error);
  attribution.finish();
  emit_aggregate(emitter, attribution);
}

// The tracer's options from the flags, once they are checked.
trace::Options tracer_options(const Settings& settings) {
  if (auto why = trace::supported(); !why.ok()) throw ProbeError(exit_unsupported, "not_supported_here", why.message());
  if (settings.command.empty() == (settings.attach_pid == 0)) {
    throw ProbeError(exit_bad_arguments, "bad_arguments", "give either a command after -- or --attach PID");
  }
  if (settings.stack_bytes % 8 != 0) {
    throw ProbeError(exit_bad_arguments, "bad_arguments", "--stack-bytes must be a multiple of 8");
  }
  trace::Options options;
  options.command = settings.command;
  options.attach_pid = settings.attach_pid;
  options.attach_seconds = settings.attach_seconds;
  options.sample_period = settings.sample_period;
  options.stack_bytes = settings.stack_bytes;
  // Every fault sample carries a copy of the user stack: at period 1 a program faulting as
  // fast as it can fills 32 MiB in tens of milliseconds (measured: 128 MiB per CPU lost
  // nothing where 32 MiB lost 11 %).
  const std::uint64_t cpus = std::max<std::uint64_t>(1, os::logical_cpu_count());
  std::uint32_t pages = 32768;
  while (pages > 64 && std::uint64_t{pages} * os::base_page_size() * cpus > (512ULL << 20)) pages /= 2;
  options.buffer_pages = settings.buffer_pages ? settings.buffer_pages : pages;
  // 16 MiB per CPU holds four seconds of touching samples at the default rate, read every 10 ms.
  options.counting_buffer_pages = settings.buffer_pages ? settings.buffer_pages : std::min<std::uint32_t>(pages, 4096);
  options.command_stdout_fd = settings.command_stdout_fd;
  // The preload library lives beside the probe (the build folder, or memcost/_bin).
  options.preload_library = os::executable_directory() + "/libmemcost-preload.so";
  options.python_frames = !settings.no_python_frames;
  options.runtime_flags = !settings.no_runtime_flags;
  options.cpu_sample_period_ns = std::uint64_t{settings.cpu_sample_us} * 1000;
  // Raw records are every fault's, and a sample period asks for perf's sampling of them.
  // Both need a stack with every recorded fault, and so does --touch-samples-per-second 0.
  const bool stack_per_fault = !settings.raw_file.empty() || settings.sample_period > 1 || settings.touch_samples_per_second == 0;
  options.count_in_kernel = settings.fault_counting == "kernel" && !stack_per_fault;
  options.touch_samples_per_second = stack_per_fault ? 0 : settings.touch_samples_per_second;
  options.fault_timing_one_in = settings.time_faults_one_in;
  return options;
}

// A tracer's failure, if it failed, as the probe's error, with what to do about it.
void throw_if_failed(const trace::Failure& failure) {
  if (!failure.ok()) {
    switch (failure.kind) {
      case trace::FailureKind::command_not_started:
        throw ProbeError(exit_failure, "command_not_started", failure.message() + "; check the command's name and PATH");
      case trace::FailureKind::no_such_process:
        throw ProbeError(exit_failure, "no_such_process", failure.message());
      case trace::FailureKind::interrupted:
        throw ProbeError(exit_interrupted, "interrupted", failure.message() + ": nothing was recorded");
      default:
        throw ProbeError(exit_unsupported, failure.denied() ? "not_permitted" : "not_supported_here",
                         "cannot trace: " + failure.message() +
                             (failure.denied() ? "; memcost trace needs root, or `sysctl kernel.perf_event_paranoid=-1` "
                                                 "and a mounted tracefs"
                                               : ""));
    }
  }
}

// The run record: the command's accounting, the tracer's own and how each figure was obtained.
// `began_ns`: when the probe began to set the trace up (CLOCK_MONOTONIC, as the front end's clock):
// with the command's start and end and this moment, what memcost itself added before and after it.
void emit_run(Emitter& emitter, const Settings& settings, const trace::Result& result, const trace::Attribution& attribution,
              const measure::Snapshot& before, const measure::Snapshot& after, const std::string& thp,
              std::uint64_t began_ns) {
  measure::Interval interval = measure::between(before, after);
  std::optional<std::int64_t> elsewhere = interval.elsewhere_ns();
  // A process attached to ran beside the probe all along: it is the subject, not "elsewhere".
  if (elsewhere && settings.attach_pid) *elsewhere -= static_cast<std::int64_t>(result.user_ns + result.system_ns);
  emitter.sample(
      {{"record", "run"}},
      {{"exit_code", result.exit_code}, {"signal", result.signal}, {"wall_ns", result.wall_ns},
       {"probe_began_ns", began_ns}, {"command_started_ns", result.started_ns}, {"records_done_ns", measure::now_ns()},
       {"user_ns", result.user_ns}, {"system_ns", result.system_ns},
       {"rusage_minor_faults", result.minor_faults}, {"rusage_major_faults", result.major_faults},
       {"faults_before_exec", result.faults_before_exec},
       {"sampled_faults", attribution.faults_seen()}, {"calls", attribution.calls_seen()},
       {"most_records_pending", attribution.most_pending()}, {"most_mappings_live", attribution.most_live()},
       {"sample_period", result.counted_in_kernel ? 1 : settings.sample_period},
       {"counted_in_kernel", result.counted_in_kernel}, {"kernel_counting", result.kernel_counting},
       {"kernel_faults", result.kernel_faults}, {"kernel_faults_uncounted", result.kernel_faults_uncounted},
       {"kernel_faults_in_calls", result.kernel_faults_in_calls}, {"faults_in_calls", attribution.faults_in_calls()},
       {"touch_samples_per_second", result.touch_samples_per_second},
       {"fault_timing_one_in", result.fault_timing_one_in},
       {"touch_samples", attribution.touch_samples_seen()},
       {"lost_records", result.lost_records}, {"malformed_records", result.malformed_records},
       {"malformed_bytes", result.malformed_bytes}, {"unwind_failures", result.unwind_failures},
       {"stacks_unwound", result.stacks_unwound}, {"stacks_unwound_by_rules", result.stacks_unwound_by_rules},
       {"unnamed_code_stacks", result.unnamed_code_stacks}, {"refused_perf_maps", result.refused_perf_maps},
       {"python_blocks_refused", result.python_blocks_refused},
       {"pauses", result.pauses}, {"paused_ns", result.paused_ns}, {"kernel_stops", result.kernel_stops}, {"buffer_bytes", result.buffer_bytes},
       {"stack_bytes", result.stack_bytes},
       {"tracer_user_ns", interval.process_user_ns}, {"tracer_system_ns", interval.process_system_ns},
       {"elsewhere_ns", elsewhere ? json(*elsewhere) : json(nullptr)},
       {"elsewhere_method", interval.elsewhere_method()},
       {"fault_source", result.fault_source}, {"call_source", result.call_source},
       {"attached_pid", settings.attach_pid},
       {"interrupted", result.interrupted}, {"thp_mode", thp}, {"base_page_bytes", os::base_page_size()},
       {"huge_page_bytes", huge_page_bytes()},
       {"cpu_sample_period_ns", result.cpu_sample_period_ns}, {"cpu_sampling", result.cpu_sampling},
       {"cpu_samples", attribution.cpu_samples()},
       {"cpu_samples_unmatched", attribution.cpu_samples_unmatched()},
       {"cpu_samples_tracing", attribution.cpu_samples_tracing()}});
  if (result.kernel_faults_uncounted) {
    emitter.warning("faults_uncounted", std::to_string(result.kernel_faults_uncounted) +
                                            " faults were not counted: the in-kernel counter's map was full (the "
                                            "counts are a lower bound); --fault-counting perf records each fault");
  }
  if (result.lost_records) {
    // A stack with every fault (--touch-samples-per-second 0, --raw, --sample-period) is 50 times
    // the bytes of a fault's address record.
    const bool stack_per_fault = !result.counted_in_kernel && result.touch_samples_per_second == 0;
    emitter.warning("events_lost", std::to_string(result.lost_records) +
                                       " records were lost (ring buffer full; the counts are a lower bound): "
                                       "run as root (faults counted in the kernel, larger buffers)" +
                                       std::string(stack_per_fault ? ", record the stacks by sampling (leave out "
                                                                     "--touch-samples-per-second 0 and --raw)"
                                                                   : "") +
                                       ", or pass --sample-period above 1 to record one fault in N");
  }
}

// The traced window's measurements of the rest of the machine, and a long trace's windows: each
// emits the counters so far (cumulative, so that nothing is reset under the attribution and the
// final aggregate is the whole trace's; the front end takes differences).
class Windows {
 public:
  Windows(Emitter& emitter, trace::Attribution& attribution) : emitter_(emitter), attribution_(attribution) {}

  // The machine's counters as the window opens and as it closes are read on a thread of their
  // own, beside the command's start and the records' end rather than before them: the scan of
  // every task's schedstat (the CPU charged elsewhere) takes about 11 µs a task on the 2-vCPU guest,
  // 1.2 ms for its 150 processes and threads, 12 ms beside a process of 1,000 threads, and grows
  // with a host's CPUs (its per-CPU kernel threads).
  void connect(trace::Options& options, double window_seconds) {
    options.window_opened = [this] {
      before_reading_ = std::async(std::launch::async, [] { return measure::take_snapshot(kEveryone); });
      start_unix_ns_ = unix_time_ns();
    };
    options.window_closed = [this] {
      after_reading_ = std::async(std::launch::async, [] { return measure::take_snapshot(kEveryone); });
    };
    options.period_ns = static_cast<std::uint64_t>(window_seconds * 1e9);
    options.period_ended = [this] { window_ended(); };
  }

  // Each once read (empty where the window never opened or closed: a trace that did not run).
  const measure::Snapshot& before() { return read(before_, before_reading_); }
  const measure::Snapshot& after() { return read(after_, after_reading_); }

 private:
  static constexpr measure::SnapshotOptions kEveryone{true, false, true};

  static const measure::Snapshot& read(measure::Snapshot& snapshot, std::future<measure::Snapshot>& reading) {
    if (reading.valid()) snapshot = reading.get();
    return snapshot;
  }

  measure::Snapshot before_, after_;
  std::future<measure::Snapshot> before_reading_, after_reading_;

  void window_ended() {
    attribution_.count_live();
    const std::uint64_t end_unix_ns = unix_time_ns();
    emit_aggregate(emitter_, attribution_, {{"window", number_}});
    emitter_.sample({{"record", "window"}, {"window", number_}},
                    {{"start_unix_ns", start_unix_ns_}, {"end_unix_ns", end_unix_ns},
                     {"sampled_faults", attribution_.faults_seen()}});
    ++number_;
    start_unix_ns_ = end_unix_ns;
  }

  Emitter& emitter_;
  trace::Attribution& attribution_;
  std::uint64_t number_ = 0;
  std::uint64_t start_unix_ns_ = 0;
};

// The command (or the process attached to) traced: the attribution fed as the records stream,
// kept raw too when asked, the windows emitted as they end, then the aggregate and the run record.
// The tracer's memory churns: each record's copied stack, unwound frames and keys are allocated and
// freed, and glibc gave the heap's top back to the kernel each time it shrank, to fault it in again
// next: a traced `import torch` took 0.39-0.42 s of the tracer's CPU with glibc's 128 KiB pad and
// 0.27-0.29 s with 16 MiB (2-vCPU guest, 2 runs each; raising the trim or mmap threshold instead
// saved nothing).
constexpr std::size_t kTracerHeapPadBytes = std::size_t{16} << 20;

void trace_and_emit(const Settings& settings, Emitter& emitter) {
  const std::uint64_t began_ns = measure::now_ns();
  Emitter::Holding held(emitter);  // the records' lines, and the aggregate's after them
  os::pad_heap(kTracerHeapPadBytes);
  trace::Options options = tracer_options(settings);
  JsonSink output(emitter);
  const std::string thp = thp_mode_name();
  trace::Attribution attribution(thp_mode(thp), huge_page_bytes());
  attribution.stacks = &output;
  std::unique_ptr<trace::RawWriter> raw;
  if (!settings.raw_file.empty()) {
    raw = std::make_unique<trace::RawWriter>(settings.raw_file, attribution);
    if (!raw->error().empty()) throw ProbeError(exit_failure, "raw_file", raw->error() + ": check the path");
  }
  trace::Sink& sink = raw ? static_cast<trace::Sink&>(*raw) : attribution;
  Windows windows(emitter, attribution);
  windows.connect(options, settings.window_seconds);
  trace::Failure failure;
  bool emitted = false;
  auto emit = [&](const trace::Result& result) {
    throw_if_failed(failure);
    attribution.finish();
    emit_aggregate(emitter, attribution);
    if (raw) {
      raw->close();
      if (!raw->error().empty()) emitter.warning("raw_file_incomplete", raw->error() + ": the raw records are incomplete");
    }
    emit_run(emitter, settings, result, attribution, windows.before(), windows.after(), thp, began_ns);
    // All is said: the front end reads the end now and summarizes while the tracer lets go of what
    // it holds (closing its events and BPF programs took 58 ms after a traced `import torch`, RCU
    // grace periods mostly, on the 2-vCPU guest), not after.
    Emitter::flush();
    os::release_stdout();
    emitted = true;
  };
  options.traced = emit;
  const trace::Result result = trace::run(options, sink, failure);
  if (!emitted) emit(result);  // a trace that never ran: its failure, or what little it has
}

}  // namespace

Experiment trace_experiment() {
  return {"trace", "Run a command and record its mapping calls and page faults with call stacks (Linux, root)",
          [](CLI::App& command) -> Runner {
            auto settings = std::make_shared<Settings>();
            add_trace_options(command, *settings);
            return [settings](Emitter& emitter) {
              if (!settings->replay.empty()) return replay_raw_file(*settings, emitter);
              trace_and_emit(*settings, emitter);
            };
          }};
}

}  // namespace memcost::probe
