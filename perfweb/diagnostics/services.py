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
from django.db import IntegrityError, transaction
from django.utils import timezone

from perfweb.diagnostics import conf, quotas, uploads
from perfweb.diagnostics.claims import claim_kept
from perfweb.diagnostics.comparison import regression_for
from perfweb.diagnostics.evidence import run_evidence
from perfweb.diagnostics.models import Finding, RunDiagnosis, Trace
from perfweb.diagnostics.schemas import TraceChunk
from perfweb.diagnostics.summaries import summary_is_current, summary_to_json
from perfweb.projects.models import Project
from perfweb.runs.models import Run, RunProcess
from perfweb.runs.services import RunNotFound, run_heartbeat
from perfweb_recommender.analysis.summary import summarize
from perfweb_recommender.analysis.trace_tables import trace_tables
from perfweb_recommender.api import analyze_evidence
from perfweb_recommender.errors import InputError
from perfweb_recommender.rules.base import Finding as RuleFinding
from perfweb_recommender.rules.base import rank_findings
from perfweb_recommender.trace.loader import load_trace

log = logging.getLogger(__name__)


def claim_ttl() -> timedelta:
    """A diagnosis claim's life without renewal; a live diagnosis renews it (see
    `claims.claim_kept`), so a killed worker's claim runs out within this, not within the task's
    time limit."""
    return timedelta(seconds=conf.diagnose_claim_ttl_s())


class TraceTooLarge(Exception):
    """The trace is over the server's cap (PERFWEB_TRACE_MAX_BYTES)."""


class TraceConflict(Exception):
    """The agent already stored a different trace under that name."""


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
    quotas.partial_quota_check(project=project, chunk=chunk)
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
                run=run, agent_id=chunk.agent_id, name=chunk.name, rank=rank, path=path,
                size=chunk.size, sha256=chunk.sha256,
            )  # fmt: skip
            transaction.on_commit(lambda: diagnosis_enqueue(run_pk=run.pk))
    except IntegrityError:  # the same last chunk arrived twice at once: the other one won
        return Trace.objects.get(run=run, agent_id=chunk.agent_id, name=chunk.name)
    return trace


def diagnosis_enqueue(*, run_pk: int) -> None:
    from perfweb.diagnostics.tasks import diagnose_run_task

    diagnose_run_task.delay(run_pk)


def trace_analyse(*, trace: Trace) -> Trace:
    """The recommender's analysis of a stored trace, cached on its row (once per trace; a
    trace it cannot read keeps the error, shown on the run page, and is not tried again)."""
    if summary_is_current(trace.summary) or trace.analysis_error:
        return trace
    path = conf.trace_dir() / trace.path
    try:
        loaded = load_trace(path, fallback_rank=trace.rank or 0)
        if trace.rank is not None:
            loaded.rank = trace.rank
        tables = trace_tables(path)
        trace.summary = summary_to_json(summarize(loaded), tables=tables)
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
            report = analyze_evidence(run_evidence(run=run), run_id=run.run_id)
            findings = findings_store(run=run, findings=_with_cross_run(run, report.findings))
    except Exception as error:
        RunDiagnosis.objects.filter(id=state.id).update(claimed_until=None, error=str(error)[:500])
        raise
    RunDiagnosis.objects.filter(id=state.id).update(
        claimed_until=None, diagnosed_at=state.started_at, data_seen_at=seen_at, error=""
    )
    return findings


def _with_cross_run(run: Run, findings: list[RuleFinding]) -> list[RuleFinding]:
    """The rules' findings plus `run.regression` against the job's baseline run, ranked."""
    regression = regression_for(run=run)
    return rank_findings([*findings, regression]) if regression else findings


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
