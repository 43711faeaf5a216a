"""Which frames of a trace's stacks are the program's own (FrameFilter), and what a frame is
called: allocators, runtimes and standard libraries are passed over when naming a site."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Optional

from .records import Trace


# A site starts at the first frame of the program's own code: leading frames of these modules (the C
# library, the loader, allocators, the C++ runtime) ...
C_AND_ALLOCATOR_MODULES = ("libc.so", "libc-", "ld-linux", "libstdc++", "libgcc_s", "libjemalloc", "libtcmalloc",
                           "libmimalloc", "libmemcost-preload", "libpthread")


# JIT runtimes' own code: HotSpot and its launcher; node's binary (V8 and node's C++) below.
RUNTIME_MODULES = ("libjvm.so", "libjli.so", "libjava.so", "libnode.so")


# NVIDIA's driver and CUDA runtime: a site is where the program called them (cudaHostAlloc's
# pinning is named by the call itself, sites.call_name).
GPU_MODULES = ("libcuda.so", "libcudart.so", "libnvidia-")


SYSTEM_MODULES = C_AND_ALLOCATOR_MODULES + RUNTIME_MODULES + GPU_MODULES


# Native code that came with the Python interpreter or its installed packages is library code, as
# those packages' Python wrappers are (PYTHON_SYSTEM_FILES): extension modules and the libraries
# they load from site-packages or dist-packages (torch's libtorch_cpu.so and libc10.so, numpy's,
# NVIDIA's wheels), and the interpreter's own C code: its executable, libpython, and the standard
# library's extension modules (lib-dynload). The user's code is the Python line that called them.
# An extension module beside the user's script is the program's own.
PYTHON_PACKAGE_MODULES = r"/(site|dist)-packages/"
PYTHON_INTERPRETER_MODULES = r"(/lib/python\d\.\d+/|/libpython\d[\d.]*(d|m)?\.so[^/]*$|/python\d?(\.\d+)?$)"


# Executables that are a runtime, not the program: their frames are skipped like a library's.
RUNTIME_EXECUTABLES = ("node", "nodejs")


# ... and of these functions, from language runtimes and standard libraries compiled into the
# program: C++ standard-library templates, Go's runtime, Rust's alloc, core and std, CPython's
# and numpy's allocators, and the CUDA runtime linked statically into a program by nvcc (its
# entry points, its internals named `libcudart_static_<hash>` and `cudart::`, the `__cuda…` calls
# nvcc's generated code makes to register the program's kernels, and that code itself,
# `__sti____cudaRegisterAll`: checked against a real nvcc build by bench/cuda_static_names.py), and Rust's standard
# library's trait implementations for any type (`<u8 as alloc::vec::spec_from_elem::SpecFromElem>`,
# inlined into the caller) (docs/trace.md lists them; --skip-frames adds, --keep-frames exempts).
SYSTEM_FUNCTIONS = r"^(std::|__gnu_cxx::|__cxxabiv1::|operator new|operator delete|runtime\.|alloc::|core::|<alloc::|" \
                   r"<core::|_?Py(Mem|Object)_|_PyObject_|PyDataMem_|default_malloc|npy_alloc_cache|__rust_|" \
                   r"cuda[A-Z]\w*$|__cudart|__cuda[A-Z]|__sti____cuda|libcudart_static_|cudart::|cuGetProcAddress|" \
                   r"cudaGetDriverEntryPoint|" \
                   r"<[^<>]* as (alloc|core|std)::)"


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


@dataclass(frozen=True)
class FrameFilter:
    """Which frames are the program's own: the default list above, plus `skip` (a regular
    expression: matching functions are skipped too), less `keep` (matching functions are the
    program's even where the default list would skip them)."""
    skip: Optional[str] = None
    keep: Optional[str] = None

    def is_users(self, frame: dict, by_module_only: bool = False) -> bool:
        return self.verdicts([frame], by_module_only)[0]

    def verdicts(self, frames: list, by_module_only: bool = False) -> list:
        """is_users of each of `frames`. A trace's stacks share their frames (a PyTorch import:
        140,000 frames, a tenth of them distinct): each distinct frame object is judged once, and
        looked up by its id after that, a stack's frames in one pass at C speed; a frame equal to
        one judged before (another trace's, another record's) is judged by its fields, once."""
        table = _JUDGED.get((id(self), by_module_only))
        if table is None or table[0] is not self:
            # Holding the filter keeps its id its own; holding each frame judged keeps its id its own.
            table = _JUDGED[(id(self), by_module_only)] = (self, {}, [])
        _, judged, held = table
        found = list(map(judged.get, map(id, frames)))
        if None in found:
            if len(held) >= _JUDGED_MOST:
                judged.clear()
                held.clear()
            for index, verdict in enumerate(found):
                if verdict is None:
                    frame = frames[index]
                    verdict = found[index] = _is_users(self, frame.get("kind"), frame.get("module") or "",
                                                       frame.get("function") or "", frame.get("file") or "",
                                                       by_module_only)
                    judged[id(frame)] = verdict
                    held.append(frame)
        return found

    def _judge(self, frame: dict, by_module_only: bool) -> bool:
        module = file_name(frame.get("module") or "")
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
        if python_jit(frame):  # CPython 3.12+'s trampolines (-X perf): a Python function, by its file
            return not re.search(PYTHON_SYSTEM_FILES, frame.get("file") or "")
        if frame.get("kind") == "jit":
            # A compiled method or function has a name with a dot or a source file; a stub has neither.
            named = "." in function or bool(frame.get("file"))
            return named and not re.search(JIT_SYSTEM_FUNCTIONS, function) \
                and not re.search(JIT_SYSTEM_FILES, frame.get("file") or "")
        if module.startswith(SYSTEM_MODULES) or module in RUNTIME_EXECUTABLES or python_library(frame):
            return False
        if by_module_only:
            return True
        # A demangled template function may start with its return type: "void std::vector<…>::…".
        head, _, rest = function.partition(" ")
        named = [function, rest] if rest and "(" not in head and "<" not in head else [function]
        return not any(re.match(SYSTEM_FUNCTIONS, name) for name in named)


# (id(filter), by_module_only) -> (filter, {id(frame): verdict}, [every frame judged]): FrameFilter.verdicts'.
_JUDGED: dict = {}
_JUDGED_MOST = 1 << 17


@functools.lru_cache(maxsize=1 << 16)
def _is_users(which: FrameFilter, kind: Optional[str], module: str, function: str, file: str, by_module_only: bool) -> bool:
    return which._judge({"kind": kind, "module": module, "function": function, "file": file}, by_module_only)


DEFAULT_FRAMES = FrameFilter()


@functools.lru_cache(maxsize=1 << 12)
def file_name(path: str) -> str:
    """os.path.basename, once per path: a trace's frames name a few hundred modules, and the loops
    over its stacks ask for them about 25,000 times (a PyTorch import)."""
    return os.path.basename(path)


def python_library(frame: dict, packages_only: bool = False) -> bool:
    """Whether a native frame is an installed Python package's (PYTHON_PACKAGE_MODULES), or, unless
    `packages_only`, the interpreter's own (PYTHON_INTERPRETER_MODULES)."""
    if frame.get("kind") not in ("native", "inlined", None):
        return False
    package, interpreter = _python_module(frame.get("module") or "")
    return package or (not packages_only and interpreter)


@functools.lru_cache(maxsize=1 << 12)
def _python_module(module: str) -> tuple[bool, bool]:
    """Whether a module's path is an installed package's, and whether it is the interpreter's: once
    per path (a trace's frames name a few hundred modules)."""
    return bool(re.search(PYTHON_PACKAGE_MODULES, module)), bool(re.search(PYTHON_INTERPRETER_MODULES, module))


def python_jit(frame: dict) -> bool:
    """A Python function's frame named from CPython's perf map (3.12+, `-X perf` or
    PYTHONPERFSUPPORT=1: a trampoline per function, `py::function:file.py`)."""
    return frame.get("kind") == "jit" and (frame.get("file") or "").endswith(".py")


def library_call(frames: list, index: int) -> Optional[dict]:
    """Where a stack's site is a Python line (frames[index]), the installed package's native
    function that the line called into, as the site's detail: the innermost frame of a package's
    native code past the C library and the allocators (`c10::alloc_cpu` for `torch.empty`). None
    where the line called no package's native code (the interpreter's own allocations)."""
    if frames[index].get("kind") != "python" and not python_jit(frames[index]):
        return None
    for frame in frames[:index]:
        if frame.get("kind") == "python" or python_jit(frame):
            return None
        function = frame.get("function") or ""
        if file_name(frame.get("module") or "").startswith(C_AND_ALLOCATOR_MODULES):
            continue  # memcost's own preload library sits in site-packages too
        if python_library(frame, packages_only=True) and function and not re.match(SYSTEM_FUNCTIONS, function):
            return frame
    return None


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


def user_frame_index(frames: list, which: FrameFilter = DEFAULT_FRAMES) -> Optional[int]:
    """The index of user_frame() in `frames`, or None for an empty stack."""
    # The frames' kinds and verdicts once, searched at C speed: a PyTorch import's 3,000 stacks of
    # about 40 frames are most of a trace's summary time.
    kinds = [frame.get("kind") for frame in frames]
    language = "python" if "python" in kinds else "jit" if "jit" in kinds else None
    if language:
        # Only that language's frames are judged (a native frame is the site only by --keep-frames).
        at = [index for index, kind in enumerate(kinds) if kind == language]
        users = which.verdicts([frames[index] for index in at])
        if language == "jit" and True not in users:
            language = None
    if language:
        first = at[users.index(True)] if True in users else None
        if which.keep:  # a native frame --keep-frames names, before that
            kept = next((index for index in range(len(frames) if first is None else first) if kinds[index] != language
                         and re.search(which.keep, frames[index].get("function") or "")), None)
            first = kept if kept is not None else first
        return at[0] if first is None else first
    users = which.verdicts(frames)
    # The first frame of the program's own, else the first in a module of its own whatever the
    # function's name (a frame the first test takes the second takes too).
    if True in users:
        return users.index(True)
    by_module = which.verdicts(frames, by_module_only=True)
    if True in by_module:
        return by_module.index(True)
    # Every frame is a library's or a runtime's: the first one past the C library and the allocators.
    for index, frame in enumerate(frames):
        module = file_name(frame.get("module") or "")
        if module and not module.startswith(C_AND_ALLOCATOR_MODULES):
            return index
    return 0 if frames else None


def runtime_of(frame: Optional[dict]) -> Optional[str]:
    """The language runtime whose code a site's frame is, where advice has that runtime's own
    switches: "jvm" (HotSpot or a Java method), "node", "go"; None for native code and Python."""
    if frame is None:
        return None
    module = file_name(frame.get("module") or "")
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
        # A Python function named by CPython's perf map has its file and no line.
        where = os.path.basename(frame["file"]) if python_jit(frame) and not frame.get("line") else \
            f"{os.path.basename(frame['file'])}:{frame['line']}"
        return f"{function} ({where})"
    return function


# Source files of languages' standard libraries, where the debug information has a program's
# function's instruction come from inlined library code without saying where it was inlined
# (rustc's `vec!` into the caller): a line there would name the library's file, not the caller's.
LIBRARY_SOURCES = r"(/rustc/[0-9a-f]+/library/|/usr/include/c\+\+/|/go/src/runtime/)"


def _library_line(frame: dict) -> bool:
    return frame.get("kind") in ("native", None) and bool(re.search(LIBRARY_SOURCES, frame.get("file") or "")) \
        and frame.get("function", "").split("::")[0] not in ("std", "core", "alloc") \
        and not (frame.get("function") or "").startswith(("std::", "runtime."))


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


def runtime_flags_missing(trace: Trace) -> list[str]:
    """One sentence per JIT runtime seen whose compiled code went unnamed, with the flags it needs."""
    # Each distinct frame is looked at once, and a stack only where one of its frames is a JIT
    # runtime's (none in a Python program's trace).
    distinct = trace.distinct_frames()
    if any(frame.get("kind") == "jit" for frame in distinct):
        return []  # a perf map was read: what it does not name is code it never listed (stubs, regexps)
    runtime_by_frame = {id(frame): runtime for frame in distinct if (runtime := runtime_of(frame)) in RUNTIME_FLAGS}
    if not runtime_by_frame:
        return []
    missing = set()
    for frames in trace.stacks.values():
        runtimes = {runtime_by_frame[id(frame)] for frame in frames if id(frame) in runtime_by_frame}
        if not runtimes:
            continue
        unnamed = any(not frame.get("module") and frame.get("address") for frame in frames)
        interpreted_only = "node" in runtimes and not any(frame.get("kind") == "jit" for frame in frames) and any(
            (frame.get("function") or "").startswith("Builtins_InterpreterEntryTrampoline") for frame in frames)
        if unnamed or interpreted_only:
            missing |= runtimes
    return [RUNTIME_FLAGS[runtime] for runtime in sorted(missing)]

