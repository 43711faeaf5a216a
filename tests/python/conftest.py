import json
import os
import signal
import subprocess
import time
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def kvm_context() -> dict:
    """A real context line, recorded on a 2-core KVM guest (THP madvise, empty hugetlb pools)."""
    record = json.loads((DATA / "context_kvm_2cpu.json").read_text())
    record.pop("type")
    return record


def run_memcost(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The memcost command as a user runs it: a separate process, no terminal."""
    return subprocess.run([sys.executable, "-m", "memcost", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=600)


def run_probe(*args: str) -> subprocess.CompletedProcess:
    from memcost.probe import probe_path
    return subprocess.run([str(probe_path()), *args], capture_output=True, text=True, timeout=600)


def interrupt(process: subprocess.Popen, after_s: float) -> str:
    """Let a running memcost work for `after_s` seconds, press Ctrl-C, wait for it; its stderr."""
    try:
        time.sleep(after_s)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return stderr


@pytest.fixture(autouse=True, scope="session")
def private_journal(tmp_path_factory):
    """memcost's journal of machine changes, private to this test session."""
    os.environ["MEMCOST_JOURNAL"] = str(tmp_path_factory.mktemp("journal") / "journal.json")
    yield
