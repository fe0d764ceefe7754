"""A run's step times (or request latencies) as a rolling median with its p10–p90 band, from
the raw steps: what the run page and the comparison page draw instead of a barcode of every
step (`GET /api/v1/runs/<run_id>/steps/bands`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfweb.runs.models import Run
from perfweb.series.selectors import series_read

BANDS = 300  # points per rank: the band's resolution across the run
MIN_WINDOW = 25  # steps per window at least: fewer let a two-speed loop flip the median
RUN_SHARE = 0.02  # and at least this share of the run's steps
SHORT_RUN_WINDOW = 5  # the smallest window, for a run of fewer than 100 steps
RAW_STEPS = 200_000  # steps read per rank; a longer run's band is drawn from its downsampling


def window_steps(n: int) -> int:
    """Steps in each rolling window of a run of `n` steps: `MIN_WINDOW`, or 2% of a long run,
    but at most a quarter of a short one (5 at least), so a minute-old run's median still
    moves."""
    floor = max(SHORT_RUN_WINDOW, min(MIN_WINDOW, n // 4))
    return max(1, min(n, max(floor, round(n * RUN_SHARE))))


def band(t: np.ndarray, v: np.ndarray, *, bands: int = BANDS) -> dict[str, list[float]]:
    """A rolling window of `window_steps` steps centred on `bands` points spread over the
    run: each point's time, and the window's median, p10 and p90. Windows overlap, so the
    median moves smoothly; a window of a few steps (consecutive blocks of n/300, as before)
    made a loop whose steps alternate between two speeds zig-zag between them."""
    n = int(v.size)
    out: dict[str, list[float]] = {"t": [], "median": [], "p10": [], "p90": []}
    if n == 0:
        return out
    width = window_steps(n)
    centres = np.unique(np.linspace(0, n - 1, min(bands, n)).round().astype(np.int64))
    for centre in centres:
        lo = max(0, min(int(centre) - width // 2, n - width))
        p10, median, p90 = np.quantile(v[lo : lo + width], [0.1, 0.5, 0.9])
        out["t"].append(float(t[centre]))
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
        result.append(
            {
                "device": series.device,
                "name": series.name,
                "unit": series.unit,
                "raw_count": series.raw_count,
                "from_raw": not series.downsampled,
                "window_steps": window_steps(int(series.v.size)),
                **band(series.t, series.v),
            }
        )
    return result
