"""pprof export of a trace: a gzipped perftools.profiles.Profile (profile.proto), which
`go tool pprof`, Pyroscope and Parca read unchanged.

Sample types: faults (count), fault_time (nanoseconds, estimated from this machine's measured
cost per MB) and freed (bytes). One sample per (allocation stack, touching site): its locations
are the allocation stack, leaf first; the touching site is a label.

The message classes are built from a descriptor written here (the fields of profile.proto, by
number), so no generated code or protoc is needed; the encoding is the protobuf library's.
"""

from __future__ import annotations

import gzip
import os
from collections import defaultdict
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ..analysis import trace as analysis
from ..results import write_atomically

_INT64, _UINT64, _BOOL = (descriptor_pb2.FieldDescriptorProto.TYPE_INT64, descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
                          descriptor_pb2.FieldDescriptorProto.TYPE_BOOL)
_MESSAGE, _STRING = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_REPEATED, _OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED, descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL

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
    from ..experiments.trace import frames_of
    trace = analysis.read(document["samples"])
    which = frames_of(document.get("params", {}))
    totals = document["summary"]["totals"]
    period = trace.period
    cost = analysis.CostModel(totals["base_fault_us_per_mb"], totals["thp_fault_us_per_mb"], totals["cost_source"])

    values: dict[tuple, list] = defaultdict(lambda: [0, 0, 0])
    for row in trace.faults:
        allocation = row["allocation_stack"] if row["allocation_call"] else 0
        entry = values[(allocation, analysis.site_of(trace.stacks, row["touch_stack"], which))]
        entry[0] += row["faults"] * period
        entry[1] += int(row["faults"] * period * cost.fault_us("thp" if row["huge"] else "base") * 1e3)
    for origin in trace.origins:
        if origin["freed_bytes"]:
            values[(origin["stack"], "")][2] += origin["freed_bytes"]

    Profile = _profile_class()
    profile = Profile()
    string = _Strings()
    for kind, unit in (("faults", "count"), ("fault_time", "nanoseconds"), ("freed", "bytes")):
        profile.sample_type.add(type=string(kind), unit=string(unit))
    profile.period_type.type, profile.period_type.unit = string("faults"), string("count")
    profile.period = period
    profile.duration_nanos = int(trace.run.get("wall_ns", 0))
    profile.comment.append(string(f"memcost trace: fault_time estimated from {totals['cost_source']}"))

    modules: dict[str, int] = {}
    functions: dict[tuple, int] = {}
    locations: dict[tuple, int] = {}

    def location_id(frame: dict) -> int:
        key = (frame["address"], frame.get("module", ""))
        if key in locations:
            return locations[key]
        module = frame.get("module") or "[unknown]"
        if module not in modules:
            modules[module] = len(modules) + 1
            profile.mapping.add(id=modules[module], filename=string(module), has_functions=True,
                                has_filenames=True, has_line_numbers=True)
        name = frame.get("function") or f"{os.path.basename(module)}+{frame['address']:#x}"
        function_key = (name, frame.get("file", ""))
        if function_key not in functions:
            functions[function_key] = len(functions) + 1
            profile.function.add(id=functions[function_key], name=string(name), system_name=string(name),
                                 filename=string(frame.get("file") or ""))
        locations[key] = len(locations) + 1
        location = profile.location.add(id=locations[key], mapping_id=modules[module], address=frame["address"])
        location.line.add(function_id=functions[function_key], line=frame.get("line") or 0)
        return locations[key]

    outside = {"address": 0, "function": "[outside traced mappings]", "module": "", "file": "", "line": 0}
    for (allocation, touch), (faults, fault_ns, freed) in values.items():
        frames = trace.stacks.get(allocation, []) if allocation else [outside]
        sample = profile.sample.add(location_id=[location_id(frame) for frame in frames], value=[faults, fault_ns, freed])
        if touch:
            sample.label.add(key=string("touched_by"), str=string(touch))
    profile.string_table.extend(string.table)
    return profile.SerializeToString()


def write(document: dict, path: Path) -> None:
    write_atomically(Path(path), gzip.compress(build(document)))
