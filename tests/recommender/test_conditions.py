"""Each alert condition, positive and negative, on hand-made windows (pure, no database), and
the cause an alert gives: the rules' own finding on the window, else the condition's."""

from __future__ import annotations

from perfweb_recommender.causes import condition_finding, window_cause
from perfweb_recommender.conditions import Series, Window, evaluate
from perfweb_recommender.rules import REGISTRY
from perfweb_recommender.rules.base import Finding, Fix
from perfweb_recommender.thresholds import GIB

NOW = 1_764_500_000.0
WINDOW_S = 300.0


def series(value: float | list[float], seconds: float = WINDOW_S) -> Series:
    t = [NOW - seconds + i for i in range(int(seconds) + 1)]
    v = value if isinstance(value, list) else [value] * len(t)
    return Series(t=t, v=v[: len(t)])


def window(series_by_key: dict[tuple[str, str], Series], **extra: object) -> Window:
    # type: ignore[arg-type]
    return Window(now=NOW, window_s=WINDOW_S, series=series_by_key, **extra)


def stored(rule_id: str, title: str, gain: float) -> Finding:
    """A run's stored finding, as perfweb.diagnostics gives it back."""
    return Finding(
        id=rule_id,
        title=title,
        risk="data-path",
        confidence=0.9,
        estimated_gain=gain,
        gain_basis="measured",
        evidence=[],
        fix=Fix(text=""),
    )


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
    finding = stored("dataloader.num_workers", "input bound", 0.4)
    verdict = evaluate(kind="finding_gain", threshold=20, window=window({}, finding=finding))
    assert verdict.holds is True
    assert verdict.numbers["gain_pct"] == 40.0


def test_it_does_not_fire_finding_gain_for_a_small_finding() -> None:
    finding = stored("precision.tf32", "tf32 off", 0.05)
    verdict = evaluate(kind="finding_gain", threshold=20, window=window({}, finding=finding))
    assert verdict.holds is False


def test_it_fires_step_regression_on_a_regression_against_the_jobs_baseline_run() -> None:
    regressed = stored("run.regression", "Regressed vs run 0000000001: 12% slower", 0.1)
    verdict = evaluate(
        kind="step_regression",
        threshold=25,
        window=window(
            {("rank:0", "step.duration"): series(0.5)},
            baseline_steps=[0.5] * 50,
            regression=regressed,
        ),
    )
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


def test_a_window_reads_as_the_rules_evidence_with_each_ranks_steps() -> None:
    evidence = window(
        {
            ("rank:1", "step.duration"): series(0.5),
            ("rank:1", "step.data_wait"): series(0.2),
            ("gpu:0", "gpu.utilization"): series(10.0),
        }
    ).evidence()
    assert {(s.device, s.name) for s in evidence.series} == {
        ("rank:1", "step.duration"),
        ("rank:1", "step.data_wait"),
        ("gpu:0", "gpu.utilization"),
    }
    assert len(evidence.steps) == WINDOW_S + 1
    assert {(s.rank, s.duration_s, s.data_wait_s) for s in evidence.steps} == {(1, 0.5, 0.2)}


def test_an_input_bound_window_is_caused_by_the_rules_own_num_workers_finding() -> None:
    waiting = window(
        {
            ("rank:0", "step.duration"): series(0.5),
            ("rank:0", "step.data_wait"): series(0.4),
            ("gpu:0", "gpu.utilization"): series(10.0),
        }
    )
    verdict = evaluate(kind="low_utilization", threshold=30, window=waiting)
    cause = window_cause(kind="low_utilization", window=waiting, verdict=verdict)
    rule = REGISTRY["dataloader.num_workers"].func(waiting.evidence())
    assert cause is not None and rule is not None
    assert (cause.id, cause.title, cause.estimated_gain) == (
        rule.id,
        rule.title,
        rule.estimated_gain,
    )
    assert cause.title == "80% of each step waits for the DataLoader"
    assert cause.fix.text == rule.fix.text


def test_a_busy_loop_is_caused_by_the_condition_itself_with_the_catalogues_fix() -> None:
    idle = window({("gpu:0", "gpu.utilization"): series(10.0)})
    verdict = evaluate(kind="low_utilization", threshold=30, window=idle)
    cause = window_cause(kind="low_utilization", window=idle, verdict=verdict)
    assert cause is not None and cause.id == "gpu.low_utilization"
    assert cause.title == "GPU idle 90% of the last 5 min"
    assert cause.fix.text == REGISTRY["gpu.low_utilization"].fix_text != ""
    assert cause.estimated_gain == 0.0  # an idle share is no promise of speed-up


def test_a_system_condition_is_its_own_cause_and_quiet_when_it_does_not_hold() -> None:
    held = window(
        {
            ("gpu:0", "gpu.utilization"): series(0.0),
            ("gpu:0", "gpu.memory_used"): series(40.0 * GIB),
            ("rank:0", "step.duration"): series(0.5),
            ("rank:0", "step.data_wait"): series(0.4),
        }
    )
    verdict = evaluate(kind="idle_memory_held", threshold=5, window=held)
    cause = window_cause(kind="idle_memory_held", window=held, verdict=verdict)
    assert cause is not None and cause.id == "gpu.idle_memory_held"  # not the input-bound rule
    assert cause.fix.text == "release the GPU (end the process) or finish the job."
    busy = window({("gpu:0", "gpu.utilization"): series(95.0)})
    quiet = evaluate(kind="low_utilization", threshold=30, window=busy)
    assert condition_finding(kind="low_utilization", window=busy, verdict=quiet) is None
