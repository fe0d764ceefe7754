"""The message says why: the run's top diagnosis at the moment the alert changed.

For the performance conditions (low utilisation, step-time regression, a large finding) the
recommender's top stored finding for the run is the why (perfweb.diagnostics'
`finding_for_run`). Without one — and for the system conditions (idle GPU holding memory,
stalled, throttling), whose cause is not a code fix — the recommender derives it from the
metric window the rule was evaluated on (perfweb_recommender.causes: the rules' own finding on that
window, else the condition's diagnosis with the catalogue's fix text). Either way it is the
recommender's `Finding`; this module only reads the stored one and words the payload.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps

from perfweb.diagnostics.formatting import evidence_text
from perfweb_recommender.causes import SYSTEM_KINDS, window_cause
from perfweb_recommender.conditions import Verdict, Window, finding_gain_share
from perfweb_recommender.rules import REGISTRY
from perfweb_recommender.rules.base import Finding
from perfweb_recommender.rules.cross_run import REGRESSION_ID

EVIDENCE_CHARS = 300  # the payload's evidence sentence, at most


def top_finding_for_run(
    *, run: Any, window: Window | None = None, verdict: Verdict | None = None, kind: str = ""
) -> Finding | None:
    """The run's top stored finding, else one derived from the evaluated window."""
    if kind not in SYSTEM_KINDS:
        stored = _stored_finding(run=run)
        if stored is not None:
            return stored
    if window is None:
        return None
    return window_cause(kind=kind, window=window, verdict=verdict)


def stored_regression(*, run: Any) -> Finding | None:
    """The run's stored `run.regression` finding (slower than its job's baseline run)."""
    return _stored_finding(run=run, rule_id=REGRESSION_ID)


def as_payload(finding: Finding | None) -> dict[str, Any] | None:
    """The payload's `why` (docs/webhooks.md): id, title, evidence, gain in % or null, fix."""
    if finding is None:
        return None
    gain = finding_gain_share(finding)
    registered = REGISTRY.get(finding.id)
    evidence = "; ".join(evidence_text(item.as_json()) for item in finding.evidence[:3])
    return {
        "fix_id": finding.id,
        "title": finding.title,
        "evidence": evidence[:EVIDENCE_CHARS],
        "gain_pct": None if gain is None else round(100 * gain, 1),
        "fix": finding.fix.text or (registered.fix_text if registered else ""),
    }


def _stored_finding(*, run: Any, rule_id: str | None = None) -> Finding | None:
    if not apps.is_installed("perfweb.diagnostics"):
        return None
    from perfweb.diagnostics.selectors import finding_for_run

    return finding_for_run(run=run, rule_id=rule_id)
