// Tracing with perf events and unwinding with libdwfl (see trace.hpp for the contract).
#include "os/trace.hpp"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <dirent.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asm/perf_regs.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace memcost::os::trace {
namespace {

constexpr std::uint64_t kUserRegsMask = (1ULL << PERF_REG_X86_BP) | (1ULL << PERF_REG_X86_SP) | (1ULL << PERF_REG_X86_IP);
// The faulting instruction is in the user registers (a kernel-mode fault's sample IP is the kernel's).
constexpr std::uint64_t kFaultSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR |
                                           PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
constexpr std::uint64_t kEnterSampleType =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
constexpr std::uint64_t kExitSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW;

Failure failed(const std::string& call) { return Failure{errno, call}; }

std::uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(now.tv_nsec);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- tracefs ---------------------------------------------------------------

struct Tracefs {
  std::string root;  // where events/ lives
};

// tracefs is mounted by whoever may change the machine and journal it (the memcost front end):
// this process only finds it.
Failure find_tracefs(Tracefs& tracefs) {
  for (const char* root : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
    if (access((std::string(root) + "/events").c_str(), F_OK) == 0) {
      tracefs.root = root;
      if (access((tracefs.root + "/events/syscalls").c_str(), F_OK) != 0) {
        return Failure{ENOENT, "this kernel has no syscalls tracepoints (CONFIG_FTRACE_SYSCALLS)"};
      }
      return {};
    }
  }
  return Failure{ENOENT, "tracefs is not mounted: as root, `mount -t tracefs nodev /sys/kernel/tracing` (memcost trace "
                         "mounts it for its run)"};
}

struct TracepointFormat {
  std::uint64_t id = 0;
  std::vector<std::uint32_t> offsets;  // of the fields after __syscall_nr, in order
};

Failure read_tracepoint(const Tracefs& tracefs, const std::string& name, TracepointFormat& format) {
  std::string base = tracefs.root + "/events/syscalls/" + name;
  std::string id = read_text(base + "/id");
  if (id.empty()) return Failure{errno ? errno : ENOENT, "read " + base + "/id"};
  format.id = std::stoull(id);
  std::istringstream lines(read_text(base + "/format"));
  bool after_nr = false;
  for (std::string line; std::getline(lines, line);) {
    auto field = line.find("field:");
    auto offset = line.find("offset:");
    if (field == std::string::npos || offset == std::string::npos) continue;
    if (line.find("__syscall_nr") != std::string::npos) {
      after_nr = true;
      continue;
    }
    if (after_nr) format.offsets.push_back(static_cast<std::uint32_t>(std::stoul(line.substr(offset + 7))));
  }
  return {};
}

// ---- perf events -----------------------------------------------------------

enum class EventKind { fault, enter, exit };

struct Event {
  EventKind kind;
  CallKind call = CallKind::mmap;
  std::uint64_t sample_type = 0;
  std::vector<std::uint32_t> offsets;  // raw field offsets (tracepoints)
};

struct RingBuffer {
  int fd = -1;
  void* base = nullptr;
  std::size_t mapped_bytes = 0;
  std::size_t data_bytes = 0;
};

int perf_event_open(perf_event_attr& attr, pid_t pid, int cpu) {
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

// Without privilege the kernel lets a user lock only perf_event_mlock_kb per CPU plus
// RLIMIT_MEMLOCK: halve the buffer until it is granted (smaller ones mean more pauses).
Failure map_ring_buffer(int fd, std::size_t& pages, std::size_t page, RingBuffer& buffer) {
  buffer.fd = fd;
  for (;; pages /= 2) {
    buffer.data_bytes = pages * page;
    buffer.mapped_bytes = buffer.data_bytes + page;
    buffer.base = mmap(nullptr, buffer.mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (buffer.base != MAP_FAILED) return {};
    if (errno != EPERM || pages <= 8) return failed("mmap(perf ring buffer)");
  }
}

perf_event_attr base_attr(std::uint64_t sample_type, std::uint32_t stack_bytes) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.sample_type = sample_type;
  attr.sample_period = 1;
  attr.disabled = 1;
  attr.inherit = 1;
  attr.enable_on_exec = 1;
  attr.sample_id_all = 1;
  attr.exclude_hv = 1;
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  if (sample_type & PERF_SAMPLE_REGS_USER) attr.sample_regs_user = kUserRegsMask;
  if (sample_type & PERF_SAMPLE_STACK_USER) attr.sample_stack_user = stack_bytes;
  return attr;
}

// ---- unwinding and symbols -------------------------------------------------

struct UnwindInput {
  pid_t tid = 0;
  std::uint64_t bp = 0, sp = 0, ip = 0;
  const std::uint8_t* stack = nullptr;
  std::uint64_t stack_bytes = 0;
  std::vector<std::uint64_t>* pcs = nullptr;
  std::uint32_t max_frames = 0;
};

pid_t next_thread(Dwfl*, void* arg, void** thread_argp) {
  if (*thread_argp != nullptr) return 0;
  *thread_argp = arg;
  return static_cast<UnwindInput*>(arg)->tid;
}

bool get_thread(Dwfl*, pid_t, void* arg, void** thread_argp) {
  *thread_argp = arg;
  return true;
}

bool memory_read(Dwfl*, Dwarf_Addr address, Dwarf_Word* result, void* arg) {
  auto* input = static_cast<UnwindInput*>(arg);
  if (address < input->sp || address + sizeof(Dwarf_Word) > input->sp + input->stack_bytes) return false;
  std::memcpy(result, input->stack + (address - input->sp), sizeof(Dwarf_Word));
  return true;
}

bool set_initial_registers(Dwfl_Thread* thread, void* arg) {
  auto* input = static_cast<UnwindInput*>(arg);
  // x86-64 DWARF numbering: 6 is rbp, 7 is rsp; the pc is set on its own.
  Dwarf_Word frame_and_stack[2] = {input->bp, input->sp};
  if (!dwfl_thread_state_registers(thread, 6, 2, frame_and_stack)) return false;
  dwfl_thread_state_register_pc(thread, input->ip);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {next_thread, get_thread, memory_read, set_initial_registers, nullptr, nullptr};
const Dwfl_Callbacks kDwflCallbacks = {nullptr, dwfl_standard_find_debuginfo, dwfl_offline_section_address, nullptr};

int on_frame(Dwfl_Frame* frame, void* arg) {
  auto* input = static_cast<UnwindInput*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: the call itself is one byte before.
  input->pcs->push_back(activation ? pc : pc - 1);
  return input->pcs->size() >= input->max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

std::string demangle(const char* name) {
  if (name == nullptr) return {};
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> readable(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && readable ? std::string(readable.get()) : std::string(name);
}

struct Mapping {
  std::uint64_t start = 0, end = 0, offset = 0;
  std::string path;
};

// One traced process image (a pid between two execs): its modules and unwinder.
struct Process {
  int pid = 0;
  std::uint32_t generation = 0;
  Dwfl* dwfl = nullptr;
  bool attached = false;
  std::vector<Mapping> pending;
  std::set<std::pair<std::string, std::uint64_t>> reported;
  std::vector<Mapping> mappings;  // every executable file mapping seen
  std::vector<std::pair<std::uint64_t, std::uint64_t>> code;  // their ranges, sorted
  std::size_t code_known = static_cast<std::size_t>(-1);
  UnwindInput input;
  bool read_proc_maps = false;

  ~Process() {
    if (dwfl) dwfl_end(dwfl);
  }
};

class Recorder {
 public:
  Recorder(const Options& options, Sink& sink) : options_(options), sink_(sink) {}

  void add_mapping(int pid, Mapping mapping) {
    Process& process = get(pid);
    process.mappings.push_back(mapping);
    process.pending.push_back(std::move(mapping));
  }

  void exec(int pid) { processes_.erase(pid); }

  // A forked child has its parent's address space until it execs: it shares the parent's
  // unwinder, so its samples unwind with the modules and memo already loaded (loading them again
  // per child took long enough for the ring buffers to overflow with a few children).
  void fork(int parent, int child) {
    if (parent == child) return;
    auto found = processes_.find(parent);
    if (found != processes_.end()) processes_[child] = found->second;
  }

  // The id of the unwound, symbolized stack of one sample; 0 when nothing could be unwound.
  std::uint32_t stack(int pid, int tid, std::uint64_t bp, std::uint64_t sp, std::uint64_t ip, const std::uint8_t* stack,
                      std::uint64_t stack_bytes) {
    Process& process = get(pid);
    // Memo key: the instruction pointer and every word on the stack that points into code. The
    // return addresses that decide the unwound stack are among them; locals and saved data,
    // which change from sample to sample, are not, so a loop's samples unwind once.
    std::string key;
    key.reserve(256);
    for (std::uint64_t value : {std::uint64_t(process.generation), ip}) {
      key.append(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    code_ranges(process);
    for (std::uint64_t offset = 0; offset + 8 <= stack_bytes; offset += 8) {
      std::uint64_t word = 0;
      std::memcpy(&word, stack + offset, sizeof(word));
      auto above = std::upper_bound(process.code.begin(), process.code.end(), std::make_pair(word, UINT64_MAX));
      if (above != process.code.begin() && word < std::prev(above)->second) {
        key.append(reinterpret_cast<const char*>(&offset), 2);
        key.append(reinterpret_cast<const char*>(&word), sizeof(word));
      }
    }
    if (auto found = by_sample_.find(key); found != by_sample_.end()) return found->second;

    if (before_slow_work) before_slow_work();  // the first unwind through a module loads its CFI
    std::vector<std::uint64_t> pcs;
    if (prepare(process, ip)) {
      process.input = {tid, bp, sp, ip, stack, stack_bytes, &pcs, options_.max_frames};
      dwfl_getthread_frames(process.dwfl, tid, on_frame, &process.input);
    }
    if (pcs.empty()) {
      ++unwind_failures_;
      pcs.push_back(ip);
    }
    std::uint32_t id = stack_id(process, pcs);
    by_sample_.emplace(std::move(key), id);
    return id;
  }

  [[nodiscard]] std::uint64_t unwind_failures() const { return unwind_failures_; }

  // Called before work that may take milliseconds (loading a module's debug information,
  // symbolizing a new stack), so that the caller can hold the command meanwhile.
  std::function<void()> before_slow_work;

  // The stack of return addresses someone else collected (the preload library's backtrace()).
  std::uint32_t stack_of_returns(int pid, const std::vector<std::uint64_t>& returns) {
    Process& process = get(pid);
    if (returns.empty()) return 0;
    prepare(process, returns.front());
    std::vector<std::uint64_t> pcs;
    pcs.reserve(returns.size());
    for (std::uint64_t address : returns) pcs.push_back(address - 1);  // the call, not the return
    return stack_id(process, pcs);
  }

 private:
  Process& get(int pid) {
    auto& slot = processes_[pid];
    if (!slot) {
      slot = std::make_shared<Process>();
      slot->pid = pid;
      slot->generation = ++generations_;
      slot->dwfl = dwfl_begin(&kDwflCallbacks);
    }
    return *slot;
  }

  // The process's executable ranges, sorted, for telling code addresses on a stack apart.
  static void code_ranges(Process& process) {
    if (process.code_known == process.mappings.size()) return;
    process.code.clear();
    for (const Mapping& mapping : process.mappings) process.code.emplace_back(mapping.start, mapping.end);
    std::sort(process.code.begin(), process.code.end());
    process.code_known = process.mappings.size();
  }

  void report_pending(Process& process) {
    if (process.pending.empty() || process.dwfl == nullptr) return;
    if (before_slow_work) before_slow_work();
    dwfl_report_begin_add(process.dwfl);
    for (const Mapping& mapping : process.pending) {
      auto base = mapping.start - mapping.offset;
      if (!process.reported.insert({mapping.path, base}).second) continue;
      dwfl_report_elf(process.dwfl, mapping.path.c_str(), mapping.path.c_str(), -1, base, false);
    }
    process.pending.clear();
    dwfl_report_end(process.dwfl, nullptr, nullptr);
    if (!process.attached && dwfl_attach_state(process.dwfl, nullptr, process.pid, &kThreadCallbacks, &process.input)) {
      process.attached = true;
    }
  }

  // Modules known, unwinder attached; the process's maps are read once if the events missed one.
  bool prepare(Process& process, std::uint64_t ip) {
    report_pending(process);
    if ((!process.attached || dwfl_addrmodule(process.dwfl, ip) == nullptr) && !process.read_proc_maps) {
      process.read_proc_maps = true;
      std::istringstream maps(read_text("/proc/" + std::to_string(process.pid) + "/maps"));
      for (std::string line; std::getline(maps, line);) {
        std::uint64_t start = 0, end = 0, offset = 0;
        char perms[8] = {};
        char path[4096] = {};
        if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %4095s", &start, &end, perms, &offset, path) == 5 &&
            perms[2] == 'x' && path[0] == '/') {
          process.pending.push_back({start, end, offset, path});
          process.mappings.push_back({start, end, offset, path});
        }
      }
      report_pending(process);
    }
    return process.attached;
  }

  std::uint32_t stack_id(Process& process, const std::vector<std::uint64_t>& pcs) {
    std::string key(reinterpret_cast<const char*>(&process.generation), sizeof(process.generation));
    key.append(reinterpret_cast<const char*>(pcs.data()), pcs.size() * sizeof(std::uint64_t));
    auto [slot, added] = stacks_.emplace(std::move(key), static_cast<std::uint32_t>(stacks_.size() + 1));
    if (added) {
      if (before_slow_work) before_slow_work();
      std::vector<Frame> frames;
      frames.reserve(pcs.size());
      for (std::uint64_t pc : pcs) {
        // Stacks share most of their frames, and line lookups in large debug information are slow.
        auto [frame, fresh] = frames_.try_emplace({process.generation, pc});
        if (fresh) frame->second = symbolize(process, pc);
        frames.push_back(frame->second);
      }
      sink_.stack(slot->second, frames);
    }
    return slot->second;
  }

  Frame symbolize(Process& process, std::uint64_t pc) {
    Frame frame;
    frame.address = pc;
    Dwfl_Module* module = process.dwfl ? dwfl_addrmodule(process.dwfl, pc) : nullptr;
    if (module == nullptr) return frame;
    const char* main_file = nullptr;
    Dwarf_Addr low = 0;
    const char* name = dwfl_module_info(module, nullptr, &low, nullptr, nullptr, nullptr, &main_file, nullptr);
    frame.module = main_file ? main_file : (name ? name : "");
    frame.module_offset = pc - low;
    frame.function = demangle(dwfl_module_addrname(module, pc));
    if (Dwfl_Line* line = dwfl_module_getsrc(module, pc)) {
      int number = 0;
      if (const char* file = dwfl_lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr)) {
        frame.file = file;
        frame.line = number;
      }
    }
    return frame;
  }

  const Options& options_;
  Sink& sink_;
  std::unordered_map<int, std::shared_ptr<Process>> processes_;
  std::unordered_map<std::string, std::uint32_t> by_sample_;
  std::unordered_map<std::string, std::uint32_t> stacks_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, Frame> frames_;
  std::uint32_t generations_ = 0;
  std::uint64_t unwind_failures_ = 0;
};

// ---- reading records -------------------------------------------------------

struct Reader {
  const std::uint8_t* at;
  const std::uint8_t* end;
  template <typename T>
  T take() {
    T value{};
    if (at + sizeof(T) <= end) std::memcpy(&value, at, sizeof(T));
    at += sizeof(T);
    return value;
  }
  void skip(std::size_t bytes) { at += bytes; }
};

class Session {
 public:
  Session(const Options& options, Sink& sink) : options_(options), sink_(sink), recorder_(options, sink) {}

  std::unordered_map<std::uint64_t, Event> events;  // by perf id
  std::vector<RingBuffer> buffers;
  std::uint64_t lost = 0;

  // Everything the buffers hold now. The records that describe the address space (mappings,
  // forks, execs) go first, from every CPU's buffer, so that a sample finds the modules it needs
  // whichever CPU recorded them; then the samples, read in place (copied only where a record
  // wraps around the end of its buffer), giving space back to the kernel as they go.
  // `behind` is called when a buffer is a quarter full while draining, so the caller can hold
  // the command until this drain ends.
  // Returns the moment up to which every record has now been delivered.
  std::uint64_t drain(bool final = false, const std::function<void()>& behind = {}) {
    // Records of events older than this are all in the buffers by now, whichever CPU wrote them.
    const std::uint64_t settled = final ? UINT64_MAX : monotonic_ns() - 20'000'000ULL;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans(buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      auto* meta = static_cast<perf_event_mmap_page*>(buffers[i].base);
      spans[i] = {meta->data_tail, __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE)};
    }
    for (bool samples : {false, true}) {
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        RingBuffer& buffer = buffers[i];
        auto* meta = static_cast<perf_event_mmap_page*>(buffer.base);
        const auto* data = static_cast<const std::uint8_t*>(buffer.base) + page_size_;
        std::uint64_t at = spans[i].first;
        std::size_t handled = 0;
        while (at < spans[i].second) {
          perf_event_header header{};
          copy_out(data, buffer.data_bytes, at, &header, sizeof(header));
          if (header.size < sizeof(header)) break;
          if ((header.type == PERF_RECORD_SAMPLE) == samples) {
            const std::size_t start = at % buffer.data_bytes;
            if (start + header.size <= buffer.data_bytes) {
              handle(data + start, header.size);
            } else {
              wrapped_.resize(header.size);
              copy_out(data, buffer.data_bytes, at, wrapped_.data(), header.size);
              handle(wrapped_.data(), header.size);
            }
          }
          at += header.size;
          if (samples && ++handled % 256 == 0) {
            __atomic_store_n(&meta->data_tail, at, __ATOMIC_RELEASE);
            if (behind && fullest() > 0.25) behind();
          }
        }
        if (samples) __atomic_store_n(&meta->data_tail, at, __ATOMIC_RELEASE);
      }
    }
    pair_calls(settled);
    return settled;
  }

  [[nodiscard]] std::uint64_t unwind_failures() const { return recorder_.unwind_failures(); }
  Recorder& recorder() { return recorder_; }

  // The first process: its name before any record names it.
  void started(int pid, std::uint64_t time_ns, const std::string& name) {
    names_[pid] = name.substr(0, 15);
    sink_.process({ProcessChange::start, pid, 0, time_ns, names_[pid]});
  }

  // How full the fullest buffer is, 0 to 1.
  [[nodiscard]] double fullest() const {
    double fullest = 0;
    for (const RingBuffer& buffer : buffers) {
      const auto* meta = static_cast<const perf_event_mmap_page*>(buffer.base);
      const std::uint64_t used = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE) - meta->data_tail;
      fullest = std::max(fullest, static_cast<double>(used) / static_cast<double>(buffer.data_bytes));
    }
    return fullest;
  }

 private:
  static void copy_out(const std::uint8_t* data, std::size_t size, std::uint64_t from, void* out, std::size_t bytes) {
    std::size_t start = from % size;
    std::size_t first = std::min(bytes, size - start);
    std::memcpy(out, data + start, first);
    std::memcpy(static_cast<std::uint8_t*>(out) + first, data, bytes - first);
  }

  const Event* event_of(const std::uint8_t* record, std::size_t size) const {
    const auto* header = reinterpret_cast<const perf_event_header*>(record);
    std::uint64_t id = 0;
    if (header->type == PERF_RECORD_SAMPLE) std::memcpy(&id, record + sizeof(perf_event_header), sizeof(id));
    else std::memcpy(&id, record + size - sizeof(id), sizeof(id));  // sample_id_all: the identifier is last
    auto found = events.find(id);
    return found == events.end() ? nullptr : &found->second;
  }

  void handle(const std::uint8_t* record, std::size_t size) {
    const auto* header = reinterpret_cast<const perf_event_header*>(record);
    Reader in{record + sizeof(perf_event_header), record + size};
    switch (header->type) {
      case PERF_RECORD_SAMPLE:
        if (const Event* event = event_of(record, size)) sample(*event, in, header->misc);
        break;
      case PERF_RECORD_MMAP2: {
        auto pid = in.take<std::uint32_t>();
        in.skip(4);
        Mapping mapping;
        mapping.start = in.take<std::uint64_t>();
        mapping.end = mapping.start + in.take<std::uint64_t>();
        mapping.offset = in.take<std::uint64_t>();
        in.skip(4 + 4 + 8 + 8);  // maj, min, ino, ino_generation
        auto prot = in.take<std::uint32_t>();
        in.skip(4);
        mapping.path = reinterpret_cast<const char*>(in.at);
        if ((prot & PROT_EXEC) && !mapping.path.empty() && mapping.path[0] == '/') recorder_.add_mapping(static_cast<int>(pid), mapping);
        break;
      }
      case PERF_RECORD_COMM: {
        auto pid = static_cast<int>(in.take<std::uint32_t>());
        auto tid = static_cast<int>(in.take<std::uint32_t>());
        std::string name(reinterpret_cast<const char*>(in.at), strnlen(reinterpret_cast<const char*>(in.at), 16));
        if ((header->misc & PERF_RECORD_MISC_COMM_EXEC) && pid == tid) {
          recorder_.exec(pid);
          names_[pid] = name;
          // sample_id_all: pid, tid, time and the identifier close the record.
          std::uint64_t time = 0;
          std::memcpy(&time, record + size - 2 * sizeof(std::uint64_t), sizeof(time));
          sink_.process({ProcessChange::exec, pid, 0, time, name});
        }
        break;
      }
      case PERF_RECORD_FORK:
      case PERF_RECORD_EXIT: {
        auto pid = static_cast<int>(in.take<std::uint32_t>());
        auto ppid = static_cast<int>(in.take<std::uint32_t>());
        auto tid = static_cast<int>(in.take<std::uint32_t>());
        in.skip(4);  // ptid
        auto time = in.take<std::uint64_t>();
        if (pid != tid) break;  // a thread, not a process
        if (header->type == PERF_RECORD_FORK) {
          if (pid == ppid) break;
          recorder_.fork(ppid, pid);
          names_[pid] = names_[ppid];
          sink_.process({ProcessChange::fork, pid, ppid, time, names_[pid]});
        } else {
          sink_.process({ProcessChange::exit, pid, 0, time, names_[pid]});
        }
        break;
      }
      case PERF_RECORD_LOST:
        in.skip(8);
        lost += in.take<std::uint64_t>();
        break;
      case PERF_RECORD_LOST_SAMPLES:
        lost += in.take<std::uint64_t>();
        break;
      default:
        break;
    }
  }

  void sample(const Event& event, Reader& in, std::uint16_t misc) {
    in.skip(8);  // identifier
    auto pid = static_cast<int>(in.take<std::uint32_t>());
    auto tid = static_cast<int>(in.take<std::uint32_t>());
    auto time = in.take<std::uint64_t>();
    std::uint64_t address = (event.sample_type & PERF_SAMPLE_ADDR) ? in.take<std::uint64_t>() : 0;
    std::uint64_t args[6] = {};
    if (event.sample_type & PERF_SAMPLE_RAW) {
      auto size = in.take<std::uint32_t>();
      const std::uint8_t* raw = in.at;
      for (std::size_t i = 0; i < event.offsets.size() && i < 6; ++i) {
        if (event.offsets[i] + 8 <= size) std::memcpy(&args[i], raw + event.offsets[i], 8);
      }
      in.skip(size);
    }
    std::uint32_t stack = 0;
    if (event.sample_type & PERF_SAMPLE_REGS_USER) {
      auto abi = in.take<std::uint64_t>();
      std::uint64_t bp = 0, sp = 0, user_ip = 0;
      if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
        bp = in.take<std::uint64_t>();
        sp = in.take<std::uint64_t>();
        user_ip = in.take<std::uint64_t>();
      }
      auto size = in.take<std::uint64_t>();
      const std::uint8_t* bytes = in.at;
      in.skip(size);
      std::uint64_t dynamic = size ? in.take<std::uint64_t>() : 0;
      if (abi != PERF_SAMPLE_REGS_ABI_NONE) stack = recorder_.stack(pid, tid, bp, sp, user_ip, bytes, std::min(dynamic, size));
    }
    switch (event.kind) {
      case EventKind::fault:
        sink_.fault({pid, tid, time, address, stack, (misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_USER});
        break;
      case EventKind::enter:
      case EventKind::exit: {
        SyscallEvent record{time, pid, tid, event.call, event.kind == EventKind::enter, stack, {}};
        std::copy(std::begin(args), std::end(args), std::begin(record.args));
        syscalls_.push_back(record);
        break;
      }
    }
  }

  // A thread's calls alternate enter, exit; its records can sit in different CPUs' buffers, so
  // they are paired in time order, once every record up to `settled` has been read.
  void pair_calls(std::uint64_t settled) {
    std::stable_sort(syscalls_.begin(), syscalls_.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
    std::size_t done = 0;
    for (; done < syscalls_.size() && syscalls_[done].time <= settled; ++done) {
      const SyscallEvent& record = syscalls_[done];
      if (record.enter) {
        MappingCall call;
        call.kind = record.call;
        call.pid = record.pid;
        call.tid = record.tid;
        call.enter_ns = record.time;
        std::copy(std::begin(record.args), std::end(record.args), std::begin(call.args));
        call.stack = record.stack;
        open_[record.tid] = call;
        continue;
      }
      auto open = open_.find(record.tid);
      if (open == open_.end() || open->second.kind != record.call) continue;  // its entry came before tracing
      open->second.exit_ns = record.time;
      open->second.result = static_cast<std::int64_t>(record.args[0]);
      sink_.call(open->second);
      open_.erase(open);
    }
    syscalls_.erase(syscalls_.begin(), syscalls_.begin() + static_cast<std::ptrdiff_t>(done));
  }

  struct SyscallEvent {
    std::uint64_t time;
    int pid, tid;
    CallKind call;
    bool enter;
    std::uint32_t stack;
    std::uint64_t args[6];
  };

  const Options& options_;
  Sink& sink_;
  Recorder recorder_;
  std::vector<SyscallEvent> syscalls_;
  std::unordered_map<int, MappingCall> open_;
  std::unordered_map<int, std::string> names_;
  std::vector<std::uint8_t> wrapped_;
  std::size_t page_size_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
};

volatile sig_atomic_t g_stop_requested = 0;  // SIGTERM: end the command now
volatile sig_atomic_t g_interrupted = 0;     // SIGINT: the command's, passed on if it is not heeded
void on_terminate(int) { g_stop_requested = 1; }
void on_interrupt(int) { g_interrupted = 1; }

// The traced tree as it is now: `root` and its descendants, by the parent each names in
// /proc/PID/stat. A process that left the tree (a daemon that re-parented itself) is not in it.
std::vector<pid_t> process_tree(pid_t root) {
  std::unordered_map<pid_t, std::vector<pid_t>> children;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
      const std::string path = std::string("/proc/") + entry->d_name + "/stat";
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char text[512];
      ssize_t got = read(fd, text, sizeof(text) - 1);
      close(fd);
      if (got <= 0) continue;
      text[got] = 0;
      const char* after_name = std::strrchr(text, ')');  // the name may hold spaces and parentheses
      int parent = 0;
      if (after_name && std::sscanf(after_name + 1, " %*c %d", &parent) == 1 && parent > 0) {
        children[parent].push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
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

// Holds every process of the traced tree still while the tracer catches up. A process that was
// forking as the others stopped shows up in the next look at /proc: look until none is new.
class Hold {
 public:
  explicit Hold(pid_t root) : root_(root) {}
  ~Hold() { release(); }

  void hold() {
    if (!held_.empty()) return;
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
      since_ns_ = monotonic_ns();
      ++pauses;
    }
  }

  void release() {
    if (held_.empty()) return;
    for (pid_t pid : held_) kill(pid, SIGCONT);
    held_.clear();
    paused_ns += monotonic_ns() - since_ns_;
  }

  std::uint64_t pauses = 0, paused_ns = 0;

 private:
  pid_t root_;
  std::vector<pid_t> held_;
  std::uint64_t since_ns_ = 0;
};

struct Descriptors {
  std::vector<int> fds;
  std::vector<RingBuffer>* buffers = nullptr;
  ~Descriptors() {
    if (buffers) {
      for (RingBuffer& buffer : *buffers) munmap(buffer.base, buffer.mapped_bytes);
    }
    for (int fd : fds) close(fd);
  }
};

// The syscall tracepoints, or why they cannot be used here.
Failure kernel_calls(Tracefs& tracefs, std::vector<std::pair<Event, TracepointFormat>>& tracepoints) {
  if (Failure why = find_tracefs(tracefs); !why.ok()) return why;
  const std::pair<CallKind, const char*> calls[] = {{CallKind::mmap, "mmap"}, {CallKind::munmap, "munmap"},
                                                    {CallKind::mremap, "mremap"}, {CallKind::brk, "brk"},
                                                    {CallKind::madvise, "madvise"}};
  for (const auto& [kind, name] : calls) {
    for (bool enter : {true, false}) {
      TracepointFormat format;
      if (Failure why = read_tracepoint(tracefs, std::string(enter ? "sys_enter_" : "sys_exit_") + name, format); !why.ok()) {
        return why;
      }
      Event event{enter ? EventKind::enter : EventKind::exit, kind, enter ? kEnterSampleType : kExitSampleType, format.offsets};
      tracepoints.emplace_back(event, format);
    }
  }
  // Reading them needs privilege: try on this process first.
  perf_event_attr attr = base_attr(kExitSampleType, 0);
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = tracepoints.front().second.id;
  attr.enable_on_exec = 0;
  attr.inherit = 0;
  int fd = perf_event_open(attr, 0, -1);
  if (fd < 0) return failed("perf_event_open(syscalls tracepoint)");
  close(fd);
  return {};
}

// One record of the preload library (trace_preload_linux.c), as it writes it.
struct PreloadRecord {
  std::uint32_t size, kind, pid, tid;
  std::uint64_t enter_ns, exit_ns;
  std::uint64_t args[6];
  std::int64_t result;
  std::uint32_t frames, reserved;
};

// Reads the preload library's records from its pipe as they come.
class PreloadReader {
 public:
  PreloadReader(int fd, Recorder& recorder, Sink& sink) : fd_(fd), recorder_(recorder), sink_(sink) {}

  void drain() {
    char chunk[65536];
    while (true) {
      ssize_t got = read(fd_, chunk, sizeof(chunk));
      if (got <= 0) break;
      pending_.insert(pending_.end(), chunk, chunk + got);
    }
    std::size_t at = 0;
    while (pending_.size() - at >= sizeof(PreloadRecord)) {
      PreloadRecord record;
      std::memcpy(&record, pending_.data() + at, sizeof(record));
      if (record.size < sizeof(PreloadRecord) || pending_.size() - at < record.size) break;
      std::vector<std::uint64_t> returns(record.frames);
      std::memcpy(returns.data(), pending_.data() + at + sizeof(PreloadRecord), record.frames * sizeof(std::uint64_t));
      MappingCall call;
      call.kind = static_cast<CallKind>(record.kind);
      call.pid = static_cast<int>(record.pid);
      call.tid = static_cast<int>(record.tid);
      call.enter_ns = record.enter_ns;
      call.exit_ns = record.exit_ns;
      std::copy(std::begin(record.args), std::end(record.args), std::begin(call.args));
      call.result = record.result;
      call.stack = recorder_.stack_of_returns(call.pid, returns);
      sink_.call(call);
      at += record.size;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
  }

 private:
  int fd_;
  Recorder& recorder_;
  Sink& sink_;
  std::vector<char> pending_;
};

// A process attached to may end as a zombie whose parent has not reaped it yet.
bool is_zombie(pid_t pid) {
  std::string text = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close_paren = text.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < text.size() && text[close_paren + 2] == 'Z';
}

struct ProcessStat {
  bool alive = false;
  std::uint64_t minor_faults = 0, major_faults = 0, user_ticks = 0, system_ticks = 0;
};

ProcessStat read_process_stat(pid_t pid) {
  ProcessStat stat;
  std::string text = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return stat;
  std::istringstream fields(text.substr(close_paren + 2));
  std::vector<std::string> values;
  for (std::string value; fields >> value;) values.push_back(value);
  // After the command name: state(3) ... minflt(10) cminflt majflt(12) cmajflt utime(14) stime(15).
  if (values.size() < 13) return stat;
  stat.alive = true;
  stat.minor_faults = std::stoull(values[7]);
  stat.major_faults = std::stoull(values[9]);
  stat.user_ticks = std::stoull(values[11]);
  stat.system_ticks = std::stoull(values[12]);
  return stat;
}

std::uint64_t ticks_per_second() { return static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK)); }

// The anonymous and private writable mappings a process has when tracing attaches to it.
void report_existing_mappings(pid_t pid, std::uint64_t now_ns, Sink& sink) {
  std::istringstream maps(read_text("/proc/" + std::to_string(pid) + "/maps"));
  for (std::string line; std::getline(maps, line);) {
    std::uint64_t start = 0, end = 0;
    char perms[8] = {};
    char path[4096] = {};
    int fields = std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %*s %4095s", &start, &end, perms, path);
    if (fields < 3 || perms[1] != 'w' || (fields == 4 && path[0] == '/')) continue;
    MappingCall call;
    call.kind = CallKind::existing;
    call.pid = pid;
    call.tid = pid;
    call.enter_ns = call.exit_ns = now_ns;
    call.args[0] = start;
    call.args[1] = end - start;
    call.args[3] = 0x22;  // MAP_PRIVATE | MAP_ANONYMOUS
    call.result = static_cast<std::int64_t>(start);
    sink.call(call);
  }
}

}  // namespace

std::string Failure::message() const {
  return error ? what + ": " + std::strerror(error) + " (errno " + std::to_string(error) + ")" : what;
}

Failure supported() { return {}; }

Result run(const Options& options, Sink& sink, Failure& status) {
  Result result;
  Tracefs tracefs;
  std::vector<std::pair<Event, TracepointFormat>> tracepoints;
  Failure no_kernel_calls = kernel_calls(tracefs, tracepoints);
  const bool preloading = !no_kernel_calls.ok();
  if (preloading && (options.preload_library.empty() || access(options.preload_library.c_str(), R_OK) != 0)) {
    status = no_kernel_calls;
    return result;
  }
  const bool attaching = options.attach_pid > 0;
  if (attaching && kill(options.attach_pid, 0) != 0) {
    status = Failure{errno, "no process " + std::to_string(options.attach_pid) + " to attach to (it may have exited)"};
    return result;
  }
  if (attaching && preloading) {
    status = Failure{no_kernel_calls.error, "attaching to a running process needs the kernel's tracepoints: " +
                                                no_kernel_calls.message()};
    return result;
  }
  if (preloading) tracepoints.clear();
  result.call_source = preloading ? "LD_PRELOAD interposer (mmap, munmap, mremap, madvise; malloc, calloc, realloc, free of "
                                    "at least " + std::to_string(options.preload_min_bytes) + " bytes), timed in user space; "
                                    "tracepoints unavailable: " + no_kernel_calls.message()
                                  : "perf tracepoints syscalls:sys_enter_*/sys_exit_*";
  int preload_pipe[2] = {-1, -1};
  if (preloading && pipe2(preload_pipe, O_CLOEXEC) != 0) {
    status = failed("pipe2");
    return result;
  }

  // The command waits at the door until the events are on it.
  int go[2] = {-1, -1}, exec_error[2] = {-1, -1};
  if (!attaching && (pipe2(go, O_CLOEXEC) != 0 || pipe2(exec_error, O_CLOEXEC) != 0)) {
    status = failed("pipe2");
    return result;
  }
  const pid_t tracer = getpid();
  pid_t child = attaching ? options.attach_pid : fork();
  if (child < 0) {
    status = failed("fork");
    return result;
  }
  if (child == 0) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGQUIT, SIG_DFL);
    // A tracer that dies (killed, or crashed) takes the command with it instead of leaving it
    // running unwatched, holding the terminal.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != tracer) _exit(126);
    if (options.command_stdout_fd >= 0 && dup2(options.command_stdout_fd, STDOUT_FILENO) < 0) _exit(126);
    if (preloading) {
      // The write end stays open across exec, for the library in the command and its children.
      if (fcntl(preload_pipe[1], F_SETFD, 0) != 0) _exit(126);
      const char* existing = getenv("LD_PRELOAD");
      std::string preload = options.preload_library + (existing && *existing ? std::string(":") + existing : "");
      setenv("LD_PRELOAD", preload.c_str(), 1);
      setenv("MEMCOST_PRELOAD_FD", std::to_string(preload_pipe[1]).c_str(), 1);
      setenv("MEMCOST_PRELOAD_MIN_BYTES", std::to_string(options.preload_min_bytes).c_str(), 1);
    }
    char byte = 0;
    if (read(go[0], &byte, 1) != 1) _exit(126);
    std::vector<char*> argv;
    for (const std::string& word : options.command) argv.push_back(const_cast<char*>(word.c_str()));
    argv.push_back(nullptr);
    // The faults this process took before it became the command (its events start at exec):
    // the kernel's count for the command includes them.
    rusage before_exec{};
    getrusage(RUSAGE_SELF, &before_exec);
    const std::uint64_t faults = static_cast<std::uint64_t>(before_exec.ru_minflt + before_exec.ru_majflt);
    (void)!write(exec_error[1], &faults, sizeof(faults));
    execvp(argv[0], argv.data());
    int error = errno;
    (void)!write(exec_error[1], &error, sizeof(error));
    _exit(127);
  }
  if (!attaching) {
    close(go[0]);
    close(exec_error[1]);
  }
  if (preloading) {
    close(preload_pipe[1]);
    fcntl(preload_pipe[0], F_SETFL, O_NONBLOCK);
  }
  struct ClosePipe {
    int fd;
    ~ClosePipe() {
      if (fd >= 0) close(fd);
    }
  } close_preload{preload_pipe[0]};
  auto abandon = [&](Failure why) {
    status = std::move(why);
    if (!attaching) {  // a process we attached to is left as it was
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
      close(go[1]);
      close(exec_error[0]);
    }
    return result;
  };
  // Whom the events are opened on: the command (its threads and children follow by inheritance),
  // or each thread the running process has now.
  std::vector<pid_t> targets{child};
  if (attaching) {
    targets.clear();
    if (DIR* tasks = opendir(("/proc/" + std::to_string(child) + "/task").c_str())) {
      while (dirent* entry = readdir(tasks)) {
        if (entry->d_name[0] != '.') targets.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
      }
      closedir(tasks);
    }
    if (targets.empty()) return abandon(Failure{ESRCH, "no threads under /proc/" + std::to_string(child) + "/task"});
  }

  Session session(options, sink);
  PreloadReader preload(preload_pipe[0], session.recorder(), sink);
  bool kernel_faults = true;
  std::size_t buffers_pages = options.buffer_pages;
  std::uint32_t stack_bytes = options.stack_bytes;
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (geteuid() != 0) {
    // What the kernel will lock for this user: perf_event_mlock_kb per CPU, plus RLIMIT_MEMLOCK.
    rlimit memlock{};
    getrlimit(RLIMIT_MEMLOCK, &memlock);
    std::uint64_t allowed = std::stoull("0" + read_text("/proc/sys/kernel/perf_event_mlock_kb")) * 1024 +
                            (memlock.rlim_cur == RLIM_INFINITY ? (1ULL << 40) : memlock.rlim_cur) /
                                static_cast<std::uint64_t>(std::max(cpus, 1L));
    while (buffers_pages > 8 && (buffers_pages + 1) * page > allowed) buffers_pages /= 2;
    // A small buffer must still hold a couple of thousand samples between two drains.
    const auto fitting = static_cast<std::uint32_t>(buffers_pages * page / 2048) & ~7U;
    stack_bytes = std::max<std::uint32_t>(512, std::min(stack_bytes, fitting));
  }
  Descriptors descriptors;
  descriptors.buffers = &session.buffers;
  for (int cpu = 0; cpu < cpus; ++cpu) {
    int owner_fd = -1;  // the first event on this CPU owns its ring buffer; the others write into it
    for (pid_t target : targets) {
      perf_event_attr attr = base_attr(kFaultSampleType, stack_bytes);
      if (attaching) attr.enable_on_exec = 0;  // enabled below, as the window opens
      attr.type = PERF_TYPE_SOFTWARE;
      attr.config = PERF_COUNT_SW_PAGE_FAULTS;
      attr.sample_period = options.sample_period;
      attr.mmap = 1;
      attr.mmap2 = 1;
      attr.comm = 1;
      attr.comm_exec = 1;
      attr.task = 1;
      attr.watermark = 1;
      attr.wakeup_watermark = static_cast<std::uint32_t>(buffers_pages * page / 8);
      attr.exclude_kernel = kernel_faults ? 0 : 1;
      int fault_fd = perf_event_open(attr, target, cpu);
      if (fault_fd < 0 && kernel_faults && (errno == EACCES || errno == EPERM)) {
        // Not allowed to sample in kernel mode: the faults a system call takes for the command
        // (read() into a fresh buffer) are not seen; its own are.
        kernel_faults = false;
        attr.exclude_kernel = 1;
        fault_fd = perf_event_open(attr, target, cpu);
      }
      if (fault_fd < 0) {
        if (errno == ENODEV) break;  // an offline CPU
        if (attaching && errno == ESRCH) continue;  // a thread that ended meanwhile
        int error = errno;
        return abandon(Failure{error, "perf_event_open(page faults)"});
      }
      descriptors.fds.push_back(fault_fd);
      std::uint64_t id = 0;
      if (owner_fd >= 0) {
        if (ioctl(fault_fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
      } else {
        owner_fd = fault_fd;
        RingBuffer buffer;
        if (Failure why = map_ring_buffer(fault_fd, buffers_pages, page, buffer); !why.ok()) return abandon(why);
        session.buffers.push_back(buffer);
        result.buffer_bytes = buffer.data_bytes;
        result.stack_bytes = stack_bytes;
      }
      ioctl(fault_fd, PERF_EVENT_IOC_ID, &id);
      session.events[id] = Event{EventKind::fault, CallKind::mmap, kFaultSampleType, {}};
      for (const auto& [event, format] : tracepoints) {
        perf_event_attr tp = base_attr(event.sample_type, stack_bytes);
        tp.type = PERF_TYPE_TRACEPOINT;
        tp.config = format.id;
        if (attaching) tp.enable_on_exec = 0;
        int fd = perf_event_open(tp, target, cpu);
        if (fd < 0) {
          if (attaching && errno == ESRCH) continue;
          int error = errno;
          return abandon(Failure{error, "perf_event_open(syscalls tracepoint)"});
        }
        descriptors.fds.push_back(fd);
        if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, owner_fd) != 0) return abandon(failed("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
        ioctl(fd, PERF_EVENT_IOC_ID, &id);
        session.events[id] = event;
      }
    }
  }

  // Ctrl-C belongs to the command (see the contract for when it is passed on); this process
  // records until the command is gone. Attached to a running process, Ctrl-C ends the tracing.
  g_stop_requested = 0;
  g_interrupted = 0;
  struct sigaction interrupt {}, terminate {}, old_int {}, old_term {};
  interrupt.sa_handler = on_interrupt;
  terminate.sa_handler = on_terminate;
  sigaction(SIGINT, attaching ? &terminate : &interrupt, &old_int);
  sigaction(SIGTERM, &terminate, &old_term);

  // The tracer must keep up with the kernel, or records are lost: ahead of ordinary processes
  // where allowed (root). Only this process's own priority, never the command's.
  (void)setpriority(PRIO_PROCESS, 0, -10);
  if (options.window_opened) options.window_opened();
  const std::uint64_t started = monotonic_ns();
  ProcessStat stat_before = attaching ? read_process_stat(child) : ProcessStat{};
  if (attaching) {
    session.started(child, started, read_text("/proc/" + std::to_string(child) + "/comm"));
    report_existing_mappings(child, started, sink);
    for (int fd : descriptors.fds) ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  }
  if (!attaching) {
    session.started(child, started, options.command[0].substr(options.command[0].rfind('/') + 1));
    (void)!write(go[1], "x", 1);
    close(go[1]);
  }
  int exec_errno = 0;
  if (!attaching && read(exec_error[0], &result.faults_before_exec, sizeof(result.faults_before_exec)) !=
                        static_cast<ssize_t>(sizeof(result.faults_before_exec))) {
    result.faults_before_exec = 0;
  }
  if (!attaching &&
      read(exec_error[0], &exec_errno, sizeof(exec_errno)) == static_cast<ssize_t>(sizeof(exec_errno))) {
    close(exec_error[0]);
    waitpid(child, nullptr, 0);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    errno = exec_errno;
    status = Failure{exec_errno, "cannot run " + options.command[0]};
    return result;
  }
  if (!attaching) close(exec_error[0]);
  result.started = true;
  ProcessStat stat_last = stat_before;
  std::uint64_t last_stat_ns = started;

  std::vector<pollfd> polls;
  for (const RingBuffer& buffer : session.buffers) polls.push_back({buffer.fd, POLLIN, 0});
  int wait_status = 0;
  rusage usage{};
  bool terminated = false;
  std::uint64_t interrupted_at = 0;
  int escalation = 0;
  Hold hold(child);
  // A small buffer (no privilege to lock more) overflows within one slow step: hold before each.
  // A large one only once it is filling.
  const bool small_buffers = buffers_pages * page < (32U << 20);
  session.recorder().before_slow_work = [&] {
    if (small_buffers || session.fullest() > 1.0 / 16) hold.hold();
  };
  while (true) {
    // perf may deliver its wakeup only at the next tick: look every millisecond as well.
    poll(polls.data(), polls.size(), 1);
    // Behind the kernel (a buffer a quarter full): hold the traced tree still while catching up,
    // rather than lose records. It is told nothing.
    if (session.fullest() > 0.25) hold.hold();
    const std::uint64_t settled = session.drain(false, [&] { hold.hold(); });
    if (preloading) preload.drain();
    sink.settle(settled);
    hold.release();
    const std::uint64_t now = monotonic_ns();
    if (attaching) {
      // Watch it (its counters, read now and then) until it ends, the time is up, or we are told to stop.
      if (now - last_stat_ns > 100'000'000ULL) {
        if (ProcessStat current = read_process_stat(child); current.alive) stat_last = current;
        last_stat_ns = now;
      }
      if (g_stop_requested || kill(child, 0) != 0 || is_zombie(child) ||
          (options.attach_seconds > 0 && static_cast<double>(now - started) >= options.attach_seconds * 1e9)) {
        // It goes on running: stop the events first, so the counts and the window agree.
        for (int fd : descriptors.fds) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
        if (ProcessStat current = read_process_stat(child); current.alive) stat_last = current;
        break;
      }
      continue;
    }
    if (g_stop_requested && !terminated) {
      signal_tree(child, SIGTERM);
      terminated = true;
    }
    if (g_interrupted && !interrupted_at) interrupted_at = now;
    // Ctrl-C not heeded: passed on (it may have reached this process alone), then firmer.
    static constexpr std::pair<std::uint64_t, int> kEscalation[] = {
        {1'000'000'000ULL, SIGINT}, {4'000'000'000ULL, SIGTERM}, {9'000'000'000ULL, SIGKILL}};
    if (interrupted_at && escalation < 3 && now - interrupted_at >= kEscalation[escalation].first) {
      signal_tree(child, kEscalation[escalation++].second);
    }
    pid_t done = wait4(child, &wait_status, WNOHANG, &usage);
    if (done == child) break;
  }
  session.recorder().before_slow_work = nullptr;
  result.pauses = hold.pauses;
  result.paused_ns = hold.paused_ns;
  result.interrupted = g_interrupted || g_stop_requested;
  result.wall_ns = monotonic_ns() - started;
  if (options.window_closed) options.window_closed();
  session.drain(true);
  if (preloading) preload.drain();
  sink.settle(UINT64_MAX);
  result.fault_source = kernel_faults ? "perf software event page-faults, user and kernel mode"
                                      : "perf software event page-faults, user mode only (kernel-mode sampling not permitted)";
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  result.lost_records = session.lost;
  result.unwind_failures = session.unwind_failures();
  if (attaching) {
    // Not our child: its CPU and faults while watched, from /proc/PID/stat.
    result.user_ns = (stat_last.user_ticks - stat_before.user_ticks) * 1'000'000'000ULL / ticks_per_second();
    result.system_ns = (stat_last.system_ticks - stat_before.system_ticks) * 1'000'000'000ULL / ticks_per_second();
    result.minor_faults = stat_last.minor_faults - stat_before.minor_faults;
    result.major_faults = stat_last.major_faults - stat_before.major_faults;
    return result;
  }
  result.exit_code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  result.signal = WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0;
  result.user_ns = static_cast<std::uint64_t>(usage.ru_utime.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(usage.ru_utime.tv_usec) * 1000ULL;
  result.system_ns = static_cast<std::uint64_t>(usage.ru_stime.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(usage.ru_stime.tv_usec) * 1000ULL;
  result.minor_faults = static_cast<std::uint64_t>(usage.ru_minflt);
  result.major_faults = static_cast<std::uint64_t>(usage.ru_majflt);
  return result;
}

}  // namespace memcost::os::trace
