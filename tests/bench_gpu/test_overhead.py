"""Overhead summary: per-mode medians, ratios paired by round, the profiler window's cost."""

from __future__ import annotations

import pytest

from bench.gpu.overhead import MODES, run_order, summarise_overhead, window_of


def _run(
    mode: str,
    number: int,
    step_ms: float,
    window: tuple[int, int] | None = None,
    extra_ms: float = 0.0,
    steps: int = 100,
) -> dict:
    times = [step_ms / 1e3] * steps
    if window:
        for i in range(*window):
            times[i] += extra_ms / 1e3 / (window[1] - window[0])
    return {"mode": mode, "round": number, "step_s": times}


def test_it_rotates_the_order_of_modes_each_round() -> None:
    orders = [run_order(n) for n in range(len(MODES))]
    assert [o[0] for o in orders] == list(MODES)
    assert all(sorted(o) == sorted(MODES) for o in orders)


def test_it_pairs_each_mode_with_the_baseline_of_its_round() -> None:
    runs = [
        _run("baseline", 0, 2.0),
        _run("agent-1hz", 0, 2.02),
        _run("baseline", 1, 4.0),
        _run("agent-1hz", 1, 4.0),
    ]
    modes = summarise_overhead(runs, window=window_of(50))["modes"]
    assert modes["baseline"]["step_ms"] == {"median": 3.0, "min": 2.0, "max": 4.0}
    assert modes["agent-1hz"]["ratio"] == {"median": 1.005, "min": 1.0, "max": 1.01}
    assert modes["agent-1hz"]["overhead_pct"] == pytest.approx(0.5)
    assert "ratio" not in modes["baseline"]


def test_it_prices_the_profiler_window_beyond_ordinary_steps() -> None:
    window = window_of(40)
    runs = [
        _run("profiler", 0, 3.0, window, extra_ms=150.0),
        _run("profiler", 1, 3.0, window, 90.0),
    ]
    cost = summarise_overhead(runs, window=window)["profiler_window"]
    assert cost["windows"] == 2
    assert cost["extra_ms"] == {"median": 120.0, "min": 90.0, "max": 150.0}
    assert cost["typical_step_ms"]["median"] == 3.0


def test_it_leaves_the_window_out_when_no_profiler_run_is_long_enough() -> None:
    runs = [_run("profiler", 0, 3.0, steps=30)]
    assert summarise_overhead(runs, window=window_of(40))["profiler_window"] is None
