"""report, compare and the exports, on golden results documents (no probe), and
one end-to-end check in headless Chromium."""

import base64
import copy
import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pytest

from conftest import RECORDED, interrupt, run_memcost, start_memcost
from memcost import exit_codes
from memcost.analysis.compare import difference

GOLDEN = RECORDED / "run_a"


@pytest.fixture
def run_a(tmp_path) -> Path:
    directory = tmp_path / "20260101T000000Z-machine_a"
    shutil.copytree(GOLDEN, directory)
    return directory


def _variant(source: Path, target: Path, change) -> Path:
    shutil.copytree(source, target)
    path = target / "costs.json"
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    return target


def test_report_has_every_section_and_every_image_decodes(run_a):
    result = run_memcost("report", str(run_a))
    assert result.returncode == 0, result.stderr
    page = (run_a / "report.html").read_text()
    for section in ("info", "costs", "scaling", "bigarray"):
        assert f'<section id="{section}">' in page
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) >= 6  # costs 2, scaling 3, bigarray 1: redrawn from the documents
    for data in images:
        image = matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")
        assert image.shape[0] > 50 and image.shape[1] > 50
    assert "http://" not in page and "https://" not in page  # self-contained
    assert 'class="interpretation"' in page
    summary = (run_a / "summary.md").read_text()
    assert "| page | route | size |" in summary and "## " in summary


def test_schema_mismatch_is_a_clear_error(run_a):
    document = json.loads((run_a / "costs.json").read_text())
    document["schema_version"] = 99
    (run_a / "costs.json").write_text(json.dumps(document))
    result = run_memcost("report", str(run_a))
    assert result.returncode == exit_codes.FAILURE
    assert "schema version 99" in result.stderr and "rerun" in result.stderr
    result = run_memcost("compare", str(GOLDEN), str(run_a))
    assert result.returncode == exit_codes.FAILURE and "schema version 99" in result.stderr


def _scale_faults(factor):
    def change(document):
        for sample in document["samples"]:
            m = sample["metrics"]
            if sample["case"].get("part") == "rows":
                m["first_touch_ns"] = m["second_touch_ns"] + (m["first_touch_ns"] - m["second_touch_ns"]) * factor
    return change


def _resample(document):
    """Noise only: each case's measured samples drawn again, with replacement (fixed seed)."""
    import random

    rng = random.Random(4)
    groups = {}
    for sample in document["samples"]:
        case = sample["case"]
        if case.get("part") == "rows" and not case.get("warmup"):
            groups.setdefault((case["page"], case["route"], case["size_bytes"]), []).append(sample)
    for group in groups.values():
        drawn = [copy.deepcopy(rng.choice(group)["metrics"]) for _ in group]
        for sample, metrics in zip(group, drawn):
            sample["metrics"] = metrics


def test_compare_flags_a_2x_difference_and_not_noise(run_a, tmp_path):
    doubled = _variant(run_a, tmp_path / "20260102T000000Z-machine_b", _scale_faults(2.0))
    shuffled = _variant(run_a, tmp_path / "20260103T000000Z-machine_c", _resample)
    out = tmp_path / "compare"
    result = run_memcost("compare", str(run_a), str(doubled), str(shuffled), "--out", str(out),
                         "--export-json", str(tmp_path / "c.json"), "--export-csv", str(tmp_path / "c.csv"),
                         "--export-markdown", str(tmp_path / "c.md"))
    assert result.returncode == 0, result.stderr
    comparison = json.loads((tmp_path / "c.json").read_text())
    rows = comparison["experiments"]["costs"]["rows"]
    assert rows
    for row in rows:
        doubled_versus, shuffled_versus = row["versus_first"]
        assert doubled_versus["ratio"] == pytest.approx(2.0, rel=0.01)
        assert doubled_versus["significant"] is True
        assert shuffled_versus["ratio"] == pytest.approx(1.0, abs=0.2)
        assert shuffled_versus["significant"] is False
    assert set(comparison["experiments"]) == {"costs", "scaling", "bigarray"}
    assert "≠" in result.stdout
    assert (out / "compare-costs.png").exists() and (out / "compare-scaling.png").exists()
    assert "ratio 20260102T000000Z-machine_b" in (tmp_path / "c.csv").read_text()
    assert (tmp_path / "c.md").read_text().startswith("**comparison of")


def test_missing_experiments_are_reported_not_crashed_on(run_a, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(run_a / "costs.json", partial / "costs.json")
    result = run_memcost("compare", str(run_a), str(partial), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "scaling: only in" in result.stdout and "not compared" in result.stdout
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(run_a / "scaling.json", lonely / "scaling.json")
    result = run_memcost("compare", str(partial), str(lonely))
    assert result.returncode == exit_codes.FAILURE and "no experiment in common" in result.stderr


def test_difference_needs_enough_samples():
    assert difference([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])["significant"] is None
    assert difference([1.0, 1.1, 0.9, 1.05], [2.0, 2.1, 1.9, 2.05])["significant"] is True


def test_experiment_exports(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path / "r"), "scaling", "--counts", "200,400", "--block-sizes", "64K",
                         "--placements", "default", "--reps", "1", "--export-csv", str(tmp_path / "s.csv"),
                         "--export-markdown", str(tmp_path / "s.md"), "--export-json", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "s.json").read_text())["experiment"] == "scaling"
    header = (tmp_path / "s.csv").read_text().splitlines()[0]
    assert "verdict" in header and "block_size_bytes" in header
    assert (tmp_path / "s.md").read_text().startswith("**scaling**")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(run_a, tmp_path):
    assert run_memcost("report", str(run_a)).returncode == 0
    page = (run_a / "report.html").read_text()
    # Once loaded, the page writes every image's rendered size into the DOM that Chromium dumps.
    probe = ("<script>window.addEventListener('load', () => document.body.setAttribute('data-sizes', "
             "JSON.stringify([...document.images].map(i => [i.naturalWidth, i.width, i.height]))));</script>")
    checked = run_a / "checked.html"
    checked.write_text(page.replace("</body>", probe + "</body>"))
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
                             "--virtual-time-budget=5000", "--dump-dom", checked.as_uri()],
                            capture_output=True, text=True, timeout=120)
    match = re.search(r'data-sizes="([^"]+)"', result.stdout)
    assert match, result.stderr[-2000:]
    sizes = json.loads(match.group(1).replace("&quot;", '"'))
    assert len(sizes) >= 6
    assert all(natural > 0 and width > 0 and height > 0 for natural, width, height in sizes)
    console_errors = [line for line in result.stderr.splitlines() if "CONSOLE" in line and "error" in line.lower()]
    assert not console_errors


def test_interrupted_run_keeps_finished_results_and_writes_a_report(tmp_path):
    process = start_memcost("--results-dir", str(tmp_path), "run", "--only", "info,costs", folder=tmp_path)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("*/info.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    stderr = interrupt(process, after_s=2.0)  # into the costs experiment
    assert process.returncode == exit_codes.INTERRUPTED, stderr
    run = tmp_path / "latest"
    assert json.loads((run / "info.json").read_text())["experiment"] == "info"
    assert not (run / "costs.json").exists()
    assert '<section id="info">' in (run / "report.html").read_text()
    assert "interrupted" in stderr


def _same_settings_run(rng, rows: int, reps: int, drift: float, changed_row=None, change=1.0):
    """One run's samples per row: a row's true value, times this run's drift (the between-run
    noise seen on this machine), times within-run spread."""
    values = {}
    for row in range(rows):
        true = 100.0 * (1 + row)
        run_factor = rng.uniform(1 - drift, 1 + drift)
        factor = change if row == changed_row else 1.0
        values[row] = list(true * run_factor * factor * rng.lognormal(0, 0.05, size=reps))
    return values


def _flags(first: dict, other: dict) -> list[dict]:
    from memcost.analysis.compare import holm_flags
    results = [difference(first[row], other[row]) for row in first]
    holm_flags(results)
    return results


def test_same_settings_runs_raise_at_most_one_false_alarm_in_twenty_comparisons():
    import numpy as np
    rng = np.random.default_rng(13)
    flagged = 0
    for _ in range(20):
        first = _same_settings_run(rng, rows=12, reps=9, drift=0.10)
        second = _same_settings_run(rng, rows=12, reps=9, drift=0.10)
        flagged += sum(bool(result["significant"]) for result in _flags(first, second))
    assert flagged <= 1


def test_a_real_change_in_one_row_is_flagged_with_an_interval_around_it():
    import numpy as np
    rng = np.random.default_rng(7)
    first = _same_settings_run(rng, rows=12, reps=9, drift=0.0)
    second = _same_settings_run(rng, rows=12, reps=9, drift=0.0, changed_row=5, change=1.3)
    results = _flags(first, second)
    assert [i for i, result in enumerate(results) if result["significant"]] == [5]
    assert results[5]["ratio_low"] < 1.3 < results[5]["ratio_high"]


def test_bigarrays_default_five_repetitions_over_many_rows_can_still_flag_a_real_change():
    # 33 rows of 5 samples, as `memcost bigarray` gives by default: a 5x change in 10 rows is seen
    # (a rank test could not: its smallest p with 5 a side, 0.008, never passes Holm over 33 rows).
    import numpy as np
    rng = np.random.default_rng(3)
    first = _same_settings_run(rng, rows=33, reps=5, drift=0.10)
    second = _same_settings_run(rng, rows=33, reps=5, drift=0.10)
    for row in range(10):
        second[row] = [value / 5 for value in second[row]]
    flagged = [i for i, result in enumerate(_flags(first, second)) if result["significant"]]
    assert flagged == list(range(10))
    same_again = _same_settings_run(rng, rows=33, reps=5, drift=0.10)
    assert not any(result["significant"] for result in _flags(first, same_again))
