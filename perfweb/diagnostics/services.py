"""Writes: a trace chunk stored (and the trace once complete), a trace analysed, a run
diagnosed and its findings stored.

Every function here is safe to run twice: a chunk is kept once, a complete trace is one row,
a diagnosis updates the run's findings in place (unique per run and rule id) and removes
the ones that no longer fire.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
from celery import signature
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from perfweb.diagnostics import conf, quotas, uploads
from perfweb.diagnostics.claims import claim_kept
from perfweb.diagnostics.comparison import regression_for
from perfweb.diagnostics.evidence import run_evidence
from perfweb.diagnostics.models import Finding, RunDiagnosis, Trace
from perfweb.diagnostics.schemas import TraceChunk
from perfweb.diagnostics.summaries import summary_is_current, summary_to_json
from perfweb.errors import ClientError
from perfweb.projects.models import Project
from perfweb.runs.models import Run, RunProcess
from perfweb.runs.services import RunNotFound, run_heartbeat
from perfweb_recommender.analysis.summary import summarize
from perfweb_recommender.analysis.trace_tables import tables_fit, trace_tables
from perfweb_recommender.api import analyze_evidence
from perfweb_recommender.errors import InputError
from perfweb_recommender.replay import replay_evidence
from perfweb_recommender.replay.plan import plan_for
from perfweb_recommender.rules.base import Finding as RuleFinding
from perfweb_recommender.rules.base import rank_findings
from perfweb_recommender.trace.loader import load_trace

log = logging.getLogger(__name__)
# The diagnosis task, by name: tasks.py imports this module to run it, so this one sends it by
# its registered name (apps.py registers it; Celery resolves the name to the task itself, so
# eager mode and routing are the task's).
DIAGNOSE_TASK = "perfweb.diagnostics.tasks.diagnose_run_task"


def claim_ttl() -> timedelta:
    """A diagnosis claim's life without renewal; a live diagnosis renews it (see
    `claims.claim_kept`), so a killed worker's claim runs out within this, not within the task's
    time limit."""
    return timedelta(seconds=conf.diagnose_claim_ttl_s())


class TraceTooLarge(ClientError):
    """The trace is over the server's cap (PERFWEB_TRACE_MAX_BYTES)."""

    status = 413


class TraceConflict(ClientError):
    """The agent already stored a different trace under that name."""

    status = 409


@dataclass(frozen=True)
class ChunkResult:
    complete: bool
    trace: Trace | None = None


def trace_chunk_store(*, project: Project, chunk: TraceChunk) -> ChunkResult:
    """Keeps one chunk; once all have arrived, the checked file and its Trace row.

    Raises TraceTooLarge and quotas.QuotaExceeded (413), RunNotFound (404), TraceConflict
    (409) and uploads.BadTrace (400) before storing anything of this request.
    """
    cap = conf.trace_max_bytes()
    if chunk.size > cap:
        raise TraceTooLarge(f"the trace is {chunk.size} bytes, over the server's cap of {cap}")
    run = Run.objects.filter(run_id=chunk.run_id, project=project).first()
    if run is None:
        raise RunNotFound(chunk.run_id)
    stored = Trace.objects.filter(run=run, agent_id=chunk.agent_id, name=chunk.name).first()
    if stored is not None:
        if stored.sha256 != chunk.sha256:
            raise TraceConflict(f"trace {chunk.name} is already stored with another sha256")
        return ChunkResult(complete=True, trace=stored)  # a repeated chunk of a stored trace
    quotas.upload_quota_check(project=project, run=run, chunk=chunk)
    if not uploads.chunk_stage(chunk):
        run_heartbeat(project=project, run_id=run.run_id, agent_id=chunk.agent_id)
        return ChunkResult(complete=False)
    path = uploads.chunks_join(chunk)
    trace = _trace_create(run=run, chunk=chunk, path=str(path.relative_to(conf.trace_dir())))
    uploads.staging_drop(run_id=run.run_id, agent_id=chunk.agent_id, name=chunk.name)
    run_heartbeat(project=project, run_id=run.run_id, agent_id=chunk.agent_id)
    return ChunkResult(complete=True, trace=trace)


def _trace_create(*, run: Run, chunk: TraceChunk, path: str) -> Trace:
    rank = (
        RunProcess.objects.filter(run=run, agent_id=chunk.agent_id)
        .values_list("rank", flat=True)
        .first()
    )
    try:
        with transaction.atomic():
            trace = Trace.objects.create(
                run=run,
                agent_id=chunk.agent_id,
                name=chunk.name,
                rank=rank,
                path=path,
                size=chunk.size,
                sha256=chunk.sha256,
            )
            transaction.on_commit(lambda: diagnosis_enqueue(run_pk=run.pk))
    except IntegrityError:  # the same last chunk arrived twice at once: the other one won
        return Trace.objects.get(run=run, agent_id=chunk.agent_id, name=chunk.name)
    return trace


def diagnosis_enqueue(*, run_pk: int, only_if_due: bool = False) -> bool:
    """Sends one diagnosis message for the run, unless one is pending already (requests
    coalesce: a flood of traces is one diagnosis) or the run's project has
    PERFWEB_DIAGNOSE_PROJECT_PENDING pending (one project's flood cannot fill the queue
    ahead of everyone else's); True when sent. A request not sent is not lost: what it asked
    for (a trace, new data, a verified fix) makes the run due for beat's sweep
    (selectors.runs_due_for_diagnosis), and a pending message diagnoses a due run."""
    project_id = Run.objects.filter(id=run_pk).values_list("project_id", flat=True).first()
    if project_id is None:  # deleted meanwhile
        return False
    now = timezone.now()
    expired = now - timedelta(seconds=conf.diagnose_queued_ttl_s())
    state, _ = RunDiagnosis.objects.get_or_create(run_id=run_pk)
    pending = RunDiagnosis.objects.filter(run__project_id=project_id, queued_at__gt=expired)
    if pending.exclude(id=state.id).count() >= conf.diagnose_project_pending():
        return False
    marked = (
        RunDiagnosis.objects.filter(id=state.id)
        .filter(Q(queued_at__isnull=True) | Q(queued_at__lte=expired))
        .update(queued_at=now)
    )
    if marked != 1:
        return False  # one is pending: it will see this request's data
    signature(DIAGNOSE_TASK, args=(run_pk,), kwargs={"only_if_due": only_if_due}).delay()
    return True


def diagnosis_taken(*, run_pk: int) -> None:
    """A worker took the run's pending message: later requests send a new one (the data
    they bring may arrive after this diagnosis has read the run's)."""
    RunDiagnosis.objects.filter(run_id=run_pk, queued_at__isnull=False).update(queued_at=None)


def trace_analyse(*, trace: Trace) -> Trace:
    """The recommender's analysis of a stored trace, cached on its row (once per trace; a
    trace it cannot read keeps the error, shown on the run page, and is not tried again)."""
    if summary_is_current(trace.summary) or trace.analysis_error:
        return trace
    path = conf.trace_dir() / trace.path
    try:
        budget = conf.diagnosis_memory_mb()
        # The tables first: each reader stays inside the budget, not both at once.
        tables = trace_tables(path) if tables_fit(path, budget) else None
        loaded = load_trace(path, fallback_rank=trace.rank or 0, memory_budget_mb=budget)
        if trace.rank is not None:
            loaded.rank = trace.rank
        summary = summarize(loaded)
        summary.replay_plan = plan_for(summary, path)
        if tables is None:
            skipped = f"operator and kernel tables not built (over the {budget} MB budget)"
            summary.degraded = f"{summary.degraded}; {skipped}" if summary.degraded else skipped
        trace.summary = summary_to_json(summary, tables=tables)
        trace.analysis_error = ""
    except InputError as error:
        trace.summary, trace.analysis_error = None, str(error)[:500]
    except Exception as error:  # noqa: BLE001 - a trace the analysis fails on stays failed
        # (time limit, memory, a bug): retrying it would stall every diagnosis of the run.
        log.exception("analysis of trace %s failed", trace.id)
        trace.summary, trace.analysis_error = None, f"analysis failed: {error!r}"[:500]
    trace.analysed_at = timezone.now()
    trace.save(update_fields=["summary", "analysis_error", "analysed_at"])
    return trace


def diagnosis_claim(*, run: Run) -> RunDiagnosis | None:
    """The run's diagnosis row, claimed until claim_ttl() from now; None if another worker
    holds an unexpired claim."""
    now = timezone.now()
    state, _ = RunDiagnosis.objects.get_or_create(run=run)
    claimed = (
        RunDiagnosis.objects.filter(id=state.id)
        .exclude(claimed_until__gt=now)
        .update(claimed_until=now + claim_ttl(), started_at=now)
    )
    if claimed != 1:
        return None
    state.refresh_from_db()
    return state


def diagnose_run(*, run: Run) -> list[Finding] | None:
    """Diagnoses `run` from its stored data and stores the ranked findings; None when
    another worker is diagnosing it right now (that one will see the same data)."""
    state = diagnosis_claim(run=run)
    if state is None:
        return None
    seen_at = Run.objects.values_list("last_seen_at", flat=True).get(id=run.id)
    try:
        with claim_kept(state=state, ttl=claim_ttl):
            for trace in Trace.objects.filter(run=run, analysis_error=""):
                trace_analyse(trace=trace)
            evidence = run_evidence(run=run)
            replay_evidence(evidence)  # the run's shapes both ways, in a helper process
            report = analyze_evidence(evidence, run_id=run.run_id)
            findings = findings_store(
                run=run, findings=_with_cross_run(run, [*report.findings, *report.host_conditions])
            )
    except Exception as error:
        RunDiagnosis.objects.filter(id=state.id).update(claimed_until=None, error=str(error)[:500])
        raise
    RunDiagnosis.objects.filter(id=state.id).update(
        claimed_until=None, diagnosed_at=state.started_at, data_seen_at=seen_at, error=""
    )
    return findings


def _with_cross_run(run: Run, findings: list[RuleFinding]) -> list[RuleFinding]:
    """The rules' findings plus `run.regression` against the job's baseline run, ranked (the
    workload's fixes first, then the host conditions)."""
    regression = regression_for(run=run)
    return rank_findings([*findings, regression] if regression else findings)


def findings_store(*, run: Run, findings: list[RuleFinding]) -> list[Finding]:
    """Upserts the ranked findings (unique per run and rule id) and removes the run's
    findings that no longer fire, in one transaction. Unchanged rows are not written."""
    with transaction.atomic():
        existing = {f.rule_id: f for f in Finding.objects.select_for_update().filter(run=run)}
        stored = []
        for rank, found in enumerate(findings, start=1):
            values = _finding_values(found, rank=rank)
            row = existing.pop(found.id, None)
            if row is None:
                row = Finding.objects.create(run=run, rule_id=found.id, **values)
            elif any(getattr(row, key) != value for key, value in values.items()):
                for key, value in values.items():
                    setattr(row, key, value)
                row.save()
            stored.append(row)
        Finding.objects.filter(id__in=[row.id for row in existing.values()]).delete()
    return stored


def _finding_values(found: RuleFinding, *, rank: int) -> dict[str, Any]:
    data = orjson.loads(orjson.dumps(found.as_json(), option=orjson.OPT_SERIALIZE_NUMPY))
    return {
        "rank": rank,
        "score": data["score"],
        "title": found.title[:300],
        "risk": found.risk,
        "confidence": data["confidence"],
        "estimated_gain": data["estimated_gain"],
        "gain_basis": found.gain_basis,
        "measured_gain": found.measured_gain,
        "evidence": data["evidence"],
        "fix": data["fix"],
        "doc": found.doc,
    }
