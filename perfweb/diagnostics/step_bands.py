"""A run's step times (or request latencies) as a rolling median with its p10–p90 band, from
the raw steps: what the run page and the comparison page draw instead of a barcode of every
step (`GET /api/v1/runs/<run_id>/steps/bands`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfweb.runs.models import Run
from perfweb.series.selectors import series_read

BANDS = 300  # windows per rank: the band's resolution across the run
MIN_WINDOW = 5  # steps per window at least
RAW_STEPS = 200_000  # steps read per rank; a longer run's band is drawn from its downsampling


def band(t: np.ndarray, v: np.ndarray, *, bands: int = BANDS) -> dict[str, list[float]]:
    """Consecutive windows of equal step count: each window's middle time, median, p10, p90."""
    n = int(v.size)
    if n == 0:
        return {"t": [], "median": [], "p10": [], "p90": []}
    windows = max(1, min(bands, n // MIN_WINDOW))
    edges = np.linspace(0, n, windows + 1).round().astype(np.int64)
    out: dict[str, list[float]] = {"t": [], "median": [], "p10": [], "p90": []}
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi <= lo:
            continue
        p10, median, p90 = np.quantile(v[lo:hi], [0.1, 0.5, 0.9])
        out["t"].append(float(t[(lo + hi - 1) // 2]))
        out["median"].append(float(median))
        out["p10"].append(float(p10))
        out["p90"].append(float(p90))
    return out


def step_bands(*, run: Run, name: str = "step.duration") -> list[dict[str, Any]]:
    """One band per rank (device `rank:N`) of the run's step series."""
    result = []
    for series in series_read(run=run, names=[name], points=RAW_STEPS):
        if not series.device.startswith("rank:") or not len(series.t):
            continue
        result.append({
            "device": series.device, "name": series.name, "unit": series.unit,
            "raw_count": series.raw_count, "from_raw": not series.downsampled,
            "window_steps": max(MIN_WINDOW, series.raw_count // BANDS),
            **band(series.t, series.v),
        })  # fmt: skip
    return result
