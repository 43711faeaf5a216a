"""Faults taken inside system calls (docs/trace.md, "Faults inside system calls"): the kernel faults
pages in on purpose in MAP_POPULATE, MADV_POPULATE_WRITE and mlock (and a driver pinning memory in
an ioctl), with no exception and no perf event. Each way is counted and named at its own function,
as root (in the kernel) and as an ordinary user (the preload library), and the totals agree with
the kernel's own count. And the preload pipe is hostile input: garbage written into it by the
command is dropped and counted, and the records around it are read. A CUDA program's pinning
(a stand-in, without a GPU) is named by the CUDA call that took the faults, with its advice."""
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import needs_tracing, summarize_trace
from memcost.analysis.trace.advice import pinning_advice
from memcost.analysis.cost_model import CostModel
from memcost.probe import probe_path

MMAP_POPULATE, MADVISE_POPULATE, MLOCKED, TOUCHED = 16384, 16384, 1024, 65536  # populate_ways.c, base pages
HOST_ALLOCATED, HOST_REGISTERED = 8192, 4096  # cuda_pinning_standin.c, base pages
IO_URING_REGISTERED = 16384  # io_uring_buffers.c: two buffers of 32 MiB, base pages
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="counting in the kernel needs root")
drops_to_a_user = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                     reason="needs root to drop to an ordinary user")


def trace(program: Path, *, as_user: bool) -> list[dict]:
    """The probe's samples for `program`, traced as root or as uid 65534 (from a folder that user can read)."""
    folder = Path(tempfile.mkdtemp(prefix="memcost-in-calls-", dir="/tmp"))
    try:
        for name in (probe_path(), probe_path().parent / "libmemcost-preload.so", program):
            shutil.copy(name, folder / Path(name).name)
            (folder / Path(name).name).chmod(0o755)
        folder.chmod(0o755)
        user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_user else []
        result = subprocess.run([*user, str(folder / "memcost-probe"), "trace", "--command-stdout-fd", "2", "--",
                                 str(folder / program.name)], capture_output=True, text=True, timeout=120, cwd="/tmp")
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return [{"case": r["case"], "metrics": r["metrics"]} for r in records if r["type"] == "sample"]


def check_every_way(samples: list[dict]) -> dict:
    run = next(s["metrics"] for s in samples if s["case"]["record"] == "run")
    summary = summarize_trace(samples, CostModel(400.0, 40.0, "test"))
    touching = {row["site"].split(" (")[0]: row for row in summary["touching"]}
    for site, faults in (("mmap ← by_map_populate", MMAP_POPULATE), ("madvise ← by_madv_populate", MADVISE_POPULATE),
                         ("mlock ← by_mlock", MLOCKED)):
        row = touching.get(site)
        assert row, (site, sorted(touching))
        assert abs(row["faults"] - faults) <= 0.005 * faults, (site, row["faults"])
        assert "samples" not in row and row["call_ms"] > 0  # counted with the call's own stack, its time measured
        maker = site.split(" ← ")[1]  # where the memory was made: that function, or base_pages called from it
        assert row["allocation_site"].startswith(maker) or (row["allocation_site"].startswith("base_pages")
                                                            and row["allocation_site"].endswith(maker)), row
    assert abs(touching["by_touch"]["faults"] - TOUCHED) <= 0.1 * TOUCHED  # sampled stacks: an estimate
    # MAP_POPULATE's time in the call is its faults' time: not counted again as time to map.
    populated = next(row for row in summary["rows"] if row["site"].startswith("by_map_populate"))
    assert populated["map_ms"] < 0.2 * touching["mmap ← by_map_populate"]["call_ms"], populated
    totals = summary["totals"]
    assert abs(totals["faults"] - totals["kernel_faults"]) <= 0.005 * totals["kernel_faults"], totals
    assert run["faults_in_calls"] >= MMAP_POPULATE + MADVISE_POPULATE + MLOCKED
    return run


@as_root
@needs_tracing
def test_each_way_of_faulting_inside_a_call_is_counted_in_the_kernel_and_named(c_program):
    run = check_every_way(trace(c_program("populate_ways"), as_user=False))
    assert run["counted_in_kernel"] and run["kernel_faults_in_calls"] == run["faults_in_calls"]
    assert "inside system calls" in run["fault_source"]


@drops_to_a_user
def test_each_way_of_faulting_inside_a_call_is_counted_by_the_preload_library_as_a_user(c_program):
    run = check_every_way(trace(c_program("populate_ways"), as_user=True))
    assert "LD_PRELOAD" in run["call_source"] and not run["counted_in_kernel"]
    assert run["malformed_records"] == 0


def check_pinning_named(c_program, as_user: bool) -> None:
    """The faults a CUDA call's driver takes inside a system call are one site, named by the call and
    the program's function that made it (the runtime's and driver's own frames skipped), every
    fault counted; each such site gets the pinning advice, and --verify's reason for not applying it."""
    summary = summarize_trace(trace(c_program("cuda_pinning_standin"), as_user=as_user),
                                      CostModel(400.0, 40.0, "test"))
    touching = {re.sub(r" \([^)]*\)", "", row["site"]): row for row in summary["touching"]}
    for site, faults in (("cudaHostAlloc ← load_batch", HOST_ALLOCATED),
                         ("cudaHostRegister ← register_staging", HOST_REGISTERED)):
        row = touching.get(site)
        assert row, (site, sorted(touching))
        assert abs(row["faults"] - faults) <= 0.005 * faults and row["call_ms"] > 0, (site, row)
    # The memory cudaHostAlloc's driver mapped is named by the call and the program's function, with
    # its bytes; memory the program mapped itself and then registered, by the program's function.
    made = {re.sub(r" \([^)]*\)", "", row["site"]): row for row in summary["rows"]}
    assert made["cudaHostAlloc ← load_batch"]["bytes"] == HOST_ALLOCATED * 4096, sorted(made)
    assert "register_staging" in made, sorted(made)
    advice = {item["call"]: item for item in pinning_advice(summary["touching"], None)}
    assert sorted(advice) == ["cudaHostAlloc", "cudaHostRegister"]
    assert f"{HOST_ALLOCATED:,} pages" in advice["cudaHostAlloc"]["text"]
    assert "run `memcost pinned` on this host" in advice["cudaHostAlloc"]["text"]  # no pinned result to price it
    assert all(item["verify"].startswith("not applied by --verify") for item in advice.values())


@as_root
@needs_tracing
def test_a_cuda_programs_pinning_counted_in_the_kernel_is_named_by_its_call(c_program):
    check_pinning_named(c_program, as_user=False)


@drops_to_a_user
def test_a_cuda_programs_pinning_counted_by_the_preload_library_is_named_by_its_call(c_program):
    check_pinning_named(c_program, as_user=True)


@as_root
@needs_tracing
def test_pinning_that_names_its_memory_only_in_a_structure_is_charged_to_that_memory(c_program):
    """io_uring's buffer registration pins two untouched buffers: its arguments name only a pointer
    to iovecs, read in the kernel as the call enters. Every fault is charged to the buffers' mapping,
    made at make_buffer, and the touching site is the call at register_buffers; none is left outside
    the traced mappings. (NVIDIA's pinning ioctls take the same path with their own structures:
    tests/cpp/faulting_syscalls_test.cpp.)"""
    program = c_program("io_uring_buffers")
    first = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    if "unavailable" in first.stdout:
        pytest.skip(first.stdout.strip())
    summary = summarize_trace(trace(program, as_user=False), CostModel(400.0, 40.0, "test"))
    touching = {re.sub(r" \([^)]*\)", "", row["site"]): row for row in summary["touching"]}
    row = touching.get("io_uring_register ← register_buffers")
    assert row, sorted(touching)
    assert abs(row["faults"] - IO_URING_REGISTERED) <= 0.005 * IO_URING_REGISTERED and row["call_ms"] > 0, row
    assert row["allocation_site"].startswith("make_buffer"), row
    buffers = [r for r in summary["rows"] if r["site"].startswith("make_buffer")]
    assert sum(r["faults_base"] for r in buffers) >= 0.995 * IO_URING_REGISTERED, buffers
    outside = [r for r in summary["rows"] if r["site"].startswith("(outside")]
    assert sum(r["faults_base"] + r["faults_thp"] for r in outside) < 0.01 * IO_URING_REGISTERED, outside


@drops_to_a_user
def test_garbage_written_into_the_preload_descriptor_is_dropped_counted_and_the_rest_read(c_program):
    samples = trace(c_program("preload_garbage"), as_user=True)
    run = next(s["metrics"] for s in samples if s["case"]["record"] == "run")
    assert run["malformed_records"] >= 4 and run["malformed_bytes"] > 0
    summary = summarize_trace(samples, CostModel(400.0, 40.0, "test"))
    blocks = [row for row in summary["rows"] if row["site"].startswith("touch_a_block")]  # called from two lines
    # Every mmap and munmap around the garbage was read, and their faults charged to them.
    assert sum(row["mappings"] for row in blocks) == sum(row["freed"] for row in blocks) == 5
    assert sum(row["faults_base"] + row["faults_thp"] * 512 for row in blocks) >= 0.99 * 5 * 8192
    assert run["malformed_bytes"] == 37 + 737 + 1437 + 2137 + 4 * 96  # exactly what the program wrote
