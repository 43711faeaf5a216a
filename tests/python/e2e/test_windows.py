"""The Windows back end, run: the cross-built probe and C++ tests under Wine, and the probe's
output imported here. `make test` builds build/mingw and installs Wine first, and sets
MEMCOST_REQUIRE_WINE so that neither can be missing there without failing."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_memcost
from memcost.results import load_document

MINGW = ROOT / "build" / "mingw"
PROBE = MINGW / "memcost-probe.exe"
WINE = shutil.which("wine64") or shutil.which("wine") or next(
    (path for path in ("/usr/lib/wine/wine64", "/usr/lib/wine/wine") if os.access(path, os.X_OK)), None)


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    """(command prefix, environment) to run a Windows program; a private Wine prefix for the module."""
    missing = [what for what, ok in (("Wine (Debian: wine64)", WINE), (str(PROBE), PROBE.exists())) if not ok]
    if missing:
        message = "missing " + " and ".join(missing) + ": `make cross-windows` builds the probe"
        if os.environ.get("MEMCOST_REQUIRE_WINE"):
            pytest.fail(message)
        pytest.skip(message)
    environment = {**os.environ, "WINEPREFIX": str(tmp_path_factory.mktemp("wineprefix")), "WINEDEBUG": "-all",
                   "WINEDLLOVERRIDES": "mscoree,mshtml="}
    return [WINE], environment


def run_windows(wine, program: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    prefix, environment = wine
    return subprocess.run([*prefix, str(program), *args], capture_output=True, text=True, env=environment, timeout=timeout)


def records(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def captures(wine, tmp_path_factory):
    """The Windows probe's output of each experiment, captured as a user on Windows would."""
    folder = tmp_path_factory.mktemp("captures")
    runs = {
        "info": ["info"],
        "costs": ["costs", "--sizes", "8M", "--pages", "base,hugetlb-2M", "--routes", "os,malloc", "--parts", "rows,reuse",
                  "--reps", "3", "--warmup", "1", "--frames", "20", "--baseline-ms", "50"],
        "dawson2011": ["scaling", "--preset", "dawson2011", "--reps", "1"],
        "fastmm2019": ["scaling", "--preset", "fastmm2019", "--reps", "2"],
        "bigarray": ["bigarray", "--size", "32M", "--reps", "2", "--repeat", "2", "--limit-reps", "1"],
    }
    result = {}
    for name, arguments in runs.items():
        run = run_windows(wine, PROBE, *arguments)
        assert run.returncode == 0, (name, run.stdout[-2000:], run.stderr[-2000:])
        (folder / f"{name}.jsonl").write_text(run.stdout)
        result[name] = folder / f"{name}.jsonl"
    return result


def test_info_records_wine_the_large_page_privilege_and_the_missing_fault_count(wine):
    run = run_windows(wine, PROBE, "info")
    assert run.returncode == 0, run.stderr
    context = records(run.stdout)[0]
    assert context["type"] == "context" and context["os"]["name"] == "Windows"
    assert context["wine"]["version"] and context["wine"]["host_system"] == "Linux"
    large = context["pages"]["large_pages"]
    assert large["offered"] is True and large["page_bytes"] >= 2 << 20
    assert isinstance(large["privilege_held"], bool)
    if not large["privilege_held"]:
        assert "Lock pages in memory" in large["why_not"]
        assert context["pages"]["verdicts"]["hugetlb-2M"]["why_not"] == large["why_not"]
    assert context["counters"]["faults"] is False  # Wine counts none: never reported as 0 faults


def test_the_cpp_suites_pass_under_wine(wine):
    for program in ("memcost_tests.exe", "memcost_c_api_test.exe"):
        run = run_windows(wine, MINGW / "tests" / "cpp" / program)
        assert run.returncode == 0, (program, run.stdout[-4000:], run.stderr[-2000:])
    tests = run_windows(wine, MINGW / "tests" / "cpp" / "memcost_tests.exe", "--gtest_filter=WindowsContract.*")
    assert re.search(r"\[  PASSED  \] [1-9]\d* tests", tests.stdout), tests.stdout[-2000:]


def test_costs_under_wine_reports_faults_as_not_counted_and_large_pages_as_refused(captures):
    lines = records(captures["costs"].read_text())
    rows = [r for r in lines if r["type"] == "sample" and r["case"].get("part") == "rows"]
    assert rows and all(r["metrics"]["first_touch_minor_faults"] is None for r in rows)
    assert {r["case"]["page"] for r in rows} == {"base"}
    assert all(r["metrics"]["elsewhere_method"] in ("GetSystemTimes", "System process (GetProcessTimes)") for r in rows)
    warnings = [r["message"] for r in lines if r["type"] == "warning"]
    assert any("hugetlb-2M" in w and "SeLockMemoryPrivilege" in w for w in warnings), warnings


def test_both_scaling_presets_sweep_top_down_and_default(captures):
    for preset, block, top in (("dawson2011", 64 << 10, 64000), ("fastmm2019", 264752, 6000)):
        samples = [r for r in records(captures[preset].read_text()) if r["type"] == "sample"]
        assert {s["case"]["placement"] for s in samples} == {"top-down", "default"}, preset
        assert {s["case"]["block_size_bytes"] for s in samples} == {block}
        assert all(s["metrics"]["reached"] == top and s["metrics"]["counts"][-1] == top for s in samples)


def test_bigarray_under_wine_is_right_and_names_windows_calls(captures):
    samples = [r for r in records(captures["bigarray"].read_text()) if r["type"] == "sample"]
    strategies = [s for s in samples if s["case"]["part"] == "strategy"]
    assert strategies and all(s["metrics"]["verified"] for s in strategies)
    names = {s["case"]["strategy"] for s in strategies}
    assert "VirtualAlloc + VirtualLock" in names and "parallel VirtualLock" in names
    assert not any("MADV" in name or "MAP_POPULATE" in name for name in names)
    assert all(s["metrics"]["minor_faults"] is None for s in strategies)


def test_import_makes_results_that_report_and_compare_read_labelled_as_wine(captures, tmp_path):
    results = tmp_path / "results"
    imported = run_memcost("--results-dir", str(results), "import", str(captures["info"]), str(captures["costs"]),
                           str(captures["fastmm2019"]), str(captures["bigarray"]))
    assert imported.returncode == 0, imported.stderr
    assert "Wine" in imported.stdout
    directory = results / "latest"
    for experiment in ("costs", "scaling", "bigarray"):
        document = load_document(directory / f"{experiment}.json")
        assert document["context"]["wine"] and document["params"]["imported_from"]
        assert document["summary"]
    scaling = load_document(directory / "scaling.json")["summary"]
    assert {case["placement"] for case in scaling["cases"]} == {"top-down", "default"}
    assert all(case.get("complexity") for case in scaling["cases"])
    report = run_memcost("report", str(directory))
    assert report.returncode == 0, report.stderr
    summary = (directory / "summary.md").read_text()
    assert "(Wine " in summary.splitlines()[0]
    assert "| Wine | Wine " in summary and "| Large pages |" in summary  # the machine, as its probe described it
    # A second import of the same captures (another "machine" run) compares with the first.
    again = run_memcost("--results-dir", str(tmp_path / "again"), "import", str(captures["costs"]))
    assert again.returncode == 0, again.stderr
    compared = run_memcost("--results-dir", str(tmp_path / "cmp"), "compare", str(directory), str(tmp_path / "again" / "latest"))
    assert compared.returncode == 0, compared.stderr
    assert "Wine" in compared.stdout


def test_import_refuses_what_is_not_a_whole_capture(captures, tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_text(captures["costs"].read_text().splitlines()[0] + "\n")  # a context line, no sample
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n")
    failed = tmp_path / "failed.jsonl"
    failed.write_text(captures["costs"].read_text() + '{"type":"error","code":"x","message":"boom"}\n')
    for path, words in ((cut, "no sample"), (broken, "not JSON"), (failed, "stopped with an error"),
                        (tmp_path / "absent.jsonl", "no such file")):
        result = run_memcost("--results-dir", str(tmp_path / "results"), "import", str(path))
        assert result.returncode == 1, (path, result.stderr)
        assert words in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "results").exists()  # nothing half-written


def test_only_os_windows_names_a_windows_api():
    windows_names = re.compile(r"\b(VirtualAlloc|VirtualFree|VirtualLock|VirtualProtect|VirtualQuery|GetProcessMemoryInfo|"
                               r"GetProcessTimes|GetSystemTimes|GetLargePageMinimum|AdjustTokenPrivileges|"
                               r"CreateToolhelp32Snapshot|SetThreadAffinityMask|QueryWorkingSetEx|GetLastError|"
                               r"windows\.h)\b")
    offenders = []
    for folder in ("src", "include"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".cpp", ".hpp", ".h", ".c") and path.name != "os_windows.cpp":
                code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)  # comments may name them
                code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', code)  # and so may strings shown to users
                if windows_names.search(code):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_windows_monitor_reads_pdh_or_says_it_cannot(wine):
    run = run_windows(wine, PROBE, "monitor", "--duration", "0.2", "--interval-ms", "100", "--no-processes")
    lines = records(run.stdout)
    if run.returncode == 0:  # Windows itself: the documented \Memory counters, cumulative
        samples = [r for r in lines if r["type"] == "sample"]
        assert samples and set(samples[0]["metrics"]["vmstat"]) == {"page_faults", "demand_zero_faults"}
        return
    # Wine's PDH has no \Memory counters: one clear line and "not supported here", nothing invented.
    assert run.returncode == 4, run.stderr
    error = next(r for r in lines if r["type"] == "error")
    assert "PDH" in error["message"] and "Demand Zero Faults" in error["message"]
    assert not any(r["type"] == "sample" for r in lines)
