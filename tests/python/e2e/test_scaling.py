"""`memcost scaling` with the real probe, on short sweeps."""

import csv
import json

import matplotlib.image
import pytest

from conftest import run_memcost, run_probe
from memcost import exit_codes
from memcost.results import load_document


def _samples(result):
    return [json.loads(line) for line in result.stdout.splitlines() if '"sample"' in line]


def test_distinct_blocks_are_distinct_mappings_and_mergeable_ones_merge():
    result = run_probe("scaling", "--counts", "1000,2000", "--block-sizes", "64K", "--placements", "default,bottom-up",
                       "--commits", "reserve", "--reps", "1")
    assert result.returncode == 0, result.stderr
    samples = _samples(result)
    assert len(samples) == 4
    for sample in samples:
        mappings = sample["metrics"]["mappings"]
        if sample["case"]["shape"] == "distinct":
            # About one mapping per block, on top of the probe's own few dozen.
            assert 1000 <= mappings[0] <= 1000 + 200 and 2000 <= mappings[1] <= 2000 + 200
        else:
            assert mappings[1] < 200
        assert sample["metrics"]["hint_misses"] == 0
        assert sample["metrics"]["reached"] == 2000


def test_counts_above_max_map_count_are_capped_with_a_warning():
    limit = int(open("/proc/sys/vm/max_map_count").read())
    result = run_probe("scaling", "--counts", str(limit + 5000), "--block-sizes", "64K", "--placements", "default",
                       "--shapes", "distinct", "--commits", "reserve", "--reps", "1")
    assert result.returncode == 0, result.stderr
    warnings = [json.loads(line) for line in result.stdout.splitlines() if '"warning"' in line]
    assert [w["code"] for w in warnings] == ["capped_by_max_map_count"]
    assert "vm.max_map_count" in warnings[0]["message"]
    sample = _samples(result)[0]
    assert sample["metrics"]["counts"][-1] < limit
    assert sample["metrics"]["mappings"][-1] < limit


def test_legacy_layout_runs_in_a_re_executed_probe():
    result = run_probe("--legacy-layout", "scaling", "--counts", "500", "--block-sizes", "64K", "--placements", "legacy",
                       "--shapes", "mergeable", "--commits", "reserve", "--reps", "1")
    if result.returncode == exit_codes.UNSUPPORTED:
        pytest.skip(json.loads(result.stdout.splitlines()[-1])["message"])
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout.splitlines()[0])
    assert context["capabilities"]["legacy_layout_active"] is True
    assert _samples(result)[0]["case"]["placement"] == "legacy"


def test_legacy_placement_without_the_layout_is_refused():
    result = run_probe("scaling", "--placements", "legacy", "--counts", "10")
    assert result.returncode == exit_codes.UNSUPPORTED
    assert "--legacy-layout" in json.loads(result.stdout.splitlines()[-1])["message"]


@pytest.mark.parametrize("arguments", [["--counts", "-5"], ["--block-sizes", "0"], ["--counts", "abc"],
                                       ["--placements", "sideways"], ["--shapes", "round"], ["--reps", "0"]])
def test_bad_values_exit_2(tmp_path, arguments):
    result = run_memcost("--results-dir", str(tmp_path), "scaling", *arguments)
    assert result.returncode == exit_codes.BAD_ARGUMENTS, result.stderr
    assert result.stderr.startswith("memcost: error:")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("arguments", [["--counts", "-5"], ["--block-sizes", "0"], ["--shapes", "round"]])
def test_probe_refuses_bad_values_too(arguments):
    result = run_probe("scaling", *arguments)
    assert result.returncode == exit_codes.BAD_ARGUMENTS


def test_end_to_end_with_csv(tmp_path):
    sweep = tmp_path / "sweep.csv"
    result = run_memcost("--results-dir", str(tmp_path / "results"), "scaling", "--counts", "500,1000,1500,2000",
                         "--block-sizes", "64K,1M", "--reps", "1", "--csv", str(sweep))
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "results" / "latest" / "scaling.json")
    cases = document["summary"]["cases"]
    placements = {c["placement"] for c in cases}
    assert {"default", "bottom-up"} <= placements
    assert len(cases) == 2 * len(placements) * 2 * 2
    for case in cases:
        assert case["max_count"] == 2000 and case["verdict"]
    rows = list(csv.DictReader(sweep.open()))
    assert len(rows) == 4 * len(cases)
    assert {"count", "block_size_bytes", "placement", "shape", "commit", "rep", "alloc_s", "free_s"} <= set(rows[0])
    for name in ("scaling-cases.png", "scaling-totals.png", "scaling-marginal.png"):
        assert matplotlib.image.imread(tmp_path / "results" / "latest" / name).shape[0] > 100
    assert "In short:" in result.stdout


def test_the_fastmm2019_preset_replays_the_articles_sweep_on_linux(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "scaling", "--preset", "fastmm2019", "--reps", "1")
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "scaling.json")
    samples = [s for s in document["samples"] if s["metrics"].get("counts")]
    # Linux: the default layout is the top-down one; bottom-up is the probe's address hints.
    assert {s["case"]["placement"] for s in samples} == {"default", "bottom-up"}
    assert {(s["case"]["block_size_bytes"], s["case"]["shape"], s["case"]["commit"]) for s in samples} == \
        {(264752, "mergeable", "commit")}
    assert all(s["metrics"]["counts"][0] == 1 and s["metrics"]["counts"][-1] == 6000 for s in samples)
    assert document["params"]["probe_settings"]["preset"] == "fastmm2019"


@pytest.mark.parametrize("flag", [["--counts", "5"], ["--block-sizes", "1M"], ["--placements", "default"]])
def test_a_preset_with_a_flag_it_sets_is_one_clear_error(tmp_path, flag):
    result = run_memcost("--results-dir", str(tmp_path), "scaling", "--preset", "dawson2011", *flag)
    assert result.returncode == exit_codes.BAD_ARGUMENTS
    assert f"--preset dawson2011 sets {flag[0]} itself" in result.stderr and "Traceback" not in result.stderr
    probe = run_probe("scaling", "--preset", "dawson2011", *flag)
    assert probe.returncode == exit_codes.BAD_ARGUMENTS and "leave" in probe.stderr
    assert not (tmp_path / "latest").exists()
