"""The ranked fixes panel on the run page (registered with perfweb.pages.panels)."""

from __future__ import annotations

import re
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from perfweb.diagnostics import selectors
from perfweb.diagnostics.estimate import try_fix_refusals
from perfweb.diagnostics.fix_knobs import fix_knobs
from perfweb.diagnostics.formatting import format_value, pct
from perfweb.diagnostics.gains import measured_gains_for_run
from perfweb.diagnostics.models import Finding, RunDiagnosis
from perfweb.diagnostics.workload import run_workload_coverage
from perfweb.pages.panels import Panel
from perfweb.runs.models import Run
from perfweb_contract.api import RUN_FINDINGS_PATH
from perfweb_contract.knobs import format_knobs
from perfweb_recommender.coverage import OBSERVED

RISK_LABELS = {
    "data-path": "data path",
    "operator": "operator",
    "distributed": "distributed",
    "model": "model",
    "system": "system",
}


def findings_panel(*, run: Run, user: Any) -> Panel:
    """Shown for every run the user may see (the dashboard has already scoped `run`)."""
    measured = measured_gains_for_run(run=run)
    state = selectors.diagnosis_state(run=run)
    coverage = run_workload_coverage(run=run)
    traces = selectors.traces_json(run=run)
    fixes, host_conditions = selectors.findings_split_for_run(run=run)
    refusals = try_fix_refusals(run=run, gains={f.rule_id: f.estimated_gain for f in fixes})
    return Panel(
        template="diagnostics/_findings.html",
        context={
            "run_id": run.run_id,
            "api": RUN_FINDINGS_PATH.format(run_id=run.run_id),
            "live": _live(run=run, state=state),
            "diagnosed_ts": _timestamp(state),
            "findings": [
                finding_view(
                    finding=f,
                    verification=measured.get(f.rule_id),
                    try_refused=refusals.get(f.rule_id, ""),
                )
                for f in fixes
            ],
            # Apart from the fixes: about the machine, not the script (never ranked with them).
            "host_conditions": [
                finding_view(finding=f, verification=None) for f in host_conditions
            ],
            "diagnosis": state,
            "traces": traces,
            "coverage": coverage,
            "examined": coverage.verdict == OBSERVED,
            "running": run.status == Run.RUNNING,
            "no_findings": coverage.no_findings_text(traces=bool(traces)),
        },
    )


def _timestamp(state: RunDiagnosis | None) -> str:
    """As the findings API writes `diagnosed_at` (the browser compares the two as text)."""
    return repr(state.diagnosed_at.timestamp()) if state and state.diagnosed_at else ""


def _live(*, run: Run, state: RunDiagnosis | None) -> bool:
    """Whether a newer diagnosis may still come: the run is running, or has data its last
    diagnosis has not seen (it ended a moment ago)."""
    if run.status == Run.RUNNING:
        return True
    return state is None or state.data_seen_at is None or state.data_seen_at < run.last_seen_at


def finding_view(
    *, finding: Finding, verification: dict[str, Any] | None, try_refused: str = ""
) -> dict[str, Any]:
    fix = finding.fix or {}
    return {
        "rank": finding.rank,
        "id": finding.rule_id,
        "title": finding.title,
        "risk": finding.risk,
        "risk_label": RISK_LABELS.get(finding.risk, finding.risk),
        "gain_pct": pct(finding.estimated_gain),
        "gain_basis": finding.gain_basis,
        "confidence_pct": pct(finding.confidence, digits=0),
        "evidence": [_evidence_row(item) for item in finding.evidence],
        "fix_text": fix.get("text", ""),
        "snippet": fix.get("snippet", ""),
        "knob": format_knobs(fix_knobs(fix)),  # the value the button queues
        "try_refused": try_refused,  # why no button: the estimate is below what a job resolves
        "doc": finding.doc,
        "doc_html": doc_html(finding.doc),
        "verification": _verification(verification),
    }


_CODE = re.compile(r"`([^`\n]+)`")


def doc_html(doc: str) -> SafeString:
    """A rule's What / Why / Fix text as HTML: escaped, one paragraph per blank-line-separated
    block, `code` in backticks as <code>."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", doc or "") if p.strip()]
    html = "".join(
        "<p>" + _CODE.sub(r"<code>\1</code>", str(escape(" ".join(p.split())))) + "</p>"
        for p in paragraphs
    )
    return mark_safe(html)  # noqa: S308 - built from escaped text only


def _verification(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    if not raw:
        return None
    return {
        "status": raw["status"],
        "gain_pct": pct(raw["measured_gain"]),
        "speedup": f"{raw['speedup']:.2f}×",
        "ci": f"{raw['ci_low']:.2f}–{raw['ci_high']:.2f}×",
        "job_id": raw["job_id"],
        "reason": raw.get("reason", ""),
    }


def _evidence_row(item: dict[str, Any]) -> dict[str, str]:
    return {
        "label": str(item.get("label", "")),
        "value": format_value(item.get("value"), str(item.get("unit", ""))),
        "source": str(item.get("source", "")),
    }
