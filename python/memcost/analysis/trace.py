"""`trace` summary: what a command's big allocations cost the OS, per allocation site (the stack
that created the memory) and per touching site (the stack that faulted it in), with advice.

From the probe's raw records: each page fault is charged to the mapping that contained its
address at that moment (and so to the stack that made the mapping) and to the stack that touched
it. Fault time is estimated from this machine's measured cost per MB (a `memcost costs` result or
a short calibration); munmap, mremap and madvise time is measured from the calls' entry and exit.
"""

from __future__ import annotations

import bisect
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from .derived import largest_os_row

MB = 1 << 20
PAGE = 4096
HUGE = 2 << 20
# Leading frames in these modules are the allocator, not the program's allocation site.
SYSTEM_MODULES = ("libc.so", "libc-", "ld-linux", "libstdc++", "libgcc_s", "libjemalloc", "libtcmalloc", "libmimalloc",
                  "libpthread")
# ... and frames of these functions, for allocators linked into the program (Go's runtime).
SYSTEM_FUNCTIONS = ("runtime.",)
MAP_ANONYMOUS = 0x20
MADV_FREEING = {4: "MADV_DONTNEED", 8: "MADV_FREE", 9: "MADV_REMOVE"}
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15
# Advice is given only where it saves at least this much, and this share of the run.
ADVICE_MIN_MS = 1.0
ADVICE_MIN_SHARE = 0.01
OUTSIDE = "(outside traced mappings: program text, stacks, memory mapped before the trace)"


@dataclass
class CostModel:
    """This machine's measured first-touch cost, from a `memcost costs` result."""
    base_us_per_mb: float
    thp_us_per_mb: Optional[float]
    source: str
    threads: Optional[int] = None       # first touch with this many threads ...
    threads_speedup: Optional[float] = None  # ... was this much faster than with one
    # costs' reuse part: making, writing and freeing a buffer per frame vs writing one kept buffer.
    reuse_saving_us_per_mb: Optional[float] = None

    def fault_us(self, kind: str) -> float:
        if kind == "thp" and self.thp_us_per_mb is not None:
            return self.thp_us_per_mb * HUGE / MB
        return self.base_us_per_mb * PAGE / MB

    @classmethod
    def from_costs_summary(cls, summary: dict, source: str) -> Optional["CostModel"]:
        def largest(page: str) -> Optional[float]:
            row = largest_os_row(summary.get("rows", []), page)
            return row["fault_us_per_mb"] if row else None
        base = largest("base")
        if base is None or base <= 0:
            return None
        model = cls(base_us_per_mb=base, thp_us_per_mb=largest("thp"), source=source)
        reuse = (summary.get("reuse") or {}).get("routes", {}).get("os")
        if reuse and summary["reuse"].get("frame_bytes"):
            model.reuse_saving_us_per_mb = ((reuse["reallocate_us_per_frame"] - reuse["reuse_us_per_frame"])
                                            / (summary["reuse"]["frame_bytes"] / MB))
        threads = [t for t in summary.get("threads", []) if t.get("speedup")]
        if threads:
            top = max(threads, key=lambda t: t["threads"])
            model.threads, model.threads_speedup = top["threads"], top["speedup"]
        return model


@dataclass
class Mapping:
    pid: int
    start: int
    length: int
    stack: int
    call: str
    made_ns: int
    anonymous: bool
    huge_advised: bool = False
    huge_refused: bool = False
    freed_ns: Optional[int] = None
    freed_bytes: int = 0
    free_ns: int = 0         # measured time of the calls that freed it
    map_ns: int = 0          # measured time of the call that made it
    # Faults by page kind, inferred: a 2 MB region of a mapping of 2 MB or more that took exactly one
    # fault was mapped whole, by a huge page; regions with more faults took base pages.
    faults_base: int = 0
    faults_thp: int = 0
    fault_threads: set = field(default_factory=set)

    @property
    def faults(self) -> int:
        return self.faults_base + self.faults_thp

    def fault_us(self, cost: "CostModel") -> float:
        return self.faults_base * cost.fault_us("base") + self.faults_thp * cost.fault_us("thp")


@dataclass
class Trace:
    stacks: dict
    calls: list
    fault_time: np.ndarray
    fault_pid: np.ndarray
    fault_tid: np.ndarray
    fault_address: np.ndarray
    fault_stack: np.ndarray
    run: dict
    processes: list = field(default_factory=list)  # start, fork, exec and exit of each traced process, in time order


def read(samples: list) -> Trace:
    stacks, calls, columns, processes = {}, [], defaultdict(list), []
    run: dict = {}
    for sample in samples:
        record, metrics = sample["case"]["record"], sample["metrics"]
        if record == "stack":
            stacks[metrics["stack"]] = metrics["frames"]
        elif record == "call":
            calls.append({"call": sample["case"]["call"], **metrics})
        elif record == "process":
            processes.append({"change": sample["case"]["change"], **metrics})
        elif record == "faults":
            for name in ("time_ns", "pid", "tid", "address", "stack"):
                columns[name].extend(metrics[name])
        elif record == "run":
            run = metrics
    order = np.argsort(np.asarray(columns["time_ns"], dtype=np.uint64), kind="stable")

    def column(name: str) -> np.ndarray:
        return np.asarray(columns[name], dtype=np.uint64 if name in ("time_ns", "address") else np.int64)[order]
    calls.sort(key=lambda c: c["exit_ns"])
    processes.sort(key=lambda p: p["time_ns"])
    return Trace(stacks, calls, column("time_ns"), column("pid"), column("tid"), column("address"), column("stack"), run,
                 processes)


def processes_table(trace: Trace, owner: np.ndarray) -> list[dict]:
    """Faults per process of the traced tree, one row per program a pid ran (an exec starts a new
    row): which process took them, by pid and name."""
    names: dict[int, list[tuple[int, str, int]]] = defaultdict(list)  # pid -> (from ns, name, parent)
    for event in trace.processes:
        if event["change"] in ("start", "fork", "exec"):
            parent = event["parent"] or (names[event["pid"]][-1][2] if names[event["pid"]] else 0)
            names[event["pid"]].append((event["time_ns"], event["name"], parent))
    period = trace.run.get("sample_period", 1)
    faults: Counter = Counter()
    attributed: Counter = Counter()
    for pid in np.unique(trace.fault_pid).tolist():
        selected = trace.fault_pid == pid
        images = names.get(pid) or [(0, "?", 0)]
        starts = np.asarray([image[0] for image in images], dtype=np.uint64)
        which = np.maximum(np.searchsorted(starts, trace.fault_time[selected], side="right") - 1, 0)
        for image, count in Counter(which.tolist()).items():
            faults[(pid, image)] += count * period
        for image, count in Counter(which[owner[selected] >= 0].tolist()).items():
            attributed[(pid, image)] += count * period
    rows = []
    for pid, images in names.items():
        for image, (_, name, parent) in enumerate(images):
            if faults[(pid, image)] or image == len(images) - 1:
                rows.append({"pid": pid, "name": name, "parent": parent, "faults": faults[(pid, image)],
                             "faults_attributed": attributed[(pid, image)]})
    for pid, image in faults:
        if pid not in names:  # faults of a process no record named (none expected)
            rows.append({"pid": pid, "name": "?", "parent": 0, "faults": faults[(pid, image)],
                         "faults_attributed": attributed[(pid, image)]})
    rows.sort(key=lambda r: r["faults"], reverse=True)
    return rows


def user_frame(frames: list) -> Optional[dict]:
    """The first frame of the program itself, past the allocator and libc."""
    for frame in frames:
        module = os.path.basename(frame.get("module") or "")
        # A frame in no module is not code (an unwinder that ran off the stack): never a site.
        if module and not module.startswith(SYSTEM_MODULES) and not (frame.get("function") or "").startswith(SYSTEM_FUNCTIONS):
            return frame
    return frames[0] if frames else None


def frame_name(frame: Optional[dict]) -> str:
    if frame is None:
        return "(no stack)"
    function = frame.get("function") or (f"{os.path.basename(frame['module'])}+{frame.get('module_offset', 0):#x}"
                                         if frame.get("module") else f"{frame['address']:#x}")
    if frame.get("file"):
        return f"{function} ({os.path.basename(frame['file'])}:{frame['line']})"
    return function


def site_of(stacks: dict, stack_id: int) -> str:
    return frame_name(user_frame(stacks.get(stack_id, [])))


BEFORE_TRACE = "(mapped before the trace)"


def allocation_site(stacks: dict, mapping: "Mapping") -> str:
    return BEFORE_TRACE if mapping.call == "existing" else site_of(stacks, mapping.stack)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class _Space:
    """The live mappings of one process: disjoint pieces (start, end, mapping index), sorted."""

    def __init__(self):
        self.starts: list[int] = []
        self.pieces: list[tuple[int, int, int]] = []
        self.brk_base: Optional[int] = None
        self.brk_end: Optional[int] = None

    def add(self, start: int, end: int, index: int) -> None:
        self.remove(start, end)
        at = bisect.bisect_left(self.starts, start)
        self.starts.insert(at, start)
        self.pieces.insert(at, (start, end, index))

    def remove(self, start: int, end: int) -> list[tuple[int, int]]:
        """Cut [start, end) out; returns (mapping index, bytes removed) per piece touched."""
        removed = []
        at = max(bisect.bisect_right(self.starts, start) - 1, 0)
        kept = []
        while at < len(self.pieces) and self.pieces[at][0] < end:
            piece_start, piece_end, index = self.pieces[at]
            if piece_end <= start:
                at += 1
                continue
            overlap = min(end, piece_end) - max(start, piece_start)
            removed.append((index, overlap))
            del self.pieces[at]
            del self.starts[at]
            if piece_start < start:
                kept.append((piece_start, start, index))
            if piece_end > end:
                kept.append((end, piece_end, index))
        for piece in kept:
            where = bisect.bisect_left(self.starts, piece[0])
            self.starts.insert(where, piece[0])
            self.pieces.insert(where, piece)
        return removed

    def copy(self) -> "_Space":
        twin = _Space()
        twin.starts, twin.pieces = list(self.starts), list(self.pieces)
        twin.brk_base, twin.brk_end = self.brk_base, self.brk_end
        return twin

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray([p[0] for p in self.pieces], dtype=np.uint64),
                np.asarray([p[1] for p in self.pieces], dtype=np.uint64),
                np.asarray([p[2] for p in self.pieces], dtype=np.int64))


def attribute(trace: Trace, thp_mode: str = "madvise") -> tuple[list[Mapping], np.ndarray]:
    """Replay the mapping calls in time order; each fault goes to the mapping live at its address
    at its moment. Returns the mappings and, per fault, its mapping's index (-1: none).
    `thp_mode` is the machine's THP setting: only where huge pages could back a mapping (always,
    or madvise and the program asked) is a 2 MB region with a single fault taken as a huge page."""
    mappings: list[Mapping] = []
    spaces: dict[int, _Space] = defaultdict(_Space)
    owner = np.full(len(trace.fault_time), -1, dtype=np.int64)
    done = 0

    def charge_faults(until_ns: int) -> None:
        nonlocal done
        end = int(np.searchsorted(trace.fault_time, np.uint64(until_ns), side="left"))
        if end <= done:
            return
        window = slice(done, end)
        for pid in np.unique(trace.fault_pid[window]):
            space = spaces.get(int(pid))
            if space is None or not space.pieces:
                continue
            starts, ends, indexes = space.arrays()
            selected = np.nonzero(trace.fault_pid[window] == pid)[0] + done
            addresses = trace.fault_address[selected]
            slot = np.searchsorted(starts, addresses, side="right") - 1
            valid = slot >= 0
            valid[valid] &= addresses[valid] < ends[slot[valid]]
            owner[selected[valid]] = indexes[slot[valid]]
        done = end

    def free(space: _Space, start: int, length: int, call: dict, whole: bool) -> None:
        removed = space.remove(start, start + length) if whole else _overlaps(space, start, start + length)
        total = sum(size for _, size in removed) or 1
        for index, size in removed:
            mapping = mappings[index]
            mapping.freed_bytes += size
            mapping.free_ns += (call["exit_ns"] - call["enter_ns"]) * size // total
            if whole and not any(p[2] == index for p in space.pieces):
                mapping.freed_ns = call["exit_ns"]

    # A forked child starts with its parent's mappings (copy-on-write): they are its too.
    forks = [{"call": "fork", "exit_ns": p["time_ns"], "pid": p["pid"], "parent": p["parent"]}
             for p in trace.processes if p["change"] == "fork"]
    for call in sorted(trace.calls + forks, key=lambda c: c["exit_ns"]):
        charge_faults(call["exit_ns"])
        if call["call"] == "fork":
            spaces[call["pid"]] = spaces[call["parent"]].copy()
            continue
        result = _signed(call["result"])
        if -4096 < result < 0:
            continue  # the call failed: nothing changed
        args, space = call["args"], spaces[call["pid"]]
        kind = call["call"]
        if kind in ("mmap", "existing"):  # existing: mapped before tracing attached to the process
            index = len(mappings)
            mappings.append(Mapping(call["pid"], result, args[1], call["stack"], kind, call["exit_ns"],
                                    bool(args[3] & MAP_ANONYMOUS), map_ns=call["exit_ns"] - call["enter_ns"]))
            space.add(result, result + args[1], index)
        elif kind == "malloc":  # the preload library: a big block from malloc, calloc or an aligned allocation
            index = len(mappings)
            mappings.append(Mapping(call["pid"], result, args[1], call["stack"], "malloc", call["exit_ns"], True,
                                    map_ns=call["exit_ns"] - call["enter_ns"]))
            space.add(result, result + args[1], index)
        elif kind == "free":
            block = _block_at(space, args[0])
            if block is not None:
                free(space, args[0], mappings[block].length, call, whole=True)
        elif kind == "realloc":
            block = _block_at(space, args[0]) if args[0] else None
            if result == 0:
                continue  # failed: the old block stays
            if block is None:
                index = len(mappings)
                mappings.append(Mapping(call["pid"], result, args[2], call["stack"], "malloc", call["exit_ns"], True,
                                        map_ns=call["exit_ns"] - call["enter_ns"]))
            else:
                index = block
                space.remove(args[0], args[0] + mappings[block].length)
                mappings[block].length = args[2]
                mappings[block].free_ns += call["exit_ns"] - call["enter_ns"]
            space.add(result, result + args[2], index)
        elif kind == "munmap":
            free(space, args[0], args[1], call, whole=True)
        elif kind == "mremap":
            moved = space.remove(args[0], args[0] + args[1])
            index = moved[0][0] if moved else None
            if index is None:
                continue
            mapping = mappings[index]
            mapping.length += max(args[2] - args[1], 0)
            mapping.free_ns += call["exit_ns"] - call["enter_ns"]
            space.add(result, result + args[2], index)
        elif kind == "brk":
            if space.brk_end is None:
                space.brk_base = space.brk_end = result
            elif result > space.brk_end:
                index = len(mappings)
                mappings.append(Mapping(call["pid"], space.brk_end, result - space.brk_end, call["stack"], "brk",
                                        call["exit_ns"], True, map_ns=call["exit_ns"] - call["enter_ns"]))
                space.add(space.brk_end, result, index)
                space.brk_end = result
            elif result < space.brk_end:
                free(space, result, space.brk_end - result, call, whole=True)
                space.brk_end = result
        elif kind == "madvise":
            if args[2] in MADV_FREEING:
                free(space, args[0], args[1], call, whole=False)
            elif args[2] in (MADV_HUGEPAGE, MADV_NOHUGEPAGE):
                for index, _ in _overlaps(space, args[0], args[0] + args[1]):
                    if args[2] == MADV_HUGEPAGE:
                        mappings[index].huge_advised = True
                    else:
                        mappings[index].huge_refused = True
    charge_faults(np.iinfo(np.uint64).max)

    charged = owner >= 0
    indexes, regions, threads = owner[charged], trace.fault_address[charged] // np.uint64(HUGE), trace.fault_tid[charged]
    for (index, _), faults in Counter(zip(indexes.tolist(), regions.tolist())).items():
        mapping = mappings[index]
        huge_possible = thp_mode == "always" or (thp_mode == "madvise" and mapping.huge_advised)
        if faults == 1 and mapping.length >= HUGE and huge_possible and not mapping.huge_refused:
            mapping.faults_thp += 1
        else:
            mapping.faults_base += faults
    for index, thread in set(zip(indexes.tolist(), threads.tolist())):
        mappings[index].fault_threads.add(thread)
    return mappings, owner


def _block_at(space: _Space, start: int) -> Optional[int]:
    """The mapping whose live piece begins at `start` (a block malloc handed out), if any."""
    at = bisect.bisect_left(space.starts, start)
    return space.pieces[at][2] if at < len(space.pieces) and space.pieces[at][0] == start else None


def _overlaps(space: _Space, start: int, end: int) -> list[tuple[int, int]]:
    return [(index, min(end, piece_end) - max(start, piece_start))
            for piece_start, piece_end, index in space.pieces if piece_start < end and piece_end > start]


def _ms(ns: float) -> float:
    return ns / 1e6


def summarize(samples: list, cost: CostModel, thp_mode: str) -> dict:
    """`thp_mode`: the machine's THP setting (always, madvise, never; "absent" without THP)."""
    trace = read(samples)
    mappings, owner = attribute(trace, thp_mode)
    thp_available = thp_mode in ("always", "madvise")
    run = trace.run
    wall_ms = _ms(run.get("wall_ns", 0)) or 1e-9
    cpu_ms = _ms(run.get("user_ns", 0) + run.get("system_ns", 0)) or 1e-9
    period = run.get("sample_period", 1)

    by_site: dict[str, list[Mapping]] = defaultdict(list)
    for mapping in mappings:
        by_site[allocation_site(trace.stacks, mapping)].append(mapping)
    rows = []
    for site, group in by_site.items():
        faults = sum(m.faults for m in group) * period
        if not faults and not any(m.freed_bytes for m in group) and sum(m.length for m in group) < MB:
            continue
        fault_ms = sum(m.fault_us(cost) for m in group) * period / 1e3
        free_ms = _ms(sum(m.free_ns for m in group))
        map_ms = _ms(sum(m.map_ns for m in group))
        sizes = Counter(m.length for m in group if m.freed_ns is not None)
        churn_size, churn = sizes.most_common(1)[0] if sizes else (0, 0)
        row = {
            "site": site, "stack": group[0].stack, "call": group[0].call, "mappings": len(group),
            "freed": sum(1 for m in group if m.freed_ns is not None), "bytes": sum(m.length for m in group),
            "largest_bytes": max(m.length for m in group), "faults": faults,
            "faults_base": sum(m.faults_base for m in group) * period,
            "faults_thp": sum(m.faults_thp for m in group) * period,
            "huge_advised": any(m.huge_advised for m in group),
            "fault_ms": fault_ms, "free_ms": free_ms, "map_ms": map_ms,
            "churn": churn, "churn_bytes": churn_size,
            "wall_share": (fault_ms + free_ms + map_ms) / wall_ms, "cpu_share": (fault_ms + free_ms + map_ms) / cpu_ms,
        }
        row["kind"] = "-" if not faults else ("thp" if row["faults_thp"] * HUGE > row["faults_base"] * PAGE else "base")
        row["advice"] = advise(row, group, cost, thp_available, wall_ms, period)
        rows.append(row)
    rows.sort(key=lambda r: r["fault_ms"] + r["free_ms"] + r["map_ms"], reverse=True)

    touching = _touching_sites(trace, mappings, owner, cost, period)
    sampled = int(len(trace.fault_time)) * period
    attributed = int(np.count_nonzero(owner >= 0)) * period
    totals = {
        "wall_ms": wall_ms, "user_ms": _ms(run.get("user_ns", 0)), "system_ms": _ms(run.get("system_ns", 0)),
        "elsewhere_ms": _ms(run["elsewhere_ns"]) if run.get("elsewhere_ns") is not None else None,
        "elsewhere_method": run.get("elsewhere_method"),
        "tracer_cpu_ms": _ms(run.get("tracer_user_ns", 0) + run.get("tracer_system_ns", 0)),
        # The kernel's count for the command, less what memcost's fork took before it exec'd it.
        "faults": sampled, "faults_attributed": attributed, "kernel_faults": run.get("rusage_minor_faults", 0)
        + run.get("rusage_major_faults", 0) - run.get("faults_before_exec", 0), "lost_records": run.get("lost_records", 0),
        "sample_period": period, "exit_code": run.get("exit_code"), "thp_mode": thp_mode,
        "fault_source": run.get("fault_source", "?"), "call_source": run.get("call_source", "?"),
        "fault_ms": sum(r["fault_ms"] for r in rows), "free_ms": sum(r["free_ms"] for r in rows),
        "map_ms": sum(r["map_ms"] for r in rows),
        "cost_source": cost.source, "base_fault_us_per_mb": cost.base_us_per_mb, "thp_fault_us_per_mb": cost.thp_us_per_mb,
    }
    totals["signal"] = run.get("signal", 0)
    totals["interrupted"] = bool(run.get("interrupted"))
    return {"rows": rows, "touching": touching, "processes": processes_table(trace, owner), "totals": totals,
            "headline": headline(rows, totals)}


def _touching_sites(trace: Trace, mappings: list[Mapping], owner: np.ndarray, cost: CostModel, period: int) -> list[dict]:
    counts: dict[str, Counter] = defaultdict(Counter)
    fault_ms: dict[str, float] = defaultdict(float)
    stack_of: dict[str, int] = {}
    pairs = Counter(zip(trace.fault_stack.tolist(), owner.tolist()))  # far fewer than faults
    for (stack_id, index), faults in pairs.items():
        site = site_of(trace.stacks, stack_id)
        stack_of.setdefault(site, stack_id)
        allocated = allocation_site(trace.stacks, mappings[index]) if index >= 0 else OUTSIDE
        counts[site][allocated] += faults * period
        mapping = mappings[index] if index >= 0 else None
        per_fault = mapping.fault_us(cost) / mapping.faults if mapping is not None and mapping.faults else cost.fault_us("base")
        fault_ms[site] += faults * period * per_fault / 1e3
    rows = [{"site": site, "stack": stack_of[site], "faults": sum(c.values()), "fault_ms": fault_ms[site],
             "allocation_site": c.most_common(1)[0][0]} for site, c in counts.items()]
    rows.sort(key=lambda r: r["faults"], reverse=True)
    return rows


def advise(row: dict, group: list[Mapping], cost: CostModel, thp_available: bool, wall_ms: float, period: int) -> list[dict]:
    """Only advice this run's figures support, each with its what-if saving."""
    advice = []

    def worth(saving_ms: float) -> bool:
        return saving_ms >= max(ADVICE_MIN_MS, ADVICE_MIN_SHARE * wall_ms)

    churning = [m for m in group if m.freed_ns is not None and m.length == row["churn_bytes"]]
    if row["churn"] >= 3:
        n = len(churning)
        base_faults = sum(m.faults_base for m in churning) * period
        thp_faults = sum(m.faults_thp for m in churning) * period
        free_ms = sum(m.free_ns for m in churning) / 1e6
        map_ms = sum(m.map_ns for m in churning) / 1e6
        if cost.reuse_saving_us_per_mb is not None:
            # Base pages: measured here for exactly this pattern (a fresh buffer per frame, written
            # and freed, against one kept buffer), per MB; it includes their share of the frees.
            base_share = base_faults * PAGE / max(base_faults * PAGE + thp_faults * HUGE, 1)
            spent = (base_faults * PAGE / MB * cost.reuse_saving_us_per_mb / 1e3 + thp_faults * cost.fault_us("thp") / 1e3
                     + free_ms * (1 - base_share) + map_ms)
            how = "base-page faults and frees from this machine's measured cost of reallocating instead of reusing"
        else:
            spent = (base_faults * cost.fault_us("base") + thp_faults * cost.fault_us("thp")) / 1e3 + free_ms + map_ms
            how = "its faults, estimated, and its frees, measured, paid once instead of every time"
        saving = spent * (n - 1) / n
        if worth(saving):
            advice.append({"kind": "reuse", "saving_ms": saving,
                           "text": f"reuse this {_size(row['churn_bytes'])} buffer instead of making and freeing it {n} "
                                   f"times: saves ≈ {saving:,.1f} ms ({how})"})
    base_faults = row["faults_base"]
    if thp_available and cost.thp_us_per_mb is not None and row["largest_bytes"] >= 4 * MB and base_faults >= 512:
        huge_faults = base_faults / 512
        saving = base_faults * cost.fault_us("base") / 1e3 - huge_faults * cost.fault_us("thp") / 1e3
        # Already advised huge: what is left on base pages are the ends of mappings not aligned to 2 MB.
        how = ("align these mappings to 2 MB (memcost::make_big_array does): their unaligned ends fault on base pages"
               if row["huge_advised"] else "ask for huge pages here (madvise MADV_HUGEPAGE, or memcost::make_big_array)")
        if worth(saving):
            advice.append({"kind": "huge_pages", "saving_ms": saving,
                           "text": f"{how}: {base_faults:,} base-page faults become ≈ {huge_faults:,.0f}, "
                                   f"saves ≈ {saving:,.1f} ms"})
    largest = max(group, key=lambda m: m.length)
    if (cost.threads_speedup and cost.threads_speedup > 1.2 and largest.length >= 64 * MB
            and len(largest.fault_threads) == 1 and largest.faults):
        spent = largest.fault_us(cost) * period / 1e3
        saving = spent * (1 - 1 / cost.threads_speedup)
        if worth(saving):
            advice.append({"kind": "parallel", "saving_ms": saving,
                           "text": f"fault the {_size(largest.length)} block in with {cost.threads} threads (measured "
                                   f"{cost.threads_speedup:.1f}× faster here, e.g. make_big_array's parallel "
                                   f"prefault): saves ≈ {saving:,.1f} ms"})
    return advice


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MB), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


def headline(rows: list[dict], totals: dict) -> str:
    cost = totals["fault_ms"] + totals["free_ms"] + totals["map_ms"]
    top = rows[0]["site"] if rows else "no site"
    return (f"{totals['faults']:,} page faults ≈ {totals['fault_ms']:,.1f} ms (estimated) and {totals['free_ms']:,.1f} ms "
            f"of freeing (measured): {cost / totals['wall_ms']:.0%} of the run's {totals['wall_ms']:,.0f} ms; "
            f"most at {top}")


def folded(trace_samples: list) -> list[str]:
    """Folded stacks (flamegraph.pl, speedscope): allocation stack, root first, then the touching
    site; the value is the number of faults."""
    trace = read(trace_samples)
    mappings, owner = attribute(trace)  # counts only: page kinds do not matter here
    counts: Counter = Counter()
    period = trace.run.get("sample_period", 1)

    def names(stack_id: int) -> list[str]:
        return [frame_name(frame).replace(";", ",").replace(" ", "_") for frame in reversed(trace.stacks.get(stack_id, []))]
    for (stack_id, index), faults in Counter(zip(trace.fault_stack.tolist(), owner.tolist())).items():
        allocation = names(mappings[index].stack) if index >= 0 else ["[outside_traced_mappings]"]
        touch = frame_name(user_frame(trace.stacks.get(stack_id, []))).replace(";", ",").replace(" ", "_")
        counts[";".join(allocation + [f"[touched_by]_{touch}"])] += faults * period
    return [f"{stack} {count}" for stack, count in counts.most_common()]
