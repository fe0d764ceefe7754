"""Statistics of an A/B measurement: step times, speedup, bootstrap CI, verdict, loss parity,
and for inference latency percentiles, throughput, memory and output agreement.

The speedup compares mean step times (time per step over the measured window, i.e. the
inverse of throughput). Medians are reported too, but they do not drive the verdict: a loop
fed by DataLoader workers is bursty (a few near-zero steps served from the prefetch queue,
then a wait), and the median of such a window jumps between the two modes from round to
round, while the mean is what the user's training time is made of.

Stdlib only (it runs on the training host next to the user's job). The interval comes from
the rounds (each round holds one baseline and one candidate arm, run back to back): each
round's own speedup is one observation, and Student's t over them carries the between-round
drift of a shared machine into the interval, so a knob that does nothing is not declared
faster because one round happened to run while something else was busy. The engine adds
rounds while the interval is too wide to decide; every such look is paid for (the interval
of each is at 1 - 5% / looks), so looking again until noise clears 1 stays a 5% risk in all.

A faster candidate whose results moved (outputs beyond the agreement tolerance, or the loss
beyond the parity tolerance) gets the verdict CHANGES_RESULTS, never "faster": `final_verdict`
is the one place that decides it, and `before_after_rows` the one before/after table that
`perf-agent ab` and the job page both print.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from perfweb_contract.verdicts import (
    CHANGES_RESULTS,
    FASTER,
    INCONCLUSIVE,
    NO_DIFFERENCE,
    SLOWER,
    VERDICT_LABELS,
)

# What the arms ran, from the agent's fact `workload.kind`.
TRAINING = "training"
INFERENCE = "inference"
UNKNOWN_KIND = "unknown"
KINDS = (TRAINING, INFERENCE, UNKNOWN_KIND)

# A difference smaller than this is within what interleaved rounds on a shared host can
# resolve, whatever the interval says: 2% of step time.
MIN_EFFECT = 0.02
# The confidence of the interval over all the looks a measurement takes (`planned_looks`):
# each look's interval is at 1 - 5% / looks, so adding rounds until the interval happens
# to clear 1 does not turn noise into a verdict more often than 5% of the time in all.
LEVEL = 0.95
# "No measurable difference" is a claim too: the whole 95% interval must lie within 1 ± 5%.
# A wider interval that straddles 1 says only that the rounds could not tell.
EQUIVALENCE = 0.05

# Why an A/B measurement stopped adding rounds.
STOP_DECIDED = "decided"
STOP_ROUND_LIMIT = "round limit"
STOP_TIME_LIMIT = "time limit"
# Relative difference of the candidate's loss from the baseline's that still counts as parity.
LOSS_TOLERANCE = 0.05
# Output agreement a faster candidate must keep (issue 19; per job: agreement_top1/_rtol):
# top-1 agreement of classification-shaped outputs at least this share of rows, and
AGREEMENT_TOP1_MIN = 0.99
# the largest output difference at most this fraction of the baseline output's magnitude.
AGREEMENT_RTOL = 1e-2


@dataclass
class Round:
    """One round: the kept (post-warm-up) step times of each arm, in seconds."""

    baseline: list[float]
    candidate: list[float]
    baseline_loss: list[float] = field(default_factory=list)
    candidate_loss: list[float] = field(default_factory=list)
    kind: str = UNKNOWN_KIND  # training | inference | unknown (`combined_kind` of the arms)
    # per kept step; None where the agent saw no batch size
    baseline_batch_sizes: list[int] | None = None
    candidate_batch_sizes: list[int] | None = None
    baseline_peak_rss_bytes: int | None = None
    candidate_peak_rss_bytes: int | None = None
    baseline_cuda_max_allocated_bytes: int | None = None
    candidate_cuda_max_allocated_bytes: int | None = None
    # the candidate's output-agreement summary against this round's baseline (inference)
    outputs: dict[str, Any] | None = None


@dataclass
class ArmMetrics:
    """What one arm measured over all its rounds (one step = one request for inference)."""

    latency_p50_s: float
    latency_p99_s: float
    throughput_rps: float  # steps (requests) per second: 1 / mean latency
    throughput_sps: float | None  # samples per second; None without every step's batch size
    step_time_s: float  # median
    peak_rss_bytes: int | None
    cuda_max_allocated_bytes: int | None
    steps: int = 0  # kept steps measured, all rounds together


@dataclass
class OutputAgreement:
    """Whether the candidate's outputs stayed within tolerance of the baseline's.

    The worst round decides: the lowest top-1 agreement and the largest differences of any
    round. `samples` counts the requests compared over all rounds.
    """

    visible: bool
    samples: int = 0
    top1_agreement: float | None = None  # None: outputs not classification-shaped
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    max_rel_diff: float | None = None
    top1_min: float = AGREEMENT_TOP1_MIN
    rel_max: float = AGREEMENT_RTOL
    within_tolerance: bool | None = None
    note: str = ""


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
    kind: str = UNKNOWN_KIND
    baseline_metrics: ArmMetrics | None = None
    candidate_metrics: ArmMetrics | None = None
    agreement: OutputAgreement = field(default_factory=lambda: OutputAgreement(visible=False))
    speed_verdict: str = ""  # the verdict of the interval alone, before `final_verdict`
    looks: int = 1  # looks the interval's 95% covers (`planned_looks`)

    def to_dict(self) -> dict:
        """JSON-ready form (the `perf-agent ab --format json` and job result shape)."""
        return asdict(self)


def speedup_of(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Mean baseline step time over mean candidate step time (> 1: the candidate is faster)."""
    return statistics.fmean(baseline) / statistics.fmean(candidate)


def planned_looks(rounds: int, max_rounds: int) -> int:
    """How many times a measurement of `rounds` rounds, extended up to `max_rounds` while
    inconclusive, may look at its interval: once after `rounds`, then after each added one."""
    return max(1, max_rounds - rounds + 1)


def speedup_interval(
    rounds: Sequence[Round], *, speedup: float, level: float = LEVEL
) -> tuple[float, float]:
    """The `level` interval of `speedup` from the spread of the rounds' own speedups.

    Each round's log speedup (log of its baseline mean over its candidate mean) is one
    observation: it carries the within-round noise of both arms and the drift between
    rounds alike. The interval is speedup ×/÷ exp(t · s / √n), with t Student's quantile
    for n - 1 degrees of freedom, which is what keeps a few rounds honest: with 4 rounds t
    is 3.18, not the normal 1.96. s is the rounds' standard deviation, but never less than
    what the arms' own step-to-step noise alone gives a round: 3 rounds can agree by chance,
    their steps' spread still shows. Needs at least 2 rounds.
    """
    if len(rounds) < 2:
        raise ValueError("an interval needs at least 2 rounds: one cannot show the drift")
    logs = [math.log(statistics.fmean(r.baseline) / statistics.fmean(r.candidate)) for r in rounds]
    within = statistics.fmean(
        _log_mean_variance(r.baseline) + _log_mean_variance(r.candidate) for r in rounds
    )
    spread = math.sqrt(max(statistics.variance(logs), within))
    half = t_quantile(1.0 - (1.0 - level) / 2.0, len(logs) - 1) * spread / math.sqrt(len(logs))
    half = min(half, MAX_LOG_HALF_WIDTH)  # JSON has no infinity; e^50 is wide enough to say so
    return speedup * math.exp(-half), speedup * math.exp(half)


# The widest interval reported, in log speedup: a factor of e^50 either way (two rounds whose
# speedups differ 50-fold, looked at 19 times, would otherwise reach past a float).
MAX_LOG_HALF_WIDTH = 50.0


def _log_mean_variance(steps: Sequence[float]) -> float:
    """The variance of the log of the mean of `steps`, from their own spread (delta method:
    var(mean) / mean², with var(mean) = s² / k); 0 for a single step."""
    if len(steps) < 2:
        return 0.0
    mean = statistics.fmean(steps)
    return statistics.variance(steps) / len(steps) / (mean * mean)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: the t with P(T <= t) = p for `df` degrees of freedom (p >= 0.5)."""
    if not 0.5 <= p < 1.0 or df < 1:
        raise ValueError("t_quantile needs 0.5 <= p < 1 and df >= 1")
    tail = 1.0 - p
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:
        low, high = high, high * 2.0
    for _ in range(200):  # bisection: the tail falls monotonically in t
        middle = (low + high) / 2.0
        if _t_upper_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2.0


def _t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0: half the regularized incomplete beta I_{df/(df+t²)}(df/2, 1/2)."""
    return 0.5 * _incomplete_beta(df / (df + t * t), df / 2.0, 0.5)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (evaluated with the modified Lentz method; the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
    keeps x on the side where the fraction converges fast)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _incomplete_beta(1.0 - x, b, a)
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )  # fmt: skip
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return math.exp(log_front) * fraction / a


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
    kind: str = UNKNOWN_KIND,
    baseline_batch_sizes: Sequence[int] | None = None,
    candidate_batch_sizes: Sequence[int] | None = None,
    baseline_peak_rss_bytes: int | None = None,
    candidate_peak_rss_bytes: int | None = None,
    baseline_cuda_max_allocated_bytes: int | None = None,
    candidate_cuda_max_allocated_bytes: int | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> Round:
    """One round from its two arms: the kept step times, and the loss over the same step
    window of both arms (the per-step losses include the `warmup` steps); batch sizes, peak
    memory and the candidate's output summary as the arms recorded them."""
    length = min(len(baseline_loss), len(candidate_loss))
    start = min(warmup, length)
    return Round(
        baseline=list(baseline_step_s),
        candidate=list(candidate_step_s),
        baseline_loss=list(baseline_loss[start:length]),
        candidate_loss=list(candidate_loss[start:length]),
        kind=kind if kind in KINDS else UNKNOWN_KIND,
        baseline_batch_sizes=_sizes(baseline_batch_sizes),
        candidate_batch_sizes=_sizes(candidate_batch_sizes),
        baseline_peak_rss_bytes=baseline_peak_rss_bytes,
        candidate_peak_rss_bytes=candidate_peak_rss_bytes,
        baseline_cuda_max_allocated_bytes=baseline_cuda_max_allocated_bytes,
        candidate_cuda_max_allocated_bytes=candidate_cuda_max_allocated_bytes,
        outputs=dict(outputs) if outputs is not None else None,
    )


def round_from_arms(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], *, warmup: int = 0
) -> Round:
    """`paired_round` of two arms in the `perfweb_agent.ab.engine.Arm.to_dict()` shape (a JSON loss
    of None
    is a step whose loss was not finite)."""

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


def _sizes(values: Sequence[int] | None) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def combined_kind(kinds: Sequence[str | None]) -> str:
    """The one kind the arms agree on (unknown ones aside); UNKNOWN_KIND if none or mixed."""
    known = {k for k in kinds if k in (TRAINING, INFERENCE)}
    return known.pop() if len(known) == 1 else UNKNOWN_KIND


def arm_metrics(
    step_s_by_round: Sequence[Sequence[float]],
    batch_sizes: Sequence[Sequence[int] | None],
    peak_rss: Sequence[int | None],
    cuda_peak: Sequence[int | None],
) -> ArmMetrics:
    """Latency percentiles, throughput and peak memory of one arm over its rounds.

    Each argument holds one entry per round. Samples/s needs every step's batch size (a
    round without them gives None, not a partial sum); the peaks are the largest of the
    rounds that measured one.
    """
    steps = sorted(x for r in step_s_by_round for x in r)
    if not steps:
        raise ValueError("an arm needs at least one step time")
    total_s = math.fsum(steps)
    known_sizes = [
        sizes for sizes, times in zip(batch_sizes, step_s_by_round, strict=False)
        if sizes is not None and len(sizes) == len(times)
    ]  # fmt: skip
    every_round = len(known_sizes) == len(step_s_by_round) and len(batch_sizes) == len(
        step_s_by_round
    )
    samples = sum(sum(sizes) for sizes in known_sizes)
    return ArmMetrics(
        latency_p50_s=_quantile(steps, 0.50),
        latency_p99_s=_quantile(steps, 0.99),
        throughput_rps=len(steps) / total_s if total_s > 0 else 0.0,
        throughput_sps=samples / total_s if every_round and total_s > 0 else None,
        step_time_s=statistics.median(steps),
        peak_rss_bytes=_peak(peak_rss),
        cuda_max_allocated_bytes=_peak(cuda_peak),
        steps=len(steps),
    )


def _peak(values: Sequence[int | None]) -> int | None:
    known = [int(v) for v in values if v is not None]
    return max(known) if known else None


# Why an agreement could not be measured, when no round says more.
NO_OUTPUTS_NOTE = "outputs not captured: no module call seen"


def output_agreement(
    per_round_summaries: Sequence[Mapping[str, Any] | None],
    *,
    top1_min: float = AGREEMENT_TOP1_MIN,
    rel_max: float = AGREEMENT_RTOL,
) -> OutputAgreement:
    """The candidate's output agreement over all rounds; the worst round decides.

    A round's summary is the candidate arm's `outputs` (`perfweb_agent.ab.outputs.summary`):
    samples,
    top1_agreement, max_abs_diff, mean_abs_diff, max_rel_diff, and `mismatched` (requests
    whose output shape or finiteness differ: always outside tolerance). A summary of 0
    samples carries a `note` saying why; no usable summary gives visible False with that note.
    """
    given = [s for s in per_round_summaries if s]
    usable = [s for s in given if _whole(s.get("samples")) > 0]
    if not usable:
        notes = [str(s["note"]) for s in given if s.get("note")]
        note = notes[0] if notes else NO_OUTPUTS_NOTE
        return OutputAgreement(visible=False, top1_min=top1_min, rel_max=rel_max, note=note)
    top1 = [float(s["top1_agreement"]) for s in usable if _number(s.get("top1_agreement"))]
    worst = {
        name: max(float(s[name]) for s in usable if _number(s.get(name)))
        if any(_number(s.get(name)) for s in usable) else None
        for name in ("max_abs_diff", "mean_abs_diff", "max_rel_diff")
    }  # fmt: skip
    samples = sum(_whole(s.get("samples")) for s in usable)
    mismatched = sum(_whole(s.get("mismatched")) for s in usable)
    top1_worst = min(top1) if top1 else None
    within = (
        not mismatched
        and (top1_worst is None or top1_worst >= top1_min)
        and (worst["max_rel_diff"] is None or worst["max_rel_diff"] <= rel_max)
    )
    if mismatched:
        note = f"{mismatched} of {samples} requests changed output shape or finiteness"
    else:
        note = f"the first {samples} requests of {len(usable)} rounds, worst round"
    return OutputAgreement(
        visible=True,
        samples=samples,
        top1_agreement=top1_worst,
        max_abs_diff=worst["max_abs_diff"],
        mean_abs_diff=worst["mean_abs_diff"],
        max_rel_diff=worst["max_rel_diff"],
        top1_min=top1_min,
        rel_max=rel_max,
        within_tolerance=within,
        note=note,
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> int:
    return int(value) if _number(value) else 0  # type: ignore[call-overload]


def final_verdict(
    speed_verdict: str,
    loss_parity: LossParity | Mapping[str, Any] | None,
    agreement: OutputAgreement | Mapping[str, Any] | None,
) -> str:
    """The verdict after the results check: a `faster` candidate whose output agreement or
    loss parity is visible and out of tolerance is CHANGES_RESULTS; others are unchanged."""
    if speed_verdict != FASTER:
        return speed_verdict
    for check in (agreement, loss_parity):
        if _field(check, "visible") and _field(check, "within_tolerance") is False:
            return CHANGES_RESULTS
    return FASTER


def _field(record: object, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


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
    looks: int = 1,
    min_effect: float = MIN_EFFECT,
    loss_tolerance: float = LOSS_TOLERANCE,
    top1_min: float = AGREEMENT_TOP1_MIN,
    rel_max: float = AGREEMENT_RTOL,
) -> Comparison:
    """Step times, speedup, 95% CI, each arm's metrics, the results check and the verdict
    of complete rounds (each arm non-empty; at least 2 rounds). `looks`: how many times the
    measurement may look at its interval (`planned_looks`); each look's interval is at
    1 - 5% / looks, so the 95% holds over all of them."""
    usable = [r for r in rounds if r.baseline and r.candidate]
    if len(usable) < 2:
        raise ValueError(f"{len(usable)} rounds have step times for both arms; 2 are needed")
    baseline = [x for r in usable for x in r.baseline]
    candidate = [x for r in usable for x in r.candidate]
    speedup = speedup_of(baseline, candidate)
    looks = max(1, looks)
    ci_low, ci_high = speedup_interval(usable, speedup=speedup, level=1 - (1 - LEVEL) / looks)
    base_mean, cand_mean = statistics.fmean(baseline), statistics.fmean(candidate)
    speed = verdict_of(speedup, ci_low, ci_high, min_effect=min_effect)
    parity = loss_parity(usable, tolerance=loss_tolerance)
    kind = combined_kind([r.kind for r in usable])
    if kind == TRAINING:
        agreement = OutputAgreement(
            visible=False, top1_min=top1_min, rel_max=rel_max,
            note="outputs not compared for training (the loss parity is)",
        )  # fmt: skip
    else:
        agreement = output_agreement(
            [r.outputs for r in usable], top1_min=top1_min, rel_max=rel_max
        )
    return Comparison(
        baseline_step_s=base_mean,
        candidate_step_s=cand_mean,
        baseline_median_s=statistics.median(baseline),
        candidate_median_s=statistics.median(candidate),
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        verdict=final_verdict(speed, parity, agreement),
        measured_gain=1.0 - cand_mean / base_mean,
        rounds=len(usable),
        steps_per_arm=min(len(r.baseline) for r in usable),
        loss_parity=parity,
        kind=kind,
        baseline_metrics=_metrics_of(usable, "baseline"),
        candidate_metrics=_metrics_of(usable, "candidate"),
        agreement=agreement,
        speed_verdict=speed,
        looks=looks,
    )


def _metrics_of(rounds: Sequence[Round], arm: str) -> ArmMetrics:
    return arm_metrics(
        [getattr(r, arm) for r in rounds],
        [getattr(r, f"{arm}_batch_sizes") for r in rounds],
        [getattr(r, f"{arm}_peak_rss_bytes") for r in rounds],
        [getattr(r, f"{arm}_cuda_max_allocated_bytes") for r in rounds],
    )


# --- the before/after table -------------------------------------------------------------------


def changed_results_note(comparison: Mapping[str, Any]) -> str:
    """Why a CHANGES_RESULTS comparison (`to_dict()`) changed results, with its numbers;
    "" for any other verdict."""
    if comparison.get("verdict") != CHANGES_RESULTS:
        return ""
    reasons = []
    agreement = comparison.get("agreement") or {}
    if agreement.get("visible") and agreement.get("within_tolerance") is False:
        top1, top1_min = agreement.get("top1_agreement"), agreement.get("top1_min")
        if _number(top1) and _number(top1_min) and top1 < top1_min:  # type: ignore[operator]
            reasons.append(f"top-1 agreement {top1:.1%} below the {top1_min:.0%} minimum")
        rel, rel_max = agreement.get("max_rel_diff"), agreement.get("rel_max")
        if _number(rel) and _number(rel_max) and rel > rel_max:  # type: ignore[operator]
            reasons.append(f"max rel. diff {rel:.2e} above the {rel_max:.0e} tolerance")
        if not reasons:
            reasons.append(str(agreement.get("note") or "outputs changed"))
    parity = comparison.get("loss_parity") or {}
    if parity.get("visible") and parity.get("within_tolerance") is False:
        difference, tolerance = parity.get("relative_difference"), parity.get("tolerance")
        if _number(difference) and _number(tolerance):
            reasons.append(f"loss {difference:.1%} from the baseline's, outside {tolerance:.0%}")
    return "; ".join(reasons)


LOWER, HIGHER = "lower", "higher"  # which direction of a metric is the better one


def before_after_rows(comparison: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The before/after table of a comparison (`Comparison.to_dict()`), row by row.

    Inference: latency p50 and p99, throughput (requests/s, samples/s where known), peak
    memory (RSS, CUDA max allocated where known) and output agreement (top-1, max relative
    difference). Training (and an unknown kind): step time, throughput (steps/s, samples/s),
    peak memory and loss parity. Each row: `metric` (label), `key`, display strings
    `before`, `after`, `change`, raw `before_value`/`after_value` (None when not measured)
    and `better`: True / False when the candidate is better / worse by at least MIN_EFFECT
    (for agreement and loss: within / outside tolerance), None when it cannot tell.
    """
    kind = comparison.get("kind") or UNKNOWN_KIND
    base = comparison.get("baseline_metrics") or {}
    cand = comparison.get("candidate_metrics") or {}
    rows: list[dict[str, Any]] = []
    if kind == INFERENCE:
        for name, key in (("latency p50", "latency_p50_s"), ("latency p99", "latency_p99_s")):
            rows.append(_row(name, key, base.get(key), cand.get(key), _duration, LOWER))
        rows.append(
            _row("throughput", "throughput_rps", base.get("throughput_rps"),
                 cand.get("throughput_rps"), _rate("req/s"), HIGHER)
        )  # fmt: skip
    else:
        before, after = comparison.get("baseline_step_s"), comparison.get("candidate_step_s")
        rows.append(_row("step time (mean)", "step_time_mean_s", before, after, _duration, LOWER))
        rows.append(
            _row("throughput", "throughput_steps_per_s", _inverse(before), _inverse(after),
                 _rate("steps/s"), HIGHER)
        )  # fmt: skip
    if base.get("throughput_sps") is not None or cand.get("throughput_sps") is not None:
        rows.append(
            _row("throughput", "throughput_sps", base.get("throughput_sps"),
                 cand.get("throughput_sps"), _rate("samples/s"), HIGHER)
        )  # fmt: skip
    rows.append(
        _row("peak memory (RSS)", "peak_rss_bytes", base.get("peak_rss_bytes"),
             cand.get("peak_rss_bytes"), _bytes, LOWER)
    )  # fmt: skip
    cuda = "cuda_max_allocated_bytes"
    if base.get(cuda) is not None or cand.get(cuda) is not None:
        rows.append(_row("CUDA max allocated", cuda, base.get(cuda), cand.get(cuda), _bytes, LOWER))
    agreement = comparison.get("agreement") or {}
    if kind == INFERENCE or agreement.get("visible"):
        rows.extend(_agreement_rows(agreement))
    if kind != INFERENCE:
        rows.append(_loss_row(comparison.get("loss_parity") or {}))
    return rows


def _row(
    metric: str,
    key: str,
    before: float | None,
    after: float | None,
    show: Any,
    direction: str,
) -> dict[str, Any]:
    change, better = "", None
    if _number(before) and _number(after) and before:
        relative = after / before - 1.0  # type: ignore[operator]
        change = f"{relative:+.1%}"
        gain = -relative if direction == LOWER else relative
        better = True if gain >= MIN_EFFECT else False if gain <= -MIN_EFFECT else None
    return {
        "metric": metric,
        "key": key,
        "before": show(before) if _number(before) else "not measured",
        "after": show(after) if _number(after) else "not measured",
        "change": change,
        "better": better,
        "before_value": before if _number(before) else None,
        "after_value": after if _number(after) else None,
    }


def _agreement_rows(agreement: Mapping[str, Any]) -> list[dict[str, Any]]:
    if not agreement.get("visible"):
        note = agreement.get("note") or NO_OUTPUTS_NOTE
        return [_check_row("output agreement", "agreement", "not measured", None, note, None)]
    rows = []
    top1, top1_min = agreement.get("top1_agreement"), agreement.get("top1_min")
    if _number(top1) and _number(top1_min):
        within = top1 >= top1_min  # type: ignore[operator]
        change = f"{'within' if within else 'below'} the {top1_min:.0%} minimum"
        rows.append(_check_row("top-1 agreement", "top1_agreement", f"{top1:.1%}", top1,
                               change, within))  # fmt: skip
    rel, rel_max = agreement.get("max_rel_diff"), agreement.get("rel_max")
    if _number(rel) and _number(rel_max):
        within = rel <= rel_max  # type: ignore[operator]
        change = f"{'within' if within else 'above'} the {rel_max:.0e} tolerance"
        rows.append(_check_row("max rel. diff", "max_rel_diff", f"{rel:.2e}", rel, change,
                               within))  # fmt: skip
    if agreement.get("within_tolerance") is False and not rows:  # e.g. shapes changed
        note = agreement.get("note") or "outputs changed"
        rows.append(_check_row("output agreement", "agreement", "changed", None, note, False))
    return rows


def _check_row(
    metric: str, key: str, after: str, value: float | None, change: str, better: bool | None
) -> dict[str, Any]:
    return {
        "metric": metric, "key": key, "before": "reference", "after": after,
        "change": change, "better": better, "before_value": None, "after_value": value,
    }  # fmt: skip


def _loss_row(parity: Mapping[str, Any]) -> dict[str, Any]:
    before, after = parity.get("baseline_loss"), parity.get("candidate_loss")
    if not parity.get("visible") or not (_number(before) and _number(after)):
        row = _check_row("loss (median)", "loss", "not visible", None, "", None)
        return {**row, "before": "not visible"}
    within = bool(parity.get("within_tolerance"))
    tolerance = parity.get("tolerance", LOSS_TOLERANCE)
    difference = after / before - 1.0 if before else 0.0
    state = "within" if within else "outside"
    return {
        "metric": "loss (median)", "key": "loss", "before": f"{before:.4g}",
        "after": f"{after:.4g}", "change": f"{difference:+.1%} ({state} {tolerance:.0%})",
        "better": within, "before_value": before, "after_value": after,
    }  # fmt: skip


def _inverse(value: float | None) -> float | None:
    return 1.0 / value if _number(value) and value else None  # type: ignore[operator]


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} \u00b5s"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _rate(unit: str) -> Any:
    def show(value: float) -> str:
        digits = 0 if value >= 100 else 1 if value >= 10 else 2
        return f"{value:,.{digits}f} {unit}"

    return show


def _bytes(value: float) -> str:
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:,.1f} MiB"
