"""`trace` summary: what a command's big allocations cost the OS, per allocation site (the stack
that created the memory) and per touching site (the stack that faulted it in), with advice.

The probe attributes as the records stream (src/trace/attribution.hpp) and reports fault counts
per (allocation origin, touching stack, process, page kind) and each origin's lifetime summary;
this module groups them by site (a call path from the first frame of the program's own code; see
SiteNames), prices them with
this machine's measured costs and gives advice. Fault time is estimated from the measured cost per
MB (a `memcost costs` result or a short calibration); where the kernel allowed it, it is also
measured by sampling CPU time in the fault handler (each sample one period of a thread's CPU time,
charged to the fault the thread took last), with its Poisson error, and the share of it spent
clearing pages. munmap, mremap and madvise time is measured from the calls' entry and exit.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Optional

from .cost_model import CostModel  # noqa: F401 - the cost model trace prices with, for its users
from .derived import MB
# A site starts at the first frame of the program's own code: leading frames of these modules (the C
# library, the loader, allocators, the C++ runtime) ...
C_AND_ALLOCATOR_MODULES = ("libc.so", "libc-", "ld-linux", "libstdc++", "libgcc_s", "libjemalloc", "libtcmalloc",
                           "libmimalloc", "libmemcost-preload", "libpthread")
# JIT runtimes' own code: HotSpot and its launcher; node's binary (V8 and node's C++) below.
RUNTIME_MODULES = ("libjvm.so", "libjli.so", "libjava.so", "libnode.so")
SYSTEM_MODULES = C_AND_ALLOCATOR_MODULES + RUNTIME_MODULES
# Executables that are a runtime, not the program: their frames are skipped like a library's.
RUNTIME_EXECUTABLES = ("node", "nodejs")
# ... and of these functions, from language runtimes and standard libraries compiled into the
# program: C++ standard-library templates, Go's runtime, Rust's alloc, core and std, CPython's
# and numpy's allocators (docs/trace.md lists them; --skip-frames adds, --keep-frames exempts).
SYSTEM_FUNCTIONS = r"^(std::|__gnu_cxx::|__cxxabiv1::|operator new|operator delete|runtime\.|alloc::|core::|<alloc::|" \
                   r"<core::|_?Py(Mem|Object)_|_PyObject_|PyDataMem_|default_malloc|npy_alloc_cache|__rust_)"
# A Python frame is the interpreter's or a library's when its file is in the standard library or
# an installed package (numpy's own Python wrappers among them), frozen into the interpreter, or
# numpy's generated dispatch code ("<__array_function__ internals>").
PYTHON_SYSTEM_FILES = r"(/(site|dist)-packages/|/lib/python\d\.\d+/|^<frozen |^<__array_function__ )"
# JIT-compiled code (a frame of kind "jit", named from the runtime's perf map) is the program's own
# unless it is the runtime's: V8's builtins, stubs and bytecode handlers and node's own JavaScript
# (`node:` files); HotSpot's interpreter, stubs and adapters (no method name) and the Java platform's
# packages. docs/trace.md lists them.
JIT_SYSTEM_FUNCTIONS = r"^(Builtin:|Builtins_|Stub:|BytecodeHandler:|RegExp:|Interpreter$|StubRoutines|" \
                       r"(java|javax|jdk|sun|com\.sun)\.)"
JIT_SYSTEM_FILES = r"^(node:|internal/)"
# Advice is given only where it saves at least this much, and this share of the run.
ADVICE_MIN_MS = 1.0
ADVICE_MIN_SHARE = 0.01
OUTSIDE = "(outside traced mappings: program text, stacks, memory mapped before the trace)"


@dataclass
class Trace:
    """The probe's aggregate: stacks, processes, fault counts per (allocation origin, touching
    stack, process, program, page kind), the allocation origins' lifetime summaries, and the run."""
    stacks: dict
    faults: list       # dicts: allocation_stack, allocation_call ("" outside), touch_stack, pid, program, huge, faults
    origins: list      # dicts: stack, call, made, freed, bytes, freed_bytes, map_ns, free_ns, largest_*, freed_by_size
    run: dict
    processes: list = field(default_factory=list)  # start, fork, exec and exit of each traced process, in time order
    fault_time: list = field(default_factory=list)  # dicts: allocation_stack, allocation_call, touch_stack, pid,
    #                                                 program, samples, zeroing_samples (CPU samples in the fault handler),
    #                                                 timed_faults, timings_ended, kernel_ns, kernel_ns_squares (timed there)
    # Faults counted in the kernel: the touching stacks sampled, as dicts: allocation_stack,
    # allocation_call, touch_stack, pid, program, samples, faults (what the samples stand for).
    touch_samples: list = field(default_factory=list)
    # The system calls that took faults without an exception (MAP_POPULATE, mlock, pinning): dicts
    # call, stack (their touching stack in `faults`), calls, faults, call_ns.
    call_faults: list = field(default_factory=list)

    @property
    def period(self) -> int:
        return self.run.get("sample_period", 1)


# The columns that key a fault count in the probe's `faults` records (`fault_time` has all but `huge`).
FAULT_KEY = ("allocation_stack", "allocation_call", "touch_stack", "pid", "program", "huge")
# `fault_time`'s columns for the faults timed in the kernel (docs/probe.md).
KERNEL_TIME = ("timed_faults", "timings_ended", "kernel_ns", "kernel_ns_squares")


def read(samples: list) -> Trace:
    stacks, faults, origins, processes, fault_time, touch_samples, call_faults = {}, [], [], [], [], [], []
    run: dict = {}
    for sample in samples:
        record, metrics = sample["case"]["record"], sample["metrics"]
        if record == "stack":
            stacks[metrics["stack"]] = metrics["frames"]
        elif record == "faults":
            columns = (*FAULT_KEY, "faults")
            faults.extend(dict(zip(columns, row)) for row in zip(*(metrics[name] for name in columns)))
        elif record == "fault_time":
            # The faults timed in the kernel are absent from results made before it timed them.
            columns = [*FAULT_KEY[:-1], "samples", "zeroing_samples", *(name for name in KERNEL_TIME if name in metrics)]
            fault_time.extend(dict(zip(columns, row)) for row in zip(*(metrics[name] for name in columns)))
        elif record == "touch_samples":
            columns = (*FAULT_KEY[:-1], "samples", "faults")
            touch_samples.extend(dict(zip(columns, row)) for row in zip(*(metrics[name] for name in columns)))
        elif record == "allocations":
            origins.append({"call": sample["case"]["call"], **metrics})
        elif record == "call_faults":
            call_faults.append({"call": sample["case"]["call"], **metrics})
        elif record == "process":
            processes.append({"change": sample["case"]["change"], **metrics})
        elif record == "run":
            run = metrics
    processes.sort(key=lambda p: p["time_ns"])
    return Trace(stacks, faults, origins, run, processes, fault_time, touch_samples, call_faults)


def touch_rows(trace: Trace) -> list[dict]:
    """The fault counts by touching stack. Recorded one by one, they are the `faults` rows. Counted in
    the kernel, each count (exact, per allocation origin, process and page kind) is shared between
    the touching stacks sampled for that origin and process in proportion to what their samples
    stand for, each row also carrying `samples` (0: no stack was sampled for it: touch_stack 0)."""
    if not trace.touch_samples:
        return trace.faults
    sampled: dict[tuple, list] = defaultdict(list)
    for row in trace.touch_samples:
        sampled[(row["allocation_stack"], row["allocation_call"], row["pid"], row["program"])].append(row)
    rows = []
    for row in trace.faults:
        if row["touch_stack"]:  # counted with its own stack (a system call's faults): exact, not shared
            rows.append(row)
            continue
        touches = sampled.get((row["allocation_stack"], row["allocation_call"], row["pid"], row["program"]), [])
        weight = sum(touch["faults"] for touch in touches)
        if not weight:
            rows.append({**row, "samples": 0})
            continue
        for touch, share in zip(touches, _apportioned(row["faults"], [touch["faults"] for touch in touches])):
            rows.append({**row, "touch_stack": touch["touch_stack"], "faults": share, "samples": touch["samples"]})
    return rows


def _apportioned(total: int, weights: list[float]) -> list[int]:
    """`total` shared in proportion to `weights` in whole faults that add up to it exactly (the
    largest remainders get the faults left over): every export then sums to the counted total."""
    whole = sum(weights)
    exact = [total * weight / whole for weight in weights]
    shares = [int(value) for value in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in by_remainder[:total - sum(shares)]:
        shares[i] += 1
    return shares


def processes_table(trace: Trace) -> list[dict]:
    """Faults per process of the traced tree, one row per program a pid ran (an exec starts a new
    row): which process took them, by pid and name."""
    programs: dict[int, list[tuple[str, int]]] = defaultdict(list)  # pid -> (name, parent) per program, in order
    for event in trace.processes:
        if event["change"] in ("start", "fork", "exec"):
            known = programs[event["pid"]]
            known.append((event["name"], event["parent"] or (known[-1][1] if known else 0)))
    faults: Counter = Counter()
    attributed: Counter = Counter()
    for row in trace.faults:
        key = (row["pid"], row["program"])
        faults[key] += row["faults"] * trace.period
        if row["allocation_call"]:
            attributed[key] += row["faults"] * trace.period
    rows = []
    for pid, known in programs.items():
        for program, (name, parent) in enumerate(known):
            if faults[(pid, program)] or program == len(known) - 1:
                rows.append({"pid": pid, "name": name, "parent": parent, "faults": faults[(pid, program)],
                             "faults_attributed": attributed[(pid, program)]})
    for pid, program in faults:
        if pid not in programs:  # a process no record named (none expected)
            rows.append({"pid": pid, "name": "?", "parent": 0, "faults": faults[(pid, program)],
                         "faults_attributed": attributed[(pid, program)]})
    rows.sort(key=lambda r: r["faults"], reverse=True)
    return rows


@dataclass(frozen=True)
class FrameFilter:
    """Which frames are the program's own: the default list above, plus `skip` (a regular
    expression: matching functions are skipped too), less `keep` (matching functions are the
    program's even where the default list would skip them)."""
    skip: Optional[str] = None
    keep: Optional[str] = None

    def is_users(self, frame: dict, by_module_only: bool = False) -> bool:
        module = os.path.basename(frame.get("module") or "")
        function = frame.get("function") or ""
        if not module:
            return False  # a frame in no module is not code (an unwinder that ran off the stack): never a site
        names = [function, frame.get("file") or ""] if frame.get("kind") == "python" else [function]
        if self.keep and any(re.search(self.keep, name) for name in names):
            return True
        if self.skip and any(re.search(self.skip, name) for name in names):
            return False
        if frame.get("kind") == "python":
            return not re.search(PYTHON_SYSTEM_FILES, frame.get("file") or "")
        if frame.get("kind") == "jit":
            # A compiled method or function has a name with a dot or a source file; a stub has neither.
            named = "." in function or bool(frame.get("file"))
            return named and not re.search(JIT_SYSTEM_FUNCTIONS, function) \
                and not re.search(JIT_SYSTEM_FILES, frame.get("file") or "")
        if module.startswith(SYSTEM_MODULES) or module in RUNTIME_EXECUTABLES:
            return False
        if by_module_only:
            return True
        # A demangled template function may start with its return type: "void std::vector<…>::…".
        head, _, rest = function.partition(" ")
        named = [function, rest] if rest and "(" not in head and "<" not in head else [function]
        return not any(re.match(SYSTEM_FUNCTIONS, name) for name in named)


DEFAULT_FRAMES = FrameFilter()


def frames_of(params: dict) -> FrameFilter:
    """The frames that are the program's own, as a trace's parameters asked to name them."""
    return FrameFilter(params.get("skip_frames"), params.get("keep_frames"))


def user_frame(frames: list, which: FrameFilter = DEFAULT_FRAMES) -> Optional[dict]:
    """The first frame of the program itself, past the allocator, runtimes and standard libraries.
    In a stack with Python frames the program is its Python code: the first Python frame outside
    the standard library and installed packages (or a native frame --keep-frames names), else the
    innermost Python frame; likewise in a stack with JIT-compiled frames of the program's own (a
    JavaScript function, a Java method). Where every frame is a runtime's (an interpreter's stack,
    the JVM's heap, one cut short), the first frame past the C library and allocators: the most
    specific name it has."""
    index = user_frame_index(frames, which)
    return frames[index] if index is not None else None


def _interpreted_kind(frames: list) -> Optional[str]:
    """"python" or "jit" when the stack holds frames of an interpreted or JIT-compiled language,
    whose program is in those frames."""
    for kind in ("python", "jit"):
        if any(frame.get("kind") == kind for frame in frames):
            return kind
    return None


def user_frame_index(frames: list, which: FrameFilter = DEFAULT_FRAMES) -> Optional[int]:
    """The index of user_frame() in `frames`, or None for an empty stack."""
    language = _interpreted_kind(frames)
    if language == "python" or (language == "jit" and any(f.get("kind") == "jit" and which.is_users(f) for f in frames)):
        for index, frame in enumerate(frames):
            if frame.get("kind") == language:
                if which.is_users(frame):
                    return index
            elif which.keep and re.search(which.keep, frame.get("function") or ""):
                return index
        return next(index for index, frame in enumerate(frames) if frame.get("kind") == language)
    for by_module_only in (False, True):
        for index, frame in enumerate(frames):
            if which.is_users(frame, by_module_only):
                return index
    # Every frame is a library's or a runtime's: the first one past the C library and the allocators.
    for index, frame in enumerate(frames):
        module = os.path.basename(frame.get("module") or "")
        if module and not module.startswith(C_AND_ALLOCATOR_MODULES):
            return index
    return 0 if frames else None


def runtime_of(frame: Optional[dict]) -> Optional[str]:
    """The language runtime whose code a site's frame is, where advice has that runtime's own
    switches: "jvm" (HotSpot or a Java method), "node", "go"; None for native code and Python."""
    if frame is None:
        return None
    module = os.path.basename(frame.get("module") or "")
    function = frame.get("function") or ""
    if module.startswith(("libjvm.so", "libjli.so", "libjava.so")):
        return "jvm"
    if frame.get("kind") == "jit":
        return "node" if frame.get("file") else "jvm" if "." in function else None
    if module in RUNTIME_EXECUTABLES:
        return "node"
    return "go" if function.startswith("runtime.") else None


def frame_name(frame: Optional[dict]) -> str:
    if frame is None:
        return "(no stack)"
    function = frame.get("function") or (f"{os.path.basename(frame['module'])}+{frame.get('module_offset', 0):#x}"
                                         if frame.get("module") else f"{frame['address']:#x}")
    if frame.get("file") and not _library_line(frame):
        return f"{function} ({os.path.basename(frame['file'])}:{frame['line']})"
    return function


# Source files of languages' standard libraries, where the debug information has a program's
# function's instruction come from inlined library code without saying where it was inlined
# (rustc's `vec!` into the caller): a line there would name the library's file, not the caller's.
LIBRARY_SOURCES = r"(/rustc/[0-9a-f]+/library/|/usr/include/c\+\+/|/go/src/runtime/)"


def _library_line(frame: dict) -> bool:
    return frame.get("kind") in ("native", None) and bool(re.search(LIBRARY_SOURCES, frame.get("file") or "")) \
        and frame.get("function", "").split("::")[0] not in ("std", "core", "alloc") \
        and not (frame.get("function") or "").startswith(("std::", "runtime."))


CALLED_FROM = " ← "
READABLE_CALLERS = 3  # callers a table shows; the results keep the whole path


def readable(site: str) -> str:
    """A site as tables show it, as perf shortens names: template arguments and parameter lists
    cut to `<…>` and `(…)`, a leading return type dropped (`void std::vector<…>::push_back(…)`
    becomes `std::vector<…>::push_back(…)`); the location in brackets, `(file:line)`, stays. The
    full name stays in the results and the exports."""
    parts = []
    for part in site.split(CALLED_FROM):
        part = re.sub(r"( \[clone [^\]]*\])|\.(constprop|isra|part|cold|lto_priv)\.\d+", "", part)  # GCC's clones
        part = _shorten_brackets(part)
        head, _, rest = part.partition(" ")
        if rest and re.fullmatch(r"[\w:]+", head) and head != "operator" and re.match(r"[\w:~]+[<(:]", rest):
            part = rest  # a return type before a qualified name
        parts.append(part)
    if len(parts) > READABLE_CALLERS + 1:
        parts = parts[:READABLE_CALLERS + 1] + ["…"]
    return CALLED_FROM.join(parts)


def _shorten_brackets(text: str) -> str:
    out, index = [], 0
    while index < len(text):
        char = text[index]
        # "(file:line)" after a space; Go's receivers, "runtime.(*mheap).grow", after a dot.
        location = char == "(" and (index == 0 or text[index - 1] in " .")
        operator = char == "<" and re.search(r"operator\s*<?$", text[:index]) is not None  # operator<, operator<<
        # Template arguments follow a name; "<module>", "<genexpr>" and "(<string>:2)" are Python's names.
        unnamed = char == "<" and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] in "_:>"))
        operator = operator or unnamed
        anonymous = text.startswith("(anonymous namespace)", index)
        if char in "<(" and not location and not operator and not anonymous:
            close = _matching_bracket(text, index)
            if close < 0:
                out.append(text[index:])
                break
            out.append(char + ("…" if text[index + 1:close].strip() else "") + text[close])
            index = close + 1
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _matching_bracket(text: str, start: int) -> int:
    depth = 0
    for index in range(start, len(text)):
        if text[index] in "<(":
            depth += 1
        elif text[index] in ">)" and text[index - 1] != "-":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _callers(frames: list, index: int, which: FrameFilter) -> list[dict]:
    """The frames that called frames[index], innermost first, that are the program's own: in a
    Python or JIT-compiled stack, that language's. A runtime's, a library's or the loader's frames
    tell no paths of the program apart (the Go heap growing for two functions is one site, the
    runtime's, each function a touching site of its own)."""
    language = frames[index].get("kind") if frames[index].get("kind") in ("python", "jit") else None
    return [frame for frame in frames[index + 1:]  # a caller without a name (a stripped library's) tells a user nothing
            if (language is None or frame.get("kind") == language) and which.is_users(frame) and frame.get("function")]


def _caller_key(frame: dict) -> tuple:
    return (frame.get("function") or f"{frame.get('module_offset', frame.get('address', 0)):#x}",
            os.path.basename(frame.get("file") or ""), frame.get("line") or 0)


class SiteNames:
    """Sites as call paths (docs/trace.md, "Sites are call paths"): a stack's site is its first frame of the
    program's own code, followed out through its callers until the first caller that tells it
    apart from every other stack whose site starts at the same frame. A function reached by one
    path keeps its short name; a helper called from two places is two sites, `helper ← caller`
    each (more callers where those are the same). Give it every stack of one role (the allocation
    stacks, or the touching stacks) so that paths are told apart within that role."""

    def __init__(self, stacks: dict, stack_ids, which: FrameFilter = DEFAULT_FRAMES):
        self._names: dict[int, str] = {}
        groups: dict[str, dict[int, list[tuple]]] = defaultdict(dict)
        for stack_id in set(stack_ids):
            frames = stacks.get(stack_id, [])
            index = user_frame_index(frames, which)
            if index is None:
                self._names[stack_id] = frame_name(None)
                continue
            first = frame_name(frames[index])
            groups[first][stack_id] = [_caller_key(frame) for frame in _callers(frames, index, which)]
        for first, paths in groups.items():
            for stack_id, path in paths.items():
                self._names[stack_id] = first + "".join(CALLED_FROM + _caller_name(key, paths.values(), depth)
                                                        for depth, key in enumerate(_distinguishing(path, paths.values())))

    def __call__(self, stack_id: int) -> str:
        return self._names.get(stack_id, frame_name(None))

    def rename(self, stack_id: int, name: str) -> None:
        self._names[stack_id] = name


# Go maps its heap on the system stack (runtime.systemstack), where no frame of the goroutine that
# asked for memory is left: an allocation stack of the runtime's frames alone is an arena or the
# runtime's own structures, for many allocations, and is named so rather than by a runtime function.
GO_HEAP = "(Go heap: arenas the runtime maps for many allocations; the Go functions that fault them are the touching sites)"
GO_STARTUP = "(Go runtime start-up: its heap's reservations and the allocator's own structures)"
GO_STARTUP_FUNCTIONS = ("runtime.schedinit", "runtime.mallocinit", "runtime.rt0_go", "runtime.rt0_go.abi0")


def go_runtime_mapping(frames: list) -> Optional[str]:
    """GO_HEAP or GO_STARTUP for a mapping the Go runtime made with no Go function of the program's on
    its stack; None otherwise."""
    named = [frame.get("function") or "" for frame in frames if frame.get("function")]
    if not named or not named[0].startswith("runtime.") or \
            not all(function.startswith(("runtime.", "internal/", "sync.")) for function in named):
        return None
    return GO_STARTUP if any(function in GO_STARTUP_FUNCTIONS for function in named) else GO_HEAP


def _distinguishing(path: list, others) -> list:
    """The shortest prefix of `path` that no other distinct path shares unless it is the same path
    all the way (a stack cut short, a prefix of a longer one, does not count as different)."""
    distinct = {tuple(other) for other in others}
    depth = 0
    while depth < len(path):
        sharing = {other for other in distinct if other[:depth] == tuple(path[:depth])}
        if all(tuple(path)[:len(other)] == other[:len(path)] for other in sharing):
            break
        depth += 1
    return path[:depth]


def _caller_name(key: tuple, others, depth: int) -> str:
    """A caller by its function; with its line where another path has the same function there."""
    function, file, line = key
    same_function = {other[depth] for other in others if len(other) > depth and other[depth][0] == function}
    return f"{function}:{line}" if len(same_function) > 1 and line else function


BEFORE_TRACE = "(mapped before the trace)"


def allocation_site(names: SiteNames, stack_id: int, call: str) -> str:
    if not call:
        return OUTSIDE
    return BEFORE_TRACE if call == "existing" else names(stack_id)


def allocation_names(trace: Trace, which: FrameFilter = DEFAULT_FRAMES) -> SiteNames:
    names = SiteNames(trace.stacks, [origin["stack"] for origin in trace.origins], which)
    for origin in trace.origins:
        if (runtime := go_runtime_mapping(trace.stacks.get(origin["stack"], []))) is not None:
            names.rename(origin["stack"], runtime)
    return names


def touching_names(trace: Trace, which: FrameFilter = DEFAULT_FRAMES) -> SiteNames:
    return SiteNames(trace.stacks, [row["touch_stack"] for row in touch_rows(trace)], which)


def _ms(ns: float) -> float:
    return ns / 1e6


@dataclass
class Site:
    """The allocation origins (stack and call) that share one site, summed."""
    site: str
    origins: list
    faults_base: int = 0
    faults_thp: int = 0
    cpu_samples: int = 0      # in the fault handler, charged to this site's faults
    zeroing_samples: int = 0  # of those, clearing pages
    kernel_time: Counter = field(default_factory=Counter)  # KERNEL_TIME, summed

    def total(self, key: str) -> int:
        return sum(origin[key] for origin in self.origins)

    def freed_by_size(self) -> dict[int, dict]:
        sizes: dict[int, dict] = {}
        for origin in self.origins:
            for size in origin["freed_by_size"]:
                into = sizes.setdefault(size["bytes"], Counter())
                into.update({k: v for k, v in size.items() if k != "bytes"})
        return sizes

    def outgrown(self) -> Counter:
        """What the buffers this site outgrew (freed once a larger successor existed) cost, summed."""
        total: Counter = Counter()
        for origin in self.origins:
            total.update(origin.get("outgrown") or {})
        return total

    def largest(self) -> dict:
        return max(self.origins, key=lambda origin: origin["largest_bytes"])


def _fault_us(cost: CostModel, base: float, thp: float) -> float:
    return base * cost.fault_us("base") + thp * cost.fault_us("thp")


def measured(samples: int, period_ns: int) -> dict:
    """Fault time from CPU samples in the fault handler: each stands for one period of CPU time;
    the count is Poisson, so its standard error is its square root."""
    return {"fault_ms_measured": samples * period_ns / 1e6, "fault_ms_measured_error": math.sqrt(samples) * period_ns / 1e6,
            "zeroing_share": None}


def measured_in_kernel(faults: float, time: Counter) -> dict:
    """Fault time measured in the kernel for one fault in N chosen at random (each timed from the
    handler's entry tracepoint to its page-count update; one that updated none counts 0): the timed
    faults' mean time × the faults, and the standard error of that total (the timed ones a random
    sample of the faults; 0 when every fault was timed)."""
    timed = time["timed_faults"]
    if timed <= 0 or faults <= 0:
        return {"fault_ms_kernel": None, "fault_ms_kernel_error": None, "faults_timed": timed}
    mean_ns = time["kernel_ns"] / timed
    # The squares are of t / 16 ns (the kernel's sums stay in 64 bits).
    variance = max(time["kernel_ns_squares"] * 256 / timed - mean_ns ** 2, 0.0) * timed / max(timed - 1, 1)
    unsampled = max(1 - timed / faults, 0.0)
    return {"fault_ms_kernel": faults * mean_ns / 1e6,
            "fault_ms_kernel_error": faults * math.sqrt(variance / timed * unsampled) / 1e6, "faults_timed": timed}


def summarize(samples: list, cost: CostModel, which: FrameFilter = DEFAULT_FRAMES) -> dict:
    """`which`: the frames that are the program's own (a site is the first of them)."""
    trace = read(samples)
    # The machine's THP setting (always, madvise, never; "absent" without THP), as the probe read it.
    thp_mode = trace.run.get("thp_mode", "absent")
    thp_available = thp_mode in ("always", "madvise")
    run = trace.run
    wall_ms = _ms(run.get("wall_ns", 0)) or 1e-9
    cpu_ms = _ms(run.get("user_ns", 0) + run.get("system_ns", 0)) or 1e-9
    period = trace.period

    sites: dict[str, Site] = {}
    by_origin: dict[tuple, Site] = {}
    names = allocation_names(trace, which)
    for origin in trace.origins:
        name = allocation_site(names, origin["stack"], origin["call"])
        by_origin[(origin["stack"], origin["call"])] = sites.setdefault(name, Site(name, []))
        sites[name].origins.append(origin)
    for row in trace.faults:
        site = by_origin.get((row["allocation_stack"], row["allocation_call"]))
        if site is not None:
            if row["huge"]:
                site.faults_thp += row["faults"] * period
            else:
                site.faults_base += row["faults"] * period
    # A mapping call that faulted its pages in (mmap with MAP_POPULATE or MAP_LOCKED): its time is
    # fault time, not map time, shared between the sites its faults went to by their number.
    faulting_map_ns: Counter = Counter()
    touched_by: dict[int, list[dict]] = defaultdict(list)
    for row in trace.faults:
        if row["touch_stack"]:
            touched_by[row["touch_stack"]].append(row)
    for call in trace.call_faults:
        if call["call"] not in ("mmap", "mremap"):
            continue
        charged = [(by_origin.get((row["allocation_stack"], row["allocation_call"])), row["faults"])
                   for row in touched_by[call["stack"]]]
        total = sum(faults for _, faults in charged)
        for site, faults in charged:
            if site is not None and total:
                faulting_map_ns[site.site] += call["call_ns"] * faults / total
    sample_period_ns = run.get("cpu_sample_period_ns", 0)
    for row in trace.fault_time:
        site = by_origin.get((row["allocation_stack"], row["allocation_call"]))
        if site is not None:
            site.cpu_samples += row["samples"]
            site.zeroing_samples += row["zeroing_samples"]
            site.kernel_time.update({name: row.get(name, 0) for name in KERNEL_TIME})
    timing_one_in = run.get("fault_timing_one_in", 0) if run.get("counted_in_kernel") else 0

    # The program's own madvise(MADV_NOHUGEPAGE) calls on a site's memory, by name.
    refusals = SiteNames(trace.stacks, [o["huge_refused_by"] for o in trace.origins if o.get("huge_refused_by")], which)
    rows = []
    for site in sites.values():
        faults = site.faults_base + site.faults_thp
        if not faults and not site.total("freed_bytes") and site.total("bytes") < MB:
            continue
        fault_ms = _fault_us(cost, site.faults_base, site.faults_thp) / 1e3
        free_ms = _ms(site.total("free_ns"))
        map_ms = max(_ms(site.total("map_ns") - faulting_map_ns[site.site]), 0.0)
        sizes = {size: summary for size, summary in site.freed_by_size().items() if size}  # 0: sizes not kept apart
        # The churn that cost the most faults (node frees 30 big buffers among many small ones).
        churn_size = max(sizes, key=lambda size: (sizes[size]["freed"] >= 3, sizes[size]["faults_base"]
                                                  + sizes[size]["faults_thp"] * cost.huge_bytes // cost.page_bytes,
                                                  sizes[size]["freed"], size)) if sizes else 0
        row = {
            "site": site.site, "stack": site.origins[0]["stack"], "call": site.origins[0]["call"],
            "mappings": site.total("made"), "freed": site.total("freed"), "bytes": site.total("bytes"),
            "largest_bytes": max(origin["largest_bytes"] for origin in site.origins), "faults": faults,
            "faults_base": site.faults_base, "faults_thp": site.faults_thp,
            "huge_advised": any(origin["huge_advised"] for origin in site.origins),
            "fault_ms": fault_ms, "free_ms": free_ms, "map_ms": map_ms,
            "churn": sizes[churn_size]["freed"] if sizes else 0, "churn_bytes": churn_size,
            # Of the command's CPU time: fault time is CPU time, and many threads' of it exceed the wall time.
            "cpu_share": (fault_ms + free_ms + map_ms) / cpu_ms,
        }
        if sample_period_ns:
            row.update(measured(site.cpu_samples, sample_period_ns))
            row["zeroing_share"] = site.zeroing_samples / site.cpu_samples if site.cpu_samples else None
        if timing_one_in:
            row.update(measured_in_kernel(faults, site.kernel_time))
        refused_by = next((origin["huge_refused_by"] for origin in site.origins if origin.get("huge_refused_by")), 0)
        row["huge_refused_by"] = refusals(refused_by) if refused_by else None
        row["runtime"] = runtime_of(user_frame(trace.stacks.get(row["stack"], []), which))
        row["kind"] = "-" if not faults else ("thp" if row["faults_thp"] * cost.huge_bytes > row["faults_base"] * cost.page_bytes
                                               else "base")
        row["advice"] = advise(row, site, cost, thp_available, wall_ms, period)
        rows.append(row)
    rows.sort(key=lambda r: r["fault_ms"] + r["free_ms"] + r["map_ms"], reverse=True)

    sampled = sum(row["faults"] for row in trace.faults) * period
    attributed = sum(row["faults"] for row in trace.faults if row["allocation_call"]) * period
    totals = {
        "wall_ms": wall_ms, "user_ms": _ms(run.get("user_ns", 0)), "system_ms": _ms(run.get("system_ns", 0)),
        "elsewhere_ms": _ms(run["elsewhere_ns"]) if run.get("elsewhere_ns") is not None else None,
        "elsewhere_method": run.get("elsewhere_method"),
        "tracer_cpu_ms": _ms(run.get("tracer_user_ns", 0) + run.get("tracer_system_ns", 0)),
        # The kernel's count for the command, less what memcost's fork took before it exec'd it.
        "faults": sampled, "faults_attributed": attributed, "kernel_faults": run.get("rusage_minor_faults", 0)
        + run.get("rusage_major_faults", 0) - run.get("faults_before_exec", 0), "lost_records": run.get("lost_records", 0),
        "malformed_records": run.get("malformed_records", 0), "malformed_bytes": run.get("malformed_bytes", 0),
        "sample_period": period, "exit_code": run.get("exit_code"), "thp_mode": thp_mode,
        "fault_source": run.get("fault_source", "?"), "call_source": run.get("call_source", "?"),
        "counted_in_kernel": bool(run.get("counted_in_kernel")), "kernel_counting": run.get("kernel_counting", ""),
        "touch_samples": run.get("touch_samples", 0), "faults_uncounted": run.get("kernel_faults_uncounted", 0),
        "faults_in_calls": run.get("faults_in_calls", 0),
        "faults_in_calls_kernel": run.get("kernel_faults_in_calls"),
        "fault_ms": sum(r["fault_ms"] for r in rows), "free_ms": sum(r["free_ms"] for r in rows),
        "map_ms": sum(r["map_ms"] for r in rows),
        "cost_source": cost.source, "base_fault_us_per_mb": cost.base_us_per_mb, "thp_fault_us_per_mb": cost.thp_us_per_mb,
        "signal": run.get("signal", 0), "interrupted": bool(run.get("interrupted")),
        "cpu_sample_period_ns": sample_period_ns, "cpu_sampling": run.get("cpu_sampling", "not recorded"),
    }
    if sample_period_ns:
        in_faults = sum(row["samples"] for row in trace.fault_time)
        attributed_samples = sum(row["samples"] for row in trace.fault_time if row["allocation_call"])
        totals.update(measured(in_faults, sample_period_ns))
        totals["zeroing_share"] = (sum(row["zeroing_samples"] for row in trace.fault_time) / in_faults
                                   if in_faults else None)
        totals["fault_ms_measured_attributed"] = attributed_samples * sample_period_ns / 1e6
        # The tracer in the handler (perf recording samples, the BPF counter), inside the command's system time: not fault time.
        totals["tracing_ms"] = run.get("cpu_samples_tracing", 0) * sample_period_ns / 1e6
        totals["kernel_sampled_ms"] = run.get("cpu_samples", 0) * sample_period_ns / 1e6
    totals["fault_timing_one_in"] = timing_one_in
    if timing_one_in:
        every: Counter = Counter()
        for row in trace.fault_time:
            every.update({name: row.get(name, 0) for name in KERNEL_TIME})
        totals.update(measured_in_kernel(sampled, every))
        totals["faults_timed_unended"] = every["timed_faults"] - every["timings_ended"]
    return {"rows": rows, "touching": _touching_sites(trace, cost, which), "processes": processes_table(trace),
            "totals": totals, "headline": headline(rows, totals)}


def count_gap_reason(totals: dict) -> str:
    """Why the faults counted differ from the kernel's own count for the command: the reasons this
    trace itself recorded, or a plain statement that it recorded none."""
    counted, kernel = totals["faults"], totals["kernel_faults"]
    reasons = []
    if totals.get("lost_records"):
        reasons.append(f"{totals['lost_records']:,} records were lost")
    if totals.get("malformed_records"):
        reasons.append(f"{totals['malformed_records']:,} malformed records were dropped")
    if totals.get("faults_uncounted"):
        reasons.append(f"{totals['faults_uncounted']:,} faults could not be counted: the in-kernel region map was full")
    in_calls_kernel = totals.get("faults_in_calls_kernel")
    if in_calls_kernel is not None and in_calls_kernel > totals.get("faults_in_calls", 0):
        reasons.append(f"{in_calls_kernel - totals.get('faults_in_calls', 0):,} faults taken inside system calls were "
                       "counted in the kernel but their records did not arrive")
    if not totals.get("counted_in_kernel") and counted < kernel:
        reasons.append("without root, faults taken inside system calls are seen only in the calls the preload "
                       "library wraps (mmap, madvise, mlock, mlock2, mlockall, ioctl), and faults in kernel mode "
                       "only where perf_event_paranoid allows")
    if counted > kernel:
        reasons.append("the kernel's count covers the command and the children it waited for; processes it did not "
                       "wait for were traced too")
    if not reasons:
        return "this trace recorded nothing that explains the difference; per-site counts may be incomplete"
    return "; ".join(reasons)


def _touching_sites(trace: Trace, cost: CostModel, which: FrameFilter) -> list[dict]:
    counts: dict[str, Counter] = defaultdict(Counter)
    fault_ms: dict[str, float] = defaultdict(float)
    stack_of: dict[str, int] = {}
    samples: Counter = Counter()
    exact: Counter = Counter()  # counted with their own stack, where the rest are shared out by samples
    allocations, touching = allocation_names(trace, which), touching_names(trace, which)
    # A system call's faults are touched by the call: named by it ("madvise ← by_madv_populate").
    calls_at = {row["stack"]: row["call"] for row in trace.call_faults}

    def touching_site(stack: int) -> str:
        return f"{calls_at[stack]} ← {touching(stack)}" if stack in calls_at else touching(stack)

    call_ms: Counter = Counter()
    for row in trace.call_faults:
        call_ms[touching_site(row["stack"])] += row["call_ns"] / 1e6
    for row in touch_rows(trace):
        site = touching_site(row["touch_stack"])
        stack_of.setdefault(site, row["touch_stack"])
        faults = row["faults"] * trace.period
        counts[site][allocation_site(allocations, row["allocation_stack"], row["allocation_call"])] += faults
        fault_ms[site] += faults * cost.fault_us("thp" if row["huge"] else "base") / 1e3
        samples[site] += row.get("samples", 0)
        if "samples" not in row:
            exact[site] += faults
    rows = [{"site": site, "stack": stack_of[site], "faults": round(sum(c.values())), "fault_ms": fault_ms[site],
             "allocation_site": c.most_common(1)[0][0], **({"call_ms": call_ms[site]} if site in call_ms else {})}
            for site, c in counts.items()]
    if trace.touch_samples:
        # Sampled stacks: a site's share is a proportion estimated from its samples (binomial error);
        # a site whose faults were all counted with their stack is exact (no `samples`).
        for row in rows:
            n, estimated = samples[row["site"]], row["faults"] - exact[row["site"]]
            if not estimated:
                continue
            row["samples"] = n
            row["faults_error"] = estimated / math.sqrt(n) if n else None
    rows.sort(key=lambda r: r["faults"], reverse=True)
    return rows


def advise(row: dict, site: Site, cost: CostModel, thp_available: bool, wall_ms: float, period: int) -> list[dict]:
    """Only advice this run's figures support, each with its what-if saving."""
    advice = []

    def worth(saving_ms: float) -> bool:
        return saving_ms >= max(ADVICE_MIN_MS, ADVICE_MIN_SHARE * wall_ms)

    if row["churn"] >= 3 and row.get("runtime") != "jvm":
        churning = site.freed_by_size()[row["churn_bytes"]]
        n = churning["freed"]
        base_faults = churning["faults_base"] * period
        thp_faults = churning["faults_thp"] * period
        free_ms = churning["free_ns"] / 1e6
        map_ms = churning["map_ns"] / 1e6
        if cost.reuse_saving_us_per_mb is not None:
            # Base pages: measured here for exactly this pattern (a fresh buffer per frame, written
            # and freed, against one kept buffer), per MB; it includes their share of the frees.
            base_bytes, huge_bytes = base_faults * cost.page_bytes, thp_faults * cost.huge_bytes
            base_share = base_bytes / max(base_bytes + huge_bytes, 1)
            spent = (base_bytes / MB * cost.reuse_saving_us_per_mb / 1e3 + thp_faults * cost.fault_us("thp") / 1e3
                     + free_ms * (1 - base_share) + map_ms)
            how = "base-page faults and frees from this machine's measured cost of reallocating instead of reusing"
        else:
            spent = _fault_us(cost, base_faults, thp_faults) / 1e3 + free_ms + map_ms
            how = "its faults, estimated, and its frees, measured, paid once instead of every time"
        saving = spent * (n - 1) / n
        if worth(saving):
            advice.append({"kind": "reuse", "saving_ms": saving,
                           "text": f"reuse this {_size(row['churn_bytes'])} buffer instead of making and freeing it {n} "
                                   f"times: saves ≈ {saving:,.1f} ms ({how})"})
    outgrown = site.outgrown()
    if outgrown["freed"] >= 2:
        n = outgrown["freed"]
        grown_to = max(origin.get("grown_to_bytes", 0) for origin in site.origins)
        saving = (_fault_us(cost, outgrown["faults_base"] * period, outgrown["faults_thp"] * period) / 1e3
                  + (outgrown["free_ns"] + outgrown["map_ns"]) / 1e6)
        if worth(saving):
            advice.append({"kind": "growth", "saving_ms": saving,
                           "text": f"reserve {_size(grown_to)} once instead of growing {n + 1} times: saves ≈ "
                                   f"{saving:,.1f} ms (faults, estimated, and frees, measured, of the {n} outgrown "
                                   "buffers, from this machine's costs; their copies are not counted)"})
    base_faults = row["faults_base"]
    per_huge_page = cost.huge_bytes // cost.page_bytes  # base pages in one huge page (512 on x86-64)
    if thp_available and cost.thp_us_per_mb is not None and row["largest_bytes"] >= 2 * cost.huge_bytes \
            and base_faults >= per_huge_page:
        huge_faults = base_faults / per_huge_page
        saving = base_faults * cost.fault_us("base") / 1e3 - huge_faults * cost.fault_us("thp") / 1e3
        # Already advised huge: what is left on base pages are the ends of mappings not aligned to 2 MB.
        how = ("align these mappings to 2 MB (memcost::make_big_array does): their unaligned ends fault on base pages"
               if row["huge_advised"] else "ask for huge pages here (madvise MADV_HUGEPAGE, or memcost::make_big_array)")
        if row.get("huge_refused_by"):
            # The program turns huge pages off for this memory itself: advice that ignores that is undone.
            how = (f"remove the program's own madvise(MADV_NOHUGEPAGE) at {row['huge_refused_by']}, which turns huge "
                   "pages off for this memory, and ask for them instead (madvise MADV_HUGEPAGE, or "
                   "memcost::make_big_array)")
        if row.get("runtime") == "jvm":
            how = "run the JVM with -XX:+UseTransparentHugePages (its heap madvised for huge pages)"
        if worth(saving):
            advice.append({"kind": "huge_pages", "saving_ms": saving, "faults_saved": round(base_faults - huge_faults),
                           "undone_by": row.get("huge_refused_by"),
                           "text": f"{how}: {base_faults:,} base-page faults become ≈ {huge_faults:,.0f}, "
                                   f"saves ≈ {saving:,.1f} ms"})
    largest = site.largest()
    largest_faults = largest["largest_faults_base"] + largest["largest_faults_thp"]
    if (cost.threads_speedup and cost.threads_speedup > 1.2 and largest["largest_bytes"] >= 64 * MB
            and largest["largest_one_thread"] and largest_faults):
        spent = _fault_us(cost, largest["largest_faults_base"], largest["largest_faults_thp"]) * period / 1e3
        saving = spent * (1 - 1 / cost.threads_speedup)
        how = (f"fault the {_size(largest['largest_bytes'])} block in with {cost.threads} threads (measured "
               f"{cost.threads_speedup:.1f}× faster here, e.g. make_big_array's parallel prefault)")
        if row.get("runtime") == "jvm":
            how = ("run the JVM with -XX:+AlwaysPreTouch: it faults the heap in at start, on the GC's threads in "
                   f"parallel (measured {cost.threads_speedup:.1f}× faster here with {cost.threads} threads), instead "
                   "of in the middle of the run")
        if worth(saving):
            advice.append({"kind": "parallel", "saving_ms": saving, "text": f"{how}: saves ≈ {saving:,.1f} ms"})
    return advice


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MB), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


# How the one fault-time answer was obtained, widest scope first: CPU time sampled in the kernel's
# fault handler covers all of it; the faults timed in the kernel cover the handler from its entry
# tracepoint to the page-count update (a part of each fault); the estimate prices the faults at
# this machine's measured cost per MB.
FAULT_TIME_METHODS = (("fault_ms_measured", "fault_ms_measured_error", "measured by sampling"),
                      ("fault_ms_kernel", "fault_ms_kernel_error", "measured in the kernel, a part of each fault"),
                      ("fault_ms", None, "estimated"))


def fault_time_answer(totals: dict) -> tuple[float, Optional[float], str]:
    """The one fault time a trace reports: the widest-scope method that ran (FAULT_TIME_METHODS),
    its error (None for the estimate) and how it was obtained, in words."""
    for value, error, how in FAULT_TIME_METHODS:
        if totals.get(value) is not None:
            return totals[value], (totals[error] if error else None), how
    return 0.0, None, "not known"


def cpu_base_ms(totals: dict) -> float:
    """What a share of time is taken against: the command's CPU time (fault time is CPU time, and
    many threads' of it exceed the wall time); the wall time only where no CPU time was counted."""
    return (totals.get("user_ms", 0) + totals.get("system_ms", 0)) or totals["wall_ms"]


def headline(rows: list[dict], totals: dict) -> str:
    top = readable(rows[0]["site"]) if rows else "no site"
    fault_ms, error, how = fault_time_answer(totals)
    cost = fault_ms + totals["free_ms"] + totals["map_ms"]
    faults = (f"{totals['faults']:,} page faults took {fault_ms:,.1f}" + (f" ± {error:,.1f}" if error is not None else "")
              + f" ms ({how})")
    base = cpu_base_ms(totals)
    return (f"{faults} and {totals['free_ms']:,.1f} ms of freeing (measured): {cost / base:.0%} of the command's "
            f"{base:,.0f} ms of CPU time; most at {top}")


# What each JIT runtime needs for its functions to be named, and the symptom that it had not:
# a frame in its native code from which the unwinder reached code that no module and no perf map
# names, or, for node, its interpreter's entry with no named JavaScript frame anywhere.
RUNTIME_FLAGS = {
    "node": "node's JavaScript functions went unnamed: run it with --perf-basic-prof-only-functions (or "
            "--perf-basic-prof) and --interpreted-frames-native-stack (memcost trace sets them in NODE_OPTIONS unless --no-runtime-flags; "
            "a process given by --pid must have been started with them)",
    "jvm": "Java methods went unnamed: run the JVM with -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit "
           "-XX:+PreserveFramePointer (memcost trace sets them in JAVA_TOOL_OPTIONS unless --no-runtime-flags; for a "
           "running JVM, `jcmd PID Compiler.perfmap` before the trace ends)",
}


def runtime_flags_missing(samples: list) -> list[str]:
    """One sentence per JIT runtime seen whose compiled code went unnamed, with the flags it needs."""
    trace = read(samples)
    if any(frame.get("kind") == "jit" for frames in trace.stacks.values() for frame in frames):
        return []  # a perf map was read: what it does not name is code it never listed (stubs, regexps)
    missing = set()
    for frames in trace.stacks.values():
        runtimes = {runtime_of(frame) for frame in frames if frame.get("kind") != "jit"} & set(RUNTIME_FLAGS)
        if not runtimes:
            continue
        unnamed = any(not frame.get("module") and frame.get("address") for frame in frames)
        interpreted_only = "node" in runtimes and not any(frame.get("kind") == "jit" for frame in frames) and any(
            (frame.get("function") or "").startswith("Builtins_InterpreterEntryTrampoline") for frame in frames)
        if unnamed or interpreted_only:
            missing |= runtimes
    return [RUNTIME_FLAGS[runtime] for runtime in sorted(missing)]


def folded(trace_samples: list, which: FrameFilter = DEFAULT_FRAMES) -> list[str]:
    """Folded stacks (flamegraph.pl, speedscope): allocation stack, root first, then the touching
    site; the value is the number of faults."""
    trace = read(trace_samples)
    counts: Counter = Counter()

    def names(stack_id: int) -> list[str]:
        return [frame_name(frame).replace(";", ",").replace(" ", "_") for frame in reversed(trace.stacks.get(stack_id, []))]
    touching = touching_names(trace, which)
    for row in touch_rows(trace):
        allocation = names(row["allocation_stack"]) if row["allocation_call"] else ["[outside_traced_mappings]"]
        touch = touching(row["touch_stack"]).replace(";", ",").replace(" ", "_")
        counts[";".join(allocation + [f"[touched_by]_{touch}"])] += row["faults"] * trace.period
    return [f"{stack} {round(count)}" for stack, count in counts.most_common()]
