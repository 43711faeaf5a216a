"""Statistics over raw samples: medians and quartiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np


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
    measured = np.array([v for v in values if v is not None], dtype=float)
    if measured.size == 0:
        return None
    q1, median, q3 = np.percentile(measured, [25, 50, 75])
    return Spread(float(median), float(q1), float(q3), int(measured.size))
