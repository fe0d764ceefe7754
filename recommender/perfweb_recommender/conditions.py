"""The conditions an alert rule can watch: pure functions over one `Window` of a run's samples.

One registered `Condition` per rule kind. Each takes the rule's threshold and a `Window` (the
samples perfweb's alert evaluator read, the run's step baseline and its top findings) and
answers a `Verdict`: holds, does not hold, or cannot tell yet (too little data — the alert
then keeps its state). No I/O here: perfweb.alerts keeps only the state machine, persistence
and delivery.

The conditions and the rules are one engine: they share the thresholds and label tables
(perfweb_recommender.thresholds), a window reads as the rules' `RunEvidence`
(`Window.evidence`), and the cause an alert message gives when the run has no stored finding
yet is the rules' own finding on that window (perfweb_recommender.causes) — the same
`Finding`, title and catalogue fix text as the findings list — else the condition's own
diagnosis with its numbers.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfweb_recommender.evidence import RunEvidence, StepSample
from perfweb_recommender.evidence import Series as EvidenceSeries
from perfweb_recommender.rules.base import Finding
from perfweb_recommender.thresholds import (
    GIB,
    HELD_MEMORY_BYTES,
    LOW_UTILIZATION_PCT,
    THROTTLE_MASK,
    THROTTLE_REASONS,
)

# Share of the window the samples must span before a verdict is given (a run that started
# 1 minute ago has not been "below 30% for 5 minutes").
MIN_COVERAGE = 0.8
# A GPU counts as "holding memory" when it holds at least HELD_MEMORY_BYTES throughout the
# window; throttling is any of THROTTLE_REASONS (both shared with the rules).
# Step-time baseline: the median of the run's first steps, after its warm-up steps.
BASELINE_WARMUP_STEPS = 5
BASELINE_STEPS = 50
MIN_CURRENT_STEPS = 3


@dataclass(frozen=True)
class Series:
    """One series' samples in a window, in time order (its device and name are its key)."""

    t: Sequence[float]
    v: Sequence[float]

    def span(self) -> float:
        """Seconds from the first sample to the last."""
        return max(self.t) - min(self.t) if self.t else 0.0


@dataclass(frozen=True)
class Window:
    """What an alert evaluates for one run: series over [now - window, now], keyed by
    (device, metric name), plus the step-time baseline and the run's stored findings (the
    recommender's `Finding`, as diagnosis ranked them)."""

    now: float
    window_s: float
    series: Mapping[tuple[str, str], Series]
    steps_total: int = 0
    last_step_at: float | None = None
    baseline_steps: Sequence[float] = ()
    finding: Finding | None = None
    regression: Finding | None = None  # run.regression: slower than the job's baseline run

    def by_device(self, name: str, prefix: str = "gpu:") -> dict[str, Series]:
        """{device: series} of one metric, devices starting with `prefix`, non-empty only."""
        return {
            device: series
            for (device, metric), series in sorted(self.series.items())
            if metric == name and device.startswith(prefix) and series.t
        }

    def covered(self, series: Series) -> bool:
        """Whether the samples span enough of the window for a verdict."""
        return series.span() >= MIN_COVERAGE * self.window_s

    def evidence(self) -> RunEvidence:
        """The window as the rules read a run: its series, and each rank's steps from its
        `step.duration` and `step.data_wait` samples (one pair per step, same times)."""
        series = [
            EvidenceSeries(device=device, name=name, t=list(s.t), v=list(s.v))
            for (device, name), s in sorted(self.series.items())
            if s.t
        ]
        steps: list[StepSample] = []
        for (device, name), durations in sorted(self.series.items()):
            rank = _RANK_DEVICE.match(device)
            if name != "step.duration" or rank is None:
                continue
            waits = self.series.get((device, "step.data_wait"))
            wait_at = dict(zip(waits.t, waits.v, strict=True)) if waits else {}
            steps += [
                StepSample(
                    rank=int(rank[1]), index=i, t=t, duration_s=d, data_wait_s=wait_at.get(t)
                )
                for i, (t, d) in enumerate(zip(durations.t, durations.v, strict=True))
            ]
        return RunEvidence(series=series, steps=steps)


_RANK_DEVICE = re.compile(r"^rank:(\d+)")


@dataclass(frozen=True)
class Verdict:
    """A condition's answer, with the sentence and the numbers that decided it."""

    holds: bool | None  # None: cannot tell yet; the alert keeps its state
    summary: str
    numbers: dict[str, Any] = field(default_factory=dict)


def unknown(why: str) -> Verdict:
    """Cannot tell yet, and why."""
    return Verdict(holds=None, summary=why)


@dataclass(frozen=True)
class Condition:
    """One kind of alert rule: its labels, defaults, the FIXES.md id it reports under, the
    metrics it reads and its pure evaluation function."""

    kind: str
    label: str
    threshold_label: str  # what the threshold means, with its unit
    window_label: str
    default_threshold: float
    default_window_minutes: float
    fix_id: str  # FIXES.md id this condition reports under
    metrics: tuple[str, ...]  # series the selectors must read over the window
    evaluate: Callable[[float, Window], Verdict]

    def describe(self, *, threshold: float, window_minutes: float) -> str:
        """The rule in words: "GPU utilisation below 30% for 5 min"."""
        return self.label.format(threshold=_num(threshold), window=_num(window_minutes))


CONDITIONS: dict[str, Condition] = {}


def condition(**kwargs: Any) -> Callable[[Callable[[float, Window], Verdict]], Any]:
    """Register a condition function under `kind` (the other Condition fields as keywords)."""

    def register(fn: Callable[[float, Window], Verdict]) -> Callable[..., Verdict]:
        CONDITIONS[kwargs["kind"]] = Condition(evaluate=fn, **kwargs)
        return fn

    return register


def _num(value: float) -> str:
    return f"{value:g}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _minutes(window: Window) -> str:
    return _num(round(window.window_s / 60, 1))


@condition(
    kind="low_utilization",
    label="GPU utilisation below {threshold}% for {window} min",
    threshold_label="utilisation below (%)",
    window_label="for (minutes)",
    default_threshold=LOW_UTILIZATION_PCT,
    default_window_minutes=5,
    fix_id="gpu.low_utilization",
    metrics=("gpu.utilization",),
)
def low_utilization(threshold: float, window: Window) -> Verdict:
    """What: the run's GPUs averaged less than `threshold` % busy over the window.
    Why: GPU hours are paid for whether the kernels run or not.
    Fix: follow the top finding (input pipeline, host syncs, launch overhead…)."""
    gpus = window.by_device("gpu.utilization")
    if not gpus:
        return unknown("no GPU utilisation samples in the window")
    if not all(window.covered(series) for series in gpus.values()):
        return unknown("the samples do not cover the window yet")
    per_gpu = {device: round(_mean(series.v), 1) for device, series in gpus.items()}
    mean = round(_mean(list(per_gpu.values())), 1)
    return Verdict(
        holds=mean < threshold,
        summary=f"GPU utilisation averaged {_num(mean)}% over the last {_minutes(window)} min "
        f"on {len(gpus)} GPU(s) (threshold {_num(threshold)}%)",
        numbers={"mean_utilization": mean, "per_gpu": per_gpu, "threshold": threshold},
    )


@condition(
    kind="idle_memory_held",
    label="GPU holding memory with utilisation below {threshold}% for {window} min",
    threshold_label="utilisation below (%)",
    window_label="for (minutes)",
    default_threshold=5,
    default_window_minutes=10,
    fix_id="gpu.idle_memory_held",
    metrics=("gpu.utilization", "gpu.memory_used", "gpu.process_memory"),
)
def idle_memory_held(threshold: float, window: Window) -> Verdict:
    """What: a GPU of the run stays near idle while memory stays allocated on it.
    Why: nobody else can use that GPU; the job is likely hung, waiting, or finished but alive.
    Fix: release the GPU or end the job."""
    util = window.by_device("gpu.utilization")
    memory = window.by_device("gpu.process_memory") or window.by_device("gpu.memory_used")
    shared = sorted(set(util) & set(memory))
    if not shared:
        return unknown("no GPU utilisation and memory samples in the window")
    if not all(window.covered(util[d]) and window.covered(memory[d]) for d in shared):
        return unknown("the samples do not cover the window yet")
    idle = {
        device: {
            "utilization": round(_mean(util[device].v), 1),
            "memory_gib": round(min(memory[device].v) / GIB, 1),
        }
        for device in shared
        if _mean(util[device].v) < threshold and min(memory[device].v) >= HELD_MEMORY_BYTES
    }
    if not idle:
        return Verdict(holds=False, summary="every GPU is busy or has released its memory")
    worst = max(idle, key=lambda d: idle[d]["memory_gib"])
    return Verdict(
        holds=True,
        summary=f"{worst} averaged {_num(idle[worst]['utilization'])}% utilisation over the "
        f"last {_minutes(window)} min while holding {_num(idle[worst]['memory_gib'])} GiB"
        + (f" ({len(idle)} GPUs like this)" if len(idle) > 1 else ""),
        numbers={"idle_gpus": idle, "threshold": threshold},
    )


@condition(
    kind="stalled",
    label="no step progress for {window} min",
    threshold_label="(unused)",
    window_label="for (minutes)",
    default_threshold=0,
    default_window_minutes=10,
    fix_id="gpu.idle_memory_held",
    metrics=(),  # reads the run's last step time instead of samples
)
def stalled(threshold: float, window: Window) -> Verdict:
    """What: the run is alive (its agent reports) but no training step ended in the window.
    Why: a hung collective, a deadlocked DataLoader or an endless eval holds the GPUs.
    Fix: look at the process (py-spy dump), then at the last steps' timeline."""
    if window.steps_total == 0 or window.last_step_at is None:
        return unknown("the run has recorded no step yet")
    quiet_min = _num(round((window.now - window.last_step_at) / 60, 1))
    if window.now - window.last_step_at < window.window_s:
        return Verdict(holds=False, summary=f"last step {quiet_min} min ago")
    return Verdict(
        holds=True,
        summary=f"no step progress for {_minutes(window)} min (last step {quiet_min} min ago, "
        f"{window.steps_total} steps so far)",
        numbers={"steps_total": window.steps_total, "last_step_at": window.last_step_at},
    )


@condition(
    kind="throttling",
    label="GPU throttled (thermal / power) over {threshold}% of {window} min",
    threshold_label="share of samples throttled (%)",
    window_label="over (minutes)",
    default_threshold=50,
    default_window_minutes=5,
    fix_id="gpu.throttling",
    metrics=("gpu.throttle_reasons",),
)
def throttling(threshold: float, window: Window) -> Verdict:
    """What: NVML reports thermal or power throttling on a GPU for a share of the window.
    Why: clocks drop, so every kernel runs slower than the hardware can.
    Fix: check cooling, the power limit and the node."""
    gpus = window.by_device("gpu.throttle_reasons")
    if not gpus:
        return unknown("no throttle reason samples in the window")
    if not all(window.covered(series) for series in gpus.values()):
        return unknown("the samples do not cover the window yet")
    shares: dict[str, float] = {}
    reasons: set[str] = set()
    for device, series in gpus.items():
        flagged = [int(v) & THROTTLE_MASK for v in series.v]
        shares[device] = round(100 * sum(1 for f in flagged if f) / len(flagged), 1)
        reasons |= {name for bit, name in THROTTLE_REASONS.items() for f in flagged if f & bit}
    worst = max(shares, key=lambda d: shares[d])
    return Verdict(
        holds=shares[worst] >= threshold,
        summary=f"{worst} throttled {_num(shares[worst])}% of the last {_minutes(window)} min"
        + (f" ({', '.join(sorted(reasons))})" if reasons else ""),
        numbers={"throttled_share": shares, "reasons": sorted(reasons), "threshold": threshold},
    )


@condition(
    kind="step_regression",
    label="step time {threshold}% worse than the run's baseline over {window} min",
    threshold_label="worse than baseline by (%)",
    window_label="over (minutes)",
    default_threshold=25,
    default_window_minutes=5,
    fix_id="gpu.low_utilization",
    metrics=("step.duration",),
)
def step_regression(threshold: float, window: Window) -> Verdict:
    """What: the median step time over the window exceeds the run's own early median, or the
    run is slower than its job's baseline run beyond the noise (a `run.regression` finding).
    Why: the same job got slower — a noisy neighbour, throttling, a leak, a data change.
    Fix: compare the timeline before and after the slowdown; see the top finding."""
    within = _step_regression_within_run(threshold, window)
    if within.holds or window.regression is None:
        return within
    regression = window.regression
    return Verdict(
        holds=True,
        summary=regression.title,
        numbers={"fix_id": regression.id, "threshold": threshold, "vs_baseline_run": True},
    )


def _step_regression_within_run(threshold: float, window: Window) -> Verdict:
    baseline = list(window.baseline_steps)
    if len(baseline) < BASELINE_STEPS // 5:
        return unknown("the run has too few steps for a baseline")
    current = [
        v
        for (device, name), s in window.series.items()
        if name == "step.duration" and device.startswith("rank:")
        for v in s.v
    ]
    if len(current) < MIN_CURRENT_STEPS:
        return unknown("too few steps in the window")
    base, now = statistics.median(baseline), statistics.median(current)
    worse = round(100 * (now / base - 1), 1) if base > 0 else 0.0
    return Verdict(
        holds=worse >= threshold,
        summary=f"median step {now:.3g} s over the last {_minutes(window)} min vs "
        f"{base:.3g} s baseline ({worse:+g}%)",
        numbers={
            "median_step_s": now,
            "baseline_step_s": base,
            "worse_pct": worse,
            "threshold": threshold,
        },
    )


@condition(
    kind="finding_gain",
    label="a finding with estimated gain of at least {threshold}%",
    threshold_label="estimated gain at least (%)",
    window_label="(unused)",
    default_threshold=20,
    default_window_minutes=0,
    fix_id="gpu.low_utilization",
    metrics=(),
)
def finding_gain(threshold: float, window: Window) -> Verdict:
    """What: the recommender's top finding for the run promises at least `threshold` %.
    Why: a large, known fix is waiting. Fix: the finding's own fix.
    (A hook: it fires once server-side findings with gains are stored.)"""
    top = window.finding
    gain = None if top is None else finding_gain_share(top)
    if top is None or gain is None:
        return Verdict(holds=False, summary="no finding with an estimated gain")
    gain = round(100 * gain, 1)
    return Verdict(
        holds=gain >= threshold,
        summary=f"{top.id}: {top.title} (estimated gain {_num(gain)}%)",
        numbers={"fix_id": top.id, "gain_pct": gain, "threshold": threshold},
    )


def evaluate(*, kind: str, threshold: float, window: Window) -> Verdict:
    """The verdict of the condition `kind` at `threshold` over `window`."""
    return CONDITIONS[kind].evaluate(threshold, window)


def finding_gain_share(found: Finding) -> float | None:
    """The share of step time a finding promises: measured by a job, else estimated; None
    when it claims none (a symptom, whose gain belongs to its root cause)."""
    gain = found.measured_gain if found.measured_gain is not None else found.estimated_gain
    return gain if gain > 0 else None
