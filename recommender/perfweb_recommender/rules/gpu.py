"""The `gpu.*` rules."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.thresholds import HELD_MEMORY_BYTES, LOW_UTILIZATION_PCT, THROTTLE_REASONS

LOW_UTILIZATION_WINDOW_S = 60.0  # sustained for at least this long
IDLE_UTILIZATION_PCT = 1.0  # "about 0%" GPU utilisation
IDLE_WINDOW_S = 300.0  # for at least five minutes
THROTTLE_SHARE_MIN = 0.1  # fraction of samples with a throttle reason set


def _longest_run(points: list[tuple[float, float]], condition: float, below: bool) -> float:
    """Longest stretch of time (s) over which every sample is below/above `condition`."""
    longest, start = 0.0, None
    for t, v in points:
        ok = v < condition if below else v >= condition
        if ok and start is None:
            start = t
        elif not ok:
            start = None
        if start is not None:
            longest = max(longest, t - start)
    return longest


@rule("gpu.low_utilization", risk="system")
def gpu_low_utilization(evidence: RunEvidence) -> Finding | None:
    """What: a GPU stays below 30% busy for a sustained window (a minute or more).

    Why: an idle accelerator is the most expensive waste in the job; the cause is usually one
    of the data-path or operator findings.

    Fix: follow the root-cause findings ranked above; alert the run's owner.
    """
    for device in evidence.devices_of("gpu.utilization"):
        points = evidence.points("gpu.utilization", device)
        window = _longest_run(points, LOW_UTILIZATION_PCT, below=True)
        if window < LOW_UTILIZATION_WINDOW_S:
            continue
        mean = sum(v for _, v in points) / len(points)
        return finding(
            "gpu.low_utilization",
            title=f"{device} below {LOW_UTILIZATION_PCT:.0f}% busy for {window:.0f} s",
            confidence=0.8,
            gain=0.0,
            basis="a symptom: the gain belongs to its root-cause finding",
            evidence=[
                Evidence("longest low-utilisation window", window, "s", "metrics"),
                Evidence("mean utilisation", mean, "%", "metrics"),
            ],
            fix=Fix(text="Fix the root causes listed above; alert the owner if it persists."),
        )
    return None


@rule("gpu.idle_memory_held", risk="system")
def gpu_idle_memory_held(evidence: RunEvidence) -> Finding | None:
    """What: the job holds GPU memory while the GPU does nothing, for minutes.

    Why: nobody else can use that GPU; a finished notebook or a hung job keeps it reserved.

    Fix: release the GPU (end the process) or finish the job.
    """
    for device in evidence.devices_of("gpu.utilization"):
        util = evidence.points("gpu.utilization", device)
        memory = evidence.values("gpu.process_memory", device) or evidence.values(
            "gpu.memory_used", device
        )
        if not memory or max(memory) < HELD_MEMORY_BYTES:
            continue
        window = _longest_run(util, IDLE_UTILIZATION_PCT, below=True)
        if window < IDLE_WINDOW_S:
            continue
        return finding(
            "gpu.idle_memory_held",
            title=f"{device} idle for {window / 60:.0f} min holding {max(memory) / 2**30:.1f} GiB",
            confidence=0.8,
            gain=0.0,
            basis="a held, idle GPU: cost, not step time",
            evidence=[
                Evidence("idle window", window, "s", "metrics"),
                Evidence("memory held", max(memory), "bytes", "metrics"),
            ],
            fix=Fix(text="End the process or let the job finish; it is holding a GPU idle."),
        )
    return None


@rule("gpu.throttling", risk="system")
def gpu_throttling(evidence: RunEvidence) -> Finding | None:
    """What: the GPU reports thermal, power-cap or hardware slowdown throttling.

    Why: the driver lowers clocks; every kernel runs slower whatever the script does.

    Fix: check cooling, the power limit and the node's health.
    """
    reasons = [int(v) for v in evidence.values("gpu.throttle_reasons")]
    if not reasons:
        return None
    throttled = [r for r in reasons if any(r & bit for bit in THROTTLE_REASONS)]
    share = len(throttled) / len(reasons)
    if share < THROTTLE_SHARE_MIN:
        return None
    names = sorted({name for r in throttled for bit, name in THROTTLE_REASONS.items() if r & bit})
    return finding(
        "gpu.throttling",
        title=f"GPU throttled ({', '.join(names)}) in {share:.0%} of samples",
        confidence=0.8,
        gain=0.0,
        basis="outside the script: no step-time estimate",
        evidence=[
            Evidence("samples throttled", share, "fraction", "metrics"),
            Evidence("reasons", ", ".join(names), "", "metrics (NVML)"),
        ],
        fix=Fix(text="Check the node's cooling, power limit and hardware health."),
    )
