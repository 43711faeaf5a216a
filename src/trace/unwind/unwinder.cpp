// Unwinding and symbolizing user stacks (see unwinder.hpp).
#include "trace/unwind/unwinder.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <sstream>

#include "memcost/measure.hpp"

namespace memcost::trace::detail {
namespace {

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
  // Only the copied stack is read. The bounds are checked without adding to `address`: call-frame
  // expressions on a corrupt or foreign stack compute addresses near 2^64, and `address + 8` wrapped
  // past zero once let such a read through (a Rust binary crashed the probe).
  auto* input = static_cast<UnwindInput*>(arg);
  if (input->stack == nullptr || input->stack_bytes < sizeof(Dwarf_Word) || address < input->sp) return false;
  const std::uint64_t offset = address - input->sp;
  if (offset > input->stack_bytes - sizeof(Dwarf_Word)) return false;
  std::memcpy(result, input->stack + offset, sizeof(Dwarf_Word));
  return true;
}

bool set_initial_registers(Dwfl_Thread* thread, void* arg) {
  auto* input = static_cast<UnwindInput*>(arg);
  Dwarf_Word frame = input->bp, stack = input->sp;  // the pc is set on its own
  if (!dwfl_thread_state_registers(thread, kDwarfFramePointer, 1, &frame) ||
      !dwfl_thread_state_registers(thread, kDwarfStackPointer, 1, &stack)) {
    return false;
  }
  dwfl_thread_state_register_pc(thread, input->ip);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {next_thread, get_thread, memory_read, set_initial_registers, nullptr, nullptr};
// Separate debug information is looked up by build ID in the local debug folders only
// (/usr/lib/debug/.build-id, what distributions' -dbg/-debuginfo packages install).
// dwfl_standard_find_debuginfo would go on to debuginfod: it loads libdebuginfod and its TLS and
// HTTP libraries (about 25, 12 ms, in every trace that meets a file without local debug
// information) and, where DEBUGINFOD_URLS is set, fetches from the network while the trace runs.
const Dwfl_Callbacks kDwflCallbacks = {nullptr, dwfl_build_id_find_debuginfo, dwfl_offline_section_address, nullptr};

int on_frame(Dwfl_Frame* frame, void* arg) {
  auto* input = static_cast<UnwindInput*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: the call itself is one byte before.
  input->pcs->push_back(activation ? pc : pc - 1);
  if (input->stop_at_interpreter && input->stop_at_interpreter->in_interpreter_loop(*input->process, input->pcs->back())) {
    return DWARF_CB_ABORT;
  }
  return input->pcs->size() >= input->max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

}  // namespace

std::vector<FileMapping> executable_file_mappings(int pid) {
  std::vector<FileMapping> found;
  for (const os::MapEntry& entry : os::process_maps(pid)) {
    if (entry.executable && entry.path.starts_with('/')) found.push_back({entry.start, entry.end, entry.offset, entry.path});
  }
  return found;
}

void Unwinder::add_mapping(int pid, FileMapping mapping) {
  Process& process = get(pid);
  process.mappings.push_back(mapping);
  process.pending.push_back(std::move(mapping));
}

void Unwinder::fork(int parent, int child) {
  if (parent == child) return;
  auto found = processes_.find(parent);
  if (found != processes_.end()) processes_[child] = found->second;
}

std::uint32_t Unwinder::stack(int pid, int tid, std::uint64_t bp, std::uint64_t sp, std::uint64_t ip, const std::uint8_t* stack,
                               std::uint64_t stack_bytes, std::uint64_t time_ns, std::uint64_t python_release,
                               bool moves_break) {
  Process& process = get(pid);
  // Cut at the eval loop (stack() in unwinder.hpp) where the sample says so; a block found below cuts too.
  const bool cut = (moves_break && options_.python_frames) || python_release != 0;
  // The preload library's Python stack, and the links to released ones the copy carries.
  const std::string_view python = read_links(pid, stack, stack_bytes);
  // A sample's release of the GIL: the same unwound stack, with a pending block for its Python
  // frames (not in the memo's key: each release is new, its unwinding is not).
  std::string released;
  if (python.empty() && python_release != 0) {
    const memcost_python_pending pending{MEMCOST_PYTHON_PENDING_MAGIC, python_release};
    released.assign(reinterpret_cast<const char*>(&pending), sizeof(pending));
  }
  std::vector<std::uint64_t> pcs;
  const bool known = prepare(process);
  if (known) {
    process.input = {tid, bp, sp, ip, stack, stack_bytes, &pcs, options_.max_frames, cut || !python.empty() ? this : nullptr, &process};
  }
  // By each frame's rule (a few lookups a frame) where every frame has a plain one; else through
  // the memo, whose key takes longer to make than such an unwinding, and libdwfl.
  if (!known || !unwind_by_rules(process)) {
    const std::string key = memo_key(process, ip, sp, cut, python, stack, stack_bytes);
    if (auto found = by_sample_.find(key); found != by_sample_.end()) {
      return released.empty() ? found->second.id : stack_id(process, found->second.pcs, released, time_ns, false);
    }
    if (before_slow_work) before_slow_work();  // the first unwind through a module loads its CFI
    if (known) unwind(process, false);
    if (pcs.empty()) {
      ++unwind_failures_;
      pcs.push_back(ip);
    }
    const std::uint32_t id = stack_id(process, pcs, python, time_ns);
    const std::uint32_t released_id = released.empty() ? id : stack_id(process, pcs, released, time_ns, false);
    by_sample_.emplace(key, Unwound{id, std::move(pcs)});
    return released_id;
  }
  ++unwound_;
  ++unwound_by_rules_;
  const std::uint32_t id = stack_id(process, pcs, python, time_ns);
  return released.empty() ? id : stack_id(process, pcs, released, time_ns, false);
}

std::string Unwinder::memo_key(Process& process, std::uint64_t ip, std::uint64_t sp, bool cut, std::string_view python,
                               const std::uint8_t* stack, std::uint64_t stack_bytes) {
  // The instruction pointer and every word on the stack that points into code. The return
  // addresses that decide the unwound stack are among them; locals and saved data, which change
  // from sample to sample, are not, so a loop's samples unwind once. A Python stack the preload
  // library put there is part of the key too.
  std::string key;
  key.reserve(256);
  for (std::uint64_t value : {std::uint64_t(process.generation), ip, std::uint64_t(cut)}) {
    key.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  key.append(python);
  code_ranges(process);
  // From the first code range's start to the last one's end: small numbers fall outside, and one
  // comparison rules them out before the search; so do pointers into the copied stack itself
  // (saved frame pointers, locals' addresses), most of what is left in a deep stack.
  const std::uint64_t code_low = process.code_starts.empty() ? 0 : process.code_starts.front();
  const std::uint64_t code_bytes = process.code_starts.empty() ? 0 : process.code_ends.back() - code_low;
  for (std::uint64_t offset = 0; offset + 8 <= stack_bytes; offset += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, stack + offset, sizeof(word));
    if (word - code_low >= code_bytes || word - sp < stack_bytes) continue;
    if (in_sorted_ranges(process.code_starts, process.code_ends, word)) {
      key.append(reinterpret_cast<const char*>(&offset), 2);
      key.append(reinterpret_cast<const char*>(&word), sizeof(word));
    }
  }
  return key;
}

std::vector<std::uint64_t> Unwinder::unwound_pcs(int pid, int tid, std::uint64_t bp, std::uint64_t sp, std::uint64_t ip,
                                                  const std::uint8_t* stack, std::uint64_t stack_bytes, bool by_rules) {
  Process& process = get(pid);
  std::vector<std::uint64_t> pcs;
  if (prepare(process)) {
    process.input = {tid, bp, sp, ip, stack, stack_bytes, &pcs, options_.max_frames, nullptr, &process};
    unwind(process, by_rules);
  }
  return pcs;
}

void Unwinder::unwind(Process& process, bool by_rules) {
  ++unwound_;
  if (by_rules && unwind_by_rules(process)) {
    ++unwound_by_rules_;
    return;
  }
  process.input.pcs->clear();
  dwfl_getthread_frames(process.dwfl, process.input.tid, on_frame, &process.input);
}

bool Unwinder::unwind_by_rules(Process& process) {
#if defined(__x86_64__)
  UnwindInput& input = process.input;
  std::vector<std::uint64_t>& pcs = *input.pcs;
  std::uint64_t pc = input.ip, sp = input.sp, bp = input.bp;
  bool bp_known = true;
  // As libdwfl's on_frame: a return address points after its call (the call is a byte before),
  // the innermost frame's address is where it is; the eval loop and max_frames end the stack.
  for (bool innermost = true;; innermost = false) {
    const std::uint64_t at = innermost ? pc : pc - 1;
    pcs.push_back(at);
    if (input.stop_at_interpreter != nullptr && in_interpreter_loop(process, at)) return true;
    if (pcs.size() >= input.max_frames) return true;
    const UnwindRule rule = rule_at(process, at);
    if (rule.kind == UnwindRule::Kind::last) return true;
    if (rule.kind == UnwindRule::Kind::no_information) {
      // libdwfl's x86-64 frame-pointer step: the caller's rbp at [rbp], its return address at
      // [rbp + 8], its stack at rbp + 16; no rbp, no return address, or a stack that does not
      // grow ends the stack.
      if (!bp_known || bp == 0) return true;
      Dwarf_Word caller_bp = 0, return_address = 0;
      if (!memory_read(nullptr, bp, &caller_bp, &input)) caller_bp = 0;
      if (!memory_read(nullptr, bp + 8, &return_address, &input)) return true;
      const std::uint64_t caller_sp = bp + 16;
      if (caller_sp <= sp) return true;
      bp = caller_bp;
      sp = caller_sp;
      pc = return_address;
      continue;
    }
    if (rule.kind != UnwindRule::Kind::plain || (rule.cfa_from_frame_pointer && !bp_known)) return false;
    const std::uint64_t cfa = (rule.cfa_from_frame_pointer ? bp : sp) + static_cast<std::uint64_t>(rule.cfa_offset);
    Dwarf_Word return_address = 0;
    // Past the copy libdwfl knows no caller either: the stack ends, as there.
    if (!memory_read(nullptr, cfa - 8, &return_address, &input)) return true;
    if (rule.frame_pointer == UnwindRule::Register::undefined) {
      bp_known = false;
    } else if (rule.frame_pointer == UnwindRule::Register::saved) {
      Dwarf_Word saved = 0;
      bp_known = memory_read(nullptr, cfa + static_cast<std::uint64_t>(rule.frame_pointer_offset), &saved, &input);
      bp = saved;
    }
    if (return_address == 0) return true;  // libdwfl's end of the stack too
    pc = return_address;
    sp = cfa;
  }
#else
  (void)process;
  return false;
#endif
}

namespace {

#if defined(__x86_64__)
constexpr unsigned kDwarfReturnAddress = 16;  // x86-64's return address column

// Where a register's rule says it is: `undefined`, `same`, or saved at the CFA plus `offset`.
// libdw says undefined with no operations in the caller's memory, the same value with no
// operations and none given (libdwfl's handle_cfi reads them so), saved with
// DW_OP_call_frame_cfa and maybe DW_OP_plus_uconst. Anything else: false.
bool plain_register(Dwarf_Frame* frame, unsigned regno, UnwindRule::Register& where, std::int64_t& offset) {
  Dwarf_Op memory[3];
  Dwarf_Op* ops = nullptr;
  std::size_t count = 0;
  if (dwarf_frame_register(frame, static_cast<int>(regno), memory, &ops, &count) != 0) return false;
  offset = 0;
  if (count == 0) {
    where = ops == nullptr ? UnwindRule::Register::same : UnwindRule::Register::undefined;
    return true;
  }
  if (ops[0].atom != DW_OP_call_frame_cfa || count > 2) return false;
  if (count == 2) {
    if (ops[1].atom != DW_OP_plus_uconst) return false;
    offset = static_cast<std::int64_t>(ops[1].number);
  }
  where = UnwindRule::Register::saved;
  return true;
}

UnwindRule rule_of(Dwarf_Frame* frame) {
  UnwindRule rule;
  Dwarf_Addr start = 0, end = 0;
  bool signal = false;
  if (dwarf_frame_info(frame, &start, &end, &signal) != static_cast<int>(kDwarfReturnAddress) || signal) return rule;
  Dwarf_Op* cfa = nullptr;
  std::size_t count = 0;
  if (dwarf_frame_cfa(frame, &cfa, &count) != 0 || count != 1 || cfa[0].atom != DW_OP_bregx ||
      (cfa[0].number != kDwarfStackPointer && cfa[0].number != kDwarfFramePointer)) {
    return rule;
  }
  UnwindRule::Register return_address{};
  std::int64_t return_offset = 0;
  if (!plain_register(frame, kDwarfReturnAddress, return_address, return_offset) ||
      !plain_register(frame, kDwarfFramePointer, rule.frame_pointer, rule.frame_pointer_offset)) {
    return rule;
  }
  rule.cfa_from_frame_pointer = cfa[0].number == kDwarfFramePointer;
  rule.cfa_offset = static_cast<std::int64_t>(cfa[0].number2);
  if (return_address == UnwindRule::Register::undefined) {
    rule.kind = UnwindRule::Kind::last;
  } else if (return_address == UnwindRule::Register::saved && return_offset == -8) {
    rule.kind = UnwindRule::Kind::plain;
  }
  return rule;
}
#endif

}  // namespace

UnwindRule Unwinder::rule_at(Process& process, std::uint64_t pc) {
  auto [slot, fresh] = process.rules.try_emplace(pc);
#if defined(__x86_64__)
  if (!fresh) return slot->second;
  if (before_slow_work) before_slow_work();  // the first frame in a module loads its call-frame information
  // libdwfl's order: the module's .eh_frame, then its .debug_frame, then the frame pointer.
  slot->second.kind = UnwindRule::Kind::no_information;
  Dwfl_Module* module = dwfl_addrmodule(process.dwfl, pc);
  for (bool eh : {true, false}) {
    if (module == nullptr) break;
    Dwarf_Addr bias = 0;
    Dwarf_CFI* cfi = eh ? dwfl_module_eh_cfi(module, &bias) : dwfl_module_dwarf_cfi(module, &bias);
    Dwarf_Frame* frame = nullptr;
    if (cfi == nullptr || dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0) continue;
    slot->second = rule_of(frame);
    std::free(frame);
    break;
  }
#endif
  return slot->second;
}

void Unwinder::read_link(int pid, const std::uint8_t* stack, std::uint64_t stack_bytes, std::uint64_t offset) {
  if (offset + kPythonHeaderBytes > stack_bytes) return;
  memcost_python_pending link{};
  std::memcpy(&link, stack + offset, sizeof(link));
  const std::uint64_t block = offset + sizeof(link);
  resolve_python(pid, link.release, python_block_at(stack + block, stack_bytes - block));
}

std::string_view Unwinder::read_links(int pid, const std::uint8_t* stack, std::uint64_t stack_bytes) {
  std::string_view python;
  for (std::uint64_t offset = 0; offset + 8 <= stack_bytes; offset += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, stack + offset, sizeof(word));
    if ((word == kPythonMagic || word == kPythonPendingMagic) && python.empty()) {
      // A stack block's magic word that begins no block that decodes is passed over, and counted:
      // its names had bytes that are not UTF-8 in a traced `import torch` (3 runs of 10 ended
      // with the json library's error before such names were refused), and a block further out,
      // if there is one, is the call's.
      const std::string_view found = python_block_at(stack + offset, stack_bytes - offset);
      if (word == kPythonPendingMagic || python_block_decodes(found)) {
        python = found;
      } else {
        ++python_blocks_refused_;
      }
    }
    if (word == kPythonResolvesMagic) read_link(pid, stack, stack_bytes, offset);
  }
  return python;
}

bool Unwinder::in_interpreter_loop(Process& process, std::uint64_t pc) {
  auto [known, fresh] = process.interpreter_loop.try_emplace(pc, false);
  if (fresh) {
    // The eval loop is C: its symbol's name, not demangled, nor the module's name looked up.
    Dwfl_Module* module = dwfl_addrmodule(process.dwfl, pc);
    const char* name = module != nullptr ? symbols_of(process, module).name_at(pc) : nullptr;
    known->second = name != nullptr && interpreter_loop(name);
  }
  return known->second;
}

std::size_t Unwinder::refused_perf_maps() const {
  return static_cast<std::size_t>(std::count_if(perf_maps_.begin(), perf_maps_.end(),
                                                [](const auto& entry) { return entry.second.refused(); }));
}

namespace {

// The frames in no module that `map` names, named; whether any is left unnamed.
bool name_from_map(const PerfMap& map, const std::string& path, std::vector<Frame>& frames, bool& changed) {
  bool left = false;
  for (Frame& frame : frames) {
    if (!frame.module.empty() || frame.kind != FrameKind::native) continue;
    if (const std::string_view name = map.find(frame.address); !name.empty()) {
      frame = jit_frame(frame.address, name, path);
      changed = true;
    } else {
      left = true;
    }
  }
  return left;
}

}  // namespace

std::size_t Unwinder::name_jit_frames() {
  std::size_t named = 0;
  // Each process's map read once a pass, not once a stack (a PyTorch import left 2,588 stacks to
  // name: as many opens of its one map).
  std::unordered_map<int, bool> loaded;
  for (auto it = unresolved_.begin(); it != unresolved_.end();) {
    Unresolved& stack = it->second;
    PerfMap& map = perf_maps_[stack.pid];
    const std::string path = perf_map_path(stack.pid);
    bool changed = false, left = true;
    auto [load, first] = loaded.try_emplace(stack.pid, false);
    if (first) load->second = map.load(path, stack.owner);
    if (load->second) left = name_from_map(map, path, stack.frames, changed);
    if (changed) {
      sink_.stack(it->first, stack.frames);
      ++named;
    }
    it = left ? std::next(it) : unresolved_.erase(it);
  }
  return named;
}

void Unwinder::resolve_python(int pid, std::uint64_t release, std::string_view python) {
  if (python.empty()) return;
  // Kept for the stacks that name it and are read later (another CPU's buffer, or the same
  // thread's samples read after its marker).
  if (resolved_python_.insert_or_assign({pid, release}, std::string(python)).second) {
    resolved_order_.push_back({pid, release});
    if (resolved_order_.size() > kResolvedKept) {
      resolved_python_.erase(resolved_order_.front());
      resolved_order_.pop_front();
    }
  }
  auto pending = pending_python_.find({pid, release});
  if (pending == pending_python_.end()) return;
  const std::vector<Frame> resolved = python_frames(python);
  auto process = processes_.find(pid);
  for (PendingPython& stack : pending->second) {
    std::vector<Frame> frames = merge_python(stack.frames, resolved);
    if (auto jit = unresolved_.find(stack.id); jit != unresolved_.end()) jit->second.frames = frames;
    sink_.stack(stack.id, frames);
    // A call's stack is made the same as the stack with the frames, so that the calls of one line
    // are one site; a touching sample's is named by its frames alone (its site is its name).
    if (process != processes_.end() && stack.holds) {
      sink_.same_stack(stack.id, stack_id(*process->second, stack.pcs, python, stack.time_ns));
    }
  }
  pending_python_.erase(pending);
}

std::uint64_t Unwinder::oldest_pending_python_ns() {
  if (pending_python_.empty()) return UINT64_MAX;
  const std::uint64_t now = measure::now_ns();
  std::uint64_t oldest = UINT64_MAX;
  for (auto it = pending_python_.begin(); it != pending_python_.end();) {
    auto& stacks = it->second;
    stacks.erase(std::remove_if(stacks.begin(), stacks.end(),
                                [now](const PendingPython& stack) {
                                  return now - stack.read_ns > (stack.holds ? kPythonWaitNs : kPythonTouchWaitNs);
                                }),
                 stacks.end());
    for (const PendingPython& stack : stacks) {
      if (stack.holds) oldest = std::min(oldest, stack.time_ns);
    }
    it = stacks.empty() ? pending_python_.erase(it) : std::next(it);
  }
  return oldest;
}

std::uint32_t Unwinder::stack_of_returns(int pid, const std::vector<std::uint64_t>& returns, std::string_view python,
                                         std::uint64_t time_ns) {
  Process& process = get(pid);
  if (returns.empty()) return 0;
  prepare(process);
  std::vector<std::uint64_t> pcs;
  pcs.reserve(returns.size());
  for (std::uint64_t address : returns) pcs.push_back(address - 1);  // the call, not the return
  return stack_id(process, pcs, python, time_ns);
}

Process& Unwinder::get(int pid) {
  auto& slot = processes_[pid];
  if (!slot) {
    slot = std::make_shared<Process>();
    slot->pid = pid;
    slot->generation = ++generations_;
    slot->dwfl = dwfl_begin(&kDwflCallbacks);
  }
  return *slot;
}

void Unwinder::code_ranges(Process& process) {
  if (process.code_known == process.mappings.size()) return;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  ranges.reserve(process.mappings.size());
  for (const FileMapping& mapping : process.mappings) ranges.emplace_back(mapping.start, mapping.end);
  std::sort(ranges.begin(), ranges.end());
  // Ranges that touch or overlap made one: fewer steps for the search every stack word takes.
  process.code_starts.clear();
  process.code_ends.clear();
  for (const auto& [start, end] : ranges) {
    if (!process.code_ends.empty() && start <= process.code_ends.back()) {
      process.code_ends.back() = std::max(process.code_ends.back(), end);
    } else {
      process.code_starts.push_back(start);
      process.code_ends.push_back(end);
    }
  }
  process.code_known = process.mappings.size();
}

bool in_sorted_ranges(const std::vector<std::uint64_t>& starts, const std::vector<std::uint64_t>& ends,
                      std::uint64_t address) {
  std::size_t left = starts.size();
  if (left == 0 || address < starts[0]) return false;
  // The last start at or before the address: halving with a conditional move, not a branch (a
  // branch on stack words mispredicts half the time, and was most of this search's cost).
  const std::uint64_t* found = starts.data();
  while (left > 1) {
    const std::size_t half = left / 2;
    found = found[half] <= address ? found + half : found;
    left -= half;
  }
  return address < ends[static_cast<std::size_t>(found - starts.data())];
}

std::optional<std::uint64_t> Unwinder::load_bias(const FileMapping& mapping) {
  auto [slot, fresh] = segments_.try_emplace(mapping.path);
  if (fresh) slot->second = loadable_segments(mapping.path);
  // The segment the mapping begins with; two segments can share a page of the file (lld's read-only
  // data ends in the page where its code begins), so one that starts in the mapping's first page wins.
  const Segment* found = nullptr;
  for (const Segment& segment : slot->second) {
    const std::uint64_t page_offset = segment.offset & ~(kPageAlignment - 1);
    if (page_offset == mapping.offset) {
      found = &segment;
      break;
    }
    if (!found && mapping.offset > page_offset && mapping.offset < segment.offset + segment.file_bytes) found = &segment;
  }
  if (found == nullptr) return std::nullopt;
  // File offset x lies at bias + address + (x - offset); the mapping's first byte is file offset O.
  return mapping.start + found->offset - mapping.offset - found->address;
}

std::vector<Unwinder::Segment> Unwinder::loadable_segments(const std::string& path) {
  std::vector<Segment> segments;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return segments;
  elf_version(EV_CURRENT);
  if (Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr)) {
    std::size_t count = 0;
    if (elf_getphdrnum(elf, &count) == 0) {
      for (std::size_t i = 0; i < count; ++i) {
        GElf_Phdr header;
        if (gelf_getphdr(elf, static_cast<int>(i), &header) != nullptr && header.p_type == PT_LOAD) {
          segments.push_back({header.p_offset, header.p_vaddr, header.p_filesz});
        }
      }
    }
    elf_end(elf);
  }
  close(fd);
  return segments;
}

void Unwinder::report_pending(Process& process) {
  if (process.pending.empty() || process.dwfl == nullptr) return;
  if (before_slow_work) before_slow_work();
  dwfl_report_begin_add(process.dwfl);
  for (const FileMapping& mapping : process.pending) {
    // Not an ELF file (a JIT's code, a deleted file): no module; --perf-map names such code.
    const std::optional<std::uint64_t> bias = load_bias(mapping);
    // A file mapped a second time at another bias is not a second load of it but a runtime copying
    // part of it (V8 remaps its embedded builtins next to its JIT code): libdwfl refuses the
    // overlapping module, and a refused report left the file's first module unusable. The perf
    // map names such code.
    if (!bias || !process.reported.insert(mapping.path).second) continue;
    // add_p_vaddr: the segments lie at bias + their addresses (libdwfl ignores the bias for ET_EXEC).
    dwfl_report_elf(process.dwfl, mapping.path.c_str(), mapping.path.c_str(), -1, *bias, true);
  }
  process.pending.clear();
  dwfl_report_end(process.dwfl, nullptr, nullptr);
  if (!process.attached && dwfl_attach_state(process.dwfl, nullptr, process.pid, &kThreadCallbacks, &process.input)) {
    process.attached = true;
  }
}

bool Unwinder::prepare(Process& process) {
  report_pending(process);
  if (!process.read_proc_maps) {
    process.read_proc_maps = true;
    for (const FileMapping& mapping : executable_file_mappings(process.pid)) {
      process.pending.push_back(mapping);
      process.mappings.push_back(mapping);
    }
    report_pending(process);
  }
  return process.attached;
}

std::uint32_t Unwinder::stack_id(Process& process, const std::vector<std::uint64_t>& pcs, std::string_view python,
                                 std::uint64_t time_ns, bool holds) {
  // A release already resolved (its marker's buffer was read first, or this sample's was read
  // late): the stack with its frames.
  if (const std::uint64_t release = pending_release(python); release != 0) {
    if (auto early = resolved_python_.find({process.pid, release}); early != resolved_python_.end()) {
      python = early->second;
    }
  }
  std::string key(reinterpret_cast<const char*>(&process.generation), sizeof(process.generation));
  key.append(reinterpret_cast<const char*>(pcs.data()), pcs.size() * sizeof(std::uint64_t));
  key.append(python);
  auto [slot, added] = stacks_.emplace(std::move(key), static_cast<std::uint32_t>(stacks_.size() + 1));
  if (added) {
    if (before_slow_work) before_slow_work();
    std::vector<Frame> frames;
    frames.reserve(pcs.size());
    for (std::uint64_t pc : pcs) {
      // Stacks share most of their frames, and line lookups in large debug information are slow.
      auto [chain, fresh] = frames_.try_emplace({process.generation, pc});
      if (fresh) chain->second = symbolize(process, pc);
      frames.insert(frames.end(), chain->second.begin(), chain->second.end());
    }
    if (const std::uint64_t release = pending_release(python); release != 0) {
      pending_python_[{process.pid, release}].push_back({slot->second, pcs, frames, time_ns, measure::now_ns(), holds});
    }
    frames = merge_python(std::move(frames), python_frames(python));
    // Code in no module is JIT-compiled (or a stack gone wrong): named by the process's perf map
    // where it already names it (CPython 3.12 writes a function's line before it runs it), else
    // kept to be named by it later (the JVM writes its map at exit). Named now, the stack is sent
    // once: sent unnamed and again named, a traced 3.12 `import torch` sent 700 of its 2,500 stacks
    // twice, the second time all at its end.
    if (std::any_of(frames.begin(), frames.end(), [](const Frame& f) { return f.module.empty() && f.address != 0; })) {
      struct stat status {};
      const unsigned owner = stat(("/proc/" + std::to_string(process.pid)).c_str(), &status) == 0 ? status.st_uid : 0;
      PerfMap& map = perf_maps_[process.pid];
      const std::string path = perf_map_path(process.pid);
      bool changed = false;
      // The map as read within the last millisecond first (a runtime that moves its code writes the
      // new place's line before it runs there); what was appended since, where that names too little.
      std::uint64_t& read_ns = perf_map_read_ns_[process.pid];
      const std::uint64_t now = measure::now_ns();
      bool left = now - read_ns >= kPerfMapFreshNs || name_from_map(map, path, frames, changed);
      if (left) {
        read_ns = now;
        if (map.load(path, owner)) left = name_from_map(map, path, frames, changed);
      }
      if (left) unresolved_[slot->second] = {process.pid, frames, owner};
    }
    sink_.stack(slot->second, frames);
  }
  return slot->second;
}

std::string Unwinder::function_name(Dwarf_Die* die) {
  Dwarf_Attribute attribute;
  for (int name : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, name, &attribute))) return demangle(linkage);
  }
  const char* plain = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attribute));
  return plain ? plain : "";
}

bool lines_wanted(std::string_view module) {
  const auto slash = module.rfind('/');
  const std::string_view file = module.substr(slash == std::string_view::npos ? 0 : slash + 1);
  for (std::string_view prefix : {"libc.so", "libc-", "ld-linux", "ld64.so", "libpthread", "libdl.so", "librt.so", "libm.so"})
    if (file.starts_with(prefix)) return false;
  if (file.starts_with("libpython") && file.find(".so") != std::string_view::npos) return false;
  if (module.find("/lib-dynload/") != std::string_view::npos) return false;
  // The interpreter's executable: python, python3, python3.12 (a static build holds all of it).
  std::string_view version = file.starts_with("python") ? file.substr(6) : "-";
  return !std::all_of(version.begin(), version.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

std::vector<Frame> Unwinder::symbolize(Process& process, std::uint64_t pc) {
  Dwfl_Module* module = process.dwfl ? dwfl_addrmodule(process.dwfl, pc) : nullptr;
  Frame frame = symbolize_function(process, module, pc);
  const bool lines = module != nullptr && lines_wanted(frame.module);
  if (Dwfl_Line* line = lines ? dwfl_module_getsrc(module, pc) : nullptr) {
    int number = 0;
    if (const char* file = dwfl_lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr)) {
      frame.file = file;
      frame.line = number;
    }
  }
  Dwarf_Addr bias = 0;
  Dwarf_Die* unit = lines ? dwfl_module_addrdie(module, pc, &bias) : nullptr;
  // The functions inlined here, innermost first, then the one they are inlined in, as the code is
  // nested (eu-addr2line -i gives the same).
  std::vector<Dwarf_Die> scopes;
  if (unit != nullptr) {
    auto [index, fresh] = process.inline_scopes.try_emplace({module, dwarf_dieoffset(unit)});
    if (fresh) index->second = InlineScopes(unit);
    scopes = index->second.at(pc - bias);
  }
  std::vector<Frame> chain;
  Dwarf_Files* files = nullptr;
  std::size_t file_count = 0;
  if (!scopes.empty() && dwarf_getsrcfiles(unit, &files, &file_count) != 0) files = nullptr;
  for (std::size_t i = 0; i < scopes.size(); ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram) break;
    if (tag != DW_TAG_inlined_subroutine) continue;
    Frame inlined = frame;
    inlined.kind = FrameKind::inlined;
    inlined.function = function_name(&scopes[i]);
    chain.push_back(std::move(inlined));
    // Where it was inlined: the next frame's file and line.
    Dwarf_Attribute attribute;
    Dwarf_Word file = 0, line = 0;
    frame.file.clear();
    frame.line = 0;
    if (files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attribute), &file) == 0) {
      if (const char* name = dwarf_filesrc(files, file, nullptr, nullptr)) frame.file = name;
    }
    if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attribute), &line) == 0) frame.line = static_cast<int>(line);
  }
  chain.push_back(std::move(frame));
  return chain;
}

Frame Unwinder::symbolize_function(Process& process, Dwfl_Module* module, std::uint64_t pc) {
  Frame frame;
  frame.address = pc;
  if (module == nullptr) return frame;
  const char* main_file = nullptr;
  Dwarf_Addr low = 0;
  const char* name = dwfl_module_info(module, nullptr, &low, nullptr, nullptr, nullptr, &main_file, nullptr);
  frame.module = main_file ? main_file : (name ? name : "");
  frame.module_offset = pc - low;
  frame.function = demangle(symbols_of(process, module).name_at(pc));
  return frame;
}

SymbolTable& Unwinder::symbols_of(Process& process, Dwfl_Module* module) {
  auto [table, fresh] = process.symbols.try_emplace(module);
  if (fresh) table->second = SymbolTable(module);
  return table->second;
}

}  // namespace memcost::trace::detail
