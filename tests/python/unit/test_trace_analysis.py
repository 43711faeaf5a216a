"""The trace analysis on hand-made aggregates: sites, page kinds, advice thresholds, processes,
exports. No probe, no kernel: every number here is known. (Attribution itself, which the probe
does as records stream, is tested in tests/cpp/attribution_test.cpp.)"""

import gzip
import sys

import pytest

from conftest import summarize_trace

from memcost.analysis.trace import frames as trace_frames
from memcost.analysis.trace import records as trace_records
from memcost.analysis.trace import sites as trace_sites
from memcost.analysis.trace import summary as trace_summary
from memcost.analysis.cost_model import CostModel
from memcost import tracing
from memcost.report import trace as trace_prose

MIB = 1 << 20
PAGE = 4096
FRAME = {"function": "", "file": "", "line": 0, "module": "", "module_offset": 0}
COST = CostModel(base_us_per_mb=400.0, thp_us_per_mb=40.0, source="test")


def stack(stack_id, *names):
    frames = [{**FRAME, "address": 0x1000 + i, "function": name, "file": "/src/app.c", "line": 10 + i,
               "module": "/usr/bin/app"} for i, name in enumerate(names)]
    return {"case": {"record": "stack"}, "metrics": {"stack": stack_id, "frames": frames}}


def faults(*rows):
    """rows: (allocation stack, allocation call, touching stack, pid, program, huge, faults)."""
    columns = ("allocation_stack", "allocation_call", "touch_stack", "pid", "program", "huge", "faults")
    return {"case": {"record": "faults"}, "metrics": {name: [row[i] for row in rows] for i, name in enumerate(columns)}}


def origin(stack_id, made, freed, size, faults_base, faults_thp=0, free_ns=0, map_ns=0, call="mmap", one_thread=True):
    freed_by_size = [{"bytes": size, "freed": freed, "faults_base": faults_base * freed // max(made, 1),
                      "faults_thp": faults_thp * freed // max(made, 1), "free_ns": free_ns, "map_ns": map_ns}] if freed else []
    return {"case": {"record": "allocations", "call": call},
            "metrics": {"stack": stack_id, "made": made, "freed": freed, "bytes": made * size,
                        "freed_bytes": freed * size, "map_ns": map_ns, "free_ns": free_ns, "huge_advised": False,
                        "largest_bytes": size, "largest_faults_base": faults_base // max(made, 1),
                        "largest_faults_thp": faults_thp // max(made, 1), "largest_one_thread": one_thread,
                        "freed_by_size": freed_by_size}}


def process(change, pid, name, time_ns, parent=0):
    return {"case": {"record": "process", "change": change},
            "metrics": {"pid": pid, "parent": parent, "time_ns": time_ns, "name": name}}


def run(wall_ms=1000.0, period=1, thp_mode="madvise"):
    return {"case": {"record": "run"}, "metrics": {"exit_code": 0, "wall_ns": int(wall_ms * 1e6), "user_ns": int(4e8),
                                                   "system_ns": int(4e8), "sample_period": period,
                                                   "rusage_minor_faults": 0, "thp_mode": thp_mode}}


def with_thp(samples, mode):
    return samples[:-1] + [run(thp_mode=mode)]


def churn(frames, size=8 * MIB, touched_pages=2048, wall_ms=1000.0):
    """A site that maps, writes and frees a buffer `frames` times."""
    return [stack(1, "per_frame", "main"), stack(2, "writer"),
            faults((1, "mmap", 2, 7, 0, False, frames * touched_pages)),
            origin(1, frames, frames, size, frames * touched_pages, free_ns=frames * 500_000, map_ns=frames * 1000),
            run(wall_ms)]


def test_sites_group_origins_and_price_faults_by_page_kind():
    samples = [stack(1, "maker", "main"), stack(3, "maker", "main"), stack(2, "writer"),
               faults((1, "mmap", 2, 7, 0, False, 100), (3, "mmap", 2, 7, 0, True, 8), (0, "", 2, 7, 0, False, 1)),
               origin(1, 1, 1, MIB, 100), origin(3, 1, 0, 16 * MIB, 0, 8), run()]
    summary = summarize_trace(samples, COST)
    [row] = summary["rows"]  # both stacks' first user frame is maker (app.c:10)
    assert (row["faults_base"], row["faults_thp"], row["mappings"], row["freed"]) == (100, 8, 2, 1)
    assert row["fault_ms"] == pytest.approx((100 * 400 * PAGE / MIB + 8 * 40 * 2) / 1e3)
    assert summary["totals"]["faults"] == 109 and summary["totals"]["faults_attributed"] == 108
    [touching] = summary["touching"]
    assert touching["faults"] == 109 and touching["allocation_site"].startswith("maker")


def test_the_sample_period_scales_every_count():
    summary = summarize_trace(churn(5)[:-1] + [run(period=4)], COST)
    assert summary["rows"][0]["faults"] == 4 * 5 * 2048 and summary["totals"]["faults"] == 4 * 5 * 2048


def test_reuse_advice_needs_churn_and_a_saving_worth_having():
    churning = summarize_trace(churn(50), COST)["rows"][0]
    assert churning["churn"] == 50 and churning["churn_bytes"] == 8 * MIB
    reuse = [item for item in churning["advice"] if item["kind"] == "reuse"]
    # 49 of 50 frames' faults (2,048 × 1.5625 µs), frees (0.5 ms) and maps (1 µs) are saved.
    assert reuse and reuse[0]["saving_ms"] == pytest.approx(49 / 50 * 50 * (2048 * 400 * PAGE / MIB / 1e3 + 0.5 + 0.001))
    twice = summarize_trace(churn(2), COST)["rows"][0]
    assert not [item for item in twice["advice"] if item["kind"] == "reuse"]
    tiny = summarize_trace(churn(10, size=64 * 1024, touched_pages=16, wall_ms=10_000), COST)["rows"]
    assert all(not row["advice"] for row in tiny)


def test_reuse_advice_uses_the_measured_reuse_cost_for_base_pages():
    measured = CostModel(400.0, 40.0, "test", reuse_saving_us_per_mb=300.0)
    row = summarize_trace(churn(50), measured)["rows"][0]
    reuse = next(item for item in row["advice"] if item["kind"] == "reuse")
    assert reuse["saving_ms"] == pytest.approx(49 / 50 * 50 * (8 * 300.0 / 1e3 + 0.001))  # measured reuse cost, and maps


def test_no_huge_page_advice_where_thp_is_off():
    assert not [a for a in summarize_trace(with_thp(churn(5), "never"), COST)["rows"][0]["advice"] if a["kind"] == "huge_pages"]
    assert [a for a in summarize_trace(churn(5), COST)["rows"][0]["advice"] if a["kind"] == "huge_pages"]


def test_no_huge_page_or_parallel_advice_for_a_files_or_a_devices_memory():
    """A library the loader maps, or a driver's pinned pages that cudaHostAlloc maps (a device
    file): no madvise can ask huge pages for them, and make_big_array cannot make them."""
    model = CostModel(400.0, 40.0, "test", threads=2, threads_speedup=1.9)
    anonymous = [stack(1, "big"), stack(2, "writer"), faults((1, "mmap", 2, 7, 0, False, 65536)),
                 origin(1, 1, 0, 256 * MIB, 65536), run()]
    kinds = [a["kind"] for a in summarize_trace(anonymous, model)["rows"][0]["advice"]]
    assert "huge_pages" in kinds and "parallel" in kinds
    device = origin(1, 1, 0, 256 * MIB, 65536)
    device["metrics"]["file_backed"] = True
    row = summarize_trace(anonymous[:3] + [device, run()], model)["rows"][0]
    assert row["file_backed"] and not {"huge_pages", "parallel"} & {a["kind"] for a in row["advice"]}


def test_parallel_advice_only_for_a_big_block_one_thread_faulted():
    model = CostModel(400.0, 40.0, "test", threads=2, threads_speedup=1.9)
    one = [stack(1, "big"), stack(2, "writer"), faults((1, "mmap", 2, 7, 0, False, 65536)),
           origin(1, 1, 0, 256 * MIB, 65536), run()]
    assert "parallel" in [a["kind"] for a in summarize_trace(one, model)["rows"][0]["advice"]]
    many = one[:3] + [origin(1, 1, 0, 256 * MIB, 65536, one_thread=False), run()]
    assert "parallel" not in [a["kind"] for a in summarize_trace(many, model)["rows"][0]["advice"]]


def test_the_processes_table_names_each_program_a_pid_ran():
    samples = [stack(1, "maker"), stack(2, "writer"),
               process("start", 7, "sh", 0), process("exec", 7, "sh", 1), process("fork", 8, "sh", 5, parent=7),
               process("exec", 8, "prog_a", 6), process("exit", 8, "prog_a", 9),
               faults((1, "mmap", 2, 8, 1, False, 300), (0, "", 2, 8, 0, False, 2), (1, "mmap", 2, 7, 1, False, 10)),
               origin(1, 2, 0, MIB, 310), run()]
    rows = summarize_trace(samples, COST)["processes"]
    by_name = {(r["pid"], r["name"]): r for r in rows}
    assert by_name[(8, "prog_a")]["faults"] == 300 and by_name[(8, "prog_a")]["parent"] == 7
    assert by_name[(8, "sh")]["faults"] == 2 and by_name[(8, "sh")]["faults_attributed"] == 0
    assert by_name[(7, "sh")]["faults"] == 10


def touch_samples(*rows):
    """rows: (allocation stack, allocation call, touching stack, pid, program, samples, faults they stand for)."""
    columns = ("allocation_stack", "allocation_call", "touch_stack", "pid", "program", "samples", "faults")
    return {"case": {"record": "touch_samples"},
            "metrics": {name: [row[i] for row in rows] for i, name in enumerate(columns)}}


def counted_in_kernel():
    """A site counted exactly in the kernel (10,000 faults), its touching stacks sampled: 300 samples
    standing for 7,500 faults by `writer`, 100 for 2,500 by `reader`."""
    return [stack(1, "maker", "main"), stack(2, "writer"), stack(4, "reader"),
            faults((1, "mmap", 0, 7, 0, False, 10_000)),
            touch_samples((1, "mmap", 2, 7, 0, 300, 7_500), (1, "mmap", 4, 7, 0, 100, 2_500)),
            origin(1, 1, 0, 64 * MIB, 10_000), run()]


def test_counted_in_the_kernel_the_touching_sites_share_the_exact_count_by_their_samples():
    summary = summarize_trace(counted_in_kernel(), COST)
    [row] = summary["rows"]
    assert row["faults"] == 10_000  # exact: the kernel's count, not the samples'
    touching = {r["site"].split(" ")[0]: r for r in summary["touching"]}
    assert touching["writer"]["faults"] == 7_500 and touching["reader"]["faults"] == 2_500
    assert touching["writer"]["samples"] == 300
    assert touching["writer"]["faults_error"] == pytest.approx(7_500 / 300 ** 0.5)


def kernel_fault_time(*rows):
    """rows: (allocation stack, allocation call, pid, timed faults, timings ended, ns, squares in (16 ns)^2)."""
    columns = ("allocation_stack", "allocation_call", "touch_stack", "pid", "program", "samples", "zeroing_samples",
               "timed_faults", "timings_ended", "kernel_ns", "kernel_ns_squares")
    full = [(r[0], r[1], 0, r[2], 0, 0, 0, *r[3:]) for r in rows]
    return {"case": {"record": "fault_time"}, "metrics": {name: [row[i] for row in full] for i, name in enumerate(columns)}}


def timed_in_kernel(one_in, *rows):
    samples = counted_in_kernel()
    samples[-1]["metrics"].update({"counted_in_kernel": True, "fault_timing_one_in": one_in})
    return samples[:-1] + [kernel_fault_time(*rows), samples[-1]]


def test_fault_time_timed_in_the_kernel_is_the_timed_faults_mean_times_the_faults():
    # 625 of the 10,000 faults timed (one in 16), half at 1,600 ns and half at 3,200 ns (in 16 ns
    # units: 100 and 200): mean 2,400 ns, so 24 ms for the site; the error is the spread of the
    # timed ones over the square root of their number, shrunk for the part of the faults timed.
    squares = 312.5 * 100 ** 2 + 312.5 * 200 ** 2
    summary = summarize_trace(timed_in_kernel(16, (1, "mmap", 7, 625, 625, 625 * 2400, squares)), COST)
    [row] = summary["rows"]
    assert row["fault_ms_kernel"] == pytest.approx(24.0)
    spread = (800 ** 2 * 625 / 624) ** 0.5  # ns, the timed faults' standard deviation
    assert row["fault_ms_kernel_error"] == pytest.approx(10_000 * spread / 625 ** 0.5 * (1 - 625 / 10_000) ** 0.5 / 1e6)
    assert row["faults_timed"] == 625
    totals = summary["totals"]
    assert totals["fault_ms_kernel"] == pytest.approx(24.0) and totals["faults_timed_unended"] == 0
    text = "\n".join(trace_prose.totals_lines(summary))
    # Timed in the kernel and not sampled: the kernel's figure is the one answer, the estimate a method beside it.
    assert text.count("Fault time: ") == 1 and "Fault time: 24.0 ± " in text and "measured in the kernel" in text
    assert "timed in the kernel, 24.0 ± " in text and "estimated, " in text


def test_fault_time_timed_in_the_kernel_for_every_fault_has_no_sampling_error():
    summary = summarize_trace(timed_in_kernel(1, (1, "mmap", 7, 10_000, 9_000, 9_000 * 2000, 9_000 * 125 ** 2)), COST)
    [row] = summary["rows"]
    assert row["fault_ms_kernel"] == pytest.approx(18.0)  # the 1,000 that updated no page count count 0
    assert row["fault_ms_kernel_error"] == 0
    assert summary["totals"]["faults_timed_unended"] == 1_000


def test_fault_time_not_timed_in_the_kernel_is_said():
    summary = summarize_trace(timed_in_kernel(0), COST)
    assert summary["rows"][0].get("fault_ms_kernel") is None and summary["totals"].get("fault_ms_kernel") is None
    assert "not timed in the kernel (--time-faults-one-in 0, the default with --pid" in "\n".join(trace_prose.totals_lines(summary))


def test_counted_in_the_kernel_the_exports_total_the_exact_count(tmp_path):
    from memcost.export import folded, pprof
    samples = counted_in_kernel()
    document = {"samples": samples, "summary": summarize_trace(samples, COST)}
    folded.write(document, tmp_path / "f.txt")
    lines = [line for line in (tmp_path / "f.txt").read_text().split("\n") if line]
    assert sorted(int(line.rsplit(" ", 1)[1]) for line in lines) == [2_500, 7_500]
    pprof.write(document, tmp_path / "p.pb.gz")
    profile = pprof._profile_class()()
    profile.ParseFromString(gzip.decompress((tmp_path / "p.pb.gz").read_bytes()))
    assert sum(sample.value[0] for sample in profile.sample) == 10_000


def test_exports_total_what_the_summary_counts(tmp_path):
    from memcost.export import folded, pprof
    samples = churn(5)
    summary = summarize_trace(samples, COST)
    document = {"samples": samples, "summary": summary}
    folded.write(document, tmp_path / "f.txt")
    lines = (tmp_path / "f.txt").read_text().split("\n")
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines if line) == 5 * 2048
    assert lines[0] == "main_(app.c:11);per_frame_(app.c:10);[touched_by]_writer_(app.c:10) 10240"  # root first
    pprof.write(document, tmp_path / "p.pb.gz")
    profile = pprof._profile_class()()
    profile.ParseFromString(gzip.decompress((tmp_path / "p.pb.gz").read_bytes()))
    assert [profile.string_table[t.type] for t in profile.sample_type] == ["faults", "fault_time", "freed"]
    assert sum(sample.value[0] for sample in profile.sample) == 5 * 2048
    assert sum(sample.value[2] for sample in profile.sample) == 5 * 8 * MIB


def _frame(function, module="/usr/bin/app"):
    return {**FRAME, "address": 0x1000, "function": function, "module": module}


def test_the_site_is_the_first_frame_past_allocators_runtimes_and_standard_libraries():
    stack_frames = [_frame("malloc", "/lib/x86_64-linux-gnu/libc.so.6"),
                    _frame("operator new(unsigned long)", "/lib/x86_64-linux-gnu/libstdc++.so.6"),
                    _frame("void std::vector<double, std::allocator<double> >::_M_realloc_insert<double>(double&&)"),
                    _frame("grow_samples(bool)"), _frame("main")]
    assert trace_frames.user_frame(stack_frames)["function"] == "grow_samples(bool)"
    for runtime in ("runtime.mallocgc", "alloc::raw_vec::finish_grow", "<alloc::vec::Vec<T> as core::clone::Clone>::clone",
                    "core::ptr::drop_in_place", "PyMem_Malloc", "_PyObject_Malloc", "PyDataMem_UserNEW", "default_malloc"):
        assert trace_frames.user_frame([_frame(runtime), _frame("mine")])["function"] == "mine", runtime
    # A parameter of a standard type does not make a function the standard library's.
    assert trace_frames.user_frame([_frame("fill(std::vector<int>&, int)")])["function"] == "fill(std::vector<int>&, int)"
    kept = trace_frames.FrameFilter(keep=r"^void std::vector")
    assert trace_frames.user_frame(stack_frames, kept)["function"].startswith("void std::vector")
    skipped = trace_frames.FrameFilter(skip=r"^grow_")
    assert trace_frames.user_frame(stack_frames, skipped)["function"] == "main"


def test_skip_frames_changes_the_named_site(tmp_path):
    samples = [{"case": {"record": "stack"}, "metrics": {"stack": 1, "frames": [_frame("grow_samples(bool)"), _frame("main")]}},
               stack(2, "writer"), faults((1, "mmap", 2, 7, 0, False, 600)), origin(1, 1, 0, 8 * MIB, 600), run()]
    assert summarize_trace(samples, COST)["rows"][0]["site"] == "grow_samples(bool)"
    assert summarize_trace(samples, COST, trace_frames.FrameFilter(skip="^grow_"))["rows"][0]["site"] == "main"


def _at(function, line, module="/usr/bin/app", kind="native", file="/src/app.c"):
    return {**FRAME, "kind": kind, "address": 0x1000 + line, "function": function, "file": file, "line": line,
            "module": module}


def _stacks(*paths):
    return {number: frames for number, frames in enumerate(paths, 1)}


def test_a_helper_called_from_two_places_is_two_sites_named_by_their_callers():
    stacks = _stacks([_at("helper", 3), _at("scratch", 20), _at("main", 40)],
                     [_at("helper", 3), _at("table", 30), _at("main", 41)],
                     [_at("alone", 9), _at("main", 42)])
    names = trace_sites.SiteNames(stacks, stacks)
    assert names(1) == "helper (app.c:3) ← scratch" and names(2) == "helper (app.c:3) ← table"
    assert names(3) == "alone (app.c:9)"  # reached by one path: its short name


def test_a_call_path_goes_out_to_the_first_caller_that_tells_paths_apart():
    stacks = _stacks([_at("helper", 3), _at("middle", 12), _at("a", 20), _at("main", 40)],
                     [_at("helper", 3), _at("middle", 12), _at("b", 30), _at("main", 40)],
                     [_at("helper", 3), _at("middle", 12)],  # cut short: not a third path
                     [_at("twice", 5), _at("caller", 50), _at("main", 40)],
                     [_at("twice", 5), _at("caller", 51), _at("main", 40)])
    names = trace_sites.SiteNames(stacks, stacks)
    assert names(1) == "helper (app.c:3) ← middle ← a" and names(2) == "helper (app.c:3) ← middle ← b"
    assert names(3) == "helper (app.c:3)"
    assert names(4) == "twice (app.c:5) ← caller:50" and names(5) == "twice (app.c:5) ← caller:51"


def test_runtime_and_library_frames_do_not_split_a_site():
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    stacks = _stacks([_at("runtime.sysMmap", 1, file=""), _at("runtime.mheap.grow", 2, file=""), _at("main.a", 3)],
                     [_at("runtime.sysMmap", 1, file=""), _at("runtime.persistentalloc", 4, file="")],
                     [_at("mine", 7), _at("__libc_start_call_main", 8, libc)],
                     [_at("mine", 7), _at("start_thread", 9, libc)])
    names = trace_sites.SiteNames(stacks, stacks)
    assert names(1) == "main.a (app.c:3)"
    assert names(3) == names(4) == "mine (app.c:7)"


def test_summarized_rows_and_touching_sites_are_keyed_by_call_path():
    samples = [{"case": {"record": "stack"}, "metrics": {"stack": 1, "frames": [_at("map_base", 9, kind="inlined"),
                                                                                   _at("scratch", 20), _at("main", 40)]}},
               {"case": {"record": "stack"}, "metrics": {"stack": 2, "frames": [_at("map_base", 9, kind="inlined"),
                                                                                   _at("table", 30), _at("main", 41)]}},
               stack(3, "writer"),
               faults((1, "mmap", 3, 7, 0, False, 40 * 1024), (2, "mmap", 3, 7, 0, False, 49152)),
               origin(1, 40, 40, 4 * MIB, 40 * 1024, free_ns=40 * 500_000), origin(2, 1, 0, 192 * MIB, 49152), run()]
    summary = summarize_trace(samples, COST)
    by_site = {row["site"]: row for row in summary["rows"]}
    assert set(by_site) == {"map_base (app.c:9) ← scratch", "map_base (app.c:9) ← table"}
    assert "reuse" in [item["kind"] for item in by_site["map_base (app.c:9) ← scratch"]["advice"]]
    assert "reuse" not in [item["kind"] for item in by_site["map_base (app.c:9) ← table"]["advice"]]


def test_jit_compiled_frames_name_the_program_and_skip_the_runtimes():
    node, jvm = "/usr/bin/node", "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
    js = [_at("node::Buffer::Alloc", 1, node, file=""), _at("Builtins_InterpreterEntryTrampoline", 2, node, file=""),
          _at("alloc", 391, "/tmp/perf-1.map", "jit", "node:buffer"),
          _at("allocateFrames", 4, "/tmp/perf-1.map", "jit", "/srv/buffers.js"),
          _at("(anonymous)", 1, "/tmp/perf-1.map", "jit", "/srv/buffers.js")]
    assert trace_frames.user_frame(js)["function"] == "allocateFrames"
    java = [_at("ObjArrayAllocator::initialize(HeapWordImpl**) const", 1, jvm, file=""),
            _at("Interpreter", 0, "/tmp/perf-2.map", "jit", ""),
            _at("java.util.Arrays.copyOf(long[], int)", 0, "/tmp/perf-2.map", "jit", ""),
            _at("Arrays.allocateBlocks(int, int)", 0, "/tmp/perf-2.map", "jit", "")]
    assert trace_frames.user_frame(java)["function"] == "Arrays.allocateBlocks(int, int)"
    assert trace_frames.runtime_of(trace_frames.user_frame(java)) == "jvm"
    heap = [_at("os::pd_commit_memory_or_exit(char*, unsigned long)", 1, jvm, file=""), _at("JavaMain", 2, "/x/libjli.so")]
    assert trace_frames.user_frame(heap)["function"].startswith("os::pd_commit_memory")  # the JVM's own heap
    assert trace_frames.runtime_of(trace_frames.user_frame(heap)) == "jvm"


@pytest.mark.parametrize("full, shown", [
    ("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(int const&) (vector.tcc:123)",
     "std::vector<…>::_M_realloc_insert<…>(…) (vector.tcc:123)"),
    ("os::pd_commit_memory_or_exit(char*, unsigned long, unsigned long, bool, char const*)", "os::pd_commit_memory_or_exit(…)"),
    ("map_base (inlined_mmap.c:9) ← scratch_per_frame.constprop.0", "map_base (inlined_mmap.c:9) ← scratch_per_frame"),
    ("current_stack_region(unsigned char**) [clone .isra.0]", "current_stack_region(…)"),
    ("<module> (<string>:2)", "<module> (<string>:2)"),
    ("runtime.(*mheap).grow", "runtime.(*mheap).grow"),
    ("operator new(unsigned long)", "operator new(…)"),
    ("v8::internal::(anonymous namespace)::Invoke(v8::internal::Isolate*)", "v8::internal::(anonymous namespace)::Invoke(…)"),
    ("a ← b ← c ← d ← e", "a ← b ← c ← d ← …"),
    ("main", "main"),
])
def test_tables_show_names_as_perf_shortens_them(full, shown):
    assert trace_sites.readable(full) == shown


def test_counted_faults_are_shared_between_sampled_stacks_in_whole_faults_that_add_up():
    from memcost.analysis.trace.records import _apportioned
    shares = _apportioned(184395, [3.0, 1.0, 1.0, 2.0, 7.0])
    assert sum(shares) == 184395 and all(isinstance(share, int) for share in shares)
    assert shares[4] > shares[0] > shares[3] > shares[1] >= shares[2]
    assert _apportioned(2, [1.0, 1.0, 1.0]) in ([1, 1, 0], [1, 0, 1], [0, 1, 1])


def _probe_arguments_of(monkeypatch, values):
    """What `memcost trace` asks of the probe for these values (the probe not run)."""
    import contextlib
    from memcost import tracefs, tracing
    asked = []
    monkeypatch.setattr(tracing, "run_probe", lambda name, arguments, **_: asked.append(arguments))
    monkeypatch.setattr(tracefs, "available", lambda **_: contextlib.nullcontext())
    tracing.record(values)
    return asked[0]


def test_attached_to_a_service_the_sampling_defaults_are_a_services(monkeypatch):
    arguments = _probe_arguments_of(monkeypatch, {"pid": 4321, "every": 10.0})
    flags = dict(zip(arguments[::2], arguments[1::2]))
    assert flags["--attach"] == "4321" and flags["--window-seconds"] == "10"
    assert (flags["--touch-samples-per-second"], flags["--cpu-sample-us"], flags["--time-faults-one-in"]) == ("10", "0", "0")
    # A flag the user gives wins; a command keeps the probe's own defaults (none passed).
    arguments = _probe_arguments_of(monkeypatch, {"pid": 4321, "cpu_sample_us": 1000})
    assert arguments[arguments.index("--cpu-sample-us") + 1] == "1000"
    arguments = _probe_arguments_of(monkeypatch, {"command": ["true"]})
    assert "--touch-samples-per-second" not in arguments and "--cpu-sample-us" not in arguments


def test_the_overhead_line_gives_the_tracers_presence_in_the_commands_kernel_time():
    totals = {"wall_ms": 1500.0, "untraced_wall_ms": 1000.0, "system_ms": 900.0, "untraced_system_ms": 700.0,
              "faults": 500_000, "fault_ms_measured": 600.0, "tracing_ms": 50.0}
    [line] = trace_prose.overhead_lines(totals)
    # 200 ms added in 500,000 faults: 400 ns each; 50 ms of it the sampler already left out as the tracer's.
    assert "(1.50×); system time 900 ms traced vs 700 ms untraced: the tracer added 200 ms" in line
    assert "400 ns a fault" in line and "less the 150 ms" in line and "≈ 450.0 ms" in line
    # Without the untraced system time (a document from before), the wall times alone.
    assert trace_prose.overhead_lines({**totals, "untraced_system_ms": None})[0].endswith("(1.50×).")


def test_memcost_phases_put_the_front_ends_cpu_while_the_probe_ran_beside_the_times_around_the_command():
    run = {"probe_began_ns": 10_000_000_000, "command_started_ns": 10_030_000_000, "wall_ns": 2_000_000_000,
           "records_done_ns": 12_050_000_000}
    marks = {"python_started": 9.9, "probe_spawned": 9.97, "cpu_at_spawn": 0.060, "output_ended": 12.07,
             "cpu_at_output_end": 0.305, "naming_cpu_s": 0.15, "summarized": 12.15}
    phases = tracing.memcost_phases(run, marks)
    assert phases["start_python_ms"] == pytest.approx(70.0) and phases["start_probe_ms"] == pytest.approx(60.0)
    assert phases["end_probe_ms"] == pytest.approx(40.0) and phases["end_summary_ms"] == pytest.approx(80.0)
    assert phases["front_end_cpu_ms"] == pytest.approx(245.0)
    [line] = trace_prose.phase_lines({"memcost_phases": phases})
    assert "130 ms before it" in line and "120 ms after it" in line
    assert "front end used 245 ms of CPU while the probe ran" in line and "150 ms naming stacks" in line
    # A mark missing (a replay): no phases, no line.
    assert tracing.memcost_phases(run, {**marks, "cpu_at_spawn": None}) is None
    # A document from before the front end's CPU was measured still reads.
    assert "front end" not in trace_prose.phase_lines({"memcost_phases": {k: v for k, v in phases.items()
                                                                          if k != "front_end_cpu_ms"}})[0]


def test_the_untraced_run_measures_its_own_system_time():
    spent = tracing._untraced_run([sys.executable, "-c", "import os\nfor _ in range(300000): os.stat('/')"])
    assert spent["untraced_wall_ms"] > 0 and 0 < spent["untraced_system_ms"] <= spent["untraced_wall_ms"] * 1.5


def test_one_fault_time_answer_and_shares_of_the_commands_cpu_time():
    """Many threads fault at once: their fault time exceeds the wall time, so a share is of the CPU
    time, which can hold it. Sampled and timed in the kernel both ran: one answer (the sampled, the
    whole handler), the other a method beside it."""
    totals = {"wall_ms": 1000.0, "user_ms": 500.0, "system_ms": 15_000.0, "faults": 8_388_608, "free_ms": 100.0,
              "map_ms": 50.0, "fault_ms": 9_000.0, "fault_ms_measured": 13_000.0, "fault_ms_measured_error": 40.0,
              "fault_ms_kernel": 11_000.0, "fault_ms_kernel_error": 30.0}
    line = trace_summary.headline([{"site": "storm (storm.c:9)"}], totals)
    assert "took 13,000.0 ± 40.0 ms (measured by sampling)" in line
    assert "85% of the command's 15,500 ms of CPU time" in line and "1300%" not in line
    assert trace_summary.fault_time_answer({**totals, "fault_ms_measured": None}) == (11_000.0, 30.0,
                                                                                "measured in the kernel, a part of each fault")
    # Threads that wait on each other (16 mapping and unmapping at once, on a 16-vCPU host: 18.5 s of
    # faults and 7.2 s of freeing against 22.9 s of CPU): no share above the whole, and why.
    waited = trace_summary.headline([{"site": "storm (storm.c:9)"}], {**totals, "system_ms": 10_000.0})
    assert "%" not in waited
    assert "more than the command's 10,500 ms of CPU time: their times include waiting" in waited
    assert trace_summary.fault_time_answer({"fault_ms": 9.0}) == (9.0, None, "estimated")


def test_a_mapping_the_go_runtime_made_for_many_allocations_is_named_so():
    """Go grows its heap on the system stack: no goroutine frame is on the mapping's stack."""
    def frames(*functions):
        return [{"kind": "native", "function": name, "module": "/srv/app", "file": "", "line": 0} for name in functions]
    grow = frames("runtime.sysMmap.abi0", "runtime.mmap", "runtime.sysMapOS", "runtime.sysMap", "runtime.(*mheap).grow",
                  "runtime.(*mheap).allocSpan", "runtime.(*mheap).alloc.func1", "runtime.systemstack.abi0")
    start = frames("runtime.sysMmap.abi0", "runtime.mmap", "runtime.sysReserveOS", "runtime.(*pageAlloc).sysInit",
                   "runtime.(*mheap).init", "runtime.mallocinit", "runtime.schedinit", "runtime.rt0_go.abi0")
    assert trace_sites.go_runtime_mapping(grow) == trace_sites.GO_HEAP
    assert trace_sites.go_runtime_mapping(start) == trace_sites.GO_STARTUP
    # A Go function of the program's on the stack: it is the site, as in C.
    assert trace_sites.go_runtime_mapping(grow[:5] + frames("main.buildFrame", "main.main")) is None
    assert trace_sites.go_runtime_mapping(frames("mmap", "main")) is None
    trace = trace_records.Trace({1: grow, 2: frames("main.buildFrame", "runtime.mallocgc")}, [],
                           [{"stack": 1, "call": "mmap"}, {"stack": 2, "call": "mmap"}], {})
    names = trace_sites.allocation_names(trace)
    assert names(1) == trace_sites.GO_HEAP and names(2) == "main.buildFrame"


def test_faults_a_gpu_driver_takes_pinning_are_named_by_the_cuda_call():
    """The driver pins inside an ioctl; the touching site names the CUDA call the program made
    (the outermost in the stack: the runtime's over the driver's), then the program's own frames."""
    cuda, runtime = "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/local/cuda/lib64/libcudart.so.13"
    pinning = [_at("", 1, cuda, file=""), _at("cuMemHostAlloc", 2, cuda, file=""),
               _at("cudaHostAlloc", 3, runtime, file=""), _at("load_batch", 40), _at("main", 50)]
    registering = [_at("ioctl", 1, "/usr/lib/x86_64-linux-gnu/libc.so.6", file=""),
                   _at("cuMemHostRegister_v2", 2, cuda, file=""), _at("stage", 60), _at("main", 51)]
    populating = [_at("madvise", 1, "/usr/lib/x86_64-linux-gnu/libc.so.6", file=""), _at("prefault", 70)]
    samples = [{"case": {"record": "stack"}, "metrics": {"stack": number, "frames": frames}}
               for number, frames in ((1, pinning), (2, registering), (3, populating))]
    samples += [stack(9, "allocate"),
                faults((9, "mmap", 1, 7, 0, False, 8192), (9, "mmap", 2, 7, 0, False, 4096), (9, "mmap", 3, 7, 0, False, 1024)),
                *[{"case": {"record": "call_faults", "call": call},
                   "metrics": {"stack": number, "calls": 1, "faults": count, "call_ns": 1_000_000}}
                  for number, call, count in ((1, "ioctl", 8192), (2, "ioctl", 4096), (3, "madvise", 1024))],
                origin(9, 1, 0, 64 * MIB, 13312), run()]
    rows = summarize_trace(samples, COST)["touching"]
    touching = {row["site"] for row in rows}
    assert "cudaHostAlloc (ioctl) ← load_batch (app.c:40)" in touching, touching
    assert "cuMemHostRegister (ioctl) ← stage (app.c:60)" in touching, touching
    assert "madvise ← prefault (app.c:70)" in touching, touching
    assert trace_sites.pinning_frame(populating) is None
    # Advice for each pinning site, with what `memcost pinned` measured on this host when it has run.
    from memcost.analysis.trace.advice import pinning_advice
    unpriced = pinning_advice(rows, None)
    assert [item["call"] for item in sorted(unpriced, key=lambda i: i["call"])] == ["cuMemHostRegister", "cudaHostAlloc"]
    assert all("run `memcost pinned` on this host" in item["text"] and item["saving_ms"] is None for item in unpriced)
    # The runtime's call, made through libcudart.so, is one --verify can stand in for; the driver's,
    # made by the program itself, is not, and says why.
    by_call = {item["call"]: item for item in unpriced}
    assert by_call["cudaHostAlloc"]["verifiable"] and by_call["cudaHostAlloc"]["verify"].startswith("--verify applies it")
    assert not by_call["cuMemHostRegister"]["verifiable"]
    assert "the driver's cuMemHostRegister itself" in by_call["cuMemHostRegister"]["verify"]
    pinned = {"size_bytes": 32 << 30, "memcost_against_host_alloc": {"times_faster": 9.7, "memcost_s": 1.45,
                                                                      "cuda_host_alloc_s": 14.1}}
    priced = next(item for item in pinning_advice(rows, pinned) if item["call"] == "cudaHostAlloc")
    assert "8,192 pages" in priced["text"] and "9.7× faster than cudaHostAlloc" in priced["text"]
    assert priced["times_faster"] == 9.7
    # Priced: the call's 1 ms, less what the fast way would take of it.
    assert priced["saving_ms"] == pytest.approx(1.0 * (1 - 1 / 9.7)) and "would save ≈ 0.9 ms" in priced["text"]
    # The same call in a program that links the runtime in (nvcc's default): no stand-in can enter.
    linked_in = [dict(row, pinning_module="cuda_app") for row in rows]
    static = next(item for item in pinning_advice(linked_in, None) if item["call"] == "cudaHostAlloc")
    assert not static["verifiable"] and "linked into the program" in static["verify"] and "cuda_app" in static["verify"]


# A PyTorch program's stacks, as the tracer sends them: the preload library's Python block merged
# into the native stack, and touching stacks named by CPython's perf map (3.12+ trampolines).
TORCH = "/venv/lib/python3.12/site-packages/torch/lib"


def _native(function, module):
    return {"kind": "native", "function": function, "module": module, "file": "", "line": 0}


def _python(function, file, line):
    return {"kind": "python", "function": function, "file": file, "line": line, "module": file}


def _trampoline(function, file):
    return {"kind": "jit", "function": function, "file": file, "line": 0, "module": "/tmp/perf-7.map"}


def test_a_pytorch_allocation_is_named_at_the_users_line_with_the_librarys_call_as_its_detail():
    frames = [_native("__libc_memalign", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
              _native("c10::alloc_cpu(unsigned long)", f"{TORCH}/libc10.so"),
              _native("at::empty_cpu(…)", f"{TORCH}/libtorch_cpu.so"),
              _native("_PyEval_EvalFrameDefault", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
              _python("empty", "/venv/lib/python3.12/site-packages/torch/_refs.py", 4),
              _python("load_batch", "/srv/train.py", 12), _python("<module>", "/srv/train.py", 20),
              _native("main", "/usr/bin/python3.12")]
    names = trace_sites.SiteNames({1: frames}, [1])
    assert names(1) == "c10::alloc_cpu(unsigned long) ← load_batch (train.py:12)"
    assert names.plain(1) == "load_batch (train.py:12)"  # what a CUDA call's name goes before


def test_the_interpreters_own_allocations_have_no_library_detail():
    frames = [_native("_PyObject_Malloc", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
              _native("list_resize", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
              _python("grow", "/srv/app.py", 3), _native("main", "/usr/bin/python3.12")]
    assert trace_sites.SiteNames({1: frames}, [1])(1) == "grow (app.py:3)"


def test_native_code_of_installed_packages_and_of_the_interpreter_is_library_code():
    interpreter = [_native("py_dl_open", "/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so"),
                   _native("_PyImport_FindSharedFuncptr", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
                   _native("main", "/usr/bin/python3.12")]
    assert not any(trace_frames.DEFAULT_FRAMES.is_users(frame) for frame in interpreter)
    assert not trace_frames.DEFAULT_FRAMES.is_users(_native("c10::alloc_cpu(unsigned long)", f"{TORCH}/libc10.so"))
    assert not trace_frames.DEFAULT_FRAMES.is_users(
        _native("PyArray_NewFromDescr_int", "/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.so"))
    # The program's own extension, beside its script, stays its own; --keep-frames brings a library's back.
    mine = _native("fast_sum", "/srv/app/_fast.cpython-312-x86_64-linux-gnu.so")
    assert trace_frames.DEFAULT_FRAMES.is_users(mine)
    assert trace_frames.FrameFilter(keep="^c10::").is_users(_native("c10::alloc_cpu(unsigned long)", f"{TORCH}/libc10.so"))


def test_a_frame_judged_once_is_judged_again_by_another_filter_and_by_module_alone():
    """Verdicts are kept per frame object and per filter: the same frame, shared by many stacks, is
    not judged twice by one filter, and a verdict is never lent to another filter or mode."""
    frame = _native("c10::alloc_cpu(unsigned long)", f"{TORCH}/libc10.so")
    mine = _native("std::vector<int>::reserve(unsigned long)", "/srv/app/a.out")
    assert not trace_frames.DEFAULT_FRAMES.is_users(frame)
    assert trace_frames.FrameFilter(keep="^c10::").is_users(frame)
    assert not trace_frames.DEFAULT_FRAMES.is_users(frame)
    assert not trace_frames.DEFAULT_FRAMES.is_users(mine)
    assert trace_frames.DEFAULT_FRAMES.is_users(mine, by_module_only=True)
    assert not trace_frames.DEFAULT_FRAMES.is_users(mine)
    # An equal frame made later (another trace's) gets the same verdict.
    assert trace_frames.FrameFilter(keep="^c10::").is_users(dict(frame))


def test_a_fault_in_a_pytorch_op_is_named_at_the_python_function_from_cpythons_perf_map():
    frames = [_native("memset", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
              _native("at::native::fill_out(…)", f"{TORCH}/libtorch_cpu.so"),
              _native("_PyEval_EvalFrameDefault", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
              _trampoline("fill_", "/venv/lib/python3.12/site-packages/torch/_tensor.py"),
              _trampoline("fill_all", "/srv/train.py"),
              _native("_PyEval_EvalFrameDefault", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
              _trampoline("<module>", "/srv/train.py"), _native("main", "/usr/bin/python3.12")]
    assert trace_sites.SiteNames({1: frames}, [1])(1) == "at::native::fill_out(…) ← fill_all (train.py)"


def test_the_cuda_runtime_linked_in_by_nvcc_is_skipped_like_the_shared_one():
    program = "/srv/cuda_pinning"
    frames = [_native("ioctl", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
              _native("libcudart_static_a6b4ebf6406aa715b200756fcc397965457d733a", program),
              _native("cudart::driverHelper::mallocHost(…)", program),
              _native("cudaHostAlloc", program),
              _native("register_buffer(unsigned long)", program), _native("main", program)]
    assert trace_frames.user_frame(frames)["function"] == "register_buffer(unsigned long)"
    # At start-up the kernels are registered by code nvcc generates into the program's own object.
    registering = [_native("malloc", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                   _native("libcudart_static_8b73e19b9b6fb2b44091792b23d85fe1faddb831", program),
                   _native("__cudaRegisterFatBinary", program), _native("__sti____cudaRegisterAll()", program),
                   _native("call_init", "/usr/lib/x86_64-linux-gnu/libc.so.6"), _native("main", program)]
    assert trace_frames.user_frame(registering)["function"] == "main"


def test_rusts_standard_trait_implementations_inlined_into_the_caller_are_skipped():
    program = "/srv/growth_and_frames"
    frames = [_native("calloc", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
              {**_native("alloc::alloc::alloc_zeroed", program), "kind": "inlined"},
              {**_native("<alloc::alloc::Global as core::alloc::Allocator>::allocate_zeroed", program), "kind": "inlined"},
              {**_native("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem", program), "kind": "inlined"},
              {**_native("alloc::vec::from_elem", program), "kind": "inlined"},
              _native("growth_and_frames::render_frames", program), _native("growth_and_frames::main", program)]
    assert trace_frames.user_frame(frames)["function"] == "growth_and_frames::render_frames"


def test_a_tracer_that_costs_more_than_a_tenth_of_the_commands_cpu_says_so():
    def warned(tracer_ms):
        samples = churn(5)
        samples[-1]["metrics"].update(tracer_user_ns=int(tracer_ms * 1e6), tracer_system_ns=0)
        _, warnings = trace_summary.analyze(samples, cost=COST)
        return [w["message"] for w in warnings if w["code"] == "tracer_cost"]
    # The command used 800 ms of CPU (run()'s 400 user and 400 system).
    assert warned(79.0) == []
    message, = warned(120.0)
    assert "120 ms of CPU, 15% of the command's 800 ms" in message


def test_stack_records_name_their_frames_by_id_each_frame_sent_once_and_old_results_read_as_before():
    main = {"kind": "native", "address": 16, "function": "main", "file": "app.c", "line": 9, "module": "/app",
            "module_offset": 16}
    helper = {**main, "address": 32, "function": "helper", "line": 4, "module_offset": 32}
    samples = [{"case": {"record": "stack"}, "metrics": {"stack": 1, "frame_ids": [1, 0],
                                                         "new_frames": [{"id": 0, **main}, {"id": 1, **helper}]}},
               {"case": {"record": "stack"}, "metrics": {"stack": 2, "frame_ids": [0], "new_frames": []}},
               {"case": {"record": "stack"}, "metrics": {"stack": 3, "frames": [helper]}},  # results made before ids
               run()]
    stacks = trace_records.stacks_of(samples)
    assert stacks == {1: [helper, main], 2: [main], 3: [helper]}
    assert trace_records.read(samples).stacks == stacks


def test_advice_no_rerun_could_apply_is_said_with_its_reason_even_when_the_command_was_refused():
    from memcost.report.trace import verification_lines
    growth = {"site": "grow (app.c:3)", "kind": "growth", "estimated_saving_ms": 10.0, "verified": False,
              "reason": "only the source can reserve the final size"}
    refused = {"refused": "its own run time varies too much to compare", "variants": [], "unverifiable": [growth]}
    lines = verification_lines({"verification": refused})
    assert lines[0].startswith("Not verified: the command was refused, its own run time varies")
    assert "Unverified: growth at grow (app.c:3): only the source can reserve the final size." in lines


class _Importing:
    """A stand-in for tracing's import thread: alive until `done`."""
    def __init__(self):
        self.alive = True

    def is_alive(self):
        return self.alive


@pytest.mark.parametrize("keep", [None, "helper"])
def test_stacks_read_as_they_come_name_the_sites_as_the_whole_trace_read_at_the_end_does(keep):
    # A helper called from two paths (sites told apart by their callers), a Python line that called
    # a library's native code (its detail), a stack that comes with no frames, and --keep-frames.
    torch_stack = [_native("c10::alloc_cpu(unsigned long)", f"{TORCH}/libc10.so"),
                   _python("load", "/venv/lib/python3.12/site-packages/torch/serialization.py", 40),
                   _python("load_batch", "/home/u/train.py", 12), _python("<module>", "/home/u/train.py", 30)]
    samples = [stack(1, "helper", "left", "main"), stack(2, "helper", "right", "main"), stack(3, "writer", "main"),
               {"case": {"record": "stack"}, "metrics": {"stack": 4, "frames": torch_stack}},
               {"case": {"record": "stack"}, "metrics": {"stack": 5, "frames": []}},
               faults((1, "mmap", 3, 7, 0, False, 100), (2, "mmap", 3, 7, 0, False, 50), (4, "mmap", 4, 7, 0, False, 70),
                      (5, "mmap", 5, 7, 0, False, 9)),
               origin(1, 1, 0, 2 * MIB, 100), origin(2, 1, 0, 2 * MIB, 50), origin(4, 1, 0, 2 * MIB, 70),
               origin(5, 1, 0, 2 * MIB, 9), run()]
    values = {"keep_frames": keep}
    importing = _Importing()
    meanwhile = tracing.StacksMeanwhile(values, importing)
    for index, sample in enumerate(samples):
        importing.alive = index < 2  # the first stacks come while the modules are imported: they wait
        assert meanwhile.take(sample) is False  # every sample is kept for the results
        assert len(meanwhile.waiting) == (index + 1 if index < 2 else 0)
    assert set(meanwhile.parts) == {1, 2, 3, 4, 5} and meanwhile.parts[5] is None
    as_they_came, _ = trace_summary.analyze_trace(meanwhile.read(samples), cost=COST, params=values)
    at_the_end, _ = trace_summary.analyze(samples, cost=COST, params=values)
    assert as_they_came == at_the_end
    sites = {row["site"] for row in as_they_came["rows"]}
    assert "c10::alloc_cpu(unsigned long) ← load_batch (train.py:12)" in sites
    assert {"helper (app.c:10) ← left", "helper (app.c:10) ← right"} <= sites


def test_windows_that_start_within_one_second_are_two_files(tmp_path):
    """A window that ended late (the probe busy past the grid's second) and the next, on time, can
    start in the same second: each is still its own file, named to the millisecond."""
    from memcost.export import pprof
    windows = pprof.Windows(tmp_path, COST, trace_frames.DEFAULT_FRAMES, "host", "123")
    second = 1_795_000_000 * 10**9
    windows.close([], second + 100 * 10**6, second + 950 * 10**6)
    windows.close([], second + 950 * 10**6, second + 10**9 + 950 * 10**6)
    names = sorted(path.name for path in tmp_path.glob("*.pb.gz"))
    assert len(names) == 2 and windows.written == 2, names
    assert names[0].endswith("T110640.100Z.pb.gz") and names[1].endswith("T110640.950Z.pb.gz"), names
