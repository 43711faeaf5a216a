// Unwinding user stacks copied into samples (DWARF call-frame information, by elfutils' libdwfl,
// as `perf --call-graph dwarf` does) and symbolizing each frame once, with the functions inlined
// at it (libdw's scopes, as `eu-addr2line -i` does) and the Python frames the stack carries.
#pragma once

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <cstring>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "trace/perf/arch.hpp"
#include "trace/unwind/perf_map.hpp"
#include "trace/unwind/python_frames.hpp"
#include "trace/unwind/symbol_names.hpp"
#include "trace/unwind/inline_scopes.hpp"
#include "trace/unwind/symbol_table.hpp"

namespace memcost::trace::detail {

class Unwinder;
struct Process;

struct UnwindInput {
  pid_t tid = 0;
  std::uint64_t bp = 0, sp = 0, ip = 0;
  const std::uint8_t* stack = nullptr;
  std::uint64_t stack_bytes = 0;
  std::vector<std::uint64_t>* pcs = nullptr;
  std::uint32_t max_frames = 0;
  // Stop at the innermost frame of CPython's eval loop (Unwinder::stack says when).
  Unwinder* stop_at_interpreter = nullptr;
  Process* process = nullptr;
};

struct FileMapping {
  std::uint64_t start = 0, end = 0, offset = 0;
  std::string path;
};

// A process's executable mappings of files, from /proc/PID/maps (empty once it has gone).
std::vector<FileMapping> executable_file_mappings(int pid);

// Whether frames in `module` (a file's path) get their source lines and inlined functions, which
// libdw reads from the debug information: not the C library's and the loader's, nor the Python
// interpreter's (libpython, the python executable, the standard library's extension modules in
// lib-dynload). Their frames are never a site while a stack holds a frame of the program's own
// (docs/trace.md), and their lines cost the most: Debian's libc6-dbg is compressed DWARF that libdw
// inflated for every trace (60-70 ms of the probe's 0.23 s on `trace -- true` on the 2-vCPU guest);
// pyenv's libpython carries its DWARF, and a traced `import torch` spent 93 ms of the probe's CPU on
// the lines of 717 of its addresses there. They are named by their symbols.
bool lines_wanted(std::string_view module);

// Whether `address` lies in one of the ranges [starts[i], ends[i]), sorted and disjoint: the test
// every word of a copied stack takes (Process::code_starts).
bool in_sorted_ranges(const std::vector<std::uint64_t>& starts, const std::vector<std::uint64_t>& ends,
                      std::uint64_t address);

// How one code address's frame unwinds, where its call-frame information says the common thing
// (x86-64): the CFA is rsp or rbp plus an offset, the return address is saved at CFA - 8, and rbp
// is undefined, unchanged or saved at the CFA plus an offset; `last`: the return address is
// undefined (the outermost frame, `_start`); `no_information`: no module or no call-frame
// information holds the address (JIT-compiled code, CPython's perf trampolines), where libdwfl
// follows the frame pointer. Anything else (an expression, a signal frame) is `other`, and that
// stack is left to libdwfl.
struct UnwindRule {
  enum class Kind : std::uint8_t { other, plain, last, no_information } kind = Kind::other;
  // Where a register's rule puts it in the caller (rbp's here; the return address's is read the same way).
  enum class Register : std::uint8_t { undefined, same, saved } frame_pointer = Register::undefined;
  bool cfa_from_frame_pointer = false;
  std::int64_t cfa_offset = 0;
  std::int64_t frame_pointer_offset = 0;  // from the CFA, where saved
};

// One traced process image (a pid between two execs): its modules and unwinder.
struct Process {
  int pid = 0;
  std::uint32_t generation = 0;
  Dwfl* dwfl = nullptr;
  bool attached = false;
  std::vector<FileMapping> pending;
  std::set<std::string> reported;  // files given to libdwfl, each once, at its first load bias
  std::vector<FileMapping> mappings;  // every executable file mapping seen
  // Their ranges, sorted, touching ones joined: the starts and the ends apart, so that the search
  // each stack word takes (in_sorted_ranges) reads 8 bytes a step, without a branch to mispredict.
  std::vector<std::uint64_t> code_starts, code_ends;
  std::size_t code_known = static_cast<std::size_t>(-1);
  UnwindInput input;
  bool read_proc_maps = false;
  // Each module's symbols, sorted the first time a frame lands in it (symbol_table.hpp).
  std::unordered_map<Dwfl_Module*, SymbolTable> symbols;
  // Whether an address is in CPython's eval loop, by its symbol (Unwinder::in_interpreter_loop).
  std::unordered_map<std::uint64_t, bool> interpreter_loop;
  // Each code address's unwinding rule, read from its module's call-frame information the first
  // time a frame is there (Unwinder::rule_at).
  std::unordered_map<std::uint64_t, UnwindRule> rules;
  // Each compile unit's inlined functions, walked the first time a frame lands in it (inline_scopes.hpp).
  std::map<std::pair<Dwfl_Module*, Dwarf_Off>, InlineScopes> inline_scopes;

  ~Process() {
    if (dwfl) dwfl_end(dwfl);
  }
};

class Unwinder {
 public:
  Unwinder(const Options& options, Sink& sink) : options_(options), sink_(sink) {}

  void add_mapping(int pid, FileMapping mapping);

  void exec(int pid) { processes_.erase(pid); }

  // A forked child has its parent's address space until it execs: it shares the parent's
  // unwinder, so its samples unwind with the modules and memo already loaded (loading them again
  // per child took long enough for the ring buffers to overflow with a few children).
  void fork(int parent, int child);

  // The id of the unwound, symbolized stack of one sample (taken at `time_ns`); 0 when nothing could be unwound.
  // `python_release`: the release of the GIL the sampled thread was in (the BPF counter read it,
  // bpf/fault_counts.h), whose Python stack comes when the thread takes the GIL back: the stack
  // is then given those frames (as for a pending block, resolve_python), unless the copied stack
  // had a Python block of its own.
  // Where Python frames take the interpreter's place, unwinding stops at the innermost frame of
  // CPython's eval loop: merge_python drops the native frames past it but the interpreter's
  // start-up (main, Py_RunMain), which names nothing. That is where the copied stack holds the
  // preload library's block, where `python_release` is set, and at `moves_break` (a brk that moves
  // the break) where Python frames are read: the preload library claims a growth of the heap with
  // its Python stack at once (a marker, interposer.c), and a shrink's is the interpreter's. A
  // traced `import torch`: up to 48 native frames a stack (Options::max_frames), the innermost
  // eval loop at 8 to 28 of them.
  std::uint32_t stack(int pid, int tid, std::uint64_t bp, std::uint64_t sp, std::uint64_t ip, const std::uint8_t* stack,
                      std::uint64_t stack_bytes, std::uint64_t time_ns, std::uint64_t python_release = 0,
                      bool moves_break = false);

  // A sample whose stack no record keeps (stack_names_call in perf.hpp: a munmap, an mremap, most
  // madvise calls): not unwound, only read for the links to Python stacks it carries, as stack()
  // reads them (the preload library's madvise(NULL, 0, MADV_NORMAL) that resolves a release of
  // the GIL). A traced `import torch` made 820 munmaps of its 3,700 calls. Returns the first
  // Python block on the copy that is pending or decodes (empty: none), which stack() unwinds with.
  std::string_view read_links(int pid, const std::uint8_t* stack, std::uint64_t stack_bytes);

  // The pcs of one copied stack, unwound by its frames' rules where it can be (`by_rules`) or by
  // libdwfl alone: for tests that hold the two to each other.
  std::vector<std::uint64_t> unwound_pcs(int pid, int tid, std::uint64_t bp, std::uint64_t sp, std::uint64_t ip,
                                         const std::uint8_t* stack, std::uint64_t stack_bytes, bool by_rules);

  // Whether `pc` is in CPython's eval loop (its symbol), once per address.
  bool in_interpreter_loop(Process& process, std::uint64_t pc);

  [[nodiscard]] std::uint64_t unwind_failures() const { return unwind_failures_; }
  // Python blocks passed over on copied stacks: a magic word that begins no block that decodes
  // (python_block_decodes), the frames of a block further out taken instead where there is one.
  [[nodiscard]] std::uint64_t python_blocks_refused() const { return python_blocks_refused_; }
  // Stacks unwound (by rules, or by libdwfl where the memo did not have them), and of them those
  // unwound by their frames' rules, without libdwfl (unwind).
  [[nodiscard]] std::uint64_t unwound() const { return unwound_; }
  [[nodiscard]] std::uint64_t unwound_by_rules() const { return unwound_by_rules_; }

  // Names the frames of JIT-compiled code from each process's perf map and sends those stacks
  // again, named. A runtime writes its map as it compiles (node) or only at exit (the JVM's
  // -XX:+DumpPerfMapAtExit), so unnamed addresses are kept until the command has ended, when this
  // is called last; a window's end calls it too. Returns how many stacks gained a name.
  std::size_t name_jit_frames();

  // Stacks with code that no module and no perf map named (a runtime run without its map flag).
  [[nodiscard]] std::size_t unnamed_jit_stacks() const { return unresolved_.size(); }
  // Processes whose perf map was not read: not a regular file of theirs or root's (perf_map.hpp).
  [[nodiscard]] std::size_t refused_perf_maps() const;

  // Called before work that may take milliseconds (loading a module's debug information,
  // symbolizing a new stack), so that the caller can hold the command meanwhile.
  std::function<void()> before_slow_work;

  // The stack of return addresses someone else collected (the preload library's backtrace()),
  // and the Python stack it sent with them.
  std::uint32_t stack_of_returns(int pid, const std::vector<std::uint64_t>& returns, std::string_view python = {},
                                 std::uint64_t time_ns = 0);

  // The Python stack of a release of the GIL (abi.h, MEMCOST_PYTHON_PENDING_MAGIC): each stack
  // that named it is the same (Sink::same_stack) as the stack with its frames, sent now. A marker
  // on a copied stack is found by stack() itself; the preload's record of one comes here.
  void resolve_python(int pid, std::uint64_t release, std::string_view python);
  // The earliest sample time of a stack still waiting for its Python frames (UINT64_MAX: none):
  // what is settled stays before it, so that its call is charged to the stack with them. A wait
  // longer than kPythonWaitNs (a thread that never took the GIL back) is given up. A touching
  // sample's stack holds nothing back (its samples are charged to its id, which gets the frames
  // when they come): it waits as long as an extension's call may run without the GIL,
  // kPythonTouchWaitNs.
  [[nodiscard]] std::uint64_t oldest_pending_python_ns();
  static constexpr std::uint64_t kPythonWaitNs = 1'000'000'000;
  static constexpr std::uint64_t kPythonTouchWaitNs = 600'000'000'000;

 private:
  Process& get(int pid);

  // The link to a Python stack at `offset` of a copied stack (a resolves marker, interposer.c).
  void read_link(int pid, const std::uint8_t* stack, std::uint64_t stack_bytes, std::uint64_t offset);

  // The process's executable ranges, sorted, for telling code addresses on a stack apart.
  static void code_ranges(Process& process);

  // The load bias of the file one mapping shows (where the file's address 0 lies in the process),
  // from the loadable segment that holds the mapping's file offset. `start - offset` is right only
  // where a segment's address equals its offset, as GNU ld lays them out; lld (Rust's default
  // linker) places each segment a page further on, and that guess put every Rust frame a page off.
  std::optional<std::uint64_t> load_bias(const FileMapping& mapping);

  struct Segment {
    std::uint64_t offset = 0, address = 0, file_bytes = 0;
  };
  static constexpr std::uint64_t kPageAlignment = 4096;

  static std::vector<Segment> loadable_segments(const std::string& path);

  void report_pending(Process& process);

  // Modules known, unwinder attached. The process's maps are read once, at its first stack: the
  // mappings an exec makes come before the events are enabled on the new program, so its own
  // binary is in no record (node's frames stayed unnamed until a fault happened to land in it).
  bool prepare(Process& process);

  // process.input's stack unwound into its pcs: by the rules of its frames' addresses where every
  // frame has a plain one (`by_rules`), else by libdwfl. A traced `import torch` unwound 3,400
  // distinct stacks, and libdwfl evaluates each frame's call-frame information anew (looking up
  // the entry, allocating its frame state), as much of the tracer's CPU as the rest together.
  void unwind(Process& process, bool by_rules);
  // The same as libdwfl's on_frame gives, or false where a frame needs libdwfl.
  bool unwind_by_rules(Process& process);
  UnwindRule rule_at(Process& process, std::uint64_t pc);
  // The memo's key for a stack that libdwfl unwinds (stack()).
  static std::string memo_key(Process& process, std::uint64_t ip, std::uint64_t sp, bool cut, std::string_view python,
                              const std::uint8_t* stack, std::uint64_t stack_bytes);

  // `holds`: a pending block's wait holds back what is settled (PendingPython::holds).
  std::uint32_t stack_id(Process& process, const std::vector<std::uint64_t>& pcs, std::string_view python,
                         std::uint64_t time_ns, bool holds = true);

  // A DWARF function's name: its linkage name demangled (qualified, as the symbol table's), else its name.
  static std::string function_name(Dwarf_Die* die);

  // The frames at one instruction, innermost first: the functions inlined there (each at its own
  // line), then the function the code belongs to, at the line where the outermost one was inlined.
  std::vector<Frame> symbolize(Process& process, std::uint64_t pc);

  // The function's module and symbol name, without its line (symbolize reads that).
  static Frame symbolize_function(Process& process, Dwfl_Module* module, std::uint64_t pc);

  // The module's symbol table, read the first time a frame lands in it.
  static SymbolTable& symbols_of(Process& process, Dwfl_Module* module);

  const Options& options_;
  Sink& sink_;
  std::unordered_map<int, std::shared_ptr<Process>> processes_;
  struct Unwound {
    std::uint32_t id = 0;
    std::vector<std::uint64_t> pcs;  // for the same stack with a release's Python frames
  };
  std::unordered_map<std::string, Unwound> by_sample_;
  std::uint64_t unwound_ = 0, unwound_by_rules_ = 0;
  std::unordered_map<std::string, std::uint32_t> stacks_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<Frame>> frames_;
  std::unordered_map<std::string, std::vector<Segment>> segments_;  // per file, read once
  struct Unresolved {
    int pid = 0;
    std::vector<Frame> frames;
    unsigned owner = 0;  // the process's user as the stack came (its perf map must be theirs, or root's)
  };
  std::map<std::uint32_t, Unresolved> unresolved_;  // stacks with frames in no module, by id
  struct PendingPython {
    std::uint32_t id = 0;
    std::vector<std::uint64_t> pcs;
    std::vector<Frame> frames;  // as sent: without Python frames
    std::uint64_t time_ns = 0;  // the sample's
    std::uint64_t read_ns = 0;  // when it was read (the wait's start)
    bool holds = true;          // a call's stack, which holds back what is settled (not a touching sample's)
  };
  std::map<std::pair<int, std::uint64_t>, std::vector<PendingPython>> pending_python_;  // by process and release
  // Releases resolved before a stack that named them was read (the marker's CPU's buffer was
  // read first) or read late: kept for them, the latest kResolvedKept (oldest first in resolved_order_).
  std::map<std::pair<int, std::uint64_t>, std::string> resolved_python_;
  std::deque<std::pair<int, std::uint64_t>> resolved_order_;
  static constexpr std::size_t kResolvedKept = 4096;
  std::unordered_map<int, PerfMap> perf_maps_;
  std::unordered_map<int, std::uint64_t> perf_map_read_ns_;  // when each was last read, as stacks came
  static constexpr std::uint64_t kPerfMapFreshNs = 1'000'000;
  std::uint32_t generations_ = 0;
  std::uint64_t unwind_failures_ = 0;
  std::uint64_t python_blocks_refused_ = 0;
};

}  // namespace memcost::trace::detail
