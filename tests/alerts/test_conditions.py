"""Each rule's condition, positive and negative, on hand-made windows (pure, no database)."""

from __future__ import annotations

from perfweb.alerts.conditions import GIB, Finding, RunWindow, Series, evaluate

NOW = 1_764_500_000.0
WINDOW_S = 300.0


def series(value: float | list[float], seconds: float = WINDOW_S) -> Series:
    t = [NOW - seconds + i for i in range(int(seconds) + 1)]
    v = value if isinstance(value, list) else [value] * len(t)
    return Series(t=t, v=v[: len(t)])


def window(series_by_key: dict[tuple[str, str], Series], **extra: object) -> RunWindow:
    return RunWindow(now=NOW, window_s=WINDOW_S, series=series_by_key, **extra)  # type: ignore[arg-type]


def test_it_fires_low_utilization_when_the_gpus_average_below_the_threshold() -> None:
    verdict = evaluate(
        kind="low_utilization",
        threshold=30,
        window=window(
            {("gpu:0", "gpu.utilization"): series(8.0), ("gpu:1", "gpu.utilization"): series(12.0)}
        ),
    )
    assert verdict.holds is True
    assert verdict.numbers["mean_utilization"] == 10.0
    assert "10%" in verdict.summary


def test_it_does_not_fire_low_utilization_on_busy_gpus() -> None:
    verdict = evaluate(
        kind="low_utilization",
        threshold=30,
        window=window({("gpu:0", "gpu.utilization"): series(95.0)}),
    )
    assert verdict.holds is False


def test_it_waits_for_the_samples_to_cover_the_window() -> None:
    verdict = evaluate(
        kind="low_utilization",
        threshold=30,
        window=window({("gpu:0", "gpu.utilization"): series(0.0, seconds=60)}),
    )
    assert verdict.holds is None


def test_it_cannot_tell_low_utilization_without_gpus() -> None:
    verdict = evaluate(
        kind="low_utilization",
        threshold=30,
        window=window({("process", "process.cpu_percent"): series(100.0)}),
    )
    assert verdict.holds is None


def test_it_fires_idle_memory_held_for_an_idle_gpu_holding_memory() -> None:
    verdict = evaluate(
        kind="idle_memory_held",
        threshold=5,
        window=window(
            {
                ("gpu:0", "gpu.utilization"): series(0.0),
                ("gpu:0", "gpu.memory_used"): series(40.0 * GIB),
            }
        ),
    )
    assert verdict.holds is True
    assert verdict.numbers["idle_gpus"]["gpu:0"]["memory_gib"] == 40.0
    assert "40 GiB" in verdict.summary


def test_it_does_not_fire_idle_memory_held_when_the_memory_was_released() -> None:
    verdict = evaluate(
        kind="idle_memory_held",
        threshold=5,
        window=window(
            {
                ("gpu:0", "gpu.utilization"): series(0.0),
                ("gpu:0", "gpu.memory_used"): series(0.2 * GIB),
            }
        ),
    )
    assert verdict.holds is False


def test_it_does_not_fire_idle_memory_held_on_a_busy_gpu() -> None:
    verdict = evaluate(
        kind="idle_memory_held",
        threshold=5,
        window=window(
            {
                ("gpu:0", "gpu.utilization"): series(70.0),
                ("gpu:0", "gpu.memory_used"): series(40.0 * GIB),
            }
        ),
    )
    assert verdict.holds is False


def test_it_fires_stalled_when_no_step_ended_in_the_window() -> None:
    verdict = evaluate(
        kind="stalled",
        threshold=0,
        window=window(
            {("gpu:0", "gpu.utilization"): series(0.0)}, steps_total=1200, last_step_at=NOW - 900
        ),
    )
    assert verdict.holds is True
    assert "15 min ago" in verdict.summary


def test_it_does_not_fire_stalled_while_steps_progress() -> None:
    verdict = evaluate(
        kind="stalled", threshold=0, window=window({}, steps_total=1200, last_step_at=NOW - 2)
    )
    assert verdict.holds is False


def test_it_does_not_call_a_run_without_any_step_stalled() -> None:
    verdict = evaluate(kind="stalled", threshold=0, window=window({}, steps_total=0))
    assert verdict.holds is None


def test_it_fires_throttling_on_thermal_or_power_reasons() -> None:
    verdict = evaluate(
        kind="throttling",
        threshold=50,
        window=window({("gpu:0", "gpu.throttle_reasons"): series(float(0x20 | 0x4))}),
    )
    assert verdict.holds is True
    assert verdict.numbers["reasons"] == ["SW power cap", "SW thermal slowdown"]  # the rule's words


def test_it_ignores_idle_and_sync_boost_throttle_reasons() -> None:
    verdict = evaluate(
        kind="throttling",
        threshold=50,
        window=window({("gpu:0", "gpu.throttle_reasons"): series(float(0x1 | 0x10))}),
    )
    assert verdict.holds is False


def test_it_fires_step_regression_against_the_runs_own_baseline() -> None:
    verdict = evaluate(
        kind="step_regression",
        threshold=25,
        window=window({("rank:0", "step.duration"): series(0.8)}, baseline_steps=[0.5] * 50),
    )
    assert verdict.holds is True
    assert verdict.numbers["worse_pct"] == 60.0


def test_it_does_not_fire_step_regression_within_the_tolerance() -> None:
    verdict = evaluate(
        kind="step_regression",
        threshold=25,
        window=window({("rank:0", "step.duration"): series(0.55)}, baseline_steps=[0.5] * 50),
    )
    assert verdict.holds is False


def test_it_waits_for_a_baseline_before_judging_step_time() -> None:
    verdict = evaluate(
        kind="step_regression",
        threshold=25,
        window=window({("rank:0", "step.duration"): series(5.0)}, baseline_steps=[0.5] * 3),
    )
    assert verdict.holds is None


def test_it_fires_finding_gain_for_a_large_enough_finding() -> None:
    finding = Finding(fix_id="dataloader.num_workers", title="input bound", gain=0.4)
    verdict = evaluate(kind="finding_gain", threshold=20, window=window({}, finding=finding))
    assert verdict.holds is True
    assert verdict.numbers["gain_pct"] == 40.0


def test_it_does_not_fire_finding_gain_for_a_small_finding() -> None:
    finding = Finding(fix_id="precision.tf32", title="tf32 off", gain=0.05)
    verdict = evaluate(kind="finding_gain", threshold=20, window=window({}, finding=finding))
    assert verdict.holds is False


def test_it_fires_step_regression_on_a_regression_against_the_jobs_baseline_run() -> None:
    regressed = Finding(fix_id="run.regression", title="Regressed vs run 0000000001: 12% slower")
    verdict = evaluate(
        kind="step_regression",
        threshold=25,
        window=window(
            {("rank:0", "step.duration"): series(0.5)}, baseline_steps=[0.5] * 50,
            regression=regressed,
        ),
    )  # fmt: skip
    assert verdict.holds is True
    assert verdict.summary.startswith("Regressed vs run 0000000001")
    assert verdict.numbers["vs_baseline_run"] is True


def test_it_keeps_step_regression_quiet_without_either_regression() -> None:
    verdict = evaluate(
        kind="step_regression",
        threshold=25,
        window=window({("rank:0", "step.duration"): series(0.5)}, baseline_steps=[0.5] * 50),
    )
    assert verdict.holds is False
