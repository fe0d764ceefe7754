"""Is run B slower than run A beyond the noise? A confidence interval on the ratio of their
median step times (or request latencies), from a moving-block bootstrap.

Steps of one run are not independent (a slow stretch lasts several steps), so resampling
single steps would give an interval that is too narrow; resampling blocks of consecutive
steps (block length ~ n^(1/3)) keeps that dependence. The verdict is "regressed" when the
whole interval lies above 1 + `MIN_EFFECT`: the floor stands for the run-to-run variation
(another host, another day) that no within-run interval can see, and is small next to the
interval on short or noisy runs, which decides most cases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
MAX_STEPS = 2000  # steps used per run (evenly spaced), so the bootstrap costs the same always
MIN_STEPS = 20  # fewer steps in either run: no verdict
MIN_EFFECT = 0.02  # the interval must clear +2 %, not merely 0 (run-to-run variation)
SEED = 20  # fixed: the same runs always get the same verdict


@dataclass(frozen=True)
class MedianRatio:
    """B's median over A's, with its bootstrap interval (`low`, `high`)."""

    ratio: float
    low: float
    high: float
    a_median: float
    b_median: float
    a_steps: int
    b_steps: int

    @property
    def regressed(self) -> bool:
        """B is slower than A beyond the noise (the whole interval above 1 + MIN_EFFECT)."""
        return self.low > 1.0 + MIN_EFFECT

    @property
    def improved(self) -> bool:
        """B is faster than A beyond the noise."""
        return self.high < 1.0 / (1.0 + MIN_EFFECT)

    @property
    def change(self) -> float:
        """B's median relative to A's: +0.1 = 10 % slower."""
        return self.ratio - 1.0

    def as_json(self) -> dict[str, float | int | bool]:
        """JSON form."""
        return {
            "ratio": round(self.ratio, 5),
            "low": round(self.low, 5),
            "high": round(self.high, 5),
            "a_median_s": self.a_median,
            "b_median_s": self.b_median,
            "a_steps": self.a_steps,
            "b_steps": self.b_steps,
            "regressed": self.regressed,
            "improved": self.improved,
        }


def _thinned(values: Sequence[float]) -> np.ndarray:
    data = np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=np.float64)
    if data.size > MAX_STEPS:
        data = data[np.linspace(0, data.size - 1, MAX_STEPS).round().astype(np.int64)]
    return data


def _block_medians(data: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` moving-block bootstrap resamples of `data` (in order)."""
    n = data.size
    block = max(1, round(n ** (1 / 3)))
    blocks = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, :n]
    return np.median(data[index], axis=1)


def median_ratio(
    *, a: Sequence[float], b: Sequence[float], resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> MedianRatio | None:  # fmt: skip
    """B's median step over A's with its interval; None when either has under MIN_STEPS
    valid (finite, positive) steps. Both in run order (the blocks are consecutive steps)."""
    a_data, b_data = _thinned(a), _thinned(b)
    if a_data.size < MIN_STEPS or b_data.size < MIN_STEPS:
        return None
    rng = np.random.default_rng(SEED)
    ratios = _block_medians(b_data, rng, resamples) / _block_medians(a_data, rng, resamples)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    a_median, b_median = float(np.median(a_data)), float(np.median(b_data))
    return MedianRatio(
        ratio=b_median / a_median,
        low=float(low),
        high=float(high),
        a_median=a_median,
        b_median=b_median,
        a_steps=len(a),
        b_steps=len(b),
    )
