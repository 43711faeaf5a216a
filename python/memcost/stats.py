"""Statistics over raw samples: medians and quartiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional



@dataclass(frozen=True)
class Spread:
    median: float
    q1: float
    q3: float
    count: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def as_dict(self) -> dict:
        return {"median": self.median, "q1": self.q1, "q3": self.q3, "n": self.count}


def spread(values: Iterable[Optional[float]]) -> Optional[Spread]:
    """Median and quartiles of the values that were measured (None is skipped)."""
    import numpy as np  # here, not at the top: commands that never summarize (trace of a short command) skip its import
    measured = np.array([v for v in values if v is not None], dtype=float)
    if measured.size == 0:
        return None
    q1, median, q3 = np.percentile(measured, [25, 50, 75])
    return Spread(float(median), float(q1), float(q3), int(measured.size))


def interleaved_order(names: list, rounds: int, seed: int) -> list[list]:
    """Repetitions measured round by round across the rows, each round in its own order, shuffled
    from `seed`: a slow minute of the host lands on every row alike instead of on whichever rows
    ran then. The same seed gives the same order (it is recorded with the results)."""
    import random
    generator = random.Random(seed)
    order = []
    for _ in range(rounds):
        round_order = list(names)
        generator.shuffle(round_order)
        order.append(round_order)
    return order


def bootstrap_median_interval(values: Iterable[float], resamples: int = 2000, confidence: float = 0.95,
                              seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of the median of `values` (paired differences, say)."""
    import numpy as np
    data = np.array(list(values), dtype=float)
    generator = np.random.default_rng(seed)
    medians = np.median(data[generator.integers(0, data.size, size=(resamples, data.size))], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_ratio_of_medians_interval(numerator: Iterable[float], denominator: Iterable[float],
                                        resamples: int = 2000, confidence: float = 0.95,
                                        seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of median(numerator) / median(denominator), each resampled
    on its own: for two groups measured apart, whose values cannot be paired."""
    import numpy as np
    top, bottom = np.array(list(numerator), dtype=float), np.array(list(denominator), dtype=float)
    generator = np.random.default_rng(seed)
    ratios = (np.median(top[generator.integers(0, top.size, size=(resamples, top.size))], axis=1)
              / np.median(bottom[generator.integers(0, bottom.size, size=(resamples, bottom.size))], axis=1))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)
