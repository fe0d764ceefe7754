"""Why an alert's condition holds, when the run has no stored finding to quote yet.

For the performance conditions (low utilisation, step-time regression, a large finding) the
cause is the rules' own finding on the alert's window (`diagnose(window.evidence())`): an
input-bound loop is `dataloader.num_workers` with the very title, gain and fix the findings
list gives. For the system conditions (idle GPU holding memory, stalled, throttling), whose
cause is not a code fix, and when no rule finds a gain, it is the condition's own diagnosis:
its FIXES.md id, a title from its numbers, and the catalogue's fix text for that id.
"""

from __future__ import annotations

from perfweb_recommender.conditions import CONDITIONS, Verdict, Window
from perfweb_recommender.rules import REGISTRY, diagnose
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rank_tier

# Conditions whose cause is outside the script: the condition itself is the diagnosis.
SYSTEM_KINDS = frozenset({"idle_memory_held", "stalled", "throttling"})
CONDITION_CONFIDENCE = 0.8  # the condition held on measured samples; its cause is a reading


def window_cause(*, kind: str, window: Window, verdict: Verdict | None) -> Finding | None:
    """The cause an alert message gives for `verdict` on `window` (None when it does not
    hold): the rules' top finding with a gain to claim, else the condition's own."""
    if kind not in SYSTEM_KINDS:
        ranked = [f for f in diagnose(window.evidence()) if rank_tier(f) < 3]
        if ranked:
            return ranked[0]
    return condition_finding(kind=kind, window=window, verdict=verdict)


def condition_finding(*, kind: str, window: Window, verdict: Verdict | None) -> Finding | None:
    """The condition's own diagnosis: its id, a title from its numbers, the catalogue's fix."""
    if kind not in CONDITIONS or verdict is None or not verdict.holds:
        return None
    numbers = verdict.numbers
    # An idle share is no promise of speed-up; only a slowdown is recoverable.
    gain, basis = 0.0, "a symptom: the gain belongs to its root-cause finding"
    if "worse_pct" in numbers:
        gain = numbers["worse_pct"] / (100 + numbers["worse_pct"])
        basis = "the slowdown against the run's own baseline steps"
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
    fix_id = CONDITIONS[kind].fix_id
    return finding(
        fix_id,
        title=title,
        confidence=CONDITION_CONFIDENCE,
        gain=gain,
        basis=basis,
        evidence=[Evidence("the alert's window", verdict.summary, "", "metrics")],
        fix=Fix(text=REGISTRY[fix_id].fix_text),
    )
