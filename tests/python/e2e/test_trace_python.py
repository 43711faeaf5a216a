"""memcost trace on a Python program: the allocation sites are the script's own lines, as root
(tracepoints; the preload library only puts Python stacks on the C stack) and as an ordinary user
(the preload library reports the calls). Debian's python3 with python3-numpy, which any user can run."""

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from memcost.analysis.trace import frames as trace_frames
from memcost.analysis.cost_model import CostModel
from memcost.analysis.trace.records import stacks_of
from memcost.probe import probe_path
from memcost.results import load_document

from conftest import needs_tracing, run_memcost, summarize_trace

PYTHON = "/usr/bin/python3"
SCRIPT = '''import json, resource
import numpy as np

MIB = 1 << 20


def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def filled(count):
    kept = []
    for _ in range(count):
        array = np.empty(32 * MIB // 8)  # site: filled
        array.fill(1.5)
        kept.append(array)
    return kept


def ones(count):
    return [np.ones(32 * MIB // 8) for _ in range(count)]  # site: ones


before = faults()
first = filled(3)
middle = faults()
second = ones(2)
after = faults()
print(json.dumps({"filled": middle - before, "ones": after - middle}))
'''
# numpy asks for huge pages on big arrays where THP is `madvise`: base pages keep the counts known.
ENVIRONMENT = {"NUMPY_MADVISE_HUGEPAGE": "0"}


def _line(marker: str) -> int:
    return next(number for number, text in enumerate(SCRIPT.splitlines(), 1) if f"# site: {marker}" in text)


def _has_numpy() -> bool:
    return Path(PYTHON).exists() and subprocess.run([PYTHON, "-c", "import numpy"], capture_output=True).returncode == 0


needs_numpy = pytest.mark.skipif(not _has_numpy(), reason="Debian's python3-numpy is not installed (make test installs it)")


def _kernel_counts(output: str) -> dict:
    return json.loads(next(line for line in output.splitlines() if line.startswith('{"filled"')))


def _check_sites(rows: list[dict], counts: dict, script: Path, run: dict | None = None) -> None:
    # What a failure needs said: how the faults were seen and what was lost or held.
    how = {key: (run or {}).get(key) for key in ("fault_source", "lost_records", "pauses", "paused_ns", "sampled_faults",
                                                  "rusage_minor_faults", "unwind_failures")}
    for marker, arrays in (("filled", 3), ("ones", 2)):
        # The function is "<listcomp>" for the second before Python 3.12, "ones" after (PEP 709).
        where = f"({script.name}:{_line(marker)})"
        row = next((r for r in rows if r["site"].endswith(where)), None)
        assert row is not None, (where, [r["site"] for r in rows])
        assert row["mappings"] == arrays
        # The script's own count from the kernel (getrusage) around the calls: the arrays' faults,
        # and a few of the interpreter's beside them.
        assert row["faults"] == pytest.approx(counts[marker], rel=0.02), (marker, how, [(r["site"], r["faults"]) for r in rows])
        assert row["faults"] >= arrays * 8192 * 0.98


def _trace_as_root(golden_results, tmp_path, *flags):
    """The script traced by memcost as root: its output and the results document."""
    script = tmp_path / "arrays.py"
    script.write_text(SCRIPT)
    root = tmp_path / "results"
    shutil.copytree(golden_results, root)
    result = run_memcost("--results-dir", str(root), "trace", *flags, "--", PYTHON, str(script), env=ENVIRONMENT)
    assert result.returncode == 0, result.stderr
    return script, result, load_document(root / "latest" / "trace.json")


@needs_tracing
@needs_numpy
def test_a_numpy_scripts_lines_are_its_allocation_sites_as_root(golden_results, tmp_path):
    script, result, document = _trace_as_root(golden_results, tmp_path)
    assert "tracepoints" in document["summary"]["totals"]["call_source"]
    _check_sites(document["summary"]["rows"], _kernel_counts(result.stdout), script)
    # The stack stays in the results: numpy's C code inside the script's frames. The interpreter's
    # start-up outside them (main, Py_RunMain) is not unwound (src/trace/unwind/unwinder.hpp).
    stacks = stacks_of(document["samples"])
    # The site is the script's line, after numpy's C function that it called (the line's detail).
    row = next(r for r in document["summary"]["rows"] if re.search(r"(^| ← )filled \(", r["site"]))
    kinds = [frame["kind"] for frame in stacks[row["stack"]]]
    assert kinds.index("python") > 0 and kinds[-1] == "python"
    assert [f["function"] for f in stacks[row["stack"]] if f["kind"] == "python"] == ["filled", "<module>"]


@needs_tracing
@needs_numpy
def test_without_python_frames_the_site_is_numpys(golden_results, tmp_path):
    _, _, document = _trace_as_root(golden_results, tmp_path, "--no-python-frames")
    assert not [r for r in document["summary"]["rows"] if "arrays.py" in r["site"]]


def _probe_traces(name: str, text: str, *, as_user: bool, environment: dict | None = None):
    """`text` as the script `name` traced by the probe itself, from a folder an ordinary user can
    read (/tmp/x, not pytest's), as root or as uid 65534: the run, its samples and the script's path."""
    folder = Path(tempfile.mkdtemp(prefix="memcost-python-", dir="/tmp"))
    try:
        for tool in (probe_path(), probe_path().parent / "libmemcost-preload.so"):
            shutil.copy(tool, folder / Path(tool).name)
            (folder / Path(tool).name).chmod(0o755)
        script = folder / name
        script.write_text(text)
        script.chmod(0o644)
        folder.chmod(0o755)
        user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_user else []
        result = subprocess.run([*user, "env", *(f"{k}={v}" for k, v in (environment or {}).items()),
                                 str(folder / "memcost-probe"), "trace", "--", PYTHON, str(script)],
                                capture_output=True, text=True, timeout=120, cwd="/tmp")
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"type"')]
    return result, [{"case": r["case"], "metrics": r["metrics"]} for r in records if r["type"] == "sample"], script


@needs_numpy
def test_a_numpy_scripts_lines_are_its_allocation_sites_as_an_ordinary_user():
    result, samples, script = _probe_traces("arrays.py", SCRIPT, as_user=True, environment=ENVIRONMENT)
    run = next(s["metrics"] for s in samples if s["case"]["record"] == "run")
    assert "LD_PRELOAD" in run["call_source"]
    summary = summarize_trace(samples, CostModel(400.0, 40.0, "test"))
    _check_sites(summary["rows"], _kernel_counts(result.stdout), script, run)


# A library that allocates after releasing the GIL (PyTorch's operations do; ctypes releases it
# around every foreign call): the thread may not read its Python frames then, and sends them
# when it takes the GIL back (preload/abi.h, MEMCOST_PYTHON_PENDING_MAGIC).
RELEASED_SCRIPT = """import ctypes
import mmap
import os

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
SIZE = 16 << 20


def make_buffer():
    pointer = libc.malloc(SIZE)  # site: make_buffer
    libc.memset(pointer, 1, SIZE)  # touch: make_buffer
    return pointer


def make_another():
    return libc.malloc(SIZE)  # site: make_another


def make_mapping():
    return mmap.mmap(-1, SIZE)  # site: make_mapping


def map_device():
    device = os.open("/dev/zero", os.O_RDWR)
    return libc.mmap(None, SIZE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, device, 0)  # site: map_device


make_buffer()
libc.memset(make_another(), 2, SIZE)  # touch: <module>
mapping = make_mapping()
device_mapping = map_device()
"""


def _released_lines(samples: list[dict], script: Path, touching: bool = False) -> None:
    summary = summarize_trace(samples, CostModel(400.0, 40.0, "test"))
    # The mmap module's anonymous mapping, made without the GIL, carries the block as a big malloc
    # does; so does a shared mapping of a device (a driver's memory: cudaHostAlloc's, here /dev/zero's).
    for marker in ("make_buffer", "make_another", "make_mapping", "map_device"):
        line = next(n for n, text in enumerate(RELEASED_SCRIPT.splitlines(), 1) if f"# site: {marker}" in text)
        where = f"{marker} ({script.name}:{line})"
        assert any(r["site"].endswith(where) and r["bytes"] >= 16 << 20 for r in summary["rows"]), \
            (where, [r["site"] for r in summary["rows"]])
    if not touching:
        return
    # As root the BPF counter's samples of a thread that released the GIL carry the release, and
    # the thread sends its Python stack as it takes the GIL back: memset's faults are named at the
    # line that called it (bpf/fault_counts.h, memcost_python_release_slot). 4,096 faults each.
    for function in ("make_buffer", "<module>"):
        line = next(n for n, text in enumerate(RELEASED_SCRIPT.splitlines(), 1) if f"# touch: {function}" in text)
        where = f"{function} ({script.name}:{line})"
        faults = sum(r["faults"] for r in summary["touching"] if r["site"].endswith(where))
        assert faults >= 4096 * 0.9, (where, [(r["site"], r["faults"]) for r in summary["touching"]])


@needs_tracing
@pytest.mark.skipif(not Path(PYTHON).exists(), reason="Debian's python3 is not installed")
def test_an_allocation_made_and_touched_without_the_gil_is_named_at_its_lines_as_root():
    _, samples, script = _probe_traces("released.py", RELEASED_SCRIPT, as_user=False)
    _released_lines(samples, script, touching=True)


@pytest.mark.skipif(not Path(PYTHON).exists() or not shutil.which("setpriv"), reason="needs Debian's python3 and setpriv")
def test_an_allocation_made_without_the_gil_is_named_at_its_line_as_an_ordinary_user():
    _, samples, script = _probe_traces("released.py", RELEASED_SCRIPT, as_user=True)
    run = next(s["metrics"] for s in samples if s["case"]["record"] == "run")
    assert "LD_PRELOAD" in run["call_source"] and run["malformed_records"] == 0
    _released_lines(samples, script)


# A parallel region opened without the GIL (PyTorch's operations fill a tensor from an OpenMP
# team): every thread of the team works for the thread that released the GIL, and their faults
# are named at its line. The library is loaded as ctypes loads it (RTLD_LOCAL, its libgomp too,
# as PyTorch loads its own); the big allocation after it has the preload library hook it.
PARALLEL_LIBRARY = r"""
#include <stddef.h>
void fill(char *bytes, size_t count) {
#pragma omp parallel for schedule(static)
  for (size_t at = 0; at < count; at += 4096) bytes[at] = 1;
}
"""
PARALLEL_SCRIPT = """import ctypes

library = ctypes.CDLL({library!r})
library.fill.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
SIZE = 64 << 20
address = libc.malloc(SIZE)


def fill_in_parallel():
    library.fill(address, SIZE)  # touch: fill_in_parallel


fill_in_parallel()
"""


@needs_tracing
@pytest.mark.skipif(not Path(PYTHON).exists() or not (shutil.which("cc") or shutil.which("gcc")),
                    reason="needs Debian's python3 and a C compiler with OpenMP")
def test_faults_of_a_parallel_region_opened_without_the_gil_are_named_at_the_line_that_opened_it(tmp_path):
    source = tmp_path / "parallel.c"
    source.write_text(PARALLEL_LIBRARY)
    library = Path(tempfile.mkdtemp(prefix="memcost-parallel-", dir="/tmp")) / "libparallel.so"
    try:
        subprocess.run([shutil.which("cc") or shutil.which("gcc"), "-O2", "-fopenmp", "-shared", "-fPIC", "-o",
                        str(library), str(source)], check=True)
        _, samples, script = _probe_traces("parallel.py", PARALLEL_SCRIPT.format(library=str(library)), as_user=False,
                                           environment={"OMP_NUM_THREADS": "2"})
    finally:
        shutil.rmtree(library.parent)
    touching = summarize_trace(samples, CostModel(400.0, 40.0, "test"))["touching"]
    line = next(n for n, text in enumerate(PARALLEL_SCRIPT.splitlines(), 1) if "# touch: fill_in_parallel" in text)
    where = f"fill_in_parallel ({script.name}:{line})"
    named = sum(r["faults"] for r in touching if r["site"].endswith(where))
    # 16,384 pages, half of them faulted by the team's second thread.
    assert named >= 16384 * 0.95, (where, [(r["site"], r["faults"]) for r in touching])


def test_python_frames_name_the_first_line_outside_the_standard_library_and_packages():
    def python(function, file, line):
        return {"kind": "python", "function": function, "file": file, "line": line, "module": file, "address": 0}
    native = {"kind": "native", "function": "PyArray_NewFromDescr_int", "file": "", "line": 0,
              "module": "/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.so", "address": 1}
    frames = [native, python("ones", "/usr/lib/python3/dist-packages/numpy/core/numeric.py", 191),
              python("load", "/work/app/model.py", 12), python("<module>", "/work/app/main.py", 3)]
    assert trace_frames.user_frame(frames)["function"] == "load"
    assert trace_frames.user_frame(frames, trace_frames.FrameFilter(skip=r"model\.py"))["function"] == "<module>"
    assert trace_frames.user_frame(frames, trace_frames.FrameFilter(keep=r"^PyArray_"))["function"] == "PyArray_NewFromDescr_int"
    only_library = frames[:2]
    assert trace_frames.user_frame(only_library)["function"] == "ones"  # none of the program's: the innermost Python frame
    assert re.search(trace_frames.PYTHON_SYSTEM_FILES, "<frozen importlib._bootstrap>")
    assert re.search(trace_frames.PYTHON_SYSTEM_FILES, "<__array_function__ internals>")
    assert not re.search(trace_frames.PYTHON_SYSTEM_FILES, "<stdin>")
