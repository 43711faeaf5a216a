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


def test_a_row_slower_in_every_round_is_not_tied_however_close():
    from memcost.analysis.bigarray import summarize
    samples = _strategy_samples("a", [0.30, 0.24, 0.31, 0.25, 0.30]) + _strategy_samples(
        "b", [0.31, 0.25, 0.32, 0.26, 0.31])
    rows = {row["strategy"]: row for row in summarize(samples)["rows"]}
    assert rows["b"]["rank"] == 2 and not rows["b"].get("tied")


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
