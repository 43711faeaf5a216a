import pytest

from memcost.stats import spread


def test_spread_of_known_values():
    result = spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (result.median, result.q1, result.q3, result.count) == (3.0, 2.0, 4.0, 5)
    assert result.iqr == 2.0


def test_spread_skips_unmeasured_values_and_handles_none_at_all():
    assert spread([None, 2.0, None]).median == 2.0
    assert spread([None]) is None
    assert spread([]) is None


def _strategy_samples(name: str, times: list[float]) -> list[dict]:
    return [{"case": {"part": "strategy", "strategy": name, "init": "zero", "family": "os", "size_bytes": 1 << 30,
                      "rep": rep},
             "metrics": {"elapsed_s": elapsed, "minor_faults": 262144, "free_s": 0.01, "system_s": 0.1,
                         "verified": True}} for rep, elapsed in enumerate(times)]


def test_rows_within_noise_of_the_fastest_share_its_rank():
    from memcost.analysis.bigarray import summarize
    samples = (_strategy_samples("a", [0.30, 0.24, 0.31, 0.25, 0.30])
               + _strategy_samples("b", [0.29, 0.26, 0.30, 0.27, 0.29])     # the same, within noise
               + _strategy_samples("c", [0.60, 0.50, 0.62, 0.49, 0.61]))    # twice as slow, every round
    rows = {row["strategy"]: row for row in summarize(samples)["rows"]}
    assert rows["a"]["rank"] == 1 and rows["b"]["rank"] == 1 and rows["b"]["tied"]
    assert rows["c"]["rank"] == 3 and not rows["c"].get("tied") and rows["c"]["vs_fastest_interval"][0] > 1.5


def test_a_row_of_another_run_is_set_against_the_fastest_unpaired():
    """An allocator's rows run in a probe of their own: round 3 there is not round 3 here, so its
    ratio to the fastest is of the medians, with an unpaired interval."""
    from memcost.analysis.bigarray import summarize
    samples = (_strategy_samples("a", [0.30, 0.24, 0.31, 0.25, 0.30])
               + _strategy_samples("b", [0.61, 0.50, 0.60, 0.49, 0.62])
               + _strategy_samples("c", [0.25, 0.31, 0.30, 0.30, 0.24]))
    for sample in samples[5:15]:
        sample["case"]["allocator"] = "jemalloc"
    rows = {row["strategy"]: row for row in summarize(samples)["rows"]}
    b, c = rows["b (jemalloc)"], rows["c (jemalloc)"]
    assert b["vs_fastest_paired"] is False and b["vs_fastest"] == pytest.approx(2.0, abs=0.05)
    assert b["vs_fastest_interval"][0] > 1.5 and not b.get("tied")
    # The same times in another order: paired by round it would read 0.8-1.25 a round; unpaired, a tie.
    assert c["tied"] and c["vs_fastest_interval"][0] <= 1.0 <= c["vs_fastest_interval"][1]


def test_the_ranked_table_says_how_sure_each_rank_is():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import tables
    samples = (_strategy_samples("a", [0.30, 0.24, 0.31, 0.25, 0.30])
               + _strategy_samples("c", [0.60, 0.50, 0.62, 0.49, 0.61]))
    caption, header, cells = tables(summarize(samples))[0]
    column = header.index("× fastest (95 %)")
    by_name = {row[1]: row[column] for row in cells}
    assert by_name["a"] == ""  # the fastest
    assert by_name["c"] == "2.00 (1.96–2.08)"  # ratios 2.00, 2.08, 2.00, 1.96, 2.03; seeded bootstrap


def test_a_row_slower_in_every_round_is_tied_only_within_the_sitting_to_sitting_noise():
    """3-4 % slower in every round is a difference this run resolves but the next sitting may
    reverse (TIE_MARGIN): tied. 8-9 % slower in every round is not."""
    from memcost.analysis.bigarray import summarize
    fastest = [0.30, 0.24, 0.31, 0.25, 0.30]
    samples = (_strategy_samples("a", fastest) + _strategy_samples("b", [0.31, 0.25, 0.32, 0.26, 0.31])
               + _strategy_samples("c", [t * 1.085 for t in fastest]))
    rows = {row["strategy"]: row for row in summarize(samples)["rows"]}
    assert rows["b"]["vs_fastest_interval"][0] > 1.0  # shown slower within the run ...
    assert rows["b"]["rank"] == 1 and rows["b"]["tied"]  # ... but by less than a sitting moves
    assert rows["c"]["rank"] == 3 and not rows["c"].get("tied")


def test_ranked_repetitions_taken_again_are_counted_in_the_notes():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import notes
    samples = _strategy_samples("a", [0.30, 0.31, 0.30])
    samples[1]["metrics"]["raced_with_host_reporting"] = [{"elapsed_s": 1.1, "host_reported_bytes": 700 << 20}]
    summary = summarize(samples)
    assert len(summary["retaken_repetitions"]) == 1
    assert any("1 ranked repetition taken again" in line and "700 MiB" in line for line in notes(summary))


def test_the_limit_is_the_fastest_way_to_write_faulted_memory():
    from memcost.analysis.bigarray import machine_limit
    limit = [{"case": {"part": "limit"}, "metrics": {"gb_per_s": value}} for value in (20.0, 22.0, 21.0)]
    fills = [{"case": {"part": "fill", "memory": memory, "method": method}, "metrics": {"gb_per_s": value}}
             for memory, method, value in (("faulted", "nontemporal", 30.0), ("faulted", "nontemporal", 28.0),
                                           ("fresh", "stores", 50.0), ("faulted", "automatic", 99.0))]
    assert machine_limit(limit) == (21.0, "parallel memset")
    assert machine_limit(limit + fills) == (29.0, "parallel nontemporal fill")
    assert machine_limit([]) == (None, None)


def _round_limits(values: list[float], init: str = "zero") -> list[dict]:
    return [{"case": {"part": "round_limit", "init": init, "rep": rep, "threads": 2},
             "metrics": {"gb_per_s": value, "memset_gb_per_s": value, "nontemporal_gb_per_s": value / 2}}
            for rep, value in enumerate(values)]


def test_each_initialization_has_its_own_limit_as_zeros_write_faster():
    """On this machine zeros are written 2-2.5x as fast as any other byte: a zero row is set against
    the rounds' limit for zeros, a value row against the value's, and the table says which."""
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import tables
    samples = (_strategy_samples("a", [0.02] * 5) + _round_limits([70.0] * 5)   # 1 GiB in 20 ms: 53.7 GB/s
               + _round_limits([28.0] * 5, init="value"))
    summary = summarize(samples)
    assert summary["limit_by_init"] == {"zero": 70.0, "value": 28.0}
    row = summary["rows"][0]
    assert row["ratio_to_limit"] == pytest.approx(53.7 / 70.0, abs=0.01) and row["above_limit"] is None
    assert "limit 70.0 GB/s" in tables(summary)[0][0]


def test_a_rows_share_of_the_limit_is_taken_against_its_own_rounds_limit():
    from memcost.analysis.bigarray import summarize
    # 1 GiB in 0.2 s is 5.37 GB/s; the host gave 10 GB/s in rounds 0-2 and 5 in rounds 3-4.
    samples = _strategy_samples("a", [0.2] * 5) + _round_limits([10.0, 10.0, 10.0, 5.0, 5.0])
    row = summarize(samples)["rows"][0]
    assert row["limit_basis"] == "same round"
    assert [round(r, 3) for r in row["ratio_to_limit_samples"]] == [0.537, 0.537, 0.537, 1.074, 1.074]
    assert row["ratio_to_limit"] == pytest.approx(0.537, abs=0.001)
    assert row["above_limit"] is None  # two rounds above 1 are noise, not a row above the limit


def test_a_row_above_its_rounds_limit_without_a_reason_fails_and_is_said():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import analyze, tables
    samples = _strategy_samples("a", [0.05, 0.052, 0.049, 0.051, 0.05]) + _round_limits([10.0, 10.5, 9.5, 10.0, 10.2])
    summary, warnings = analyze(samples)
    row = summary["rows"][0]
    assert row["above_limit"] == {"ratio": pytest.approx(2.1, abs=0.05), "reason": None}
    assert [w["code"] for w in warnings] == ["above_limit"] and "no reason" in warnings[0]["message"]
    _, header, cells = tables(summary)[0]
    assert cells[0][header.index("of limit")].endswith(" !")


def test_a_row_above_the_limit_that_reused_memory_says_so():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import analyze, notes
    samples = _strategy_samples("a", [0.05, 0.052, 0.049, 0.051, 0.05]) + _round_limits([10.0] * 5)
    for sample in samples[:5]:
        sample["metrics"]["minor_faults"] = 12  # the allocator kept the memory an earlier row freed
    summary, warnings = analyze(samples)
    assert summary["rows"][0]["above_limit"]["reason"].startswith("its allocator handed back memory")
    assert not warnings
    assert any(line.startswith("* a (zero): ") and "handed back memory" in line for line in notes(summary))


def test_a_repeat_variant_is_set_against_the_floor_taken_beside_each_iteration():
    from memcost.analysis.bigarray import summarize_repeat
    size = 1 << 30
    # The host's bandwidth halves midway; the pooled variant follows it, as does the floor beside it.
    sample = {"case": {"part": "repeat", "variant": "pooled", "size_bytes": size, "iterations": 7,
                       "floor_method": "nontemporal"},
              "metrics": {"iteration_ns": [400e6, 100e6, 101e6, 99e6, 200e6, 203e6, 198e6],
                          "iteration_faults": [262144] + [0] * 6,
                          "floor_ns": [98e6, 97e6, 99e6, 100e6, 201e6, 199e6, 196e6]}}
    row = summarize_repeat([sample])[0]
    assert row["limit_basis"] == "floor beside each iteration" and row["floor_method"] == "nontemporal"
    assert len(row["ratio_to_limit_samples"]) == 6  # the first iteration's pair is left out
    assert row["ratio_to_limit"] == pytest.approx(0.99, abs=0.01) and row["above_limit"] is None
    # Against one floor taken before all iterations (as before), the slow half would read 0.5.


def test_a_pooled_repeat_row_above_the_limit_is_not_explained_by_its_reuse():
    """Writing memory already faulted is what the limit measures: a repeat row above its floors,
    beyond the noise of the pairs, has no reason (a measuring question), even though it took no faults."""
    from memcost.analysis.bigarray import summarize_repeat
    size = 1 << 30
    sample = {"case": {"part": "repeat", "variant": "pooled", "size_bytes": size, "iterations": 6},
              "metrics": {"iteration_ns": [400e6, 100e6, 101e6, 99e6, 100e6, 102e6], "iteration_faults": [262144] + [0] * 5,
                          "floor_ns": [500e6, 210e6, 215e6, 212e6, 209e6, 214e6]}}
    row = summarize_repeat([sample])[0]
    assert row["ratio_to_limit"] == pytest.approx(2.10, abs=0.01)
    assert row["above_limit"] == {"ratio": row["ratio_to_limit"], "reason": None}
    # Within the noise of its pairs, it is not above.
    sample["metrics"]["floor_ns"] = [500e6, 95e6, 104e6, 97e6, 103e6, 99e6]
    assert summarize_repeat([sample])[0]["above_limit"] is None


def test_a_repeat_row_is_above_the_limit_only_beyond_what_the_floor_resolves_against_itself():
    """The floor's own row (the same fill twice, paired) measures the pairing's resolution: it is
    never above itself, and a variant a few percent above 1, inside that resolution, is not above."""
    from memcost.analysis.bigarray import summarize_repeat
    size = 1 << 30

    def sample(variant, times, floors, is_floor=False):
        return {"case": {"part": "repeat", "variant": variant, "size_bytes": size, "iterations": len(times),
                         "is_floor": is_floor},
                "metrics": {"iteration_ns": times, "iteration_faults": [0] * len(times), "floor_ns": floors}}

    floors = [100e6, 100e6, 100e6, 100e6, 100e6, 100e6, 100e6, 100e6, 100e6, 100e6]
    pooled = sample("pooled", [97e6, 97e6, 96e6, 97e6, 98e6, 97e6, 96e6, 97e6, 98e6, 97e6], floors)
    floor = sample("floor", [95e6, 93e6, 108e6, 97e6, 104e6, 92e6, 106e6, 96e6, 103e6, 94e6], floors, is_floor=True)
    rows = summarize_repeat([pooled, floor])
    assert rows[1]["above_limit"] is None and rows[1]["floor_noise_interval"][1] > 1.03
    assert rows[0]["ratio_to_limit"] == pytest.approx(1.03, abs=0.01) and rows[0]["above_limit"] is None
    # Without the floor's row to say what the pairing resolves, 1.03 with that little spread is above.
    assert summarize_repeat([pooled])[0]["above_limit"] is not None
    # The floor's stray counts on either side: an interval all below 1 resolves no better.
    below = sample("floor", [104e6, 105e6, 106e6, 104e6, 105e6, 106e6, 104e6, 105e6, 106e6, 105e6], floors, is_floor=True)
    assert summarize_repeat([pooled, below])[0]["above_limit"] is None
    # Far beyond the floor's resolution, it is above, without a reason.
    fast = sample("pooled", [50e6] * 10, floors)
    assert summarize_repeat([fast, floor])[0]["above_limit"] == {"ratio": 2.0, "reason": None}


def test_an_allocators_rows_run_apart_are_set_against_the_runs_limit():
    from memcost.analysis.bigarray import summarize
    samples = _strategy_samples("a", [0.2] * 5) + _round_limits([10.0] * 5)
    for sample in samples[:5]:
        sample["case"]["allocator"] = "tcmalloc"  # its own probe, no rounds of limits
    samples += [{"case": {"part": "limit"}, "metrics": {"gb_per_s": 8.0}}]
    row = summarize(samples)["rows"][0]
    assert row["limit_basis"] == "run" and row["ratio_to_limit"] == pytest.approx(5.37 / 8.0, abs=0.01)


def test_auto_tied_only_within_a_wide_noise_says_so():
    from memcost.analysis.bigarray import summarize
    from memcost.experiments.bigarray import notes
    samples = (_strategy_samples("fast", [0.10, 0.10, 0.10, 0.10, 0.10])
               + _strategy_samples("make_big_array auto", [0.09, 0.11, 0.60, 0.65, 0.70]))
    summary = summarize(samples)
    line = next(line for line in notes(summary) if line.strip().startswith("zero:"))
    assert "tied with the fastest within this run's noise" in line and "interval" in line
