"""The agent's step-time overhead from interleaved runs (pure functions; `stages` runs them).

Each run reports its per-step wall times. Per run: the median step after the first
`SKIP_STEPS` (warm-up: cuBLAS handles, allocator growth). Per mode: the median of its runs'
medians with their min-max, and the ratio to the baseline, paired round by round (a round
runs every mode once), as the median with the min-max of the rounds' ratios. The profiler
window's cost: the time its steps took beyond the same number of ordinary steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

SKIP_STEPS = 20


@dataclass(frozen=True)
class ModeSettings:
    """The agent's settings in one mode."""

    interval: float
    profile: bool


MODES: dict[str, ModeSettings | None] = {
    "baseline": None,
    "agent-1hz": ModeSettings(interval=1.0, profile=False),
    "agent-10hz": ModeSettings(interval=0.1, profile=False),
    "profiler": ModeSettings(interval=0.1, profile=True),
}


def run_order(round_number: int) -> list[str]:
    """The modes of one round, rotated by one each round (no mode always runs first)."""
    names = list(MODES)
    shift = round_number % len(names)
    return names[shift:] + names[:shift]


def window_of(warmup_steps: int) -> tuple[int, int]:
    """Step indexes (0-based, end exclusive) a profiler window opened after `warmup_steps`
    steps touches: the opening step, its 5 steps, the closing export, a little slack."""
    return max(0, warmup_steps - 1), warmup_steps + 8


def run_median(steps: list[float], *, skip: int = SKIP_STEPS) -> float:
    """A run's median step (s) after its warm-up."""
    kept = steps[skip:] if len(steps) > skip + 2 else steps
    return statistics.median(kept)


def _spread(values: list[float], scale: float = 1.0, digits: int = 4) -> dict[str, float]:
    return {
        "median": round(statistics.median(values) * scale, digits),
        "min": round(min(values) * scale, digits),
        "max": round(max(values) * scale, digits),
    }


def window_cost(steps: list[float], window: tuple[int, int]) -> dict[str, float] | None:
    """Extra time (ms) the window's steps took over as many ordinary steps, and their median."""
    start, end = window
    inside = steps[start:end]
    outside = steps[end + 10 :] or steps[SKIP_STEPS:start]
    if len(inside) < end - start or len(outside) < 3:
        return None
    typical = statistics.median(outside)
    return {
        "extra_ms": (sum(inside) - len(inside) * typical) * 1e3,
        "window_step_ms": statistics.median(inside) * 1e3,
        "typical_step_ms": typical * 1e3,
    }


def summarise_overhead(runs: list[dict[str, Any]], *, window: tuple[int, int]) -> dict[str, Any]:
    """Per-mode medians and ratios to the baseline, and the profiler window's cost."""
    medians: dict[str, dict[int, float]] = {}
    for run in runs:
        medians.setdefault(run["mode"], {})[run["round"]] = run_median(run["step_s"])
    baseline = medians.get("baseline", {})
    modes: dict[str, Any] = {}
    for mode, by_round in medians.items():
        row: dict[str, Any] = {
            "runs": len(by_round),
            "step_ms": _spread(list(by_round.values()), 1e3),
        }
        paired = [v / baseline[r] for r, v in by_round.items() if r in baseline and baseline[r] > 0]
        if paired and mode != "baseline":
            row["ratio"] = _spread(paired)
            row["overhead_pct"] = round((statistics.median(paired) - 1) * 100, 2)
        modes[mode] = row
    costs = [
        c
        for run in runs
        if run["mode"] == "profiler"
        if (c := window_cost(run["step_s"], window)) is not None
    ]
    profiler = None
    if costs:
        profiler = {
            "windows": len(costs),
            "window_steps": list(window),
            "extra_ms": _spread([c["extra_ms"] for c in costs], digits=2),
            "window_step_ms": _spread([c["window_step_ms"] for c in costs], digits=3),
            "typical_step_ms": _spread([c["typical_step_ms"] for c in costs], digits=3),
        }
    return {"modes": modes, "profiler_window": profiler}
