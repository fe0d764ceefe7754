"""Medians, speedup, the rounds' interval and the verdict of an A/B measurement."""

from __future__ import annotations

import math
import random

import pytest

from perfweb_agent.ab.stats import (
    STOP_DECIDED,
    STOP_ROUND_LIMIT,
    STOP_TIME_LIMIT,
    Round,
    compare,
    loss_parity,
    planned_looks,
    stop_of,
    t_quantile,
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


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [(0.975, 1, 12.706), (0.975, 3, 3.182), (0.995, 7, 3.499), (0.975, 30, 2.042),
     (0.999, 2, 22.327), (0.975, 10_000, 1.960)],
)  # fmt: skip
def test_students_quantile_matches_the_published_table(p: float, df: int, table: float) -> None:
    assert t_quantile(p, df) == pytest.approx(table, abs=5e-4)


def test_one_round_cannot_give_an_interval() -> None:
    with pytest.raises(ValueError, match="2 are needed"):
        compare(_rounds(0.2, 0.1, n=1))


def test_every_planned_look_widens_the_interval_and_a_long_job_pays_for_its_looks() -> None:
    rounds = _rounds(0.11, 0.10, jitter=0.05, n=5)
    once, many = compare(rounds), compare(rounds, looks=planned_looks(5, 20))
    assert planned_looks(5, 20) == 16 and planned_looks(5, 5) == 1
    assert once.speedup == many.speedup and many.looks == 16
    assert many.ci_low < once.ci_low < once.speedup < once.ci_high < many.ci_high


def test_rounds_that_agree_by_chance_are_held_to_their_steps_noise() -> None:
    steps = [0.05, 0.15] * 10  # steps spread +-50%, but every round's mean is the same
    rounds = [Round(baseline=list(steps), candidate=[x / 1.1 for x in steps]) for _ in range(3)]
    result = compare(rounds)
    assert result.speedup == pytest.approx(1.1)
    assert result.ci_low < 1.0 and result.verdict == INCONCLUSIVE  # 3 rounds cannot tell


def test_two_wildly_different_rounds_give_a_finite_interval_that_decides_nothing() -> None:
    rounds = [Round(baseline=[1.0] * 5, candidate=[1e-3] * 5), Round([1e-3] * 5, [1.0] * 5)]
    result = compare(rounds, looks=planned_looks(2, 20))
    assert 0.0 < result.ci_low < 1.0 < result.ci_high < math.inf
    assert result.verdict == INCONCLUSIVE


def _job(rng: random.Random, effect: float, *, drift: float, jitter: float, lo: int, hi: int):
    """One simulated engine job on a shared host: every arm runs at a level that drifts by
    `drift` (log sd) from round to round, its steps spread by `jitter`; the candidate is
    `effect` times faster. Rounds are added while inconclusive, as the engine does."""

    def arm(mean: float) -> list[float]:
        level = mean * math.exp(rng.gauss(0.0, drift))
        return [level * rng.uniform(1 - jitter, 1 + jitter) for _ in range(40)]

    rounds: list[Round] = []
    while True:
        rounds.append(Round(baseline=arm(0.012), candidate=arm(0.012 / effect)))
        if len(rounds) >= lo:
            verdict = compare(rounds, looks=planned_looks(lo, hi)).verdict
            if verdict != INCONCLUSIVE or len(rounds) == hi:
                return verdict


def test_a_no_op_knob_on_a_drifting_host_is_almost_never_called_faster() -> None:
    # 3% drift between arms is what bench/ab_noise.py measured on a loaded 2-core host.
    rng = random.Random(7)
    verdicts = [_job(rng, 1.0, drift=0.03, jitter=0.3, lo=4, hi=8) for _ in range(600)]
    assert verdicts.count(FASTER) / len(verdicts) <= 0.025
    assert (verdicts.count(FASTER) + verdicts.count(SLOWER)) / len(verdicts) <= 0.05


def test_a_real_gain_of_fifteen_percent_is_still_verified_on_the_same_host() -> None:
    rng = random.Random(8)
    verdicts = [_job(rng, 1.15, drift=0.03, jitter=0.3, lo=4, hi=8) for _ in range(200)]
    assert verdicts.count(FASTER) / len(verdicts) >= 0.8
    assert SLOWER not in verdicts
