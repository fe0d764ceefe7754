"""Statistics of an A/B measurement: step times, speedup, bootstrap CI, verdict, loss parity.

The speedup compares mean step times (time per step over the measured window, i.e. the
inverse of throughput). Medians are reported too, but they do not drive the verdict: a loop
fed by DataLoader workers is bursty (a few near-zero steps served from the prefetch queue,
then a wait), and the median of such a window jumps between the two modes from round to
round, while the mean is what the user's training time is made of.

Stdlib only (it runs on the training host next to the user's job). The bootstrap is
two-level: it resamples rounds (each round holds one baseline and one candidate arm, run back
to back), then steps within each chosen arm. Resampling rounds carries the between-round
drift of a shared machine into the interval, so a knob that does nothing is not declared
faster because one round happened to run while something else was busy.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no measurable difference"
INCONCLUSIVE = "inconclusive"
VERDICTS = (FASTER, SLOWER, NO_DIFFERENCE, INCONCLUSIVE)
# What a page or the CLI prints for a verdict.
VERDICT_LABELS = {
    FASTER: FASTER,
    SLOWER: SLOWER,
    NO_DIFFERENCE: NO_DIFFERENCE,
    INCONCLUSIVE: "inconclusive \u2014 more rounds needed",
}

# A difference smaller than this is within what interleaved rounds on a shared host can
# resolve, whatever the interval says: 2% of step time.
MIN_EFFECT = 0.02
# "No measurable difference" is a claim too: the whole 95% interval must lie within 1 ± 5%.
# A wider interval that straddles 1 says only that the rounds could not tell.
EQUIVALENCE = 0.05

# Why an A/B measurement stopped adding rounds.
STOP_DECIDED = "decided"
STOP_ROUND_LIMIT = "round limit"
STOP_TIME_LIMIT = "time limit"
# Relative difference of the candidate's loss from the baseline's that still counts as parity.
LOSS_TOLERANCE = 0.05


@dataclass
class Round:
    """One round: the kept (post-warm-up) step times of each arm, in seconds."""

    baseline: list[float]
    candidate: list[float]
    baseline_loss: list[float] = field(default_factory=list)
    candidate_loss: list[float] = field(default_factory=list)


@dataclass
class LossParity:
    """Whether the candidate's loss stayed within tolerance of the baseline's."""

    visible: bool
    baseline_loss: float | None = None
    candidate_loss: float | None = None
    relative_difference: float | None = None
    tolerance: float = LOSS_TOLERANCE
    within_tolerance: bool | None = None
    note: str = ""


@dataclass
class Comparison:
    """The result of an A/B measurement; `speedup` > 1 means the candidate is faster."""

    baseline_step_s: float  # mean time per measured step
    candidate_step_s: float
    baseline_median_s: float
    candidate_median_s: float
    speedup: float
    ci_low: float
    ci_high: float
    verdict: str
    measured_gain: float  # fraction of step time recovered: 1 - candidate / baseline
    rounds: int
    steps_per_arm: int
    loss_parity: LossParity
    stopped: str = STOP_DECIDED  # STOP_DECIDED | STOP_ROUND_LIMIT | STOP_TIME_LIMIT
    stop_reason: str = ""  # one sentence: why no more rounds were run

    def to_dict(self) -> dict:
        """JSON-ready form (the `perf-agent ab --format json` and job result shape)."""
        return asdict(self)


def speedup_of(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Mean baseline step time over mean candidate step time (> 1: the candidate is faster)."""
    return statistics.fmean(baseline) / statistics.fmean(candidate)


def bootstrap_ci(
    rounds: Sequence[Round], *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the speedup under two-level (round, then step) resampling.

    Only the sum of an arm's resampled steps matters. An arm of at most
    EXACT_RESAMPLE_STEPS steps is resampled step by step; a longer one draws that sum from
    its normal limit (mean k*m, deviation sqrt(k)*sd of the arm's steps, the central limit
    of k draws with replacement): 20 rounds of 1,000 steps take well under a second
    instead of half a minute, which matters because the engine and the server both
    compute it, the engine after every added round.
    """
    rng = random.Random(seed)
    arms = [(_ArmStats.of(r.baseline), _ArmStats.of(r.candidate)) for r in rounds]
    estimates: list[float] = []
    for _ in range(resamples):
        base_sum = base_count = cand_sum = cand_count = 0.0
        for _round in rounds:
            baseline, candidate = arms[rng.randrange(len(arms))]
            base_sum += baseline.resampled_sum(rng)
            cand_sum += candidate.resampled_sum(rng)
            base_count += len(baseline.values)
            cand_count += len(candidate.values)
        estimates.append((base_sum / base_count) / (cand_sum / cand_count))
    estimates.sort()
    tail = (1.0 - level) / 2.0
    return _quantile(estimates, tail), _quantile(estimates, 1.0 - tail)


# Arms up to this many steps are resampled exactly; longer ones by the normal limit.
EXACT_RESAMPLE_STEPS = 32


@dataclass(frozen=True)
class _ArmStats:
    values: Sequence[float]
    mean: float
    deviation: float  # population standard deviation: that of one draw with replacement

    @classmethod
    def of(cls, values: Sequence[float]) -> _ArmStats:
        return cls(values, statistics.fmean(values), statistics.pstdev(values))

    def resampled_sum(self, rng: random.Random) -> float:
        k = len(self.values)
        if k <= EXACT_RESAMPLE_STEPS:
            return math.fsum(rng.choices(self.values, k=k))
        return rng.gauss(k * self.mean, math.sqrt(k) * self.deviation)


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def verdict_of(
    speedup: float,
    ci_low: float,
    ci_high: float,
    *,
    min_effect: float = MIN_EFFECT,
    equivalence: float = EQUIVALENCE,
) -> str:
    """The one verdict function (the A/B engine and the server both call it).

    faster / slower: the whole interval is on one side of 1 and the effect is at least
    `min_effect`. No measurable difference: the whole interval lies within 1 ± `equivalence`.
    Anything else (a wide interval) is inconclusive: more rounds are needed to tell.
    """
    if ci_low > 1.0 and speedup >= 1.0 + min_effect:
        return FASTER
    if ci_high < 1.0 and speedup <= 1.0 / (1.0 + min_effect):
        return SLOWER
    if 1.0 - equivalence <= ci_low and ci_high <= 1.0 + equivalence:
        return NO_DIFFERENCE
    return INCONCLUSIVE


def stop_of(*, verdict: str, rounds: int, max_rounds: int, out_of_time: bool) -> str | None:
    """Why to stop adding rounds, or None to run another: a decided verdict stops at once,
    an inconclusive one at the round limit or when the time bound is reached."""
    if verdict != INCONCLUSIVE:
        return STOP_DECIDED
    if rounds >= max_rounds:
        return STOP_ROUND_LIMIT
    if out_of_time:
        return STOP_TIME_LIMIT
    return None


def stop_sentence(*, stopped: str, verdict: str, rounds: int, max_rounds: int) -> str:
    """The stop reason in one sentence, as the job page and `perf-agent ab` show it."""
    if stopped == STOP_DECIDED:
        return f"stopped after {rounds} rounds: the interval decided ({VERDICT_LABELS[verdict]})"
    if stopped == STOP_ROUND_LIMIT:
        return f"stopped at the round limit ({max_rounds}) with the interval still too wide"
    return f"stopped at the time bound after {rounds} of {max_rounds} rounds, interval too wide"


def paired_round(
    *,
    baseline_step_s: Sequence[float],
    candidate_step_s: Sequence[float],
    baseline_loss: Sequence[float] = (),
    candidate_loss: Sequence[float] = (),
    warmup: int = 0,
) -> Round:
    """One round from its two arms: the kept step times, and the loss over the same step
    window of both arms (the per-step losses include the `warmup` steps)."""
    length = min(len(baseline_loss), len(candidate_loss))
    start = min(warmup, length)
    return Round(
        baseline=list(baseline_step_s),
        candidate=list(candidate_step_s),
        baseline_loss=list(baseline_loss[start:length]),
        candidate_loss=list(candidate_loss[start:length]),
    )


def loss_parity(rounds: Sequence[Round], *, tolerance: float = LOSS_TOLERANCE) -> LossParity:
    """Compare the median loss over the same step window of both arms."""
    baseline = [x for r in rounds for x in r.baseline_loss if math.isfinite(x)]
    candidate = [x for r in rounds for x in r.candidate_loss if math.isfinite(x)]
    if not baseline or not candidate:
        return LossParity(visible=False, tolerance=tolerance, note="loss not visible")
    base, cand = statistics.median(baseline), statistics.median(candidate)
    scale = max(abs(base), 1e-12)
    difference = abs(cand - base) / scale
    return LossParity(
        visible=True,
        baseline_loss=base,
        candidate_loss=cand,
        relative_difference=difference,
        tolerance=tolerance,
        within_tolerance=difference <= tolerance,
        note="median loss over the measured steps",
    )


def compare(
    rounds: Sequence[Round],
    *,
    min_effect: float = MIN_EFFECT,
    loss_tolerance: float = LOSS_TOLERANCE,
    resamples: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Step times, speedup, 95% CI and verdict of complete rounds (each arm non-empty)."""
    usable = [r for r in rounds if r.baseline and r.candidate]
    if not usable:
        raise ValueError("no round has step times for both arms")
    baseline = [x for r in usable for x in r.baseline]
    candidate = [x for r in usable for x in r.candidate]
    speedup = speedup_of(baseline, candidate)
    ci_low, ci_high = bootstrap_ci(usable, resamples=resamples, seed=seed)
    base_mean, cand_mean = statistics.fmean(baseline), statistics.fmean(candidate)
    return Comparison(
        baseline_step_s=base_mean,
        candidate_step_s=cand_mean,
        baseline_median_s=statistics.median(baseline),
        candidate_median_s=statistics.median(candidate),
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        verdict=verdict_of(speedup, ci_low, ci_high, min_effect=min_effect),
        measured_gain=1.0 - cand_mean / base_mean,
        rounds=len(usable),
        steps_per_arm=min(len(r.baseline) for r in usable),
        loss_parity=loss_parity(usable, tolerance=loss_tolerance),
    )
