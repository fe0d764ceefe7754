"""Medians, speedup, bootstrap CI and verdict of an A/B measurement."""

from __future__ import annotations

import random

from agent.abstats import FASTER, NO_DIFFERENCE, SLOWER, Round, compare, loss_parity


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


def test_a_drifting_round_widens_the_interval() -> None:
    rounds = _rounds(0.10, 0.10, jitter=0.01)
    rounds[2] = Round(baseline=[0.2] * 20, candidate=[0.1] * 20)  # one round on a busy host
    result = compare(rounds)
    assert result.ci_low <= 1.0 and result.verdict == NO_DIFFERENCE


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
