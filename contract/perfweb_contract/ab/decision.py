"""The decision of an A/B measurement: each round's statistic, the speed-up and its always-valid
interval, each arm's warm-up, the verdict and when to stop adding rounds.

Each round runs one baseline and one candidate arm back to back. Its statistic is robust to
a busy host: on a shared 2-core host a third or more of a round's requests are preempted
and wait a neighbour's time slice (1 ms requests took 5 - 15 ms; a mean followed them, and
a 6x faster fix measured 0.57x - 23x in CI). For inference it is each arm's median request
latency (what serving is judged by, and robust up to half the requests preempted); for
training the trimmed mean of the settled steps (the middle 60%: a loop fed by DataLoader
workers is bursty, a few near-zero steps from the prefetch queue and then a wait, and a
median jumps between the two modes from round to round). Each
round's log ratio, baseline over candidate, is one observation; the speed-up is their
geometric mean. Its interval is a confidence sequence (`maths.mixture_half_width`): valid at
every round at once, so the engine looks after each round and stops as soon as it decides,
at 5% error over the whole job whatever the number of looks, and with more power than a
per-look correction for a large effect that every round shows. A spread much smaller than
the arms' own step-to-step noise is not believed (WITHIN_SHARE: 3 rounds can agree by
chance; their steps' spread still shows).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from perfweb_contract.ab.maths import (
    MAX_LOG_HALF_WIDTH,
    median_log_variance,
    mixture_half_width,
    trimmed_log_variance,
    trimmed_mean,
)
from perfweb_contract.ab.results import (
    AGREEMENT_RTOL,
    AGREEMENT_TOP1_MIN,
    INFERENCE,
    KINDS,
    LOSS_TOLERANCE,
    STOP_DECIDED,
    STOP_ROUND_LIMIT,
    STOP_TIME_LIMIT,
    TRAINING,
    UNKNOWN_KIND,
    Comparison,
    OutputAgreement,
    Round,
    arm_metrics,
    combined_kind,
    final_verdict,
    loss_parity,
    output_agreement,
)
from perfweb_contract.verdicts import FASTER, INCONCLUSIVE, NO_DIFFERENCE, SLOWER

# A difference smaller than this is within what interleaved rounds on a shared host can
# resolve, whatever the interval says: 2% of step time.
MIN_EFFECT = 0.02
# The confidence of the interval, over all the rounds a job looks at.
LEVEL = 0.95
# "No measurable difference" is a claim too: the whole 95% interval must lie within 1 ± 5%.
EQUIVALENCE = 0.05
# The share of a training round's steps left out at each end before averaging.
TRIM = 0.2
INTERVAL = "always valid, any number of rounds"
# The spread of effects the confidence sequence is most sensitive to, in round standard
# deviations (the mixture's scale): 5 decides a consistent 3x effect in 3 rounds and costs
# little for small ones (the half-width at 10 rounds is 1.2x the best scale's).
MIXTURE_SCALE = 5.0
# The rounds' spread is believed down to this share of the variance the arms' own steps give
# a round (half their standard deviation), never below: 3 rounds can agree by chance. Not
# all of it: the median of a round whose requests a busy host preempted a third of the time
# moves less than its steps' spread says (6 rounds of int8 on a loaded host: log speed-ups
# within 0.1 of each other, the steps' own noise 0.55).
WITHIN_SHARE = 0.25
# A step slower than the settled median by this many robust deviations is still warming up,
SETTLE_FENCE = 3.0
# and one this many times the median is warm-up wherever it falls (a compilation: a busy
# host's preemption costs a few time slices, 2 - 15 ms measured beside 1 ms requests).
WARMUP_GROSS = 50.0


def round_statistic(step_s: Sequence[float], *, kind: str) -> float:
    """One arm's figure for a round: the median request latency for inference, the trimmed
    mean step time (middle 60%) otherwise (the module's docstring says why)."""
    if kind == INFERENCE:
        return statistics.median(step_s)
    return trimmed_mean(step_s, TRIM)


def statistic_name(kind: str) -> str:
    """`round_statistic` in words, as the CLI and the job page print it."""
    if kind == INFERENCE:
        return "median time per request"
    return "trimmed mean (middle 60%) time per step"


def round_log_speedup(round_: Round) -> float:
    """log(baseline statistic / candidate statistic) of one round (> 0: candidate faster)."""
    base = round_statistic(round_.baseline, kind=round_.kind)
    return math.log(base / round_statistic(round_.candidate, kind=round_.kind))


def statistic_log_variance(step_s: Sequence[float], *, kind: str) -> float:
    """The variance of the log of `round_statistic` from the arm's own step-to-step noise."""
    if kind == INFERENCE:
        return median_log_variance(step_s)
    return trimmed_log_variance(step_s, TRIM)


def _within_variance(round_: Round) -> float:
    return statistic_log_variance(round_.baseline, kind=round_.kind) + statistic_log_variance(
        round_.candidate, kind=round_.kind
    )


def speedup_interval(
    rounds: Sequence[Round], *, level: float = LEVEL
) -> tuple[float, float, float]:
    """(speed-up, low, high): the geometric mean of the rounds' speed-ups and its always-valid
    `level` interval (the module's docstring). Needs at least 2 rounds; with few rounds the
    interval is unbounded (MAX_LOG_HALF_WIDTH either way)."""
    if len(rounds) < 2:
        raise ValueError("an interval needs at least 2 rounds: one cannot show the drift")
    logs = [round_log_speedup(r) for r in rounds]
    centre = statistics.fmean(logs)
    squares = math.fsum((x - centre) ** 2 for x in logs)
    within = statistics.fmean(_within_variance(r) for r in rounds)
    squares = max(squares, WITHIN_SHARE * (len(logs) - 1) * within)
    half = mixture_half_width(
        n=len(logs), sum_squares=squares, alpha=1.0 - level, scale=MIXTURE_SCALE
    )
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def resolvable_effect(*, round_sd: float, rounds: int, level: float = LEVEL) -> float:
    """The smallest gain (fraction of step time, like an estimate's) that `rounds` rounds
    whose log speed-ups spread by `round_sd` can tell from none: the interval's half-width
    at that spread, never below MIN_EFFECT. 1.0 where no effect can be resolved."""
    half = mixture_half_width(
        n=rounds,
        sum_squares=(rounds - 1) * round_sd**2,
        alpha=1.0 - level,
        scale=MIXTURE_SCALE,
    )
    if half >= MAX_LOG_HALF_WIDTH:
        return 1.0
    return max(MIN_EFFECT, 1.0 - math.exp(-half))


def expected_round_sd(
    *, step_s: Sequence[float], steps: int, kind: str = TRAINING, drift: float = 0.03
) -> float:
    """The spread of a round's log speed-up expected from a run's own step times: each arm's
    statistic of `steps` steps, plus the drift between two processes on the host (`drift`,
    the A/A rounds of bench/ab_noise.py measured 0.03 - 0.045)."""
    if len(step_s) < 2:
        return math.inf
    sample = list(step_s)
    spread = statistic_log_variance(sample, kind=kind) * len(sample) / max(steps, 1)
    return math.sqrt(2.0 * spread + drift * drift)


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


def settle(step_s: Sequence[float], *, minimum: int = 0) -> tuple[int, float]:
    """(warm-up steps, their one-off cost in seconds) of one arm's step times.

    The warm-up (compilation, autotuning, caches, the allocator) lasts until the step time
    settles: the first step from `minimum` on that is no slower than the last half's median
    by SETTLE_FENCE robust deviations (5% of the median at least), and neither is the median
    of it and the next two (a preempted step on a busy host is not warm-up; the median of
    three passes over it), with no step after it WARMUP_GROSS times the median (a
    compilation, never a time slice). At most half the steps are left out. The cost is what
    those steps took beyond as many settled steps.
    """
    steps = list(step_s)
    if len(steps) < 2:
        return 0, 0.0
    tail = sorted(steps[len(steps) // 2 :])
    centre = statistics.median(tail)
    deviation = statistics.median(abs(x - centre) for x in tail) * 1.4826
    fence = centre + SETTLE_FENCE * max(deviation, 0.05 * centre)
    latest = min(max(minimum, len(steps) // 2), len(steps) - 1)
    gross = [i + 1 for i, x in enumerate(steps) if x > WARMUP_GROSS * centre]
    start = min(max([minimum, *gross]), latest)
    while start < latest and not (
        steps[start] <= fence and statistics.median(steps[start : start + 3]) <= fence
    ):
        start += 1
    cost = max(math.fsum(steps[:start]) - start * centre, 0.0)
    return start, cost


def paired_round(
    *,
    baseline_step_s: Sequence[float],
    candidate_step_s: Sequence[float],
    baseline_loss: Sequence[float] = (),
    candidate_loss: Sequence[float] = (),
    warmup: int = 0,
    kind: str = UNKNOWN_KIND,
    baseline_batch_sizes: Sequence[int] | None = None,
    candidate_batch_sizes: Sequence[int] | None = None,
    baseline_peak_rss_bytes: int | None = None,
    candidate_peak_rss_bytes: int | None = None,
    baseline_cuda_max_allocated_bytes: int | None = None,
    candidate_cuda_max_allocated_bytes: int | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> Round:
    """One round from its two arms' step times, warm-up included: each arm's warm-up is left
    out until its step time settles (`settle`, at least `warmup` steps); the loss is
    compared over the same window of both arms (from the later of the two warm-ups); batch
    sizes (per step, warm-up included), peak memory and the candidate's output summary as
    the arms recorded them."""
    base_start, base_cost = settle(baseline_step_s, minimum=warmup)
    cand_start, cand_cost = settle(candidate_step_s, minimum=warmup)
    length = min(len(baseline_loss), len(candidate_loss))
    start = min(max(base_start, cand_start), length)
    return Round(
        baseline=list(baseline_step_s[base_start:]),
        candidate=list(candidate_step_s[cand_start:]),
        baseline_loss=list(baseline_loss[start:length]),
        candidate_loss=list(candidate_loss[start:length]),
        kind=kind if kind in KINDS else UNKNOWN_KIND,
        baseline_batch_sizes=_sizes(baseline_batch_sizes, base_start),
        candidate_batch_sizes=_sizes(candidate_batch_sizes, cand_start),
        baseline_peak_rss_bytes=baseline_peak_rss_bytes,
        candidate_peak_rss_bytes=candidate_peak_rss_bytes,
        baseline_cuda_max_allocated_bytes=baseline_cuda_max_allocated_bytes,
        candidate_cuda_max_allocated_bytes=candidate_cuda_max_allocated_bytes,
        outputs=dict(outputs) if outputs is not None else None,
        baseline_warmup_steps=base_start,
        candidate_warmup_steps=cand_start,
        baseline_warmup_s=base_cost,
        candidate_warmup_s=cand_cost,
    )


def _sizes(values: Sequence[int] | None, start: int) -> list[int] | None:
    return None if values is None else [int(v) for v in values][start:]


def round_from_arms(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], *, warmup: int = 0
) -> Round:
    """`paired_round` of two arms in the `perfweb_agent.ab.engine.Arm.to_dict()` shape (a JSON
    loss of None is a step whose loss was not finite)."""

    def losses(arm: Mapping[str, Any]) -> list[float]:
        return [math.nan if v is None else float(v) for v in arm.get("loss") or []]

    return paired_round(
        baseline_step_s=baseline["step_s"],
        candidate_step_s=candidate["step_s"],
        baseline_loss=losses(baseline),
        candidate_loss=losses(candidate),
        warmup=warmup,
        kind=combined_kind([baseline.get("kind"), candidate.get("kind")]),
        baseline_batch_sizes=baseline.get("batch_sizes"),
        candidate_batch_sizes=candidate.get("batch_sizes"),
        baseline_peak_rss_bytes=baseline.get("peak_rss_bytes"),
        candidate_peak_rss_bytes=candidate.get("peak_rss_bytes"),
        baseline_cuda_max_allocated_bytes=baseline.get("cuda_max_allocated_bytes"),
        candidate_cuda_max_allocated_bytes=candidate.get("cuda_max_allocated_bytes"),
        outputs=candidate.get("outputs"),
    )


def compare(
    rounds: Sequence[Round],
    *,
    min_effect: float = MIN_EFFECT,
    loss_tolerance: float = LOSS_TOLERANCE,
    top1_min: float = AGREEMENT_TOP1_MIN,
    rel_max: float = AGREEMENT_RTOL,
) -> Comparison:
    """Step times, speed-up, its always-valid 95% interval, each arm's metrics, the results
    check and the verdict of complete rounds (each arm non-empty; at least 2 rounds)."""
    usable = [r for r in rounds if r.baseline and r.candidate]
    if len(usable) < 2:
        raise ValueError(f"{len(usable)} rounds have step times for both arms; 2 are needed")
    baseline = [x for r in usable for x in r.baseline]
    candidate = [x for r in usable for x in r.candidate]
    speedup, ci_low, ci_high = speedup_interval(usable)
    base_mean, cand_mean = statistics.fmean(baseline), statistics.fmean(candidate)
    speed = verdict_of(speedup, ci_low, ci_high, min_effect=min_effect)
    parity = loss_parity(usable, tolerance=loss_tolerance)
    kind = combined_kind([r.kind for r in usable])
    if kind == TRAINING:
        agreement = OutputAgreement(
            visible=False,
            top1_min=top1_min,
            rel_max=rel_max,
            note="outputs not compared for training (the loss parity is)",
        )
    else:
        agreement = output_agreement(
            [r.outputs for r in usable], top1_min=top1_min, rel_max=rel_max
        )
    base_metrics, cand_metrics = _metrics_of(usable, "baseline"), _metrics_of(usable, "candidate")
    return Comparison(
        baseline_step_s=base_mean,
        candidate_step_s=cand_mean,
        baseline_median_s=statistics.median(baseline),
        candidate_median_s=statistics.median(candidate),
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        verdict=final_verdict(speed, parity, agreement),
        measured_gain=1.0 - 1.0 / speedup,
        rounds=len(usable),
        steps_per_arm=min(len(r.baseline) for r in usable),
        loss_parity=parity,
        kind=kind,
        baseline_metrics=base_metrics,
        candidate_metrics=cand_metrics,
        agreement=agreement,
        speed_verdict=speed,
        statistic=statistic_name(kind),
        interval=INTERVAL,
        warmup_cost_s=cand_metrics.warmup_s - base_metrics.warmup_s,
    )


def _metrics_of(rounds: Sequence[Round], arm: str) -> Any:
    metrics = arm_metrics(
        [getattr(r, arm) for r in rounds],
        [getattr(r, f"{arm}_batch_sizes") for r in rounds],
        [getattr(r, f"{arm}_peak_rss_bytes") for r in rounds],
        [getattr(r, f"{arm}_cuda_max_allocated_bytes") for r in rounds],
    )
    metrics.warmup_steps = statistics.fmean(getattr(r, f"{arm}_warmup_steps") for r in rounds)
    metrics.warmup_s = statistics.fmean(getattr(r, f"{arm}_warmup_s") for r in rounds)
    return metrics
