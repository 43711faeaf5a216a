"""`memcost costs` end to end with the real probe, at small sizes."""

import json
import os
import shutil
import subprocess
import sys
import time

import matplotlib.image
import pytest

from conftest import DATA, hugetlb_2m_pool_pages, interrupt, probe_cases, run_memcost, run_probe, start_memcost
from memcost import exit_codes
from memcost.results import load_document

MB = 1 << 20
ROW_FIELDS = {"page", "route", "size_bytes", "alloc_us", "free_us", "first_touch_us_per_mb", "second_touch_us_per_mb",
              "fault_us_per_mb", "free_after_touch_us_per_mb", "elsewhere_us_per_mb", "total_us_per_mb", "naive_us",
              "faults_per_mb", "huge_fraction"}


@pytest.fixture(scope="module")
def costs_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    result = run_memcost("--results-dir", str(root), "costs", "--sizes", "8M,16M", "--pages", "base,thp",
                         "--routes", "os,malloc", "--reps", "3", "--warmup", "1", "--frames", "20",
                         "--threads-size", "32M", "--idle-seconds", "0.2")
    assert result.returncode == 0, result.stderr
    return result, load_document(root / "latest" / "costs.json"), root / "latest"


def _rows(document, part="rows"):
    return [s for s in document["samples"] if s["case"]["part"] == part]


def test_base_pages_fault_once_per_4k_page(costs_run):
    _, document, _ = costs_run
    samples = [s for s in _rows(document) if s["case"]["page"] == "base" and s["case"]["route"] == "os"]
    assert samples
    for sample in samples:
        expected = sample["case"]["size_bytes"] / 4096
        assert sample["metrics"]["first_touch_minor_faults"] == pytest.approx(expected, rel=0.01)


def test_thp_rows_fault_once_per_2m_page_or_carry_a_warning(costs_run):
    _, document, _ = costs_run
    rows = [r for r in document["summary"]["rows"] if r["page"] == "thp" and r["route"] == "os"]
    assert rows
    warned = {w["message"].split(":")[0] for w in document["warnings"] if w["code"] == "not_on_huge_pages"}
    for row in rows:
        if row["huge_fraction"] < 0.5:
            assert f"thp os {row['size_bytes'] // MB} MiB" in warned
            continue
        for sample in _rows(document):
            case = sample["case"]
            if (case["page"], case["route"], case["size_bytes"]) == ("thp", "os", row["size_bytes"]):
                expected = case["size_bytes"] / (2 * MB)
                assert abs(sample["metrics"]["first_touch_minor_faults"] - expected) <= 2


def test_elsewhere_is_never_negative_and_clamping_is_flagged(costs_run):
    _, document, _ = costs_run
    for sample in _rows(document):
        m = sample["metrics"]
        assert m["elsewhere_ns"] >= 0
        assert m["elsewhere_clamped"] == (m["elsewhere_raw_ns"] - m["elsewhere_baseline_ns"] < 0)
    for row in document["summary"]["rows"]:
        assert row["elsewhere_us_per_mb"] >= 0


def test_the_probes_own_defaults_are_recorded_beside_the_flags_given(costs_run):
    _, document, _ = costs_run
    settings = document["params"]["probe_settings"]
    assert settings["reps"] == "3" and settings["sizes"] == "8388608,16777216"  # given
    assert settings["settle-ms"] == "20" and settings["order"] == "blocks"  # the probe's defaults
    assert document["params"]["order"] is None  # the front end holds no default of its own


def test_summary_has_the_documented_fields(costs_run):
    _, document, _ = costs_run
    summary = document["summary"]
    assert {(r["page"], r["route"], r["size_bytes"]) for r in summary["rows"]} == {
        (page, route, size) for page in ("base", "thp") for route in ("os", "malloc") for size in (8 * MB, 16 * MB)}
    for row in summary["rows"]:
        assert ROW_FIELDS <= set(row)
        assert row["reps"] == 3
        assert row["total_us_per_mb"] > 0 and 0 <= row["missed_percent"] <= 100
    assert set(summary["reuse"]["routes"]) == {"malloc", "os", "pool"}
    assert summary["reuse"]["routes"]["os"]["reallocate_faults_per_frame"] == pytest.approx(8 * MB / 4096, rel=0.01)
    # Through an array_pool only the first frame faults: 2,048 faults over 20 frames at most.
    assert summary["reuse"]["routes"]["pool"]["reallocate_faults_per_frame"] <= 8 * MB / 4096 / 20 + 1
    assert [t["threads"] for t in summary["threads"]][0] == 1
    assert [entry["page"] for entry in summary["idle"]] == ["base", "thp"]
    for entry in summary["idle"]:
        assert entry["reps"] == 3 and entry["idle_seconds"] == 0.2
        assert entry["hot_fault_us_per_mb"] > 0 and entry["cold_fault_us_per_mb"] > 0
    assert summary["idle_verdict"].startswith("memory left free for 0.2 s")
    # Warm-ups are kept as raw samples but left out of the summary.
    assert any(s["case"].get("warmup") for s in document["samples"])


def test_tables_and_figures(costs_run):
    result, document, directory = costs_run
    assert "base pages" in result.stdout and "thp pages" in result.stdout
    assert "Reuse vs reallocate" in result.stdout and "First touch with threads" in result.stdout
    assert "Memory reused at once vs left free first" in result.stdout
    assert "In short: first touch costs" in result.stdout
    assert sorted(document["summary"]["figures"]) == ["costs-parts.png", "costs-parts.svg", "costs-threads.png",
                                                      "costs-threads.svg"]
    for name in ("costs-parts.png", "costs-threads.png"):
        image = matplotlib.image.imread(directory / name)
        assert image.shape[0] > 100 and image.shape[1] > 100


def test_over_budget_exits_3_naming_the_budget_and_the_flag(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "costs", "--sizes", "1T", "--parts", "rows")
    assert result.returncode == exit_codes.NOT_ENOUGH_MEMORY
    assert "memory budget" in result.stderr and "--budget" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # no partial results


@pytest.mark.parametrize("arguments", [["--sizes", "0"], ["--sizes", "abc"], ["--reps", "0"], ["--pages", "giant"],
                                       ["--routes", "mmap2"], ["--sizes", ","], ["--order", "random"],
                                       ["--parts", "rows,everything"]])
def test_bad_values_exit_2(tmp_path, arguments):
    result = run_memcost("--results-dir", str(tmp_path), "costs", *arguments)
    assert result.returncode == exit_codes.BAD_ARGUMENTS, result.stderr
    assert result.stderr.startswith("memcost: error:")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("arguments", [["--sizes", "0"], ["--sizes", "12Q"], ["--reps", "0"], ["--parts", "nope"]])
def test_probe_refuses_bad_values_too(arguments):
    result = run_probe("costs", *arguments)
    assert result.returncode == exit_codes.BAD_ARGUMENTS
    assert json.loads(result.stdout.strip().splitlines()[-1])["type"] == "error"


def test_fault_cost_agrees_with_a_plain_c_program(tmp_path, costs_run):
    """The loose bound (a factor of 2) keeps this from flaking; the real-size agreement is in docs/costs.md."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler")
    program = tmp_path / "first_touch"
    subprocess.run([compiler, "-O2", "-o", str(program), str(DATA / "first_touch.c")], check=True)
    plain = float(subprocess.run([str(program), str(16 * MB)], capture_output=True, text=True, check=True).stdout)
    _, document, _ = costs_run
    row = next(r for r in document["summary"]["rows"] if (r["page"], r["route"], r["size_bytes"]) == ("base", "os", 16 * MB))
    assert plain / 2 <= row["fault_us_per_mb"] <= plain * 2, (plain, row["fault_us_per_mb"])


@pytest.mark.skipif(os.geteuid() != 0, reason="growing a hugetlb pool needs root")
def test_reserved_pool_is_restored_after_sigint(tmp_path):
    original = hugetlb_2m_pool_pages()
    process = start_memcost("--results-dir", str(tmp_path), "costs", "--pages", "hugetlb-2M", "--routes", "os", "--parts",
                            "rows", "--sizes", "16M", "--reps", "1000", "--reserve-hugepages", "16M", folder=tmp_path)
    deadline = time.monotonic() + 60
    while hugetlb_2m_pool_pages() == original and time.monotonic() < deadline:
        time.sleep(0.05)
    grew = hugetlb_2m_pool_pages() > original
    stderr = interrupt(process, after_s=1.0)  # into the measurement
    assert grew, "the pool never grew"
    assert process.returncode == exit_codes.INTERRUPTED, stderr
    assert hugetlb_2m_pool_pages() == original
    assert not list(tmp_path.rglob("costs.json"))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="shootdowns need a second CPU to go to")
def test_a_free_while_other_threads_run_sends_shootdowns_and_a_lone_free_about_none(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "costs", "--parts", "shootdowns", "--threads-size", "256M",
                         "--reps", "3", "--warmup", "0")
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "costs.json")
    by_mode = {e["mode"]: e for e in document["summary"]["shootdowns"]}
    single, threads = by_mode["single"], by_mode["threads"]
    assert threads["shootdowns"] >= 1 and threads["shootdowns"] > single["shootdowns"], by_mode
    assert single["shootdowns"] <= 2  # a lone free: at most a stray interrupt from something else
    for sample in _rows(document, "shootdowns"):
        if sample["case"]["mode"] == "threads":
            metrics = sample["metrics"]
            # The calibration's single-page unmaps interrupted the other CPU (each one, on an idle
            # machine; fewer when the spinner lost its CPU to other work meanwhile).
            assert metrics["calibration_shootdowns"] > 0
            assert metrics["remote_ns_per_shootdown"] > 0
    assert "TLB-shootdown interrupts" in document["summary"]["shootdowns_verdict"]
    assert "TLB shootdowns" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="growing a hugetlb pool needs root")
def test_hugetlb_2m_rows_fault_once_per_2m_page_and_the_pool_is_given_back(tmp_path):
    original = hugetlb_2m_pool_pages()
    result = run_memcost("--results-dir", str(tmp_path), "costs", "--pages", "hugetlb-2M", "--routes", "os", "--parts",
                         "rows", "--sizes", "8M,16M", "--reps", "3", "--warmup", "1", "--reserve-hugepages", "16M")
    assert result.returncode == 0, result.stderr
    assert hugetlb_2m_pool_pages() == original
    document = load_document(tmp_path / "latest" / "costs.json")
    rows = document["summary"]["rows"]
    assert {r["size_bytes"] for r in rows} == {8 * MB, 16 * MB}
    for row in rows:
        assert row["page"] == "hugetlb-2M"
        assert abs(row["faults_per_mb"] - 0.5) <= 2, row
        assert row["huge_fraction"] == 1.0
    params = document["params"]
    assert params["hugepage_pool_during"]["total_pages"] > params["hugepage_pool_before"]["total_pages"]


def _case_orders(seed: int) -> list[list[str]]:
    """The order the cases ran in, round by round, in a probe run with --order rounds and this seed."""
    result = run_probe("costs", "--sizes", "4M,8M", "--pages", "base", "--routes", "os,malloc", "--parts", "rows",
                       "--reps", "3", "--warmup", "1", "--order", "rounds", "--order-seed", str(seed))
    assert result.returncode == 0, result.stderr
    orders: dict[int, list[str]] = {}
    for case in probe_cases(result.stdout, "rows"):
        orders.setdefault(case["rep"], []).append(f"{case['route']} {case['size_bytes']}")
    return [orders[rep] for rep in sorted(orders)]


def test_rounds_run_every_case_once_each_in_an_order_shuffled_from_the_seed():
    """--order rounds: each round (warm-up included) a permutation of the cases, the rounds not all
    alike, and the same seed giving the same order (probe/rounds.hpp, as bigarray's ranked rows)."""
    first = _case_orders(11)
    assert len(first) == 4  # one warm-up round and three measured
    cases = sorted(first[0])
    assert len(cases) == 4 and all(sorted(round_) == cases for round_ in first)
    assert len({tuple(round_) for round_ in first}) > 1
    assert _case_orders(11) == first
