"""What an A/B measurement measured, and the checks that its results stayed the same.

`Round` holds one round's two arms; `Comparison` the whole measurement, which is stored as
JSON (`to_dict`) and parsed back once (`Comparison.from_dict`), so that every reader — the
engine, `perf-agent ab`, the server and its pages — works on the same dataclasses. A faster
candidate whose outputs (inference) or loss (training) moved beyond tolerance is never
"faster": `final_verdict` is the one place that decides it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from perfweb_contract.ab.maths import quantile
from perfweb_contract.verdicts import CHANGES_RESULTS, FASTER

# What the arms ran, from the agent's fact `workload.kind`.
TRAINING = "training"
INFERENCE = "inference"
UNKNOWN_KIND = "unknown"
KINDS = (TRAINING, INFERENCE, UNKNOWN_KIND)

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
# Why an agreement could not be measured, when no round says more.
NO_OUTPUTS_NOTE = "outputs not captured: no module call seen"


@dataclass
class Round:
    """One round: each arm's settled step times (its warm-up left out), in seconds."""

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
    # each arm's warm-up: the steps left out until its step time settled, and what they
    # cost beyond as many settled steps (`decision.settle`)
    baseline_warmup_steps: int = 0
    candidate_warmup_steps: int = 0
    baseline_warmup_s: float = 0.0
    candidate_warmup_s: float = 0.0


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
    warmup_steps: float = 0.0  # steps left out per round until the step time settled (mean)
    warmup_s: float = 0.0  # what they cost per round beyond as many settled steps (mean)


@dataclass
class OutputAgreement:
    """Whether the candidate's outputs stayed within tolerance of the baseline's.

    The worst round decides: the lowest top-1 agreement and the largest differences of any
    round. `samples` counts the requests compared over all rounds.
    """

    visible: bool = False
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

    visible: bool = False
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
    speedup: float  # of the round statistic (`decision.STATISTIC`), geometric mean of rounds
    ci_low: float
    ci_high: float
    verdict: str
    measured_gain: float  # fraction of step time recovered: 1 - 1 / speedup
    rounds: int
    steps_per_arm: int
    loss_parity: LossParity = field(default_factory=LossParity)
    stopped: str = STOP_DECIDED  # STOP_DECIDED | STOP_ROUND_LIMIT | STOP_TIME_LIMIT
    stop_reason: str = ""  # one sentence: why no more rounds were run
    kind: str = UNKNOWN_KIND
    baseline_metrics: ArmMetrics | None = None
    candidate_metrics: ArmMetrics | None = None
    agreement: OutputAgreement = field(default_factory=OutputAgreement)
    speed_verdict: str = ""  # the verdict of the interval alone, before `final_verdict`
    statistic: str = ""  # what each round compares, in words
    interval: str = ""  # what the interval's 95% covers, in words
    warmup_cost_s: float = 0.0  # the fix's one-off cost: candidate's warm-up less baseline's

    def to_dict(self) -> dict:
        """JSON-ready form (the `perf-agent ab --format json` and job result shape)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> Comparison:
        """A stored `to_dict()` back as a Comparison (keys it does not know are ignored, the
        ones a result stored by an older version lacks take their defaults)."""
        return _parse(cls, body)


def _parse(kind: type, body: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(kind)
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(kind):
        if spec.name not in body:
            continue
        value, hint = body[spec.name], hints[spec.name]
        nested = _dataclass_in(hint)
        if nested is not None and isinstance(value, Mapping):
            value = _parse(nested, value)
        values[spec.name] = value
    for spec in dataclasses.fields(kind):  # a required field an old result lacks
        required = spec.default is spec.default_factory is dataclasses.MISSING
        if required and spec.name not in values:
            values[spec.name] = math.nan
    return kind(**values)


def _dataclass_in(hint: Any) -> type | None:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return next((o for o in options if isinstance(o, type) and dataclasses.is_dataclass(o)), None)


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
        sizes
        for sizes, times in zip(batch_sizes, step_s_by_round, strict=False)
        if sizes is not None and len(sizes) == len(times)
    ]
    every_round = len(known_sizes) == len(step_s_by_round) == len(batch_sizes)
    samples = sum(sum(sizes) for sizes in known_sizes)
    return ArmMetrics(
        latency_p50_s=quantile(steps, 0.50),
        latency_p99_s=quantile(steps, 0.99),
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


def output_agreement(
    per_round_summaries: Sequence[Mapping[str, Any] | None],
    *,
    top1_min: float = AGREEMENT_TOP1_MIN,
    rel_max: float = AGREEMENT_RTOL,
) -> OutputAgreement:
    """The candidate's output agreement over all rounds; the worst round decides.

    A round's summary is the candidate arm's `outputs` (`perfweb_agent.ab.outputs.summary`):
    samples, top1_agreement, max_abs_diff, mean_abs_diff, max_rel_diff, and `mismatched`
    (requests whose output shape or finiteness differ: always outside tolerance). A summary
    of 0 samples carries a `note` saying why; no usable summary gives visible False with it.
    """
    given = [s for s in per_round_summaries if s]
    usable = [s for s in given if _whole(s.get("samples")) > 0]
    if not usable:
        notes = [str(s["note"]) for s in given if s.get("note")]
        note = notes[0] if notes else NO_OUTPUTS_NOTE
        return OutputAgreement(visible=False, top1_min=top1_min, rel_max=rel_max, note=note)
    top1 = [float(s["top1_agreement"]) for s in usable if is_number(s.get("top1_agreement"))]
    worst = {
        name: max(float(s[name]) for s in usable if is_number(s.get(name)))
        if any(is_number(s.get(name)) for s in usable)
        else None
        for name in ("max_abs_diff", "mean_abs_diff", "max_rel_diff")
    }
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


def is_number(value: object) -> bool:
    """A finite int or float (not a bool): what JSON numbers the checks read."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> int:
    return int(value) if is_number(value) else 0  # type: ignore[call-overload]


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


def final_verdict(
    speed_verdict: str, loss_parity: LossParity | None, agreement: OutputAgreement | None
) -> str:
    """The verdict after the results check: a `faster` candidate whose output agreement or
    loss parity is visible and out of tolerance is CHANGES_RESULTS; others are unchanged."""
    if speed_verdict != FASTER:
        return speed_verdict
    for check in (agreement, loss_parity):
        if check is not None and check.visible and check.within_tolerance is False:
            return CHANGES_RESULTS
    return FASTER


def missing_evidence(
    *, kind: str, loss_parity: LossParity | None, agreement: OutputAgreement | None
) -> str:
    """What a faster result lacks to be verified, in words; "" when it has it. A
    verification needs the results check of its kind: output agreement for inference, loss
    parity for training, one of them when the kind is unknown. Without it a lossy fix would
    be verified by leaving the evidence out (a candidate arm posted without `outputs`)."""
    outputs_seen = agreement is not None and agreement.visible
    loss_seen = loss_parity is not None and loss_parity.visible
    if kind == INFERENCE and not outputs_seen:
        note = (agreement.note if agreement is not None else "") or NO_OUTPUTS_NOTE
        return f"the outputs were not compared ({note})"
    if kind == TRAINING and not loss_seen:
        return "the loss was not seen in both arms, so its parity is unknown"
    if kind not in (INFERENCE, TRAINING) and not (outputs_seen or loss_seen):
        return "neither the outputs nor the loss were compared"
    return ""
