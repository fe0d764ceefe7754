"""Reads: a run's ranked findings (for the page, the read API and alerts' "why"), and the
runs a diagnosis is due for."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from perfweb.diagnostics import conf
from perfweb.diagnostics.fix_knobs import fix_knobs
from perfweb.diagnostics.models import Finding, FixVerification, RunDiagnosis, Trace
from perfweb.diagnostics.summaries import summary_is_current
from perfweb.diagnostics.workload import run_workload_coverage
from perfweb.runs.models import Run
from perfweb_contract.api import RUN_TRACE_PATH
from perfweb_recommender.rules.base import HOST_CONDITION_RISK, Evidence, Fix
from perfweb_recommender.rules.base import Finding as RuleFinding

RECENT = timedelta(days=1)  # the sweep looks at runs seen within this
SWEEP_LIMIT = 200  # runs enqueued per beat tick at most


def findings_for_run(*, run: Run) -> list[Finding]:
    """Best first: every stored finding, the workload's fixes and the host conditions."""
    return list(Finding.objects.filter(run=run).order_by("rank", "rule_id"))


def findings_split_for_run(*, run: Run) -> tuple[list[Finding], list[Finding]]:
    """(the workload's fixes, the host conditions), each best first: the split the run page
    and the read API show (the recommender's `split_findings`, on stored rows)."""
    stored = findings_for_run(run=run)
    return (
        [f for f in stored if f.risk != HOST_CONDITION_RISK],
        [f for f in stored if f.risk == HOST_CONDITION_RISK],
    )


def finding_top_for_run(*, run: Run) -> Finding | None:
    """The run's best-ranked stored fix of the workload (what an alert's "why" should say;
    a host condition is no fix), or None."""
    fixes = Finding.objects.filter(run=run).exclude(risk=HOST_CONDITION_RISK)
    return fixes.order_by("rank", "rule_id").first()


def finding_for_run(*, run: Run, rule_id: str | None = None) -> RuleFinding | None:
    """The top stored finding (or the one of `rule_id`) as the recommender's `Finding`, the
    one an alert message quotes (perfweb.alerts.why), or None."""
    if rule_id is None:
        top = finding_top_for_run(run=run)
    else:
        top = Finding.objects.filter(run=run, rule_id=rule_id).first()
    if top is None:
        return None
    fix = top.fix or {}
    return RuleFinding(
        id=top.rule_id,
        title=top.title,
        risk=top.risk,
        confidence=top.confidence,
        estimated_gain=top.estimated_gain,
        gain_basis=top.gain_basis,
        evidence=[
            Evidence(
                label=str(item.get("label", "")),
                value=item.get("value", ""),
                unit=str(item.get("unit", "")),
                source=str(item.get("source", "")),
            )
            for item in top.evidence
        ],
        fix=Fix(text=fix.get("text", ""), snippet=fix.get("snippet", ""), knobs=fix_knobs(fix)),
        doc=top.doc,
        measured_gain=top.measured_gain,
    )


def finding_json(*, finding: Finding) -> dict[str, Any]:
    """A finding as the read API gives it (the recommender's `findings[]` names)."""
    return {
        "id": finding.rule_id,
        "rank": finding.rank,
        "title": finding.title,
        "risk": finding.risk,
        "confidence": finding.confidence,
        "estimated_gain": finding.estimated_gain,
        "gain_basis": finding.gain_basis,
        "measured_gain": finding.measured_gain,
        "score": finding.score,
        "evidence": finding.evidence,
        "fix": finding.fix,
        "doc": finding.doc,
        "updated_at": finding.updated_at.timestamp(),
    }


def run_findings_json(*, run: Run) -> dict[str, Any]:
    """`GET /api/v1/runs/<run_id>/findings`."""
    state = RunDiagnosis.objects.filter(run=run).first()
    diagnosed = state.diagnosed_at if state else None
    fixes, host_conditions = findings_split_for_run(run=run)
    return {
        "run": run.run_id,
        "diagnosed_at": diagnosed.timestamp() if diagnosed else None,
        "findings": [finding_json(finding=f) for f in fixes],
        "host_conditions": [finding_json(finding=f) for f in host_conditions],
        "traces": traces_json(run=run),
        "coverage": run_workload_coverage(run=run).as_json(),  # what "no findings" rests on
    }


def trace_get(*, run: Run, trace_id: int) -> Trace | None:
    """One of `run`'s stored traces (the caller has scoped `run` to the user's projects)."""
    return Trace.objects.filter(run=run, id=trace_id).first()


def trace_download_url(*, run: Run, trace: Trace) -> str:
    return RUN_TRACE_PATH.format(run_id=run.run_id, trace_id=trace.id)


def trace_tables_of(trace: Trace) -> dict[str, Any] | None:
    """The stored operator/kernel tables (perfweb_recommender.analysis.trace_tables), or None."""
    stored = trace.summary or {}
    return stored.get("tables") if summary_is_current(stored) else None


def traces_json(*, run: Run) -> list[dict[str, Any]]:
    rows = Trace.objects.filter(run=run).order_by("created_at", "id")
    return [
        {
            "id": t.id,
            "download": trace_download_url(run=run, trace=t),
            "name": t.name,
            "agent_id": t.agent_id,
            "rank": t.rank,
            "size": t.size,
            "created_at": t.created_at.timestamp(),
            "analysed": t.summary is not None,
            "error": t.analysis_error or None,
        }
        for t in rows
    ]


def diagnosis_state(*, run: Run) -> RunDiagnosis | None:
    return RunDiagnosis.objects.filter(run=run).first()


def runs_due_for_diagnosis(
    *, now: datetime | None = None, limit: int = SWEEP_LIMIT, run_pk: int | None = None
) -> list[int]:
    """Primary keys of runs with data their last diagnosis has not seen: never diagnosed,
    newer samples (an ended run at once, a running one once its interval has passed), a
    trace stored or a fix verified since. Runs whose diagnosis is claimed right now are left
    alone. The projects take turns: each project's first due run (the longest waiting)
    comes before any project's second, so one project's many runs cannot keep another's
    out of the `limit`. With `run_pk`, only that run (is it still due?)."""
    now = now or timezone.now()
    interval_ago = now - timedelta(seconds=conf.diagnose_interval_s())
    new_trace = Trace.objects.filter(
        run=OuterRef("pk"), created_at__gt=OuterRef("diagnosis__diagnosed_at")
    )
    new_verification = FixVerification.objects.filter(
        run=OuterRef("pk"), updated_at__gt=OuterRef("diagnosis__diagnosed_at")
    )
    due = (
        Q(diagnosis__isnull=True)
        | Q(diagnosis__diagnosed_at__isnull=True)
        | Q(Exists(new_trace))
        | Q(Exists(new_verification))
        | (
            Q(last_seen_at__gt=F("diagnosis__data_seen_at"))
            & (~Q(status=Run.RUNNING) | Q(diagnosis__diagnosed_at__lte=interval_ago))
        )
    )
    runs = Run.objects.filter(id=run_pk) if run_pk is not None else Run.objects.all()
    runs = (
        runs.filter(last_seen_at__gte=now - RECENT)
        .exclude(diagnosis__claimed_until__gt=now)
        .filter(due)
        .annotate(
            turn=Window(RowNumber(), partition_by=F("project_id"), order_by=F("last_seen_at").asc())
        )
        .order_by("turn", "last_seen_at")
    )
    return list(runs.values_list("id", flat=True)[:limit])
