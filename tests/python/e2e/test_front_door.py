"""The front door: the prerequisite step, and what memcost does with bad input, kills and Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memcost import exit_codes
from memcost.probe import probe_path

from conftest import ROOT, hugetlb_2m_pool_pages, interrupt, run_memcost, start_memcost

PREREQUISITES = ROOT / "tools" / "prerequisites"


def _fake_bin(tmp_path: Path, installed: set, uid: int, sudo_works: bool) -> dict:
    """PATH with dpkg-query, id and sudo that answer as a machine with `installed` packages would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-query").write_text("#!/bin/sh\nfor a; do name=$a; done\nfor p in " +
                                        " ".join(sorted(installed) or ["none"]) +
                                        '; do [ "$p" = "$name" ] && { printf "install ok installed"; exit 0; }; done\nexit 1\n')
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (bin_dir / "sudo").write_text(f"#!/bin/sh\nexit {0 if sudo_works else 1}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _packages(goal: str) -> list:
    names = []
    for line in (ROOT / "tools" / "debian-packages.txt").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#") and (fields[1] == "run" or goal == "test"):
            names.append(fields[0])
    return names


@pytest.mark.parametrize("uid, sudo_works, how", [(0, False, "as root"), (1000, True, "sudo -n")])
def test_prerequisites_installs_what_is_missing(tmp_path, uid, sudo_works, how):
    env = _fake_bin(tmp_path, {"cmake", "python3"}, uid, sudo_works)
    result = subprocess.run(["bash", str(PREREQUISITES), "run", "--dry-run"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    expected = [name for name in _packages("run") if name not in {"cmake", "python3"}]
    assert result.stdout.strip() == f"would install: {' '.join(expected)} (with: {how} apt-get)"


def test_prerequisites_for_test_are_a_superset():
    assert set(_packages("run")) < set(_packages("test"))
    assert "chromium" in _packages("test") and "chromium" not in _packages("run")


def test_prerequisites_stop_with_the_command_to_run(tmp_path):
    env = _fake_bin(tmp_path, set(), uid=1000, sudo_works=False)
    result = subprocess.run(["bash", str(PREREQUISITES), "test"], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert f"sudo apt-get update && sudo apt-get install -y {' '.join(_packages('test'))}" in result.stderr


def test_prerequisites_with_everything_installed_say_nothing(tmp_path):
    env = _fake_bin(tmp_path, set(_packages("test")), uid=1000, sudo_works=False)
    result = subprocess.run(["bash", str(PREREQUISITES), "test", "--dry-run"], capture_output=True, text=True, env=env)
    assert (result.returncode, result.stdout.strip()) == (0, "would install: nothing")


def test_prerequisites_refuse_an_old_python(tmp_path):
    env = _fake_bin(tmp_path, set(_packages("run")), uid=0, sudo_works=False)
    old = tmp_path / "bin" / "python3.8"
    old.write_text('#!/bin/sh\n[ "$1" = "--version" ] && { echo "Python 3.8.10"; exit 0; }\nexit 1\n')
    old.chmod(0o755)
    result = subprocess.run(["bash", str(PREREQUISITES), "run"], capture_output=True, text=True,
                            env={**env, "PYTHON": "python3.8"})
    assert result.returncode == 1
    assert "Python 3.8.10 is too old" in result.stderr


def _assert_one_line_error(result, code):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("memcost: error:")]
    assert len(lines) == 1, result.stderr


def test_empty_selection_is_a_bad_argument(tmp_path):
    _assert_one_line_error(run_memcost("--results-dir", str(tmp_path), "run", "--skip", "info,costs,scaling,bigarray"),
                           exit_codes.BAD_ARGUMENTS)
    assert not any(tmp_path.iterdir())


def test_abbreviated_flags_are_refused(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "costs", "--threads", "1000000000")
    _assert_one_line_error(result, exit_codes.BAD_ARGUMENTS)
    assert "unrecognized arguments: --threads" in result.stderr


def test_hugepages_reserve_beyond_the_budget_is_refused():
    result = run_memcost("hugepages", "reserve", "100T")
    _assert_one_line_error(result, exit_codes.NOT_ENOUGH_MEMORY)
    assert "budget" in result.stderr


@pytest.mark.parametrize("delay_s", [0.05, 0.3, 0.8])
def test_ctrl_c_while_starting_exits_130_without_a_traceback(tmp_path, delay_s):
    process = start_memcost("--results-dir", str(tmp_path), "costs", "--sizes", "8M", "--pages", "base", "--parts",
                            "rows", folder=tmp_path)
    stderr = interrupt(process, after_s=delay_s)
    assert process.returncode in (exit_codes.INTERRUPTED, exit_codes.OK), stderr
    assert "Traceback" not in stderr


def test_the_probe_ends_when_its_parent_is_killed():
    # The parent starts a probe that would run for a minute, says its pid, then is killed outright.
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys\n"
         f"probe = subprocess.Popen([{str(probe_path())!r}, 'costs', '--parts', 'idle', '--pages', 'base', "
         "'--idle-size', '8M', '--idle-seconds', '60', '--idle-reps', '1'], stdout=subprocess.DEVNULL)\n"
         "print(probe.pid, flush=True)\nprobe.wait()\n"], stdout=subprocess.PIPE, text=True)
    probe_pid = int(parent.stdout.readline())
    time.sleep(0.5)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{probe_pid}").exists() and time.monotonic() < deadline:
        stat = Path(f"/proc/{probe_pid}/stat").read_text() if Path(f"/proc/{probe_pid}/stat").exists() else ""
        if ") Z " in stat:  # a zombie waiting for its new parent to reap it: it has ended
            break
        time.sleep(0.05)
    stat = Path(f"/proc/{probe_pid}/stat").read_text() if Path(f"/proc/{probe_pid}").exists() else ""
    assert not stat or ") Z " in stat, "the probe outlived its parent"


def test_a_failing_experiment_keeps_the_others_and_writes_the_report(tmp_path):
    # bigarray's --size is not a `run` flag, so the failure comes from a budget too small for costs.
    from memcost.cli import main
    from memcost.cli import run as run_module
    from memcost.probe import ProbeFailed

    def over_budget(directory, full):
        raise ProbeFailed(exit_codes.NOT_ENOUGH_MEMORY, "over_budget", "8 MiB is over the memory budget of 1 MiB")

    original = run_module.SUITE[1]
    run_module.SUITE[1] = run_module.SuiteEntry("costs", over_budget, original.headline)
    try:
        code = main(["--results-dir", str(tmp_path), "run", "--only", "info,costs"])
    finally:
        run_module.SUITE[1] = original
    assert code == exit_codes.NOT_ENOUGH_MEMORY
    run_dir = tmp_path / "latest"
    assert (run_dir / "info.json").exists() and (run_dir / "report.html").exists()
    assert not (run_dir / "costs.json").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/sys/kernel/mm/hugepages/hugepages-2048kB").exists(),
                    reason="growing a hugetlb pool needs root and a 2 MB pool")
def test_a_pool_left_grown_by_a_killed_run_is_restored_by_the_next_command(tmp_path):
    original = hugetlb_2m_pool_pages()
    process = subprocess.Popen([sys.executable, "-m", "memcost", "--results-dir", str(tmp_path), "costs", "--pages",
                                "hugetlb-2M", "--routes", "os", "--parts", "rows", "--sizes", "16M", "--reps", "1000",
                                "--reserve-hugepages", "16M"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while hugetlb_2m_pool_pages() == original and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert hugetlb_2m_pool_pages() > original, "the pool never grew"
        process.kill()
        process.wait()
        time.sleep(0.5)  # the probe follows its parent
        assert hugetlb_2m_pool_pages() > original
        journal = json.loads(Path(os.environ["MEMCOST_JOURNAL"]).read_text())
        assert [entry["undo"]["total_pages"] for entry in journal] == [original]
        result = run_memcost("hugepages", "status")
        assert result.returncode == 0, result.stderr
        assert "left changed by a memcost run that was killed" in result.stderr
        assert hugetlb_2m_pool_pages() == original
        assert json.loads(Path(os.environ["MEMCOST_JOURNAL"]).read_text()) == []
    finally:
        if hugetlb_2m_pool_pages() != original:
            Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").write_text(str(original))
