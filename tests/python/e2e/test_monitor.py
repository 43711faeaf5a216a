"""`memcost monitor`: lifetime totals of a command, records, the Prometheus endpoint, robustness."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import DATA, finish, run_memcost, start_memcost
from memcost import exit_codes
from memcost.analysis.cost_model import CostModel
from memcost.monitor.sampler import Reading, Sampler

MACHINE_KEYS = {"minor_faults_per_s", "major_faults_per_s", "pages_allocated_per_s", "pages_freed_per_s",
                "thp_faults_per_s", "thp_fallbacks_per_s", "thp_collapses_per_s", "compaction_stalls_per_s",
                "pages_reclaimed_per_s"}
CPU_KEYS = {"system_percent", "steal_percent", "kswapd_percent", "khugepaged_percent", "kcompactd_percent",
            "kworker_percent"}


@pytest.fixture(scope="module")
def faulter(tmp_path_factory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler")
    program = tmp_path_factory.mktemp("bin") / "fault_512m"
    subprocess.run([compiler, "-O2", "-o", str(program), str(DATA / "fault_512m.c")], check=True)
    return program


def _records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_a_commands_lifetime_faults_are_counted(tmp_path, faulter):
    result = run_memcost("--results-dir", str(tmp_path), "monitor", "--json", "--interval", "0.2", "--", str(faulter))
    assert result.returncode == 0, result.stderr
    records = _records(result.stdout)
    total = records[-1]
    assert total["type"] == "total" and total["exit_code"] == 0
    assert total["minor_faults"] == pytest.approx(131072, rel=0.02)
    assert total["system_cpu_s"] > 0
    for record in records[:-1]:
        assert record["type"] == "interval"
        assert set(record["machine"]) == MACHINE_KEYS and set(record["cpu"]) == CPU_KEYS


def test_once_json_is_one_valid_record(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "monitor", "--once", "--json", "--interval", "0.3")
    assert result.returncode == 0, result.stderr
    [record] = _records(result.stdout)
    assert record["interval_s"] == pytest.approx(0.3, abs=0.2)
    assert record["machine"]["minor_faults_per_s"] >= 0
    assert record["zeroing"]["estimated_cpu_percent"] is None
    assert "memcost costs --quick" in record["zeroing"]["note"]
    assert isinstance(record["processes"], list)


def test_a_vanished_pid_does_not_crash_it(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "monitor", "--once", "--json", "--interval", "0.1",
                         "--pid", "4000000")
    assert result.returncode == 0, result.stderr
    [record] = _records(result.stdout)
    assert record["processes"] == [] and record["hidden_processes"] == 1
    # Only the chosen process was read: the kernel threads were not measured, which is not 0 %.
    assert record["cpu"]["kswapd_percent"] is None and record["cpu"]["kworker_percent"] is None


def test_unknown_flags_exit_2():
    assert run_memcost("monitor", "--bogus").returncode == exit_codes.BAD_ARGUMENTS
    assert run_memcost("monitor", "--serve", "nonsense").returncode == exit_codes.BAD_ARGUMENTS


def test_prometheus_endpoint_answers_on_loopback(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Output to files: --json writes a few kB per interval, which would fill an unread pipe.
    process = start_memcost("--results-dir", str(tmp_path), "monitor", "--json", "--interval", "0.3", "--duration", "6",
                            "--serve", str(port), folder=tmp_path)
    try:
        text = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "memcost_page_faults_total{" not in text:
            time.sleep(0.3)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
    finally:
        _, stderr = finish(process, timeout=30)
    from prometheus_client.parser import text_string_to_metric_families
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, kind in (("memcost_page_faults", "counter"), ("memcost_pages_allocated", "counter"),
                       ("memcost_cpu_seconds", "counter"), ("memcost_thp_events", "counter"),
                       ("memcost_zeroed_bytes", "counter"), ("memcost_hugetlb_pages", "gauge"),
                       ("memcost_build_info", "gauge"), ("memcost_machine_info", "gauge")):  # info, in the text format
        assert families[name].type == kind, name
    kinds = {sample.labels["kind"] for sample in families["memcost_cpu_seconds"].samples}
    assert {"system", "kswapd", "khugepaged", "kcompactd", "kworker"} <= kinds
    # Where the kernel counts what it handed to the host, so does the exposition: the kernel's figure.
    reported = Path("/sys/module/page_reporting/parameters/reported_kib")
    if reported.exists():
        assert families["memcost_host_reported_bytes"].type == "counter"
        exposed = families["memcost_host_reported_bytes"].samples[0].value
        assert int(reported.read_text()) * 1024 >= exposed >= 0 and exposed % 1024 == 0
    assert not any("per_second" in name or "percent" in name for name in families)  # rates are PromQL's job
    assert not any("pid" in sample.labels for family in families.values() for sample in family.samples)
    assert process.returncode == 0, stderr


def _reading(vmstat, cpu=None, t=0.0):
    return Reading(t, vmstat, cpu or {"system": 0, "steal": 0}, {}, 0)


def test_counter_wrap_and_missing_fields_give_no_value_not_nonsense():
    sampler = Sampler(pids=[])
    before = _reading({"pgfault": 1000, "pgmajfault": 0, "pgfree": 5000}, t=0.0)
    after = _reading({"pgfault": 3000, "pgmajfault": 0, "pgfree": 10}, t=1.0)  # pgfree went backwards
    record = sampler.interval(before, after)
    assert record["machine"]["minor_faults_per_s"] == pytest.approx(2000)
    assert record["machine"]["pages_freed_per_s"] is None
    assert record["machine"]["thp_faults_per_s"] is None  # this "kernel" has no THP counters


def test_zeroing_estimate_uses_the_measured_cost(tmp_path):
    run = tmp_path / "20260101T000000Z-box"
    run.mkdir()
    rows = [{"page": "base", "route": "os", "size_bytes": 1 << 30, "fault_us_per_mb": 512.0},
            {"page": "thp", "route": "os", "size_bytes": 1 << 30, "fault_us_per_mb": 50.0}]
    (run / "costs.json").write_text(json.dumps({"context": {"host": "box"}, "summary": {"rows": rows}}))
    model = CostModel.newest(tmp_path, host="box")
    assert model.fault_us("base") == pytest.approx(2.0) and model.fault_us("thp") == pytest.approx(100.0)
    estimate = Sampler(pids=[], cost=model).zeroing({"minor_faults_per_s": 10000.0, "thp_faults_per_s": 100.0})
    # 9,900 base faults × 2 µs + 100 huge faults × 100 µs = 29,800 µs per second = 2.98 % of a core
    assert estimate["estimated_cpu_percent"] == pytest.approx(2.98)
    assert CostModel.newest(tmp_path, host="another") is None


def test_a_command_still_running_at_the_end_is_stopped_and_accounted(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "monitor", "--json", "--interval", "0.2", "--duration", "0.5",
                         "--", "sleep", "30")
    assert result.returncode == 0, result.stderr
    total = _records(result.stdout)[-1]
    assert total["type"] == "total" and total["exit_code"] == -15  # SIGTERM
    assert total["elapsed_s"] < 10


ANONYMOUS_WRITER = """
import mmap, time
m = mmap.mmap(-1, 256 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for offset in range(0, 256 << 20, 4096):
    m[offset] = 1
time.sleep(0.8)
"""
# A private writable mapping of a cached file: every write faults and copies a page-cache
# page (copy-on-write), so the faults are there and the zeroing is not.
FILE_COPIER = """
import mmap, sys, time
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)
    for offset in range(0, len(m), 4096):
        m[offset] = 2
time.sleep(0.8)
"""


def _zeroed_mb(records: list[dict], field: str) -> float:
    return sum((r["zeroing"][field] or 0.0) * r["interval_s"] for r in records if r["type"] == "interval")


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel's count of zeroed pages needs root")
def test_the_kernel_count_moves_for_anonymous_memory_and_not_for_copies_of_the_page_cache(tmp_path):
    data = tmp_path / "256m.bin"
    with open(data, "wb") as handle:  # written now, so its pages are in the page cache
        for _ in range(256):
            handle.write(b"\x01" * (1 << 20))
    writer = run_memcost("--results-dir", str(tmp_path), "monitor", "--json", "--interval", "0.2", "--",
                         sys.executable, "-c", ANONYMOUS_WRITER)
    reader = run_memcost("--results-dir", str(tmp_path), "monitor", "--json", "--interval", "0.2", "--",
                         sys.executable, "-c", FILE_COPIER, str(data))
    assert writer.returncode == 0 and reader.returncode == 0, writer.stderr + reader.stderr
    written, read = _records(writer.stdout), _records(reader.stdout)
    assert all(r["zeroing"]["kernel_count_method"] for r in written[:-1]), written[0]["zeroing"]
    # The 256 MiB written were zeroed first, and the kernel counted them (other programs add a little).
    assert _zeroed_mb(written, "kernel_zeroed_mb_per_s") >= 0.8 * 256
    # Copying the cached file's pages took as many faults, which the upper bound counts and the kernel does not.
    assert _zeroed_mb(read, "upper_bound_mb_per_s") >= 0.8 * 256
    assert _zeroed_mb(read, "kernel_zeroed_mb_per_s") <= 64


def test_without_the_kernel_count_the_figure_is_an_upper_bound_and_says_why():
    record = Sampler(pids=[]).zeroing({"minor_faults_per_s": 1000.0, "thp_faults_per_s": 0.0})
    assert record["kernel_zeroed_mb_per_s"] is None and record["kernel_count_note"] == "not counted"
    assert record["upper_bound_mb_per_s"] == pytest.approx(1000 * os.sysconf("SC_PAGE_SIZE") / (1 << 20))
    assert "file-backed" in record["upper_bound_why"]


@pytest.fixture
def tracefs_unmounted():
    """tracefs unmounted for the test, as after a boot; mounted again afterwards if it was."""
    from memcost import tracefs
    was_mounted = tracefs.mounted()
    if was_mounted:
        subprocess.run(["umount", tracefs.TRACEFS], check=True)
    yield tracefs
    if was_mounted and not tracefs.mounted():
        subprocess.run(["mount", "-t", "tracefs", "nodev", tracefs.TRACEFS], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting tracefs needs root")
def test_monitor_mounts_tracefs_for_its_run_and_unmounts_it(tmp_path, tracefs_unmounted):
    result = run_memcost("--results-dir", str(tmp_path), "monitor", "--once", "--json", "--interval", "0.3")
    assert result.returncode == 0, result.stderr
    [record] = _records(result.stdout)
    assert record["zeroing"]["kernel_count_method"], record["zeroing"]
    assert not tracefs_unmounted.mounted()
    assert json.loads(Path(os.environ["MEMCOST_JOURNAL"]).read_text()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting tracefs needs root")
def test_tracefs_left_mounted_by_a_killed_monitor_is_unmounted_by_the_next_command(tmp_path, tracefs_unmounted):
    process = start_memcost("--results-dir", str(tmp_path), "monitor", "--json", "--interval", "0.2", folder=tmp_path)
    deadline = time.monotonic() + 30
    while not tracefs_unmounted.mounted() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert tracefs_unmounted.mounted(), "the monitor never mounted tracefs"
        process.kill()
        finish(process)
        assert tracefs_unmounted.mounted()
        [entry] = json.loads(Path(os.environ["MEMCOST_JOURNAL"]).read_text())
        assert entry["kind"] == "tracefs_mount"
        result = run_memcost("hugepages", "status")
        assert result.returncode == 0, result.stderr
        assert "tracefs at /sys/kernel/tracing unmounted" in result.stderr
        assert not tracefs_unmounted.mounted()
    finally:
        if process.poll() is None:
            process.kill()
