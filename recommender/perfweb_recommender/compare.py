"""Two runs side by side (pure): their step-time statistics, the facts that differ, the
findings that appeared or disappeared, and the one sentence that says what changed and why.

The server's comparison page and the cross-run regression finding read this; the numbers
come from `perfweb_recommender.analysis.regression` (the interval) and
`perfweb_recommender.analysis.trace_diff` (the operators behind the difference).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from perfweb_recommender.analysis.regression import MedianRatio

EXPLAINED_SHARE = 0.8  # name contributors until they cover this much of the difference
MAX_CONTRIBUTORS = 3
OVER_EXPLAINED = 1.1  # named changes above 110 % of the difference: windows not typical
# Facts that differ between any two runs and say nothing about their speed.
VOLATILE_FACTS = ("pid", "process.pid", "run.started_at", "agent.started_at", "host.boot_time")


def step_stats(durations: Sequence[float]) -> dict[str, float | int] | None:
    """Median, p10, p90, mean (s) and count of a run's steps; None without steps."""
    data = np.asarray([d for d in durations if np.isfinite(d) and d > 0], dtype=np.float64)
    if data.size == 0:
        return None
    p10, median, p90 = np.quantile(data, [0.1, 0.5, 0.9])
    return {
        "median_s": float(median),
        "p10_s": float(p10),
        "p90_s": float(p90),
        "mean_s": float(data.mean()),
        "count": int(data.size),
    }


def facts_diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The facts whose values differ (or that only one run has), by key."""
    rows = []
    for key in sorted(a.keys() | b.keys()):
        if key in VOLATILE_FACTS or key.endswith(".pid"):
            continue
        if a.get(key) != b.get(key):
            rows.append({"key": key, "a": a.get(key), "b": b.get(key)})
    return rows


def findings_diff(a: Sequence[str], b: Sequence[str]) -> dict[str, list[str]]:
    """Finding ids only B has (appeared), only A has (disappeared), and both have."""
    a_ids, b_ids = set(a), set(b)
    return {
        "appeared": sorted(b_ids - a_ids),
        "disappeared": sorted(a_ids - b_ids),
        "both": sorted(a_ids & b_ids),
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:+.3g} ms"


def contributors(
    *, delta_s: float, wait_delta_s: float | None, operators: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What moved the median step, largest first: the DataLoader wait and the operators of
    the trace diff (host self µs per step) that changed the same way as the step."""
    if delta_s == 0:
        return []
    sign = 1.0 if delta_s > 0 else -1.0
    candidates: list[dict[str, Any]] = []
    if wait_delta_s is not None and wait_delta_s * sign > 0:
        candidates.append({"name": "the DataLoader wait", "delta_s": wait_delta_s})
    for row in operators:
        moved = float(row.get("delta_us", 0.0)) / 1e6
        if moved * sign > 0:
            candidates.append({"name": f"`{row['name']}`", "delta_s": moved})
    candidates.sort(key=lambda c: -abs(c["delta_s"]))
    chosen: list[dict[str, Any]] = []
    covered = 0.0
    for candidate in candidates[:MAX_CONTRIBUTORS]:
        chosen.append(candidate)
        covered += candidate["delta_s"]
        if covered / delta_s >= EXPLAINED_SHARE:
            break
    return chosen


def speed_words(ratio: float) -> str:
    """How much faster or slower B is, for B's median over A's: `4.9× faster (80% less
    time)`, `23% slower`, `2.5× slower`. A step 80% shorter is 4.9× as fast, not "80% faster"."""
    if ratio <= 0:
        return "not comparable"
    if ratio < 1:
        return f"{1 / ratio:.2g}× faster ({100 * (1 - ratio):.0f}% less time)"
    if ratio >= 1.5:
        return f"{ratio:.2g}× slower ({ratio:.2g}× the time)"
    return f"{100 * (ratio - 1):.0f}% slower"


def difference_sentence(
    *, ratio: MedianRatio, a_label: str = "A", b_label: str = "B",
    wait_delta_s: float | None = None, operators: Sequence[dict[str, Any]] = (),
    unit: str = "step",
) -> str:  # fmt: skip
    """ "B's median step is 23% slower than A's; 80% of the difference is `aten::copy_`
    (+14 ms) and the DataLoader wait (+4 ms)." — or that they do not differ beyond the noise.
    Faster reads as a speed-up (`4.9× faster`), never as the time saved in percent."""
    interval = f"95% interval {100 * (ratio.low - 1):+.0f}% to {100 * (ratio.high - 1):+.0f}%"
    if not ratio.regressed and not ratio.improved:
        return (
            f"{b_label}'s median {unit} ({ratio.b_median * 1000:.3g} ms) does not differ from "
            f"{a_label}'s ({ratio.a_median * 1000:.3g} ms) beyond the noise ({interval})."
        )
    head = f"{b_label}'s median {unit} is {speed_words(ratio.ratio)} than {a_label}'s"
    head += f" ({interval})"
    delta_s = ratio.b_median - ratio.a_median
    named = contributors(delta_s=delta_s, wait_delta_s=wait_delta_s, operators=operators)
    if not named:
        return head + "."
    share = sum(c["delta_s"] for c in named) / delta_s
    parts = [f"{c['name']} ({_ms(c['delta_s'])})" for c in named]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    if share > OVER_EXPLAINED:  # the profiled steps were not typical ones: no share to quote
        return f"{head}; per step, the profiled windows differ most in {listed}."
    return f"{head}; {100 * share:.0f}% of the difference is {listed}."
