from memcost.stats import spread


def test_spread_of_known_values():
    result = spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (result.median, result.q1, result.q3, result.count) == (3.0, 2.0, 4.0, 5)
    assert result.iqr == 2.0


def test_spread_skips_unmeasured_values_and_handles_none_at_all():
    assert spread([None, 2.0, None]).median == 2.0
    assert spread([None]) is None
    assert spread([]) is None
