import json
import os
import signal
import socket
import subprocess
import time
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository
DATA = ROOT / "tests" / "python" / "data"  # the Python tests' programs and recorded lines
RECORDED = ROOT / "tests" / "data"  # recorded results documents
GOLDEN_COSTS = RECORDED / "run_a" / "costs.json"
# `make test` as root sets this: a test that would skip because tracing is unavailable fails instead.
REQUIRE_TRACING = "MEMCOST_REQUIRE_TRACING"


@pytest.fixture
def kvm_context() -> dict:
    """A real context line, recorded on a 2-core KVM guest (THP madvise, empty hugetlb pools)."""
    record = json.loads((DATA / "context_kvm_2cpu.json").read_text())
    record.pop("type")
    return record


# The two groups of the Python suite (tests/README.md), by folder: unit/ reads hand-made or recorded
# data and needs only the package; e2e/ runs the real probe or the `memcost` command.
GROUPS = ("unit", "e2e")


def pytest_collection_modifyitems(items):
    for item in items:
        group = Path(str(item.fspath)).parent.name
        if group not in GROUPS:
            raise pytest.UsageError(f"{item.fspath} is in neither tests/python/unit nor tests/python/e2e")
        item.add_marker(group)


def run_memcost(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The memcost command as a user runs it: a separate process, no terminal."""
    return subprocess.run([sys.executable, "-m", "memcost", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=600, stdin=subprocess.DEVNULL)


def run_probe(*args: str) -> subprocess.CompletedProcess:
    from memcost.probe import probe_path
    return subprocess.run([str(probe_path()), *args], capture_output=True, text=True, timeout=600)


def probe_cases(stdout: str, part: str) -> list[dict]:
    """The cases of a probe run's samples of one part, in the order the probe emitted them."""
    records = (json.loads(line) for line in stdout.splitlines())
    return [record["case"] for record in records
            if record.get("type") == "sample" and (record.get("case") or {}).get("part") == part]


def start_memcost(*args: str, folder: Path, **popen) -> subprocess.Popen:
    """memcost in the background, its output going to files in `folder`: a pipe that nobody reads
    while the test waits fills up (64 KiB) and blocks the command. finish() reads them."""
    stdout = open(folder / f"memcost-{time.monotonic_ns()}.stdout", "w+")
    stderr = open(folder / f"memcost-{time.monotonic_ns()}.stderr", "w+")
    popen.setdefault("stdin", subprocess.DEVNULL)  # whatever the runner's is (a pipe in CI), not the command's
    process = subprocess.Popen([sys.executable, "-m", "memcost", *args], stdout=stdout, stderr=stderr, text=True,
                               **popen)
    process.output_files = (stdout, stderr)
    return process


def finish(process: subprocess.Popen, timeout: float = 90) -> tuple[str, str]:
    """Wait for a start_memcost() process (killing it after `timeout`); its stdout and stderr."""
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    texts = []
    for output in process.output_files:
        output.seek(0)
        texts.append(output.read())
        output.close()
    return texts[0], texts[1]


def interrupt(process: subprocess.Popen, after_s: float) -> str:
    """Let a start_memcost() process work for `after_s` seconds, press Ctrl-C, wait for it; its stderr."""
    time.sleep(after_s)
    process.send_signal(signal.SIGINT)
    return finish(process, timeout=60)[1]


def hugetlb_2m_pool_pages() -> int:
    """The 2 MB hugetlb pool's size now (pages)."""
    return int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text())


def summarize_trace(samples: list, cost, which=None) -> dict:
    """A trace's summary from hand-made samples, read once as the command reads them."""
    from memcost.analysis.trace import frames, records, summary
    return summary.summarize(records.read(samples), cost, which or frames.DEFAULT_FRAMES)


def may_trace() -> bool:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    return os.geteuid() == 0 or (paranoid.exists() and int(paranoid.read_text()) <= -1)


def unavailable(reason: str) -> None:
    """Skip for `reason`, unless `make test` runs as root, where tracing must work: then fail."""
    if os.environ.get(REQUIRE_TRACING):
        pytest.fail(f"{reason}, and {REQUIRE_TRACING} is set (make test as root): this must work here")
    pytest.skip(reason)


@pytest.fixture
def tracing() -> None:
    """For tests that trace: root, or perf_event_paranoid -1."""
    if not may_trace():
        unavailable("tracing needs root or perf_event_paranoid -1")


needs_tracing = pytest.mark.usefixtures("tracing")


@pytest.fixture(scope="session")
def golden_results(tmp_path_factory) -> Path:
    """A results folder holding a costs result for this host (the recorded one, renamed), so that
    trace's fault cost model is fixed and no calibration runs. Copy it before writing into it."""
    root = tmp_path_factory.mktemp("golden_results")
    document = json.loads(GOLDEN_COSTS.read_text())
    document["context"]["host"] = socket.gethostname()
    (root / "20260101T000000Z-golden").mkdir()
    (root / "20260101T000000Z-golden" / "costs.json").write_text(json.dumps(document))
    return root


@pytest.fixture(scope="session")
def c_program(tmp_path_factory):
    """Builds tests/python/data/NAME.c (-O2 -g, no frame pointers, as distribution binaries are)."""
    folder = tmp_path_factory.mktemp("programs")
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            built[name] = folder / name
            subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-o", str(built[name]), str(DATA / f"{name}.c")],
                           check=True)
        return built[name]
    return build


@pytest.fixture(autouse=True, scope="session")
def private_journal(tmp_path_factory):
    """memcost's journal of machine changes, private to this test session."""
    os.environ["MEMCOST_JOURNAL"] = str(tmp_path_factory.mktemp("journal") / "journal.json")
    yield


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def machine_settings() -> dict:
    """Every machine setting memcost may change, as it is now."""
    settings = {
        "tracefs mounts": sorted(line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                                 if line.split()[2] == "tracefs"),
        "THP enabled": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "THP defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag"),
        "vm.max_map_count": _read("/proc/sys/vm/max_map_count"),
        "kernel.perf_event_paranoid": _read("/proc/sys/kernel/perf_event_paranoid"),
    }
    for pool in sorted(Path("/sys/kernel/mm/hugepages").glob("hugepages-*")):
        for name in ("nr_hugepages", "nr_overcommit_hugepages"):
            settings[f"hugetlb {pool.name} {name}"] = _read(str(pool / name))
    for journal in ("/run/memcost/journal.json", os.environ.get("MEMCOST_JOURNAL", "")):
        text = _read(journal) if journal else None
        settings[f"journal {journal}"] = json.loads(text) if text else []
    return settings


@pytest.fixture(autouse=True, scope="session")
def machine_left_as_found(private_journal):
    """The suite leaves every machine setting memcost may change as it found it, or fails."""
    before = machine_settings()
    yield
    after = machine_settings()
    changed = {name: (before[name], after.get(name)) for name in before if after.get(name) != before[name]}
    if changed:
        pytest.fail("the test suite left machine settings changed (before → after): " +
                    "; ".join(f"{name}: {was!r} → {now!r}" for name, (was, now) in changed.items()), pytrace=False)
