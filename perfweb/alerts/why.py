"""The message says why: the run's top diagnosis at the moment the alert changed.

For the performance conditions (low utilisation, step-time regression, a large finding) the
recommender's top stored finding for the run is the why (perfweb.diagnostics'
`finding_brief_for_run`). Without one — and for the system conditions (idle GPU holding
memory, stalled, throttling), whose cause is not a code fix — the why is derived from the
metric window the rule was evaluated on: input bound when the loop waited on the DataLoader
for a large share of step time, otherwise the condition's own diagnosis with its numbers.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps

from perfweb.alerts.conditions import CONDITIONS, Finding, RunWindow, Verdict
from recommender.rules.cross_run import REGRESSION_ID
from recommender.thresholds import DATA_WAIT_SHARE_MIN

# FIXES.md: the fix text of the ids an alert can report under.
FIX_TEXT = {
    "gpu.low_utilization": "follow the root-cause findings on the run page",
    "gpu.idle_memory_held": "release the GPU or finish the job",
    "gpu.throttling": "check cooling, the power limit and the node",
    "dataloader.num_workers": "raise DataLoader num_workers (bounded by cores per rank), "
    "persistent_workers=True, prefetch_factor",
}
# Conditions whose cause is outside the script: the condition itself is the diagnosis.
SYSTEM_KINDS = frozenset({"idle_memory_held", "stalled", "throttling"})


def top_finding_for_run(
    *, run: Any, window: RunWindow | None = None, verdict: Verdict | None = None, kind: str = ""
) -> Finding | None:
    """The run's top stored finding, else one derived from the evaluated window."""
    if kind not in SYSTEM_KINDS:
        stored = _stored_top_finding(run=run)
        if stored is not None:
            return stored
    if window is None:
        return None
    if kind in SYSTEM_KINDS:
        return _from_condition(kind=kind, window=window, verdict=verdict)
    return _input_bound(window) or _from_condition(kind=kind, window=window, verdict=verdict)


def stored_regression(*, run: Any) -> Finding | None:
    """The run's stored `run.regression` finding (slower than its job's baseline run)."""
    return _stored_top_finding(run=run, rule_id=REGRESSION_ID)


def as_payload(finding: Finding | None) -> dict[str, Any] | None:
    if finding is None:
        return None
    return {
        "fix_id": finding.fix_id,
        "title": finding.title,
        "evidence": finding.evidence,
        "gain_pct": None if finding.gain is None else round(100 * finding.gain, 1),
        "fix": finding.fix or FIX_TEXT.get(finding.fix_id, ""),
    }


def _stored_top_finding(*, run: Any, rule_id: str | None = None) -> Finding | None:
    if not apps.is_installed("perfweb.diagnostics"):
        return None
    from perfweb.diagnostics.selectors import finding_brief_for_run

    brief = finding_brief_for_run(run=run, rule_id=rule_id)
    if brief is None:
        return None
    gain = brief.get("gain")
    return Finding(
        fix_id=str(brief["fix_id"]),
        title=str(brief["title"]),
        gain=float(gain) if gain is not None else None,
        evidence=str(brief.get("evidence", ""))[:300],
        fix=str(brief.get("fix", "")),
    )


def _input_bound(window: RunWindow) -> Finding | None:
    duration = sum(sum(s.v) for (d, n), s in window.series.items() if n == "step.duration")
    waiting = sum(sum(s.v) for (d, n), s in window.series.items() if n == "step.data_wait")
    if duration <= 0 or waiting / duration < DATA_WAIT_SHARE_MIN:  # not input bound
        return None
    share = waiting / duration
    return Finding(
        fix_id="dataloader.num_workers",
        title=f"input bound: the loop waited on the DataLoader for {100 * share:.0f}% of step time",
        gain=share,
        evidence=f"step.data_wait / step.duration over the last {window.window_s / 60:g} min",
    )


def _from_condition(*, kind: str, window: RunWindow, verdict: Verdict | None) -> Finding | None:
    if kind not in CONDITIONS or verdict is None or not verdict.holds:
        return None
    numbers = verdict.numbers
    gain = None  # an idle share is no promise of speed-up; only a slowdown is recoverable
    if "worse_pct" in numbers:
        gain = numbers["worse_pct"] / (100 + numbers["worse_pct"])
    title = verdict.summary
    if "mean_utilization" in numbers:
        idle = 100 - numbers["mean_utilization"]
        title = f"GPU idle {idle:.0f}% of the last {window.window_s / 60:g} min"
    elif kind == "idle_memory_held":
        title = "idle GPU holding memory: the job is hung, waiting, or done but still alive"
    elif kind == "stalled":
        title = "no training progress: a hung collective, a deadlocked DataLoader, or a long eval"
    elif kind == "throttling":
        title = "clocks throttled: every kernel runs slower than the hardware can"
    return Finding(
        fix_id=CONDITIONS[kind].fix_id,
        title=title,
        gain=gain,
        evidence="derived from the alert's metric window",
    )
