"""The ingest hot path: one batch stored once, in one short transaction.

Everything that needs no database (validation, packing the chunks) happens before the
transaction opens; inside it, a handful of plain SQL statements that both SQLite and
PostgreSQL understand (ON CONFLICT, RETURNING), because a batch arrives every few seconds
from every rank of every run and the ORM's per-query cost would dominate.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from perfweb.projects.models import Project
from perfweb.runs.models import BatchReceipt, Run, RunProcess
from perfweb.runs.schemas import BatchRequest
from perfweb.runs.services import RunNotFound, devices_upsert, run_facts_merge
from perfweb.series.services import chunk_rows, chunks_insert, chunks_prepare, series_known

RUNS = Run._meta.db_table
RECEIPTS = BatchReceipt._meta.db_table
PROCESSES = RunProcess._meta.db_table


@dataclass(frozen=True)
class BatchResult:
    duplicate: bool
    samples: int
    steps: int


def batch_store(*, project: Project, request: BatchRequest) -> BatchResult:
    """Stores the batch once: its receipt and its data commit together or not at all."""
    chunks = chunks_prepare(samples=request.metrics + request.steps)
    run = Run(
        id=_run_pk(project=project, run_id=request.run_id), run_id=request.run_id, project=project
    )
    # Read before the write transaction: on SQLite every ingest request queues for the one
    # write lock, so it is held for the writes only (new series are created under it).
    known = series_known(run=run)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.features.has_select_for_update:  # SQLite's IMMEDIATE begin locks all
            cursor.execute(f"SELECT id FROM {RUNS} WHERE id = %s FOR UPDATE", [run.id])
        cursor.execute(
            f"INSERT INTO {RECEIPTS} (run_id, agent_id, seq, samples, received_at)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, agent_id, seq) DO NOTHING",
            [run.id, request.agent_id, request.seq, request.sample_count, now],
        )
        if cursor.rowcount != 1:
            return BatchResult(duplicate=True, samples=0, steps=0)
        chunks_insert(rows=chunk_rows(run=run, chunks=chunks, known=known))
        steps = _process_seen(cursor, run=run, request=request, now=now)
        cursor.execute(
            f"UPDATE {RUNS} SET last_seen_at = %s,"
            " step_count = CASE WHEN step_count > %s THEN step_count ELSE %s END,"
            " status = CASE WHEN status = %s THEN %s ELSE status END WHERE id = %s",
            [now, steps, steps, Run.LOST, Run.RUNNING, run.id],
        )
        if request.facts:
            run_facts_merge(run_pk=run.id, facts=request.facts)
        devices_upsert(run=run, devices=request.devices)
    return BatchResult(duplicate=False, samples=request.sample_count, steps=request.step_count)


def _run_pk(*, project: Project, run_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {RUNS} WHERE run_id = %s AND project_id = %s", [run_id, project.id]
        )
        row = cursor.fetchone()
    if row is None:
        raise RunNotFound(run_id)
    return int(row[0])


def _process_seen(cursor: object, *, run: Run, request: BatchRequest, now: object) -> int:
    """Marks the agent seen and adds its steps; returns its step count so far."""
    cursor.execute(  # type: ignore[attr-defined]
        f"UPDATE {PROCESSES} SET last_seen_at = %s, step_count = step_count + %s,"
        " dropped = CASE WHEN dropped > %s THEN dropped ELSE %s END"
        " WHERE run_id = %s AND agent_id = %s RETURNING step_count",
        [now, request.step_count, request.dropped, request.dropped, run.id, request.agent_id],
    )
    row = cursor.fetchone()  # type: ignore[attr-defined]
    if row is not None:
        return int(row[0])
    RunProcess.objects.create(  # an agent whose start we never saw
        run=run,
        agent_id=request.agent_id,
        role="worker",
        started_at=timezone.now(),
        last_seen_at=timezone.now(),
        step_count=request.step_count,
        dropped=request.dropped,
    )
    return request.step_count
