"""The scaling fit and verdict on synthetic sweeps with known behaviour: no probe."""

import numpy as np
import pytest

from memcost.analysis import scaling

BINS = 128
MAX = 64000


def _sample(marginal, rep=0, seed=0, noise=0.0, case=None):
    """A sweep whose call at n costs marginal(n) ns, plus Gaussian noise of `noise` × the cost at n = 0."""
    rng = np.random.default_rng(seed + rep)
    calls = MAX // BINS
    n = (np.arange(BINS) + 0.5) * calls
    per_call = marginal(n) + rng.normal(0.0, noise * marginal(np.zeros(1))[0], BINS)
    counts = [4000 * step for step in range(1, 17)]
    cumulative = np.cumsum(per_call * calls)
    totals = [float(cumulative[c // calls - 1]) for c in counts]
    return {"case": {"block_size_bytes": 65536, "placement": "default", "shape": "distinct", "commit": "reserve",
                     "rep": rep, **(case or {})},
            "metrics": {"counts": counts, "alloc_total_ns": totals, "free_total_ns": totals, "mappings": counts,
                        "bin_calls": calls, "alloc_bin_ns": list(per_call * calls), "free_bin_ns": list(per_call * calls),
                        "hint_misses": 0}}


def _summary(marginal, noise=0.0, reps=2):
    return scaling.summarize([_sample(marginal, rep=r, noise=noise) for r in range(reps)])["cases"][0]


def test_a_flat_marginal_cost_is_linear_in_total():
    case = _summary(lambda n: 1500.0 + 0.0 * n, noise=0.03)
    assert case["complexity"] == "O(n)"
    assert "O(n):" in case["verdict"] and "64,000 outstanding" in case["verdict"]
    assert case["exponent_k"] is None and case["exponent_ci"] is None


def test_a_marginal_cost_proportional_to_n_is_quadratic_in_total():
    case = _summary(lambda n: 1500.0 + 0.05 * n, noise=0.03)
    assert case["complexity"] == "O(n²)"
    low, high = case["exponent_ci"]
    assert low <= 1.0 <= high
    assert case["exponent_k"] == pytest.approx(1.0, abs=0.1)


def test_a_logarithmic_marginal_cost_is_n_log_n():
    case = _summary(lambda n: 1000.0 + 400.0 * np.log1p(n / 100.0), noise=0.01)
    assert case["complexity"] == "O(n log n)"


def test_a_marginal_cost_growing_as_n_squared_is_cubic_in_total():
    case = _summary(lambda n: 1500.0 + 1e-6 * n * n, noise=0.03)
    assert case["complexity"] == "O(n³)"
    assert case["exponent_k"] == pytest.approx(2.0, abs=0.1)


@pytest.mark.parametrize("seed", [0, 10, 20, 30, 40])
def test_noisy_data_is_inconclusive_rather_than_wrong(seed):
    case = scaling.summarize([_sample(lambda n: 1500.0 + 0.0 * n, seed=seed, noise=6.0)])["cases"][0]
    assert case["complexity"] == "inconclusive"
    assert "rerun with --reps 5" in case["verdict"]


@pytest.mark.parametrize("seed", range(10))
def test_slight_growth_that_cannot_be_told_from_flat_is_not_called_linear(seed):
    # +15 % over the sweep with noise: neither clearly flat nor clearly growing.
    case = scaling.summarize([_sample(lambda n: 1500.0 + 1500.0 * 0.15 * n / MAX, seed=seed, noise=0.25)])["cases"][0]
    low, high = case["marginal_growth_ci"]
    if case["complexity"] == "O(n)":
        # Called linear only when the growth interval holds zero and stays under the tolerance.
        assert low <= 0.0 and high < scaling.FLAT_TOLERANCE
    else:
        assert case["complexity"] in ("inconclusive", "O(n²)")


# Each shape's per-call cost, the class it must get (or "inconclusive", never another), and
# for power laws the total exponent the class's interval must contain.
SHAPES = {
    "flat": (lambda n: 1500.0 + 0.0 * n, "O(n)", None),
    "log": (lambda n: 1000.0 + 300.0 * np.log(np.maximum(n, 1.0)), "O(n log n)", None),
    "sqrt": (lambda n: 1500.0 + 10.0 * np.sqrt(n), None, 1.5),
    "linear": (lambda n: 1500.0 + 0.05 * n, "O(n²)", None),
    "quadratic": (lambda n: 1500.0 + 1e-6 * n * n, "O(n³)", 3.0),
    "knee": (lambda n: 1500.0 + 0.08 * np.maximum(n - 20000.0, 0.0), "O(n²)", None),
}


def _total_exponents(complexity: str) -> tuple[float, float]:
    low, high = complexity.removeprefix("O(n^").removesuffix(")").split("…n^")
    return float(low), float(high)


@pytest.mark.parametrize("noise", [0.01, 0.05, 0.2])
@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_gets_its_class_or_inconclusive_never_a_wrong_one(shape, noise):
    marginal, expected, exponent = SHAPES[shape]
    for seed in range(3):
        case = scaling.summarize([_sample(marginal, rep=r, seed=10 * seed, noise=noise) for r in range(2)])["cases"][0]
        if case["complexity"] == "inconclusive":
            continue
        if case["complexity"].startswith("O(n^"):
            low, high = _total_exponents(case["complexity"])
            assert exponent is not None and low <= exponent <= high, (shape, noise, case["verdict"])
        else:
            assert case["complexity"] == expected, (shape, noise, case["verdict"])


def test_a_knee_is_reported_where_it_is_with_its_size():
    case = _summary(lambda n: 1500.0 + 0.08 * np.maximum(n - 20000.0, 0.0), noise=0.02)
    assert case["model"] == "knee" and case["complexity"] == "O(n²)"
    assert case["knee_n"] == pytest.approx(20000, rel=0.05)
    assert case["knee_bytes"] == pytest.approx(20000 * 65536, rel=0.05)
    assert "flat to n ≈ " in case["verdict"] and "MB), then linear" in case["verdict"]


def test_noise_wider_than_the_tolerance_is_not_called_flat():
    case = scaling.summarize([_sample(lambda n: 1500.0 + 0.0 * n, noise=6.0)])["cases"][0]
    assert case["complexity"] == "inconclusive"
    assert case["marginal_growth_ci"][1] >= scaling.FLAT_TOLERANCE


def test_summary_fields_and_csv_rows():
    case = _summary(lambda n: 1500.0 + 0.0 * n)
    for field in ("block_size_bytes", "placement", "shape", "commit", "max_count", "alloc_total_s_at_max",
                  "free_total_s_at_max", "marginal_ns_at_max", "exponent_k", "exponent_ci", "verdict",
                  "mappings_at_max"):
        assert field in case
    assert case["max_count"] == 64000 and case["mappings_at_max"] == 64000
    assert case["alloc_total_s_at_max"] == pytest.approx(64000 * 1500e-9, rel=1e-6)
    rows = scaling.csv_rows([_sample(lambda n: 1500.0 + 0.0 * n)])
    assert len(rows) == 16 and rows[-1]["count"] == 64000
    assert set(rows[0]) == {"count", "block_size_bytes", "placement", "shape", "commit", "rep", "alloc_s", "free_s",
                            "mappings"}


def _advice(cases):
    from memcost.experiments import scaling as declared
    return " ".join(declared.interpret({"cases": cases, "headline": scaling.headline(cases)}))


def test_a_knee_that_costs_the_sweep_a_few_percent_is_small_and_advised_against_by_no_one():
    # The 2-vCPU guest's default placement: flat to ≈ 46,000, then +8 % at 64,000 outstanding.
    case = _summary(lambda n: 1500.0 + 1500.0 * 0.08 * np.maximum(n - 46000.0, 0.0) / 18000.0, noise=0.005, reps=3)
    assert case["complexity"] == "O(n²)" and case["model"] == "knee"
    low, high = case["sweep_cost_ratio_ci"]
    assert low <= case["sweep_cost_ratio"] <= high < scaling.WORTH_CHANGING_SWEEP
    assert case["sweep_cost_ratio"] == pytest.approx(1 + 0.08 * 18000 / 2 / 64000, abs=0.01)
    assert case["verdict"].startswith("O(n²) beyond the knee, small (the whole sweep cost 1.01×")
    advice = _advice([case])
    assert "avoid" not in advice and "not worth changing the placement for" in advice


def test_a_call_whose_cost_doubles_over_the_sweep_is_large_and_advised_against():
    case = _summary(lambda n: 1500.0 + 1500.0 * n / 64000.0, noise=0.01, reps=3)
    assert case["complexity"] == "O(n²)"
    # Against the first tenth's cost (1.05× the first call's): 2,250 ns a call on average against 1,575.
    assert case["sweep_cost_ratio"] == pytest.approx(2250 / 1575, abs=0.03)
    assert scaling.worth_changing(case) and ", large (the whole sweep cost 1.4" in case["verdict"]
    advice = _advice([case])
    assert "avoid that placement for many allocations" in advice and "1.4" in advice
