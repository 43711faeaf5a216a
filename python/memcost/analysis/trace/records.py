"""A trace as the probe reports it (Trace, read from its samples; its fault counts by touching
stack), and an allocation site's origins summed (Site)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Optional



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
    # What is worked out from the records once and asked for again (the site names of each role,
    # sites.allocation_names and touching_names): keyed by what it is.
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def period(self) -> int:
        return self.run.get("sample_period", 1)

    def distinct_frames(self) -> list:
        """Each frame of the stacks once (stacks share their frame objects: a PyTorch import's
        140,000 frames are 14,000 objects)."""
        if DISTINCT_FRAMES not in self.memo:
            self.memo[DISTINCT_FRAMES] = list({id(frame): frame for frames in self.stacks.values() for frame in frames}.values())
        return self.memo[DISTINCT_FRAMES]


DISTINCT_FRAMES = "distinct_frames"  # Trace.memo's key


# The columns that key a fault count in the probe's `faults` records (`fault_time` has all but `huge`).
FAULT_KEY = ("allocation_stack", "allocation_call", "touch_stack", "pid", "program", "huge")


# `fault_time`'s columns for the faults timed in the kernel (docs/probe.md).
KERNEL_TIME = ("timed_faults", "timings_ended", "kernel_ns", "kernel_ns_squares")


class Stacks:
    """A trace's stacks, read from its `stack` records one at a time as the probe sends them (while
    the command runs: tracing.StacksMeanwhile), each frame one object however many stacks hold it."""

    def __init__(self):
        self.by_id: dict = {}
        self._frames_by_id: dict = {}
        self._listed: list = []  # the frames of stacks listed whole, each its own

    def distinct_frames(self) -> list:
        """Each frame of the stacks read once (Trace.distinct_frames)."""
        return [*self._frames_by_id.values(), *(frame for frames in self._listed for frame in frames)]

    def take(self, metrics: dict) -> list:
        """A `stack` record's metrics: its frames, innermost first, kept by its id. They come by id
        (`frame_ids`), each frame sent once, with the first record that holds it (`new_frames`,
        kept for the records after); or listed whole (`frames`: results made before frames had ids)."""
        if "frames" in metrics:
            frames = metrics["frames"]
            self._listed.append(frames)
        else:
            for frame in metrics["new_frames"]:
                self._frames_by_id[frame["id"]] = {key: value for key, value in frame.items() if key != "id"}
            frames = [self._frames_by_id[frame_id] for frame_id in metrics["frame_ids"]]
        self.by_id[metrics["stack"]] = frames
        return frames


def stacks_of(samples: list) -> dict:
    """The stacks of a trace's records, by id."""
    stacks = Stacks()
    for sample in samples:
        if sample["case"].get("record") == "stack":
            stacks.take(sample["metrics"])
    return stacks.by_id


def read(samples: list, stacks: Optional[Stacks] = None) -> Trace:
    """`stacks`: the samples' stacks, read already as they came (their records are then passed over)."""
    faults, origins, processes, fault_time, touch_samples, call_faults = [], [], [], [], [], []
    run: dict = {}
    read_stacks = stacks is None
    stacks = Stacks() if stacks is None else stacks
    for sample in samples:
        record, metrics = sample["case"]["record"], sample["metrics"]
        if record == "stack":
            if read_stacks:
                stacks.take(metrics)
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
    trace = Trace(stacks.by_id, faults, origins, run, processes, fault_time, touch_samples, call_faults)
    trace.memo[DISTINCT_FRAMES] = stacks.distinct_frames()
    return trace


def touch_rows(trace: Trace) -> list[dict]:
    """The fault counts by touching stack. Recorded one by one, they are the `faults` rows. Counted in
    the kernel, each count (exact, per allocation origin, process and page kind) is shared between
    the touching stacks sampled for that origin and process in proportion to what their samples
    stand for, each row also carrying `samples` (0: no stack was sampled for it: touch_stack 0).
    Worked out once per trace (the site names and the touching table both ask); read, never changed."""
    if not trace.touch_samples:
        return trace.faults
    if TOUCH_ROWS not in trace.memo:
        trace.memo[TOUCH_ROWS] = _shared_out(trace)
    return trace.memo[TOUCH_ROWS]


TOUCH_ROWS = "touch_rows"  # Trace.memo's key


def _shared_out(trace: Trace) -> list[dict]:
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


def ms(ns: float) -> float:
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

