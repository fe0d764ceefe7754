"""Medians, speedup, bootstrap CI and verdict of an A/B measurement."""

from __future__ import annotations

import random

import pytest

from perfweb_agent.ab.stats import (
    STOP_DECIDED,
    STOP_ROUND_LIMIT,
    STOP_TIME_LIMIT,
    Round,
    compare,
    loss_parity,
    stop_of,
    verdict_of,
)
from perfweb_contract.verdicts import FASTER, INCONCLUSIVE, NO_DIFFERENCE, SLOWER, VERDICT_LABELS


def _rounds(base: float, cand: float, *, jitter: float = 0.03, n: int = 5, seed: int = 1):
    rng = random.Random(seed)
    noisy = lambda s: [s * rng.uniform(1 - jitter, 1 + jitter) for _ in range(20)]  # noqa: E731
    return [Round(baseline=noisy(base), candidate=noisy(cand)) for _ in range(n)]


def test_a_clear_gain_is_faster_with_the_interval_above_one() -> None:
    result = compare(_rounds(0.20, 0.10))
    assert result.verdict == FASTER
    assert 1.9 < result.speedup < 2.1 and result.ci_low > 1.8 and result.ci_high < 2.2
    assert abs(result.measured_gain - 0.5) < 0.03


def test_a_clear_loss_is_slower() -> None:
    assert compare(_rounds(0.10, 0.13)).verdict == SLOWER


def test_identical_arms_are_no_measurable_difference() -> None:
    result = compare(_rounds(0.10, 0.10, jitter=0.1))
    assert result.verdict == NO_DIFFERENCE
    assert result.ci_low <= 1.0 <= result.ci_high or abs(result.speedup - 1) < 0.02


def test_a_tiny_but_consistent_gain_below_the_noise_floor_is_no_difference() -> None:
    assert compare(_rounds(0.100, 0.099, jitter=0.001)).verdict == NO_DIFFERENCE


def test_a_drifting_round_widens_the_interval_to_inconclusive() -> None:
    rounds = _rounds(0.10, 0.10, jitter=0.01)
    rounds[2] = Round(baseline=[0.2] * 20, candidate=[0.1] * 20)  # one round on a busy host
    result = compare(rounds)
    assert result.ci_low <= 1.0 and result.verdict == INCONCLUSIVE


def test_synthetic_rounds_narrow_around_one_are_no_measurable_difference() -> None:
    result = compare(_rounds(0.10, 0.10, jitter=0.02, n=6))
    assert 0.95 <= result.ci_low <= 1.0 <= result.ci_high <= 1.05, result
    assert result.verdict == NO_DIFFERENCE


def test_synthetic_rounds_with_a_wide_interval_are_inconclusive_not_refuted() -> None:
    # The shape of the job that was called refuted: 0.95x, 95% CI 0.34-1.93.
    result = compare(_rounds(0.10, 0.105, jitter=0.9, n=3))
    assert result.ci_low < 0.95 or result.ci_high > 1.05, result
    assert result.ci_low < 1.0 < result.ci_high
    assert result.verdict == INCONCLUSIVE
    assert VERDICT_LABELS[INCONCLUSIVE] == "inconclusive \u2014 more rounds needed"


def test_synthetic_rounds_clearly_faster_and_clearly_slower() -> None:
    faster = compare(_rounds(0.20, 0.15, jitter=0.05))
    slower = compare(_rounds(0.15, 0.20, jitter=0.05))
    assert faster.verdict == FASTER and faster.ci_low > 1.0
    assert slower.verdict == SLOWER and slower.ci_high < 1.0


@pytest.mark.parametrize(
    ("interval", "verdict"),
    [
        ((1.0, 0.96, 1.04), NO_DIFFERENCE),  # within 1 +- 5%
        ((1.0, 0.95, 1.05), NO_DIFFERENCE),  # the edges count
        ((1.0, 0.94, 1.04), INCONCLUSIVE),  # a little too wide below
        ((0.95, 0.34, 1.93), INCONCLUSIVE),  # the job that was called refuted
        ((1.015, 1.005, 1.03), NO_DIFFERENCE),  # consistent but under the 2% floor
        ((1.015, 1.005, 1.08), INCONCLUSIVE),  # under the floor, interval too wide to say so
        ((1.3, 1.1, 1.5), FASTER),
        ((0.7, 0.6, 0.8), SLOWER),
    ],
)
def test_the_verdict_function_at_its_edges(interval: tuple, verdict: str) -> None:
    speedup, low, high = interval
    assert verdict_of(speedup, low, high) == verdict


def test_only_an_inconclusive_verdict_asks_for_more_rounds() -> None:
    for decided in (FASTER, SLOWER, NO_DIFFERENCE):
        assert stop_of(verdict=decided, rounds=3, max_rounds=20, out_of_time=False) == STOP_DECIDED
    assert stop_of(verdict=INCONCLUSIVE, rounds=3, max_rounds=20, out_of_time=False) is None
    assert stop_of(verdict=INCONCLUSIVE, rounds=20, max_rounds=20, out_of_time=False) == (
        STOP_ROUND_LIMIT
    )
    assert stop_of(verdict=INCONCLUSIVE, rounds=4, max_rounds=20, out_of_time=True) == (
        STOP_TIME_LIMIT
    )


def test_loss_parity_is_reported_only_when_visible() -> None:
    assert loss_parity(_rounds(0.1, 0.1)).note == "loss not visible"
    rounds = [Round([0.1], [0.1], baseline_loss=[1.0, 0.9], candidate_loss=[1.0, 0.92])]
    parity = loss_parity(rounds)
    assert parity.visible and parity.within_tolerance
    rounds = [Round([0.1], [0.1], baseline_loss=[1.0], candidate_loss=[2.0])]
    assert loss_parity(rounds).within_tolerance is False


def test_the_result_has_the_documented_json_fields() -> None:
    fields = compare(_rounds(0.2, 0.1)).to_dict()
    for name in ("baseline_step_s", "candidate_step_s", "speedup", "ci_low", "ci_high", "verdict"):
        assert name in fields


def test_long_arms_resampled_by_their_normal_limit_agree_with_exact_resampling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfweb_agent.ab import stats as abstats

    rng = random.Random(2)
    bursty = lambda n: [rng.choice([0.001, 0.001, 0.001, 0.03]) for _ in range(n)]  # noqa: E731
    rounds = [Round(baseline=bursty(200), candidate=bursty(200)) for _ in range(4)]
    fast = compare(rounds)
    monkeypatch.setattr(abstats, "EXACT_RESAMPLE_STEPS", 10**9)
    exact = compare(rounds)
    width = exact.ci_high - exact.ci_low
    assert abs(fast.ci_low - exact.ci_low) < 0.1 * width
    assert abs(fast.ci_high - exact.ci_high) < 0.1 * width
    assert fast.speedup == exact.speedup and fast.verdict == exact.verdict
