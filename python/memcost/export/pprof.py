"""pprof export of a trace: a gzipped perftools.profiles.Profile (profile.proto), which
`go tool pprof`, Pyroscope and Parca read unchanged.

Sample types: faults (count), fault_time (nanoseconds, estimated from this machine's measured
cost per MB) and freed (bytes). One sample per (allocation stack, touching site): its locations
are the allocation stack, leaf first; the touching site is a label.

The message classes are built from a descriptor written here (the fields of profile.proto, by
number), so no generated code or protoc is needed; the encoding is the protobuf library's.
"""

from __future__ import annotations

import datetime
import gzip
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

from ..analysis.trace import frames as trace_frames
from ..analysis.trace import records as trace_records
from ..analysis.trace import sites as trace_sites
from ..analysis.cost_model import CostModel
from ..results import write_atomically

# FieldDescriptorProto's type and label numbers (descriptor.proto; wire-stable). The protobuf
# library itself is imported when a profile is built: it costs every `memcost trace` about 16 ms
# to import, and most write no profile.
_INT64, _UINT64, _BOOL, _STRING, _MESSAGE = 3, 4, 8, 9, 11
_OPTIONAL, _REPEATED = 1, 3

# (message, [(field, number, type, repeated, message type)]) as in profile.proto.
_SCHEMA = [
    ("Profile", [("sample_type", 1, _MESSAGE, True, "ValueType"), ("sample", 2, _MESSAGE, True, "Sample"),
                 ("mapping", 3, _MESSAGE, True, "Mapping"), ("location", 4, _MESSAGE, True, "Location"),
                 ("function", 5, _MESSAGE, True, "Function"), ("string_table", 6, _STRING, True, None),
                 ("time_nanos", 9, _INT64, False, None), ("duration_nanos", 10, _INT64, False, None),
                 ("period_type", 11, _MESSAGE, False, "ValueType"), ("period", 12, _INT64, False, None),
                 ("comment", 13, _INT64, True, None), ("default_sample_type", 14, _INT64, False, None)]),
    ("ValueType", [("type", 1, _INT64, False, None), ("unit", 2, _INT64, False, None)]),
    ("Sample", [("location_id", 1, _UINT64, True, None), ("value", 2, _INT64, True, None),
                ("label", 3, _MESSAGE, True, "Label")]),
    ("Label", [("key", 1, _INT64, False, None), ("str", 2, _INT64, False, None), ("num", 3, _INT64, False, None),
               ("num_unit", 4, _INT64, False, None)]),
    ("Mapping", [("id", 1, _UINT64, False, None), ("memory_start", 2, _UINT64, False, None),
                 ("memory_limit", 3, _UINT64, False, None), ("file_offset", 4, _UINT64, False, None),
                 ("filename", 5, _INT64, False, None), ("build_id", 6, _INT64, False, None),
                 ("has_functions", 7, _BOOL, False, None), ("has_filenames", 8, _BOOL, False, None),
                 ("has_line_numbers", 9, _BOOL, False, None), ("has_inline_frames", 10, _BOOL, False, None)]),
    ("Location", [("id", 1, _UINT64, False, None), ("mapping_id", 2, _UINT64, False, None),
                  ("address", 3, _UINT64, False, None), ("line", 4, _MESSAGE, True, "Line"),
                  ("is_folded", 5, _BOOL, False, None)]),
    ("Line", [("function_id", 1, _UINT64, False, None), ("line", 2, _INT64, False, None)]),
    ("Function", [("id", 1, _UINT64, False, None), ("name", 2, _INT64, False, None),
                  ("system_name", 3, _INT64, False, None), ("filename", 4, _INT64, False, None),
                  ("start_line", 5, _INT64, False, None)]),
]


def _profile_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    assert (descriptor_pb2.FieldDescriptorProto.TYPE_INT64, descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
            descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED) == (_INT64, _MESSAGE, _REPEATED)
    file = descriptor_pb2.FileDescriptorProto(name="memcost_profile.proto", package="perftools.profiles", syntax="proto3")
    for name, fields in _SCHEMA:
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=_REPEATED if repeated else _OPTIONAL)
            if type_name:
                field.type_name = f".perftools.profiles.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))


class _Strings:
    def __init__(self):
        self.table, self.index = [""], {"": 0}

    def __call__(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.table)
            self.table.append(text)
        return self.index[text]


def build(document: dict) -> bytes:
    """The serialized (not yet gzipped) profile of a trace results document."""
    totals = document["summary"]["totals"]
    trace = trace_records.read(document["samples"])
    cost = CostModel(totals["base_fault_us_per_mb"], totals["thp_fault_us_per_mb"], totals["cost_source"])
    return profile(trace, cost, trace_frames.frames_of(document.get("params", {})), duration_nanos=int(trace.run.get("wall_ns", 0)))


def process_names(trace: trace_records.Trace) -> dict[int, str]:
    """Each traced pid's newest program name."""
    names: dict[int, str] = {}
    for event in trace.processes:
        if event.get("name"):
            names[event["pid"]] = event["name"]
    return names


def profile(trace: trace_records.Trace, cost, which, *, time_nanos: int = 0, duration_nanos: int = 0,
            labels: Optional[dict] = None) -> bytes:
    """A trace's counters as one profile. `labels` go on every sample (a window's host and start);
    each sample also carries its process's pid and name, and the site that touched the pages."""
    period = trace.period
    names = process_names(trace)
    values: dict[tuple, list] = defaultdict(lambda: [0, 0, 0])
    touching = trace_sites.touching_names(trace, which)
    for row in trace_records.touch_rows(trace):
        allocation = row["allocation_stack"] if row["allocation_call"] else 0
        entry = values[(allocation, touching(row["touch_stack"]), row["pid"])]
        entry[0] += row["faults"] * period
        entry[1] += int(row["faults"] * period * cost.fault_us("thp" if row["huge"] else "base") * 1e3)
    for origin in trace.origins:
        if origin["freed_bytes"]:
            values[(origin["stack"], "", None)][2] += origin["freed_bytes"]

    Profile = _profile_class()
    result = Profile()
    string = _Strings()
    for kind, unit in (("faults", "count"), ("fault_time", "nanoseconds"), ("freed", "bytes")):
        result.sample_type.add(type=string(kind), unit=string(unit))
    result.period_type.type, result.period_type.unit = string("faults"), string("count")
    result.period = period
    result.time_nanos, result.duration_nanos = time_nanos, duration_nanos
    result.comment.append(string(f"memcost trace: fault_time estimated from {cost.source}"))

    modules: dict[str, int] = {}
    functions: dict[tuple, int] = {}
    locations: dict[tuple, int] = {}

    def location_id(frame: dict) -> int:
        # Python frames have no address: their function and line tell them apart.
        key = (frame["address"], frame.get("module", ""), frame.get("function", ""), frame.get("file", ""),
               frame.get("line", 0))
        if key in locations:
            return locations[key]
        module = frame.get("module") or "[unknown]"
        if module not in modules:
            modules[module] = len(modules) + 1
            result.mapping.add(id=modules[module], filename=string(module), has_functions=True,
                                has_filenames=True, has_line_numbers=True)
        name = frame.get("function") or f"{os.path.basename(module)}+{frame['address']:#x}"
        function_key = (name, frame.get("file", ""))
        if function_key not in functions:
            functions[function_key] = len(functions) + 1
            result.function.add(id=functions[function_key], name=string(name), system_name=string(name),
                                 filename=string(frame.get("file") or ""))
        locations[key] = len(locations) + 1
        location = result.location.add(id=locations[key], mapping_id=modules[module], address=frame["address"])
        location.line.add(function_id=functions[function_key], line=frame.get("line") or 0)
        return locations[key]

    outside = {"address": 0, "function": "[outside traced mappings]", "module": "", "file": "", "line": 0}
    for (allocation, touch, pid), (faults, fault_ns, freed) in values.items():
        frames = trace.stacks.get(allocation, []) if allocation else [outside]
        sample = result.sample.add(location_id=[location_id(frame) for frame in frames], value=[faults, fault_ns, freed])
        if touch:
            sample.label.add(key=string("touched_by"), str=string(touch))
        if pid is not None:
            sample.label.add(key=string("pid"), num=pid)
            if names.get(pid):
                sample.label.add(key=string("process"), str=string(names[pid]))
        for key, value in (labels or {}).items():
            if isinstance(value, int):
                sample.label.add(key=string(key), num=value)
            else:
                sample.label.add(key=string(key), str=string(str(value)))
    result.string_table.extend(string.table)
    return result.SerializeToString()


def write(document: dict, path: Path) -> None:
    write_atomically(Path(path), gzip.compress(build(document)))


class Windows:
    """A long trace cut into windows, one pprof file each (`memcost trace --every`).

    The probe sends its counters so far at each window's end (records tagged with the window's
    number, then a `window` record with its times); a window's profile is the difference from
    the one before. What is kept between windows grows with distinct stacks and keys, as the
    probe's own counters do, never with time or faults; window records are not kept at all.
    """

    def __init__(self, folder: Path, cost, which, host: str, traced: str):
        self.folder, self.cost, self.which, self.host, self.traced = Path(folder), cost, which, host, traced
        self.stacks = trace_records.Stacks()
        self.names: dict[int, str] = {}
        self.period = 1
        self.previous_faults: dict[tuple, int] = {}
        self.previous_freed: dict[tuple, int] = {}
        self.current: list = []  # this window's records, until its `window` record comes
        self.last_end_ns = time.time_ns()
        self.written = 0
        self.last_written: Optional[Path] = None

    def take(self, sample: dict) -> bool:
        """One probe record as it streams; True when it belongs to a window (and is not kept)."""
        record, metrics = sample["case"]["record"], sample["metrics"]
        if record == "stack":
            self.stacks.take(metrics)
        elif record == "process" and metrics.get("name"):
            self.names[metrics["pid"]] = metrics["name"]
        if "window" not in sample["case"]:
            return False
        if record == "window":
            self.close(self.current, metrics["start_unix_ns"], metrics["end_unix_ns"])
            self.current = []
        else:
            self.current.append(sample)
        return True

    def finish(self, samples: list) -> None:
        """The last window: from the previous window's end to the final counters."""
        run = next((s["metrics"] for s in samples if s["case"]["record"] == "run"), {})
        self.period = run.get("sample_period", self.period)
        final = [s for s in samples if s["case"]["record"] in ("faults", "allocations")]
        self.close(final, self.last_end_ns, time.time_ns())

    def close(self, records: list, start_ns: int, end_ns: int) -> None:
        counts = trace_records.read(records)
        faults: dict[tuple, int] = {}
        for row in counts.faults:
            key = tuple(row[column] for column in trace_records.FAULT_KEY)
            faults[key] = faults.get(key, 0) + row["faults"]
        freed = {(origin["stack"], origin["call"]): origin["freed_bytes"] for origin in counts.origins}
        rows = [{**dict(zip(trace_records.FAULT_KEY, key)), "faults": count - self.previous_faults.get(key, 0)}
                for key, count in faults.items() if count > self.previous_faults.get(key, 0)]
        origins = [{"stack": key[0], "call": key[1], "freed_bytes": bytes_ - self.previous_freed.get(key, 0)}
                   for key, bytes_ in freed.items() if bytes_ > self.previous_freed.get(key, 0)]
        self.previous_faults, self.previous_freed = faults, freed
        window = trace_records.Trace(self.stacks.by_id, rows, origins, {"sample_period": self.period},
                                [{"pid": pid, "name": name} for pid, name in self.names.items()])
        started = datetime.datetime.fromtimestamp(start_ns / 1e9, datetime.timezone.utc)
        labels = {"host": self.host, "traced": self.traced, "window_start": started.isoformat(timespec="seconds")}
        data = profile(window, self.cost, self.which, time_nanos=start_ns, duration_nanos=max(end_ns - start_ns, 0),
                       labels=labels)
        # To the millisecond: a window that ended late (the probe busy past the grid's second) and
        # the next, on time, can start within the same second, and one file overwrote the other.
        stamp = f"{started:%Y%m%dT%H%M%S}.{started.microsecond // 1000:03d}Z"
        path = self.folder / f"memcost-{self.host}-{self.traced}-{stamp}.pb.gz"
        write_atomically(path, gzip.compress(data))
        self.written, self.last_written = self.written + 1, path
        self.last_end_ns = end_ns
