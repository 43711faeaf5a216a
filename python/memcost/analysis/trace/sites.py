"""Site names: a call path from the first frame of the program's own code (SiteNames), told
apart from other paths by as few callers as it takes, shortened for tables (readable)."""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from functools import lru_cache
from typing import NamedTuple, Optional

from .frames import DEFAULT_FRAMES, FrameFilter, frame_name, library_call, user_frame_index
from .records import Trace, touch_rows


OUTSIDE = "(outside traced mappings: program text, stacks, memory mapped before the trace)"


CALLED_FROM = " ← "


READABLE_CALLERS = 3  # callers a table shows; the results keep the whole path

# The CUDA calls that pin host memory, as their frames name them: the runtime's (libcudart: what
# programs and PyTorch call) and the driver's (libcuda, which the runtime calls; `_v2` and the like
# are versions of one call). The driver pins inside an ioctl, so the system call that took the
# faults is an ioctl; the outermost of these frames says what the program asked for.
PINNING_CALLS = ("cudaHostAlloc", "cudaMallocHost", "cudaHostRegister", "cuMemHostAlloc", "cuMemAllocHost",
                 "cuMemHostRegister")


@lru_cache(maxsize=None)
def _unversioned_name(function: str) -> str:
    return re.sub(r"_v\d+$", "", function.split("(")[0].strip())


def _unversioned(frame: dict) -> str:
    """A frame's function without its parameters or its version (`cuMemHostRegister_v2`)."""
    return _unversioned_name(frame.get("function") or "")


@lru_cache(maxsize=None)
def _pins(function: str) -> bool:
    return _unversioned_name(function) in PINNING_CALLS


def pinning_frame(frames: list) -> Optional[dict]:
    """The outermost CUDA pinning call's frame in a stack (innermost frame first), or None. (A trace
    has tens of thousands of frames, few distinct names: each name is judged once.)"""
    # A frame that pins has a pinning call's name in its own: most stacks are passed over by a
    # search of their names joined, at C speed.
    names = [frame.get("function") or "" for frame in frames]
    joined = "\n".join(names)
    if not any(call in joined for call in PINNING_CALLS):
        return None
    found = None
    for frame, name in zip(frames, names):
        if _pins(name):
            found = frame
    return found


def call_name(call: str, pinning: Optional[dict]) -> str:
    """A system call that took faults, as a touching site names it: by the CUDA call whose frame
    `pinning` is (pinning_frame) where there is one ("cudaHostAlloc (ioctl)"), else by itself
    ("madvise")."""
    return f"{_unversioned(pinning)} ({call})" if pinning else call


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
    callers = [frame for frame in frames[index + 1:] if language is None or frame.get("kind") == language]
    # A caller without a name (a stripped library's) tells a user nothing.
    return [frame for frame, users in zip(callers, which.verdicts(callers)) if users and frame.get("function")]


def _caller_key(frame: dict) -> tuple:
    return (frame.get("function") or f"{frame.get('module_offset', frame.get('address', 0)):#x}",
            os.path.basename(frame.get("file") or ""), frame.get("line") or 0)


class StackParts(NamedTuple):
    """What naming a stack's site needs from its frames, whatever its role (allocation or
    touching); worked out once per stack (stack_parts), as the probe sends it, while the command
    runs (tracing.StacksMeanwhile)."""
    detail: str            # the library call the site's line made ("" for none): SiteNames
    first: str             # its first frame of the program's own, by name
    callers: tuple         # that frame's callers of the program's own, as keys (function, file, line)
    go_runtime: Optional[str]  # go_runtime_mapping
    pinning: Optional[dict]    # pinning_frame


def stack_parts(frames: list, which: FrameFilter = DEFAULT_FRAMES) -> Optional[StackParts]:
    """A stack's StackParts; None for an empty stack."""
    index = user_frame_index(frames, which)
    if index is None:
        return None
    called = library_call(frames, index)
    return StackParts((called.get("function") or "") if called else "", frame_name(frames[index]),
                      tuple(_caller_key(frame) for frame in _callers(frames, index, which)),
                      go_runtime_mapping(frames), pinning_frame(frames))


# Trace.memo's key of {stack id: stack_parts} for one FrameFilter (filled as the stacks came, or
# as they are asked for: parts_of).
STACK_PARTS = "stack_parts"


def parts_of(trace: Trace, stack_ids, which: FrameFilter = DEFAULT_FRAMES) -> dict:
    """The StackParts of `stack_ids` (and of any stack worked out before), by id."""
    known = trace.memo.setdefault((STACK_PARTS, which), {})
    for stack_id in stack_ids:
        if stack_id not in known:
            known[stack_id] = stack_parts(trace.stacks.get(stack_id, []), which)
    return known


class SiteNames:
    """Sites as call paths (docs/trace.md, "Sites are call paths"): a stack's site is its first frame of the
    program's own code, followed out through its callers until the first caller that tells it
    apart from every other stack whose site starts at the same frame. A function reached by one
    path keeps its short name; a helper called from two places is two sites, `helper ← caller`
    each (more callers where those are the same). Give it every stack of one role (the allocation
    stacks, or the touching stacks) so that paths are told apart within that role. `parts`: each
    stack's stack_parts where they were worked out already (the others are worked out here)."""

    def __init__(self, stacks: dict, stack_ids, which: FrameFilter = DEFAULT_FRAMES, parts: Optional[dict] = None):
        self._names: dict[int, str] = {}
        self._details: dict[int, str] = {}
        groups: dict[tuple, dict[int, tuple]] = defaultdict(dict)
        parts = parts if parts is not None else {}
        for stack_id in set(stack_ids):
            found = parts[stack_id] if stack_id in parts else stack_parts(stacks.get(stack_id, []), which)
            if found is None:
                self._names[stack_id] = frame_name(None)
                continue
            groups[(found.detail, found.first)][stack_id] = found.callers
        for (detail, first), paths in groups.items():
            distinct = set(paths.values())
            sharing, functions = _Sharing(distinct), _functions_by_depth(distinct)
            for stack_id, path in paths.items():
                self._names[stack_id] = first + "".join(CALLED_FROM + _caller_name(key, functions, depth)
                                                        for depth, key in enumerate(_distinguishing(path, sharing)))
                if detail:
                    self._details[stack_id] = detail

    def __call__(self, stack_id: int) -> str:
        """The site: in a Python program whose line called an installed package's native code, that
        code's function first, as its detail (`c10::alloc_cpu ← load_batch (train.py:12)`)."""
        name = self.plain(stack_id)
        return f"{self._details[stack_id]}{CALLED_FROM}{name}" if stack_id in self._details else name

    def plain(self, stack_id: int) -> str:
        """The site without its library detail (a CUDA call that pinned names it instead)."""
        return self._names.get(stack_id, frame_name(None))

    def rename(self, stack_id: int, name: str) -> None:
        self._names[stack_id] = name
        self._details.pop(stack_id, None)

    def call_first(self, stack_id: int, call: str) -> None:
        """The site named by the call it was made in first (`cudaHostAlloc ← load_batch (loader.cu:40)`)."""
        self._details[stack_id] = call


# Go maps its heap on the system stack (runtime.systemstack), where no frame of the goroutine that
# asked for memory is left: an allocation stack of the runtime's frames alone is an arena or the
# runtime's own structures, for many allocations, and is named so rather than by a runtime function.
GO_HEAP = "(Go heap: arenas the runtime maps for many allocations; the Go functions that fault them are the touching sites)"


GO_STARTUP = "(Go runtime start-up: its heap's reservations and the allocator's own structures)"


GO_STARTUP_FUNCTIONS = ("runtime.schedinit", "runtime.mallocinit", "runtime.rt0_go", "runtime.rt0_go.abi0")


def go_runtime_mapping(frames: list) -> Optional[str]:
    """GO_HEAP or GO_STARTUP for a mapping the Go runtime made with no Go function of the program's on
    its stack; None otherwise."""
    first = next((frame["function"] for frame in frames if frame.get("function")), "")
    if not first.startswith("runtime."):
        return None  # most stacks: looked at no further
    named = [frame["function"] for frame in frames if frame.get("function")]
    if not all(function.startswith(("runtime.", "internal/", "sync.")) for function in named):
        return None
    return GO_STARTUP if any(function in GO_STARTUP_FUNCTIONS for function in named) else GO_HEAP


class _Sharing:
    """The distinct paths of one group that share a prefix, by prefix, each list filtered from its
    parent prefix's the first time it is asked for: naming each of a group's paths then costs what
    its own prefixes share, not the whole group for every path and depth (a PyTorch import's 3,000
    stacks, most starting at one frame, took 0.3 s that way on a 16-vCPU host)."""

    def __init__(self, distinct: set):
        self._by_prefix: dict[tuple, list] = {(): list(distinct)}

    def __call__(self, prefix: tuple) -> list:
        found = self._by_prefix.get(prefix)
        if found is None:
            depth = len(prefix) - 1
            found = self._by_prefix[prefix] = [other for other in self(prefix[:-1])
                                                if len(other) > depth and other[depth] == prefix[depth]]
        return found


def _functions_by_depth(distinct: set) -> dict[tuple, set]:
    """(depth, function) -> the distinct callers (function, file, line) there across a group's paths."""
    found: dict[tuple, set] = defaultdict(set)
    for path in distinct:
        for depth, key in enumerate(path):
            found[(depth, key[0])].add(key)
    return found


def _distinguishing(path: tuple, sharing: _Sharing) -> tuple:
    """The shortest prefix of `path` that no other distinct path shares unless it is the same path
    all the way (a stack cut short, a prefix of a longer one, does not count as different)."""
    whole = tuple(path)
    depth = 0
    while depth < len(path):
        if all(whole[:len(other)] == other[:len(whole)] for other in sharing(whole[:depth])):
            break
        depth += 1
    return path[:depth]


def _caller_name(key: tuple, functions: dict[tuple, set], depth: int) -> str:
    """A caller by its function; with its line where another path has the same function there."""
    function, file, line = key
    return f"{function}:{line}" if len(functions.get((depth, function), ())) > 1 and line else function


BEFORE_TRACE = "(mapped before the trace)"


def allocation_site(names: SiteNames, stack_id: int, call: str) -> str:
    if not call:
        return OUTSIDE
    return BEFORE_TRACE if call == "existing" else names(stack_id)


def allocation_names(trace: Trace, which: FrameFilter = DEFAULT_FRAMES) -> SiteNames:
    if ("allocation", which) not in trace.memo:
        stack_ids = {origin["stack"] for origin in trace.origins}  # origins share stacks (a call made twice)
        parts = parts_of(trace, stack_ids, which)
        names = SiteNames(trace.stacks, stack_ids, which, parts)
        for stack_id in stack_ids:
            if parts[stack_id] is None:
                continue
            if parts[stack_id].go_runtime is not None:
                names.rename(stack_id, parts[stack_id].go_runtime)
            elif parts[stack_id].pinning is not None:
                # Memory a CUDA call's driver mapped for it (cudaHostAlloc's): named by the call.
                names.call_first(stack_id, _unversioned(parts[stack_id].pinning))
        trace.memo[("allocation", which)] = names
    return trace.memo[("allocation", which)]


def touching_names(trace: Trace, which: FrameFilter = DEFAULT_FRAMES) -> SiteNames:
    if ("touching", which) not in trace.memo:
        stack_ids = {row["touch_stack"] for row in touch_rows(trace)}
        trace.memo[("touching", which)] = SiteNames(trace.stacks, stack_ids, which, parts_of(trace, stack_ids, which))
    return trace.memo[("touching", which)]


def folded(trace: Trace, which: FrameFilter = DEFAULT_FRAMES) -> list[str]:
    """Folded stacks (flamegraph.pl, speedscope): allocation stack, root first, then the touching
    site; the value is the number of faults."""
    counts: Counter = Counter()

    def names(stack_id: int) -> list[str]:
        return [frame_name(frame).replace(";", ",").replace(" ", "_") for frame in reversed(trace.stacks.get(stack_id, []))]
    touching = touching_names(trace, which)
    for row in touch_rows(trace):
        allocation = names(row["allocation_stack"]) if row["allocation_call"] else ["[outside_traced_mappings]"]
        touch = touching(row["touch_stack"]).replace(";", ",").replace(" ", "_")
        counts[";".join(allocation + [f"[touched_by]_{touch}"])] += row["faults"] * trace.period
    return [f"{stack} {round(count)}" for stack, count in counts.most_common()]

