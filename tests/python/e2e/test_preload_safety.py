"""The preload library is safe in every process it enters (docs/trace.md, "The preload library"):
nothing on its paths reaches the dynamic loader's __tls_get_addr, which may call malloc (read back
from the built library), and a CPython process that loads, unloads and loads again many libraries
with dynamic thread-local storage runs to its end under it, with this machine's C library and with
glibc 2.39 (Ubuntu 24.04, where `import torch` crashed) and 2.41 (Debian 13), fetched by
tools/foreign-libcs. A control built the old way crashes under 2.39: the churn catches the bug."""
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT
from memcost.probe import probe_path

FOREIGN_LIBCS = ROOT / "build" / "libc"
REQUIRE_FOREIGN_LIBCS = "MEMCOST_REQUIRE_FOREIGN_LIBCS"  # make test sets it: a missing C library fails
TLS_LIBRARIES = 48  # past the dynamic loader's spare room in a thread's TLS table (14 slots)
PYTHON = os.path.realpath(sys.executable)


def preload_library() -> Path:
    return probe_path().parent / "libmemcost-preload.so"


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args, str(preload_library())], check=True, capture_output=True,
                          text=True).stdout


def test_no_thread_local_access_of_the_preload_library_reaches_tls_get_addr():
    # Its PT_TLS segment: the library has thread-local variables (stripped or not), whose model is read below.
    assert "  TLS " in readelf("--segments"), "the library has thread-local variables; this test reads how they are reached"
    relocations = readelf("--relocs")
    assert "__tls_get_addr" not in relocations and "__tls_get_addr" not in readelf("--dyn-syms")
    assert "DTPMOD64" not in relocations and "DTPOFF64" not in relocations  # the dynamic models' slots
    assert "TPOFF64" in relocations  # initial-exec: an offset from the thread pointer, set at load
    assert "STATIC_TLS" in readelf("--dynamic")


@pytest.fixture(scope="session")
def tls_libraries(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tls")
    for index in range(TLS_LIBRARIES):
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(folder / f"libtls{index}.so"),
                        str(DATA / "tls" / "tls_module.c")], check=True)
    return folder


def loader_for(libc: str) -> list[str]:
    """The command prefix that runs a program under `libc` ("host": this machine's own)."""
    if libc == "host":
        return []
    root = FOREIGN_LIBCS / libc
    if platform.machine() != "x86_64" or not (root / ".fetched").exists():
        reason = f"{libc} is not in {FOREIGN_LIBCS} (tools/foreign-libcs fetches it; make test runs it)"
        if os.environ.get(REQUIRE_FOREIGN_LIBCS):
            pytest.fail(f"{reason}, and {REQUIRE_FOREIGN_LIBCS} is set")
        pytest.skip(reason)
    # The interpreter's other libraries (libz, libexpat, ...) are this machine's: a newer libc runs them.
    return [str(root / "usr/lib64/ld-linux-x86-64.so.2"), "--library-path",
            f"{root}/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"]


def churn(libc: str, library: Path, folder: Path, reporting: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "LD_PRELOAD": str(library)}
    env.pop("MEMCOST_PRELOAD_FD", None)
    with open(folder / f"records-{libc}-{library.stem}", "wb") as records:  # a file: never full, unlike a pipe
        if reporting:  # a record of every big call: the unwinder and the writes run too
            env["MEMCOST_PRELOAD_FD"] = str(records.fileno())
            env["MEMCOST_PRELOAD_MIN_BYTES"] = str(1 << 20)
        return subprocess.run([*loader_for(libc), PYTHON, str(DATA / "tls" / "tls_churn.py"), str(folder),
                               str(TLS_LIBRARIES)], env=env, capture_output=True, text=True, timeout=120,
                              pass_fds=(records.fileno(),))


@pytest.mark.parametrize("reporting", [False, True], ids=["python-stacks", "reporting"])
@pytest.mark.parametrize("libc", ["host", "glibc-2.39", "glibc-2.41"])
def test_python_loading_and_unloading_tls_libraries_runs_to_its_end(libc, reporting, tls_libraries):
    finished = churn(libc, preload_library(), tls_libraries, reporting)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert finished.stdout.split() == ["ok", str(TLS_LIBRARIES), str(TLS_LIBRARIES)]


def test_the_churn_catches_a_library_whose_thread_locals_use_the_dynamic_model(tls_libraries, tmp_path):
    """The control: the same library built with the default model for shared libraries dies under 2.39."""
    control = tmp_path / "libcontrol-preload.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-pthread", "-DMEMCOST_THREAD_LOCAL=__thread",
                    f"-I{ROOT / 'src'}", "-o", str(control),
                    *map(str, sorted((ROOT / "src/trace/preload").glob("*.c"))), "-ldl"],
                   check=True)
    finished = churn("glibc-2.39", control, tls_libraries, reporting=False)
    assert finished.returncode < 0 or finished.returncode >= 128, "the churn no longer provokes the recursion"
