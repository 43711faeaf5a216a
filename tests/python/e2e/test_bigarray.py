"""`memcost bigarray` with the real probe, on a small array."""

import json
import os
import subprocess

import matplotlib.image
import pytest

from conftest import probe_cases, run_memcost, run_probe
from memcost import exit_codes
from memcost.probe import probe_path
from memcost.results import load_document

ROW_FIELDS = {"strategy", "init", "median_s", "gb_per_s", "ratio_to_limit", "faults", "huge_fraction", "first_percent_s"}


@pytest.fixture(scope="module")
def bigarray_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    result = run_memcost("--results-dir", str(root), "bigarray", "--size", "64M")
    assert result.returncode == 0, result.stderr
    return result, load_document(root / "latest" / "bigarray.json"), root / "latest"


def test_every_strategy_and_init_is_measured_and_verified(bigarray_run):
    _, document, _ = bigarray_run
    summary = document["summary"]
    assert summary["limit_gb_per_s"] > 0
    rows = summary["rows"]
    names = {r["strategy"] for r in rows}
    for expected in ("new[]", "std::vector", "make_unique_for_overwrite + parallel fill", "malloc + memset",
                     "calloc + first touch", "mmap + memset", "mmap + parallel memset", "MAP_POPULATE",
                     "parallel MADV_POPULATE_WRITE", "make_big_array auto", "make_big_array auto async",
                     "malloc + memset (glibc hugetlb=1)"):
        assert expected in names, expected
    floor = next((r for r in summary["repeat"] if r["is_floor"]), {})
    for row in rows + summary["repeat"]:
        # Above the machine's limit beyond the noise only with a reason the tool found.
        above = row["above_limit"]
        assert above is None or above["reason"], (row.get("strategy") or row["variant"], above, row.get("limit_basis"),
                                                  row.get("ratio_to_limit_samples"), floor.get("floor_noise_interval"),
                                                  summary.get("limit_by_init"))
    # Every run, the allocators' too, measures the limit in each round beside its rows.
    assert all(r["limit_basis"] == "same round" for r in rows), [(r["strategy"], r["limit_basis"]) for r in rows]
    for row in rows:
        assert ROW_FIELDS <= set(row)
        assert row["verified"], row["strategy"]
        assert row["init"] in ("zero", "value") and (row["rank"] is None or row["rank"] >= 1)
    # 64 MiB of 4 KB pages is 16,384 faults for the plain mmap strategies.
    plain = next(r for r in rows if r["strategy"] == "mmap + memset" and r["init"] == "zero")
    assert plain["faults"] == pytest.approx(16384, rel=0.01)
    assert plain["huge_fraction"] == 0


def test_async_first_percent_comes_before_the_whole(bigarray_run):
    _, document, _ = bigarray_run
    for row in document["summary"]["rows"]:
        if row["strategy"] == "make_big_array auto async":
            assert 0 < row["first_percent_s"] <= row["median_s"]
        else:
            assert row["first_percent_s"] is None


def test_auto_choice_is_reported_with_reasons(bigarray_run):
    _, document, _ = bigarray_run
    choice = document["summary"]["auto_choice"]
    assert choice["page_kind"] in ("hugetlb-1G", "hugetlb-2M", "thp", "base")
    assert choice["why"].startswith(f"chose {choice['page_kind']}")
    assert choice["zero"]["rank"] >= 1


def test_table_figure_and_missing_allocators(bigarray_run):
    result, document, directory = bigarray_run
    assert "zero initialization — ranked" in result.stdout and "In short: fastest" in result.stdout
    assert "[thp]" in result.stdout or "THP is not available" in result.stdout
    image = matplotlib.image.imread(directory / "bigarray-strategies.png")
    assert image.shape[0] > 100
    absent = [w for w in document["warnings"] if w["code"] == "allocator_absent"]
    present = {r["allocator"] for r in document["summary"]["rows"]}
    for name in ("jemalloc", "mimalloc", "tcmalloc"):
        assert name in present or any(name in w["message"] for w in absent)


@pytest.mark.parametrize("allocator", ["jemalloc", "mimalloc", "tcmalloc"])
def test_each_allocators_rows_ran_under_it_and_are_right(bigarray_run, allocator):
    from memcost.experiments.bigarray import ALLOCATORS, find_library
    pattern, package = ALLOCATORS[allocator]
    assert find_library(pattern), f"{package} is not installed: `make test` installs it (tools/debian-packages.txt)"
    _, document, _ = bigarray_run
    samples = [s for s in document["samples"]
               if s["case"]["part"] == "strategy" and s["case"].get("allocator") == allocator]
    # By default an allocator's run measures how it gets a big block and whether its calloc knows it is zero.
    assert {s["case"]["strategy"] for s in samples} == {"malloc + memset", "calloc + first touch"}
    pages_64mib = 64 * 1024 * 1024 // 4096
    for sample in samples:
        metrics = sample["metrics"]
        assert metrics["malloc"] == allocator, sample["case"]  # the preloaded malloc served it, not glibc's
        assert metrics["verified"], sample["case"]  # sampled elements hold the value
        assert metrics["huge_fraction"] is not None  # the page kind was read back from the kernel
        assert 0 <= metrics["minor_faults"] <= pages_64mib * 1.1, (sample["case"], metrics["minor_faults"])
    # Its first big block is fresh memory: a fault per base page (THP madvise: malloc advises none).
    # Where the VM handed memory to its host during that repetition, the probe took it again and
    # kept the first try's faults: the retake can reuse what tcmalloc kept.
    first = samples[0]["metrics"]
    first_try = (first["raced_with_host_reporting"] or [first])[0]
    assert first_try["minor_faults"] >= 32, first
    if allocator in ("jemalloc", "mimalloc"):
        # They give a freed block of 64 MiB back to the kernel: every repetition faults it in again.
        # (tcmalloc keeps it and hands it out again: only its first allocation faults; docs/bigarray.md.)
        assert all(s["metrics"]["minor_faults"] >= pages_64mib * 0.99 for s in samples)
    # A row that reused memory an earlier row freed is listed but not ranked; the ranks of the rest run 1, 2, 3 …
    # in order, except that rows tied with the fastest (within noise, round by round) share its rank 1.
    from memcost.analysis.bigarray import reused
    for init in ("zero", "value"):
        rows = [r for r in document["summary"]["rows"] if r["init"] == init]
        ranked = [r for r in rows if not reused(r)]
        assert [r["rank"] for r in ranked] == [1 if r.get("tied") else place for place, r in enumerate(ranked, 1)]
        assert all(r["rank"] is None for r in rows if reused(r))
    glibc = [s for s in document["samples"] if s["case"]["part"] == "strategy" and s["case"].get("allocator") == "glibc"]
    assert glibc and all(s["metrics"]["malloc"] == "glibc" for s in glibc)


def test_repetitions_adapt_and_each_row_says_why_it_stopped(bigarray_run):
    """Adaptive repetitions (no --reps): at most 5 rounds, a row stopping once its time is known within
    ±10 % (after 3 or more) or even its fastest round took 3 times the fastest row's median (5 times
    after only 2, 15 times after its first: at this test's small size an allocator's row can be,
    jemalloc's malloc + memset once at 48 ms); each reason checked here against the row's own times,
    independently of the probe's arithmetic."""
    import math

    from scipy import stats
    _, document, _ = bigarray_run
    times: dict = {}
    for sample in document["samples"]:
        case = sample["case"]
        if case["part"] == "strategy":
            times.setdefault((case["strategy"], case.get("allocator") or "", case["init"]), []).append(
                sample["metrics"]["elapsed_s"])
    settled = {(s["case"]["strategy"], s["case"]["allocator"], s["case"]["init"]): s
               for s in document["samples"] if s["case"]["part"] == "settled"}
    assert set(settled) == set(times)  # every row says why it stopped, once
    main_fastest_zero = min(sorted(v)[len(v) // 2] if len(v) % 2 else sum(sorted(v)[len(v) // 2 - 1:len(v) // 2 + 1]) / 2
                            for (_, allocator, init), v in times.items() if init == "zero" and allocator in ("", "glibc"))
    for key, sample in settled.items():
        seconds, reason = times[key], sample["metrics"]["reason"]
        assert sample["case"]["rounds"] == len(seconds) and 1 <= len(seconds) <= 5, (key, seconds)
        if reason == "far behind":
            factor = {1: 15, 2: 5}.get(len(seconds), 3)  # the fewer the rounds, the farther behind
            assert min(seconds) >= factor * sample["metrics"]["fastest_median_s"], (key, seconds, sample["metrics"])
        elif reason == "tight":
            assert len(seconds) >= 3, (key, seconds)
            logs = [math.log(s) for s in seconds]
            half = stats.t.ppf(0.975, len(logs) - 1) * stats.tstd(logs) / math.sqrt(len(logs))
            assert half <= math.log(1.10) + 1e-3, (key, seconds)
        else:
            assert reason == "most rounds" and len(seconds) == 5, (key, seconds)
        if key[1] not in ("", "glibc"):
            # An allocator's run is judged against the main run's fastest, passed to it.
            assert sample["metrics"]["fastest_median_s"] == pytest.approx(main_fastest_zero, rel=1e-4), key
    rows = document["summary"]["rows"]
    assert all(row["stopped"] in ("tight", "far behind", "most rounds") for row in rows)


def test_each_round_runs_its_huge_page_rows_together(bigarray_run):
    """Within a round the rows asking for huge pages run as one group, after the base-page rows in
    even rounds and before them in odd ones (a huge-page allocation right after a base-page row's
    free gets memory the host must fault in again; docs/bigarray.md)."""
    _, document, _ = bigarray_run
    if not any("[thp]" in s["case"].get("strategy", "") for s in document["samples"]):
        pytest.skip("THP is not usable here: every row is on base pages")
    rounds: dict = {}
    for sample in document["samples"]:  # in the order the probe emitted them
        case = sample["case"]
        if case["part"] == "strategy" and case.get("allocator") in ("", "glibc"):
            huge = case["strategy"].endswith("]") and " [" in case["strategy"] or case["strategy"].startswith("make_big_array")
            rounds.setdefault((case["init"], case["rep"]), []).append(huge)
    for (init, rep), kinds in rounds.items():
        changes = sum(1 for a, b in zip(kinds, kinds[1:]) if a != b)
        assert changes <= 1, (init, rep, kinds)
        if changes:
            assert kinds[0] == (rep % 2 == 1), (init, rep, kinds)  # even rounds: base pages first


@pytest.mark.parametrize("arguments", [["--size", "0"], ["--size", "abc"], ["--inits", "random"], ["--reps", "0"],
                                       ["--serial-part", "16M"]])
def test_bad_values_exit_2(tmp_path, arguments):
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", *arguments)
    assert result.returncode == exit_codes.BAD_ARGUMENTS
    assert not any(tmp_path.iterdir())


def test_a_size_over_the_budget_exits_3(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", "--size", "1T")
    assert result.returncode == exit_codes.NOT_ENOUGH_MEMORY
    assert "memory budget" in result.stderr and "--budget" in result.stderr
    assert not any(tmp_path.iterdir())


def test_probe_refuses_a_filter_that_matches_nothing():
    result = run_probe("bigarray", "--size", "16M", "--strategies", "teleport")
    assert result.returncode == exit_codes.BAD_ARGUMENTS
    assert "matches no strategy" in json.loads(result.stdout.splitlines()[-1])["message"]


def test_a_failed_populate_fails_its_strategy_loudly(tmp_path):
    # As on a kernel without MADV_POPULATE_WRITE: the row would otherwise write nothing, read back zero and rank first.
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", "--size", "64M", "--no-allocators",
                         "--strategies", "POPULATE_WRITE,vector", env={"MEMCOST_INJECT_FAILURE": "populate_write"})
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "bigarray.json")
    assert {row["strategy"] for row in document["summary"]["rows"]} == {"std::vector"}
    failed = [w for w in document["warnings"] if w["code"] == "strategy_failed"]
    assert failed and all("MADV_POPULATE_WRITE" in w["message"] for w in failed)


def test_the_repeat_scenario_reports_every_variant_and_the_pool_takes_no_faults(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", "--size", "64M", "--reps", "1", "--repeat", "3",
                         "--strategies", "vector", "--no-allocators")
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "bigarray.json")
    repeat = {r["variant"]: r for r in document["summary"]["repeat"]}
    assert len(repeat) == 6 and all(r["iterations"] == 3 for r in repeat.values())
    pages = 64 * 1024 * 1024 // 4096
    # After the first iteration the pooled variants and the floor reuse faulted memory; a fresh
    # std::vector of base pages faults every page again.
    for name in ("make_big_array + array_pool", "std::vector + memcost::allocator + pool",
                 "one array kept, filled again (the floor)"):
        assert repeat[name]["faults_per_iteration"] < pages / 32, (name, repeat[name])
    assert "made, initialized and freed again and again" in result.stdout
    # --reps fixes the count: one repetition a row, ended as "most rounds", and all 3 iterations.
    assert all(r["reps"] == 1 and r["stopped"] == "most rounds" for r in document["summary"]["rows"])


def test_the_fill_methods_are_measured_on_fresh_and_faulted_memory_and_the_pick_is_named(bigarray_run):
    result, document, _ = bigarray_run
    fills = {f["memory"]: f for f in document["summary"]["fills"]}
    assert set(fills) == {"fresh", "faulted"}
    for fill in fills.values():
        assert set(fill["gb_per_s"]) == {"memset", "stores", "nontemporal", "automatic"}
        assert all(speed > 0 for speed in fill["gb_per_s"].values())
        assert fill["fastest"] in ("stores", "nontemporal")
        # 64 MiB is under what is worth measuring for: the rule, and it says so.
        assert fill["automatic_reason"].startswith("the default rule"), fill["automatic_reason"]
        assert fill["calibration_ms"] == 0
    # The fresh fill takes the faults (64 MiB: at least one per 2 MiB page); the refill none.
    assert fills["fresh"]["faults_per_fill"] >= 32 and fills["faulted"]["faults_per_fill"] == 0
    assert fills["fresh"]["automatic_picks"] == "stores"
    assert "Fill methods" in result.stdout


def test_the_repeat_scenario_shrinks_to_a_quarter_of_the_budget_and_says_so(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", "--size", "64M", "--budget", "128M", "--reps", "1",
                         "--repeat", "2", "--strategies", "make_big_array auto", "--inits", "zero", "--no-allocators")
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "bigarray.json")
    reduced = [w for w in document["warnings"] if w["code"] == "repeat_size_reduced"]
    assert reduced and "32 MiB" in reduced[0]["message"], document["warnings"]
    assert {r["size_bytes"] for r in document["summary"]["repeat"]} == {32 << 20}


def _strategy_sample(rep: int, seconds: float, events: dict) -> dict:
    return {"case": {"part": "strategy", "strategy": "std::vector<T>(n)", "family": "libc", "allocator": "glibc",
                     "init": "zero", "size_bytes": 1 << 30, "rep": rep, "threads": 2},
            "metrics": {"elapsed_s": seconds, "events": events}}


def test_an_outlier_is_explained_by_a_cause_that_fits_or_said_to_have_none():
    from memcost.analysis.bigarray import find_outliers, outlier_lines
    quiet = {"compaction_stalls": 0, "thp_fallbacks": 0, "reclaimed_pages": 0, "steal_ns": 0}
    samples = [_strategy_sample(rep, 0.5, quiet) for rep in range(1, 5)]
    samples.append(_strategy_sample(0, 2.0, quiet))  # the first, 4× the median, nothing seen
    samples.append({"case": {"part": "repeat", "variant": "fresh make_big_array", "size_bytes": 1 << 30, "iterations": 4},
                    "metrics": {"iteration_ns": [3.4e9, 0.45e9, 0.46e9, 0.44e9], "iteration_faults": [0] * 4,
                                "floor_ns": [0.4e9] * 4,
                                "iteration_events": [{**quiet, "compaction_stalls": 12}, quiet, quiet, quiet]}})
    outliers = find_outliers(samples)
    assert len(outliers) == 2
    lines = outlier_lines({"outliers": outliers, "machine_facts": {"free_page_reporting": False}})
    repeat = next(line for line in lines if line.startswith("repeat: fresh make_big_array, iteration 1"))
    assert "7.5× the median" in repeat and "THP compaction: 12 direct compaction stalls" in repeat
    strategy = next(line for line in lines if "repetition" in line)
    assert "no known cause fits" in strategy and "does not report free pages" in strategy
    # On a VM that gives free memory back to its host, the first use fits that cause, with the
    # figure `memcost costs` measured for it.
    lines = outlier_lines({"outliers": outliers, "machine_facts": {"free_page_reporting": True, "idle_ratio": 2.4}})
    assert all("memory returned to the host" in line and "2.4× costlier" in line for line in lines)
    assert find_outliers([_strategy_sample(rep, 0.5 + rep * 0.1, quiet) for rep in range(5)]) == []
    # Where the kernel counts what it reported to the host, a repetition during which it reported
    # hundreds of MiB says so with the figure, first use or not; a few MiB is no cause.
    samples = [_strategy_sample(rep, 0.5, {**quiet, "host_reported_bytes": 2 << 20}) for rep in range(4)]
    samples.append(_strategy_sample(4, 1.9, {**quiet, "host_reported_bytes": 768 << 20}))
    lines = outlier_lines({"outliers": find_outliers(samples), "machine_facts": {"free_page_reporting": True}})
    assert len(lines) == 1 and "repetition 5" in lines[0] and "reported 768 MiB of free memory" in lines[0], lines
    samples[-1] = _strategy_sample(4, 1.9, {**quiet, "host_reported_bytes": 4 << 20})
    lines = outlier_lines({"outliers": find_outliers(samples), "machine_facts": {"free_page_reporting": True}})
    assert "no known cause fits" in lines[0], lines


def test_a_fill_raced_by_the_host_taking_memory_back_is_taken_again_and_said():
    from memcost.analysis.bigarray import summarize_fills
    from memcost.experiments.bigarray import notes

    def fill(method, rep, speed, raced=()):
        return {"case": {"part": "fill", "method": method, "memory": "fresh", "size_bytes": 1 << 30, "rep": rep,
                         "threads": 2},
                "metrics": {"gb_per_s": speed, "minor_faults": 512, "raced_with_host_reporting": list(raced),
                            **({"automatic_picks": "stores", "calibration_ns": 0} if method == "automatic" else {})}}
    samples = [fill(method, rep, 12.0) for rep in range(3) for method in ("memset", "stores", "nontemporal", "automatic")]
    samples[0] = fill("memset", 0, 10.0, [{"gb_per_s": 3.9, "host_reported_bytes": 768 << 20}])
    fills = summarize_fills(samples, None)
    assert fills[0]["gb_per_s"]["memset"] == 12.0  # the raced attempt is not in the median
    lines = notes({"rows": [], "fills": fills})
    assert any(line.startswith("1 fresh-memory fill taken again") and "memset, rep 1, 3.9 GB/s while 768 MiB went"
               in line for line in lines), lines


def test_a_headline_naming_a_page_kind_in_brackets_prints_it():
    from memcost.report.terminal import print_closing
    from memcost.console import console
    with console.capture() as captured:
        print_closing({"warnings": [], "path": "x.json",
                       "summary": {"headline": "fastest 4 GiB zero-init: 0.21 s via mmap + parallel memset [thp]"}})
    assert "via mmap + parallel memset [thp]" in captured.get()


def test_automatic_is_set_against_the_fastest_of_the_same_repetition():
    from memcost.analysis.bigarray import summarize_fills
    from memcost.experiments.bigarray import notes

    def fill(method, rep, speed):
        return {"case": {"part": "fill", "method": method, "memory": "faulted", "size_bytes": 4 << 30, "rep": rep,
                         "threads": 2},
                "metrics": {"gb_per_s": speed, "minor_faults": 0,
                            **({"automatic_picks": "nontemporal", "calibration_ns": 0} if method == "automatic" else {})}}

    def summary(speeds):
        samples = [fill(method, rep, speed) for method, row in speeds.items() for rep, speed in enumerate(row)]
        return summarize_fills(samples, None)[0]
    # The host's bandwidth fell from 40 to 21 GB/s within the second repetition, between nontemporal's
    # fill and automatic's (as measured in one run here): the medians of the columns alone would put
    # automatic 45 % behind; repetition by repetition it is 2 %.
    switched = summary({"stores": [24.0, 23.9, 18.4], "nontemporal": [41.1, 38.5, 21.5], "automatic": [40.2, 20.7, 21.3]})
    assert switched["fastest"] == "nontemporal"
    assert 0 < switched["automatic_behind_fastest_percent"] < 5
    assert not any("ran" in line and "behind" in line for line in notes({"rows": [], "fills": [switched]}))
    # Behind in every repetition: said.
    slow = summary({"stores": [24.0, 23.9, 18.4], "nontemporal": [41.1, 38.5, 21.5], "automatic": [36.0, 34.0, 19.0]})
    assert slow["automatic_behind_fastest_percent"] == pytest.approx(100 * (38.5 / 34.0 - 1), rel=0.2)
    assert any(line.startswith("fill_method::automatic ran 13% behind nontemporal") for line in
               notes({"rows": [], "fills": [slow]})), notes({"rows": [], "fills": [slow]})


def _fill_orders(seed: int) -> list[list[str]]:
    """The order the fill methods ran in, per round and memory, in a probe run with this seed."""
    result = run_probe("bigarray", "--size", "16M", "--strategies", "MAP_POPULATE", "--inits", "zero", "--reps", "1",
                       "--repeat", "0", "--limit-reps", "4", "--order-seed", str(seed))
    assert result.returncode == 0, result.stderr
    orders: dict[tuple, list[str]] = {}
    for case in probe_cases(result.stdout, "fill"):
        orders.setdefault((case["rep"], case["memory"]), []).append(case["method"])
    return [orders[key] for key in sorted(orders)]


def test_the_fill_methods_take_turns_in_an_order_shuffled_each_round_from_the_seed():
    orders = _fill_orders(11)
    assert len(orders) == 8  # four rounds, fresh and faulted memory
    assert all(sorted(order) == ["automatic", "memset", "nontemporal", "stores"] for order in orders)
    assert len({tuple(order) for order in orders}) > 1  # with this seed the rounds' orders differ
    assert _fill_orders(11) == orders


def _samples(stdout: str, part: str) -> list[dict]:
    records = (json.loads(line) for line in stdout.splitlines())
    return [r for r in records if r.get("type") == "sample" and (r.get("case") or {}).get("part") == part]


def test_one_thread_rows_measured_side_by_side_each_count_their_own_faults_and_are_checked_once():
    """--side-by-side 3: the one-thread rows of a round run at once, each in a process of its own; each
    row's faults are its own process's (a 32 MiB mmap + memset is 8,192 faults, not the batch's sum);
    the run's first batch is checked against its first row measured alone, once; the parallel rows
    stay alone."""
    result = run_probe("bigarray", "--size", "32M", "--inits", "zero", "--reps", "2", "--repeat", "0", "--limit-reps", "1",
                       "--strategies", "new[],malloc+memset,mmap+memset,mmap+parallel memset", "--side-by-side", "3")
    assert result.returncode == 0, result.stderr
    [width] = _samples(result.stdout, "side_by_side")
    assert width["metrics"]["rows"] == 3 and width["case"]["asked"] == 3
    [check] = _samples(result.stdout, "side_by_side_check")
    assert len(check["metrics"]["rows"]) == 3 and check["metrics"]["alone_s"] > 0
    assert check["metrics"]["kept"] == (check["metrics"]["beside_s"] <= 1.10 * check["metrics"]["alone_s"])
    strategies = _samples(result.stdout, "strategy")
    pages = (32 << 20) // 4096
    for sample in strategies:
        name, beside = sample["case"]["strategy"], sample["metrics"]["side_by_side"]
        assert sample["metrics"]["verified"], name
        if name == "mmap + parallel memset":
            assert beside == 1
        elif name == "mmap + memset" and sample["metrics"]["minor_faults"] is not None:
            assert sample["metrics"]["minor_faults"] == pytest.approx(pages, rel=0.02), sample
    if check["metrics"]["kept"]:
        # The checked row's round-1 repetition is its alone one; the other rows' are side by side.
        # (A THP row, where THP is usable, is the only one-thread row of its page size: alone.)
        first_round = {s["case"]["strategy"]: s["metrics"]["side_by_side"] for s in strategies if s["case"]["rep"] == 0}
        assert first_round[check["case"]["strategy"]] == 1
        assert sorted(v for k, v in first_round.items() if " [" not in k and "parallel" not in k) == [1, 3, 3]
        assert all(v == 1 for k, v in first_round.items() if " [" in k or "parallel" in k)
    # Every row has its two rounds, whatever the check said.
    counts = {}
    for sample in strategies:
        counts[sample["case"]["strategy"]] = counts.get(sample["case"]["strategy"], 0) + 1
    assert all(n == 2 for n in counts.values()), counts


def _with_a_failed_check(check: str, warning: str, *arguments: str):
    """The probe's bigarray with the check `check` failed on purpose (MEMCOST_INJECT_FAILURE, the
    probe's test hook): the run, once it is known that the check said so and warned once, and the
    warning's text."""
    result = subprocess.run([str(probe_path()), "bigarray", *arguments], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "MEMCOST_INJECT_FAILURE": check})
    assert result.returncode == 0, result.stderr
    [sample] = _samples(result.stdout, check)
    assert sample["metrics"]["kept"] is False
    warnings = [json.loads(line) for line in result.stdout.splitlines() if f'"{warning}"' in line]
    assert len(warnings) == 1, warnings
    return result, warnings[0]["message"]


def test_a_failed_side_by_side_check_measures_every_row_alone_from_then_on():
    """The check failed on purpose (MEMCOST_INJECT_FAILURE=side_by_side_check, the probe's test hook):
    a warning, the batch's side-by-side times not kept, its other rows measured again alone in the
    same round (with --reps 2 every row still has its two), every later repetition alone."""
    result, warning = _with_a_failed_check("side_by_side_check", "side_by_side_slower", "--size", "16M", "--inits", "zero",
                                           "--reps", "2", "--repeat", "0", "--limit-reps", "1", "--strategies",
                                           "new[],malloc+memset,mmap+memset", "--side-by-side", "3")
    assert "every row is measured alone from here" in warning
    strategies = _samples(result.stdout, "strategy")
    assert all(s["metrics"]["side_by_side"] == 1 for s in strategies)
    counts = {}
    for sample in strategies:
        counts[sample["case"]["strategy"]] = counts.get(sample["case"]["strategy"], 0) + 1
    assert all(n == 2 for n in counts.values()), counts  # the batch's other rows measured again, alone


def test_rows_side_by_side_after_a_main_runs_check_each_count_their_own_faults():
    """--side-by-side-checked (an allocator's run after a main run whose check held): no check of its
    own, every round's one-thread rows of a page size at once, each in a process of its own, its
    faults its own (a 32 MiB mmap + memset is 8,192 faults, not the batch's 24,576)."""
    result = run_probe("bigarray", "--size", "32M", "--inits", "zero", "--reps", "2", "--repeat", "0", "--limit-reps", "1",
                       "--strategies", "new[],malloc+memset,mmap+memset", "--side-by-side", "3", "--side-by-side-checked")
    assert result.returncode == 0, result.stderr
    assert not _samples(result.stdout, "side_by_side_check")
    [width] = _samples(result.stdout, "side_by_side")
    assert width["metrics"] == {"rows": 3, "checked_by_main_run": True}
    base = [s for s in _samples(result.stdout, "strategy") if " [" not in s["case"]["strategy"]]
    assert len(base) == 6 and all(s["metrics"]["side_by_side"] == 3 and s["metrics"]["verified"] for s in base)
    pages = (32 << 20) // 4096
    for sample in base:
        if sample["case"]["strategy"] == "mmap + memset" and sample["metrics"]["minor_faults"] is not None:
            assert sample["metrics"]["minor_faults"] == pytest.approx(pages, rel=0.02), sample


def test_the_side_by_side_rows_are_marked_the_check_said_and_followed_by_the_allocators_runs():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import _side_by_side_flags, notes, tables

    def row(name, rep, seconds, beside):
        sample = _strategy_sample(rep, seconds, {})
        sample["case"]["strategy"] = name
        sample["metrics"].update(free_s=0.1, minor_faults=100, system_s=0.1, huge_fraction=0.0, verified=True,
                                 side_by_side=beside)
        return sample
    width = {"case": {"part": "side_by_side", "asked": 0, "cpus": 16}, "metrics": {"rows": 3, "checked_by_main_run": False}}
    check = {"case": {"part": "side_by_side_check", "strategy": "new[]", "init": "zero", "rep": 0},
             "metrics": {"alone_s": 16.0, "beside_s": 16.8, "rows": ["new[]", "std::vector", "mmap + memset"],
                         "rows_elapsed_s": [16.8, 17.0, 16.5], "kept": True}}
    samples = [width, check, row("new[]", 0, 16.0, 1), row("std::vector", 0, 17.0, 3), row("mmap + memset", 0, 16.5, 3),
               row("make_big_array auto", 0, 0.6, 1)]
    summary = summarize(samples)
    beside = {r["strategy"]: r["side_by_side"] for r in summary["rows"]}
    assert beside == {"new[]": 1, "std::vector": 3, "mmap + memset": 3, "make_big_array auto": 1}
    assert summary["side_by_side"]["rows"] == 3 and summary["side_by_side"]["check"]["kept"] is True
    [(_, _, cells)] = [t for t in tables(summary) if "zero initialization" in t[0]]
    names = [c[1] for c in cells]
    assert "std::vector ‖" in names and "new[]" in names and "make_big_array auto" in names
    lines = notes(summary)
    assert any(line.startswith("‖ measured side by side, up to 3 at once") and "mmap + memset, std::vector" in line
               and "3 of 16 CPUs" in line for line in lines), lines
    assert any("new[] (zero) took 16.000 s alone and 16.800 s beside 2 other rows (1.05×)" in line
               and "kept" in line for line in lines), lines
    assert _side_by_side_flags(samples) == ["--side-by-side", "3", "--side-by-side-checked"]
    check["metrics"]["kept"] = False
    assert _side_by_side_flags(samples) == ["--side-by-side", "1"]
    assert any("every row was measured alone after it" in line for line in notes(summarize(samples)))
    assert _side_by_side_flags([width]) == []  # no check made: an allocator's run makes its own
    # A run where every row was alone and nothing checked says nothing of it.
    alone = {**width, "metrics": {"rows": 1, "checked_by_main_run": False}}
    assert summarize([alone, row("new[]", 0, 16.0, 1)])["side_by_side"] is None


def test_serial_rows_are_measured_on_a_part_scaled_and_checked_once_against_the_whole():
    """--serial-part 64M on a 256 MiB array: the rows that write from one thread are measured on 64 MiB
    (each sample says so: measured_bytes, scaled_by 4; its faults are the part's), the parallel row
    on the whole array; the run's first serial row is measured whole for its first repetition and
    once on its part (the check, kept when the scaled part is within 1.15× of the whole)."""
    result = run_probe("bigarray", "--size", "256M", "--inits", "zero", "--reps", "2", "--repeat", "0", "--limit-reps", "1",
                       "--strategies", "new[],mmap+memset,mmap+parallel memset", "--side-by-side", "1",
                       "--serial-part", "64M")
    assert result.returncode == 0, result.stderr
    [check] = _samples(result.stdout, "serial_part_check")
    metrics = check["metrics"]
    assert metrics["measured_bytes"] == 64 << 20 and metrics["scaled_by"] == 4
    assert metrics["scaled_s"] == pytest.approx(4 * metrics["part_s"])
    assert metrics["kept"] == (max(metrics["whole_s"] / metrics["scaled_s"], metrics["scaled_s"] / metrics["whole_s"]) <= metrics["within"])
    strategies = _samples(result.stdout, "strategy")
    assert all(s["metrics"]["verified"] and s["case"]["size_bytes"] == 256 << 20 for s in strategies)
    checked_first = [s for s in strategies if s["case"]["strategy"] == check["case"]["strategy"] and s["case"]["rep"] == 0]
    assert len(checked_first) == 1 and "measured_bytes" not in checked_first[0]["metrics"]
    for sample in strategies:
        name, m = sample["case"]["strategy"], sample["metrics"]
        if "parallel" in name or sample is checked_first[0] or not metrics["kept"]:
            if "parallel" in name:
                assert "measured_bytes" not in m
            continue
        assert m["measured_bytes"] == 64 << 20 and m["scaled_by"] == 4, sample
        if name == "mmap + memset" and m["minor_faults"] is not None:
            assert m["minor_faults"] == pytest.approx((64 << 20) // 4096, rel=0.02), sample
    counts = {}
    for sample in strategies:
        counts[sample["case"]["strategy"]] = counts.get(sample["case"]["strategy"], 0) + 1
    assert all(n == 2 for n in counts.values()), counts


def test_a_failed_serial_part_check_measures_every_serial_row_whole_from_then_on():
    """The check failed on purpose (MEMCOST_INJECT_FAILURE=serial_part_check): a warning, and no row
    measured on a part after it."""
    result, warning = _with_a_failed_check("serial_part_check", "serial_part_off", "--size", "128M", "--inits", "zero",
                                           "--reps", "2", "--repeat", "0", "--limit-reps", "1", "--strategies",
                                           "new[],mmap+memset", "--side-by-side", "1", "--serial-part", "64M")
    assert "measured on the whole array from here" in warning and "on 64 MiB of the array" in warning
    assert not any("measured_bytes" in s["metrics"] for s in _samples(result.stdout, "strategy"))


def test_rows_on_a_part_are_scaled_marked_and_said_and_the_allocators_follow_the_check():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import _serial_part_flags, notes, tables

    def row(name, rep, seconds, part):
        sample = _strategy_sample(rep, seconds, {})
        sample["case"].update(strategy=name, size_bytes=32 << 30)
        sample["metrics"].update(free_s=0.25, minor_faults=2_097_152, system_s=3.0, user_s=1.0, huge_fraction=0.0,
                                 verified=True)
        if part:
            sample["metrics"].update(measured_bytes=8 << 30, scaled_by=4.0)
        return sample
    check = {"case": {"part": "serial_part_check", "strategy": "new[]", "init": "zero", "rep": 0},
             "metrics": {"whole_s": 16.0, "part_s": 4.1, "measured_bytes": 8 << 30, "scaled_by": 4.0, "scaled_s": 16.4,
                         "kept": True}}
    samples = [check, row("new[]", 0, 16.0, False), row("new[]", 1, 4.0, True), row("std::vector", 0, 4.2, True),
               row("make_big_array auto", 0, 0.6, False)]
    summary = summarize(samples)
    rows = {r["strategy"]: r for r in summary["rows"]}
    assert rows["std::vector"]["median_s"] == pytest.approx(16.8) and rows["std::vector"]["faults"] == 8_388_608
    assert rows["std::vector"]["free_s"] == pytest.approx(1.0) and rows["std::vector"]["measured_bytes"] == 8 << 30
    assert rows["std::vector"]["gb_per_s"] == pytest.approx((32 << 30) / 16.8 / 1e9)
    assert rows["new[]"]["median_s"] == pytest.approx(16.0) and rows["make_big_array auto"]["measured_bytes"] is None
    [(_, _, cells)] = [t for t in tables(summary) if "zero initialization" in t[0]]
    names = [c[1] for c in cells]
    assert "std::vector †" in names and "new[] †" in names and "make_big_array auto" in names
    said = "\n".join(notes(summary))
    assert "† measured on the first 8 GiB of the 32 GiB array, and scaled ×4" in said
    assert "serial-part check: new[] (zero) took 16.000 s on the whole array and 16.400 s scaled from 8 GiB (1.02×)" in said
    assert _serial_part_flags(samples) == ["--serial-part-checked"]
    assert _serial_part_flags([{**check, "metrics": {**check["metrics"], "kept": False}}]) == ["--serial-part", "0"]
    assert _serial_part_flags([]) == []


def test_the_repeat_scenarios_serial_variants_run_on_the_part_and_are_scaled(tmp_path):
    """--serial-part 64M on 256 MiB: std::vector and malloc + memset iterate on 64 MiB (16,384 fresh
    pages an iteration: above glibc's largest mmap threshold, 32 MiB, each is a fresh mapping; scaled
    to 65,536 in the summary, marked †); the other variants and the floor on the whole array."""
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", "--size", "256M", "--reps", "1", "--repeat", "2",
                         "--strategies", "make_big_array auto", "--inits", "zero", "--no-allocators", "--serial-part", "64M")
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "bigarray.json")
    raw = {s["case"]["variant"]: s["metrics"] for s in document["samples"] if s["case"]["part"] == "repeat"}
    summary = {r["variant"]: r for r in document["summary"]["repeat"]}
    for name in ("std::vector", "malloc + memset"):
        assert raw[name]["measured_bytes"] == 64 << 20 and raw[name]["scaled_by"] == 4, raw[name]
        assert summary[name]["measured_bytes"] == 64 << 20
        assert summary[name]["faults_per_iteration"] == pytest.approx(256 * 1024 * 1024 // 4096, rel=0.02)
    assert all("measured_bytes" not in m for name, m in raw.items() if name not in ("std::vector", "malloc + memset"))
    assert "std::vector †" in result.stdout and "† measured on the first 64 MiB of the 256 MiB array" in result.stdout


def test_serial_part_zero_measures_every_row_whole_and_an_allocators_run_takes_it(tmp_path):
    """--serial-part 0 (every row on the whole array: what an allocator's run gets after a failed
    check) is accepted by the front end and the probe alike."""
    result = run_memcost("--results-dir", str(tmp_path), "bigarray", "--size", "128M", "--reps", "1", "--repeat", "0",
                         "--strategies", "vector", "--inits", "zero", "--no-allocators", "--serial-part", "0")
    assert result.returncode == 0, result.stderr
    probe = run_probe("bigarray", "--size", "128M", "--reps", "1", "--repeat", "0", "--limit-reps", "1", "--strategies",
                      "malloc + memset", "--inits", "zero", "--libc-only", "--serial-part", "64M", "--serial-part", "0")
    assert probe.returncode == 0, probe.stderr
    assert not _samples(probe.stdout, "serial_part_check")
    assert not any("measured_bytes" in s["metrics"] for s in _samples(probe.stdout, "strategy"))
